/* End-to-end numerics of the updaters: real psd processes, the real
 * client, and a reference written in long double straight from the usual
 * formulas (Adagrad; Adam with bias correction; FTRL-Proximal, McMahan et
 * al. 2013) that shares no code with daemon/updater.c. Every updater runs
 * on dense rows, sparse dim-1 rows (kept inline for sum, assign and sgd)
 * and sparse chunk rows, over many pushes, with keys repeated inside a
 * push, across a snapshot, a SIGHUP that changes the hyper-parameters and
 * a journal replay, and in bsp with aggregate = mean (its sums across a
 * stop too).
 * PSD_TEST_ONLY='*pattern*' runs the matching tests. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster.h"
#include "psclient.h"

#define NKEYS 10                 /* rows of each table the test uses */
#define DMAX 5                   /* widest row */
#define NTABLES 18               /* 6 updaters x dense, dim 1, chunk */

static test_cluster cl;

/* ---- the reference ------------------------------------------------------ */

typedef enum { U_SUM, U_ASSIGN, U_SGD, U_ADAGRAD, U_ADAM, U_FTRL } ukind;

static const char *const unames[] = {
    "sum", "assign", "sgd", "adagrad", "adam", "ftrl"
};

/* Hyper-parameters as decimal numbers, as written in the ini. */
typedef struct hyper {
    long double lr, beta1, beta2, epsilon, l1, l2, beta;
} hyper;

/* One row: weights and the optimizer's state (adagrad: a = h; adam:
 * a = m, b = v, t; ftrl: a = z, b = n), and the sum of the weight's
 * moves, which bounds what float rounding can add up to on a weight that
 * came back near 0 (compare_all). */
typedef struct rrow {
    long double w[DMAX], a[DMAX], b[DMAX], moved[DMAX];
    unsigned long t;
} rrow;

static void ref_update(ukind k, const hyper *p, rrow *r, const float *g,
                       uint32_t dim)
{
    if (k == U_ADAM)
        r->t++;
    for (uint32_t i = 0; i < dim; i++) {
        long double gi = g[i], was = r->w[i];
        switch (k) {
        case U_SUM:
            r->w[i] += gi;
            break;
        case U_ASSIGN:
            r->w[i] = gi;
            break;
        case U_SGD:
            r->w[i] -= p->lr * gi;
            break;
        case U_ADAGRAD:
            r->a[i] += gi * gi;
            r->w[i] -= p->lr * gi / (sqrtl(r->a[i]) + p->epsilon);
            break;
        case U_ADAM: {
            r->a[i] = p->beta1 * r->a[i] + (1 - p->beta1) * gi;
            r->b[i] = p->beta2 * r->b[i] + (1 - p->beta2) * gi * gi;
            long double mhat = r->a[i] / (1 - powl(p->beta1, r->t));
            long double vhat = r->b[i] / (1 - powl(p->beta2, r->t));
            r->w[i] -= p->lr * mhat / (sqrtl(vhat) + p->epsilon);
            break;
        }
        case U_FTRL: {
            long double n1 = r->b[i] + gi * gi;
            long double sigma = (sqrtl(n1) - sqrtl(r->b[i])) / p->lr;
            r->a[i] += gi - sigma * r->w[i];
            r->b[i] = n1;
            long double z = r->a[i];
            r->w[i] = fabsl(z) <= p->l1
                          ? 0
                          : -(z - copysignl(p->l1, z)) /
                                ((p->beta + sqrtl(n1)) / p->lr + p->l2);
            break;
        }
        }
        r->moved[i] += fabsl(r->w[i] - was);
    }
}

/* ---- the tables ----------------------------------------------------------- */

typedef struct tab {
    char name[32];
    ukind kind;
    int dense;
    uint32_t dim;
    int id;                      /* the client's table id */
    rrow rows[NKEYS];
} tab;

static tab tabs[NTABLES];

/* Sparse keys: small, large and in between, so they land on every shard
 * and node. Dense tables use rows 0..NKEYS-1. */
static const uint64_t skeys[NKEYS] = {
    3, 17, 1000003, 0xffffffffffffffffULL, 42, 0x8000000000000000ULL,
    99991, 7, 123456789012345ULL, 5
};

static uint64_t key_of(const tab *t, int i)
{
    return t->dense ? (uint64_t)i : skeys[i];
}

/* Hyper-parameters away from the defaults, so that a parameter read from
 * the wrong field shows. `second` is the set a SIGHUP brings. */
