/* End-to-end tests: real psd processes on free loopback ports, real
 * clients (libpsclient) in this process and in forked worker processes,
 * and a raw socket speaking the protocol by hand for hostile input. */
#define _GNU_SOURCE               /* unshare */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster.h"
#include "raw.h"
#include "psclient.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"
#include "../proto/layout.h"

#include "expect.h"

#define TABLES                                                             \
    "[table.dense]\nkind = dense\nrows = 1000\ndim = 4\nupdater = sum\n"   \
    "[table.range]\nkind = dense\nrows = 1000\ndim = 3\nupdater = sum\n"   \
    "[table.emb]\nkind = sparse\ndim = 8\nupdater = sum\n"                 \
    "init = uniform -1 1\nseed = 3\n"                                      \
    "[table.counts]\nkind = sparse\ndim = 1\nupdater = sum\n"              \
    "[table.sgd]\nkind = dense\nrows = 100\ndim = 2\nupdater = sgd\n"      \
    "lr = 0.5\ninit = constant 1\n"

static test_cluster shared;           /* the 2-node cluster of the group */

static ps_client *open_or_fail(const char *spec)
{
    ps_client *c = NULL;
    int rc = ps_open(&c, spec, NULL);
    if (rc)
        fail_msg("ps_open(%s): %s", spec, ps_strerror(rc));
    return c;
}

static int table_id(ps_client *c, const char *name)
{
    int id = ps_table(c, name, NULL);
    if (id < 0)
        fail_msg("ps_table(%s): %s", name, ps_strerror(id));
    return id;
}

static void wait_ok(ps_client *c, ps_ts ts)
{
    if (ts < 0)
        fail_msg("request refused: %s (%s)", ps_strerror((int)ts),
                 ps_last_error(c));
    int st = ps_wait(c, ts);
    if (st)
        fail_msg("request %lld failed: %s (%s)", (long long)ts,
                 ps_strerror(st), ps_last_error(c));
}

static void expect_float(float got, float want, const char *what, size_t i)
{
    if (got != want)
        fail_msg("%s[%zu]: got %.9g, want %.9g", what, i, (double)got,
                 (double)want);
}

/* ---- raw protocol over a plain socket ------------------------------- */

static void put_be32(unsigned char *h, uint32_t v)
{
    h[0] = (unsigned char)(v >> 24);
    h[1] = (unsigned char)(v >> 16);
    h[2] = (unsigned char)(v >> 8);
    h[3] = (unsigned char)v;
}

/* Sends body (n bytes) as one well-formed frame: length, body, CRC. */
static void raw_send_body(int fd, const void *body, size_t n)
{
    unsigned char h[4], t[4];
    put_be32(h, (uint32_t)(n + PSW_FRAME_CRC));
    put_be32(t, psw_crc32c(0, body, n));
    raw_send(fd, h, 4);
    raw_send(fd, body, n);
    raw_send(fd, t, 4);
}

static void raw_hello(int fd)
{
    assert_int_equal(raw_hello_as(fd, 1, 1), PSW_OK);
}

/* Sends one request in a frame of its own. */
static void raw_send_msg(int fd, const psw_msg *m)
{
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_pack_request(&o, m);
    psw_out_frame_end(&o);
    raw_send_out(fd, &o);
    psw_out_destroy(&o);
}

/* Reads a frame holding exactly one message and returns it, decoded into
 * z; *frame (free it after z) holds the bytes it points into. */
static const msgpack_object *raw_read_one(int fd, msgpack_zone *z,
                                          char **frame)
{
    size_t len;
    msgpack_object obj;
    const msgpack_object *msgs = NULL;
    char err[128];
    *frame = raw_read_frame(fd, &len);
    if (!*frame)
        fail_msg("no reply frame");
    msgpack_zone_init(z, 1024);
    if (psw_frame_decode(*frame, len, z, &obj, err, sizeof err) ||
        psw_frame_messages(&obj, 4, &msgs, err, sizeof err) != 1)
        fail_msg("reply frame: %s", err);
    return &msgs[0];
}

/* Reads a one-message reply frame into *r (views into *frame). */
static void raw_read_reply(int fd, psw_msg *r, msgpack_zone *z, char **frame)
{
    char err[128];
    if (psw_msg_decode(raw_read_one(fd, z, frame), r, err, sizeof err))
        fail_msg("reply: %s", err);
}

/* A client on the shared cluster still pushes and pulls correctly. */
static void others_still_served(void)
{
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "dense");
    uint64_t key = 999;
    float out[4];
    wait_ok(c, ps_pull(c, t, &key, 1, out, NULL, NULL));
    ps_close(c);
}

/* ---- tests ------------------------------------------------------------ */

static void open_by_ini_path_finds_tables_and_their_shapes(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.ini);
    ps_table_info info;
    assert_int_equal(ps_table(c, "range", &info), table_id(c, "range"));
    assert_int_equal(info.dense, 1);
    assert_int_equal(info.dim, 3);
    assert_int_equal(info.rows, 1000);
    assert_true(ps_table(c, "emb", &info) >= 0);
    assert_int_equal(info.dense, 0);
    assert_int_equal(info.dim, 8);
    assert_int_equal(ps_table(c, "nope", NULL), PS_ENOTABLE);
    assert_non_null(strstr(ps_last_error(c), "nope"));
    /* A NULL argument says so, not the failure before it. */
    assert_int_equal(ps_table(c, NULL, NULL), PS_EINVAL);
    EXPECT_STR(ps_last_error(c), "ps_table: the table name is NULL",
               "ps_table(NULL)");
    assert_int_equal(ps_stats(c, NULL), PS_EINVAL);
    EXPECT_STR(ps_last_error(c), "ps_stats: the place for the figures is "
               "NULL", "ps_stats(NULL)");
    ps_close(c);
}


/* psd reads `; comment` at the end of a continuation line as a comment,
 * as on any other line (daemon/inifile.c); ps_open given the same ini
 * must read the same nodes, not the comment as part of the last one. */
static void open_by_ini_path_drops_comments_on_continuation_lines(
    void **state)
{
    (void)state;
    char ini[320];
    snprintf(ini, sizeof ini, "%s/commented.ini", shared.dir);
    FILE *f = fopen(ini, "w");
    assert_non_null(f);
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:%d,   ; node 0\n"
            "        127.0.0.1:%d    ; node 1\nshards = 4\n", shared.port[0],
            shared.port[1]);
    fclose(f);
    ps_client *c = NULL;
    int rc = ps_open(&c, ini, NULL);
    unlink(ini);
    if (rc)
        fail_msg("ps_open(%s): %s", ini, ps_strerror(rc));
    assert_true(ps_table(c, "dense", NULL) >= 0);
    ps_close(c);
}

static void dense_pushes_from_two_nodes_sum_exactly(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "dense");
    enum { N = 200 };
    uint64_t keys[N];
    float vals[N * 4], out[N * 4];
    for (size_t i = 0; i < N; i++)
        keys[i] = (i * 37) % 1000;       /* scattered over every shard */
    for (size_t i = 0; i < N * 4; i++)
        vals[i] = (float)(i % 17);
    ps_ts a = ps_push(c, t, keys, N, vals, NULL, NULL);
    ps_ts b = ps_push(c, t, keys, N, vals, NULL, NULL);
    assert_int_equal(b, a + 1);
    wait_ok(c, a);
    wait_ok(c, b);
    wait_ok(c, ps_pull(c, t, keys, N, out, NULL, NULL));
    for (size_t i = 0; i < N * 4; i++)
        expect_float(out[i], 2 * vals[i], "row", i);
    ps_close(c);
}

static void range_push_and_pull_cross_shard_boundaries(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "range");
    static float all[1000 * 3], out[1000 * 3];
    for (size_t i = 0; i < 1000 * 3; i++)
        all[i] = (float)i;
    wait_ok(c, ps_push_range(c, t, 0, 1000, all, NULL, NULL));
    /* 55..700 crosses many of the 16 shards (62 or 63 rows each). */
    wait_ok(c, ps_pull_range(c, t, 55, 646, out, NULL, NULL));
    for (size_t i = 0; i < 646 * 3; i++)
        expect_float(out[i], (float)(55 * 3 + i), "range row", i);
    /* The last row of the table alone, and one row at a shard start. */
    wait_ok(c, ps_pull_range(c, t, 999, 1, out, NULL, NULL));
    expect_float(out[2], 999 * 3 + 2, "last row", 2);
    uint64_t s5 = psw_dense_shard_start(1000, 16, 5);
    wait_ok(c, ps_pull_range(c, t, s5, 1, out, NULL, NULL));
    expect_float(out[0], (float)(s5 * 3), "shard 5 start", 0);
    /* Out of range: refused at once, callback never runs. */
    assert_int_equal(ps_pull_range(c, t, 990, 11, out, NULL, NULL), PS_EKEY);
    assert_non_null(strstr(ps_last_error(c), "rows 990..1000 go past the "
                                             "end of table"));
    assert_int_equal(ps_pull_range(c, t, 1000, 1, out, NULL, NULL), PS_EKEY);
    assert_non_null(strstr(ps_last_error(c), "rows 1000..1000 are outside "
                                             "table"));
    /* The same through ps_wait, as a trainer writes it: the call's code
     * and its reason, not "request -8 was never issued". */
    EXPECT_INT(ps_wait(c, ps_push_range(c, t, 990, 11, out, NULL, NULL)),
               PS_EKEY, "ps_wait of a refused call");
    EXPECT_SUBSTR(ps_last_error(c), "rows 990..1000 go past the end of table",
                  "ps_last_error after ps_wait of a refused call");
    EXPECT_INT(ps_wait_timeout(c, ps_pull_range(c, -1, 0, 1, out, NULL,
                                                NULL), 0),
               PS_ENOTABLE, "ps_wait_timeout of a call with a bad table id");
    EXPECT_INT(ps_wait(c, -1000), PS_EINVAL, "a ts that is no code");
    EXPECT_SUBSTR(ps_last_error(c), "request -1000 was never issued",
                  "ps_last_error for it");
    ps_close(c);
}

static void pushpull_returns_the_rows_after_the_push(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    uint64_t keys[64];
    float one[64], out[64];
    for (int i = 0; i < 64; i++) {
        keys[i] = 5000000 + (uint64_t)i * 1000003;
        one[i] = 1;
    }
    wait_ok(c, ps_pushpull(c, t, keys, 64, one, out, NULL, NULL));
    for (int i = 0; i < 64; i++)
        expect_float(out[i], 1, "after first pushpull", (size_t)i);
    wait_ok(c, ps_pushpull(c, t, keys, 64, one, out, NULL, NULL));
    for (int i = 0; i < 64; i++)
        expect_float(out[i], 2, "after second pushpull", (size_t)i);
    ps_close(c);
}

static void untouched_sparse_key_has_same_initial_row_for_two_clients(void **state)
{
    (void)state;
    ps_client *a = open_or_fail(shared.spec);
    ps_client *b = open_or_fail(shared.ini);
    int t = table_id(a, "emb");
    uint64_t keys[2] = { 0xfeedface12345ull, 77 };
    float ra[16], rb[16];
    wait_ok(a, ps_pull(a, t, keys, 2, ra, NULL, NULL));
    wait_ok(b, ps_pull(b, t, keys, 2, rb, NULL, NULL));
    int nonzero = 0;
    for (int i = 0; i < 16; i++) {
        expect_float(rb[i], ra[i], "second client's row", (size_t)i);
        assert_true(ra[i] >= -1.0f && ra[i] < 1.0f);
        nonzero += ra[i] != 0;
    }
    assert_true(nonzero > 8);            /* uniform init, not zeros */
    ps_close(a);
    ps_close(b);
}

