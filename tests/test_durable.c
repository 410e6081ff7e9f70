/* Durability from the outside: real psd processes, clients pushing +1.0
 * to known keys (the counter oracle, tests/oracle.h), and restarts. After
 * SIGTERM and a restart every acknowledged push is there; with
 * durability = log, kill -9 at random moments while four workers push
 * loses no acknowledged push and applies none twice, also when the kills
 * land in snapshots; with durability = snapshot, kill -9 keeps what the
 * last snapshot held and the pushes it catches say they may have been
 * applied; a snapshot writer killed at any stage, or at random moments,
 * leaves the old generation or the new one, whole, and no temporary
 * file; a stop waits for a periodic snapshot and then writes its own; a
 * full disk refuses pushes instead of losing them, and a snapshot that
 * finds no space fails, keeps the old one and says so, while psd keeps
 * serving; a damaged snapshot or one of another layout stops psd with
 * the file, offset and reason, until --skip-snapshot moves it aside; a
 * data folder removed under a running node refuses pushes instead of
 * acknowledging them into a journal no restart would find.
 * PSD_TEST_ONLY='*pattern*' runs the matching tests. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
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
    atomic_int stop, finished;
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

/* The child of the tests below: psctl save against spec, quietly. */
static int psctl_save(void *spec)
{
    const char *b = getenv("PSCTL_BIN");
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(b ? b : "build/psctl", "psctl", "-s", (const char *)spec, "save",
          (char *)NULL);
    return 127;
}

/* durability = log with fsync = always, and snapshots on top: four
 * workers push while, eight times, a node is told to save (psctl save:
 * the journal rotates, a forked writer writes the image) and is killed
 * with -9 a random moment later, before, during or after the writing,
 * then restarted. Every push ends acknowledged and counted exactly once:
 * the restart must take the newest whole snapshot and replay exactly the
 * journal after it, whichever segments the crash left. */
static void test_kill9_during_snapshots_with_a_journal_loses_nothing(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 2, SERVER "durability = log\nfsync = always\n");
    workload w = { .spec = c.spec, .opt = client_options() };
    pthread_t th;
    pthread_create(&th, NULL, push_loop, &w);
    int kills = 0;
    for (; kills < 8 && !w.finished; kills++) {
        sleep_ms(100 + (int)(rand_r(&seed) % 200));
        int node = (int)(rand_r(&seed) % (unsigned)c.n);
        char one[64];
        snprintf(one, sizeof one, "127.0.0.1:%d", c.port[node]);
        pid_t saver = spawn(psctl_save, one);
        sleep_ms((int)(rand_r(&seed) % 40));
        cluster_kill(&c, node, SIGKILL);
        reap(saver);
        sleep_ms(50);
        if (cluster_restart(&c, node))
            fail_msg("node %d did not restart", node);
    }
    sleep_ms(100);
    w.stop = 1;
    pthread_join(th, NULL);
    EXPECT_INT(kills, 8, "kills while the workers pushed");
    EXPECT_INT(w.failed, 0, "pushes that failed");
    int loaded = 0;
    for (int i = 0; i < 2; i++) {
        char *log = cluster_log(&c, i);
        loaded += log && strstr(log, "loaded snapshot");
        free(log);
    }
    printf("# %d pushes acknowledged across %d kills during snapshots; "
           "%d of 2 nodes loaded a snapshot at a restart\n", w.acked, kills,
           loaded);
    check_counters(c.spec, w.acked, w.acked);
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

/* Starts node 0 again (failing with starting when it does not), checks
 * that every oracle key holds want (when), and stops the cluster: the
 * ending of the tests that count what survived a stop or a kill. */
static void restart_and_count(test_cluster *c, const char *starting,
                              int want, const char *when)
{
    if (cluster_restart(c, 0))
        fail_msg("%s", starting);
    expect_count(c->spec, want, when);
    EXPECT_INT(cluster_stop(c), 0, "stops cleanly");
}

/* Runs a shell command; its output (stdout and stderr, malloc'd) and
 * exit status. */
static char *run_out(int *status, const char *cmd)
{
    char full[1200];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, k;
    char *out = malloc(cap);
    while (out && n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, p)) > 0)
        n += k;
    if (out)
        out[n] = '\0';
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* Reads the .npy file at path (format 1.0): its header (which must name
 * type and start its data at a multiple of 64 bytes) into hdr, its data
 * (malloc'd) and their size. */
static char *read_npy(const char *path, char *hdr, size_t hdrlen,
                      size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: %s", path, strerror(errno));
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    if (memcmp(pre, "\x93NUMPY\x01\x00", 8))
        fail_msg("%s: not a .npy file of format 1.0", path);
    size_t hl = pre[8] | (size_t)pre[9] << 8;
    EXPECT_INT((int)((10 + hl) % 64), 0, "%s: data at a multiple of 64", path);
    assert_true(hl < hdrlen);
    assert_int_equal(fread(hdr, 1, hl, f), hl);
    hdr[hl] = '\0';
    EXPECT_INT(hdr[hl - 1], '\n', "%s: the header ends with a newline", path);
    char *data = malloc(1 << 20);
    assert_non_null(data);
    *len = fread(data, 1, 1 << 20, f);
    fclose(f);
    return data;
}

/* Checks the export of table w (50 rows of dim 2, row r pushed as 2r,
 * 2r+1 `times` times) in folder out: every row once over both nodes'
 * files, with headers numpy reads. */
static void expect_exported_w(const char *out, int times)
{
    int total = 0, seen[50] = { 0 };
    for (int n = 0; n < 2; n++) {
        char path[600], hk[256], hv[256], want[64];
        size_t klen, vlen;
        snprintf(path, sizeof path, "%s/w.node%d.keys.npy", out, n);
        uint64_t *keys = (uint64_t *)(void *)read_npy(path, hk, sizeof hk,
                                                      &klen);
        snprintf(path, sizeof path, "%s/w.node%d.npy", out, n);
        float *v = (float *)(void *)read_npy(path, hv, sizeof hv, &vlen);
        size_t nk = klen / 8;
        snprintf(want, sizeof want, "'shape': (%zu,)", nk);
        EXPECT_SUBSTR(hk, "'descr': '<u8'", "keys' type");
        EXPECT_SUBSTR(hk, want, "keys' shape");
        snprintf(want, sizeof want, "'shape': (%zu, 2)", nk);
        EXPECT_SUBSTR(hv, "'descr': '<f4', 'fortran_order': False",
                      "rows' type");
        EXPECT_SUBSTR(hv, want, "rows' shape");
        EXPECT_INT((int)vlen, (int)(nk * 8), "node %d: bytes of rows", n);
        for (size_t i = 0; i < nk; i++) {
            if (keys[i] >= 50 || seen[keys[i]]++ ||
                v[2 * i] != (float)(times * 2 * keys[i]) ||
                v[2 * i + 1] != (float)(times * (2 * keys[i] + 1)))
                fail_msg("node %d: row %llu exported as %g %g (or twice), "
                         "want it pushed %d times", n,
                         (unsigned long long)keys[i], (double)v[2 * i],
                         (double)v[2 * i + 1], times);
        }
        total += (int)nk;
        free(keys);
        free(v);
        snprintf(path, sizeof path, "%s/export.node%d.json", out, n);
        EXPECT_INT(access(path, R_OK), 0, "%s", path);
    }
    EXPECT_INT(total, 50, "rows of w over both nodes, each once");
}

/* Bytes of every file of the nodes' journals in dir, summed. */
static long long journal_bytes(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat '%s'/psd-node*.journal.* | wc -c", dir);
    FILE *p = popen(cmd, "r");
    long long n = -1;
    if (p && fscanf(p, "%lld", &n) != 1)
        n = -1;
    if (p)
        pclose(p);
    return n;
}

/* The model of the resharding test: a dense adam table, a sparse
 * adagrad table (optimizer state and step counters that must move with
 * their rows) and a bsp table (the workers' clock moves with it). */
#define RESHARD_TABLES                                                    \
    "[table.w]\nkind = dense\nrows = 1000\ndim = 4\nupdater = adam\n"     \
    "[table.emb]\ndim = 8\nupdater = adagrad\nlr = 0.1\n"                 \
    "init = uniform -0.1 0.1\n"                                           \
    "[table.b]\ndim = 1\nconsistency = bsp\n"
#define RS_W (1000 * 4)
#define RS_EMB 500
#define RS_ALL (RS_W + RS_EMB * 8 + 1)

static uint64_t rs_key(int k)
{
    return (uint64_t)k * 7919u + 13u;
}

/* Round r's gradients, as worker 0: every row of w, RS_EMB keys of emb,
 * key 7 of b and a clock; then ps_close (the job ran its course). */
static void rs_push(const char *spec, int r)
{
    ps_options o = client_options();
    o.worker = 0;
    ps_client *cl;
    if (ps_open(&cl, spec, &o))
        fail_msg("ps_open as worker 0 of %s", spec);
    static float g[RS_W];
    static uint64_t keys[RS_EMB];
    for (int i = 0; i < RS_W; i++)
        g[i] = (float)((i * 37 + r * 11) % 19) / 7.0f - 1.2f;
    for (int k = 0; k < RS_EMB; k++)
        keys[k] = rs_key(k);
    uint64_t seven = 7;
    float one = (float)(r + 1);
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, ps_table(cl, "w", NULL), 0,
                                         1000, g, NULL, NULL)), PS_OK, "w");
    EXPECT_INT(ps_wait(cl, ps_push(cl, ps_table(cl, "emb", NULL), keys,
                                   RS_EMB, g, NULL, NULL)), PS_OK, "emb");
    EXPECT_INT(ps_wait(cl, ps_push(cl, ps_table(cl, "b", NULL), &seven, 1,
                                   &one, NULL, NULL)), PS_OK, "b");
    EXPECT_INT(ps_clock(cl), PS_OK, "ps_clock");
    ps_close(cl);
}

/* Every row of the model into out (RS_ALL floats). */
static void rs_pull(const char *spec, float *out)
{
    ps_options o = client_options();
    ps_client *cl;
    if (ps_open(&cl, spec, &o))
        fail_msg("ps_open %s", spec);
    static uint64_t keys[RS_EMB];
    for (int k = 0; k < RS_EMB; k++)
        keys[k] = rs_key(k);
    uint64_t seven = 7;
    EXPECT_INT(ps_wait(cl, ps_pull_range(cl, ps_table(cl, "w", NULL), 0,
                                         1000, out, NULL, NULL)), PS_OK, "w");
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ps_table(cl, "emb", NULL), keys,
                                   RS_EMB, out + RS_W, NULL, NULL)), PS_OK,
               "emb");
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ps_table(cl, "b", NULL), &seven, 1,
                                   out + RS_W + RS_EMB * 8, NULL, NULL)),
               PS_OK, "b");
    ps_close(cl);
}

/* psd --reshard says what psd --check would note of the new ini: 4 shards
 * for 5 nodes leave node 4 with no row (it wrote that layout without a
 * word, a trial). */
static void test_reshard_says_the_new_inis_notes(void **state)
{
    (void)state;
    char dir[] = "/tmp/psd-test-rsnote-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[300], b[300], cmd[1200];
    snprintf(a, sizeof a, "%s/a.ini", dir);
    snprintf(b, sizeof b, "%s/b.ini", dir);
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(k ? b : a, "w");
        assert_non_null(f);
        fprintf(f, "[cluster]\nnodes = 127.0.0.1:7071%s\nshards = 4\n"
                "[server]\ndata_dir = %s\n[table.a]\nkind = sparse\n"
                "dim = 1\n", k ? ", 127.0.0.1:7072, 127.0.0.1:7073, "
                "127.0.0.1:7074, 127.0.0.1:7075" : "", dir);
        fclose(f);
    }
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/out' -c '%s' --to '%s'", psd,
             dir, a, b);
    int st;
    char *o = run_out(&st, cmd);
    EXPECT_SUBSTR(o, "psd --reshard: note: ", "the note");
    EXPECT_SUBSTR(o, "b.ini:3: [cluster] shards: 4 shards for 5 nodes: node "
                  "4 holds no row", "what it says");
    free(o);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
}

/* psd --reshard moves a stopped 2-node cluster's model onto 3 nodes, node
 * 0's from its final snapshot and node 1's from its journal alone (kill
 * -9): every row comes back bit for bit, the workers' clock with it, and
 * the same push then gives the same rows on both layouts (the optimizer
 * state and step counters moved with the rows). Refused while a node
 * runs, into a folder with psd files, and to a layout with other shards
 * or tables. */
static void test_reshard_moves_the_model_onto_another_node_count(
    void **state)
{
    (void)state;
    test_cluster a, b;
    if (cluster_start_ex(&a, 2, 4, "workers = 1\n", SERVER
                         "durability = log\nsnapshot_interval = 0\n"
                         RESHARD_TABLES))
        fail_msg("cluster a did not start");
    if (cluster_start_ex(&b, 3, 4, "workers = 1\n", SERVER
                         "durability = log\nsnapshot_interval = 0\n"
                         RESHARD_TABLES))
        fail_msg("cluster b did not start");
    for (int j = 0; j < 3; j++)
        EXPECT_INT(term(&b, j), 0, "stop b's node %d", j);
    rs_push(a.spec, 0);
    rs_push(a.spec, 1);
    static float ref[RS_ALL], got[RS_ALL], again[RS_ALL];
    rs_pull(a.spec, ref);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char cmd[1600], out[400];
    snprintf(out, sizeof out, "%s/resharded", b.dir);
    snprintf(cmd, sizeof cmd, "%s --reshard '%s' -c '%s' --to '%s'", psd,
             out, a.ini, b.ini);
    int st;
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard beside running nodes: %s", o);
    EXPECT_SUBSTR(o, "node 0: a psd (pid ", "a running node refused");
    EXPECT_SUBSTR(o, "stop every node first", "what to do");
    free(o);
    EXPECT_INT(term(&a, 0), 0, "stop a's node 0 (final snapshot)");
    cluster_kill(&a, 1, SIGKILL);
    /* A lock file that cannot be read (here a link to itself) does not
     * tell that no psd runs: the reshard went ahead (a reshard trial). */
    char lock[600], lock_away[620];
    snprintf(lock, sizeof lock, "%s/psd-node0.lock", a.dir);
    snprintf(lock_away, sizeof lock_away, "%s.away", lock);
    EXPECT_INT(rename(lock, lock_away) == 0 && symlink(lock, lock) == 0, 1,
               "%s made a link to itself", lock);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard beside an unreadable lock: %s", o);
    EXPECT_SUBSTR(o, "node 0: cannot tell whether a psd runs on its data "
                  "folder", "refused");
    free(o);
    EXPECT_INT(unlink(lock) == 0 && rename(lock_away, lock) == 0, 1,
               "%s put back", lock);
    /* A segment an earlier job left in the new layout's folder, past
     * every one of the old layout's: the new snapshots must name a
     * segment after it, or node 2 replays it (here: refuses to start). */
    char stale[600];
    snprintf(stale, sizeof stale, "%s/psd-node2.journal.0000000009", b.dir);
    FILE *sf = fopen(stale, "w");
    assert_non_null(sf);
    fputs("not a segment of this layout", sf);
    fclose(sf);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "old node 0: snapshot 1 and ", "node 0's snapshot");
    if (strstr(o, "old node 1: snapshot"))
        fail_msg("node 1 had no snapshot, only its journal: %s", o);
    EXPECT_SUBSTR(o, " journal records from ", "node 1's journal");
    EXPECT_SUBSTR(o, "new node 2: ", "three new nodes");
    EXPECT_SUBSTR(o, "snapshot 2 staged for", "the generation");
    free(o);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard into a folder with snapshots: %s", o);
    EXPECT_SUBSTR(o, "holds psd-node", "refused");
    free(o);
    /* Cut off (kill -9) while node 1's snapshot is written: node 0's
     * was in place, and a start of the new layout took node 1 for a
     * node without data. Now nothing is in place until every node's
     * snapshot is, and a rerun says what the cut-off run left. */
    char cut[1900];
    /* Killed once node 1's snapshot is written (its writer's pause at
     * "renamed" said a second time), not after a time. */
    snprintf(cut, sizeof cut, "PSD_TEST_SNAPSHOT_PAUSE=renamed:30000 %s "
             "--reshard '%s/cut' -c '%s' --to '%s' 2>'%s/cut.log' & p=$!; "
             "for i in $(seq 600); do [ $(grep -c 'at renamed' '%s/cut.log') "
             "-ge 2 ] && break; sleep 0.05; done; kill -9 $p; wait $p; "
             "ls '%s/cut'", psd, b.dir, a.ini, b.ini, b.dir, b.dir, b.dir);
    o = run_out(&st, cut);
    EXPECT_SUBSTR(o, "psd-node0.snap.staged", "node 0 staged: %s", cut);
    if (strstr(o, "psd-node0.snap\n") || strstr(o, "psd-node1.snap\n"))
        fail_msg("a reshard cut off left snapshots in place: %s", o);
    free(o);
    snprintf(cut, sizeof cut, "%s --reshard '%s/cut' -c '%s' --to '%s'",
             psd, b.dir, a.ini, b.ini);
    o = run_out(&st, cut);
    EXPECT_INT(st, 1, "reshard into what a cut-off one left: %s", o);
    EXPECT_SUBSTR(o, ".staged, left by a psd --reshard or --import that was "
                  "cut off before it finished", "refused");
    free(o);
    /* Killed while a snapshot was written, it leaves NAME.staged.tmp.PID
     * too: the files the refusal says to remove are all it left (it said
     * "psd-node*.staged", which matched no such file). */
    snprintf(cmd, sizeof cmd, "%s/cut/psd-node1.snap.staged.tmp.4242", b.dir);
    FILE *tf = fopen(cmd, "w");
    assert_non_null(tf);
    fclose(tf);
    snprintf(cmd, sizeof cmd, "rm '%s/cut/'psd-node0.snap.staged", b.dir);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    o = run_out(&st, cut);
    EXPECT_INT(st, 1, "reshard into a cut-off one's temporary file: %s", o);
    snprintf(cmd, sizeof cmd, "remove %s/cut/psd-node*.staged* and run it "
             "again", b.dir);
    EXPECT_SUBSTR(o, cmd, "the files to remove");
    free(o);
    snprintf(cmd, sizeof cmd, "rm %s/cut/psd-node*.staged* && ! ls "
             "%s/cut/ | grep -q staged", b.dir, b.dir);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    char other[600];
    snprintf(other, sizeof other, "%s/other.ini", b.dir);
    snprintf(cmd, sizeof cmd, "sed 's/^shards = 4/shards = 8/' '%s' > '%s'",
             b.ini, other);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/x' -c '%s' --to '%s'", psd,
             b.dir, a.ini, other);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard to other shards: %s", o);
    EXPECT_SUBSTR(o, "shards = 8 and ", "refused");
    free(o);
    snprintf(cmd, sizeof cmd, "sed 's/^updater = adagrad/updater = adam/' "
             "'%s' > '%s'", b.ini, other);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/y' -c '%s' --to '%s'", psd,
             b.dir, a.ini, other);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard to another updater: %s", o);
    EXPECT_SUBSTR(o, "table 'emb' differs from ", "refused");
    EXPECT_SUBSTR(o, "in its updater", "what differs");
    free(o);
    /* A table added to both files: the old nodes' snapshots hold one
     * table fewer. Said as such, with the way to do it (it advised "psd
     * --reshard onto another node count", the command that failed). */
    char plus_a[600], plus_b[600];
    snprintf(plus_a, sizeof plus_a, "%s/plus_a.ini", b.dir);
    snprintf(plus_b, sizeof plus_b, "%s/plus_b.ini", b.dir);
    char cp[3200];
    snprintf(cp, sizeof cp, "cp '%s' '%s' && cp '%s' '%s' && printf "
             "'[table.extra]\\ndim = 1\\n' | tee -a '%s' >> '%s'", a.ini,
             plus_a, b.ini, plus_b, plus_a, plus_b);
    EXPECT_INT(system(cp), 0, "%s", cp);
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/p' -c '%s' --to '%s'", psd,
             b.dir, plus_a, plus_b);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard with a table added: %s", o);
    EXPECT_SUBSTR(o, "psd --reshard moves the tables as they are; to add or "
                  "remove one, start the nodes once with the new tables",
                  "refused, saying how");
    free(o);
    /* The same nodes at the same addresses (another data_dir): clients
     * would take the moved cluster for the old one and send again pushes
     * it applied (it was taken, and a retransmission applied twice). */
    snprintf(cmd, sizeof cmd, "sed 's#^data_dir = .*#data_dir = %s/z#' '%s' "
             "> '%s'", b.dir, a.ini, other);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/z' -c '%s' --to '%s'", psd,
             b.dir, a.ini, other);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "reshard onto the same nodes: %s", o);
    EXPECT_SUBSTR(o, "names the same 2 nodes at the same addresses", "refused");
    EXPECT_INT(strstr(o, "psd --reshard: psd --reshard") == NULL, 1,
               "said once: %s", o);
    free(o);
    static const struct {
        const char *args, *says;
    } args[] = {
        { "--reshard /tmp/x -c A", "psd: --reshard needs --to NEW, the ini "
          "of the new layout" },
        { "-c A --to B", "psd: --to goes with --reshard DIR" },
        { "", "psd: -c FILE is required (the cluster's ini file)" },
        { "--check -n 0", "psd: -c FILE is required" },
        { "--reshard /tmp/x -c A --to B -n 1", "psd: --reshard moves every "
          "node of a stopped cluster: it goes with none of --check, "
          "--skip-snapshot, --export, -n, --drop-table" },
    };
    for (size_t k = 0; k < sizeof args / sizeof args[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s %s", psd, args[k].args);
        o = run_out(&st, cmd);
        EXPECT_INT(st, 2, "%s: %s", cmd, o);
        EXPECT_SUBSTR(o, args[k].says, "%s", cmd);
        free(o);
    }
    /* b's own files go; the new snapshots take their place. */
    snprintf(cmd, sizeof cmd, "rm -f '%s'/psd-node*.snap "
             "'%s'/psd-node[01].j* && mv '%s'/psd-node*.snap '%s'/", b.dir,
             b.dir, out, b.dir);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    for (int j = 0; j < 3; j++)
        if (cluster_restart(&b, j))
            fail_msg("b's node %d did not start on its new snapshot", j);
    rs_pull(b.spec, got);
    for (int i = 0; i < RS_ALL; i++)
        if (memcmp(&got[i], &ref[i], sizeof got[i]))
            fail_msg("float %d after resharding: %a, want %a", i,
                     (double)got[i], (double)ref[i]);
    for (int i = 0; i < 2; i++)
        if (cluster_restart(&a, i))
            fail_msg("a's node %d did not start again", i);
    rs_push(a.spec, 2);
    rs_push(b.spec, 2);
    rs_pull(a.spec, again);
    rs_pull(b.spec, got);
    for (int i = 0; i < RS_ALL; i++)
        if (memcmp(&got[i], &again[i], sizeof got[i]))
            fail_msg("float %d after a push on both layouts: %a on 3 nodes, "
                     "%a on 2", i, (double)got[i], (double)again[i]);
    EXPECT_FLOAT(got[RS_ALL - 1], 6, "b's key 7: 1 + 2 + 3, one per clock");
    ps_options po = client_options();
    po.worker = 0;
    ps_client *w;
    assert_int_equal(ps_open(&w, b.spec, &po), PS_OK);
    uint64_t at;
    EXPECT_INT(ps_position(w, &at, NULL), PS_OK, "ps_position");
    EXPECT_U64(at, 3, "the workers' clock moved with the model");
    ps_close(w);
    /* Back to 2 nodes: node 2's files stay in b's folder, and a later
     * layout of 3 nodes would load them; said, for every such node (here
     * 38 more), not for files a start does not load. */
    for (int j = 0; j < 3; j++)
        EXPECT_INT(term(&b, j), 0, "stop b's node %d", j);
    for (int k = 3; k <= 40; k++) {
        char extra[600];
        snprintf(extra, sizeof extra, "%s/psd-node%d.snap%s", b.dir,
                 k == 40 ? 2 : k, k == 40 ? ".skipped.123" : "");
        FILE *xf = fopen(extra, "w");
        assert_non_null(xf);
        fclose(xf);
    }
    snprintf(cmd, sizeof cmd, "%s --reshard '%s/shrunk' -c '%s' --to '%s'",
             psd, b.dir, b.ini, a.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "holds files of node 2, which ", "node 2's files");
    EXPECT_SUBSTR(o, "holds files of node 39, which ", "node 39's");
    int named = 0;
    for (const char *q = o; (q = strstr(q, "holds files of node")); q++)
        named++;
    EXPECT_INT(named, 38, "nodes named (2..39, each once)");
    EXPECT_SUBSTR(o, "put each of psd-node0.snap .. psd-node1.snap in that "
                  "node's data_dir", "what to do");
    free(o);
    cluster_stop(&a);
    cluster_stop(&b);
}

