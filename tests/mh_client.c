/* The client side of the multi-host test (tests/test_multihost.sh): one
 * process per role, run inside the workers' network namespace.
 *
 *   mh_client count SERVERS KEYS PUSHES   push +1 to KEYS keys PUSHES
 *                                         times (the counter oracle)
 *   mh_client check SERVERS KEYS WANT     every key holds exactly WANT
 *   mh_client bsp SERVERS WORKER WORKERS ROUNDS KEYS
 *                                         a bsp worker: each round pushes
 *                                         WORKER+1 to every key, clocks,
 *                                         and checks the pull is exact
 *   mh_client open SERVERS STATUS         ps_open must return STATUS
 *                                         (a PS_E* name, or OK)
 *   mh_client move SERVERS KEYS FLAG      push +1 to KEYS keys, say
 *                                         "ready", wait for the file
 *                                         FLAG (meanwhile a node moves
 *                                         to another address), push +1
 *                                         again: both must succeed
 *   mh_client partition SERVERS KEYS FLAG the same, FLAG coming once a
 *                                         node's link is down: the
 *                                         second push is sent into the
 *                                         partition and must succeed
 *                                         once the link is back
 *
 * The token comes the usual way: $PSD_AUTH_TOKEN, or the ini when
 * SERVERS is its path. Prints one line saying what happened; exits 0
 * when it is what was wanted. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oracle.h"
#include "psclient.h"

static const char *const names[] = {
    "OK", "PS_EINVAL", "PS_ENOMEM", "PS_ECONN", "PS_ETIMEDOUT", "PS_EPROTO",
    "PS_EAUTH", "PS_ENOTABLE", "PS_EKEY", "PS_ETOOBIG", "PS_ECLOSED",
    "PS_ESERVER", "PS_ENOTOWNER", "PS_EBUSY",
};

static const char *name_of(int rc)
{
    return rc <= 0 && -rc < (int)(sizeof names / sizeof names[0])
               ? names[-rc] : "?";
}

static int count(const char *servers, int keys, int pushes)
{
    oracle_job j = { .spec = servers, .pushes = pushes, .inflight = 8,
                     .nkeys = keys };
    ps_options_init(&j.opt);
    oracle_run(&j);
    printf("count: %d pushes of +1 to %d keys acknowledged, %d failed%s%s\n",
           j.acked, keys, j.failed, j.failed ? ": " : "", j.last_error);
    return j.acked == pushes && j.failed == 0 ? 0 : 1;
}

static int check(const char *servers, int keys, int want)
{
    char why[300];
    if (oracle_check_n(servers, NULL, keys, want, want, why, sizeof why)) {
        printf("check: %s\n", why);
        return 1;
    }
    printf("check: all %d keys hold exactly %d\n", keys, want);
    return 0;
}

static int bsp(const char *servers, int worker, int workers, int rounds,
               int nkeys)
{
    ps_client *c;
    ps_options o;
    ps_options_init(&o);
    o.worker = worker;
    int rc = ps_open(&c, servers, &o);
    if (rc) {
        printf("bsp worker %d: ps_open: %s\n", worker, ps_strerror(rc));
        return 1;
    }
    int t = ps_table(c, "bsp", NULL);
    uint64_t *keys = malloc((size_t)nkeys * sizeof *keys);
    float *g = malloc((size_t)nkeys * sizeof *g);
    float *out = malloc((size_t)nkeys * sizeof *out);
    if (t < 0 || !keys || !g || !out) {
        printf("bsp worker %d: no table bsp or out of memory\n", worker);
        return 1;
    }
    for (int k = 0; k < nkeys; k++) {
        keys[k] = oracle_key(k);
        g[k] = (float)(worker + 1);
    }
    /* Every clock applies the sum of all workers' pushes once: after
     * round r every key holds r * (1 + 2 + ... + workers). */
    int per_round = workers * (workers + 1) / 2, bad = 0;
    for (int r = 1; r <= rounds && !bad; r++) {
        rc = ps_wait(c, ps_push(c, t, keys, (size_t)nkeys, g, NULL, NULL));
        if (!rc)
            rc = ps_clock(c);
        if (!rc)
            rc = ps_wait(c, ps_pull(c, t, keys, (size_t)nkeys, out, NULL,
                                    NULL));
        if (rc) {
            printf("bsp worker %d: round %d: %s: %s\n", worker, r,
                   ps_strerror(rc), ps_last_error(c));
            bad = 1;
        }
        for (int k = 0; k < nkeys && !bad; k++)
            if (out[k] != (float)(r * per_round)) {
                printf("bsp worker %d: round %d: key %d holds %g, want %d\n",
                       worker, r, k, (double)out[k], r * per_round);
                bad = 1;
            }
    }
    if (!bad)
        printf("bsp worker %d: %d rounds exact (%d per key per round)\n",
               worker, rounds, per_round);
    free(keys);
    free(g);
    free(out);
    ps_close(c);
    return bad;
}

static int open_expect(const char *servers, const char *want)
{
    ps_client *c;
    ps_options o;
    ps_options_init(&o);
    o.connect_timeout_ms = 3000;
    int rc = ps_open(&c, servers, &o);
    if (rc == 0)
        ps_close(c);
    printf("open: ps_open returned %s, want %s\n", name_of(rc), want);
    return strcmp(name_of(rc), want) ? 1 : 0;
}

static int move(const char *mode, const char *servers, int nkeys,
                const char *flag)
{
    ps_client *c;
    ps_options o;
    ps_options_init(&o);
    /* Short attempts, so the reconnection to the new address comes
     * soon; enough of them to outlast the move. */
    o.request_timeout_ms = 2000;
    o.max_retries = 6;
    int rc = ps_open(&c, servers, &o);
    if (rc) {
        printf("%s: ps_open: %s\n", mode, ps_strerror(rc));
        return 1;
    }
    int t = ps_table(c, ORACLE_TABLE, NULL);
    uint64_t *keys = malloc((size_t)nkeys * sizeof *keys);
    float *ones = malloc((size_t)nkeys * sizeof *ones);
    for (int k = 0; keys && ones && k < nkeys; k++) {
        keys[k] = oracle_key(k);
        ones[k] = 1;
    }
    rc = keys && ones ? ps_wait(c, ps_push(c, t, keys, (size_t)nkeys, ones,
                                           NULL, NULL))
                      : PS_ENOMEM;
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; rc == 0 && i < 600 && access(flag, F_OK) != 0; i++)
        usleep(50000);
    if (rc == 0)
        rc = ps_wait(c, ps_push(c, t, keys, (size_t)nkeys, ones, NULL, NULL));
    ps_stats_t st;
    ps_stats(c, &st);
    printf("%s: %s%s%s (%llu reconnections)\n", mode,
           rc ? ps_strerror(rc) : "both pushes acknowledged",
           rc ? ": " : "", rc ? ps_last_error(c) : "",
           (unsigned long long)st.reconnects);
    free(keys);
    free(ones);
    ps_close(c);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "count"))
        return count(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 5 && !strcmp(argv[1], "check"))
        return check(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc == 7 && !strcmp(argv[1], "bsp"))
        return bsp(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                   atoi(argv[6]));
    if (argc == 5 && (!strcmp(argv[1], "move") ||
                      !strcmp(argv[1], "partition")))
        return move(argv[1], argv[2], atoi(argv[3]), argv[4]);
    if (argc == 4 && !strcmp(argv[1], "open"))
        return open_expect(argv[2], argv[3]);
    fprintf(stderr, "usage: see tests/mh_client.c\n");
    return 2;
}