/* psclient.h: ps_last_error is the detail of the calling thread's last
 * failure on *this* client, valid until the thread's next call on it.
 * Several clients may live in one thread: a failure on one must not wipe
 * (or stand in for) the detail of another, and a client opened later
 * starts with none, wherever it was allocated. */
static void last_error_of_one_client_survives_a_failure_on_another(
    void **state)
{
    (void)state;
    ps_client *a = open_or_fail(shared.spec);
    ps_client *b = open_or_fail(shared.spec);
    EXPECT_INT(ps_table(a, "no_such_table_a", NULL), PS_ENOTABLE,
               "ps_table(a)");
    EXPECT_INT(ps_table(b, "no_such_table_b", NULL), PS_ENOTABLE,
               "ps_table(b)");
    EXPECT_SUBSTR(ps_last_error(a), "no_such_table_a",
                  "a's detail after b failed");
    EXPECT_SUBSTR(ps_last_error(b), "no_such_table_b", "b's detail");
    ps_close(b);
    EXPECT_SUBSTR(ps_last_error(a), "no_such_table_a",
                  "a's detail after b closed");
    ps_close(a);
    ps_client *c = open_or_fail(shared.spec);
    EXPECT_STR(ps_last_error(c), "", "a new client's detail");
    ps_close(c);
}

/* Of a cluster of several nodes, a node's refusal says which node it is,
 * also for a request that went to one of them (a max_rows refusal said
 * "on this node" and named none: a multi-node trial). */
static void a_refusal_of_one_of_several_nodes_names_it(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    uint64_t key = 77;
    float nan = NAN;
    EXPECT_INT(ps_wait(c, ps_push(c, t, &key, 1, &nan, NULL, NULL)),
               PS_ENONFINITE, "a NaN pushed to one node");
    const char *e = ps_last_error(c);
    int named = 0;
    for (int i = 0; i < 2; i++) {
        char want[80];
        snprintf(want, sizeof want, "node %d (127.0.0.1:%d): ", i,
                 shared.port[i]);
        named += strncmp(e, want, strlen(want)) == 0;
    }
    if (named != 1)
        fail_msg("want the node named first: %s", e);
    EXPECT_SUBSTR(e, "nothing of this push was applied", "the node's text");
    ps_close(c);
}

typedef struct thread_job {
    const char *spec;
    int value;                    /* what this thread adds */
    int rounds;
    uint64_t first_key;
    int nkeys;
    int failed;
} thread_job;

static void *push_thread(void *arg)
{
    thread_job *j = arg;
    ps_client *c = NULL;
    if (ps_open(&c, j->spec, NULL)) {
        j->failed = 1;
        return NULL;
    }
    int t = ps_table(c, "counts", NULL);
    uint64_t *keys = malloc((size_t)j->nkeys * sizeof *keys);
    float *vals = malloc((size_t)j->nkeys * sizeof *vals);
    for (int i = 0; i < j->nkeys; i++) {
        keys[i] = j->first_key + (uint64_t)i;
        vals[i] = (float)j->value;
    }
    for (int r = 0; r < j->rounds; r++)
        if (ps_push(c, t, keys, (size_t)j->nkeys, vals, NULL, NULL) < 0)
            j->failed = 1;
    if (ps_wait_all(c))
        j->failed = 1;
    ps_close(c);
    free(keys);
    free(vals);
    return NULL;
}

typedef struct proc_job {
    int worker;
    int threads;
    int rounds;
    uint64_t first_key;
    int nkeys;
    int per_thread_value;         /* 1: each thread adds 1; 0: distinct */
} proc_job;

/* A worker process: `threads` threads, each with its own client. */
static int worker_proc(void *arg)
{
    proc_job *p = arg;
    pthread_t th[8];
    thread_job j[8];
    for (int i = 0; i < p->threads; i++) {
        j[i] = (thread_job){ shared.spec,
                             p->per_thread_value
                                 ? 1
                                 : p->worker * p->threads + i + 1,
                             p->rounds, p->first_key, p->nkeys, 0 };
        pthread_create(&th[i], NULL, push_thread, &j[i]);
    }
    int bad = 0;
    for (int i = 0; i < p->threads; i++) {
        pthread_join(th[i], NULL);
        bad |= j[i].failed;
    }
    return bad;
}

static void check_counts(uint64_t first, int n, float want)
{
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    float *out = malloc((size_t)n * sizeof *out);
    for (int i = 0; i < n; i++)
        keys[i] = first + (uint64_t)i;
    wait_ok(c, ps_pull(c, t, keys, (size_t)n, out, NULL, NULL));
    for (int i = 0; i < n; i++)
        expect_float(out[i], want, "count", (size_t)i);
    free(keys);
    free(out);
    ps_close(c);
}

static void four_processes_of_two_threads_push_exact_sums(void **state)
{
    (void)state;
    proc_job p[4];
    pid_t pid[4];
    for (int w = 0; w < 4; w++) {
        p[w] = (proc_job){ w, 2, 50, 1000000, 500, 0 };
        pid[w] = spawn(worker_proc, &p[w]);
    }
    for (int w = 0; w < 4; w++)
        assert_int_equal(reap(pid[w]), 0);
    /* Thread values are 1..8, each pushed 50 times: 50 * 36. */
    check_counts(1000000, 500, 1800.0f);
}

/* Threads sharing one client, each waiting for its own requests: one
 * pushes 1 to its own key (9e11 + i: no other test of the group touches
 * keys there) and reads it back, 150 times. */
typedef struct shared_job {
    ps_client *c;
    int table;
    uint64_t key;
    int rounds;
    int bad;                      /* waits that did not answer PS_OK */
    float last;                   /* the key's value read last */
} shared_job;

static void *shared_client_thread(void *arg)
{
    shared_job *j = arg;
    float one = 1.0f;
    for (int r = 0; r < j->rounds; r++) {
        ps_ts a = ps_push(j->c, j->table, &j->key, 1, &one, NULL, NULL);
        ps_ts b = ps_pull(j->c, j->table, &j->key, 1, &j->last, NULL, NULL);
        if (a <= 0 || b <= 0 || ps_wait(j->c, b) != PS_OK ||
            ps_wait(j->c, a) != PS_OK)
            j->bad++;
    }
    return NULL;
}

/* The real client under many waiting threads: with 40 of them, several
 * share each of its 16 wait slots (client/customer.h, PSC_WAIT_CVS) at
 * every moment. Every wait answers PS_OK and every thread reads its own
 * pushes back. Whether each waiter is woken by its own completion, and
 * only then, is test_slice's wait-slot test, which controls the order. */
static void forty_threads_on_one_client_each_wait_their_own(void **state)
{
    (void)state;
    enum { NT = 40, ROUNDS = 150 };
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    pthread_t th[NT];
    shared_job j[NT];
    for (int i = 0; i < NT; i++) {
        j[i] = (shared_job){ c, t, 900000000000u + (uint64_t)i, ROUNDS, 0, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, shared_client_thread,
                                        &j[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(j[i].bad, 0);
        /* Its pull went after its push on the same connection: it saw
         * every push of its own so far. */
        expect_float(j[i].last, (float)ROUNDS, "a thread's last pull",
                     (size_t)i);
    }
    assert_int_equal(ps_wait_all(c), PS_OK);
    ps_close(c);
}

static void eight_processes_pushing_one_200_times_read_1600(void **state)
{
    (void)state;
    proc_job p[8];
    pid_t pid[8];
    for (int w = 0; w < 8; w++) {
        p[w] = (proc_job){ w, 1, 200, 0, 1000, 1 };
        pid[w] = spawn(worker_proc, &p[w]);
    }
    for (int w = 0; w < 8; w++)
        assert_int_equal(reap(pid[w]), 0);
    check_counts(0, 1000, 1600.0f);
}

static int cb_calls[2001];
static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;

static void count_cb(ps_ts ts, int status, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cb_mu);
    if (ts > 0 && ts <= 2000 && status == PS_OK)
        cb_calls[ts]++;
    pthread_mutex_unlock(&cb_mu);
}

/* What a callback got from the calls that wait for the I/O thread it
 * runs on. */
static struct {
    ps_client *c;
    int wait, wait_all, poll, poll_all, done;
    char why[1024];
} in_cb;

static void calls_back_cb(ps_ts ts, int status, void *arg)
{
    (void)status;
    (void)arg;
    in_cb.wait = ps_wait(in_cb.c, ts);
    snprintf(in_cb.why, sizeof in_cb.why, "%s", ps_last_error(in_cb.c));
    in_cb.wait_all = ps_wait_all(in_cb.c);
    in_cb.poll = ps_wait_timeout(in_cb.c, ts, 0);
    in_cb.poll_all = ps_wait_all_timeout(in_cb.c, 0);
    ps_close_now(in_cb.c);        /* say so, and leave the client open */
    ps_close(in_cb.c);
    __atomic_store_n(&in_cb.done, 1, __ATOMIC_RELEASE);
}

/* A callback that calls what waits for the I/O thread (ps_wait on its own
 * request, ps_close_now, ps_close) hung for good: the call waited for the
 * thread it ran on. Refused with PS_EINVAL and the reason; polls answer;
 * the closes do nothing, and the client goes on. */
static void a_callback_cannot_wait_for_its_own_thread(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    memset(&in_cb, 0, sizeof in_cb);
    in_cb.c = c;
    int t = table_id(c, "counts");
    uint64_t key = 515151;
    float one = 1, out = 0;
    ps_ts ts = ps_push(c, t, &key, 1, &one, calls_back_cb, NULL);
    assert_true(ts > 0);
    EXPECT_INT(ps_wait(c, ts), PS_OK, "the push");
    for (int k = 0; k < 1000 && !__atomic_load_n(&in_cb.done,
                                                 __ATOMIC_ACQUIRE); k++)
        usleep(1000);
    EXPECT_INT(in_cb.done, 1, "the callback returned");
    EXPECT_INT(in_cb.wait, PS_EINVAL, "ps_wait in a callback");
    EXPECT_SUBSTR(in_cb.why, "ps_wait from a completion callback", "why");
    EXPECT_INT(in_cb.wait_all, PS_EINVAL, "ps_wait_all in a callback");
    EXPECT_INT(in_cb.poll, PS_PENDING, "its own request, polled");
    EXPECT_INT(in_cb.poll_all, PS_PENDING, "all, polled");
    EXPECT_INT(ps_wait(c, ps_pull(c, t, &key, 1, &out, NULL, NULL)), PS_OK,
               "the client goes on");
    EXPECT_INT(out == 1.0f, 1, "the push applied once: %g", (double)out);
    ps_close(c);
}

static atomic_int sleeper_in;

static void sleeps_cb(ps_ts ts, int status, void *arg)
{
    (void)ts;
    (void)status;
    (void)arg;
    atomic_store(&sleeper_in, 1);
    usleep(1500 * 1000);
}

/* A callback that blocks holds every request of its client (callbacks
 * run on the I/O thread): one issued meanwhile fails for time, and says
 * that a callback held the thread. It said only "not sent within its
 * bounded time" and listed a node's causes (an API trial's callback slept
 * 3 s: 50 of 50 requests failed so, the client's counters all 0). */
static void a_request_held_by_a_blocking_callback_says_so(void **state)
{
    (void)state;
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 200;
    o.max_retries = 0;
    ps_client *c;
    assert_int_equal(ps_open(&c, shared.spec, &o), PS_OK);
    int t = table_id(c, "counts");
    uint64_t key = 525252;
    float one = 1;
    atomic_store(&sleeper_in, 0);
    ps_ts a = ps_push(c, t, &key, 1, &one, sleeps_cb, NULL);
    assert_true(a > 0);
    for (int k = 0; k < 3000 && !atomic_load(&sleeper_in); k++)
        usleep(1000);
    EXPECT_INT(atomic_load(&sleeper_in), 1, "the callback runs");
    EXPECT_INT(ps_wait(c, ps_push(c, t, &key, 1, &one, NULL, NULL)),
               PS_ETIMEDOUT, "a push issued while the callback sleeps");
    EXPECT_SUBSTR(ps_last_error(c), "a completion callback held this "
                  "client's I/O thread for 1", "why");
    /* First: the node's causes that follow read as the reason (they led,
     * the callback last: an API trial). */
    EXPECT_INT(strncmp(ps_last_error(c), "a completion callback held", 26),
               0, "the callback said first: %s", ps_last_error(c));
    EXPECT_INT(ps_wait(c, a), PS_OK, "the push whose callback slept");
    /* The client goes on; the push whose callback slept applied once. */
    float out = 0;
    EXPECT_INT(ps_wait(c, ps_pull(c, t, &key, 1, &out, NULL, NULL)), PS_OK,
               "the client goes on");
    EXPECT_INT(out == 1.0f, 1, "the first push alone applied: %g",
               (double)out);
    ps_close(c);
}

/* A callback that issues its push again whenever it ends, as one that
 * retries on failure does: ps_close_now failed the push, the callback
 * issued it again, which failed at once, and so on: the close never
 * ended, the I/O thread spinning (an API trial's find). A push issued
 * once ps_close_now gave up is refused by the call now, PS_ECLOSED, and
 * no callback runs for it. In a child, so that a hang is ended by its
 * alarm. */
static struct {
    ps_client *c;
    int t;
    atomic_int runs, refused, other;
} retry;

static void push_again_cb(ps_ts ts, int status, void *arg)
{
    (void)ts;
    (void)status;
    (void)arg;
    atomic_fetch_add(&retry.runs, 1);
    uint64_t key = 737373;
    float one = 1;
    ps_ts r = ps_push(retry.c, retry.t, &key, 1, &one, push_again_cb, NULL);
    if (r == PS_ECLOSED)
        atomic_fetch_add(&retry.refused, 1);
    else if (r < 0)
        atomic_fetch_add(&retry.other, 1);
}

/* The child: 4 chains of pushes, then ps_close_now; 0 when each chain
 * ended at one refused push. Its alarm ends a close that hangs. */
static int close_now_with_retrying_callbacks(void *arg)
{
    (void)arg;
    alarm(20);
    retry.c = open_or_fail(shared.spec);
    retry.t = table_id(retry.c, "counts");
    uint64_t key = 737373;
    float one = 1;
    for (int i = 0; i < 4; i++)
        if (ps_push(retry.c, retry.t, &key, 1, &one, push_again_cb, NULL) <= 0)
            return 2;
    while (atomic_load(&retry.runs) < 100)
        usleep(1000);
    ps_close_now(retry.c);
    return atomic_load(&retry.refused) == 4 && atomic_load(&retry.other) == 0
               ? 0 : 3;
}

static void close_now_ends_when_callbacks_push_again(void **state)
{
    (void)state;
    int st = reap(spawn(close_now_with_retrying_callbacks, NULL));
    if (st == 128 + SIGALRM)
        fail_msg("ps_close_now did not return");
    EXPECT_INT(st, 0, "the child's verdict (3: not each chain refused once)");
}

/* fork() copies a client but not its I/O thread. In the child, a push
 * was taken and never sent, ps_wait hung (the time limit is the I/O
 * thread's) and so did ps_close of a worker: each is refused now,
 * PS_ECLOSED, saying why, and ps_close only forgets the client. The
 * parent's client goes on. A child that hangs is ended by its alarm. */
static void a_client_used_after_fork_is_refused_not_hung(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    uint64_t key = 626262;
    float one = 1, got = 0;
    EXPECT_INT(ps_wait(c, ps_push(c, t, &key, 1, &one, NULL, NULL)), PS_OK,
               "the parent's push before the fork");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        ps_ts ts = ps_push(c, t, &key, 1, &one, NULL, NULL);
        int bad = ts != PS_ECLOSED;
        bad |= strstr(ps_last_error(c), "opened before a fork()") == NULL;
        bad |= ps_wait(c, 1) != PS_ECLOSED;
        bad |= ps_wait_all(c) != PS_ECLOSED;
        ps_close(c);
        _exit(bad);
    }
    EXPECT_INT(ps_wait(c, ps_push(c, t, &key, 1, &one, NULL, NULL)), PS_OK,
               "the parent's push after the fork");
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0,
               "the child's calls were refused (142: it hung)");
    EXPECT_INT(ps_wait(c, ps_pull(c, t, &key, 1, &got, NULL, NULL)), PS_OK,
               "pull");
    EXPECT_INT((int)got, 2, "the parent's two pushes, none of the child's");
    ps_close(c);
}