/* Writes an .npy file of n rows of dim values (0: 1-D) of type descr
 * ("<f4", "<u8", "<i8"), as numpy.save does (version 1.0). */
static void write_npy(const char *path, const char *descr, uint64_t n,
                      unsigned dim, const void *data, size_t bytes)
{
    char dict[160], shape[64];
    if (dim)
        snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)n,
                 dim);
    else
        snprintf(shape, sizeof shape, "(%llu,)", (unsigned long long)n);
    int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': "
                       "False, 'shape': %s, }", descr, shape);
    size_t pad = (64 - (10 + (size_t)len + 1) % 64) % 64, hl = len + pad + 1;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              (unsigned char)(hl & 0xff),
                              (unsigned char)(hl >> 8) };
    fwrite(pre, 1, 10, f);
    fwrite(dict, 1, (size_t)len, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    if (bytes)
        fwrite(data, 1, bytes, f);
    assert_int_equal(fclose(f), 0);
}

/* The tables of the import test's second cluster: w's updater is sgd
 * there (adam where its rows were trained): an import takes weights. */
#define IMPORT_TABLES                                                     \
    "[table.w]\nkind = dense\nrows = 1000\ndim = 4\nupdater = sgd\n"      \
    "[table.emb]\ndim = 8\nupdater = adagrad\nlr = 0.1\n"                 \
    "init = uniform -0.1 0.1\n"                                           \
    "[table.b]\ndim = 1\nconsistency = bsp\n"                            \
    "[table.f]\ndim = 2\nupdater = ftrl\nlr = 0.1\nl1 = 0.01\n"

/* Starts and stops cluster c (nodes nodes, shards shards) so that its
 * ini exists and its nodes can be restarted, and empties its data_dir. */
static void stopped_cluster(test_cluster *c, int nodes, int shards,
                            const char *tables)
{
    char server[600], cmd[600];
    snprintf(server, sizeof server, "%s%s", SERVER, tables);
    if (cluster_start_ex(c, nodes, shards, "workers = 1\n", server))
        fail_msg("cluster did not start");
    for (int j = 0; j < nodes; j++)
        EXPECT_INT(term(c, j), 0, "stop node %d", j);
    snprintf(cmd, sizeof cmd, "rm -f '%s'/psd-node*", c->dir);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
}

/* Runs shell command alter (NULL: none), which changes an export, then
 * the import cmd, which must fail (status 1) saying want. */
static void import_refused(const char *alter, const char *cmd,
                           const char *want, const char *what)
{
    if (alter)
        EXPECT_INT(system(alter), 0, "%s", alter);
    int st;
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of %s: %s", what, o);
    EXPECT_SUBSTR(o, want, "an import of %s", what);
    free(o);
}

/* psd --import starts a cluster from .npy files: an export of a 2-node
 * cluster (4 shards, w trained with adam) into 3 nodes with 8 shards and
 * sgd, every weight bit for bit; arrays a user wrote (a dense table's
 * rows in order, a sparse table's keys as int64), the rows they do not
 * name at their init. Refused into a folder holding the node's files,
 * and for each kind of bad array, with nothing written. */
static void test_import_starts_a_cluster_from_npy_files(void **state)
{
    (void)state;
    test_cluster a, b, c;
    if (cluster_start_ex(&a, 2, 4, "workers = 1\n", SERVER
                         "durability = log\n" RESHARD_TABLES))
        fail_msg("cluster a did not start");
    stopped_cluster(&b, 3, 8, IMPORT_TABLES);
    stopped_cluster(&c, 1, 4, IMPORT_TABLES);
    rs_push(a.spec, 0);
    rs_push(a.spec, 1);
    static float ref[RS_ALL], got[RS_ALL];
    rs_pull(a.spec, ref);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char cmd[1600], exp[400];
    int st;
    snprintf(exp, sizeof exp, "%s/export", a.dir);
    /* The folder held an earlier export of 3 nodes: a whole export
     * replaces every node's files, node 2's too (they stayed, and the
     * folder read as clusters of two node counts), and nothing else. */
    EXPECT_INT(mkdir(exp, 0700), 0, "mkdir %s", exp);
    static const char *const old_files[] = {
        "export.node2.json", "w.node2.npy", "emb.node2.keys.npy",
        "emb.node2.npy", "notes.node2.txt", "mine.npy", "export.json"
    };
    for (int k = 0; k < 7; k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", exp, old_files[k]);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s'", psd, exp, a.ini);
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    free(o);
    for (int k = 0; k < 7; k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", exp, old_files[k]);
        EXPECT_INT(access(p, F_OK) == 0, k >= 4, "%s after the export", p);
        if (k >= 4)
            unlink(p);
    }
    /* An export of 1 of its 2 nodes (psd --export -n 0, node 1's files
     * not yet gathered) was taken: node 1's rows started from init. */
    char m1[600], m1away[600];
    snprintf(m1, sizeof m1, "%s/export.node1.json", exp);
    snprintf(m1away, sizeof m1away, "%s/node1.json.away", a.dir);
    EXPECT_INT(rename(m1, m1away), 0, "move %s aside", m1);
    snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s'", psd, exp, b.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of half an export: %s", o);
    EXPECT_SUBSTR(o, "holds the export of 1 of its 2 nodes (no "
                  "export.node1.json, among others): the rows of the nodes "
                  "missing would start from init", "refused");
    free(o);
    /* No manifest at all, but the mark of an export of node 0 still
     * writing (killed there: an operators' trial's kill left a table and
     * a half, imported with status 0 as arrays of one's own). Without the
     * mark, files whose manifests were moved aside are imported, as
     * README says. */
    char m0[600], m0away[600], mark[600];
    snprintf(m0, sizeof m0, "%s/export.node0.json", exp);
    snprintf(m0away, sizeof m0away, "%s/node0.json.away", a.dir);
    snprintf(mark, sizeof mark, "%s/export.node0.partial", exp);
    EXPECT_INT(access(mark, F_OK) != 0, 1, "a whole export leaves no mark");
    EXPECT_INT(rename(m0, m0away), 0, "move %s aside", m0);
    FILE *mf = fopen(mark, "w");
    assert_non_null(mf);
    fclose(mf);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of an export killed part way: %s", o);
    EXPECT_SUBSTR(o, "holds export.node0.partial: psd --export of node 0 "
                  "did not finish", "refused");
    free(o);
    EXPECT_INT(unlink(mark), 0, "remove %s", mark);
    EXPECT_INT(rename(m0away, m0), 0, "put %s back", m0);
    EXPECT_INT(rename(m1away, m1), 0, "put %s back", m1);
    /* Every manifest there, one of the files it lists not (a copy left
     * it out): that node's rows of the table started from init, with
     * status 0 and no word. */
    char e1[600], e1away[600];
    snprintf(e1, sizeof e1, "%s/emb.node1.npy", exp);
    snprintf(e1away, sizeof e1away, "%s/emb.node1.npy.away", a.dir);
    EXPECT_INT(rename(e1, e1away), 0, "move %s aside", e1);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of an export missing a file: %s", o);
    EXPECT_SUBSTR(o, "/export.node1.json lists emb.node1.npy, which ",
                  "refused");
    free(o);
    EXPECT_INT(rename(e1away, e1), 0, "put %s back", e1);
    /* One replaced by a file of other rows (here none): node 1's rows of
     * emb started from init, status 0. */
    EXPECT_INT(rename(e1, e1away), 0, "move %s aside", e1);
    char ek1[600], ek1away[600];
    snprintf(ek1, sizeof ek1, "%s/emb.node1.keys.npy", exp);
    snprintf(ek1away, sizeof ek1away, "%s/emb.node1.keys.npy.away", a.dir);
    EXPECT_INT(rename(ek1, ek1away), 0, "move %s aside", ek1);
    write_npy(e1, "<f4", 0, 8, NULL, 0);
    write_npy(ek1, "<u8", 0, 0, NULL, 0);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of an export with a file replaced: %s", o);
    EXPECT_SUBSTR(o, "/emb.node1.npy holds 0 rows, and ", "refused");
    EXPECT_SUBSTR(o, "/export.node1.json lists it with ", "refused");
    free(o);
    EXPECT_INT(rename(e1away, e1), 0, "put %s back", e1);
    EXPECT_INT(rename(ek1away, ek1), 0, "put %s back", ek1);
    /* One whose rows changed since the export, as many as listed (a byte
     * flipped; another export's file of the same rows): imported without
     * a word (a reshard trial). The manifest's CRC-32 tells. */
    char flip[3200];
    snprintf(flip, sizeof flip, "cp '%s' '%s' && printf '\\125' | dd "
             "of='%s' bs=1 seek=$(($(stat -c %%s '%s') - 1)) conv=notrunc "
             "status=none", e1, e1away, e1, e1);
    import_refused(flip, cmd, "/emb.node1.npy: its rows are not those "
                   "export.node1.json lists (their CRC-32 is ",
                   "an export with a byte changed");
    EXPECT_INT(rename(e1away, e1), 0, "put %s back", e1);
    /* A file beside the manifests that none lists (another export's, or
     * one an earlier export of more nodes left): its rows were added to
     * the model (a review). */
    char stray[600], stray_keys[600];
    snprintf(stray, sizeof stray, "%s/emb.node2.npy", exp);
    snprintf(stray_keys, sizeof stray_keys, "%s/emb.node2.keys.npy", exp);
    write_npy(stray, "<f4", 0, 8, NULL, 0);
    write_npy(stray_keys, "<u8", 0, 0, NULL, 0);
    import_refused(NULL, cmd, "/emb.node2.npy: no manifest there "
                   "(export.node*.json) lists it",
                   "an export beside a file no manifest lists");
    EXPECT_INT(unlink(stray) == 0 && unlink(stray_keys) == 0, 1, "rm %s",
               stray);
    /* A CRC-32 that is not a number turned the check off (a review). */
    snprintf(flip, sizeof flip, "cp '%s' '%s.orig' && sed -i 's/"
             "\"values_crc32\": [0-9]*/\"values_crc32\": \"x\"/' '%s'",
             m1, m1, m1);
    import_refused(flip, cmd, "with a values_crc32 that is not a CRC-32",
                   "a manifest with a CRC-32 garbled");
    snprintf(flip, sizeof flip, "mv '%s.orig' '%s'", m1, m1);
    EXPECT_INT(system(flip), 0, "%s", flip);
    /* A manifest naming a file by a path: refused whatever the table
     * (such an entry was passed over, so its table's file could be
     * gone). */
    char cp[2000];
    snprintf(cp, sizeof cp, "cp '%s' '%s.orig' && sed -i "
             "'s|\"values\": \"emb.node1.npy\"|\"values\": "
             "\"../emb.node1.npy\"|' '%s'", m1, m1, m1);
    import_refused(cp, cmd, "/export.node1.json lists \"../emb.node1.npy\", "
                   "which is not a file name of ", "a manifest naming a path");
    /* A manifest cut short (a copy that stopped in it): the files of the
     * tables it no longer listed were left out, their rows from init,
     * with status 0 (a reshard trial). Here it loses its "]}". */
    snprintf(cp, sizeof cp, "head -c -3 '%s.orig' > '%s'", m1, m1);
    import_refused(cp, cmd, "/export.node1.json is cut short (it does not "
                   "end as psd --export ends a manifest",
                   "a manifest cut short");
    /* A FIFO in a manifest's place: refused, not waited on for good. */
    EXPECT_INT(unlink(m1), 0, "rm %s", m1);
    EXPECT_INT(mkfifo(m1, 0600), 0, "mkfifo %s", m1);
    char tcmd[1700];
    snprintf(tcmd, sizeof tcmd, "timeout 20 %s", cmd);
    o = run_out(&st, tcmd);
    EXPECT_INT(st, 1, "an import with a FIFO for a manifest: %s", o);
    EXPECT_SUBSTR(o, "or unreadable", "refused");
    free(o);
    snprintf(cp, sizeof cp, "rm '%s' && mv '%s.orig' '%s'", m1, m1, m1);
    EXPECT_INT(system(cp), 0, "%s", cp);
    /* An export of an older psd (one export.json) missing a node's file
     * was imported, that node's rows from init. */
    char old[600];
    snprintf(old, sizeof old, "%s/export.json", exp);
    EXPECT_INT(rename(m0, m0away), 0, "move %s aside", m0);
    EXPECT_INT(rename(m1, m1away), 0, "move %s aside", m1);
    EXPECT_INT(rename(e1, e1away), 0, "move %s aside", e1);
    FILE *of = fopen(old, "w");
    assert_non_null(of);
    /* Compact, as a JSON tool may rewrite it (the check looked for
     * psd's own spacing only). */
    fputs("{\"format\":1,\"nodes\":2,\"shards\":4,\"snapshots\":[],"
          "\"tables\":[{\"name\":\"emb\",\"kind\":\"sparse\",\"files\":"
          "[{\"node\":1,\"keys\":\"emb.node1.keys.npy\",\"values\":"
          "\"emb.node1.npy\",\"count\":1}]}]}\n", of);
    fclose(of);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import of an older export missing a file: %s", o);
    EXPECT_SUBSTR(o, "/export.json lists emb.node1.npy, which ", "refused");
    EXPECT_SUBSTR(o, "move export.json aside", "refused");
    free(o);
    EXPECT_INT(unlink(old), 0, "rm %s", old);
    EXPECT_INT(rename(e1away, e1), 0, "put %s back", e1);
    EXPECT_INT(rename(m0away, m0), 0, "put %s back", m0);
    EXPECT_INT(rename(m1away, m1), 0, "put %s back", m1);
    /* Files of a table the ini does not have are not imported, so they
     * may be gone: a manifest listing one is no refusal (it was). */
    snprintf(cmd, sizeof cmd, "sed -i 's/^{\"format\": 1, /{\"format\": 1, "
             "\"gone\": {\"keys\": \"gone.node1.keys.npy\", \"values\": "
             "\"gone.node1.npy\"}, /' '%s'", m1);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s'", psd, exp, b.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "psd --import: node 2: ", "three nodes");
    EXPECT_SUBSTR(o, "; snapshot 1 written to ", "what it wrote");
    free(o);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "an import into a folder with snapshots: %s", o);
    EXPECT_SUBSTR(o, "holds its snapshot or journal: psd --import starts a "
                  "model and never replaces one", "refused");
    free(o);
    for (int j = 0; j < 3; j++)
        if (cluster_restart(&b, j))
            fail_msg("b's node %d did not start on its import", j);
    rs_pull(b.spec, got);
    for (int i = 0; i < RS_ALL; i++)
        if (memcmp(&got[i], &ref[i], sizeof got[i]))
            fail_msg("float %d after the import: %a, want %a", i,
                     (double)got[i], (double)ref[i]);
    cluster_stop(&a);
    cluster_stop(&b);

    /* Arrays of one's own, and what is refused. */
    char dir[400], path[600];
    snprintf(dir, sizeof dir, "%s/mine", c.dir);
    EXPECT_INT(mkdir(dir, 0700), 0, "mkdir %s", dir);
    static float w[1000 * 4], e[3 * 8];
    for (int i = 0; i < 4000; i++)
        w[i] = (float)i / 8;
    for (int i = 0; i < 24; i++)
        e[i] = -(float)i;
    int64_t ek[3] = { 5, 1 << 20, 77 };
    snprintf(path, sizeof path, "%s/w.npy", dir);
    write_npy(path, "<f4", 1000, 4, w, sizeof w);
    snprintf(path, sizeof path, "%s/emb.keys.npy", dir);
    write_npy(path, "<i8", 3, 0, ek, sizeof ek);
    snprintf(path, sizeof path, "%s/emb.npy", dir);
    write_npy(path, "<f4", 3, 8, e, sizeof e);
    snprintf(path, sizeof path, "%s/gone.npy", dir);
    write_npy(path, "<f4", 1, 1, e, 4);
    snprintf(path, sizeof path, "%s/lone.keys.npy", dir);
    write_npy(path, "<u8", 0, 0, NULL, 0);
    /* An ftrl table's weights stand after a push (its z is set for
     * them: with z = 0 the first push all but wiped them). */
    float fw[2] = { 0.5f, -0.25f };
    uint64_t fk = 9;
    snprintf(path, sizeof path, "%s/f.npy", dir);
    write_npy(path, "<f4", 1, 2, fw, sizeof fw);
    snprintf(path, sizeof path, "%s/f.keys.npy", dir);
    write_npy(path, "<u8", 1, 0, &fk, sizeof fk);
    static const struct {
        const char *file, *descr;
        uint64_t n;
        unsigned dim;
        int64_t value;
        const char *says;
    } bad[] = {
        { "emb.keys.npy", "<i8", 3, 0, -4, "emb.keys.npy: row 1: key -4 is "
          "negative (keys of 2^63 and more go as uint64: "
          "ids.view(np.uint64))" },
        { "emb.keys.npy", "<i8", 3, 0, 5, "emb.keys.npy: row 1: key 5 of "
          "table 'emb' is given twice (here or in another file)" },
        { "emb.keys.npy", "<i8", 2, 0, 9, "emb.keys.npy: keys are a 1-D "
          "array of 3 uint64 or int64, one per row of " },
        { "emb.npy", "<f4", 3, 4, 0, "emb.npy: table 'emb' has rows of 8 "
          "float32 values; this array is float32 with shape (3, 4)" },
        { "w.npy", "<f4", 999, 4, 0, "w.npy: 999 rows, and table 'w' has "
          "1000: an array without keys holds every row of a dense table" },
        { "w.npy", "<f8", 1000, 4, 0, "its type is '<f8'" },
        { "w.keys.npy", "<u8", 1000, 0, 1000, "w.keys.npy: row 1: key 1000 "
          "is past table 'w' (rows = 1000)" },
        { "w.npy", "<f4", 1000, 4, 0x7fc00000, "w.npy: row 1 (key 1) holds "
          "nan, and table 'w' refuses values that are not finite" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        /* Each case spoils one file (the second row), then puts it back. */
        static char buf[1000 * 4 * 8];
        size_t item = bad[k].descr[2] == '4' ? 4 : 8;
        size_t bytes = (size_t)bad[k].n * (bad[k].dim ? bad[k].dim : 1) *
                       item;
        memset(buf, 0, sizeof buf);
        if (!strcmp(bad[k].file, "emb.keys.npy"))
            memcpy(buf, ek, sizeof ek);
        else if (!strcmp(bad[k].file, "w.npy") && item == 4)
            memcpy(buf, w, sizeof w);
        if (!strcmp(bad[k].file, "w.keys.npy"))
            for (uint64_t r = 0; r < 1000; r++)
                memcpy(buf + r * 8, &r, 8);
        if (bad[k].value) {
            if (item == 8)
                memcpy(buf + 8, &bad[k].value, 8);
            else {
                uint32_t v = (uint32_t)bad[k].value;
                memcpy(buf + 4 * 4, &v, 4);
            }
        }
        snprintf(path, sizeof path, "%s/%s", dir, bad[k].file);
        write_npy(path, bad[k].descr, bad[k].n, bad[k].dim, buf, bytes);
        snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s'", psd, dir,
                 c.ini);
        o = run_out(&st, cmd);
        EXPECT_INT(st, 1, "case %zu: %s", k, o);
        EXPECT_SUBSTR(o, bad[k].says, "case %zu", k);
        free(o);
        if (!strcmp(bad[k].file, "w.keys.npy"))
            unlink(path);
        else if (!strcmp(bad[k].file, "w.npy"))
            write_npy(path, "<f4", 1000, 4, w, sizeof w);
        else if (!strcmp(bad[k].file, "emb.npy"))
            write_npy(path, "<f4", 3, 8, e, sizeof e);
        else
            write_npy(path, "<i8", 3, 0, ek, sizeof ek);
        snprintf(path, sizeof path, "%s/psd-node0.snap", c.dir);
        EXPECT_INT(access(path, F_OK), -1, "case %zu wrote a snapshot", k);
    }
    /* Keys that are a link to nothing are not "no keys". */
    snprintf(path, sizeof path, "%s/w.keys.npy", dir);
    EXPECT_INT(symlink("/nonexistent/w.keys.npy", path), 0, "symlink");
    snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s'", psd, dir, c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "a dangling keys link: %s", o);
    EXPECT_SUBSTR(o, "w.keys.npy: No such file or directory", "said");
    free(o);
    unlink(path);
    /* A FIFO is refused, not waited on. */
    snprintf(path, sizeof path, "%s/w.npy", dir);
    unlink(path);
    EXPECT_INT(mkfifo(path, 0600), 0, "mkfifo");
    snprintf(cmd, sizeof cmd, "timeout 20 %s --import '%s' -c '%s'", psd, dir,
             c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "a FIFO: %s", o);
    EXPECT_SUBSTR(o, "w.npy: not a regular file", "a FIFO");
    free(o);
    unlink(path);
    write_npy(path, "<f4", 1000, 4, w, sizeof w);
    snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s'", psd, dir, c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "gone.npy: ", "a file of no table");
    EXPECT_SUBSTR(o, "has no table 'gone': not imported", "said");
    EXPECT_SUBSTR(o, "table 'b': no ", "a table without files");
    EXPECT_SUBSTR(o, "lone.keys.npy: no ", "keys without rows");
    EXPECT_SUBSTR(o, "node 0: 1000 rows of 'w', 3 rows of 'emb', 0 rows of "
                  "'b', 1 row of 'f'; snapshot 1 written", "what it did");
    free(o);
    if (cluster_restart(&c, 0))
        fail_msg("c's node 0 did not start on its import");
    ps_options po = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &po), PS_OK);
    static float back[1000 * 4];
    EXPECT_INT(ps_wait(cl, ps_pull_range(cl, ps_table(cl, "w", NULL), 0, 1000,
                                         back, NULL, NULL)), PS_OK, "pull w");
    EXPECT_INT(memcmp(back, w, sizeof w), 0, "w as written");
    uint64_t keys[4] = { 5, 1 << 20, 77, 6 };
    float eb[4 * 8];
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ps_table(cl, "emb", NULL), keys, 4, eb,
                                   NULL, NULL)), PS_OK, "pull emb");
    EXPECT_INT(memcmp(eb, e, sizeof e), 0, "emb's three keys as written");
    int init = 1;
    for (int d = 0; d < 8; d++)
        init &= eb[24 + d] >= -0.1f && eb[24 + d] < 0.1f && eb[24 + d] != 0;
    EXPECT_INT(init, 1, "key 6, in no file, at its init");
    float fg[2] = { 0.001f, 0.001f }, fb[2];
    int ft = ps_table(cl, "f", NULL);
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ft, &fk, 1, fb, NULL, NULL)), PS_OK,
               "pull f");
    EXPECT_INT(memcmp(fb, fw, sizeof fw), 0, "f as written");
    /* A gradient of zero leaves them bit for bit (z from the formula in
     * double was an ulp off for 0.5: it read 0.49999994 after the push). */
    float zero[2] = { 0, 0 };
    EXPECT_INT(ps_wait(cl, ps_push(cl, ft, &fk, 1, zero, NULL, NULL)), PS_OK,
               "push f, zeros");
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ft, &fk, 1, fb, NULL, NULL)), PS_OK,
               "pull f");
    if (memcmp(fb, fw, sizeof fw))
        fail_msg("ftrl's imported weights after a push of zeros: %.9g %.9g, "
                 "want %.9g %.9g", (double)fb[0], (double)fb[1],
                 (double)fw[0], (double)fw[1]);
    EXPECT_INT(ps_wait(cl, ps_push(cl, ft, &fk, 1, fg, NULL, NULL)), PS_OK,
               "push f");
    EXPECT_INT(ps_wait(cl, ps_pull(cl, ft, &fk, 1, fb, NULL, NULL)), PS_OK,
               "pull f");
    if (fabsf(fb[0] - 0.5f) > 0.01f || fabsf(fb[1] + 0.25f) > 0.01f)
        fail_msg("ftrl's imported weights after one small push: %g %g, want "
                 "about 0.5 and -0.25", (double)fb[0], (double)fb[1]);
    ps_close(cl);
    cluster_stop(&c);

    /* -n checks the other hosts' rows too, so that they agree: a NaN in
     * a row of node 1 stops the import of node 0. */
    test_cluster d;
    stopped_cluster(&d, 2, 4, IMPORT_TABLES);
    snprintf(dir, sizeof dir, "%s/nan", d.dir);
    EXPECT_INT(mkdir(dir, 0700), 0, "mkdir %s", dir);
    uint32_t nan = 0x7fc00000;
    memcpy(&w[300 * 4], &nan, 4);    /* row 300: shard 1, node 1 */
    snprintf(path, sizeof path, "%s/w.npy", dir);
    write_npy(path, "<f4", 1000, 4, w, sizeof w);
    snprintf(cmd, sizeof cmd, "%s --import '%s' -c '%s' -n 0", psd, dir,
             d.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "-n 0 with a NaN in node 1's rows: %s", o);
    EXPECT_SUBSTR(o, "w.npy: row 300 (key 300) holds nan", "said");
    free(o);
    snprintf(path, sizeof path, "%s/psd-node0.snap", d.dir);
    EXPECT_INT(access(path, F_OK), -1, "node 0's snapshot written");
    cluster_stop(&d);
}

