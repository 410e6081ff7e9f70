/* Durability from the outside: real psd processes, clients pushing +1.0
 * to known keys (the counter oracle, tests/oracle.h), and restarts. After
 * SIGTERM and a restart every acknowledged push is there; with
 * durability = log, kill -9 at random moments while four workers push
 * loses no acknowledged push and applies none twice; a snapshot writer
 * killed at any stage leaves the old generation or the new one, whole; a
 * full disk refuses pushes instead of losing them, and psd keeps serving;
 * a damaged snapshot or one of another layout stops psd with the file,
 * offset and reason, until --skip-snapshot moves it aside. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster.h"
#include "oracle.h"
#include "psclient.h"

#include "expect.h"

#define TABLES "[table." ORACLE_TABLE "]\ndim = 1\n"
#define SERVER "[server]\nheartbeat_ms = 100\npeer_timeout_ms = 400\n"

static unsigned seed;

static void sleep_ms(int ms)
{
    struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

static ps_options client_options(void)
{
    ps_options o;
    ps_options_init(&o);
    o.connect_timeout_ms = 3000;
    o.request_timeout_ms = 200;
    o.max_retries = 50;
    return o;
}

static void check_counters(const char *spec, int lo, int hi)
{
    char why[200];
    if (oracle_check(spec, lo, hi, why, sizeof why))
        fail_msg("%s (acknowledged %d)", why, lo);
}

/* SIGTERM to node i; its exit status. */
static int term(test_cluster *c, int i)
{
    kill(c->pid[i], SIGTERM);
    return cluster_wait_exit(c, i, 10000);
}

static void start(test_cluster *c, int nodes, const char *server)
{
    char extra[512];
    snprintf(extra, sizeof extra, "%s%s", server, TABLES);
    if (cluster_start_ex(c, nodes, 4, "workers = 1\n", extra))
        fail_msg("cluster did not start");
}

static void test_sigterm_then_restart_keeps_every_push(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 2, SERVER);
    ps_options o = client_options();
    int acked, failed;
    oracle_run_many(c.spec, &o, 4, 200, 8, &acked, &failed);
    EXPECT_INT(failed, 0, "pushes that failed");
    for (int i = 0; i < 2; i++)
        EXPECT_INT(term(&c, i), 0, "node %d exits 0 after SIGTERM", i);
    for (int i = 0; i < 2; i++)
        if (cluster_restart(&c, i))
            fail_msg("node %d did not restart", i);
    EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot 1", 1000), 1,
               "node 0 says it loaded its snapshot");
    check_counters(c.spec, acked, acked);
    /* And again: the next generation carries the same. */
    oracle_run_many(c.spec, &o, 2, 50, 8, &acked, &failed);
    int total = 4 * 200 + acked;
    for (int i = 0; i < 2; i++)
        EXPECT_INT(term(&c, i), 0, "node %d exits 0", i);
    for (int i = 0; i < 2; i++)
        if (cluster_restart(&c, i))
            fail_msg("node %d did not restart", i);
    check_counters(c.spec, total, total);
    EXPECT_INT(cluster_stop(&c), 0, "the nodes stop cleanly");
}

typedef struct workload {
    const char *spec;
    ps_options opt;
    volatile int stop, finished;
    int acked, failed;
} workload;

/* Four workers pushing until told to stop (or PUSHES each). */
#define PUSHES 200000
static void *push_loop(void *arg)
{
    workload *w = arg;
    oracle_run_until(w->spec, &w->opt, 4, PUSHES, 8, &w->stop, &w->acked,
                     &w->failed);
    w->finished = 1;
    return NULL;
}

/* durability = log with the given fsync: four workers push while nodes
 * die by kill -9 at random moments and come back 100 ms later; every push
 * is acknowledged in the end (the clients retransmit), and every key holds
 * exactly that many: nothing acknowledged was lost, nothing retransmitted
 * was applied twice. The kills run on this thread, not a helper: psd dies
 * with the thread that forked it (PR_SET_PDEATHSIG, tests/cluster.h). */
