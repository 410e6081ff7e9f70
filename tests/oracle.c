/* The counter oracle; see oracle.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

uint64_t oracle_key(int i)
{
    return (uint64_t)i * 1000003u + 1;
}

void *oracle_run(void *arg)
{
    oracle_job *j = arg;
    ps_client *c;
    int rc = ps_open(&c, j->spec, &j->opt);
    if (rc) {
        snprintf(j->last_error, sizeof j->last_error, "ps_open: %s",
                 ps_strerror(rc));
        j->failed = j->pushes;
        return NULL;
    }
    int t = ps_table(c, ORACLE_TABLE, NULL);
    int nk = j->nkeys > 0 ? j->nkeys : ORACLE_KEYS;
    uint64_t *keys = malloc((size_t)nk * sizeof *keys);
    float *ones = malloc((size_t)nk * sizeof *ones);
    for (int k = 0; keys && ones && k < nk; k++) {
        keys[k] = oracle_key(k);
        ones[k] = 1.0f;
    }
    ps_ts *win = keys && ones ? calloc((size_t)j->inflight, sizeof *win)
                              : NULL;
    if (!win) {
        snprintf(j->last_error, sizeof j->last_error, "out of memory");
        j->failed = j->pushes;
    }
    for (int i = 0; win && i < j->pushes + j->inflight; i++) {
        int slot = i % j->inflight;
        if (win[slot] > 0) {
            rc = ps_wait(c, win[slot]);
            if (rc == PS_OK)
                j->acked++;
            else {
                j->failed++;
                snprintf(j->last_error, sizeof j->last_error, "%s: %s",
                         ps_strerror(rc), ps_last_error(c));
            }
            win[slot] = 0;
        }
        if (i < j->pushes && j->stop && *j->stop) {
            j->pushes = i;       /* drain the window, then return */
        }
        if (i < j->pushes) {
            win[slot] = ps_push(c, t, keys, (size_t)nk, ones, NULL, NULL);
            if (win[slot] < 0) {
                j->failed++;
                snprintf(j->last_error, sizeof j->last_error, "ps_push: %s",
                         ps_strerror((int)win[slot]));
                win[slot] = 0;
            }
        }
    }
    free(win);
    free(keys);
    free(ones);
    ps_close(c);
    return NULL;
}

void oracle_run_many(const char *spec, const ps_options *opt, int jobs,
                     int pushes, int inflight, int *acked, int *failed)
{
    oracle_run_until(spec, opt, jobs, pushes, inflight, NULL, acked, failed);
}

void oracle_run_until(const char *spec, const ps_options *opt, int jobs,
                      int pushes, int inflight, atomic_int *stop,
                      int *acked, int *failed)
{
    pthread_t th[8];
    oracle_job j[8];
    *acked = *failed = 0;
    if (jobs > 8)
        jobs = 8;
    for (int i = 0; i < jobs; i++) {
        j[i] = (oracle_job){ .spec = spec, .opt = *opt, .pushes = pushes,
                             .inflight = inflight, .stop = stop };
        pthread_create(&th[i], NULL, oracle_run, &j[i]);
    }
    for (int i = 0; i < jobs; i++) {
        pthread_join(th[i], NULL);
        *acked += j[i].acked;
        *failed += j[i].failed;
        if (j[i].failed)
            fprintf(stderr, "# client %d: %d failed, last: %s\n", i,
                    j[i].failed, j[i].last_error);
    }
}

int oracle_check(const char *spec, int lo, int hi, char *why, size_t len)
{
    return oracle_check_n(spec, NULL, ORACLE_KEYS, lo, hi, why, len);
}

int oracle_check_n(const char *spec, const ps_options *opt, int nkeys,
                   int lo, int hi, char *why, size_t len)
{
    ps_client *c;
    ps_options o;
    if (opt)
        o = *opt;
    else
        ps_options_init(&o);
    int rc = ps_open(&c, spec, &o);
    if (rc) {
        snprintf(why, len, "ps_open: %s", ps_strerror(rc));
        return -1;
    }
    int t = ps_table(c, ORACLE_TABLE, NULL);
    uint64_t *keys = malloc((size_t)nkeys * sizeof *keys);
    float *out = malloc((size_t)nkeys * sizeof *out);
    if (!keys || !out) {
        snprintf(why, len, "out of memory");
        free(keys);
        free(out);
        ps_close(c);
        return -1;
    }
    for (int k = 0; k < nkeys; k++)
        keys[k] = oracle_key(k);
    rc = ps_wait(c, ps_pull(c, t, keys, (size_t)nkeys, out, NULL, NULL));
    if (rc) {
        snprintf(why, len, "pull: %s: %s", ps_strerror(rc), ps_last_error(c));
        ps_close(c);
        free(keys);
        free(out);
        return -1;
    }
    ps_close(c);
    int bad = 0;
    for (int k = 0; k < nkeys && !bad; k++)
        if (out[k] < (float)lo || out[k] > (float)hi) {
            snprintf(why, len, "key %llu: got %.0f, want %d..%d",
                     (unsigned long long)keys[k], (double)out[k], lo, hi);
            bad = 1;
        }
    free(keys);
    free(out);
    return bad ? -1 : 0;
}