static const hyper first_set = { 0.05L, 0.8L, 0.99L, 1e-6L, 0.02L, 0.3L,
                                 0.5L };
static const hyper second_set = { 0.02L, 0.7L, 0.95L, 1e-4L, 0.01L, 0.1L,
                                  2.0L };

/* The [table] sections of all NTABLES tables with hyper-parameters h,
 * extra lines in each (for example a consistency), written into buf. */
static void table_sections(char *buf, size_t len, const hyper *h,
                           const char *extra)
{
    size_t at = 0;
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        t->kind = (ukind)(i / 3);
        t->dense = i % 3 == 0;
        t->dim = i % 3 == 1 ? 1 : (t->dense ? 3 : DMAX);
        snprintf(t->name, sizeof t->name, "%s_%s", unames[t->kind],
                 t->dense ? "dense" : t->dim == 1 ? "dim1" : "chunk");
        at += (size_t)snprintf(
            buf + at, len - at,
            "[table.%s]\nkind = %s\n%sdim = %u\nupdater = %s\n"
            "lr = %Lg\nbeta1 = %Lg\nbeta2 = %Lg\nepsilon = %Lg\n"
            "l1 = %Lg\nl2 = %Lg\nbeta = %Lg\n"
            "init = uniform -0.5 0.5\nseed = %d\n%s",
            t->name, t->dense ? "dense" : "sparse",
            t->dense ? "rows = 16\n" : "", t->dim, unames[t->kind], h->lr,
            h->beta1, h->beta2, h->epsilon, h->l1, h->l2, h->beta, i + 1,
            extra);
        assert_true(at < len);
    }
}

/* Pulls every key of table t into out (NKEYS rows of t->dim), keys into
 * keys. Returns 0, or -1 after printing why (when: what was being done). */
static int pull_all(ps_client *c, const tab *t, uint64_t keys[NKEYS],
                    float *out, const char *when)
{
    for (int k = 0; k < NKEYS; k++)
        keys[k] = key_of(t, k);
    if (ps_wait(c, ps_pull(c, t->id, keys, NKEYS, out, NULL, NULL)) != 0) {
        print_error("%s: pull of %s: %s\n", when, t->name, ps_last_error(c));
        return -1;
    }
    return 0;
}

/* Looks every table up and starts each reference row from the row psd
 * serves before any push (the seeded init is tested in test_updater).
 * Returns 0, or -1 after printing why. */
static int tables_open(ps_client *c)
{
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        uint64_t keys[NKEYS];
        float out[NKEYS * DMAX];
        t->id = ps_table(c, t->name, NULL);
        if (t->id < 0) {
            print_error("table %s: %s\n", t->name, ps_last_error(c));
            return -1;
        }
        if (pull_all(c, t, keys, out, "start"))
            return -1;
        memset(t->rows, 0, sizeof t->rows);
        for (int k = 0; k < NKEYS; k++)
            for (uint32_t j = 0; j < t->dim; j++)
                t->rows[k].w[j] = out[k * t->dim + j];
    }
    return 0;
}

/* A gradient, a pure function of (seed, step, key, column): mostly in
 * (-2, 2), some zeros, some a hundred times larger, some tiny. */
static float gradient(int seed, int step, int key, uint32_t col)
{
    uint64_t x = ((uint64_t)seed << 48) ^ ((uint64_t)step << 24) ^
                 ((uint64_t)key << 8) ^ col;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    double u = (double)(x >> 11) / 9007199254740992.0;    /* [0, 1) */
    int pick = (int)(x & 31);
    if (pick == 0)
        return 0.0f;
    if (pick == 1)
        return (float)((u - 0.5) * 400.0);
    if (pick == 2)
        return (float)((u - 0.5) * 1e-4);
    return (float)((u - 0.5) * 4.0);
}

/* The keys step `s` pushes: a window that moves with the step (so rows
 * see different numbers of pushes, and adam's per-row t differs), with
 * its first key given again at the end on odd steps. Returns how many. */
static int step_keys(int s, int idx[NKEYS + 1])
{
    int n = 0, len = 3 + s % 5;
    for (int i = 0; i < len; i++)
        idx[n++] = (s * 3 + i) % NKEYS;
    if (s % 2)
        idx[n++] = idx[0];
    return n;
}

/* Pushes step s to every table (keys given, or a whole dense range on
 * every fourth step) and applies the same to the references, with
 * hyper-parameters h. */