/* psd --export beside a live node without a journal holds the node's
 * last snapshot, however much it trained since: it says so, naming the
 * psd that runs (seen by F_OFD_GETLK, never by taking its lock, which a
 * psd starting then would find taken); once the node stopped (its final
 * snapshot written), not. */
static void test_export_beside_a_live_snapshot_node_says_how_old(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 1, &a, &failed);
    pid_t p = spawn(psctl_save, c.spec);
    int st;
    waitpid(p, &st, 0);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0, "psctl save");
    oracle_run_many(c.spec, &o, 1, 10, 1, &a, &failed);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char cmd[1200], want[200];
    snprintf(cmd, sizeof cmd, "%s --export '%s/model' -c '%s'", psd, c.dir,
             c.ini);
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, out);
    snprintf(want, sizeof want, "node 0: a psd (pid %d) runs on this data "
             "folder with durability = snapshot: the export holds snapshot "
             "1, written ", (int)c.pid[0]);
    EXPECT_SUBSTR(out, want, "the export beside the live node");
    EXPECT_SUBSTR(out, "not what the node took since (psctl save first",
                  "what to do");
    if (strstr(out, "no snapshot"))
        fail_msg("a node with a snapshot said to have none: %s", out);
    free(out);
    EXPECT_INT(term(&c, 0), 0, "stop");
    out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, out);
    if (!out || strstr(out, "runs on this data folder"))
        fail_msg("the export of a stopped node: %s", out ? out : "");
    free(out);
    cluster_stop(&c);
}

/* A bsp table's sums of a clock not ended are not in an export (the
 * README says so): the export counts the rows it leaves out. */
static void test_export_counts_the_bsp_sums_it_leaves_out(void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start_ex(&c, 1, 4, "workers = 2\n", SERVER
                         "[table.b]\ndim = 1\nconsistency = bsp\n"))
        fail_msg("cluster did not start");
    ps_options o = client_options();
    o.worker = 0;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    uint64_t keys[3] = { 1, 2, 3 };
    float g[3] = { 1, 2, 3 };
    EXPECT_INT(ps_wait(cl, ps_push(cl, 0, keys, 3, g, NULL, NULL)), PS_OK,
               "push");
    ps_close(cl);                /* worker 1 never came: the clock is open */
    EXPECT_INT(term(&c, 0), 0, "stop");
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s --export '%s/model' -c '%s'", psd, c.dir,
             c.ini);
    int st;
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, out);
    EXPECT_SUBSTR(out, "node 0: table 'b' (bsp) holds the sums of 3 rows of "
                  "a clock not ended: not in the export (psctl end-job",
                  "the export");
    free(out);
    cluster_stop(&c);
}

/* psd --export writes each node's rows, as a restart would load them
 * (snapshot, then the journal after it) but reading only, as .npy files
 * with headers numpy reads (tests/python reads them with numpy itself):
 * from the journal alone, then from a snapshot and the pushes after it,
 * beside live nodes whose journal it leaves as it is; node by node (-n)
 * into one folder; what it cannot do is refused with a reason. */
/* psd --export DIR [-n 0] -c ini started, stopped with SIGTERM as soon
 * as it writes node 0's files (its staging folder stands); its wait
 * status. */
static int export_stopped(const test_cluster *c, const char *out, int one)
{
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char mark[600];
    snprintf(mark, sizeof mark, "%s/.export.node0.staging", out);
    pid_t p = fork();
    if (p == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        if (one)
            execl(psd, psd, "--export", out, "-n", "0", "-c", c->ini,
                  (char *)NULL);
        else
            execl(psd, psd, "--export", out, "-c", c->ini, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 5000 && access(mark, F_OK); i++)
        usleep(1000);
    kill(p, SIGTERM);
    int st = 0;
    waitpid(p, &st, 0);
    return st;
}

/* An export's manifest names the ini it was made under by an absolute
 * path: "cluster.ini", as typed, meant nothing once the export was
 * copied elsewhere (an upgrade trial). */
static void test_an_exports_manifest_names_its_ini_absolutely(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER);
    EXPECT_INT(term(&c, 0), 0, "stop");
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char here[1024], bin[1100], cmd[2600];
    assert_non_null(getcwd(here, sizeof here));
    snprintf(bin, sizeof bin, "%s%s%s", psd[0] == '/' ? "" : here,
             psd[0] == '/' ? "" : "/", psd);
    const char *base = strrchr(c.ini, '/') + 1;
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' --export exp -c '%s' "
             "2>/dev/null", c.dir, bin, base);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    char manifest[600], want[700];
    snprintf(manifest, sizeof manifest, "%s/exp/export.node0.json", c.dir);
    FILE *f = fopen(manifest, "r");
    assert_non_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    snprintf(want, sizeof want, "\"ini\": \"%s\"", c.ini);
    EXPECT_SUBSTR(text, want, "the ini's absolute path");
    cluster_stop(&c);
}

/* An export stopped by a signal (Ctrl-C, SIGTERM) left the files it had
 * written, which psd --import took for a model (an operators' trial);
 * one of a single node (-n) stopped while the node was read, or while
 * it wrote (a reshard trial), removed that node's earlier export, whole
 * till then (review). It dies of the signal, leaving nothing of its own
 * and the earlier files whole. */
static void test_an_export_stopped_by_a_signal_leaves_nothing(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n"
          "[table.big]\nkind = dense\nrows = 1048576\ndim = 8\n");
    kill(c.pid[0], SIGTERM);
    EXPECT_INT(cluster_wait_exit(&c, 0, 20000), 0, "a clean stop");
    char out[400];
    snprintf(out, sizeof out, "%s/stopped", c.dir);
    int st = export_stopped(&c, out, 0);
    EXPECT_INT(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, 1,
               "died of SIGTERM (status %#x)", st);
    EXPECT_INT(access(out, F_OK) != 0, 1, "%s: the folder it made goes",
               out);
    /* A whole export, then one of node 0 stopped at once. */
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char cmd[1200], manifest[600], mark[600];
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s' 2>/dev/null", psd,
             out, c.ini);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(manifest, sizeof manifest, "%s/export.node0.json", out);
    snprintf(mark, sizeof mark, "%s/export.node0.partial", out);
    char table[600], staging[600];
    snprintf(table, sizeof table, "%s/big.node0.npy", out);
    snprintf(staging, sizeof staging, "%s/.export.node0.staging", out);
    struct stat before, after;
    EXPECT_INT(stat(table, &before), 0, "%s", table);
    st = export_stopped(&c, out, 1);
    EXPECT_INT(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, 1,
               "-n 0 died of SIGTERM (status %#x)", st);
    EXPECT_INT(access(manifest, F_OK), 0, "the earlier manifest is kept");
    EXPECT_INT(access(mark, F_OK) != 0, 1, "no mark beside it");
    EXPECT_INT(access(staging, F_OK) != 0, 1, "no staging folder left");
    EXPECT_INT(stat(table, &after), 0, "%s", table);
    EXPECT_INT(before.st_ino == after.st_ino &&
               before.st_size == after.st_size, 1,
               "%s is the earlier export's", table);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
}

static void test_export_writes_each_nodes_rows_as_npy_files(void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start_ex(&c, 2, 4, "workers = 1\n", SERVER
                         "durability = log\nfsync = no\n"
                         "[table.w]\nkind = dense\nrows = 50\ndim = 2\n"
                         TABLES))
        fail_msg("cluster did not start");
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    char out[400], cmd[1200];
    snprintf(out, sizeof out, "%s/model", c.dir);
    int st;
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s'", psd, out, c.ini);
    ps_options opt = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &opt), PS_OK);
    int t = ps_table(cl, "w", NULL);
    float rows[100];
    for (int i = 0; i < 100; i++)
        rows[i] = (float)i;
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, t, 0, 50, rows, NULL, NULL)),
               PS_OK, "push");
    /* No snapshot yet: the journal holds the push. */
    long long before = journal_bytes(c.dir);
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "node 0: no snapshot; ", "from the journal");
    EXPECT_SUBSTR(o, "2 of 2 nodes written to", "what it says");
    free(o);
    expect_exported_w(out, 1);
    /* The whole model, private as data_dir's files (umask 022 left it
     * readable by every local user). */
    static const char *const mine[] = { "", "/w.node0.npy",
                                        "/w.node0.keys.npy",
                                        "/export.node1.json" };
    for (size_t k = 0; k < sizeof mine / sizeof mine[0]; k++) {
        char fp[600];
        struct stat fs;
        snprintf(fp, sizeof fp, "%s%s", out, mine[k]);
        assert_int_equal(stat(fp, &fs), 0);
        EXPECT_INT((int)(fs.st_mode & 077), 0, "%s: mode %o", fp,
                   (unsigned)(fs.st_mode & 0777));
    }
    EXPECT_INT((int)(journal_bytes(c.dir) - before), 0,
               "journal bytes changed by the export");
    /* A snapshot, then a push in the journal only: both are in. */
    pid_t p = spawn(psctl_save, c.spec);
    waitpid(p, &st, 0);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0, "psctl save");
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, t, 0, 50, rows, NULL, NULL)),
               PS_OK, "push after the snapshot");
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "node 1: snapshot 1 of ", "from the snapshot");
    EXPECT_SUBSTR(o, "journal records after it", "and the journal");
    free(o);
    expect_exported_w(out, 2);
    /* Node by node into one folder (as from several hosts): each run
     * replaces that node's files only. */
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, t, 0, 50, rows, NULL, NULL)),
               PS_OK, "a third push");
    ps_close(cl);
    for (int n = 0; n < 2; n++) {
        snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s' -n %d", psd, out,
                 c.ini, n);
        o = run_out(&st, cmd);
        EXPECT_INT(st, 0, "%s: %s", cmd, o);
        EXPECT_SUBSTR(o, "1 of 2 nodes written to", "what it says");
        free(o);
    }
    expect_exported_w(out, 3);
    /* A whole export replaces every node's earlier files: a table dropped
     * since leaves none behind. */
    char stale[600];
    snprintf(stale, sizeof stale, "%s/gone.node1.keys.npy", out);
    FILE *sf = fopen(stale, "w");
    assert_non_null(sf);
    fclose(sf);
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s'", psd, out, c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "%s: %s", cmd, o);
    free(o);
    EXPECT_INT(access(stale, F_OK), -1, "%s after a new export", stale);
    expect_exported_w(out, 3);
    /* An export that fails takes back what it wrote: node 1's snapshot
     * damaged, node 0's tables were left in a new folder with no export
     * that named them (a disk that filled left gigabytes so). A node's
     * own export (-n) that fails before it writes keeps that node's
     * earlier files whole. */
    char snap[300], keep[320], fresh[300];
    snprintf(snap, sizeof snap, "%s/psd-node1.snap", c.dir);
    snprintf(keep, sizeof keep, "%s.kept", snap);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf 'XXXXXXXX' | dd "
             "of='%s' bs=1 seek=200 conv=notrunc status=none", snap, keep,
             snap);
    EXPECT_INT(system(cmd), 0, "%s", cmd);
    snprintf(fresh, sizeof fresh, "%s/model2", c.dir);
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s'", psd, fresh, c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "psd --export: node 1: ", "%s", cmd);
    free(o);
    EXPECT_INT(access(fresh, F_OK), -1, "%s after a failed export", fresh);
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s' -n 1", psd, out,
             c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "%s: %s", cmd, o);
    free(o);
    expect_exported_w(out, 3);
    EXPECT_INT(rename(keep, snap), 0, "putting %s back", snap);
    /* One that fails while it writes (files may grow to 300 bytes here,
     * as on a disk that fills): the earlier export stays whole, of one
     * node and of every node. It removed the earlier files of the nodes
     * it wrote (a reshard trial: a nightly export onto a full disk left
     * no model). */
    for (int n = 1; n >= -1; n -= 2) {
        char nopt[16] = "";
        if (n >= 0)
            snprintf(nopt, sizeof nopt, "-n %d", n);
        snprintf(cmd, sizeof cmd, "trap '' XFSZ; exec prlimit --fsize=300 "
                 "%s --export '%s' -c '%s' %s", psd, out, c.ini, nopt);
        o = run_out(&st, cmd);
        EXPECT_INT(st, 1, "%s: %s", cmd, o);
        EXPECT_SUBSTR(o, "File too large", "%s", cmd);
        EXPECT_SUBSTR(o, "is as it was before this export", "%s", cmd);
        free(o);
        expect_exported_w(out, 3);
        char staging[600];
        snprintf(staging, sizeof staging, "%s/.export.node%d.staging", out,
                 n >= 0 ? n : 0);
        EXPECT_INT(access(staging, F_OK) != 0, 1, "%s is gone", staging);
    }
    /* A symbolic link in a staging folder's place: the export emptied
     * the folder it named (a review), which could be a data_dir. */
    char victim[600], precious[700], link_at[600];
    snprintf(victim, sizeof victim, "%s/victim", c.dir);
    snprintf(precious, sizeof precious, "%s/w.node0.npy", victim);
    snprintf(link_at, sizeof link_at, "%s/.export.node1.staging", out);
    EXPECT_INT(mkdir(victim, 0700), 0, "mkdir %s", victim);
    FILE *vf = fopen(precious, "w");
    assert_non_null(vf);
    fclose(vf);
    EXPECT_INT(symlink(victim, link_at), 0, "ln -s %s", link_at);
    snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s' -n 1", psd, out,
             c.ini);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "%s: %s", cmd, o);
    EXPECT_SUBSTR(o, "not a folder (a symbolic link, or a file): remove it",
                  "%s", cmd);
    free(o);
    EXPECT_INT(access(precious, F_OK), 0, "%s is kept", precious);
    expect_exported_w(out, 3);
    EXPECT_INT(unlink(link_at), 0, "rm %s", link_at);
    static const struct {
        const char *args, *says;
        int status;
    } bad[] = {
        { "--check", "--export reads the nodes' snapshots and journals: it "
          "goes with neither --check nor --skip-snapshot", 2 },
        { "-n 5", "node 5 does not exist (the file lists 2 nodes)", 1 },
        { "--drop-table=", "psd: --drop-table: expected a table name", 2 },
        /* the name forgotten: not a table named "--check" */
        { "--drop-table --check", "psd: --drop-table needs a value, got "
          "the option \"--check\" (a value that is written so: "
          "--drop-table=--check)", 2 },
        { "--drop-table -n 1", "psd: --drop-table needs a value, got the "
          "option \"-n\"", 2 },
        { "--drop-table -n1", "psd: --drop-table needs a value, got the "
          "option \"-n1\"", 2 },
        { "--export -c", "psd: --export needs a value, got the option "
          "\"-c\"", 2 },
        { "--export x", "psd: --export given twice", 2 },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s --export '%s' -c '%s' %s", psd, out,
                 c.ini, bad[k].args);
        o = run_out(&st, cmd);
        EXPECT_INT(st, bad[k].status, "%s: %s", cmd, o);
        EXPECT_SUBSTR(o, bad[k].says, "%s", cmd);
        free(o);
    }
    EXPECT_INT(cluster_stop(&c), 0, "the nodes stop cleanly");
}