/* A process without a free fd: ps_open said "cannot start the I/O
 * thread" with PS_ENOMEM, "out of memory" to the caller (a MemoryError in
 * Python); it says what ran out, and what to raise. In a child whose
 * limit on open files is its lowest free fd. */
static void an_open_without_fds_says_so(void **state)
{
    (void)state;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        int lowest = dup(0);
        close(lowest);
        struct rlimit rl = { (rlim_t)lowest, (rlim_t)lowest };
        if (lowest < 0 || setrlimit(RLIMIT_NOFILE, &rl))
            _exit(2);
        ps_options o;
        ps_options_init(&o);
        o.quiet = 1;
        o.connect_timeout_ms = 1000;
        ps_client *c = NULL;
        int rc = ps_open(&c, shared.spec, &o);
        const char *why = ps_last_error(NULL);
        _exit(rc == PS_ECONN && c == NULL && strstr(why, "too many open "
              "files") && strstr(why, "ulimit -n") ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    EXPECT_INT(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), 0,
               "ps_open without a free fd: PS_ECONN naming the fd limit "
               "(1: another code or text)");
}

static void every_callback_runs_exactly_once(void **state)
{
    (void)state;
    ps_client *c = open_or_fail(shared.spec);
    int t = table_id(c, "counts");
    uint64_t key = 424242;
    float one = 1;
    memset(cb_calls, 0, sizeof cb_calls);
    for (int i = 0; i < 2000; i++) {
        ps_ts ts = ps_push(c, t, &key, 1, &one, count_cb, NULL);
        assert_int_equal(ts, i + 1);     /* timestamps count from 1 */
    }
    assert_int_equal(ps_wait_all(c), PS_OK);
    for (int i = 1; i <= 2000; i++)
        if (cb_calls[i] != 1)
            fail_msg("callback of request %d ran %d times, want 1", i,
                     cb_calls[i]);
    /* A failed call never runs its callback and issues no timestamp. */
    uint64_t bad = 1000;
    assert_int_equal(ps_push(c, table_id(c, "dense"), &bad, 1, &one, count_cb,
                             NULL), PS_EKEY);
    assert_non_null(strstr(ps_last_error(c), "no row 1000"));
    assert_int_equal(ps_wait(c, 2001), PS_EINVAL);
    ps_close(c);
    check_counts(424242, 1, 2000.0f);
}

static void malformed_frame_closes_only_that_connection(void **state)
{
    (void)state;
    int fd = raw_connect(shared.port[0]);
    raw_hello(fd);
    /* A frame holding the byte msgpack never uses. */
    const unsigned char bad[] = { 0xc1 };
    raw_send_body(fd, bad, sizeof bad);
    assert_true(raw_closed(fd));
    close(fd);
    others_still_served();
    char *log = cluster_log(&shared, 0);
    assert_non_null(log);
    assert_non_null(strstr(log, "closing connection from 127.0.0.1"));
    assert_non_null(strstr(log, "malformed"));
    free(log);
}

static void hostile_frames_are_refused_and_the_server_survives(void **state)
{
    (void)state;
    /* Each input is sent on its own connection; every one must be closed
     * and psd must keep serving. */
    static const unsigned char huge_len[] = { 0xff, 0xff, 0xff, 0xff };
    static const unsigned char http[] = "GET / HTTP/1.0\r\n\r\n";
    /* [[dd 7fffffff]]: an array count no frame can hold (framed whole,
     * with its CRC, so the guard is what refuses it). */
    static const unsigned char bomb[] = { 0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff };
    static const unsigned char deep[] = { 0x91, 0x91, 0x91, 0x91, 0x91, 0x91,
                                          0x91, 0x91, 0x91, 0x91, 0x91, 0xc0 };
    /* A good body under a wrong CRC. */
    static const unsigned char bad_crc[] = { 0, 0, 0, 6, 0x91, 0x91, 0x03,
                                             0, 0, 0, 0 };
    struct { const unsigned char *b; size_t n; int hello, framed; } in[] = {
        { huge_len, sizeof huge_len, 0, 0 },
        { http, sizeof http - 1, 0, 0 },
        { bomb, sizeof bomb, 0, 1 },
        { bomb, sizeof bomb, 1, 1 },
        { deep, sizeof deep, 1, 1 },
        { huge_len, sizeof huge_len, 1, 0 },
        { bad_crc, sizeof bad_crc, 1, 0 },
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        int fd = raw_connect(shared.port[1]);
        if (in[i].hello)
            raw_hello(fd);
        if (in[i].framed)
            raw_send_body(fd, in[i].b, in[i].n);
        else
            raw_send(fd, in[i].b, in[i].n);
        if (!raw_closed(fd))
            fail_msg("hostile input %zu: connection left open", i);
        close(fd);
    }
    /* A pre-HELLO frame above the small pre-HELLO limit. */
    int fd = raw_connect(shared.port[1]);
    unsigned char big[4 + 5000] = { 0, 0, 0x13, 0x88 };
    raw_send(fd, big, sizeof big);
    assert_true(raw_closed(fd));
    close(fd);
    assert_true(cluster_alive(&shared, 1));
    others_still_served();
}

static void request_for_another_nodes_shard_names_the_owner(void **state)
{
    (void)state;
    /* A sparse key whose shard lives on node 1, asked of node 0. */
    uint64_t key = 0;
    while (psw_node_of_shard(psw_sparse_shard_of(4, key), 2) != 1)
        key++;
    int fd = raw_connect(shared.port[0]);
    raw_hello(fd);
    psw_msg m = { .op = PSW_OP_PULL, .ts = 7, .part = 0, .table = 3,
                  .keys = (const char *)&key, .nkeys = 1 };
    raw_send_msg(fd, &m);
    msgpack_zone z;
    char *f;
    psw_msg r;
    raw_read_reply(fd, &r, &z, &f);
    assert_int_equal(r.ts, 7);
    assert_int_equal(r.status, PSW_ENOTOWNER);
    char text[256], want[64];
    snprintf(text, sizeof text, "%.*s", (int)r.text_len, r.text);
    snprintf(want, sizeof want, "node 1 (127.0.0.1:%d)", shared.port[1]);
    if (!strstr(text, want))
        fail_msg("error text \"%s\" does not name \"%s\"", text, want);
    msgpack_zone_destroy(&z);
    free(f);
    close(fd);
}

/* Two refusals whose texts contradicted themselves: a push of 2^62 + 1
 * rows of dim 4, whose byte count wraps round to the 16 bytes sent, was
 * "need 16 bytes of values, got 16"; an ADMIN command with a NUL in it
 * was shown cut at the NUL ("ping\0junk": unknown command "ping"). Both
 * are refused, and the connection serves on. */