#define KILLS 4
static void killed_nodes_lose_nothing(const char *fsync)
{
    test_cluster c;
    char server[200];
    snprintf(server, sizeof server, SERVER "durability = log\nfsync = %s\n",
             fsync);
    start(&c, 2, server);
    workload w = { .spec = c.spec, .opt = client_options() };
    pthread_t th;
    pthread_create(&th, NULL, push_loop, &w);
    int kills = 0;
    for (; kills < KILLS && !w.finished; kills++) {
        sleep_ms(100 + (int)(rand_r(&seed) % 300));
        int node = (int)(rand_r(&seed) % (unsigned)c.n);
        cluster_kill(&c, node, SIGKILL);
        sleep_ms(100);
        if (cluster_restart(&c, node))
            fail_msg("node %d did not restart", node);
    }
    sleep_ms(100);        /* pushes after the last restart */
    w.stop = 1;
    pthread_join(th, NULL);
    EXPECT_INT(kills, KILLS, "kills while the workers pushed");
    EXPECT_INT(w.failed, 0, "pushes that failed");
    printf("# fsync = %s: %d pushes acknowledged across %d kills\n", fsync,
           w.acked, kills);
    check_counters(c.spec, w.acked, w.acked);
    /* The restarts replayed a journal. */
    int replayed = 0;
    for (int i = 0; i < 2; i++) {
        char *log = cluster_log(&c, i);
        replayed += log && strstr(log, "journal records in");
        free(log);
    }
    EXPECT_INT(replayed > 0, 1, "a node replayed its journal");
    EXPECT_INT(cluster_stop(&c), 0, "the nodes stop cleanly");
}

static void test_kill9_with_fsync_always_loses_no_acknowledged_push(
    void **state)
{
    (void)state;
    killed_nodes_lose_nothing("always");
}

static void test_kill9_with_fsync_everysec_loses_no_acknowledged_push(
    void **state)
{
    (void)state;
    /* everysec promises to survive a crash of psd (not of the host): a
     * record is written before its push is acknowledged. */
    killed_nodes_lose_nothing("everysec");
}

/* Pulls the oracle's keys; every key must hold `want`. */
static void expect_count(const char *spec, int want, const char *when)
{
    char why[200];
    if (oracle_check(spec, want, want, why, sizeof why))
        fail_msg("%s: %s", when, why);
}

/* The final snapshot (at SIGTERM) killed at a stage of its writing: the
 * old generation survives when the new one was not renamed yet, the new
 * one when it was; never a mix. */
