/* Token, throttle and failure log of the daemon; see auth.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "auth.h"
#include "log.h"

#define SOURCES 1024             /* addresses remembered; the oldest goes */
#define DELAY_MIN_MS 100
#define DELAY_MAX_MS 2000
#define FORGET_MS 60000          /* failures this old are forgiven */
#define LOG_WINDOW_MS 10000

typedef struct source {
    char ip[48];                 /* "" for a free slot */
    uint32_t fails;
    uint64_t last_fail_ms;
    uint64_t next_ms;            /* no attempt is checked before then */
} source;

struct psd_auth {
    char token[PSW_AUTH_TOKEN_MAX + 1];
    size_t len;
    source src[SOURCES];
    uint64_t failures;
    /* The failure log: a window opens with a logged line; later failures
     * in it are counted and summed up when it ends. */
    uint64_t window_ms;          /* 0: no window open */
    uint64_t held;               /* failures not logged in the window */
    char last[300];              /* the last of them: "peer: why" */
};

psd_auth *psd_auth_new(const char *token, size_t len)
{
    if (len > PSW_AUTH_TOKEN_MAX)
        return NULL;
    psd_auth *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    memcpy(a->token, token, len);
    a->len = len;
    return a;
}

void psd_auth_free(psd_auth *a)
{
    if (!a)
        return;
    psw_wipe(a->token, sizeof a->token);
    free(a);
}

int psd_auth_on(const psd_auth *a)
{
    return a && a->len > 0;
}

int psd_auth_same(const psd_auth *a, const char *token, size_t len)
{
    size_t have = a ? a->len : 0;
    return have == len && (len == 0 || sodium_memcmp(a->token, token, len) == 0);
}

int psd_auth_check(const psd_auth *a, const psw_transcript *t,
                   const void *proof, size_t n)
{
    return psw_auth_verify(a->token, a->len, PSW_ROLE_CLIENT, t, proof, n);
}

void psd_auth_prove(const psd_auth *a, const psw_transcript *t,
                    uint8_t out[PSW_PROOF_LEN])
{
    psw_auth_proof(a->token, a->len, PSW_ROLE_SERVER, t, out);
}

static source *find(psd_auth *a, const char *ip)
{
    for (int i = 0; i < SOURCES; i++)
        if (a->src[i].ip[0] && strcmp(a->src[i].ip, ip) == 0)
            return &a->src[i];
    return NULL;
}

/* A slot for ip: a free one, or the one whose last failure is oldest. */
static source *take(psd_auth *a, const char *ip)
{
    source *s = find(a, ip);
    if (s)
        return s;
    s = &a->src[0];
    for (int i = 0; i < SOURCES && s->ip[0]; i++)
        if (!a->src[i].ip[0] || a->src[i].last_fail_ms < s->last_fail_ms)
            s = &a->src[i];
    memset(s, 0, sizeof *s);
    snprintf(s->ip, sizeof s->ip, "%s", ip);
    return s;
}

static uint64_t delay(uint32_t fails)
{
    uint64_t d = DELAY_MIN_MS;
    for (uint32_t i = 1; i < fails && d < DELAY_MAX_MS; i++)
        d *= 2;
    return d < DELAY_MAX_MS ? d : DELAY_MAX_MS;
}

uint64_t psd_auth_admit(psd_auth *a, const char *ip, uint64_t now_ms)
{
    source *s = find(a, ip);
    if (!s || s->fails == 0)
        return 0;
    if (now_ms - s->last_fail_ms >= FORGET_MS) {
        memset(s, 0, sizeof *s);
        return 0;
    }
    if (now_ms >= s->next_ms) {
        s->next_ms = now_ms + delay(s->fails);
        return 0;
    }
    return s->next_ms;
}

void psd_auth_failed(psd_auth *a, const char *ip, const char *peer,
                     const char *why, int guess, uint64_t now_ms)
{
    a->failures++;
    if (guess) {
        source *s = take(a, ip);
        s->fails++;
        s->last_fail_ms = now_ms;
        if (s->next_ms < now_ms + delay(s->fails))
            s->next_ms = now_ms + delay(s->fails);
    }
    psd_auth_tick(a, now_ms);
    if (a->window_ms) {
        a->held++;
        snprintf(a->last, sizeof a->last, "%s: %s", peer, why);
        return;
    }
    psd_warn("authentication failed for %s: %s", peer, why);
    a->window_ms = now_ms ? now_ms : 1;
}

void psd_auth_succeeded(psd_auth *a, const char *ip)
{
    source *s = find(a, ip);
    if (s)
        memset(s, 0, sizeof *s);
}

void psd_auth_tick(psd_auth *a, uint64_t now_ms)
{
    if (!a || !a->window_ms || now_ms - a->window_ms < LOG_WINDOW_MS)
        return;
    if (a->held)
        psd_warn("... and %llu more like this in %d s (the last: %s)",
                 (unsigned long long)a->held, LOG_WINDOW_MS / 1000, a->last);
    a->window_ms = 0;
    a->held = 0;
}

uint64_t psd_auth_failures(const psd_auth *a)
{
    return a ? a->failures : 0;
}