static void push_step(ps_client *c, int s, const hyper *h)
{
    ps_ts ts[NTABLES];
    float vals[NTABLES][(NKEYS + 1) * DMAX];
    uint64_t keys[NTABLES][NKEYS + 1];
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        int idx[NKEYS + 1], n;
        int ranged = t->dense && s % 4 == 0;
        if (ranged)
            for (n = 0; n < NKEYS; n++)
                idx[n] = n;
        else
            n = step_keys(s, idx);
        for (int k = 0; k < n; k++) {
            keys[i][k] = key_of(t, idx[k]);
            for (uint32_t j = 0; j < t->dim; j++)
                vals[i][k * t->dim + j] = gradient(i, s, k, j);
            ref_update(t->kind, h, &t->rows[idx[k]], &vals[i][k * t->dim],
                       t->dim);
        }
        ts[i] = ranged ? ps_push_range(c, t->id, 0, NKEYS, vals[i], NULL,
                                       NULL)
                       : ps_push(c, t->id, keys[i], (size_t)n, vals[i], NULL,
                                 NULL);
    }
    for (int i = 0; i < NTABLES; i++)
        if (ps_wait(c, ts[i]) != 0) {
            print_error("push of step %d to %s: %s\n", s, tabs[i].name,
                        ps_last_error(c));
            fail();
        }
}

/* Float rounding against long double: each push adds a few float
 * roundings to the weight (relative 6e-8 each, of the weight or of its
 * move); over a few hundred pushes that stays well within these. A
 * formula that is wrong is off by far more. */
#define RTOL 2e-4
#define ATOL 2e-5
#define MTOL 1e-6                /* of the sum of the weight's moves */

/* Pulls every row of every table and compares it with the reference;
 * prints each mismatch (both sides, the first 20). Returns how many
 * values differ (or -1 when a pull failed). */
static int compare_all(ps_client *c, const char *when)
{
    int bad = 0;
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        uint64_t keys[NKEYS];
        float out[NKEYS * DMAX];
        if (pull_all(c, t, keys, out, when))
            return -1;
        for (int k = 0; k < NKEYS; k++)
            for (uint32_t j = 0; j < t->dim; j++) {
                long double want = t->rows[k].w[j];
                double got = out[k * t->dim + j];
                long double err = fabsl((long double)got - want);
                if (err <= ATOL || err <= RTOL * fabsl(want) ||
                    err <= MTOL * t->rows[k].moved[j])
                    continue;
                if (bad++ < 20)
                    print_error("%s: table %s key %llu col %u: got %.9g, "
                                "want %.9Lg\n", when, t->name,
                                (unsigned long long)keys[k], j, got, want);
            }
    }
    if (bad)
        print_error("%s: %d values differ from the reference\n", when, bad);
    return bad;
}

static void check_all(ps_client *c, const char *when)
{
    assert_int_equal(compare_all(c, when), 0);
}

static ps_client *open_client(void)
{
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, cl.spec, NULL), 0);
    return c;
}

static void run_steps(ps_client *c, int from, int to, const hyper *h,
                      const char *phase)
{
    char when[64];
    for (int s = from; s < to; s++) {
        push_step(c, s, h);
        if (s % 25 == 24 || s == to - 1) {
            snprintf(when, sizeof when, "%s, after step %d", phase, s);
            check_all(c, when);
        }
    }
}

/* ---- tests ------------------------------------------------------------------ */

static char sections[32768];

static void every_updater_matches_the_reference_over_many_pushes(
    void **state)
{
    (void)state;
    table_sections(sections, sizeof sections, &first_set, "");
    assert_int_equal(cluster_start(&cl, 2, 4, sections), 0);
    ps_client *c = open_client();
    assert_int_equal(tables_open(c), 0);
    run_steps(c, 0, 300, &first_set, "2 nodes");
    ps_close(c);
    assert_int_equal(cluster_stop(&cl), 0);
}

/* Rewrites the hyper-parameters in cl's ini from `a` to `b` and sends
 * SIGHUP to node 0, then waits for its log to say it reloaded. */
static void reload_params(const hyper *a, const hyper *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "sed -i -e 's/^lr = %Lg$/lr = %Lg/' -e 's/^beta1 = %Lg$/beta1 = "
             "%Lg/' -e 's/^beta2 = %Lg$/beta2 = %Lg/' -e 's/^epsilon = %Lg$/"
             "epsilon = %Lg/' -e 's/^l1 = %Lg$/l1 = %Lg/' -e 's/^l2 = %Lg$/"
             "l2 = %Lg/' -e 's/^beta = %Lg$/beta = %Lg/' '%s'",
             a->lr, b->lr, a->beta1, b->beta1, a->beta2, b->beta2,
             a->epsilon, b->epsilon, a->l1, b->l1, a->l2, b->l2, a->beta,
             b->beta, cl.ini);
    assert_int_equal(system(cmd), 0);
    kill(cl.pid[0], SIGHUP);
    assert_true(cluster_log_wait(&cl, 0, "reloaded", 10000));
}

