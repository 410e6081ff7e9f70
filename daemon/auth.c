/* Token, throttle and failure log of the daemon; see auth.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "auth.h"
#include "log.h"

#define SOURCES 1024             /* addresses remembered; the oldest goes */
#define KNOWN 4096               /* (address, client id) pairs remembered */
#define KNOWN_PER_ADDR 256
#define DELAY_MIN_MS 100
#define DELAY_MAX_MS 2000
#define FORGET_MS 60000          /* failures this old are forgiven */
#define LOG_WINDOW_MS 10000

/* Failures and the next turn of one line of attempts: an address's, or a
 * known client's at its address. */
typedef struct lane {
    uint32_t fails;
    uint64_t last_fail_ms;
    uint64_t next_ms;            /* no attempt is checked before then */
} lane;

typedef struct source {
    char ip[48];                 /* "" for a free slot */
    lane l;
} source;

/* A client that authenticated from an address: its attempts from there
 * take turns of their own (see auth.h). Kept while it has connections;
 * once it has none, the one gone longest is forgotten first when room is
 * needed, so one-shot clients (psctl) make way before trainers. */
typedef struct known {
    char ip[48];                 /* "" for a free slot */
    uint64_t id;
    uint32_t live;               /* its authenticated connections open */
    uint64_t gone_ms;            /* when the last of them closed */
    lane l;
} known;

struct psd_auth {
    char token[PSW_AUTH_TOKEN_MAX + 1];
    size_t len;
    source src[SOURCES];
    known kn[KNOWN];
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
        if (!a->src[i].ip[0] || a->src[i].l.last_fail_ms < s->l.last_fail_ms)
            s = &a->src[i];
    memset(s, 0, sizeof *s);
    snprintf(s->ip, sizeof s->ip, "%s", ip);
    return s;
}

static known *find_known(psd_auth *a, const char *ip, uint64_t id)
{
    for (int i = 0; i < KNOWN; i++)
        if (a->kn[i].id == id && a->kn[i].ip[0] &&
            strcmp(a->kn[i].ip, ip) == 0)
            return &a->kn[i];
    return NULL;
}

/* A slot for a client new at ip: a free one, else the one without
 * connections gone longest (at ip when ip has KNOWN_PER_ADDR already);
 * NULL when every candidate is connected: then it is not remembered. */
static known *take_known(psd_auth *a, const char *ip)
{
    int at_ip = 0;
    for (int i = 0; i < KNOWN; i++)
        if (a->kn[i].ip[0] && strcmp(a->kn[i].ip, ip) == 0)
            at_ip++;
    known *k = NULL;
    for (int i = 0; i < KNOWN; i++) {
        known *o = &a->kn[i];
        if (at_ip < KNOWN_PER_ADDR && !o->ip[0]) {
            k = o;
            break;
        }
        if (!o->ip[0] || o->live ||
            (at_ip >= KNOWN_PER_ADDR && strcmp(o->ip, ip) != 0))
            continue;
        if (!k || o->gone_ms < k->gone_ms)
            k = o;
    }
    if (k) {
        memset(k, 0, sizeof *k);
        snprintf(k->ip, sizeof k->ip, "%s", ip);
    }
    return k;
}

static uint64_t delay(uint32_t fails)
{
    uint64_t d = DELAY_MIN_MS;
    for (uint32_t i = 1; i < fails && d < DELAY_MAX_MS; i++)
        d *= 2;
    return d < DELAY_MAX_MS ? d : DELAY_MAX_MS;
}

/* 0 when an attempt in l may be checked now (the turn is taken), else
 * the time of the next turn. */
static uint64_t lane_admit(lane *l, uint64_t now_ms)
{
    if (l->fails == 0)
        return 0;
    if (now_ms - l->last_fail_ms >= FORGET_MS) {
        memset(l, 0, sizeof *l);
        return 0;
    }
    if (now_ms >= l->next_ms) {
        l->next_ms = now_ms + delay(l->fails);
        return 0;
    }
    return l->next_ms;
}

static void lane_fail(lane *l, uint64_t now_ms)
{
    l->fails++;
    l->last_fail_ms = now_ms;
    if (l->next_ms < now_ms + delay(l->fails))
        l->next_ms = now_ms + delay(l->fails);
}

uint64_t psd_auth_admit(psd_auth *a, const char *ip, uint64_t client_id,
                        uint64_t now_ms)
{
    known *k = find_known(a, ip, client_id);
    if (k)
        return lane_admit(&k->l, now_ms);
    source *s = find(a, ip);
    return s ? lane_admit(&s->l, now_ms) : 0;
}

void psd_auth_failed(psd_auth *a, const char *ip, uint64_t client_id,
                     const char *peer, const char *why, int guess,
                     uint64_t now_ms)
{
    a->failures++;
    if (guess) {
        known *k = find_known(a, ip, client_id);
        if (k)
            lane_fail(&k->l, now_ms);
        lane_fail(&take(a, ip)->l, now_ms);
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

int psd_auth_succeeded(psd_auth *a, const char *ip, uint64_t client_id)
{
    known *k = find_known(a, ip, client_id);
    if (k) {
        /* Its own lane only: the address's failures are others' too. */
        memset(&k->l, 0, sizeof k->l);
    } else {
        /* A client new here steps the address's delay back one, so that
         * a host's workers starting after a mistyped token get in soon;
         * cleared, each success gave a guesser there a fresh 100 ms
         * ramp (0.6 to 0.7 guesses a second beside a psctl run every
         * second, against 0.5: a trial). */
        source *s = find(a, ip);
        if (s && s->l.fails > 1)
            s->l.fails--;
        else if (s)
            memset(s, 0, sizeof *s);
        k = take_known(a, ip);
        if (!k)
            return 0;
        k->id = client_id;
    }
    k->live++;
    return 1;
}

void psd_auth_closed(psd_auth *a, const char *ip, uint64_t client_id,
                     uint64_t now_ms)
{
    known *k = find_known(a, ip, client_id);
    if (k && k->live) {
        k->live--;
        k->gone_ms = now_ms;
    }
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