static void refusals_say_what_was_sent(void **state)
{
    (void)state;
    int fd = raw_connect(shared.port[0]);
    raw_hello(fd);
    float vals[4] = { 1, 2, 3, 4 };
    psw_msg m = { .op = PSW_OP_PUSH_RANGE, .ts = 9, .table = 0,
                  .first = 0, .count = (1ULL << 62) + 1,
                  .vals = (const char *)vals, .vals_len = sizeof vals };
    raw_send_msg(fd, &m);
    msgpack_zone z;
    char *f;
    psw_msg r;
    raw_read_reply(fd, &r, &z, &f);
    char text[600];
    snprintf(text, sizeof text, "%.*s", (int)r.text_len, r.text);
    EXPECT_INT(r.status, PSW_EINVAL, "a push of 2^62 + 1 rows: %s", text);
    EXPECT_SUBSTR(text, "4611686018427387905 rows of table 'dense' (dim 4) "
                  "are more than any push can carry, got 16 bytes",
                  "a push of 2^62 + 1 rows");
    msgpack_zone_destroy(&z);
    free(f);
    static const char cmd[] = "ping\0junk\x1b";
    psw_msg a = { .op = PSW_OP_ADMIN, .ts = 10, .text = cmd,
                  .text_len = sizeof cmd - 1 };
    raw_send_msg(fd, &a);
    raw_read_reply(fd, &r, &z, &f);
    snprintf(text, sizeof text, "%.*s", (int)r.text_len, r.text);
    EXPECT_INT(r.status, PSW_EINVAL, "ADMIN with a NUL: %s", text);
    EXPECT_SUBSTR(text, "unknown command \"ping\\x00junk\\x1b\"",
                  "ADMIN with a NUL");
    msgpack_zone_destroy(&z);
    free(f);
    close(fd);
    others_still_served();
}

static void killed_server_fails_requests_instead_of_hanging(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES), 0);
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 300;
    o.max_retries = 1;
    o.connect_timeout_ms = 300;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, one.spec, &o), 0);
    int t = table_id(c, "counts");
    uint64_t key = 1;
    float v;
    wait_ok(c, ps_pull(c, t, &key, 1, &v, NULL, NULL));
    cluster_kill(&one, 0, SIGKILL);
    ps_ts ts = ps_pull(c, t, &key, 1, &v, NULL, NULL);
    assert_true(ts > 0);
    int st = ps_wait(c, ts);
    /* The contract: once its attempts are spent, a request fails with
     * PS_ETIMEDOUT; what went wrong with the node is in the detail. */
    if (st != PS_ETIMEDOUT)
        fail_msg("got %s, want PS_ETIMEDOUT", ps_strerror(st));
    assert_true(strlen(ps_last_error(c)) > 0);
    /* After more failures than the client remembers, the first one reads
     * "unknown" (PS_EINVAL), never a false PS_OK. */
    for (int i = 0; i < 1100; i++)
        assert_true(ps_pull(c, t, &key, 1, &v, NULL, NULL) > 0);
    assert_true(ps_wait_all(c) != PS_OK);
    assert_int_equal(ps_wait(c, ts), PS_EINVAL);
    assert_non_null(strstr(ps_last_error(c), "no longer known"));
    ps_close(c);
    cluster_stop(&one);
}

static void stopped_server_hangs_requests_no_longer_than_the_timeout(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES), 0);
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 200;
    o.max_retries = 1;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, one.spec, &o), 0);
    int t = table_id(c, "counts");
    uint64_t key = 1;
    float v;
    o.max_retries = 0;
    ps_client *c0 = NULL;
    assert_int_equal(ps_open(&c0, one.spec, &o), 0);
    kill(one.pid[0], SIGSTOP);
    ps_ts ts = ps_pull(c, t, &key, 1, &v, NULL, NULL);
    assert_int_equal(ps_wait(c, ts), PS_ETIMEDOUT);
    /* Two in flight without retries: the second fails with the first's
     * timeout, said as its connection's (it read "request 3: no reply
     * ... to request 2", as if the two were mixed up). */
    float v2;
    ps_ts first = ps_pull(c0, t, &key, 1, &v, NULL, NULL);
    ps_ts second = ps_pull(c0, t, &key, 1, &v2, NULL, NULL);
    EXPECT_INT(ps_wait(c0, first), PS_ETIMEDOUT, "the first pull");
    EXPECT_INT(ps_wait(c0, second), PS_ETIMEDOUT, "the second pull");
    char want[160];
    snprintf(want, sizeof want, "request %lld (no attempts left): its "
             "connection closed: no reply from ", (long long)second);
    EXPECT_SUBSTR(ps_last_error(c0), want, "the second pull's reason");
    kill(one.pid[0], SIGCONT);
    ps_close(c0);
    ps_close(c);
    assert_int_equal(cluster_stop(&one), 0);
}

static double ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
           (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* ps_wait_timeout and ps_wait_all_timeout give up after their time with
 * PS_PENDING, cancel nothing, and keep a failure for the wait that
 * returns it. */
static void timed_waits_return_pending_and_cancel_nothing(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES), 0);
    ps_client *c = open_or_fail(one.spec);
    int t = table_id(c, "counts");
    uint64_t key = 1;
    float v = 1, nan = NAN, got = 0;
    assert_string_equal(ps_strerror(PS_PENDING), "still in flight");
    /* A failure before the stop: wait_all must still report it later. */
    ps_ts failed = ps_push(c, t, &key, 1, &nan, NULL, NULL);
    assert_true(failed > 0);
    assert_int_equal(ps_wait(c, failed), PS_ENONFINITE);
    kill(one.pid[0], SIGSTOP);
    ps_ts ts = ps_push(c, t, &key, 1, &v, NULL, NULL);
    assert_true(ts > 0);
    assert_int_equal(ps_wait_timeout(c, ts, 0), PS_PENDING);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ps_wait_timeout(c, ts, 150), PS_PENDING);
    /* Never early; a wait that ran on to the request's end would not
     * answer PS_PENDING. */
    assert_true(ms_since(&t0) >= 149.0);
    assert_int_equal(ps_wait_all_timeout(c, 0), PS_PENDING);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ps_wait_all_timeout(c, 100), PS_PENDING);
    assert_true(ms_since(&t0) >= 99.0);
    /* Never issued: an error at once, timed or not. */
    assert_int_equal(ps_wait_timeout(c, ts + 1000, 100), PS_EINVAL);
    kill(one.pid[0], SIGCONT);
    /* Nothing was cancelled: the push completes and is applied once. */
    assert_int_equal(ps_wait_timeout(c, ts, 10000), PS_OK);
    assert_int_equal(ps_wait_timeout(c, ts, 0), PS_OK);
    assert_int_equal(ps_wait_all_timeout(c, -1), PS_ENONFINITE);
    assert_int_equal(ps_wait_all_timeout(c, 0), PS_OK);
    wait_ok(c, ps_pull(c, t, &key, 1, &got, NULL, NULL));
    expect_float(got, 1.0f, "the pushed row once", 0);
    ps_close(c);
    assert_int_equal(cluster_stop(&one), 0);
}

static void sigterm_stops_the_daemon_with_status_zero(void **state)
{
    (void)state;
    test_cluster two;
    assert_int_equal(cluster_start(&two, 2, 8, TABLES), 0);
    ps_client *c = open_or_fail(two.spec);
    int t = table_id(c, "counts");
    uint64_t keys[100];
    float one[100];
    for (int i = 0; i < 100; i++) {
        keys[i] = (uint64_t)i;
        one[i] = 1;
    }
    for (int i = 0; i < 50; i++)
        assert_true(ps_push(c, t, keys, 100, one, NULL, NULL) > 0);
    assert_int_equal(ps_wait_all(c), PS_OK);
    ps_close(c);
    assert_int_equal(cluster_stop(&two), 0);
}

static void sighup_applies_a_new_learning_rate(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES), 0);
    ps_client *c = open_or_fail(one.spec);
    int t = table_id(c, "sgd");
    uint64_t key = 3;
    float g[2] = { 1, 1 }, w[2];
    wait_ok(c, ps_push(c, t, &key, 1, g, NULL, NULL));
    wait_ok(c, ps_pull(c, t, &key, 1, w, NULL, NULL));
    expect_float(w[0], 0.5f, "w after lr 0.5", 0);     /* 1 - 0.5 * 1 */
    /* Rewrite the file with lr = 0.25 and reload. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "sed -i 's/^lr = 0.5$/lr = 0.25/' '%s'", one.ini);
    assert_int_equal(system(cmd), 0);
    kill(one.pid[0], SIGHUP);
    assert_true(cluster_log_wait(&one, 0, "reloaded", 10000));
    wait_ok(c, ps_push(c, t, &key, 1, g, NULL, NULL));
    wait_ok(c, ps_pull(c, t, &key, 1, w, NULL, NULL));
    expect_float(w[0], 0.25f, "w after lr 0.25", 0);   /* 0.5 - 0.25 */
    /* A broken file is refused and the old settings stay. */
    snprintf(cmd, sizeof cmd, "echo 'bogus line' >> '%s'", one.ini);
    assert_int_equal(system(cmd), 0);
    kill(one.pid[0], SIGHUP);
    assert_true(cluster_log_wait(&one, 0, "reload failed", 10000));
    assert_true(cluster_alive(&one, 0));
    wait_ok(c, ps_push(c, t, &key, 1, g, NULL, NULL));
    ps_close(c);
    assert_int_equal(cluster_stop(&one), 0);
}

static void check_flag_reports_file_and_line(void **state)
{
    (void)state;
    char dir[] = "/tmp/psd-check-XXXXXX", path[64], cmd[256], out[512] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bad.ini", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:7070\n\n[table.t]\ndim = -5\n");
    fclose(f);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    snprintf(cmd, sizeof cmd, "'%s' --check -c '%s' 2>&1", psd,
             path);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_int_equal(WEXITSTATUS(st), 1);
    char want[128];
    snprintf(want, sizeof want, "%s:5:", path);
    if (!strstr(out, want))
        fail_msg("psd --check said \"%s\", want it to start with \"%s\"", out,
                 want);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A data_dir whose path goes through a file is one problem, said once at
 * its line: no snapshot can be there to check, and advice about one
 * (restore the ini, --skip-snapshot) would send the operator astray. */
static void check_flag_says_a_data_dir_through_a_file_once(void **state)
{
    (void)state;
    char dir[] = "/tmp/psd-check-XXXXXX", path[64], file[64], cmd[256];
    char out[2048] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bad.ini", dir);
    snprintf(file, sizeof file, "%s/afile", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    f = fopen(path, "w");
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:7070\n[server]\n"
            "data_dir = %s/sub\n[table.t]\ndim = 1\n", file);
    fclose(f);
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    snprintf(cmd, sizeof cmd, "'%s' --check -c '%s' 2>&1", psd, path);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    EXPECT_INT(WEXITSTATUS(st), 1, "exit status of psd --check");
    char want[128];
    snprintf(want, sizeof want, "%s:4: [server] data_dir:", path);
    if (strncmp(out, want, strlen(want)) || strchr(out, '\n') !=
        out + strlen(out) - 1)
        fail_msg("psd --check said \"%s\", want one line starting with "
                 "\"%s\"", out, want);
}

/* Reads the "stopping:" line of a stopped node's log. */
static void stop_counts(const char *log, unsigned long long *requests,
                        unsigned long long *frames)
{
    const char *p = log ? strstr(log, "stopping: ") : NULL;
    assert_non_null(p);
    unsigned long long conns;
    assert_int_equal(sscanf(p, "stopping: %llu connections served, %llu "
                            "requests in %llu frames", &conns, requests,
                            frames), 3);
}

/* busy_poll_us: 0 (never) and the largest allowed serve as the default
 * does; values outside 0..1000000 are refused by ps_open. */