/* The state of every updater (adam's per-row t included) survives a
 * snapshot, a SIGHUP applies new hyper-parameters to it without resetting
 * it, and a journal replay applies each push with the parameters it was
 * applied with before the crash. */
static void every_updater_keeps_its_state_across_restart_reload_and_replay(
    void **state)
{
    (void)state;
    char all[33000];
    table_sections(sections, sizeof sections, &first_set, "");
    snprintf(all, sizeof all, "[server]\ndurability = log\n"
             "snapshot_interval = 0\n%s", sections);
    assert_int_equal(cluster_start(&cl, 1, 4, all), 0);
    ps_client *c = open_client();
    assert_int_equal(tables_open(c), 0);
    run_steps(c, 0, 60, &first_set, "before the restart");
    ps_close(c);

    cluster_kill(&cl, 0, SIGTERM);           /* writes a snapshot */
    assert_int_equal(cluster_restart(&cl, 0), 0);
    c = open_client();
    check_all(c, "after a restart from the snapshot");
    run_steps(c, 60, 120, &first_set, "after the restart");

    reload_params(&first_set, &second_set);
    run_steps(c, 120, 180, &second_set, "after the reload");
    ps_close(c);

    cluster_kill(&cl, 0, SIGKILL);          /* the journal has it all */
    assert_int_equal(cluster_restart(&cl, 0), 0);
    c = open_client();
    check_all(c, "after a journal replay");
    run_steps(c, 180, 240, &second_set, "after the replay");
    ps_close(c);
    assert_int_equal(cluster_stop(&cl), 0);
}

/* ---- bsp ------------------------------------------------------------------- */

#define BSP_WORKERS 3
#define BSP_CLOCKS 40

/* Worker w's pushes at clock s, in three parts (so each worker pushes a
 * key more than once per clock). Every worker pushes the same keys.
 * Multiples of 1/64 below 256, so that psd's float sum of a clock is
 * exact whatever order the pushes arrive in. */
static float bsp_gradient(int table, int w, int s, int k, uint32_t col,
                          int part)
{
    return roundf(gradient(table * 16 + w * 4 + part, s, k, col) * 64.0f) /
           64.0f;
}

/* Pushes worker w's three parts of clock s to every table through c;
 * 0, or -1 after printing why. */
static int bsp_push_clock(ps_client *c, int w, int s)
{
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        float vals[3 * NKEYS * DMAX];
        uint64_t keys[3 * NKEYS];
        int n = 0;
        for (int part = 0; part < 3; part++)
            for (int k = 0; k < NKEYS; k++, n++) {
                keys[n] = key_of(t, k);
                for (uint32_t j = 0; j < t->dim; j++)
                    vals[n * t->dim + j] = bsp_gradient(i, w, s, k, j, part);
            }
        if (ps_wait(c, ps_push(c, t->id, keys, (size_t)n, vals, NULL,
                               NULL)) != 0) {
            print_error("worker %d: push of clock %d to %s: %s\n", w, s,
                        t->name, ps_last_error(c));
            return -1;
        }
    }
    return 0;
}

/* Applies clock s to the references: every key once, with the mean of
 * `workers` workers' sums. */
static void bsp_ref_clock(int s, int workers)
{
    for (int i = 0; i < NTABLES; i++) {
        tab *t = &tabs[i];
        for (int k = 0; k < NKEYS; k++) {
            float g[DMAX];
            for (uint32_t j = 0; j < t->dim; j++) {
                long double sum = 0;
                for (int v = 0; v < workers; v++)
                    for (int part = 0; part < 3; part++)
                        sum += bsp_gradient(i, v, s, k, j, part);
                g[j] = (float)(sum / workers);
            }
            ref_update(t->kind, &first_set, &t->rows[k], g, t->dim);
        }
    }
}

/* One worker: at every clock pushes its three parts to every table, then
 * clocks; worker 0 then pulls and compares with the reference, where
 * each key gets the updater once per clock with the mean of the
 * BSP_WORKERS workers' sums. */