typedef struct pusher {
    const char *spec;
    atomic_int stop;
    int acked, failed, unclear;  /* unclear: failures that do not say
                                    whether the push was applied */
    char last_error[300];
} pusher;

/* Pushes +1 to every oracle key, 8 at a time, with one attempt each,
 * until told to stop; counts what was acknowledged and what failed. */
static void *push_once_each(void *arg)
{
    pusher *p = arg;
    ps_options o = client_options();
    o.max_retries = 0;
    o.request_timeout_ms = 1000;
    ps_client *cl;
    if (ps_open(&cl, p->spec, &o))
        return NULL;
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t keys[ORACLE_KEYS];
    float ones[ORACLE_KEYS];
    for (int k = 0; k < ORACLE_KEYS; k++) {
        keys[k] = oracle_key(k);
        ones[k] = 1;
    }
    ps_ts win[8] = { 0 };
    for (int i = 0; !p->stop || win[i % 8]; i++) {
        if (win[i % 8] > 0) {
            int rc = ps_wait(cl, win[i % 8]);
            if (rc == PS_OK) {
                p->acked++;
            } else {
                const char *e = ps_last_error(cl);
                p->failed++;
                p->unclear += !strstr(e, "may have been applied") &&
                              !strstr(e, "was not applied");
                snprintf(p->last_error, sizeof p->last_error, "%s", e);
            }
        }
        win[i % 8] = p->stop ? 0
                             : ps_push(cl, t, keys, ORACLE_KEYS, ones, NULL,
                                       NULL);
    }
    ps_close(cl);
    return NULL;
}

/* psctl save on a node where nothing changed since its newest snapshot
 * writes none and says the one on disk is current (a script's or a
 * hostile client's repeated saves wrote the same image 562 times in 3 s),
 * also after an end-job that ended nothing; after a push, or once the
 * file is gone, it writes one again. */
static void test_psctl_save_with_nothing_new_writes_nothing(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 1, &a, &failed);
    EXPECT_INT(failed, 0, "pushes");
    int st;
    char cmd[600];
    const char *psctl = getenv("PSCTL_BIN") ? getenv("PSCTL_BIN")
                                            : "build/psctl";
    snprintf(cmd, sizeof cmd, "%s -s %s save", psctl, c.spec);
    const char *say[] = { "snapshot 1 written", "snapshot 1 in ",
                          "snapshot 2 written", "snapshot 3 written" };
    for (int i = 0; i < 4; i++) {
        if (i == 1) {
            /* end-job with no job in progress changes nothing either
             * (counted as a change, a script's end-job before each save
             * rewrote the whole model: a trial). */
            char ej[600];
            snprintf(ej, sizeof ej, "%s -s %s end-job", psctl, c.spec);
            for (int k = 0; k < 2; k++) {
                char *out = run_out(&st, ej);
                EXPECT_INT(st, 0, "psctl end-job: %s", out ? out : "");
                free(out);
            }
        }
        if (i == 2)
            oracle_run_many(c.spec, &o, 1, 10, 1, &a, &failed);
        if (i == 3) {
            char path[600];
            snprintf(path, sizeof path, "%s/psd-node0.snap", c.dir);
            EXPECT_INT(unlink(path), 0, "remove %s", path);
        }
        char *out = run_out(&st, cmd);
        EXPECT_INT(st, 0, "psctl save %d: %s", i + 1, out ? out : "");
        if (!out || !strstr(out, say[i]) ||
            (i == 1) != (strstr(out, "is current (nothing changed since it "
                                     "was written)") != NULL))
            fail_msg("psctl save %d: want \"%s\": %s", i + 1, say[i],
                     out ? out : "");
        free(out);
    }
    char *log = cluster_log(&c, 0);
    int written = 0;
    for (const char *p = log; p && (p = strstr(p, " written: ")); p++)
        written++;
    free(log);
    EXPECT_INT(written, 3, "snapshots written");
    cluster_stop(&c);
}

/* durability = snapshot and kill -9 while pushes are in flight: the
 * pushes caught by the crash fail and say whether they may have been
 * applied (none is lost silently); the restart loads the last snapshot,
 * so every key holds exactly what was acknowledged before it (what came
 * after is lost, as docs/durability.md promises for this setting); a
 * client open across the crash reconnects by itself and pushes on. */
static void test_kill9_with_snapshots_keeps_what_the_snapshot_held(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 2, 50, 8, &a, &failed);
    EXPECT_INT(failed, 0, "pushes before the snapshot");
    int st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s -s %s save", getenv("PSCTL_BIN")
             ? getenv("PSCTL_BIN") : "build/psctl", c.spec);
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "psctl save: %s", out ? out : "");
    free(out);
    ps_client *stays;
    assert_int_equal(ps_open(&stays, c.spec, &o), PS_OK);
    pusher p = { .spec = c.spec };
    pthread_t th;
    pthread_create(&th, NULL, push_once_each, &p);
    sleep_ms(300);
    cluster_kill(&c, 0, SIGKILL);
    sleep_ms(100);
    p.stop = 1;
    pthread_join(th, NULL);
    print_message("# %d pushes acknowledged after the snapshot, %d failed "
                  "at the crash (last: %s)\n", p.acked, p.failed,
                  p.last_error);
    EXPECT_INT(p.acked > 0, 1, "pushes acknowledged after the snapshot");
    EXPECT_INT(p.failed > 0, 1, "pushes caught by the crash failed");
    EXPECT_INT(p.unclear, 0, "failures that do not say whether the push "
               "may have been applied");
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    expect_count(c.spec, a, "after kill -9: the snapshot's count");
    int t = ps_table(stays, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1;
    EXPECT_INT(ps_wait(stays, ps_push(stays, t, &key, 1, &one, NULL, NULL)),
               PS_OK, "a push of the client open across the crash");
    ps_stats_t s;
    ps_stats(stays, &s);
    EXPECT_INT(s.reconnects >= 1, 1, "the client reconnected");
    ps_close(stays);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
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
    restart_and_count(&c, "restart after the kill", new_wins ? a + b : a,
                      stage);
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

/* Every row of dense table `big` (rows rows), which must all hold the
 * same value: that value, or -1 after printing the first row that
 * differs (a torn snapshot would mix generations). */
static float all_rows(const char *spec, uint64_t rows)
{
    ps_client *cl;
    ps_options o = client_options();
    if (ps_open(&cl, spec, &o))
        fail_msg("ps_open");
    int t = ps_table(cl, "big", NULL);
    float *v = malloc(rows * sizeof *v);
    assert_non_null(v);
    EXPECT_INT(ps_wait(cl, ps_pull_range(cl, t, 0, rows, v, NULL, NULL)),
               PS_OK, "pull of every row");
    float want = v[0];
    for (uint64_t i = 1; i < rows && want >= 0; i++)
        if (v[i] != want) {
            print_error("row %llu holds %g, row 0 %g\n",
                        (unsigned long long)i, (double)v[i], (double)want);
            want = -1;
        }
    free(v);
    ps_close(cl);
    return want;
}

/* +1 to every row of table `big`. */
static void push_all(const char *spec, uint64_t rows, const float *ones)
{
    ps_client *cl;
    ps_options o = client_options();
    if (ps_open(&cl, spec, &o))
        fail_msg("ps_open");
    int t = ps_table(cl, "big", NULL);
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, t, 0, rows, ones, NULL, NULL)),
               PS_OK, "push of every row");
    ps_close(cl);
}

/* Names in dir that start with prefix. */
static int files_like(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* A forked snapshot writer killed while it writes (the OOM killer, say)
 * left its unfinished psd-node0.snap.tmp.PID until psd's next start: a
 * model's size on disk per failure. psd removes it when it sees the
 * writer die, and says the snapshot failed. */
static void test_a_killed_snapshot_writer_leaves_no_file(void **state)
{
    (void)state;
    test_cluster c;
    /* Every write pauses 3 s (the final one at the stop too): time to
     * kill the forked one. */
    setenv("PSD_TEST_SNAPSHOT_PAUSE", "written:3000", 1);
    start(&c, 1, SERVER "snapshot_interval = 0\n");
    unsetenv("PSD_TEST_SNAPSHOT_PAUSE");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    pid_t saver = spawn(psctl_save, c.spec);
    EXPECT_INT(cluster_log_wait(&c, 0, "at written for", 10000), 1,
               "the writer paused");
    char *log = cluster_log(&c, 0);
    const char *at = log ? strstr(log, "test pause: snapshot writer ") : NULL;
    long writer = at ? atol(at + strlen("test pause: snapshot writer ")) : 0;
    free(log);
    assert_true(writer > 0 && writer != (long)c.pid[0]);
    EXPECT_INT(files_like(c.dir, "psd-node0.snap.tmp."), 1, "its file");
    /* Under a memory limit the kernel's OOM killer takes the writer
     * first, not the serving node (a memory trial). */
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/oom_score_adj", writer);
    FILE *adj = fopen(path, "r");
    int score = -1;
    if (adj) {
        if (fscanf(adj, "%d", &score) != 1)
            score = -1;
        fclose(adj);
    }
    EXPECT_INT(score, 1000, "the writer's oom_score_adj");
    kill((pid_t)writer, SIGKILL);
    EXPECT_INT(cluster_log_wait(&c, 0, "the writer was killed by signal 9 "
                                "(under a memory limit, the kernel's OOM "
                                "killer takes the writer first: dmesg says)",
                                10000), 1, "the failure said");
    reap(saver);
    EXPECT_INT(files_like(c.dir, "psd-node0.snap.tmp."), 0,
               "files left by the killed writer");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* A psd --import or --reshard stopped while it wrote a node's snapshot
 * left psd-node0.snap.staged.tmp.PID in the node's folder for good (an
 * operators' trial: 14-20 MB each; a rerun and the start said nothing).
 * The start removes it once that process is gone, and says so; one of a
 * process still alive is left to it. */
static void test_a_stopped_imports_unfinished_file_goes_at_start(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n");
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    assert_true(gone > 0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    char dead[600], live[600];
    snprintf(dead, sizeof dead, "%s/psd-node0.snap.staged.tmp.%ld", c.dir,
             (long)gone);
    snprintf(live, sizeof live, "%s/psd-node0.snap.staged.tmp.%ld", c.dir,
             (long)getpid());
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(k ? live : dead, "w");
        assert_non_null(f);
        fputs("half a snapshot", f);
        fclose(f);
    }
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    EXPECT_INT(access(dead, F_OK) != 0, 1, "the stopped import's file");
    EXPECT_INT(cluster_log_wait(&c, 0, "left by a psd --import or --reshard "
                                "that was stopped", 3000), 1, "said");
    EXPECT_INT(access(live, F_OK), 0, "the file of a process still alive");
    unlink(live);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* 30 rounds: +1 to every row of an 8 MB table, a snapshot (the final one
 * at SIGTERM, written by psd itself, or one asked for with psctl save,
 * written by a forked writer that dies with psd), and kill -9 at a random
 * moment of its writing. Every restart must load the old generation or
 * the new one whole (every row the same value, the one before the round
 * or one more), never refuse a torn file, and leave no temporary file. */
static void test_snapshots_killed_at_random_moments_load_old_or_new_whole(
    void **state)
{
    (void)state;
    enum { ROWS = 2 << 20, ROUNDS = 30 };
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 0\n"
          "[table.big]\nkind = dense\nrows = 2097152\ndim = 1\n"
          "updater = sum\n");
    float *ones = malloc(ROWS * sizeof *ones);
    for (size_t i = 0; i < ROWS; i++)
        ones[i] = 1;
    float have = 0;
    int newer = 0;
    for (int r = 0; r < ROUNDS; r++) {
        push_all(c.spec, ROWS, ones);
        int forked = r % 2;
        pid_t saver = 0;
        if (forked)
            saver = spawn(psctl_save, c.spec);
        else
            kill(c.pid[0], SIGTERM);
        sleep_ms((int)(rand_r(&seed) % 60));
        cluster_kill(&c, 0, SIGKILL);
        if (saver)
            reap(saver);
        if (cluster_restart(&c, 0))
            fail_msg("round %d: psd did not start again after kill -9 "
                     "during a snapshot (%s)", r,
                     forked ? "forked writer" : "final snapshot");
        EXPECT_INT(files_like(c.dir, "psd-node0.snap.tmp"), 0,
                   "round %d: temporary files left after the restart", r);
        float v = all_rows(c.spec, ROWS);
        if (v != have && v != have + 1)
            fail_msg("round %d (%s): the rows hold %g, want %g (the old "
                     "snapshot) or %g (the new one)", r,
                     forked ? "forked writer" : "final snapshot", (double)v,
                     (double)have, (double)have + 1);
        newer += v == have + 1;
        have = v;
    }
    printf("# %d rounds: the new snapshot won %d times, the old one %d\n",
           ROUNDS, newer, ROUNDS - newer);
    free(ones);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* The number of the newest "snapshot N written" line of node i's log (a
 * periodic one or the final one), 0 if none. */
static int newest_snapshot(const test_cluster *c, int i)
{
    char *log = cluster_log(c, i);
    int newest = 0;
    for (const char *p = log; p && (p = strstr(p, "snapshot ")); p++) {
        int n;
        char after[16];
        if (sscanf(p, "snapshot %d %15s", &n, after) == 2 &&
            !strcmp(after, "written:") && n > newest)
            newest = n;
    }
    free(log);
    return newest;
}

/* A stop with nothing changed since this run's last snapshot writes no
 * final one (it wrote the whole model again, doubling the stop of a node
 * whose periodic writer had just finished); one with a change still
 * does. Either way the restart has every push. */
static void test_a_stop_with_nothing_changed_writes_no_final_snapshot(
    void **state)
{
    (void)state;
    for (int changed = 0; changed <= 1; changed++) {
        test_cluster c;
        char extra[512];
        snprintf(extra, sizeof extra, SERVER "snapshot_interval = 1\n"
                 TABLES);
        if (cluster_start_ex(&c, 1, 4, "", extra))
            fail_msg("cluster did not start");
        ps_options o = client_options();
        int a, b = 0, failed;
        oracle_run_many(c.spec, &o, 1, 20, 4, &a, &failed);
        EXPECT_INT(failed, 0, "pushes");
        /* Until a periodic tick found nothing changed since the newest
         * snapshot: two intervals without a new one. */
        int newest = 0;
        for (int tries = 0; tries < 20; tries++) {
            sleep_ms(2200);
            int now = newest_snapshot(&c, 0);
            if (now && now == newest)
                break;
            newest = now;
        }
        EXPECT_INT(newest > 0, 1, "a periodic snapshot");
        if (changed) {
            oracle_run_many(c.spec, &o, 1, 5, 4, &b, &failed);
            EXPECT_INT(failed, 0, "pushes after the snapshot");
        }
        EXPECT_INT(term(&c, 0), 0, "exit status of the stop");
        char *log = cluster_log(&c, 0);
        char skip[96], wrote[96];
        snprintf(skip, sizeof skip, "final snapshot not needed: snapshot %d "
                 "is current", newest);
        snprintf(wrote, sizeof wrote, "final snapshot %d written",
                 newest_snapshot(&c, 0));
        int skipped = log && strstr(log, skip);
        int written = log && strstr(log, "final snapshot") &&
                      strstr(log, wrote);
        if (skipped == changed || written != changed)
            fail_msg("%s a change since snapshot %d, want the final snapshot "
                     "%s: %s", changed ? "with" : "without", newest,
                     changed ? "written" : "not needed", log ? log : "");
        free(log);
        if (cluster_restart(&c, 0))
            fail_msg("restart");
        EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot", 1000), 1,
                   "the snapshot loaded");
        expect_count(c.spec, a + b, "after the stop");
        /* The snapshot just loaded is current too: a restart then a stop
         * of an idle node wrote the whole model again. */
        int loaded = newest_snapshot(&c, 0);
        EXPECT_INT(term(&c, 0), 0, "exit status of the second stop");
        log = cluster_log(&c, 0);
        snprintf(skip, sizeof skip, "final snapshot not needed: snapshot %d "
                 "is current", loaded);
        if (!log || !strstr(log, skip) || newest_snapshot(&c, 0) != loaded)
            fail_msg("a stop after a restart with nothing changed, want "
                     "\"%s\": %s", skip, log ? log : "");
        free(log);
        EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
    }
}

/* Under durability = log each start makes a journal segment (its start
 * records), and a restarted idle node's snapshot counts as current: idle
 * restarts piled those segments up, with nothing to prune them (a
 * review). A stop past a few writes its final snapshot, which prunes
 * them; every push is still there. */
static void test_idle_restarts_keep_few_journal_segments(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nsnapshot_interval = 0\n");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes");
    EXPECT_INT(term(&c, 0), 0, "the first stop");
    int most = 0, skipped = 0;
    for (int i = 0; i < 8; i++) {
        if (cluster_restart(&c, 0))
            fail_msg("restart %d", i);
        EXPECT_INT(term(&c, 0), 0, "stop %d", i);
        int n = files_like(c.dir, "psd-node0.journal.0");
        most = n > most ? n : most;
        char *log = cluster_log(&c, 0);
        const char *last = log ? log : "";
        for (const char *p = last; (p = strstr(p, "psd[0] info: final"));)
            last = p++;
        skipped += strncmp(last, "psd[0] info: final snapshot not needed",
                           38) == 0;
        free(log);
    }
    if (most > 4 || skipped < 4)
        fail_msg("8 idle restarts: %d stops found the snapshot current, "
                 "and up to %d journal segments were left (want 4 or "
                 "more, and 4 at most)", skipped, most);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    expect_count(c.spec, a, "after the idle restarts");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* SIGTERM while the periodic snapshot (the timer's forked writer, with
 * the journal on) is still being written: psd waits for that writer,
 * then writes its final snapshot, the generation after it, and exits 0;
 * the restart loads the final one and every push is there once. */
static void test_a_stop_during_a_periodic_snapshot_waits_then_writes_its_own(
    void **state)
{
    (void)state;
    test_cluster c;
    setenv("PSD_TEST_SNAPSHOT_PAUSE", "written:1000", 1);
    char extra[512];
    snprintf(extra, sizeof extra, SERVER "durability = log\n"
             "snapshot_interval = 1\n" TABLES);
    int up = cluster_start_ex(&c, 1, 4, "workers = 1\n", extra);
    unsetenv("PSD_TEST_SNAPSHOT_PAUSE");
    if (up)
        fail_msg("cluster did not start");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 2, 40, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes before the stop");
    EXPECT_INT(cluster_log_wait(&c, 0, "at written for", 3000), 1,
               "the periodic writer reached its pause");
    int b;
    oracle_run_many(c.spec, &o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes while the writer pauses");
    EXPECT_INT(term(&c, 0), 0, "exit status of a stop during a snapshot");
    char *log = cluster_log(&c, 0);
    const char *first = log ? strstr(log, "snapshot 1 written") : NULL;
    const char *final = first ? strstr(first, "final snapshot 2 written")
                              : NULL;
    if (!final)
        fail_msg("want \"snapshot 1 written\" then \"final snapshot 2 "
                 "written\": %s", log ? log : "");
    free(log);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot 2", 1000), 1,
               "the restart loaded the final snapshot");
    expect_count(c.spec, a + b, "after the stop");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* How many snapshots node i's log says were written so far. */
static int snapshots_written(test_cluster *c, int i)
{
    char *log = cluster_log(c, i);
    int k = 0;
    for (const char *p = log; p && (p = strstr(p, " written: ")); p++)
        k++;
    free(log);
    return k;
}

/* A node where nothing changed since its last snapshot (idle between
 * jobs, or after training) does not write the same image again at every
 * snapshot_interval, a whole model's worth of disk each time: pulls and
 * heartbeats change nothing. The next push brings the periodic snapshot
 * back, and a crash after it loses nothing of that push. */
static void test_an_idle_node_skips_periodic_snapshots_until_a_change(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "snapshot_interval = 1\n");
    ps_options o = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = 7;
    float one = 1.0f, v = 0.0f;
    EXPECT_INT(ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL)), PS_OK,
               "the first push");
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 1 written", 5000), 1,
               "the first periodic snapshot");
    /* The push's ACK goes out with a heartbeat (100 ms) and may earn one
     * more snapshot; after that the node is idle. */
    sleep_ms(1500);
    int before = snapshots_written(&c, 0);
    for (int k = 0; k < 30; k++) {
        EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &v, NULL, NULL)),
                   PS_OK, "a pull while idle");
        if (k % 10 == 0) {
            /* Monitoring: a reader, and psctl, come and go. */
            ps_client *r;
            assert_int_equal(ps_open(&r, c.spec, &o), PS_OK);
            ps_close(r);
            char cmd[600];
            const char *b = getenv("PSCTL_BIN");
            snprintf(cmd, sizeof cmd, "'%s' -s %s stats >/dev/null 2>&1",
                     b ? b : "build/psctl", c.spec);
            EXPECT_INT(system(cmd), 0, "psctl stats");
        }
        sleep_ms(100);
    }
    EXPECT_INT(snapshots_written(&c, 0), before,
               "snapshots written in 3 s of pulls, readers and psctl stats "
               "(snapshot_interval = 1)");
    /* A snapshot moved away is written again, idle or not. */
    char snap[600], aside[620];
    snprintf(snap, sizeof snap, "%s/psd-node0.snap", c.dir);
    snprintf(aside, sizeof aside, "%s.aside", snap);
    assert_int_equal(rename(snap, aside), 0);
    for (int k = 0; k < 50 && snapshots_written(&c, 0) == before; k++)
        sleep_ms(100);
    EXPECT_INT(snapshots_written(&c, 0), before + 1,
               "snapshots written within 5 s of moving the file away");
    unlink(aside);
    before++;
    EXPECT_INT(ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL)), PS_OK,
               "a push after the idle time");
    for (int k = 0; k < 50 && snapshots_written(&c, 0) == before; k++)
        sleep_ms(100);
    EXPECT_INT(snapshots_written(&c, 0), before + 1,
               "snapshots written within 5 s of the push");
    ps_close(cl);
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &v, NULL, NULL)), PS_OK,
               "a pull after the restart");
    EXPECT_FLOAT(v, 2.0f, "both pushes, from the snapshot after the idle "
                 "time");
    ps_close(cl);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
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
    /* While the limit holds, a connection lost is not made again: long
     * timeouts on both ends, so that a slow fsync on a loaded machine is
     * not taken for a lost node. The bug shows as no reply at all. */
    start(&c, 1, "[server]\nheartbeat_ms = 1000\npeer_timeout_ms = 10000\n"
                 "durability = log\nfsync = always\n");
    ps_options o = client_options();
    o.request_timeout_ms = 10000;
    o.max_retries = 0;
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