static void busy_poll_settings_serve_and_bad_ones_are_refused(void **state)
{
    (void)state;
    static const int good[] = { 0, 1000000 };
    for (size_t i = 0; i < 2; i++) {
        ps_options o;
        ps_options_init(&o);
        assert_int_equal(o.busy_poll_us, 50);
        o.busy_poll_us = good[i];
        ps_client *c = NULL;
        assert_int_equal(ps_open(&c, shared.spec, &o), 0);
        int t = table_id(c, "dense");
        uint64_t key = 77;
        float push[4] = { 1, 2, 3, 4 }, before[4], after[4];
        wait_ok(c, ps_pull(c, t, &key, 1, before, NULL, NULL));
        for (int k = 0; k < 10; k++)
            wait_ok(c, ps_push(c, t, &key, 1, push, NULL, NULL));
        wait_ok(c, ps_pull(c, t, &key, 1, after, NULL, NULL));
        for (int d = 0; d < 4; d++)
            expect_float(after[d] - before[d], 10 * push[d],
                         good[i] ? "busy_poll_us 1000000: ten pushes"
                                 : "busy_poll_us 0: ten pushes", (size_t)d);
        ps_close(c);
    }
    static const int bad[] = { -1, 1000001 };
    for (size_t i = 0; i < 2; i++) {
        ps_options o;
        ps_options_init(&o);
        o.busy_poll_us = bad[i];
        ps_client *c = NULL;
        assert_int_equal(ps_open(&c, shared.spec, &o), PS_EINVAL);
        assert_null(c);
        /* ps_last_error(NULL) says which option, for callers (a Python
         * notebook) that do not see stderr. */
        EXPECT_INT(strstr(ps_last_error(NULL), "busy_poll_us = ") != NULL, 1,
                   "why ps_open failed: '%s'", ps_last_error(NULL));
    }
    /* A batch delay past a second would outlast the queued requests'
     * bounded time (they are not timed while they wait for company). */
    ps_options o;
    ps_options_init(&o);
    o.batch_delay_us = 1000001;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, shared.spec, &o), PS_EINVAL);
    EXPECT_SUBSTR(ps_last_error(NULL), "batch_delay_us = 1000001; it must be "
                  "0..1000000", "why ps_open failed");
}

/* Why ps_open failed is kept for ps_last_error(NULL) on the calling thread
 * (it goes to stderr too): the option out of range, the node that cannot
 * be reached. A later ps_open that works clears it. */
static void failed_open_says_why_in_last_error(void **state)
{
    (void)state;
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 0;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, shared.spec, &o), PS_EINVAL);
    EXPECT_INT(strstr(ps_last_error(NULL), "request_timeout_ms = 0") != NULL,
               1, "an option out of range: '%s'", ps_last_error(NULL));
    ps_options_init(&o);
    o.connect_timeout_ms = 300;
    int port = cluster_free_port();
    char spec[64];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", port);
    EXPECT_INT(ps_open(&c, spec, &o), PS_ECONN, "no psd on %s", spec);
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    EXPECT_INT(strstr(ps_last_error(NULL), port_s) != NULL, 1,
               "the address nobody answers on: '%s'", ps_last_error(NULL));
    /* Named once, with the reason ("cannot connect to ADDR" inside the
     * text named it twice). */
    char refused[160];
    snprintf(refused, sizeof refused, "no connection to %s within "
             "connect_timeout_ms (300 ms): connection refused", spec);
    EXPECT_SUBSTR(ps_last_error(NULL), refused, "ps_open's text");
    EXPECT_INT(strstr(strstr(ps_last_error(NULL), port_s) + 1, port_s) ==
               NULL, 1, "the address once: '%s'", ps_last_error(NULL));
    /* Two nodes listed, neither up: said of both, not of the last one
     * tried alone (which read as if the other were up). */
    char two[96];
    snprintf(two, sizeof two, "%s,127.0.0.1:%d", spec, cluster_free_port());
    EXPECT_INT(ps_open(&c, two, &o), PS_ECONN, "no psd on %s", two);
    EXPECT_SUBSTR(ps_last_error(NULL), "no connection to any of the 2 "
                  "addresses listed within connect_timeout_ms (300 ms); the "
                  "last tried, 127.0.0.1:", "ps_open's text for two nodes");
    /* A port that takes the connection and never answers (the kernel
     * completes it for a listener that does not accept): said as such,
     * not as if nothing were there. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in la = { .sin_family = AF_INET,
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t llen = sizeof la;
    assert_true(lfd >= 0 && bind(lfd, (struct sockaddr *)&la, sizeof la) == 0 &&
                listen(lfd, 8) == 0 &&
                getsockname(lfd, (struct sockaddr *)&la, &llen) == 0);
    snprintf(spec, sizeof spec, "127.0.0.1:%d", ntohs(la.sin_port));
    EXPECT_INT(ps_open(&c, spec, &o), PS_ETIMEDOUT, "a silent port");
    EXPECT_SUBSTR(ps_last_error(NULL), "but no answer to the handshake "
                  "within", "why ps_open failed");
    close(lfd);
    /* An ini path with a typo is named as a file that is not there, not
     * as a bad server address; a word that is neither keeps the
     * address's reason. */
    EXPECT_INT(ps_open(&c, "conf/no-such.ini", &o), PS_EINVAL, "a missing ini");
    EXPECT_SUBSTR(ps_last_error(NULL), "cannot open the ini file "
                  "\"conf/no-such.ini\": No such file or directory",
                  "why ps_open failed");
    /* A line psd refuses to start with is refused here too (it was read
     * past: the client connected to the nodes line above it). */
    char ini[] = "/tmp/psd-e2e-badini-XXXXXX";
    int ifd = mkstemp(ini);
    assert_true(ifd >= 0);
    char body[200];
    int blen = snprintf(body, sizeof body, "[cluster]\nnodes = %s\n"
                        "this line is garbage\n", shared.spec);
    assert_int_equal(write(ifd, body, (size_t)blen), blen);
    close(ifd);
    EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "an ini with a bad line");
    char want[160];
    snprintf(want, sizeof want, "%s:3: not an ini line", ini);
    EXPECT_SUBSTR(ps_last_error(NULL), want, "why ps_open failed");
    /* A line too long, named by its own number as psd names it: inih cut
     * it, and the error named the line after it (from the reload trial). */
    FILE *lf = fopen(ini, "w");
    assert_non_null(lf);
    fprintf(lf, "[cluster]\nnodes = %s\n;%0300d\n[table.t]\ndim = 1\n",
            shared.spec, 0);
    fclose(lf);
    EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "an ini with a long line");
    snprintf(want, sizeof want, "%s:3: line too long (max 197 bytes)", ini);
    EXPECT_SUBSTR(ps_last_error(NULL), want, "why ps_open failed");
    /* The first error, as psd names it: a bad line before a long one. */
    lf = fopen(ini, "w");
    assert_non_null(lf);
    fprintf(lf, "[cluster]\nnodes = %s\ngarbage\n;%0300d\n", shared.spec,
            0);
    fclose(lf);
    EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "a bad line, then a long one");
    snprintf(want, sizeof want, "%s:3: not an ini line", ini);
    EXPECT_SUBSTR(ps_last_error(NULL), want, "why ps_open failed");
    /* A NUL byte or a CR inside the nodes line, which psd refuses: the
     * client read the line up to it, and connected to that part. */
    static const char *const cut[] = { "\0", "\r" };
    static const char *const cut_said[] = { "unexpected NUL byte (byte ",
                                            "unexpected carriage return "
                                            "(CR) (byte " };
    for (int k = 0; k < 2; k++) {
        lf = fopen(ini, "w");
        assert_non_null(lf);
        fprintf(lf, "[cluster]\nnodes = %s", shared.spec);
        fwrite(cut[k], 1, 1, lf);
        fprintf(lf, ", 10.0.0.1:1\n");
        fclose(lf);
        EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "a line with %s",
                   k ? "a CR" : "a NUL");
        snprintf(want, sizeof want, "%s:2: %s", ini, cut_said[k]);
        EXPECT_SUBSTR(ps_last_error(NULL), want, "why ps_open failed");
    }
    /* A bad nodes line says which file it is in (it did not). */
    lf = fopen(ini, "w");
    assert_non_null(lf);
    fprintf(lf, "[cluster]\nnodes =\n");
    fclose(lf);
    EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "an empty nodes line");
    snprintf(want, sizeof want, "%s: [cluster] nodes: bad server list", ini);
    EXPECT_SUBSTR(ps_last_error(NULL), want, "why ps_open failed");
    /* A token pasted indented under the nodes line joins the list: the
     * client's reader does not quote it (psd --check did not either). */
    lf = fopen(ini, "w");
    assert_non_null(lf);
    fprintf(lf, "[cluster]\nnodes = %s,\n  Zq8S3cretTokenNoDots\n",
            shared.spec);
    fclose(lf);
    EXPECT_INT(ps_open(&c, ini, &o), PS_EINVAL, "a token under nodes");
    EXPECT_INT(strstr(ps_last_error(NULL), "Zq8S3cret") == NULL, 1,
               "the token not quoted: %s", ps_last_error(NULL));
    EXPECT_SUBSTR(ps_last_error(NULL), "text of an indented line, not shown",
                  "why ps_open failed");
    unlink(ini);
    EXPECT_INT(ps_open(&c, "localhost", &o), PS_EINVAL, "no port");
    EXPECT_SUBSTR(ps_last_error(NULL), "bad server address \"localhost\"",
                  "why ps_open failed");
    /* The reason goes to stderr too, unless quiet (a binding that raises
     * it says it once). */
    for (int quiet = 0; quiet <= 1; quiet++) {
        o.quiet = quiet;
        FILE *cap = tmpfile();
        assert_non_null(cap);
        fflush(stderr);
        int saved = dup(2);
        dup2(fileno(cap), 2);
        EXPECT_INT(ps_open(&c, "localhost", &o), PS_EINVAL, "quiet %d", quiet);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char said[512] = "";
        rewind(cap);
        size_t got = fread(said, 1, sizeof said - 1, cap);
        said[got] = '\0';
        fclose(cap);
        EXPECT_INT(strstr(said, "libpsclient: ps_open: bad server address") !=
                       NULL, !quiet, "stderr with quiet = %d: '%s'", quiet,
                   said);
        EXPECT_SUBSTR(ps_last_error(NULL), "bad server address",
                      "ps_last_error(NULL) with quiet = %d", quiet);
    }
    o.quiet = 0;
    assert_int_equal(ps_open(&c, shared.spec, NULL), PS_OK);
    EXPECT_INT(ps_last_error(NULL)[0], 0, "after a ps_open that worked: '%s'",
               ps_last_error(NULL));
    ps_close(c);
}

/* Runs what(msg, len) in a forked child inside a network namespace of
 * its own, loopback up, whose local ports are 40000 and 40001 only: a
 * connect to 127.0.0.1:40000 there, its first, is given port 40000 as
 * its own (the kernel tries even ports first for a connect), and the SYN
 * meets itself. Once closed, that pair waits in TIME_WAIT and later
 * connects take 40001: one check per namespace. 0 when what returned 0;
 * else fails with what it wrote; skips where no namespace can be made
 * (not root). */