static void final_snapshot_killed_at(const char *stage, int new_wins)
{
    test_cluster c;
    start(&c, 1, SERVER);
    ps_options o = client_options();
    int a, b, failed;
    oracle_run_many(c.spec, &o, 1, 40, 4, &a, &failed);
    EXPECT_INT(term(&c, 0), 0, "first stop");     /* generation 1: a */
    char knob[64];
    snprintf(knob, sizeof knob, "%s:10000", stage);
    setenv("PSD_TEST_SNAPSHOT_PAUSE", knob, 1);
    int up = cluster_restart(&c, 0);
    unsetenv("PSD_TEST_SNAPSHOT_PAUSE");
    if (up)
        fail_msg("restart");
    oracle_run_many(c.spec, &o, 1, 25, 4, &b, &failed);
    kill(c.pid[0], SIGTERM);
    char said[64];
    snprintf(said, sizeof said, "at %s for", stage);
    EXPECT_INT(cluster_log_wait(&c, 0, said, 5000), 1,
               "the writer reached %s", stage);
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart after the kill");
    expect_count(c.spec, new_wins ? a + b : a, stage);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

static void test_a_snapshot_killed_before_its_rename_leaves_the_old_one(
    void **state)
{
    (void)state;
    final_snapshot_killed_at("written", 0);
    final_snapshot_killed_at("fsynced", 0);
}

static void test_a_snapshot_killed_after_its_rename_is_the_new_one(
    void **state)
{
    (void)state;
    final_snapshot_killed_at("renamed", 1);
}

/* The file size limit of a running psd, as a full disk would. */
static void set_fsize(pid_t pid, rlim_t limit)
{
    struct rlimit r = { limit, RLIM_INFINITY };
    if (prlimit(pid, RLIMIT_FSIZE, &r, NULL))
        fail_msg("prlimit: %s", strerror(errno));
}

static void test_a_full_disk_refuses_pushes_and_loses_nothing(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n");
    ps_options o = client_options();
    o.max_retries = 2;
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 30, 4, &a, &failed);
    EXPECT_INT(failed, 0, "before the disk fills");
    /* The disk is full (the log file psd writes to is too, so nothing
     * is checked in it meanwhile). */
    set_fsize(c.pid[0], 1);
    ps_client *cl, *reader;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    assert_int_equal(ps_open(&reader, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f, v = 0;
    /* The first push is applied, but its record cannot be written: its
     * reply waits for the journal, so the client times out (or, on a
     * retry, hears that pushes are refused). Never PS_OK. */
    int rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc == PS_ETIMEDOUT || rc == PS_ESERVER, 1,
               "the first push while the disk is full: %s",
               ps_strerror(rc));
    rc = ps_wait(reader, ps_push(reader, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc, PS_ESERVER, "a push while the journal cannot be written");
    EXPECT_INT(strstr(ps_last_error(reader), "cannot write its journal") !=
               NULL, 1, "%s", ps_last_error(reader));
    /* Pulls are still served. */
    EXPECT_INT(ps_wait(reader, ps_pull(reader, t, &key, 1, &v, NULL, NULL)),
               PS_OK, "a pull");
    /* Room again: the journal recovers by itself and pushes are taken. */
    set_fsize(c.pid[0], RLIM_INFINITY);
    EXPECT_INT(cluster_log_wait(&c, 0, "journal: writing again", 2000), 1,
               "the journal recovers by itself");
    ps_close(cl);
    ps_close(reader);
    int b;
    oracle_run_many(c.spec, &o, 1, 20, 4, &b, &failed);
    EXPECT_INT(failed, 0, "after the disk has room");
    /* The first push of the full disk was applied without being
     * acknowledged; the refused one was not applied. */
    int lo = a + b;
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    char why[200];
    if (oracle_check(c.spec, lo, lo + 1, why, sizeof why))
        fail_msg("%s", why);
    /* A snapshot that cannot be written keeps the old one and psd keeps
     * running; the stop reports it with exit status 1. */
    set_fsize(c.pid[0], 100);
    EXPECT_INT(term(&c, 0), 1, "a stop whose final snapshot failed");
    if (cluster_restart(&c, 0))
        fail_msg("restart after the failed snapshot");
    if (oracle_check(c.spec, lo, lo + 1, why, sizeof why))
        fail_msg("after the failed snapshot: %s", why);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* SIGTERM while a push's reply waits for a journal that cannot be
 * written (the disk is full): that reply can never be given honestly, so
 * the stop must not wait for it. psd closes such a connection unanswered
 * (the client hears nothing it could take for an acknowledgement) and
 * exits, its final snapshot failing on the full disk (status 1). */
static void test_a_stop_does_not_wait_for_a_full_disk(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n");
    ps_options o = client_options();
    o.request_timeout_ms = 30000;   /* the client would wait for ever */
    o.max_retries = 0;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f;
    set_fsize(c.pid[0], 1);
    ps_ts ts = ps_push(cl, t, &key, 1, &one, NULL, NULL);
    assert_true(ts > 0);
    sleep_ms(500);                  /* applied; its record not written */
    kill(c.pid[0], SIGTERM);
    int st = cluster_wait_exit(&c, 0, 3000);
    EXPECT_INT(st, 1, "psd's exit status within 3 s of SIGTERM (-1: still "
               "running, waiting for the journal)");
    int rc = ps_wait(cl, ts);
    EXPECT_INT(rc != PS_OK, 1, "the push was never journaled: %s",
               ps_strerror(rc));
    ps_close(cl);
    cluster_stop(&c);
}

/* fsync = always with every descriptor of psd in use (RLIMIT_NOFILE at
 * what it holds, as under a crowd of connections): the fsync that a push
 * waits for still happens, and the push is acknowledged. psd dup()s the
 * journal's descriptor for the fsync on its thread pool; when that dup
 * failed, no fsync ran and the reply waited until some later push started
 * one (its retransmissions, duplicates, start none). */
static void test_fsync_always_without_a_free_descriptor_acks_pushes(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n");
    ps_options o = client_options();
    o.request_timeout_ms = 500;
    o.max_retries = 3;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f, v = 0;
    assert_int_equal(ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL)),
                     PS_OK);
    struct rlimit none = { 0, 0 }, save;
    if (prlimit(c.pid[0], RLIMIT_NOFILE, NULL, &save))
        fail_msg("prlimit: %s", strerror(errno));
    none.rlim_max = save.rlim_max;
    if (prlimit(c.pid[0], RLIMIT_NOFILE, &none, NULL))
        fail_msg("prlimit: %s", strerror(errno));
    int rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    prlimit(c.pid[0], RLIMIT_NOFILE, &save, NULL);
    EXPECT_INT(rc, PS_OK, "a push while psd has no free descriptor: %s",
               ps_strerror(rc));
    EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &v, NULL, NULL)), PS_OK,
               "a pull");
    EXPECT_FLOAT(v, 2.0f, "the key after two pushes");
    ps_close(cl);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