/* The tmpfs the test below mounts, unmounted by its teardown also when
 * the test fails. */
static char small_disk[400];

static int unmount_small_disk(void **state)
{
    (void)state;
    if (small_disk[0]) {
        if (umount2(small_disk, MNT_DETACH))
            fprintf(stderr, "umount %s: %s\n", small_disk, strerror(errno));
        small_disk[0] = '\0';
    }
    return 0;
}

/* Mounts a tmpfs of `size` on DIR/small (small_disk) and points node
 * 0's data_dir there; the caller restarts it. Skips the test where no
 * tmpfs can be mounted. */
static void data_dir_on_small_disk(test_cluster *c, const char *size)
{
    snprintf(small_disk, sizeof small_disk, "%s/small", c->dir);
    assert_int_equal(mkdir(small_disk, 0700), 0);
    char opts[64];
    snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
    if (mount("tmpfs", small_disk, "tmpfs", 0, opts)) {
        int e = errno;
        small_disk[0] = '\0';
        cluster_stop(c);
        print_message("# no tmpfs here (%s)\n", strerror(e));
        skip();
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "sed -i 's|^data_dir = .*|data_dir = %s|' '%s'",
             small_disk, c->ini);
    assert_int_equal(system(cmd), 0);
}

/* durability = snapshot with its folder on a tmpfs of 6 MiB: a snapshot
 * of 4 MiB fits once (not beside a 3 MiB file: its rows' weights are the
 * measure before a first one), the next one (written beside it) has no
 * room. It
 * is not started (a writer that filled the disk kept the journal from
 * being written meanwhile: a big-model trial), psctl save and psctl
 * stats say why, psd goes on taking pushes (the policy of durability =
 * snapshot), and a restart after kill -9 loads the previous snapshot
 * whole. A stop's final snapshot is tried whatever the room: it runs out
 * of space (ENOSPC, not the file size limit of the test above), psd
 * exits with status 1, no temporary file is left, and the previous
 * snapshot still loads. */
/* A node of one dense table of 2^20 rows of dim 1 (4 MiB, sum), `server`
 * lines in its [server] section, restarted on a tmpfs of `size`
 * (data_dir_on_small_disk); *ones: 2^20 ones to push (malloc'd). */
static void big_table_on_small_disk(test_cluster *c, const char *server,
                                    const char *size, float **ones)
{
    char lines[512];
    snprintf(lines, sizeof lines, SERVER "%s[table.big]\nkind = dense\n"
             "rows = 1048576\ndim = 1\nupdater = sum\n", server);
    start(c, 1, lines);
    EXPECT_INT(term(c, 0), 0, "stop");
    data_dir_on_small_disk(c, size);
    if (cluster_restart(c, 0))
        fail_msg("psd did not start on the tmpfs");
    *ones = malloc(((size_t)1 << 20) * sizeof **ones);
    assert_non_null(*ones);
    for (size_t i = 0; i < (size_t)1 << 20; i++)
        (*ones)[i] = 1;
}

static void test_a_snapshot_on_a_full_disk_fails_and_keeps_the_old_one(
    void **state)
{
    (void)state;
    enum { ROWS = 1 << 20 };
    test_cluster c;
    float *ones;
    big_table_on_small_disk(&c, "snapshot_interval = 0\n", "6m", &ones);
    char cmd[1200];
    const char *psctl = getenv("PSCTL_BIN") ? getenv("PSCTL_BIN")
                                            : "build/psctl";
    int st;
    push_all(c.spec, ROWS, ones);
    /* A first snapshot has no size to go by: its rows' weights (4 MiB)
     * do not fit beside a 3 MiB file. */
    char filler[1100];
    snprintf(filler, sizeof filler, "%s/filler", small_disk);
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=1M count=3 "
             "2>/dev/null", filler);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s -s %s save", psctl, c.spec);
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "a first psctl save without room: %s", o ? o : "");
    if (!o || !strstr(o, "snapshot not started: ") ||
        !strstr(o, "MiB free, and a snapshot needs at least 4.0 MiB there "
                   "(the weights of the rows it holds)"))
        fail_msg("psctl save does not say the first snapshot has no room: "
                 "%s", o ? o : "");
    free(o);
    assert_int_equal(unlink(filler), 0);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "the first psctl save: %s", o ? o : "");
    free(o);
    push_all(c.spec, ROWS, ones);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "psctl save on a full disk: %s", o ? o : "");
    static const char room[] = "MiB free, and a snapshot needs about 4.0 "
                               "MiB there (the last one's size): free space "
                               "on that file system";
    if (!o || !strstr(o, "snapshot not started: ") || !strstr(o, room))
        fail_msg("psctl save does not say the snapshot failed for want of "
                 "space: %s", o ? o : "");
    free(o);
    snprintf(cmd, sizeof cmd, "%s -s %s stats", psctl, c.spec);
    o = run_out(&st, cmd);
    if (!o || !strstr(o, "2 failed; last error: ") || !strstr(o, room))
        fail_msg("psctl stats does not show the failure: %s", o ? o : "");
    free(o);
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot not started: ", 1000), 1,
               "the log says so");
    EXPECT_INT(files_like(small_disk, "psd-node0.snap.tmp"), 0,
               "temporary files left by the snapshot not started");
    /* Pushes go on. */
    push_all(c.spec, ROWS, ones);
    EXPECT_FLOAT(all_rows(c.spec, ROWS), 3, "rows after three pushes");
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start again after the failed snapshot");
    EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot 1", 1000), 1,
               "the restart loaded snapshot 1");
    EXPECT_FLOAT(all_rows(c.spec, ROWS), 1, "rows from snapshot 1");
    /* The final snapshot cannot be written either. */
    push_all(c.spec, ROWS, ones);
    EXPECT_INT(term(&c, 0), 1, "a stop whose final snapshot failed");
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start after the failed final snapshot");
    EXPECT_FLOAT(all_rows(c.spec, ROWS), 1, "rows from snapshot 1, again");
    EXPECT_INT(files_like(small_disk, "psd-node0.snap.tmp"), 0,
               "temporary files left by the failed final snapshot");
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    free(ones);
    unmount_small_disk(NULL);
    cluster_stop(&c);
}

/* durability = log whose journal fills the disk: only a snapshot cuts it
 * back, and the snapshot has no room, so the node refuses pushes until an
 * operator frees space. The refusal said the free space only (a soak
 * trial, with snapshot_journal_mb = 0); it now says what the node's own
 * journal holds there and the setting that bounds it. */
static void test_a_snapshot_without_room_says_what_the_journal_holds(
    void **state)
{
    (void)state;
    enum { ROWS = 1 << 20 };
    test_cluster c;
    float *ones;
    big_table_on_small_disk(&c, "durability = log\nsnapshot_interval = 0\n"
                            "snapshot_journal_mb = 0\n", "14m", &ones);
    const char *psctl = getenv("PSCTL_BIN") ? getenv("PSCTL_BIN")
                                            : "build/psctl";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s -s %s save", psctl, c.spec);
    int st;
    char *o = run_out(&st, cmd);
    EXPECT_INT(st, 0, "the first save (4 MiB): %s", o ? o : "");
    free(o);
    /* 8 MiB of journal beside it: 2 MiB left, and a snapshot needs 4. */
    push_all(c.spec, ROWS, ones);
    push_all(c.spec, ROWS, ones);
    o = run_out(&st, cmd);
    EXPECT_INT(st, 1, "a save without room: %s", o ? o : "");
    EXPECT_SUBSTR(o ? o : "", "free space on that file system; this "
                  "node's journal holds 8.", "the journal's share");
    EXPECT_SUBSTR(o ? o : "", "which only a snapshot cuts back "
                  "(snapshot_journal_mb = 0, no bound: a bound in MiB "
                  "starts one before the journal grows past it)",
                  "the setting");
    free(o);
    free(ones);
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    unmount_small_disk(NULL);
    cluster_stop(&c);
}

/* durability = log on a tmpfs that fills up (ENOSPC; the test above uses
 * the file size limit, EFBIG): pushes are refused with PS_ESERVER and
 * applied never, pulls are served, and once there is room again the
 * journal recovers by itself and takes pushes; after kill -9 every
 * acknowledged push is there once. The push that found the disk full was
 * applied: its retransmissions wait for its record as it does, and are
 * never told it was refused (a caller would push the gradient again). */
static void test_a_journal_on_a_full_tmpfs_refuses_pushes_until_it_has_room(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n");
    EXPECT_INT(term(&c, 0), 0, "stop");
    data_dir_on_small_disk(&c, "2m");
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start on the tmpfs");
    ps_options o = client_options();
    o.max_retries = 2;
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 30, 4, &a, &failed);
    EXPECT_INT(failed, 0, "before the disk fills");
    char filler[500], cmd[1200];
    snprintf(filler, sizeof filler, "%s/filler", small_disk);
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=64k 2>/dev/null",
             filler);
    if (system(cmd) == 0)        /* dd stops at ENOSPC, with status 1 */
        fail_msg("%s did not fill the tmpfs", filler);
    ps_client *cl, *reader;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    assert_int_equal(ps_open(&reader, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = 12345;        /* not an oracle key */
    float one = 1.0f, v = 0;
    /* Records still fit in the journal's last page for a while; then a
     * push is applied but its record cannot be written: its reply waits
     * for the journal, and so do its retransmissions, until the client's
     * bounded time is up. Never PS_OK, never "refused". */
    int rc = PS_OK, ok = 0;
    while (rc == PS_OK && ok < 10000) {
        rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
        ok += rc == PS_OK;
    }
    print_message("# %d pushes still fitted in space the journal had\n", ok);
    EXPECT_INT(rc, PS_ETIMEDOUT, "a push once the disk is full, after %d "
               "that fitted: %s", ok, ps_last_error(cl));
    rc = ps_wait(reader, ps_push(reader, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc, PS_ESERVER, "a push while the journal cannot be written");
    EXPECT_SUBSTR(ps_last_error(reader), "cannot write its journal",
                  "what the refused push is told");
    EXPECT_SUBSTR(ps_last_error(reader), "No space left",
                  "what the refused push is told");
    EXPECT_SUBSTR(ps_last_error(reader), "psd-node0.journal.",
                  "which file (it said only \"segment 1\")");
    EXPECT_SUBSTR(ps_last_error(reader), "free space on that file system",
                  "what to do");
    EXPECT_INT(ps_wait(reader, ps_pull(reader, t, &key, 1, &v, NULL, NULL)),
               PS_OK, "a pull on a full disk");
    unlink(filler);
    EXPECT_INT(cluster_log_wait(&c, 0, "journal: writing again", 2000), 1,
               "the journal recovers by itself");
    ps_close(cl);
    ps_close(reader);
    int b;
    oracle_run_many(c.spec, &o, 1, 20, 4, &b, &failed);
    EXPECT_INT(failed, 0, "after the disk has room");
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    char why[200];
    if (oracle_check(c.spec, a + b, a + b, why, sizeof why))
        fail_msg("%s", why);
    /* The push that found the disk full was applied without being
     * acknowledged, and its record written once the disk had room; the
     * refused one was not applied. */
    ps_client *check;
    assert_int_equal(ps_open(&check, c.spec, &o), PS_OK);
    EXPECT_INT(ps_wait(check, ps_pull(check, t, &key, 1, &v, NULL, NULL)),
               PS_OK, "a pull after the restart");
    if (v != (float)ok + 1)
        fail_msg("key %llu holds %g after the restart, want %d",
                 (unsigned long long)key, (double)v, ok + 1);
    ps_close(check);
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    unmount_small_disk(NULL);
    cluster_stop(&c);
}

/* A push held while the disk is full (its record buffered), then room
 * again, and a periodic snapshot before anything else writes the record:
 * the snapshot's rotation writes and syncs it, and the held reply goes
 * out. It used to wait for some other push: the rotation did not say the
 * record was durable, and the journal's retry then found nothing to
 * write. The retry is put off (PSD_TEST_JOURNAL_RETRY_MS) and the client
 * sends no heartbeat meanwhile, so that the snapshot comes first. */
static void test_a_snapshot_that_writes_held_records_lets_their_replies_go(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, "[server]\nheartbeat_ms = 60000\npeer_timeout_ms = "
          "300000\ndurability = log\nfsync = always\nsnapshot_interval = "
          "1\n");
    EXPECT_INT(term(&c, 0), 0, "stop");
    data_dir_on_small_disk(&c, "2m");
    setenv("PSD_TEST_JOURNAL_RETRY_MS", "600000", 1);
    int restarted = cluster_restart(&c, 0);
    unsetenv("PSD_TEST_JOURNAL_RETRY_MS");
    if (restarted)
        fail_msg("psd did not start on the tmpfs");
    ps_options o = client_options();
    o.request_timeout_ms = 30000;
    o.max_retries = 0;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    char filler[500], cmd[1200];
    snprintf(filler, sizeof filler, "%s/filler", small_disk);
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=64k 2>/dev/null",
             filler);
    if (system(cmd) == 0)
        fail_msg("%s did not fill the tmpfs", filler);
    uint64_t key = 12345;
    float one = 1.0f, v = 0;
    ps_ts held = 0;
    for (int i = 0; i < 10000 && !held; i++) {
        ps_ts ts = ps_push(cl, t, &key, 1, &one, NULL, NULL);
        int rc = ps_wait_timeout(cl, ts, 300);
        if (rc == PS_PENDING)
            held = ts;
        else if (rc != PS_OK)
            fail_msg("push %d: %s", i, ps_last_error(cl));
    }
    EXPECT_INT(held > 0, 1, "a push held for its record");
    unlink(filler);
    /* A snapshot every second, and nothing else writes the record: the
     * reply comes with the first snapshot after the room (a bound well
     * inside the client's 30 s, so that a slow machine is no failure). */
    EXPECT_INT(ps_wait_timeout(cl, held, 20000), PS_OK, "the held push, "
               "20 s after the room: %s", ps_last_error(cl));
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 1 written", 1000), 1,
               "a periodic snapshot wrote it");
    EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &v, NULL, NULL)), PS_OK,
               "pull");
    EXPECT_INT((int)v, (int)held, "every push applied once");
    ps_close(cl);
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    unmount_small_disk(NULL);
    cluster_stop(&c);
}

/* durability = log, snapshot_journal_mb = 1 and no periodic snapshot:
 * once the first journal segment passes 1 MiB, psd takes a snapshot by
 * itself, which deletes that segment once written; after kill -9 the
 * restart loads the snapshot, replays what came after it, and every
 * acknowledged push is there once. */
static void test_a_journal_past_snapshot_journal_mb_starts_a_snapshot(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nsnapshot_interval = 0\n"
          "snapshot_journal_mb = 1\n");
    ps_options o = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    enum { KEYS = 1000, NPUSH = 200 };    /* about 12 KiB of records each */
    static uint64_t keys[KEYS];
    static float one[KEYS], got[KEYS];
    for (int i = 0; i < KEYS; i++) {
        keys[i] = (1ull << 40) + (uint64_t)i;    /* not oracle keys */
        one[i] = 1.0f;
    }
    char seg[600];
    snprintf(seg, sizeof seg, "%s/psd-node0.journal.0000000001", c.dir);
    for (int i = 0; i < NPUSH; i++) {
        int rc = ps_wait(cl, ps_push(cl, t, keys, KEYS, one, NULL, NULL));
        if (rc)
            fail_msg("push %d: %s", i, ps_last_error(cl));
        if (i == 0)
            EXPECT_INT(access(seg, F_OK), 0, "segment 1 after a push");
    }
    EXPECT_INT(cluster_log_wait(&c, 0, "MiB (snapshot_journal_mb = 1): "
                                "taking a snapshot", 5000), 1,
               "psd says why it takes a snapshot");
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 1 written", 20000), 1,
               "the snapshot is written");
    /* Removed on the thread pool, right after. */
    for (int i = 0; i < 500 && access(seg, F_OK) == 0; i++)
        sleep_ms(10);
    EXPECT_INT(access(seg, F_OK) == 0, 0, "segment 1, covered, is deleted");
    ps_close(cl);
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot", 2000), 1,
               "the restart loads a snapshot");
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    EXPECT_INT(ps_wait(cl, ps_pull(cl, t, keys, KEYS, got, NULL, NULL)),
               PS_OK, "a pull after the restart");
    for (int i = 0; i < KEYS; i++)
        if (got[i] != (float)NPUSH)
            fail_msg("key %d holds %g after the restart, want %d", i,
                     (double)got[i], NPUSH);
    ps_close(cl);
    cluster_stop(&c);
}

/* A journal whose last record is there twice (a block written twice,
 * not by psd, which journals a push once): the copy of a push already
 * applied is skipped, as a retransmission is, with a warning; the
 * replay gave it twice (the push's key is in the memory of applied
 * pushes when the copy comes). */