static int bsp_worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    ps_options o;
    ps_options_init(&o);
    o.worker = w;
    ps_client *c = NULL;
    if (ps_open(&c, cl.spec, &o) != 0)
        return 1;
    if (w == 0) {
        if (tables_open(c))
            return 1;
    } else
        for (int i = 0; i < NTABLES; i++)
            tabs[i].id = ps_table(c, tabs[i].name, NULL);
    for (int s = 0; s < BSP_CLOCKS; s++) {
        if (bsp_push_clock(c, w, s))
            return 1;
        if (ps_clock(c) != 0) {
            fprintf(stderr, "worker %d: clock %d: %s\n", w, s,
                    ps_last_error(c));
            return 1;
        }
        if (w != 0)
            continue;
        bsp_ref_clock(s, BSP_WORKERS);
        char when[64];
        snprintf(when, sizeof when, "bsp mean, after clock %d", s);
        if (compare_all(c, when))
            return 1;
    }
    ps_close(c);
    return 0;
}

static void bsp_mean_applies_each_updater_once_per_clock_to_the_mean(
    void **state)
{
    (void)state;
    table_sections(sections, sizeof sections, &first_set,
                   "consistency = bsp\naggregate = mean\n");
    char lines[64];
    snprintf(lines, sizeof lines, "workers = %d\n", BSP_WORKERS);
    assert_int_equal(cluster_start_ex(&cl, 2, 4, lines, sections), 0);
    pid_t pid[BSP_WORKERS];
    for (int w = 0; w < BSP_WORKERS; w++)
        pid[w] = spawn(bsp_worker, (void *)(intptr_t)w);
    int bad = 0;
    for (int w = 0; w < BSP_WORKERS; w++)
        bad |= reap(pid[w]) != 0;
    assert_int_equal(cluster_stop(&cl), 0);
    assert_int_equal(bad, 0);
}

static void *clock_thread(void *arg)
{
    return (void *)(intptr_t)ps_clock(arg);
}

/* The sums of a clock whose pushes were all in when the node stopped are
 * applied once, with the same divisor, after a SIGTERM (the snapshot
 * holds them) and after kill -9 (the journal does), whatever the
 * updater. Two workers, both clients of this process. */
static void bsp_sums_of_every_updater_survive_a_restart_and_a_replay(
    void **state)
{
    (void)state;
    char all[33000];
    table_sections(sections, sizeof sections, &first_set,
                   "consistency = bsp\naggregate = mean\n");
    snprintf(all, sizeof all, "[server]\ndurability = log\n"
             "snapshot_interval = 0\n%s", sections);
    assert_int_equal(cluster_start_ex(&cl, 1, 4, "workers = 2\n", all), 0);
    ps_client *c[2];
    for (int w = 0; w < 2; w++) {
        ps_options o;
        ps_options_init(&o);
        o.worker = w;
        assert_int_equal(ps_open(&c[w], cl.spec, &o), 0);
    }
    assert_int_equal(tables_open(c[0]), 0);
    for (int s = 0; s < 24; s++) {
        for (int w = 0; w < 2; w++)
            assert_int_equal(bsp_push_clock(c[w], w, s), 0);
        if (s == 8 || s == 16) {
            int sig = s == 8 ? SIGTERM : SIGKILL;
            cluster_kill(&cl, 0, sig);
            assert_int_equal(cluster_restart(&cl, 0), 0);
        }
        pthread_t th;
        void *rc1;
        assert_int_equal(pthread_create(&th, NULL, clock_thread, c[1]), 0);
        int rc0 = ps_clock(c[0]);
        pthread_join(th, &rc1);
        if (rc0 != 0 || rc1 != NULL)
            fail_msg("clock %d: %d (%s), %d", s, rc0, ps_last_error(c[0]),
                     (int)(intptr_t)rc1);
        bsp_ref_clock(s, 2);
        char when[64];
        snprintf(when, sizeof when, "bsp across stops, after clock %d", s);
        check_all(c[0], when);
    }
    ps_close(c[0]);
    ps_close(c[1]);
    assert_int_equal(cluster_stop(&cl), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("PSD_TEST_ONLY"))       /* e.g. PSD_TEST_ONLY='*bsp*' */
        cmocka_set_test_filter(getenv("PSD_TEST_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            every_updater_matches_the_reference_over_many_pushes),
        cmocka_unit_test(
            every_updater_keeps_its_state_across_restart_reload_and_replay),
        cmocka_unit_test(
            bsp_mean_applies_each_updater_once_per_clock_to_the_mean),
        cmocka_unit_test(
            bsp_sums_of_every_updater_survive_a_restart_and_a_replay),
    };
    return cmocka_run_group_tests_name("numerics", tests, NULL, NULL);
}