static void damage(const char *path, long off, int cut)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (cut) {
        assert_int_equal(ftruncate(fileno(f), off), 0);
    } else {
        fseek(f, off, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, off, SEEK_SET);
        fputc(ch ^ 0x04, f);
    }
    fclose(f);
}

/* Starts node 0, which must refuse; its log must name the file and say
 * `why`. */
static void expect_refusal(test_cluster *c, const char *file,
                           const char *why)
{
    cluster_launch(c, 0, NULL);
    EXPECT_INT(cluster_wait_exit(c, 0, 5000), 1, "psd refuses to start");
    char *log = cluster_log(c, 0);
    char *at = log ? strstr(log, file) : NULL;
    if (!at || !strstr(at, why))
        fail_msg("want \"%s ... %s\" in the log:\n%s", file, why,
                 log ? log : "");
    free(log);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f))
        fail_msg("cannot write %s", path);
}

static void test_a_damaged_snapshot_stops_psd_until_skipped(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER);
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 20, 4, &a, &failed);
    EXPECT_INT(term(&c, 0), 0, "stop");
    char snap[400];
    snprintf(snap, sizeof snap, "%s/psd-node0.snap", c.dir);
    struct stat st;
    assert_int_equal(stat(snap, &st), 0);
    damage(snap, 40, 0);           /* in the header */
    expect_refusal(&c, snap, "header CRC mismatch");
    damage(snap, 40, 0);           /* mended */
    damage(snap, (long)st.st_size - 5, 1);
    expect_refusal(&c, snap, "truncated");
    /* --skip-snapshot: moved aside, never deleted; psd starts empty.
     * Files an earlier --skip-snapshot set aside in the same second (here
     * made up, for the seconds around now) are kept, not replaced. */
    long now = (long)time(NULL);
    char kept[480];
    for (long t = now - 1; t <= now + 10; t++) {
        snprintf(kept, sizeof kept, "%s.skipped.%ld", snap, t);
        write_file(kept, "kept");
    }
    if (cluster_restart_with(&c, 0, "--skip-snapshot"))
        fail_msg("--skip-snapshot did not start");
    EXPECT_INT(cluster_log_wait(&c, 0, "--skip-snapshot: ", 100), 1,
               "it says where the file went");
    EXPECT_INT(access(snap, F_OK), -1, "the snapshot was moved");
    for (long t = now - 1; t <= now + 10; t++) {
        snprintf(kept, sizeof kept, "%s.skipped.%ld", snap, t);
        struct stat ks;
        if (stat(kept, &ks) || ks.st_size != 4)
            fail_msg("%s, set aside before, was replaced", kept);
    }
    int moved = 0;
    for (long t = now - 1; t <= now + 10; t++) {
        snprintf(kept, sizeof kept, "%s.skipped.%ld.1", snap, t);
        moved += access(kept, F_OK) == 0;
    }
    EXPECT_INT(moved, 1, "the snapshot set aside as SNAP.skipped.T.1");
    expect_count(c.spec, 0, "after --skip-snapshot");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* Runs psd --check on c's ini (with -n NODE when node >= 0, with ARG when
 * not NULL) and wants its exit status and, when want is not NULL, want
 * in what it printed. */