static void in_own_netns(int (*what)(char *msg, size_t len))
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        char msg[600] = "";
        int code = 77;
        FILE *f = NULL;
        if (unshare(CLONE_NEWNET) != 0)
            snprintf(msg, sizeof msg, "unshare(CLONE_NEWNET): %s",
                     strerror(errno));
        else if (system("ip link set lo up") != 0 ||
                 !(f = fopen("/proc/sys/net/ipv4/ip_local_port_range",
                             "w")) ||
                 fputs("40000 40001\n", f) < 0 || fclose(f) != 0)
            snprintf(msg, sizeof msg, "cannot set up the namespace");
        else
            code = what(msg, sizeof msg) ? 1 : 0;
        if (write(pfd[1], msg, strlen(msg)) < 0)
            code = 2;
        _exit(code);
    }
    close(pfd[1]);
    char msg[600] = "";
    ssize_t n = read(pfd[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    close(pfd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        print_message("skipped: %s\n", msg);
        skip();
    }
    if (WEXITSTATUS(st) != 0)
        fail_msg("%s", msg);
}

/* Opens until one reaches itself (the namespace's first connect, or, if
 * the kernel gave that one 40001, the next): each is PS_ECONN and says
 * "connection refused", that one "(the connection reached itself"; or
 * PS_ETIMEDOUT when (under ASan, on a slow machine) its 5 ms ran out
 * before its attempt ended, which may have been the one that reached
 * itself (its port pair then waits in TIME_WAIT and later connects take
 * 40001): the check ends there, untold. Never the client's own HELLO. */
static int open_reaching_itself(char *msg, size_t len)
{
    ps_options o;
    ps_options_init(&o);
    o.connect_timeout_ms = 5;
    int refused = 0;
    for (int i = 0; i < 4; i++) {
        ps_client *c = NULL;
        int rc = ps_open(&c, "127.0.0.1:40000", &o);
        const char *why = ps_last_error(NULL);
        if ((rc != PS_ECONN && rc != PS_ETIMEDOUT) || strstr(why, "HELLO") ||
            (rc == PS_ECONN && !strstr(why, "): connection refused"))) {
            snprintf(msg, len, "ps_open %d: %s: %s", i + 1, ps_strerror(rc),
                     why);
            if (rc == 0)
                ps_close(c);
            return -1;
        }
        if (rc == PS_ETIMEDOUT ||
            strstr(why, "(the connection reached itself"))
            return 0;
        refused++;
    }
    snprintf(msg, len, "no ps_open of %d reached itself", refused);
    return -1;
}

static int psctl_reaching_itself(char *msg, size_t len)
{
    const char *b = getenv("PSCTL_BIN");
    char cmd[600], out[500] = "";
    snprintf(cmd, sizeof cmd, "%s -s 127.0.0.1:40000 ping 2>&1",
             b ? b : "build/psctl");
    for (int i = 0; i < 3; i++) {
        FILE *p = popen(cmd, "r");
        size_t k = p ? fread(out, 1, sizeof out - 1, p) : 0;
        out[k] = 0;
        if (p)
            pclose(p);
        if (!strstr(out, "cannot connect: Connection refused"))
            break;
        if (strstr(out, "(the connection reached itself"))
            return 0;
    }
    snprintf(msg, len, "psctl ping: '%s'", out);
    return -1;
}

/* A node address in the client's range of local ports, nothing listening
 * on it: the kernel may give a connect that very port as its own, and the
 * SYN meets itself (a TCP simultaneous open). The client read its own
 * HELLO back and ps_open gave up with PS_EPROTO ("expected HELLO_OK with
 * 14 or 15 fields"; the suite's own run under ASan once), and psctl said
 * "bad HELLO_OK"; it is the refusal it stands for. */
static void an_address_the_client_reaches_as_itself_is_refused(void **state)
{
    (void)state;
    in_own_netns(open_reaching_itself);
    in_own_netns(psctl_reaching_itself);
}

/* Every call answers a NULL where a pointer is needed with PS_EINVAL;
 * ps_open has nowhere to put the client then, and must not write it. */
static void open_without_a_place_for_the_client_is_einval(void **state)
{
    (void)state;
    EXPECT_INT(ps_open(NULL, shared.spec, NULL), PS_EINVAL,
               "ps_open(NULL, ...)");
    EXPECT_INT(strstr(ps_last_error(NULL), "NULL") != NULL, 1,
               "the reason: '%s'", ps_last_error(NULL));
}

static void small_requests_share_frames(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES), 0);
    ps_options o;
    ps_options_init(&o);
    o.batch_delay_us = 2000;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, one.spec, &o), 0);
    int t = table_id(c, "counts");
    uint64_t key = 9;
    float one_f = 1, v;
    for (int i = 0; i < 1000; i++)
        assert_true(ps_push(c, t, &key, 1, &one_f, NULL, NULL) > 0);
    assert_int_equal(ps_wait_all(c), PS_OK);
    wait_ok(c, ps_pull(c, t, &key, 1, &v, NULL, NULL));
    expect_float(v, 1000, "sum of batched pushes", 0);
    ps_close(c);
    /* Stop the node before reading its log: the counts come at the end. */
    cluster_kill(&one, 0, SIGTERM);
    char *log = cluster_log(&one, 0);
    unsigned long long requests, frames;
    stop_counts(log, &requests, &frames);
    free(log);
    /* 1000 pushes, the pull, and the LEAVE of a reader that pushed. */
    assert_int_equal(requests, 1002);
    if (frames * 4 > requests)
        fail_msg("%llu requests came in %llu frames: not batched", requests,
                 frames);
    cluster_stop(&one);
}

static _Atomic long in_flight_bytes, max_in_flight_bytes;

static void release_bytes(ps_ts ts, int status, void *arg)
{
    (void)ts;
    (void)status;
    in_flight_bytes -= (long)(intptr_t)arg;
}

static void inflight_bytes_never_exceed_the_limit(void **state)
{
    (void)state;
    ps_options o;
    ps_options_init(&o);
    o.max_inflight_bytes = 64 * 1024;
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, shared.spec, &o), 0);
    int t = table_id(c, "dense");
    static uint64_t keys[400];
    static float vals[400 * 4];
    for (int i = 0; i < 400; i++)
        keys[i] = (uint64_t)i;
    /* keys + values of one push: 400 * (8 + 16) bytes. */
    long bytes = 400 * (8 + 16);
    in_flight_bytes = max_in_flight_bytes = 0;
    for (int i = 0; i < 300; i++) {
        long now = atomic_fetch_add(&in_flight_bytes, bytes) + bytes;
        if (now > max_in_flight_bytes)
            max_in_flight_bytes = now;
        ps_ts ts = ps_push(c, t, keys, 400, vals, release_bytes,
                           (void *)(intptr_t)bytes);
        assert_true(ts > 0);
    }
    assert_int_equal(ps_wait_all(c), PS_OK);
    /* The count here runs one request ahead of the library's (it is
     * added before the call that may block). */
    if (max_in_flight_bytes > 64 * 1024 + bytes)
        fail_msg("%ld bytes were in flight; the limit is %d", 
                 (long)max_in_flight_bytes, 64 * 1024);
    ps_close(c);
}

static void reader_that_stops_reading_loses_nothing(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES
                                   "[server]\nmax_output = 64K\n"), 0);
    /* 300 pulls of 1000 rows x 4 floats (16 KB each) sent without reading:
     * psd must stop reading this socket rather than queue 4.8 MB. */
    int fd = raw_connect(one.port[0]);
    raw_hello(fd);
    psw_out o;
    psw_out_init(&o);
    for (int i = 0; i < 300; i++) {
        psw_out_frame_begin(&o);
        psw_msg m = { .op = PSW_OP_PULL_RANGE, .ts = (uint64_t)i + 1,
                      .table = 0, .first = 0, .count = 1000 };
        psw_pack_request(&o, &m);
        psw_out_frame_end(&o);
    }
    raw_send_out(fd, &o);
    psw_out_destroy(&o);
    /* Meanwhile another client is served. */
    ps_client *c = open_or_fail(one.spec);
    uint64_t key = 5;
    float v[4];
    wait_ok(c, ps_pull(c, table_id(c, "dense"), &key, 1, v, NULL, NULL));
    ps_close(c);
    /* Now every reply arrives, in order, none lost. */
    for (int i = 0; i < 300; i++) {
        msgpack_zone z;
        char *f;
        psw_msg r;
        raw_read_reply(fd, &r, &z, &f);
        assert_int_equal(r.ts, (uint64_t)i + 1);
        assert_int_equal(r.vals_len, 16000);
        msgpack_zone_destroy(&z);
        free(f);
    }
    /* And the connection is read again once its replies drained. */
    psw_msg again = { .op = PSW_OP_PULL_RANGE, .ts = 301, .table = 0,
                      .first = 0, .count = 1 };
    raw_send_msg(fd, &again);
    size_t len;
    char *f = raw_read_frame(fd, &len);
    if (!f)
        fail_msg("no reply to a request sent after the backlog drained");
    free(f);
    close(fd);
    assert_int_equal(cluster_stop(&one), 0);
}

static void replies_of_a_batch_larger_than_max_frame_all_arrive(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 2, 16,
                                   "[server]\nmax_frame = 64K\n"
                                   "[table.wide]\nkind = sparse\ndim = 64\n"
                                   "updater = sum\ninit = constant 2\n"), 0);
    ps_options o;
    ps_options_init(&o);
    o.batch_delay_us = 5000;      /* let all 40 pulls share frames */
    ps_client *c = NULL;
    assert_int_equal(ps_open(&c, one.spec, &o), 0);
    int t = table_id(c, "wide");
    static uint64_t keys[100];
    static float out[40][100 * 64];
    for (int i = 0; i < 100; i++)
        keys[i] = (uint64_t)i;
    /* 40 x 25.6 KB of rows: far more than one 64 KB reply frame. */
    for (int r = 0; r < 40; r++)
        assert_true(ps_pull(c, t, keys, 100, out[r], NULL, NULL) > 0);
    assert_int_equal(ps_wait_all(c), PS_OK);
    for (int r = 0; r < 40; r++)
        for (int i = 0; i < 100 * 64; i++)
            expect_float(out[r][i], 2.0f, "wide row", (size_t)i);
    /* One request of 1 MB of rows travels as parts within max_frame. */
    static uint64_t many[4000];
    static float big[4000 * 64];
    for (int i = 0; i < 4000; i++)
        many[i] = 1000000 + (uint64_t)i;
    wait_ok(c, ps_pull(c, t, many, 4000, big, NULL, NULL));
    for (int i = 0; i < 4000 * 64; i++)
        expect_float(big[i], 2.0f, "row of a 1 MB pull", (size_t)i);
    ps_close(c);
    assert_int_equal(cluster_stop(&one), 0);
}

static void ranges_of_a_table_with_fewer_rows_than_shards_work(void **state)
{
    (void)state;
    test_cluster two;
    assert_int_equal(cluster_start(&two, 2, 16,
                                   "[table.tiny]\nkind = dense\nrows = 10\n"
                                   "dim = 1\nupdater = sum\n"), 0);
    ps_client *c = open_or_fail(two.spec);
    int t = table_id(c, "tiny");
    float v[10], out[10];
    for (int i = 0; i < 10; i++)
        v[i] = (float)i;
    wait_ok(c, ps_push_range(c, t, 0, 10, v, NULL, NULL));
    wait_ok(c, ps_pull_range(c, t, 0, 2, out, NULL, NULL));
    expect_float(out[1], 1, "row", 1);
    wait_ok(c, ps_pull_range(c, t, 0, 10, out, NULL, NULL));
    for (int i = 0; i < 10; i++)
        expect_float(out[i], (float)i, "row", (size_t)i);
    ps_close(c);
    assert_int_equal(cluster_stop(&two), 0);
}