static void test_a_journal_record_there_twice_is_applied_once(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nsnapshot_interval = 0\n");
    ps_options o = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = (1ull << 41) + 7;
    float one = 1, got = 0;
    for (int i = 0; i < 3; i++)
        EXPECT_INT(ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL)),
                   PS_OK, "push %d", i);
    ps_close(cl);
    cluster_kill(&c, 0, SIGKILL);
    char seg[600];
    snprintf(seg, sizeof seg, "%s/psd-node0.journal.0000000001", c.dir);
    FILE *f = fopen(seg, "r+b");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    /* Records: u32 body length, two u32 CRCs, the body. The last PUSH is
     * the last record whose body is the largest (a push's rows and key;
     * the ACKs and the close after it are smaller). */
    size_t off = 0, last = 0, last_len = 0;
    while (off + 12 <= len) {
        uint32_t blen;
        memcpy(&blen, buf + off, 4);
        if (off + 12 + blen > len)
            break;
        if (blen >= last_len) {
            last = off;
            last_len = blen;
        }
        off += 12 + blen;
    }
    EXPECT_INT(off == len && last_len > 0, 1, "records walked to the end");
    fseek(f, 0, SEEK_END);
    EXPECT_INT((int)fwrite(buf + last, 1, 12 + last_len, f),
               (int)(12 + last_len), "the copy appended");
    fclose(f);
    if (cluster_restart(&c, 0))
        fail_msg("restart");
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &got, NULL, NULL)), PS_OK,
               "pull");
    EXPECT_INT((int)got, 3, "each push once");
    EXPECT_INT(cluster_log_wait(&c, 0, "applied already, is there again: "
                                "skipped", 2000), 1, "said");
    ps_close(cl);
    cluster_stop(&c);
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
 * not NULL), through the command `as` (such as setpriv's) when not NULL,
 * and wants its exit status and, when want is not NULL, want in what it
 * printed. */
static void expect_psd_check_as(const test_cluster *c, const char *as,
                                int node, const char *arg, int status,
                                const char *want)
{
    const char *psd = getenv("PSD_BIN");
    char cmd[900], nodearg[16] = "";
    if (node >= 0)
        snprintf(nodearg, sizeof nodearg, "-n %d", node);
    snprintf(cmd, sizeof cmd, "%s '%s' --check -c '%s' %s %s 2>&1",
             as ? as : "", psd ? psd : "build/psd", c->ini, nodearg,
             arg ? arg : "");
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

static void expect_psd_check(const test_cluster *c, int node, const char *arg,
                             int status, const char *want)
{
    expect_psd_check_as(c, NULL, node, arg, status, want);
}

/* psd --check with arg must not print `unwanted`. */
static void expect_psd_check_not(const test_cluster *c, int node,
                                 const char *arg, const char *unwanted)
{
    const char *psd = getenv("PSD_BIN");
    char cmd[900];
    snprintf(cmd, sizeof cmd, "'%s' --check -c '%s' -n %d %s",
             psd ? psd : "build/psd", c->ini, node, arg);
    int st;
    char *out = run_out(&st, cmd);
    if (!out || strstr(out, unwanted))
        fail_msg("%s printed \"%s\":\n%s", cmd, unwanted, out ? out : "");
    free(out);
}

static void test_a_snapshot_of_another_layout_stops_psd(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER);
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    /* Beside the running node (--check before a SIGHUP): OK, and says a
     * second psd for the node would be refused (it said OK alone). */
    char runs[160];
    snprintf(runs, sizeof runs, "node 0 runs now: a psd (pid %d) holds its "
             "lock in ", (int)c.pid[0]);
    expect_psd_check(&c, 0, NULL, 0, runs);
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
    expect_psd_check(&c, 0, NULL, 1, "(to keep the model: psd --reshard onto "
                     "another node count, psd --export then psd --import "
                     "onto other shards)");
    expect_psd_check(&c, 0, NULL, 1, "(node 0 cannot start from its files: "
                     "put back what changed or is missing, the ini or the "
                     "file named; only if they are lost for good, "
                     "--skip-snapshot sets them aside and starts that node "
                     "empty)");
    expect_psd_check(&c, -1, NULL, 1, snap);
    expect_psd_check(&c, 0, "--skip-snapshot", 0, "OK");
    /* Run by a user who may not read the data folder (psd may run as
     * another user), --check cannot tell, and says so without failing. */
    assert_int_equal(chmod(c.dir, 0711), 0);
    expect_psd_check_as(&c, "env -u SYSTEMD_EXEC_PID setpriv --reuid=65534 "
                        "--regid=65534 "
                        "--clear-groups", 0, NULL, 0, "were not checked");
    /* Nor may it write the folder: psd run as this user would not start,
     * and --check says that too. */
    expect_psd_check_as(&c, "env -u SYSTEMD_EXEC_PID setpriv --reuid=65534 "
                        "--regid=65534 "
                        "--clear-groups", 0, NULL, 0, "(uid 65534) may not "
                        "write");
    /* Run by systemd as the unit's command (ExecStartPre: its
     * $SYSTEMD_EXEC_PID is psd's own pid), --check runs as the service's
     * user: then it is certain, and --check fails (it said OK, and the
     * start failed on the lock file). */
    expect_psd_check_as(&c, "sh -c 'export SYSTEMD_EXEC_PID=$$; exec setpriv "
                        "--reuid=65534 --regid=65534 --clear-groups \"$0\" "
                        "\"$@\"'", 0, NULL, 1,
                        "(run by systemd as the service's user: give the "
                        "unit ReadWritePaths= for it, or leave data_dir to "
                        "StateDirectory=)");
    /* Inherited from a service by another process ($INVOCATION_ID, or a
     * $SYSTEMD_EXEC_PID that is not psd's), it proves nothing. */
    expect_psd_check_as(&c, "env INVOCATION_ID=0123 SYSTEMD_EXEC_PID=1 "
                        "setpriv --reuid=65534 --regid=65534 --clear-groups",
                        0, NULL, 0, "(run --check as the user psd runs as)");
    /* psd itself, started as that user, is that user: it refuses to
     * start. (With durability = snapshot it served, acknowledged every
     * push, and lost them all when its final snapshot failed.) */
    {
        const char *psd = getenv("PSD_BIN");
        char start[900];
        snprintf(start, sizeof start, "env -u SYSTEMD_EXEC_PID timeout 20 "
                 "setpriv --reuid=65534 --regid=65534 --clear-groups '%s' "
                 "-c '%s' -n 0 2>&1", psd ? psd : "build/psd", c.ini);
        int st;
        char *out = run_out(&st, start);
        assert_non_null(out);
        EXPECT_INT(st, 1,
                   "%s: its exit status; it printed:\n%s", start, out);
        if (!strstr(out, "(uid 65534) may not write") ||
            !strstr(out, "(psd would take pushes it could never save: give "
                         "it a folder this user may write, or run psd as "
                         "the folder's owner)"))
            fail_msg("%s: want the data folder refused; it printed:\n%s",
                     start, out);
        free(out);
    }
    assert_int_equal(chmod(c.dir, 0700), 0);
    /* Back to 4 shards, but the table's dim changed. */
    snprintf(cmd, sizeof cmd, "sed -i -e 's/^shards = 8$/shards = 4/' "
             "-e 's/^dim = 1$/dim = 2/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_refusal(&c, snap, "dim 1");
    /* --check reads the whole snapshot when its tables differ. */
    expect_psd_check(&c, 0, NULL, 1, "table 'count' is sparse, dim 1, rows "
                     "0 in the snapshot and sparse, dim 2, rows 0 in the "
                     "config");
    snprintf(cmd, sizeof cmd, "sed -i 's/^dim = 2$/dim = 1/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_psd_check(&c, 0, NULL, 0, "OK");
    /* Only the consistency mode changed: the shape differs while every
     * table section fits, and the refusal says what that leaves. */
    snprintf(cmd, sizeof cmd, "sed -i 's/^dim = 1$/dim = 1\\nconsistency "
             "= ssp/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_refusal(&c, snap, "consistency mode changed");
    snprintf(cmd, sizeof cmd, "sed -i '/^consistency = ssp$/d' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    restart_and_count(&c, "the right layout starts",
                      a, "with the right layout");
}

/* Pushes v to each column of key 1 of table `name` (dim 4; v = 0: no
 * push) and pulls it back: its first column, or NAN when either fails. */
static float push_pull_one(const char *spec, const char *name, float v)
{
    ps_options o = client_options();
    ps_client *cl;
    if (ps_open(&cl, spec, &o) != PS_OK)
        return NAN;
    int t = ps_table(cl, name, NULL);
    uint64_t key = 1;
    float row[4] = { v, v, v, v }, got[4] = { NAN };
    if (t < 0 ||
        (v != 0.0f &&
         ps_wait(cl, ps_push(cl, t, &key, 1, row, NULL, NULL)) != PS_OK) ||
        ps_wait(cl, ps_pull(cl, t, &key, 1, got, NULL, NULL)) != PS_OK)
        got[0] = NAN;
    ps_close(cl);
    return got[0];
}

/* Tables added, moved and dropped across restarts keep every other
 * table's rows: the snapshot's tables are found in the new ini by name,
 * the journal after it (written under the old tables: kill -9) replays
 * onto them, and psd writes a snapshot of the new tables before it
 * serves, so the next crash replays under those. A table gone from the
 * ini is refused until --drop-table names it; --check says all of it
 * first. */
static void test_tables_added_moved_or_dropped_keep_the_others_rows(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n");
    ps_options o = client_options();
    int a1, a2, failed;
    oracle_run_many(c.spec, &o, 2, 40, 4, &a1, &failed);
    pid_t p = spawn(psctl_save, c.spec);
    int st;
    waitpid(p, &st, 0);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0, "psctl save");
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 1 written", 5000), 1,
               "the snapshot was written");
    /* These are in the journal only. */
    oracle_run_many(c.spec, &o, 2, 40, 4, &a2, &failed);
    EXPECT_INT(failed, 0, "pushes that failed");
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);

    /* A table added in front of the counter table. */
    char cmd[700], undo[700];
    snprintf(cmd, sizeof cmd, "sed -i 's/^\\[table.%s\\]$/[table.emb]\\n"
             "dim = 4\\n\\n&/' '%s'", ORACLE_TABLE, c.ini);
    snprintf(undo, sizeof undo, "sed -i '/^\\[table.emb\\]$/,/^dim = 4$/d' "
             "'%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    expect_psd_check(&c, 0, NULL, 0, "1 kept by name, 1 new (from their "
                     "init), 0 dropped");
    /* A start that fails before it serves (its port taken) writes
     * nothing: no snapshot of the new tables, no journal segment, so the
     * old ini still fits the files. */
    int busy = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)c.port[0]);
    int one = 1;
    setsockopt(busy, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(busy, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(busy, 4), 0);
    int segments = files_like(c.dir, "psd-node0.journal.");
    cluster_launch(&c, 0, NULL);
    EXPECT_INT(cluster_wait_exit(&c, 0, 10000), 1, "psd with its port taken");
    close(busy);
    EXPECT_INT(files_like(c.dir, "psd-node0.journal."), segments,
               "journal segments after the start that failed");
    assert_int_equal(system(undo), 0);
    expect_psd_check(&c, 0, NULL, 0, "OK");
    assert_int_equal(system(cmd), 0);
    if (cluster_restart(&c, 0))
        fail_msg("a table added: psd did not start");
    EXPECT_INT(cluster_log_wait(&c, 0, "new, starting from their init: "
                                "'emb'", 100), 1,
               "it names the new table");
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 2 of the new tables "
                                "written", 100), 1,
               "it wrote a snapshot of the new tables");
    expect_count(c.spec, a1 + a2, "after a table was added");
    EXPECT_INT(push_pull_one(c.spec, "emb", 2.5f) == 2.5f, 1,
               "the new table takes pushes");
    /* A crash now replays under the new tables. */
    int a3;
    oracle_run_many(c.spec, &o, 1, 20, 4, &a3, &failed);
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    if (cluster_restart(&c, 0))
        fail_msg("after kill -9 under the new tables: psd did not start");
    char *log = cluster_log(&c, 0);
    int rebased = 0;
    for (const char *at = log;
         at && (at = strstr(at, "of the new tables written")); at++)
        rebased++;
    free(log);
    EXPECT_INT(rebased, 1, "snapshots of new tables written (the log holds "
               "every start)");
    EXPECT_INT(push_pull_one(c.spec, "emb", 0.0f) == 2.5f, 1,
               "the new table's row after kill -9");
    expect_count(c.spec, a1 + a2 + a3, "after kill -9 under the new tables");
    EXPECT_INT(term(&c, 0), 0, "stop");

    /* The same tables in another order: --check says only that (it
     * said "other tables than the file: 2 kept by name, 0 new, 0
     * dropped"). */
    char moved[1400];
    snprintf(moved, sizeof moved, "%s && printf '[table.emb]\\ndim = 4\\n' "
             ">> '%s'", undo, c.ini);
    assert_int_equal(system(moved), 0);
    expect_psd_check(&c, 0, NULL, 0, "node 0's snapshot holds the file's "
                     "tables in another order: kept by name");

    /* emb removed from the ini: refused, then dropped by name. */
    assert_int_equal(system(undo), 0);
    char snap[400];
    snprintf(snap, sizeof snap, "%s/psd-node0.snap", c.dir);
    expect_refusal(&c, snap, "table 'emb' (sparse, dim 4) is in the "
                   "snapshot but not in the config: put its section back, "
                   "or start psd with --drop-table emb");
    expect_psd_check(&c, 0, NULL, 1, "--drop-table emb to let its rows go");
    expect_psd_check(&c, 0, "--drop-table emb", 0, "0 new (from their "
                     "init), 1 dropped");
    /* Given twice: no "nothing dropped" for the second. */
    expect_psd_check(&c, 0, "--drop-table emb --drop-table emb", 0,
                     "1 dropped");
    expect_psd_check_not(&c, 0, "--drop-table emb --drop-table emb",
                         "nothing dropped");
    expect_psd_check(&c, 0, "--drop-table " ORACLE_TABLE, 1, "psd never "
                     "drops a table the file has: remove --drop-table "
                     ORACLE_TABLE);
    if (cluster_restart_with(&c, 0, "--drop-table=emb"))
        fail_msg("--drop-table=emb: psd did not start");
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    EXPECT_INT(ps_table(cl, "emb", NULL) < 0, 1, "emb is gone");
    ps_close(cl);
    expect_count(c.spec, a1 + a2 + a3, "after emb was dropped");
    /* A name no snapshot table has (a typo) is said, not passed over. */
    expect_psd_check(&c, 0, "--drop-table embb", 0, "--drop-table embb: "
                     "node 0's snapshot holds no table of that name: nothing "
                     "dropped for it");
    if (cluster_restart_with(&c, 0, "--drop-table=embb"))
        fail_msg("--drop-table=embb: psd did not start");
    char *typo_log = cluster_log(&c, 0);
    int said = typo_log && strstr(typo_log, "--drop-table embb: the "
                                  "snapshot holds no table of that name: "
                                  "nothing dropped for it");
    free(typo_log);
    EXPECT_INT(said, 1, "the start names the --drop-table that "
               "dropped nothing");
    expect_count(c.spec, a1 + a2 + a3, "after the restart");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* One node whose journal fsyncs take 2.5 s (a test knob: a stalled
 * disk), fsync = always, heartbeats every 100 ms and peer_timeout_ms
 * 1 s; one push of the client with these timeouts, which must succeed;
 * its client's figures go to *st. The node is left running. */
static void push_through_a_slow_fsync(test_cluster *c, int request_timeout_ms,
                                      int max_retries, ps_stats_t *st)
{
    setenv("PSD_TEST_FSYNC_DELAY_MS", "2500", 1);
    start(c, 1, "[server]\nheartbeat_ms = 100\npeer_timeout_ms = 1000\n"
          "durability = log\nfsync = always\n");
    unsetenv("PSD_TEST_FSYNC_DELAY_MS");
    ps_options o = client_options();
    o.request_timeout_ms = request_timeout_ms;
    o.max_retries = max_retries;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c->spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = 7;
    float one = 1.0f;
    EXPECT_INT(ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL)), PS_OK,
               "a push whose fsync takes 2.5 s");
    ps_stats(cl, st);
    ps_close(cl);
}

/* With fsync = always, replies wait for the journal's fsync. A slow one
 * must not look like a dead node: psd's heartbeats go out meanwhile, so
 * the client keeps its connection (peer_timeout_ms is 1 s here, ten
 * heartbeats, so a loaded machine does not end it anyway) and is answered
 * once the fsync ends. */
static void test_a_slow_fsync_keeps_the_heartbeats_going(void **state)
{
    (void)state;
    test_cluster c;
    ps_stats_t st;
    push_through_a_slow_fsync(&c, 10000, client_options().max_retries, &st);
    EXPECT_INT((int)st.reconnects, 0, "connections the client gave up on");
    EXPECT_INT((int)st.resends, 0, "parts sent again");
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A snapshot's journal rotation fsyncs the segment, on the loop: with
 * fsync = no all the segment held since the last snapshot, which stalled
 * the loop at each snapshot. Now that fsync runs on the thread pool
 * first, and the rotation's has only what came meanwhile: here the
 * pre-snapshot fsync takes 3 s (the test knob), and pulls are served
 * throughout (none waits 2.5 s), the snapshot is written after it, and a
 * restart finds every push. */
static void test_a_snapshot_syncs_the_journal_off_the_loop(void **state)
{
    (void)state;
    test_cluster c;
    setenv("PSD_TEST_FSYNC_DELAY_MS", "3000", 1);
    start(&c, 1, SERVER "durability = log\nfsync = no\n"
          "snapshot_interval = 0\n");
    unsetenv("PSD_TEST_FSYNC_DELAY_MS");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 20, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes that failed");
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float got;
    double t0 = mono_ms(), worst = 0;
    pid_t p = spawn(psctl_save, c.spec);
    int st, done = 0, pulls = 0, looked = 0;
    while (!done) {
        if (!looked && mono_ms() - t0 > 800) {
            /* The fsync before the writer counts as the snapshot
             * running, in the stats as in psctl save's answer. */
            char cmd[600];
            snprintf(cmd, sizeof cmd, "%s -s %s --json stats",
                     getenv("PSCTL_BIN") ? getenv("PSCTL_BIN")
                                         : "build/psctl", c.spec);
            int sst;
            char *out = run_out(&sst, cmd);
            if (!out || !strstr(out, "\"running\": true"))
                fail_msg("stats during the journal's fsync: %s",
                         out ? out : "");
            free(out);
            looked = 1;
        }
        double b = mono_ms();
        EXPECT_INT(ps_wait(cl, ps_pull(cl, t, &key, 1, &got, NULL, NULL)),
                   PS_OK, "a pull during the save");
        double e = mono_ms() - b;
        worst = e > worst ? e : worst;
        pulls++;
        done = waitpid(p, &st, WNOHANG) == p;
        sleep_ms(2);
    }
    double took = mono_ms() - t0;
    ps_close(cl);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 0, "psctl save");
    EXPECT_INT(took >= 2900, 1, "psctl save took %.0f ms: the fsync before "
               "the rotation ran (3 s)", took);
    /* The fsync on the loop stalled every pull 3 s; a loaded machine's
     * pull takes far less than 2.5. */
    EXPECT_INT(worst < 2500, 1, "the longest of %d pulls during the save "
               "took %.0f ms", pulls, worst);
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 1 written", 5000), 1,
               "the snapshot is written");
    cluster_kill(&c, 0, SIGKILL);
    restart_and_count(&c, "restart", a, "after the restart");
}

/* A client that gives up on a reply held for the fsync reconnects; the
 * connection it closed still owes that reply, and is closed once
 * peer_timeout_ms has passed with the reply still held. psd said of it
 * "nothing heard ... presumed dead" and counted a lost peer, of a client
 * alive and well on its new connection. */