static void expect_psd_check(const test_cluster *c, int node, const char *arg,
                         int status, const char *want)
{
    const char *psd = getenv("PSD_BIN");
    char cmd[800], nodearg[16] = "";
    if (node >= 0)
        snprintf(nodearg, sizeof nodearg, "-n %d", node);
    snprintf(cmd, sizeof cmd, "'%s' --check -c '%s' %s %s 2>&1",
             psd ? psd : "build/psd", c->ini, nodearg, arg ? arg : "");
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, status,
               "%s: its exit status; it printed:\n%s", cmd, out);
    if (want && !strstr(out, want))
        fail_msg("%s: want \"%s\" in what it printed:\n%s", cmd, want,
                 out);
}

static void test_a_snapshot_of_another_layout_stops_psd(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER);
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(term(&c, 0), 0, "stop");
    /* Same file, 8 shards instead of 4. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sed -i 's/^shards = 4$/shards = 8/' '%s'",
             c.ini);
    assert_int_equal(system(cmd), 0);
    char snap[400];
    snprintf(snap, sizeof snap, "%s/psd-node0.snap", c.dir);
    expect_refusal(&c, snap, "another layout");
    /* psd --check says so before a start is tried. */
    expect_psd_check(&c, 0, NULL, 1, "another layout");
    expect_psd_check(&c, -1, NULL, 1, snap);
    expect_psd_check(&c, 0, "--skip-snapshot", 0, "OK");
    /* Back to 4 shards, but the table's dim changed. */
    snprintf(cmd, sizeof cmd, "sed -i -e 's/^shards = 8$/shards = 4/' "
             "-e 's/^dim = 1$/dim = 2/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_refusal(&c, snap, "dim 1");
    expect_psd_check(&c, 0, NULL, 1, "tables differ");
    snprintf(cmd, sizeof cmd, "sed -i 's/^dim = 2$/dim = 1/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_psd_check(&c, 0, NULL, 0, "OK");
    if (cluster_restart(&c, 0))
        fail_msg("the right layout starts");
    expect_count(c.spec, a, "with the right layout");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

int main(void)
{
    const char *s = getenv("PSD_TEST_SEED");
    seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    printf("# seed %u (PSD_TEST_SEED replays it)\n", seed);
    signal(SIGPIPE, SIG_IGN);
    if (getenv("PSD_TEST_ONLY"))       /* e.g. PSD_TEST_ONLY='*kill9*' */
        cmocka_set_test_filter(getenv("PSD_TEST_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_then_restart_keeps_every_push),
        cmocka_unit_test(
            test_kill9_with_fsync_always_loses_no_acknowledged_push),
        cmocka_unit_test(
            test_kill9_with_fsync_everysec_loses_no_acknowledged_push),
        cmocka_unit_test(
            test_a_snapshot_killed_before_its_rename_leaves_the_old_one),
        cmocka_unit_test(
            test_a_snapshot_killed_after_its_rename_is_the_new_one),
        cmocka_unit_test(test_a_full_disk_refuses_pushes_and_loses_nothing),
        cmocka_unit_test(test_a_stop_does_not_wait_for_a_full_disk),
        cmocka_unit_test(
            test_fsync_always_without_a_free_descriptor_acks_pushes),
        cmocka_unit_test(test_a_damaged_snapshot_stops_psd_until_skipped),
        cmocka_unit_test(test_a_snapshot_of_another_layout_stops_psd),
    };
    int failed = cmocka_run_group_tests_name("durability", tests, NULL, NULL);
    int total = (int)(sizeof tests / sizeof tests[0]);
    if (getenv("PSD_TEST_ONLY"))   /* cmocka does not say how many ran */
        printf("filtered run: %d failed\n", failed);
    else
        printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