static void large_requests_travel_in_parts_and_arrive_whole(void **state)
{
    (void)state;
    test_cluster two;
    assert_int_equal(cluster_start(&two, 2, 4,
                                   "[table.big]\nkind = dense\nrows = 8192\n"
                                   "dim = 1024\nupdater = sum\n"), 0);
    ps_client *c = open_or_fail(two.spec);
    int t = table_id(c, "big");
    enum { ROWS = 4096, DIM = 1024 };        /* 16 MiB of rows */
    float *v = malloc((size_t)ROWS * DIM * sizeof *v);
    float *out = malloc((size_t)ROWS * DIM * sizeof *out);
    uint64_t *keys = malloc(ROWS * sizeof *keys);
    for (size_t i = 0; i < (size_t)ROWS * DIM; i++)
        v[i] = (float)(i % 65521);
    for (int i = 0; i < ROWS; i++)
        keys[i] = (uint64_t)(ROWS - 1 - i) * 2;   /* every other row, reversed */
    wait_ok(c, ps_push_range(c, t, 1000, ROWS, v, NULL, NULL));
    wait_ok(c, ps_pull_range(c, t, 1000, ROWS, out, NULL, NULL));
    assert_memory_equal(out, v, (size_t)ROWS * DIM * sizeof *v);
    wait_ok(c, ps_push(c, t, keys, ROWS, v, NULL, NULL));
    wait_ok(c, ps_pushpull(c, t, keys, ROWS, v, out, NULL, NULL));
    for (int i = 0; i < ROWS; i++) {
        uint64_t row = keys[i];
        float before = row >= 1000 && row < 1000 + ROWS
                           ? v[(row - 1000) * DIM] : 0.0f;
        expect_float(out[(size_t)i * DIM], before + 2 * v[(size_t)i * DIM],
                     "first float of pulled row", (size_t)i);
    }
    free(v);
    free(out);
    free(keys);
    ps_close(c);
    assert_int_equal(cluster_stop(&two), 0);
}

/* A pushpull is the rows as they are after its whole push, also for a
 * key that comes again in a later message of a request too large for
 * one (the TSan stress trial: in a pushpull of 200,000 keys, a repeated
 * key's first place read the row after its first occurrence only; each
 * PUSHPULL message reads right after its own push). Dense rows on one
 * node (5 messages), on two nodes grouped by node, and 200,000 sparse
 * keys of dim 1 (several messages of about 1 MiB per node). */
static void a_large_pushpull_reads_rows_after_the_whole_push(void **state)
{
    (void)state;
    test_cluster two;
    assert_int_equal(cluster_start(&two, 2, 4,
                                   "[table.big]\nkind = dense\nrows = 8192\n"
                                   "dim = 1024\nupdater = sum\n"
                                   "[table.ids]\nkind = sparse\ndim = 1\n"
                                   "updater = sum\n"), 0);
    ps_client *c = open_or_fail(two.spec);
    int big = table_id(c, "big"), ids = table_id(c, "ids");
    enum { N = 300, DIM = 1024, SN = 200000, SKEYS = 1000 };
    /* Gradients of 1, enough for either kind of request. */
    enum { ONES = N * DIM > SN ? N * DIM : SN };
    float *g = malloc((size_t)ONES * sizeof *g);
    float *out = malloc((size_t)N * DIM * sizeof *out);
    uint64_t keys[N];
    assert_non_null(g);
    assert_non_null(out);
    for (size_t i = 0; i < (size_t)ONES; i++)
        g[i] = 1.0f;
    /* Row 6 N times: one node, N / 63 messages. */
    for (int i = 0; i < N; i++)
        keys[i] = 6;
    wait_ok(c, ps_pushpull(c, big, keys, N, g, out, NULL, NULL));
    for (int i = 0; i < N; i++)
        expect_float(out[(size_t)i * DIM + DIM - 1], (float)N,
                     "row 6 after the whole push, at occurrence", (size_t)i);
    /* Rows 7 and 2100 (shards 0 and 1: both nodes) in turn. */
    for (int i = 0; i < N; i++)
        keys[i] = i % 2 ? 2100 : 7;
    wait_ok(c, ps_pushpull(c, big, keys, N, g, out, NULL, NULL));
    for (int i = 0; i < N; i++)
        expect_float(out[(size_t)i * DIM], (float)(N / 2),
                     "rows 7 and 2100 after the whole push, at occurrence",
                     (size_t)i);
    /* SKEYS sparse keys, each SN / SKEYS times, spread over the request. */
    uint64_t *sk = malloc((size_t)SN * sizeof *sk);
    float *so = malloc((size_t)SN * sizeof *so);
    assert_non_null(sk);
    assert_non_null(so);
    for (size_t i = 0; i < (size_t)SN; i++)
        sk[i] = 1000003 * (uint64_t)(i % SKEYS);
    wait_ok(c, ps_pushpull(c, ids, sk, SN, g, so, NULL, NULL));
    for (size_t i = 0; i < (size_t)SN; i++)
        expect_float(so[i], (float)(SN / SKEYS),
                     "a sparse key after the whole push, at occurrence", i);
    free(sk);
    free(so);
    free(g);
    free(out);
    ps_close(c);
    assert_int_equal(cluster_stop(&two), 0);
}

static void connection_without_hello_is_closed_after_hello_timeout(void **state)
{
    (void)state;
    test_cluster one;
    assert_int_equal(cluster_start(&one, 1, 4, TABLES
                                   "[server]\nhello_timeout = 1\n"), 0);
    int fd = raw_connect(one.port[0]);
    /* raw_closed waits up to its 5 s receive timeout. */
    assert_true(raw_closed(fd));
    close(fd);
    char *log = cluster_log(&one, 0);
    assert_non_null(strstr(log, "no HELLO within 1 s"));
    free(log);
    assert_int_equal(cluster_stop(&one), 0);
}

static void hello_with_another_protocol_version_is_refused_clearly(void **state)
{
    (void)state;
    /* The refusal has 15 fields (a nil proof) for every version above 2,
     * 2^31 and more too (compared as an int, those got 14), and 14 for
     * 0 and 1. */
    static const struct { uint32_t v; int proof; } cases[] = {
        { 99, PSW_PROOF_NIL }, { 5, PSW_PROOF_NIL },
        { 0x80000000u, PSW_PROOF_NIL }, { 0xffffffffu, PSW_PROOF_NIL },
        { 1, PSW_PROOF_ABSENT }, { 0, PSW_PROOF_ABSENT },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int fd = raw_connect(shared.port[0]);
        psw_out o;
        psw_out_init(&o);
        psw_out_frame_begin(&o);
        psw_hello h = { cases[k].v, 1, 1, -1, NULL, 0 };
        psw_pack_hello(&o, &h);
        psw_out_frame_end(&o);
        raw_send_out(fd, &o);
        psw_out_destroy(&o);
        msgpack_zone z;
        char *f, err[128], want[64];
        psw_cluster l;
        assert_int_equal(psw_hello_ok_decode(raw_read_one(fd, &z, &f), &l,
                                             err, sizeof err), 0);
        EXPECT_INT(l.status, PSW_EPROTO, "version %u", cases[k].v);
        snprintf(want, sizeof want, "protocol version %u is not supported "
                 "(this server speaks 2..%d)", cases[k].v, PSW_VERSION);
        EXPECT_SUBSTR(l.text, want, "version %u", cases[k].v);
        EXPECT_INT(l.proof_state, cases[k].proof, "version %u: fields",
                   cases[k].v);
        psw_cluster_free(&l);
        msgpack_zone_destroy(&z);
        free(f);
        assert_true(raw_closed(fd));
        close(fd);
    }
    others_still_served();
}


/* Tests that start several nodes take a free port for each, one call
 * after the other: the same port twice would make two nodes (or a node
 * and a layout entry) share it, and psd refuse the file ("duplicate
 * node"). The kernel may give back the port it just gave, so
 * cluster_free_port must not: 20,000 ports in a row, none the same as
 * one of the 63 before it. */
static void free_ports_taken_in_a_row_are_all_different(void **state)
{
    (void)state;
    enum { N = 20000, WINDOW = 64 };
    int last[WINDOW];
    for (int i = 0; i < N; i++) {
        int p = cluster_free_port();
        assert_true(p > 0);
        for (int k = 1; k < WINDOW && k <= i; k++)
            if (last[(i - k) % WINDOW] == p)
                fail_msg("port %d handed out at calls %d and %d", p, i - k,
                         i);
        last[i % WINDOW] = p;
    }
}

/* The descriptors open in this process; with room, the limit on open
 * files that leaves exactly `room` numbers free below it (the kernel
 * hands out the lowest free number, below the limit). */
static int count_fds(int room, int *limit)
{
    static unsigned char used[4096];
    int n = 0;
    memset(used, 0, sizeof used);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int own = dirfd(d);
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == own)
            continue;
        n++;
        if (fd >= 0 && fd < (int)sizeof used)
            used[fd] = 1;
    }
    closedir(d);
    if (limit) {
        int free_below = 0, l = 0;
        while (l < (int)sizeof used && free_below < room)
            free_below += !used[l++];
        *limit = l;
    }
    return n;
}

static int open_at_the_limit(void *arg, int before);

/* Near its open files limit, ps_open aborted inside libuv (its first
 * loop's pipe) or leaked an epoll descriptor per failed try (a fault
 * trial). In a forked child, with room for one pipe more than it has:
 * each of three opens fails with PS_ECONN saying "too many open files",
 * and the descriptors are as before. 0 when so; 1 with why on stderr. */
static int open_near_the_fd_limit(void *arg)
{
    signal(SIGABRT, SIG_DFL);
    int limit, before = count_fds(2, &limit);
    struct rlimit was, rl;
    if (before < 0 || getrlimit(RLIMIT_NOFILE, &was))
        return 1;
    /* The soft limit only, put back before the child exits: a leak
     * checker at exit (make sanitize) needs descriptors of its own. */
    rl = was;
    rl.rlim_cur = (rlim_t)limit;
    if (setrlimit(RLIMIT_NOFILE, &rl))
        return 1;
    int rc = open_at_the_limit(arg, before);
    setrlimit(RLIMIT_NOFILE, &was);
    return rc;
}

/* open_near_the_fd_limit's three opens, at the limit set. */
static int open_at_the_limit(void *arg, int before)
{
    for (int i = 0; i < 3; i++) {
        ps_options o;
        ps_options_init(&o);
        o.connect_timeout_ms = 200;
        o.quiet = 1;
        ps_client *c = NULL;
        int rc = ps_open(&c, (const char *)arg, &o);
        if (rc == PS_OK) {
            ps_close(c);
            fprintf(stderr, "ps_open succeeded with no room\n");
            return 1;
        }
        if (rc != PS_ECONN ||
            !strstr(ps_last_error(NULL), "too many open files")) {
            fprintf(stderr, "ps_open: %d, %s\n", rc, ps_last_error(NULL));
            return 1;
        }
        int now = count_fds(0, NULL);
        if (now != before) {
            fprintf(stderr, "%d descriptors after try %d, %d before\n", now,
                    i + 1, before);
            return 1;
        }
    }
    return 0;
}

static void an_open_near_the_open_files_limit_fails_cleanly(void **state)
{
    (void)state;
    char spec[] = "127.0.0.1:1";       /* nothing listens there */
    int st = reap(spawn(open_near_the_fd_limit, spec));
    if (st != 0)
        fail_msg("ps_open near the open files limit: %s (exit status %d)",
                 st == 1 ? "see its stderr" : "crashed", st);
}

/* ps_open in a forked child, so that a crash is a failed test: returns
 * 0 when the open failed with PS_ECONN naming the node that does not
 * resolve, 1 when it failed otherwise, 2 when it succeeded. */
static int open_unresolvable_layout(void *arg)
{
    ps_client *c = NULL;
    signal(SIGSEGV, SIG_DFL);        /* not cmocka's: a crash is a signal */
    signal(SIGBUS, SIG_DFL);
    ps_options o;
    ps_options_init(&o);
    o.connect_timeout_ms = 600;
    o.quiet = 1;
    int rc = ps_open(&c, (const char *)arg, &o);
    if (rc == PS_OK) {
        ps_close(c);
        return 2;
    }
    const char *why = ps_last_error(NULL);
    if (rc != PS_ECONN || !strstr(why, "no connection to no-such-node."
                                       "invalid:7071 within "
                                       "connect_timeout_ms (600 ms): "
                                       "cannot resolve it (node 1's "
                                       "address from the layout): ")) {
        fprintf(stderr, "ps_open: %d, %s\n", rc, why);
        return 1;
    }
    return 0;
}