static void test_a_connection_closed_by_its_client_is_not_called_dead(
    void **state)
{
    (void)state;
    test_cluster c;
    ps_stats_t st;
    push_through_a_slow_fsync(&c, 400, 30, &st);
    EXPECT_INT(st.reconnects > 0, 1, "the client gave up and reconnected");
    char *log = cluster_log(&c, 0);
    if (!log || strstr(log, "presumed dead") ||
        !strstr(log, "it closed its side"))
        fail_msg("want \"it closed its side\", no \"presumed dead\": %s",
                 log ? log : "");
    free(log);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* One node with `server` lines, 10 oracle requests of 4 pushes all
 * acknowledged, then kill -9: returns the oracle's count; its first
 * journal segment's path goes in seg. */
/* Edits c's ini in place with the sed expression expr (no single quote
 * in it). */
static void sed_ini(const test_cluster *c, const char *expr)
{
    char cmd[900];
    snprintf(cmd, sizeof cmd, "sed -i '%s' '%s'", expr, c->ini);
    if (system(cmd))
        fail_msg("%s failed", cmd);
}

static int journal_then_kill9(test_cluster *c, const char *server, char *seg,
                              size_t seglen)
{
    start(c, 1, server);
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c->spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes that failed");
    cluster_kill(c, 0, SIGKILL);
    snprintf(seg, seglen, "%s/psd-node0.journal.0000000001", c->dir);
    return a;
}

/* A node killed before its first snapshot leaves only its journal, each
 * of whose segments names the layout it was written under: psd refuses
 * to replay it under another, and psd --check says so before a start is
 * tried, as it does for a snapshot. */
static void test_a_journal_of_another_layout_fails_psd_check(void **state)
{
    (void)state;
    test_cluster c;
    char snap[400], seg[400];
    int a = journal_then_kill9(&c, SERVER "durability = log\n", seg,
                               sizeof seg);
    snprintf(snap, sizeof snap, "%s/psd-node0.snap", c.dir);
    EXPECT_INT(access(snap, F_OK), -1, "a snapshot before the first one "
               "was due");
    /* Same file, 8 shards instead of 4. */
    sed_ini(&c, "s/^shards = 4$/shards = 8/");
    expect_refusal(&c, seg, "layout shape");
    /* The shape is a hash: the refusal says what it covers. */
    expect_refusal(&c, seg, "updater and consistency: one of them changed");
    expect_psd_check(&c, 0, NULL, 1, seg);
    expect_psd_check(&c, -1, NULL, 1, seg);
    expect_psd_check(&c, 0, "--skip-snapshot", 0, "OK");
    sed_ini(&c, "s/^shards = 8$/shards = 4/");
    expect_psd_check(&c, 0, NULL, 0, "OK");
    restart_and_count(&c, "the right layout starts",
                      a, "with the right layout");
}

/* A table's init and seed are not part of the layout (a restart with
 * another init keeps the rows a snapshot holds), but a journal's pushes
 * were made on rows that started from the init of then: replayed onto a
 * new one, every row the journal made read 100 more, without a word (a
 * durability trial). psd and psd --check refuse such a journal and say
 * what to do; done (the old init back, a start and a stop), the new init
 * starts and the rows stay. */
static void test_a_journal_is_not_replayed_onto_another_init(void **state)
{
    (void)state;
    test_cluster c;
    char seg[400];
    int a = journal_then_kill9(&c, SERVER "durability = log\n", seg,
                               sizeof seg);
    sed_ini(&c, "s/^dim = 1$/dim = 1\\ninit = constant 100/");
    expect_refusal(&c, seg, "this push was journaled on rows made with other "
                   "inits");
    expect_refusal(&c, seg, "Put back those of then (the log of the run "
                   "that wrote it names them at its start, with that mark; a "
                   "table not named there starts from zeros), start psd and "
                   "stop it");
    /* That log's start names the mark (and the tables not from zeros). */
    char *log = cluster_log(&c, 0);
    if (!log || !strstr(log, "wire protocol 4; inits mark "))
        fail_msg("the start names the inits mark: %s", log ? log : "");
    free(log);
    expect_psd_check(&c, 0, NULL, 1, "journaled on rows made with other "
                     "inits");
    /* A seed draws nothing for zeros: the same rows, taken. */
    sed_ini(&c, "s/^init = constant 100$/seed = 7/");
    expect_psd_check(&c, 0, NULL, 0, "OK");
    sed_ini(&c, "/^seed = 7$/d");
    expect_psd_check(&c, 0, NULL, 0, "OK");
    if (cluster_restart(&c, 0))
        fail_msg("the init of then starts");
    expect_count(c.spec, a, "replayed onto the init of then");
    EXPECT_INT(term(&c, 0), 0, "stops, writing its final snapshot");
    sed_ini(&c, "s/^dim = 1$/dim = 1\\ninit = constant 100/");
    expect_psd_check(&c, 0, NULL, 0, "OK");
    restart_and_count(&c, "a new init after a clean stop starts",
                      a, "the snapshot's rows under the new init");
}

/* A power loss can leave the journal's new length on disk without the
 * data written into it: the segment then ends in zeros. psd cuts them off
 * as it does a record cut short, says so, and serves every push that was
 * written. */
static void test_a_journal_ending_in_zeros_is_cut_and_psd_starts(void **state)
{
    (void)state;
    test_cluster c;
    char seg[400], cmd[600];
    int a = journal_then_kill9(&c, SERVER "durability = log\nfsync = always\n",
                               seg, sizeof seg);
    struct stat before;
    assert_int_equal(stat(seg, &before), 0);
    snprintf(cmd, sizeof cmd, "head -c 12288 /dev/zero >> '%s'", seg);
    assert_int_equal(system(cmd), 0);
    expect_psd_check(&c, 0, NULL, 0, "OK");
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start on a journal that ends in zeros");
    expect_count(c.spec, a, "after the zeros were cut");
    EXPECT_INT(cluster_log_wait(&c, 0, "zeros to the end of the file", 1000),
               1, "a log line saying what was cut");
    char *log = cluster_log(&c, 0);
    char off[64];
    snprintf(off, sizeof off, "offset %lld", (long long)before.st_size);
    EXPECT_INT(log && strstr(log, off) != NULL, 1, "the line names %s: %s",
               off, log ? log : "(no log)");
    free(log);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}


/* On a file system of blocks under 4 KiB (ext4 with 1 KiB blocks, which
 * mkfs picks under 512 MiB) a crash can leave the newest record zero from
 * a block boundary that is no page boundary: a torn tail too (it was
 * refused as a record CRC mismatch, and psd did not start until the file
 * was cut by hand). psd --export, which replays as a start does but reads
 * only, takes the segment up to that record; on a file system of 4 KiB
 * blocks the same bytes are still refused as damage. Made on a loop ext4
 * in a mount namespace of its own (as root); skipped where that cannot
 * be done. */
static void test_a_tail_zero_from_a_small_block_is_cut(void **state)
{
    (void)state;
    enum { KEYS = 500 };
    test_cluster c;
    char img[600], mnt[600], ini2[600], cmd[5000];
    start(&c, 1, SERVER "durability = log\nfsync = always\n"
          "snapshot_interval = 0\n");
    snprintf(img, sizeof img, "%s/img", c.dir);
    snprintf(mnt, sizeof mnt, "%s/mnt", c.dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    int st;
    snprintf(cmd, sizeof cmd, "truncate -s 16M '%s' && mkfs.ext4 -q -F -b "
             "1024 '%s' && unshare -m sh -c \"mount -o loop '%s' '%s'\"",
             img, img, img, mnt);
    free(run_out(&st, cmd));
    if (st != 0) {
        cluster_stop(&c);
        skip();                  /* not root, no mkfs.ext4 or no loop */
    }
    /* Pushes of KEYS new keys, each a record of about 6 KB, until the
     * last one ends more than 1 KiB past a page boundary. */
    ps_options o = client_options();
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t keys[KEYS];
    float ones[KEYS];
    char seg[600];
    snprintf(seg, sizeof seg, "%s/psd-node0.journal.0000000001", c.dir);
    struct stat sb;
    uint64_t end = 0, rec = 0;
    int pushes = 0;
    for (; pushes < 20; pushes++) {
        for (int i = 0; i < KEYS; i++) {
            keys[i] = 1000000 + (uint64_t)pushes * KEYS + (uint64_t)i;
            ones[i] = 1;
        }
        EXPECT_INT(ps_wait(cl, ps_push(cl, t, keys, KEYS, ones, NULL, NULL)),
                   PS_OK, "push %d", pushes);
        assert_int_equal(stat(seg, &sb), 0);
        rec = (uint64_t)sb.st_size - end;
        end = (uint64_t)sb.st_size;
        if (pushes > 0 && end % 4096 > 1024 + 64)
            break;
    }
    ps_close(cl);
    cluster_kill(&c, 0, SIGKILL);
    assert_true(pushes < 20 && rec > 5120);
    /* Zeros from the 1 KiB boundary after the last page boundary: its
     * header (12 bytes, 5 KB before) is whole. */
    uint64_t from = end / 4096 * 4096 + 1024;
    int fd = open(seg, O_WRONLY);
    assert_true(fd >= 0);
    static const char zeros[4096];
    assert_int_equal(pwrite(fd, zeros, (size_t)(end - from), (off_t)from),
                     (ssize_t)(end - from));
    close(fd);
    snprintf(ini2, sizeof ini2, "%s/small.ini", c.dir);
    snprintf(cmd, sizeof cmd, "sed 's|^data_dir = .*|data_dir = %s|' '%s' > "
             "'%s'", mnt, c.ini, ini2);
    assert_int_equal(system(cmd), 0);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    /* On 1 KiB blocks: a torn tail, the records before it exported. */
    snprintf(cmd, sizeof cmd, "unshare -m sh -c \"mount -o loop '%s' '%s' && "
             "cp '%s' '%s'/ && '%s' --export '%s/out' -c '%s' -n 0\"", img,
             mnt, seg, mnt, psd, c.dir, ini2);
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "psd --export on 1 KiB blocks: %s", out ? out : "");
    free(out);
    /* On this file system, of 4 KiB blocks or more (where it is not, the
     * same bytes are a torn tail here too): damage. */
    struct statfs fs;
    if (statfs(c.dir, &fs) == 0 && fs.f_bsize >= 4096) {
        snprintf(cmd, sizeof cmd, "'%s' --export '%s/out2' -c '%s' -n 0",
                 psd, c.dir, c.ini);
        out = run_out(&st, cmd);
        EXPECT_INT(st != 0 && out && strstr(out, "record CRC mismatch"), 1,
                   "psd --export of the same segment on 4 KiB blocks: %s",
                   out ? out : "");
        free(out);
    }
    cluster_stop(&c);
}

/* One node with durability = log and the given fsync, snapshots only when
 * asked, its data folder DIR/data (written to data), started (with
 * PSD_TEST_SNAPSHOT_PAUSE = pause, unless NULL); then 10 oracle requests
 * of 4 pushes, all acknowledged: their count. */
static int pushes_into_data_dir(test_cluster *c, char *data, size_t datalen,
                                const char *fsync, const char *pause)
{
    char server[200];
    snprintf(server, sizeof server, SERVER "durability = log\nfsync = %s\n"
             "snapshot_interval = 0\n", fsync);
    start(c, 1, server);
    EXPECT_INT(term(c, 0), 0, "stop");
    char cmd[1200];
    snprintf(data, datalen, "%s/data", c->dir);
    snprintf(cmd, sizeof cmd, "sed -i 's|^data_dir = .*|data_dir = %s|' '%s'",
             data, c->ini);
    assert_int_equal(system(cmd), 0);
    if (pause)
        setenv("PSD_TEST_SNAPSHOT_PAUSE", pause, 1);
    int rc = cluster_restart(c, 0);
    unsetenv("PSD_TEST_SNAPSHOT_PAUSE");
    if (rc)
        fail_msg("restart");
    ps_options o = client_options();
    int a, failed;
    oracle_run_many(c->spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes into the data folder");
    return a;
}

/* After a folder's trouble is over: more pushes, all acknowledged; kill -9
 * and a restart; every acknowledged push there (a, those before, and one
 * more that may have been applied while the folder was away). Stops the
 * node. */
static void pushes_survive_kill_9(test_cluster *c, const ps_options *o,
                                  int a)
{
    int b, failed;
    oracle_run_many(c->spec, o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes after the save");
    cluster_kill(c, 0, SIGKILL);
    if (cluster_restart(c, 0))
        fail_msg("restart after kill -9");
    char why[200];
    if (oracle_check(c->spec, a + b, a + b + 1, why, sizeof why))
        fail_msg("%s", why);
    EXPECT_INT(cluster_stop(c), 0, "stops cleanly");
}

/* With the journal held for the data folder: a push (applied, its
 * answer waiting, or refused) and the next one, from another client,
 * refused saying `why`. */
static void pushes_are_refused(const char *spec, const ps_options *o,
                               const char *why)
{
    ps_client *cl, *next;
    assert_int_equal(ps_open(&cl, spec, o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f;
    int rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc == PS_ETIMEDOUT || rc == PS_ESERVER, 1,
               "a push after the folder went: %s", ps_strerror(rc));
    assert_int_equal(ps_open(&next, spec, o), PS_OK);
    rc = ps_wait(next, ps_push(next, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc, PS_ESERVER, "the next push: %s", ps_strerror(rc));
    EXPECT_SUBSTR(ps_last_error(next), why, "what the refused push is told");
    ps_close(next);
    ps_close(cl);
}

/* The same with fsync = everysec, then the folder is removed with
 * everything in it, as rm -rf by mistake or a cleanup script would. */
static int push_then_remove_data_dir(test_cluster *c, char *data,
                                     size_t datalen, const char *pause)
{
    int a = pushes_into_data_dir(c, data, datalen, "everysec", pause);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data);
    assert_int_equal(system(cmd), 0);
    return a;
}

/* One node with a journal: pushes, a stop by sig (SIGTERM: the final
 * snapshot; SIGKILL: none), a start with the journal whole, which must
 * not say `said`, and more pushes. *a: the pushes before the stop. */
static void run_stop_run(test_cluster *c, int sig, const char *said, int *a)
{
    start(c, 1, SERVER "durability = log\nfsync = always\n"
          "snapshot_interval = 0\n");
    ps_options o = client_options();
    int b, failed;
    oracle_run_many(c->spec, &o, 1, 20, 4, a, &failed);
    EXPECT_INT(failed, 0, "pushes before the stop");
    if (sig == SIGTERM)
        EXPECT_INT(term(c, 0), 0, "stop (the final snapshot)");
    else
        cluster_kill(c, 0, sig);
    if (cluster_restart(c, 0))
        fail_msg("restart");
    oracle_run_many(c->spec, &o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes after the restart");
    char *log = cluster_log(c, 0);
    EXPECT_INT(log && strstr(log, said) != NULL, 0,
               "a start with the journal whole warned: %s", log ? log : "");
    free(log);
}

/* A journal taken from the folder while the node was down (a file
 * removed by hand, a data folder restored without its journal): the
 * pushes acknowledged after the snapshot are gone, and the start says so,
 * naming the segment (it said nothing: a replay of no segment at all is an
 * empty one). A stop and start with the journal whole says nothing of the
 * kind. */
static void test_a_journal_removed_while_down_is_said_at_start(void **state)
{
    (void)state;
    static const char said[] = "is missing, the segment snapshot";
    test_cluster c;
    int a;
    run_stop_run(&c, SIGTERM, said, &a);
    cluster_kill(&c, 0, SIGKILL);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/psd-node0.journal.*", c.dir);
    assert_int_equal(system(cmd), 0);
    if (cluster_restart(&c, 0))
        fail_msg("restart without the journal");
    EXPECT_INT(cluster_log_wait(&c, 0, said, 3000), 1,
               "the start says the journal is missing");
    EXPECT_INT(cluster_log_wait(&c, 0, "psd-node0.journal.0000000002 is "
                                "missing, the segment snapshot 1 says", 100),
               1, "naming the segment and the snapshot");
    expect_count(c.spec, a, "the snapshot's pushes, not the journal's");
    EXPECT_INT(cluster_stop(&c), 0, "the node stops cleanly");
}

/* The newest journal segment removed while the node is down: the start
 * says so, naming it (an operators' trial: the listing alone cannot tell,
 * the start made a segment of that number again, and the pushes it had
 * acknowledged were lost unsaid). A start with the journal whole says
 * nothing of the kind. */
static void test_the_newest_segment_removed_while_down_is_said(void **state)
{
    (void)state;
    static const char said[] = "is missing, the newest segment this node "
                               "made";
    test_cluster c;
    int a;
    run_stop_run(&c, SIGKILL, said, &a);     /* segments 1, then 2 */
    cluster_kill(&c, 0, SIGKILL);
    expect_psd_check_not(&c, 0, "", "newest journal segment");
    char path[1200];
    snprintf(path, sizeof path, "%s/psd-node0.journal.0000000002", c.dir);
    assert_int_equal(unlink(path), 0);
    expect_psd_check(&c, 0, NULL, 0, "node 0's newest journal segment (2, "
                     "as psd-node0.journal.head says) is missing");
    const char *psd = getenv("PSD_BIN");
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "'%s' --export '%s/exp' -c '%s' -n 0 2>&1",
             psd ? psd : "build/psd", c.dir, c.ini);
    int st;
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "psd --export: %s", out ? out : "");
    EXPECT_INT(out && strstr(out, "psd --export: node 0: ") &&
                   strstr(out, "journal.0000000002 is missing, the newest "
                                "segment it made"), 1,
               "psd --export says so too: %s", out ? out : "");
    free(out);
    if (cluster_restart(&c, 0))
        fail_msg("restart without segment 2");
    EXPECT_INT(cluster_log_wait(&c, 0, "psd-node0.journal.0000000002 is "
                                "missing, the newest segment this node made",
                                3000), 1, "the start names the segment");
    expect_count(c.spec, a, "segment 1's pushes, not segment 2's");
    EXPECT_INT(cluster_stop(&c), 0, "the node stops cleanly");
}

/* The data folder removed under a running node: the journal's
 * descriptor still takes writes, but into a file no restart will find.
 * Acknowledging a push whose record went there would break the promise
 * of durability = log, so psd treats the segment as one it cannot write:
 * pushes are refused with PS_ESERVER, pulls go on, psctl stats says why,
 * and a stop reports the failed final snapshot with exit status 1. */
static void test_a_removed_data_dir_refuses_pushes(void **state)
{
    (void)state;
    test_cluster c;
    char data[500], cmd[1200];
    push_then_remove_data_dir(&c, data, sizeof data, NULL);
    ps_options o = client_options();
    o.max_retries = 2;
    ps_client *cl, *reader;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    assert_int_equal(ps_open(&reader, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f, v = 0;
    int rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc == PS_ETIMEDOUT || rc == PS_ESERVER, 1,
               "a push after its journal segment was removed: %s",
               ps_strerror(rc));
    rc = ps_wait(reader, ps_push(reader, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc, PS_ESERVER, "the next push: %s", ps_strerror(rc));
    EXPECT_SUBSTR(ps_last_error(reader), "removed",
                  "what the refused push is told");
    EXPECT_INT(ps_wait(reader, ps_pull(reader, t, &key, 1, &v, NULL, NULL)),
               PS_OK, "a pull");
    const char *psctl = getenv("PSCTL_BIN") ? getenv("PSCTL_BIN")
                                            : "build/psctl";
    int st;
    snprintf(cmd, sizeof cmd, "%s -s %s stats", psctl, c.spec);
    char *out = run_out(&st, cmd);
    EXPECT_INT(st, 0, "psctl stats: %s", out ? out : "");
    EXPECT_SUBSTR(out ? out : "", "removed", "psctl stats");
    free(out);
    ps_close(cl);
    ps_close(reader);
    EXPECT_INT(term(&c, 0), 1, "a stop whose final snapshot has no folder");
    /* Not "the previous files are kept": they went with the folder. */
    EXPECT_INT(cluster_log_wait(&c, 0, "final snapshot not written: ", 1000),
               1, "the stop says where the node's files are");
    cluster_stop(&c);
}

/* The same, then the folder made again: the records held for the removed
 * segment go to a new one, which the snapshot asked for covers too, so
 * psctl save writes the node's state to the new folder. Pushes are still
 * refused while that snapshot is being written (the journal then starts
 * after a snapshot that is missing), then taken again, and after kill -9
 * every acknowledged push is there (and the one applied while the folder
 * was gone, whose reply waited). */
static void test_a_removed_data_dir_made_again_is_saved_to(void **state)
{
    (void)state;
    test_cluster c;
    char data[500];
    int a = push_then_remove_data_dir(&c, data, sizeof data,
                                      "written:1500");
    ps_options o = client_options();
    o.max_retries = 2;
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    int t = ps_table(cl, ORACLE_TABLE, NULL);
    uint64_t key = oracle_key(0);
    float one = 1.0f;
    int rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc == PS_ETIMEDOUT || rc == PS_ESERVER, 1,
               "a push after the folder went: %s", ps_strerror(rc));
    ps_close(cl);
    assert_int_equal(mkdir(data, 0700), 0);
    pid_t saver = spawn(psctl_save, c.spec);
    EXPECT_INT(cluster_log_wait(&c, 0, "test pause: snapshot writer", 5000),
               1, "the snapshot writer is at work");
    assert_int_equal(ps_open(&cl, c.spec, &o), PS_OK);
    rc = ps_wait(cl, ps_push(cl, t, &key, 1, &one, NULL, NULL));
    EXPECT_INT(rc, PS_ESERVER, "a push while the snapshot is written: %s",
               ps_strerror(rc));
    EXPECT_SUBSTR(ps_last_error(cl), "until a snapshot",
                  "what the refused push is told");
    ps_close(cl);
    EXPECT_INT(reap(saver), 0, "psctl save into the folder made again");
    EXPECT_INT(cluster_log_wait(&c, 0, "journal: writing again", 2000), 1,
               "the journal writes again");
    int b, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes after the save");
    cluster_kill(&c, 0, SIGKILL);
    if (cluster_restart(&c, 0))
        fail_msg("restart after kill -9");
    char why[200];
    if (oracle_check(c.spec, a + b, a + b + 1, why, sizeof why))
        fail_msg("%s", why);
    ps_client *check;
    float v = 0;
    assert_int_equal(ps_open(&check, c.spec, &o), PS_OK);
    EXPECT_INT(ps_wait(check, ps_pull(check, t, &key, 1, &v, NULL, NULL)),
               PS_OK, "a pull after the restart");
    EXPECT_FLOAT(v, (float)(a + b + 1), "the key pushed while the folder "
                 "was gone");
    ps_close(check);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* The data folder replaced under a running node (moved away, and a
 * restored backup, or a second psd the lock no longer kept out, in its
 * place): the node wrote its snapshot and journal segments by path into
 * the new folder, over the other's files (an operators' trial lost a
 * second psd's 3,661 pushes so). Now, within a second, it says so and
 * writes nothing there: pushes are refused (their journal is the moved
 * folder's), psctl save and the stop fail saying why, and the folder's
 * files stay as they were. Moved aside in turn and made again, the
 * folder takes the node's snapshot, and every acknowledged push
 * survives kill -9. */
static void test_a_replaced_data_dir_is_not_written_over(void **state)
{
    (void)state;
    test_cluster c;
    char data[300], cmd[1800], path[600];
    int a = pushes_into_data_dir(&c, data, sizeof data, "always", NULL);
    ps_options o = client_options();
    /* Moved, not removed: the journal's segment is still a file, which
     * takes its writes. */
    snprintf(cmd, sizeof cmd, "mv '%s' '%s.old' && mkdir '%s' && echo backup "
             "> '%s/marker' && echo 4242 > '%s/psd-node0.lock'", data, data,
             data, data, data);
    assert_int_equal(system(cmd), 0);
    EXPECT_INT(cluster_log_wait(&c, 0, "was replaced while psd ran (no psd "
                                "runs in it): its psd-node0.lock is not the "
                                "one this node took", 3000), 1,
               "the node sees the folder replaced within a second");
    o.max_retries = 2;
    /* The first is applied and its record waits (its reply with it):
     * the snapshot to come covers it; the next is refused. */
    pushes_are_refused(c.spec, &o, "the data folder was replaced");
    int st;
    char *out = cluster_psctl(&c, &st, "save");
    EXPECT_INT(st, 1, "psctl save into the replaced folder: %s",
               out ? out : "");
    EXPECT_SUBSTR(out ? out : "", "was replaced while psd ran",
                  "psctl save says why");
    free(out);
    snprintf(cmd, sizeof cmd, "ls -A '%s' | tr '\\n' ' '", data);
    out = run_out(&st, cmd);
    EXPECT_STR(out ? out : "", "marker psd-node0.lock ",
               "the replaced folder holds what it held");
    free(out);
    snprintf(path, sizeof path, "%s/psd-node0.lock", data);
    FILE *f = fopen(path, "r");
    char held[16] = "";
    if (f) {
        if (!fgets(held, sizeof held, f))
            held[0] = '\0';
        fclose(f);
    }
    EXPECT_STR(held, "4242\n", "its lock file untouched");
    /* Moved aside and made again: saved there, and pushes go on. */
    snprintf(cmd, sizeof cmd, "mv '%s' '%s.backup' && mkdir '%s'", data,
             data, data);
    assert_int_equal(system(cmd), 0);
    out = cluster_psctl(&c, &st, "save");
    EXPECT_INT(st, 0, "psctl save into the folder made again: %s",
               out ? out : "");
    free(out);
    pushes_survive_kill_9(&c, &o, a);
}

/* A folder put at the path while the snapshot writer writes (the
 * review: a copy of the folder taken mid-write, moved into place) got the
 * writer's file by its rename, over the copy's, and psctl save said it
 * was written there. The writer works in the folder it began in, by its
 * descriptor: the snapshot lands in the moved folder, the one at the path
 * keeps what it holds, and the node then says the folder was replaced.
 * Put back, the folder is said to be the node's again, a snapshot is
 * taken by itself, and pushes go on; every acknowledged push survives
 * kill -9. */
static void test_a_folder_replaced_while_a_snapshot_is_written(void **state)
{
    (void)state;
    test_cluster c;
    char data[300], cmd[1800];
    int a = pushes_into_data_dir(&c, data, sizeof data, "always",
                                 "written:1500");
    ps_options o = client_options();
    int b, failed;
    pid_t saver = spawn(psctl_save, c.spec);
    EXPECT_INT(cluster_log_wait(&c, 0, "test pause: snapshot writer", 5000),
               1, "the snapshot writer is at work");
    snprintf(cmd, sizeof cmd, "mv '%s' '%s.old' && mkdir '%s' && echo backup "
             "> '%s/marker' && echo 4242 > '%s/psd-node0.lock'", data, data,
             data, data, data);
    assert_int_equal(system(cmd), 0);
    EXPECT_INT(reap(saver), 0, "psctl save: written, in the folder it began "
               "in");
    int st;
    snprintf(cmd, sizeof cmd, "ls -A '%s' | tr '\\n' ' '", data);
    char *out = run_out(&st, cmd);
    EXPECT_STR(out ? out : "", "marker psd-node0.lock ",
               "the folder put in its place holds what it held");
    free(out);
    char path[400];
    snprintf(path, sizeof path, "%s.old/psd-node0.snap", data);
    EXPECT_INT(access(path, F_OK), 0, "the snapshot is in the moved folder");
    EXPECT_INT(cluster_log_wait(&c, 0, "was replaced while psd ran", 3000), 1,
               "the node sees the folder replaced");
    /* Put back. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mv '%s.old' '%s'", data, data,
             data);
    assert_int_equal(system(cmd), 0);
    EXPECT_INT(cluster_log_wait(&c, 0, "is this node's data folder again",
                                3000), 1, "the folder is said to be back");
    EXPECT_INT(cluster_log_wait(&c, 0, "snapshot 2 written", 6000), 1,
               "a snapshot, which lets pushes go again");
    oracle_run_many(c.spec, &o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes after the folder came back");
    cluster_kill(&c, 0, SIGKILL);
    restart_and_count(&c, "restart after kill -9",
                      a + b, "every acknowledged push");
}

/* The same at the stop: the final snapshot, written in psd itself, went
 * by path, and a copy moved to the path while it was written got a
 * truncated image and lost its journal to the prune, the stop saying
 * exit 0 (the second review). It is written in the folder it began in. */
static void test_a_folder_replaced_during_the_final_snapshot(void **state)
{
    (void)state;
    test_cluster c;
    char data[300], cmd[1800];
    int a = pushes_into_data_dir(&c, data, sizeof data, "always",
                                 "written:1500");
    kill(c.pid[0], SIGTERM);
    EXPECT_INT(cluster_log_wait(&c, 0, "test pause: snapshot writer", 5000),
               1, "the final snapshot is being written");
    snprintf(cmd, sizeof cmd, "mv '%s' '%s.old' && mkdir '%s' && echo backup "
             "> '%s/marker'", data, data, data, data);
    assert_int_equal(system(cmd), 0);
    EXPECT_INT(cluster_wait_exit(&c, 0, 10000), 0,
               "the stop: written, in the folder it began in");
    int st;
    snprintf(cmd, sizeof cmd, "ls -A '%s' | tr '\\n' ' '", data);
    char *out = run_out(&st, cmd);
    EXPECT_STR(out ? out : "", "marker ",
               "the folder put in its place holds what it held");
    free(out);
    /* The moved folder is the node's, whole: started from it, every
     * acknowledged push is there. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mv '%s.old' '%s'", data, data,
             data);
    assert_int_equal(system(cmd), 0);
    restart_and_count(&c, "restart from the moved folder",
                      a, "every acknowledged push");
}

/* data_dir is a volume's mount point, and the volume goes (unmounted,
 * or lost): the empty folder beneath is there at the path, without the
 * node's lock file, and was taken for one the operator made again, so
 * the node's files went to the disk beneath; with the journal, pushes
 * then went on into a segment on the volume that went, which no restart
 * reads (the fourth review lost 3,562 so). The node now sees the folder
 * is on another file system, writes nothing there by itself, and refuses
 * pushes; psctl save, the operator's word, writes its snapshot there,
 * and pushes go on, every acknowledged one surviving kill -9. */
static void test_an_unmounted_data_volume_is_not_written_beneath(
    void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\nfsync = always\n"
          "snapshot_interval = 0\n");
    EXPECT_INT(term(&c, 0), 0, "stop");
    data_dir_on_small_disk(&c, "4m");
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start on the tmpfs");
    ps_options o = client_options();
    o.max_retries = 2;
    int a, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes");
    char dir[400];
    snprintf(dir, sizeof dir, "%s", small_disk);
    assert_int_equal(umount2(small_disk, MNT_DETACH), 0);
    small_disk[0] = '\0';
    EXPECT_INT(cluster_log_wait(&c, 0, "is on another file system than the "
                                "folder this node locked at start", 3000), 1,
               "the node says the folder is not its file system's");
    pushes_are_refused(c.spec, &o, "volume is no longer mounted");
    char cmd[600];
    int st;
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    char *out = run_out(&st, cmd);
    EXPECT_STR(out ? out : "", "0\n", "nothing written beneath by itself");
    free(out);
    out = cluster_psctl(&c, &st, "save");
    EXPECT_INT(st, 0, "psctl save, the operator's word: %s", out ? out : "");
    free(out);
    pushes_survive_kill_9(&c, &o, a);
}

/* SIGUSR1 and SIGUSR2 ended psd (their default action): a logrotate
 * script's "kill -USR1", the way many daemons reopen their logs, lost
 * every push since the last snapshot, with no word (the ops trial: 11,169
 * pushes). Now they are logged and change nothing: the node serves on,
 * and its stop writes the final snapshot. */
static void test_usr_signals_are_logged_and_change_nothing(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = snapshot\nsnapshot_interval = 300\n");
    ps_options o = client_options();
    int a, b, failed;
    oracle_run_many(c.spec, &o, 1, 10, 4, &a, &failed);
    EXPECT_INT(failed, 0, "pushes before the signals");
    kill(c.pid[0], SIGUSR1);
    EXPECT_INT(cluster_log_wait(&c, 0, "received SIGUSR1: psd does nothing "
                                "on it", 3000), 1, "SIGUSR1 is logged");
    kill(c.pid[0], SIGUSR2);
    EXPECT_INT(cluster_log_wait(&c, 0, "received SIGUSR2: psd does nothing "
                                "on it", 3000), 1, "SIGUSR2 is logged");
    EXPECT_INT(cluster_alive(&c, 0), 1, "the node runs on");
    oracle_run_many(c.spec, &o, 1, 10, 4, &b, &failed);
    EXPECT_INT(failed, 0, "pushes after the signals");
    EXPECT_INT(term(&c, 0), 0, "the stop writes the final snapshot");
    restart_and_count(&c, "restart", a + b, "every push, after the restart");
}

/* A memory cgroup of this test's own with a limit of `mib` MiB: its
 * folder into dir (for cgroup.procs), or 0 where none can be made (not
 * root; no memory controller, v2's or v1's). */
static int memory_cgroup(char *dir, size_t len, int mib)
{
    char path[700];
    FILE *f = fopen("/sys/fs/cgroup/cgroup.controllers", "re");
    char ctl[512] = "";
    if (f) {
        if (!fgets(ctl, sizeof ctl, f))
            ctl[0] = '\0';
        fclose(f);
    }
    const char *limit_file = strstr(ctl, "memory") ? "memory.max"
                                                  : "memory.limit_in_bytes";
    snprintf(dir, len, strstr(ctl, "memory") ? "/sys/fs/cgroup/psd-test-%d"
                                             : "/sys/fs/cgroup/memory/"
                                               "psd-test-%d",
             (int)getpid());
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return 0;
    snprintf(path, sizeof path, "%s/%s", dir, limit_file);
    f = fopen(path, "we");
    int ok = f && fprintf(f, "%llu\n", (unsigned long long)mib << 20) > 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        rmdir(dir);
    return ok;
}

/* A snapshot larger than the memory psd may use (its cgroup's limit) is
 * refused before the load, by the start and by psd --check, with the
 * reason: the kernel killed psd while it loaded, the log's last line
 * "loading snapshot", and a unit restarted it into the same end (a
 * memory trial). Skipped where no memory cgroup can be made. */
static char test_cgroup[256];

/* Removes the test's cgroup, also after a failure: emptied as its last
 * task is released, a moment after that task's exit. */
static int remove_test_cgroup(void **state)
{
    (void)state;
    for (int i = 0; test_cgroup[0] && i < 200 && rmdir(test_cgroup) != 0 &&
                    errno == EBUSY;
         i++)
        usleep(10000);
    test_cgroup[0] = '\0';
    return 0;
}

static void test_a_snapshot_beyond_the_memory_limit_is_refused_before_loading(
    void **state)
{
    (void)state;
    char *cg = test_cgroup;
    if (!memory_cgroup(cg, sizeof test_cgroup, 40))
        skip();
    test_cluster c;
    if (cluster_start(&c, 1, 4, "[table.t]\nkind = sparse\ndim = 64\n"))
        fail_msg("cluster did not start");
    /* 196,608 keys of 256 bytes, and 8 of its key each: 49.5 MiB. */
    ps_client *cl;
    assert_int_equal(ps_open(&cl, c.spec, NULL), 0);
    enum { BATCH = 8192, DIM = 64 };
    static uint64_t keys[BATCH];
    static float vals[BATCH * DIM];
    for (size_t i = 0; i < BATCH * DIM; i++)
        vals[i] = 1;
    for (uint64_t at = 0; at < 24 * BATCH; at += BATCH) {
        for (size_t i = 0; i < BATCH; i++)
            keys[i] = at + i;
        ps_ts ts = ps_push(cl, 0, keys, BATCH, vals, NULL, NULL);
        EXPECT_INT(ps_wait(cl, ts), PS_OK, "push at %llu: %s",
                   (unsigned long long)at, ps_last_error(cl));
    }
    ps_close(cl);
    EXPECT_INT(term(&c, 0), 0, "the node stops (final snapshot)");
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    static const char *const how[] = { "--check -n 0", "-n 0" };
    for (int k = 0; k < 2; k++) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "sh -c 'echo $$ > %s/cgroup.procs && "
                 "exec %s %s -c %s'", cg, psd, how[k], c.ini);
        int st;
        char *o = run_out(&st, cmd);
        /* Exit 1, not killed (-1: a signal), and the reason. */
        EXPECT_INT(st, 1, "psd %s in a cgroup of 40 MiB: %s", how[k], o);
        EXPECT_SUBSTR(o, "snapshot", "the snapshot named");
        EXPECT_SUBSTR(o, "cannot load here: it holds 49.5 MiB of rows", "its size");
        EXPECT_SUBSTR(o, "more than the 40.0 MiB psd may use on this host "
                      "(its cgroup's memory limit", "the limit and whose");
        free(o);
    }
    /* With the table dropped (--drop-table, an ini without it), nothing
     * of the file is loaded: not refused (a review: 63 MiB of a 64 MiB
     * snapshot dropped loaded in 4 MB, and the advice of the refusal,
     * --skip-snapshot, set the rest aside). */
    char ini2[400], cmd2[1600];
    snprintf(ini2, sizeof ini2, "%s.dropped", c.ini);
    snprintf(cmd2, sizeof cmd2, "sed '/^\\[table.t\\]/,/^dim = 64/d' '%s' > "
             "'%s' && sh -c 'echo $$ > %s/cgroup.procs && exec %s --check "
             "-n 0 -c %s --drop-table t'", c.ini, ini2, cg, psd, ini2);
    int st2;
    char *o2 = run_out(&st2, cmd2);
    EXPECT_INT(st2, 0, "psd --check --drop-table t in the cgroup: %s", o2);
    free(o2);
    remove_test_cgroup(NULL);
    /* Without the limit, the same snapshot loads. */
    if (cluster_restart(&c, 0))
        fail_msg("the node did not restart");
    EXPECT_INT(cluster_log_wait(&c, 0, "loaded snapshot", 5000), 1,
               "the snapshot loads without the limit");
    EXPECT_INT(cluster_stop(&c), 0, "the node stops");
}

/* A missing data folder is created at start, its parents 0755 and the
 * folder itself 0700 (less the umask), also when data_dir ends with a
 * slash; the node's files are 0600. */
static void test_a_missing_data_dir_is_created_0700(void **state)
{
    (void)state;
    test_cluster c;
    start(&c, 1, SERVER "durability = log\n");
    EXPECT_INT(term(&c, 0), 0, "stop");
    char data[500], cmd[1200];
    snprintf(data, sizeof data, "%s/parent/data/", c.dir);
    snprintf(cmd, sizeof cmd, "sed -i 's|^data_dir = .*|data_dir = %s|' '%s'",
             data, c.ini);
    assert_int_equal(system(cmd), 0);
    mode_t was = umask(022);
    int rc = cluster_restart(&c, 0);
    umask(was);
    if (rc)
        fail_msg("psd did not start with data_dir = %s", data);
    struct stat st;
    char path[600];
    snprintf(path, sizeof path, "%s/parent", c.dir);
    assert_int_equal(stat(path, &st), 0);
    EXPECT_INT((int)(st.st_mode & 07777), 0755, "%s's mode", path);
    assert_int_equal(stat(data, &st), 0);
    EXPECT_INT((int)(st.st_mode & 07777), 0700, "%s's mode", data);
    snprintf(path, sizeof path, "%spsd-node0.lock", data);
    assert_int_equal(stat(path, &st), 0);
    EXPECT_INT((int)(st.st_mode & 07777), 0600, "%s's mode", path);
    EXPECT_INT(cluster_stop(&c), 0, "stops cleanly");
}

/* A node killed with pushes journaled and started with a smaller
 * max_frame cannot replay them: the start says the max_frame that reads
 * them, and that a clean stop lets it be lowered (a trial's start failed
 * with "record longer than a frame allows" alone). Started so, stopped,
 * then started with the smaller one, it keeps every push. */
static void test_a_journal_past_a_lowered_max_frame_says_what_reads_it(
    void **state)
{
    (void)state;
    enum { ROWS = 20000, DIM = 4 };
    test_cluster c;
    if (cluster_start(&c, 1, 4, SERVER "durability = log\n"
                      "snapshot_interval = 0\n[table.d]\nkind = dense\n"
                      "rows = 20000\ndim = 4\nupdater = sum\n"))
        fail_msg("cluster did not start");
    ps_client *cl = NULL;
    assert_int_equal(ps_open(&cl, c.spec, NULL), 0);
    float *g = malloc(sizeof(float) * ROWS * DIM);
    assert_non_null(g);
    for (int i = 0; i < ROWS * DIM; i++)
        g[i] = 1.0f;
    EXPECT_INT(ps_wait(cl, ps_push_range(cl, 0, 0, ROWS, g, NULL, NULL)),
               PS_OK, "a 320 KB push");
    ps_close(cl);
    kill(c.pid[0], SIGKILL);
    cluster_wait_exit(&c, 0, 5000);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "sed -i 's/^durability = log$/&\\nmax_frame "
             "= 16K/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    cluster_launch(&c, 0, NULL);
    EXPECT_INT(cluster_wait_exit(&c, 0, 10000), 1, "psd with a journal of "
               "larger frames");
    EXPECT_INT(cluster_log_wait(&c, 0, "record longer than a frame allows (",
                                100), 1, "the refusal");
    EXPECT_INT(cluster_log_wait(&c, 0, "written under a larger [server] "
                                "max_frame; start the node with max_frame = ",
                                100), 1, "what reads it");
    /* As it says: the larger frame, a clean stop, then the smaller. */
    snprintf(cmd, sizeof cmd, "sed -i 's/^max_frame = 16K$/max_frame = "
             "1M/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start with max_frame = 1M");
    kill(c.pid[0], SIGTERM);
    EXPECT_INT(cluster_wait_exit(&c, 0, 10000), 0, "a clean stop");
    snprintf(cmd, sizeof cmd, "sed -i 's/^max_frame = 1M$/max_frame = "
             "16K/' '%s'", c.ini);
    assert_int_equal(system(cmd), 0);
    if (cluster_restart(&c, 0))
        fail_msg("psd did not start with max_frame = 16K after a clean stop");
    assert_int_equal(ps_open(&cl, c.spec, NULL), 0);
    float *out = malloc(sizeof(float) * ROWS * DIM);
    assert_non_null(out);
    EXPECT_INT(ps_wait(cl, ps_pull_range(cl, 0, 0, ROWS, out, NULL, NULL)),
               PS_OK, "the pull");
    int wrong = 0;
    for (int i = 0; i < ROWS * DIM; i++)
        wrong += out[i] != 1.0f;
    EXPECT_INT(wrong, 0, "values the push before the crash does not hold");
    ps_close(cl);
    free(g);
    free(out);
    EXPECT_INT(cluster_stop(&c), 0, "the node stops cleanly");
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
            test_kill9_with_snapshots_keeps_what_the_snapshot_held),
        cmocka_unit_test(test_psctl_save_with_nothing_new_writes_nothing),
        cmocka_unit_test(test_a_journal_ending_in_zeros_is_cut_and_psd_starts),
        cmocka_unit_test(
            test_kill9_during_snapshots_with_a_journal_loses_nothing),
        cmocka_unit_test(
            test_a_snapshot_killed_before_its_rename_leaves_the_old_one),
        cmocka_unit_test(
            test_a_snapshot_killed_after_its_rename_is_the_new_one),
        cmocka_unit_test(test_a_killed_snapshot_writer_leaves_no_file),
        cmocka_unit_test(test_a_stopped_imports_unfinished_file_goes_at_start),
        cmocka_unit_test(test_a_journal_record_there_twice_is_applied_once),
        cmocka_unit_test(
            test_snapshots_killed_at_random_moments_load_old_or_new_whole),
        cmocka_unit_test(
            test_a_stop_during_a_periodic_snapshot_waits_then_writes_its_own),
        cmocka_unit_test(
            test_a_stop_with_nothing_changed_writes_no_final_snapshot),
        cmocka_unit_test(test_idle_restarts_keep_few_journal_segments),
        cmocka_unit_test(
            test_an_idle_node_skips_periodic_snapshots_until_a_change),
        cmocka_unit_test(test_a_full_disk_refuses_pushes_and_loses_nothing),
        cmocka_unit_test(test_a_stop_does_not_wait_for_a_full_disk),
        cmocka_unit_test_teardown(
            test_a_snapshot_on_a_full_disk_fails_and_keeps_the_old_one,
            unmount_small_disk),
        cmocka_unit_test_teardown(
            test_a_snapshot_without_room_says_what_the_journal_holds,
            unmount_small_disk),
        cmocka_unit_test_teardown(
            test_a_journal_on_a_full_tmpfs_refuses_pushes_until_it_has_room,
            unmount_small_disk),
        cmocka_unit_test_teardown(
            test_a_snapshot_that_writes_held_records_lets_their_replies_go,
            unmount_small_disk),
        cmocka_unit_test(test_export_writes_each_nodes_rows_as_npy_files),
        cmocka_unit_test(test_an_export_stopped_by_a_signal_leaves_nothing),
        cmocka_unit_test(test_an_exports_manifest_names_its_ini_absolutely),
        cmocka_unit_test(test_reshard_moves_the_model_onto_another_node_count),
        cmocka_unit_test(test_reshard_says_the_new_inis_notes),
        cmocka_unit_test(test_import_starts_a_cluster_from_npy_files),
        cmocka_unit_test(test_export_beside_a_live_snapshot_node_says_how_old),
        cmocka_unit_test(test_export_counts_the_bsp_sums_it_leaves_out),
        cmocka_unit_test(
            test_fsync_always_without_a_free_descriptor_acks_pushes),
        cmocka_unit_test(test_a_damaged_snapshot_stops_psd_until_skipped),
        cmocka_unit_test(test_a_snapshot_of_another_layout_stops_psd),
        cmocka_unit_test(
            test_tables_added_moved_or_dropped_keep_the_others_rows),
        cmocka_unit_test(test_a_slow_fsync_keeps_the_heartbeats_going),
        cmocka_unit_test(
            test_a_connection_closed_by_its_client_is_not_called_dead),
        cmocka_unit_test(test_a_snapshot_syncs_the_journal_off_the_loop),
        cmocka_unit_test(test_a_journal_of_another_layout_fails_psd_check),
        cmocka_unit_test(test_a_journal_is_not_replayed_onto_another_init),
        cmocka_unit_test(
            test_a_journal_past_snapshot_journal_mb_starts_a_snapshot),
        cmocka_unit_test(test_a_journal_removed_while_down_is_said_at_start),
        cmocka_unit_test(test_the_newest_segment_removed_while_down_is_said),
        cmocka_unit_test(test_a_tail_zero_from_a_small_block_is_cut),
        cmocka_unit_test(test_a_removed_data_dir_refuses_pushes),
        cmocka_unit_test(test_a_removed_data_dir_made_again_is_saved_to),
        cmocka_unit_test(test_a_replaced_data_dir_is_not_written_over),
        cmocka_unit_test(test_usr_signals_are_logged_and_change_nothing),
        cmocka_unit_test(test_a_folder_replaced_while_a_snapshot_is_written),
        cmocka_unit_test(test_a_folder_replaced_during_the_final_snapshot),
        cmocka_unit_test_teardown(
            test_an_unmounted_data_volume_is_not_written_beneath,
            unmount_small_disk),
        cmocka_unit_test(test_a_missing_data_dir_is_created_0700),
        cmocka_unit_test_teardown(
            test_a_snapshot_beyond_the_memory_limit_is_refused_before_loading,
            remove_test_cgroup),
        cmocka_unit_test(
            test_a_journal_past_a_lowered_max_frame_says_what_reads_it),
    };
    int failed = cmocka_run_group_tests_name("durability", tests, NULL, NULL);
    int total = (int)(sizeof tests / sizeof tests[0]);
    if (getenv("PSD_TEST_ONLY"))   /* cmocka does not say how many ran */
        printf("filtered run: %d failed\n", failed);
    else
        printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