/* A layout whose node 1 has a host name that does not resolve (psd only
 * notes that for other nodes' addresses, and starts): ps_open learns the
 * layout from node 0, tries node 1's name until connect_timeout_ms (as
 * for a node that is down: its record may come late) and fails with
 * PS_ECONN, naming it. Node 2, after it in the layout, is not up: the
 * I/O thread's ticks and its shutdown must not trip over either. */
static void layout_node_that_does_not_resolve_fails_open_cleanly(
    void **state)
{
    (void)state;
    test_cluster c;
    assert_int_equal(cluster_prepare(&c, 3), 0);
    c.port[0] = cluster_free_port();
    c.port[2] = cluster_free_port();
    FILE *f = fopen(c.ini, "w");
    assert_non_null(f);
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:%d, no-such-node.invalid:7071, "
            "127.0.0.1:%d\nshards = 4\n[table.d]\nkind = dense\nrows = 10\n"
            "dim = 1\n[server]\ndata_dir = %s\n", c.port[0], c.port[2],
            c.dir);
    fclose(f);
    if (cluster_restart(&c, 0)) {
        cluster_stop(&c);
        fail_msg("psd node 0 did not start");
    }
    char spec[64];
    snprintf(spec, sizeof spec, "127.0.0.1:%d", c.port[0]);
    int st = reap(spawn(open_unresolvable_layout, spec));
    assert_int_equal(cluster_stop(&c), 0);
    if (st != 0)
        fail_msg("ps_open with an unresolvable node in the layout: %s "
                 "(exit status %d)", st == 1 ? "not PS_ECONN naming the node (its stderr says)"
                 : st == 2 ? "succeeded" : "crashed", st);
}

/* Pushes 1 to keys 0..15 of `counts` (both nodes hold some): its status,
 * with what ps_last_error said in why. */
static int push_both_nodes(ps_client *cl, char *why, size_t len)
{
    uint64_t keys[16];
    float ones[16];
    for (int i = 0; i < 16; i++)
        keys[i] = (uint64_t)i, ones[i] = 1;
    int rc = ps_wait(cl, ps_push(cl, ps_table(cl, "counts", NULL), keys, 16,
                                 ones, NULL, NULL));
    snprintf(why, len, "%s", rc ? ps_last_error(cl) : "");
    return rc;
}

/* A node restarted under another layout (a rolling restart half done)
 * fails what is sent to it with PS_EPROTO; stopped and restarted again
 * with the cluster's ini, the same client uses it again, and what waits
 * for it meanwhile waits as for any node that is down. It was refused
 * for good: every push to it failed until the trainer was restarted (an
 * operators' trial); then, once said, a push while it was down failed at
 * once with "connection refused" (a review). */
static void a_node_put_right_after_another_layout_is_used_again(void **state)
{
    (void)state;
    test_cluster c;
    assert_int_equal(cluster_start(&c, 2, 4, TABLES), 0);
    ps_options o;
    ps_options_init(&o);
    o.request_timeout_ms = 1000;
    o.max_retries = 19;
    ps_client *cl = NULL;
    assert_int_equal(ps_open(&cl, c.spec, &o), 0);
    char why[700];
    EXPECT_INT(push_both_nodes(cl, why, sizeof why), 0, "%s", why);
    FILE *f = fopen(c.ini, "a");
    assert_non_null(f);
    long was = ftell(f);
    fputs("[table.added]\ndim = 1\n", f);
    fclose(f);
    assert_int_equal(cluster_restart(&c, 1), 0);
    int rc = 0;
    for (int i = 0; i < 100 && rc != PS_EPROTO; i++) {
        rc = push_both_nodes(cl, why, sizeof why);
        usleep(50000);
    }
    EXPECT_INT(rc, PS_EPROTO, "node 1 under another layout: %s", why);
    EXPECT_SUBSTR(why, "describes a different cluster layout", "why");
    /* And what differs, where the node's HELLO_OK shows it (the epochs
     * alone sent a trial's operator to diff the files). */
    EXPECT_SUBSTR(why, "it has 6 tables against 5", "why");
    /* Against which node's: the first to answer, not the ini's (a
     * trial read node 1 blamed where node 0 ran another file). */
    char ref[80];
    snprintf(ref, sizeof ref, "from node 0's at 127.0.0.1:%d, the first "
             "node to answer", c.port[0]);
    EXPECT_SUBSTR(why, ref, "why");
    assert_int_equal(truncate(c.ini, was), 0);
    cluster_kill(&c, 1, SIGKILL);
    uint64_t keys[16];
    float ones[16];
    for (int i = 0; i < 16; i++)
        keys[i] = (uint64_t)i, ones[i] = 1;
    ps_ts ts = ps_push(cl, ps_table(cl, "counts", NULL), keys, 16, ones,
                       NULL, NULL);
    usleep(300000);                 /* it meets node 1 down */
    assert_int_equal(cluster_restart(&c, 1), 0);
    rc = ps_wait(cl, ts);
    EXPECT_INT(rc, 0, "a push while node 1 was down, then put right: %s",
               rc ? ps_last_error(cl) : "");
    ps_close(cl);
    assert_int_equal(cluster_stop(&c), 0);
}

/* A reader that pushed ACKs its pushes as it closes (in its LEAVE's
 * frame): the node forgets them at once. The last push of each client
 * stayed unacknowledged for client_ttl, and was then forgotten with a
 * warning that read as a crash's (a soak trial). */
static void a_reader_that_pushed_acks_its_pushes_as_it_closes(void **state)
{
    (void)state;
    test_cluster c;
    int mport = cluster_free_port();
    char extra[1000], why[700];
    snprintf(extra, sizeof extra, "[server]\nmetrics_listen = 127.0.0.1:%d\n"
             TABLES, mport);
    assert_int_equal(cluster_start(&c, 1, 4, extra), 0);
    for (int i = 0; i < 3; i++) {
        /* The last with the longest batch_delay_us: the goodbye waited
         * for company until the close gave up on it (a review). */
        ps_options o;
        ps_options_init(&o);
        o.batch_delay_us = i == 2 ? 1000000 : 0;
        ps_client *cl = NULL;
        assert_int_equal(ps_open(&cl, c.spec, &o), 0);
        EXPECT_INT(push_both_nodes(cl, why, sizeof why), 0, "%s", why);
        ps_close(cl);
    }
    EXPECT_INT((int)raw_node_metric(mport, "psd_remembered_pushes"), 0,
               "pushes remembered after three clients closed");
    assert_int_equal(cluster_stop(&c), 0);
}

/* That goodbye is a courtesy: with a node gone, the close waits for it
 * 1 s at most, not an attempt's 10 s (the default request_timeout_ms).
 * The bound is against that wait, not a timing. */
static void a_reader_that_pushed_closes_soon_with_a_node_gone(void **state)
{
    (void)state;
    test_cluster c;
    char why[700];
    assert_int_equal(cluster_start(&c, 2, 4, TABLES), 0);
    ps_client *cl = NULL;
    assert_int_equal(ps_open(&cl, c.spec, NULL), 0);
    EXPECT_INT(push_both_nodes(cl, why, sizeof why), 0, "%s", why);
    cluster_kill(&c, 1, SIGKILL);
    time_t t0 = time(NULL);
    ps_close(cl);
    time_t spent = time(NULL) - t0;
    EXPECT_INT(spent < 6, 1, "ps_close took %lld s", (long long)spent);
    cluster_stop(&c);
}

static int group_setup(void **state)
{
    (void)state;
    return cluster_start(&shared, 2, 4, TABLES);
}

static int group_teardown(void **state)
{
    (void)state;
    return cluster_stop(&shared);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("PSD_TEST_ONLY"))         /* e.g. PSD_TEST_ONLY='*forty*' */
        cmocka_set_test_filter(getenv("PSD_TEST_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(open_by_ini_path_finds_tables_and_their_shapes),
        cmocka_unit_test(open_by_ini_path_drops_comments_on_continuation_lines),
        cmocka_unit_test(dense_pushes_from_two_nodes_sum_exactly),
        cmocka_unit_test(range_push_and_pull_cross_shard_boundaries),
        cmocka_unit_test(pushpull_returns_the_rows_after_the_push),
        cmocka_unit_test(untouched_sparse_key_has_same_initial_row_for_two_clients),
        cmocka_unit_test(last_error_of_one_client_survives_a_failure_on_another),
        cmocka_unit_test(a_refusal_of_one_of_several_nodes_names_it),
        cmocka_unit_test(four_processes_of_two_threads_push_exact_sums),
        cmocka_unit_test(eight_processes_pushing_one_200_times_read_1600),
        cmocka_unit_test(forty_threads_on_one_client_each_wait_their_own),
        cmocka_unit_test(every_callback_runs_exactly_once),
        cmocka_unit_test(malformed_frame_closes_only_that_connection),
        cmocka_unit_test(hostile_frames_are_refused_and_the_server_survives),
        cmocka_unit_test(request_for_another_nodes_shard_names_the_owner),
        cmocka_unit_test(refusals_say_what_was_sent),
        cmocka_unit_test(hello_with_another_protocol_version_is_refused_clearly),
        cmocka_unit_test(killed_server_fails_requests_instead_of_hanging),
        cmocka_unit_test(stopped_server_hangs_requests_no_longer_than_the_timeout),
        cmocka_unit_test(timed_waits_return_pending_and_cancel_nothing),
        cmocka_unit_test(sigterm_stops_the_daemon_with_status_zero),
        cmocka_unit_test(sighup_applies_a_new_learning_rate),
        cmocka_unit_test(check_flag_reports_file_and_line),
        cmocka_unit_test(check_flag_says_a_data_dir_through_a_file_once),
        cmocka_unit_test(small_requests_share_frames),
        cmocka_unit_test(busy_poll_settings_serve_and_bad_ones_are_refused),
        cmocka_unit_test(failed_open_says_why_in_last_error),
        cmocka_unit_test(an_address_the_client_reaches_as_itself_is_refused),
        cmocka_unit_test(a_callback_cannot_wait_for_its_own_thread),
        cmocka_unit_test(a_request_held_by_a_blocking_callback_says_so),
        cmocka_unit_test(close_now_ends_when_callbacks_push_again),
        cmocka_unit_test(a_client_used_after_fork_is_refused_not_hung),
        cmocka_unit_test(an_open_without_fds_says_so),
        cmocka_unit_test(open_without_a_place_for_the_client_is_einval),
        cmocka_unit_test(inflight_bytes_never_exceed_the_limit),
        cmocka_unit_test(reader_that_stops_reading_loses_nothing),
        cmocka_unit_test(replies_of_a_batch_larger_than_max_frame_all_arrive),
        cmocka_unit_test(ranges_of_a_table_with_fewer_rows_than_shards_work),
        cmocka_unit_test(large_requests_travel_in_parts_and_arrive_whole),
        cmocka_unit_test(a_large_pushpull_reads_rows_after_the_whole_push),
        cmocka_unit_test(connection_without_hello_is_closed_after_hello_timeout),
        cmocka_unit_test(free_ports_taken_in_a_row_are_all_different),
        cmocka_unit_test(layout_node_that_does_not_resolve_fails_open_cleanly),
        cmocka_unit_test(an_open_near_the_open_files_limit_fails_cleanly),
        cmocka_unit_test(
            a_node_put_right_after_another_layout_is_used_again),
        cmocka_unit_test(a_reader_that_pushed_acks_its_pushes_as_it_closes),
        cmocka_unit_test(a_reader_that_pushed_closes_soon_with_a_node_gone),
    };
    return cmocka_run_group_tests_name("e2e", tests, group_setup,
                                       group_teardown);
}
