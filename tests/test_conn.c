/* End-to-end tests of psd's connection layer (daemon/conn.c): how a
 * connection ends (half-closed by the client, reset, closed with replies
 * still owed), what psd keeps for a client that does not read, and what
 * it gives back: real psd processes and raw sockets speaking the
 * protocol by hand. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cluster.h"
#include "raw.h"
#include "../proto/auth.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"

#include "expect.h"

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- raw protocol --------------------------------------------------- */

/* Sends a HELLO (a reader) and returns the HELLO_OK's status, or -100
 * when none came. */
static int hello(int fd)
{
    return raw_hello_as(fd, 42, 1);
}

/* What a client learnt of its replies by reading until the end. */
typedef struct replies {
    int n;                       /* REPLY messages read */
    uint64_t ts[64];             /* their ts, in arrival order */
    int status[64];
    size_t vals_len[64];
    int eof;                     /* the stream ended cleanly (not a timeout,
                                    not cut inside a frame) */
} replies;

/* Reads frames until `want` REPLY messages came, psd ends the stream or
 * `ms` pass, noting every REPLY (PINGs are skipped). */
static void read_replies(int fd, replies *r, int want, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(r, 0, sizeof *r);
    while (r->n < want) {
        unsigned char h;
        ssize_t k = recv(fd, &h, 1, MSG_PEEK);
        if (k == 0) {
            r->eof = 1;
            return;
        }
        if (k < 0)
            return;              /* timeout or reset */
        size_t len;
        char *f = raw_read_frame(fd, &len);
        if (!f)
            return;              /* cut inside a frame */
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        msgpack_object obj;
        const msgpack_object *msgs;
        char err[128];
        int n = psw_frame_decode(f, len, &z, &obj, err, sizeof err)
                    ? -1
                    : psw_frame_messages(&obj, 65536, &msgs, err, sizeof err);
        if (n < 1)
            fail_msg("a bad frame from psd: %s", err);
        for (int i = 0; i < n; i++) {
            psw_msg m;
            if (psw_msg_decode(&msgs[i], &m, err, sizeof err))
                fail_msg("a bad message from psd: %s", err);
            if (m.op != PSW_OP_REPLY || r->n == 64)
                continue;
            r->ts[r->n] = m.ts;
            r->status[r->n] = m.status;
            r->vals_len[r->n] = m.vals_len;
            r->n++;
        }
        msgpack_zone_destroy(&z);
        free(f);
    }
}

/* Reads until psd ends the stream or `ms` pass. */
static void read_to_end(int fd, replies *r, int ms)
{
    read_replies(fd, r, INT_MAX, ms);
}

/* ---- 1. half-closed connections ------------------------------------- */

/* A client may send its requests and then shut down its side of the
 * socket (shutdown(SHUT_WR): "nothing more from me"), as a script piping
 * requests into a socket does. The end of its stream is no reason to drop
 * the replies psd still owes it: every reply arrives whole, then psd
 * closes. Here the replies are 16 MiB pulls, far more than the socket
 * takes at once, so most of each is still queued in psd when the end of
 * the stream is read. */
static void half_closed_client_gets_every_reply(void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4,
                      "[server]\nmax_frame = 32M\n"
                      "[table.d]\nkind = dense\nrows = 4000000\ndim = 1\n"))
        fail_msg("cluster did not start");
    int fd = raw_connect(c.port[0]);
    EXPECT_INT(hello(fd), 0, "HELLO");
    enum { PULLS = 3 };
    psw_msg pull = { .op = PSW_OP_PULL_RANGE, .table = 0, .first = 0,
                     .count = 4000000 };
    for (int i = 0; i < PULLS; i++) {
        pull.ts = (uint64_t)i + 1;
        raw_send_msgs(fd, &pull, 1);
    }
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    /* A reader that is a little slow, as a real one is. */
    sleep_ms(300);
    replies r;
    read_to_end(fd, &r, 10000);
    EXPECT_INT(r.n, PULLS, "replies read after shutdown(SHUT_WR)");
    for (int i = 0; i < r.n; i++) {
        EXPECT_U64(r.ts[i], (uint64_t)i + 1, "reply %d's ts", i);
        EXPECT_INT(r.status[i], 0, "reply %d's status", i);
        EXPECT_U64(r.vals_len[i], 16000000, "reply %d's bytes of rows", i);
    }
    EXPECT_INT(r.eof, 1, "psd ends the stream after the last reply");
    close(fd);
    assert_int_equal(cluster_stop(&c), 0);
}

/* The same for replies that wait for the journal's fsync (durability =
 * log, fsync = always): a push's reply goes out only once its record is
 * on disk, and the client's end of stream arrives meanwhile. */
static void half_closed_client_gets_replies_that_wait_for_the_journal(
    void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4,
                      "[server]\ndurability = log\nfsync = always\n"
                      "[table.s]\nkind = sparse\ndim = 1\n"))
        fail_msg("cluster did not start");
    int fd = raw_connect(c.port[0]);
    EXPECT_INT(hello(fd), 0, "HELLO");
    enum { PUSHES = 20 };
    uint64_t key = 7;
    float one = 1;
    psw_msg push = { .op = PSW_OP_PUSH, .table = 0, .keys = (char *)&key,
                     .nkeys = 1, .vals = (char *)&one, .vals_len = 4 };
    for (int i = 0; i < PUSHES; i++) {
        push.ts = (uint64_t)i + 1;
        raw_send_msgs(fd, &push, 1);
    }
    assert_int_equal(shutdown(fd, SHUT_WR), 0);
    replies r;
    read_to_end(fd, &r, 10000);
    EXPECT_INT(r.n, PUSHES, "replies read after shutdown(SHUT_WR)");
    for (int i = 0; i < r.n; i++) {
        EXPECT_U64(r.ts[i], (uint64_t)i + 1, "reply %d's ts", i);
        EXPECT_INT(r.status[i], 0, "reply %d's status", i);
    }
    EXPECT_INT(r.eof, 1, "psd ends the stream after the last reply");
    close(fd);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- 2. room for new connections ----------------------------------- */

/* When max_connections are open, a new connection takes the place of an
 * idle one. A connection in the middle of sending a request is not idle,
 * however long ago its last request was: closing it would throw away
 * the request it is uploading. Here A and B both asked for nothing for
 * longer than idle_timeout, A longer; then A starts a 4 MiB push, and C
 * connects while A's frame is half here: B makes room, and A's push is
 * applied and answered. */
static void connection_sending_a_request_is_not_closed_to_make_room(
    void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4,
                      "[server]\nmax_connections = 2\nidle_timeout = 1\n"
                      "[table.d]\nkind = dense\nrows = 1000000\ndim = 1\n"))
        fail_msg("cluster did not start");
    int a = raw_connect(c.port[0]);
    EXPECT_INT(hello(a), 0, "HELLO a");
    sleep_ms(300);
    int b = raw_connect(c.port[0]);
    EXPECT_INT(hello(b), 0, "HELLO b");
    sleep_ms(1300);
    size_t n = 1000000, len;
    float *v = calloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = 1;
    psw_msg push = { .op = PSW_OP_PUSH_RANGE, .ts = 1, .table = 0,
                     .first = 0, .count = n, .vals = (char *)v,
                     .vals_len = n * 4 };
    char *f = raw_frame_bytes(&push, 1, &len);
    raw_send(a, f, len / 2);
    sleep_ms(300);
    int cc = raw_connect(c.port[0]);
    EXPECT_INT(hello(cc), 0, "HELLO c, with max_connections open");
    raw_send(a, f + len / 2, len - len / 2);
    shutdown(a, SHUT_WR);
    replies r;
    read_to_end(a, &r, 5000);
    EXPECT_INT(r.n, 1, "replies to the push that was arriving");
    if (r.n == 1)
        EXPECT_INT(r.status[0], 0, "the push's status");
    EXPECT_INT(raw_closed(b), 1, "idle connection b closed to make room");
    free(f);
    free(v);
    close(a);
    close(b);
    close(cc);
    assert_int_equal(cluster_stop(&c), 0);
}

/* Open file descriptors of pid (from /proc/PID/fd). */
/* ---- 3. timeouts ---------------------------------------------------- */

/* frame_timeout bounds how long a frame may take to arrive once its first
 * byte is here. A connection that psd stopped reading for backpressure,
 * and that then read its replies and sent nothing more, has no frame on
 * its way: it must not be closed for one. Here frame_timeout is 1 s and
 * the heartbeat 5 s, so the client stays quiet for 2.5 s, as a real one
 * waiting for its next batch would. */
static void quiet_connection_after_backpressure_keeps_its_frame_clock_off(
    void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4,
                      "[server]\nframe_timeout = 1\nheartbeat_ms = 5000\n"
                      "peer_timeout_ms = 20000\nmax_output = 1M\n"
                      "[table.d]\nkind = dense\nrows = 1000000\ndim = 1\n"))
        fail_msg("cluster did not start");
    int fd = raw_connect(c.port[0]);
    EXPECT_INT(hello(fd), 0, "HELLO");
    /* Three 4 MB pulls: the second waits, unread, until the client has
     * read most of the first reply. */
    psw_msg pull = { .op = PSW_OP_PULL_RANGE, .table = 0, .first = 0,
                     .count = 1000000 };
    for (int i = 0; i < 3; i++) {
        pull.ts = (uint64_t)i + 1;
        raw_send_msgs(fd, &pull, 1);
    }
    sleep_ms(200);
    replies r;
    read_replies(fd, &r, 3, 5000);
    EXPECT_INT(r.n, 3, "replies to the three pulls");
    sleep_ms(2500);
    pull.ts = 4;
    pull.count = 10;
    raw_send_msgs(fd, &pull, 1);
    read_replies(fd, &r, 1, 5000);
    char *log = cluster_log(&c, 0);
    const char *line = log ? strstr(log, "closing connection") : NULL;
    if (line)
        fail_msg("psd closed the connection: %.*s", (int)strcspn(line, "\n"),
                 line);
    free(log);
    EXPECT_INT(r.n, 1, "replies to a pull after 2.5 s of quiet");
    close(fd);
    assert_int_equal(cluster_stop(&c), 0);
}

#define TOKEN "correct-horse-battery-staple-42"
#define WRONG "correct-horse-battery-staple-43"

/* Reads one frame of one message from psd; returns its op (or -1), and
 * for a HELLO_OK its status in *status and for a CHALLENGE completes t. */
static int read_handshake(int fd, psw_transcript *t, int *status)
{
    size_t len;
    char *f = raw_read_frame(fd, &len);
    if (!f)
        return -1;
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    msgpack_object obj;
    const msgpack_object *msgs = NULL;
    char err[128];
    int op = -1;
    psw_challenge ch;
    psw_cluster l;
    if (psw_frame_decode(f, len, &z, &obj, err, sizeof err) ||
        psw_frame_messages(&obj, 1, &msgs, err, sizeof err) != 1)
        fail_msg("a bad handshake frame: %s", err);
    if (psw_challenge_decode(&msgs[0], &ch, err, sizeof err) == 0) {
        op = PSW_OP_CHALLENGE;
        t->node_index = ch.node_index;
        memcpy(t->snonce, ch.nonce, PSW_NONCE_LEN);
    } else if (psw_hello_ok_decode(&msgs[0], &l, err, sizeof err) == 0) {
        op = PSW_OP_HELLO_OK;
        *status = l.status;
        psw_cluster_free(&l);
    }
    msgpack_zone_destroy(&z);
    free(f);
    return op;
}

/* HELLO from fd, with a fresh transcript t; reads the CHALLENGE. */
static void hello_challenged(int fd, psw_transcript *t, uint64_t id)
{
    *t = (psw_transcript){ .version = PSW_VERSION, .client_id = id,
                           .incarnation = 1, .worker = -1 };
    psw_auth_nonce(t->cnonce);
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_hello h = { PSW_VERSION, id, 1, -1, (const char *)t->cnonce,
                    PSW_NONCE_LEN };
    psw_pack_hello(&o, &h);
    psw_out_frame_end(&o);
    raw_send_out(fd, &o);
    psw_out_destroy(&o);
    int st;
    EXPECT_INT(read_handshake(fd, t, &st), PSW_OP_CHALLENGE, "CHALLENGE");
}

/* The bytes of an AUTH frame with token's proof over t (*len set). */
static char *auth_frame(const char *token, const psw_transcript *t,
                        size_t *len)
{
    uint8_t proof[PSW_PROOF_LEN];
    psw_auth_proof(token, strlen(token), PSW_ROLE_CLIENT, t, proof);
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_auth_msg am = { (const char *)proof, PSW_PROOF_LEN };
    psw_pack_auth(&o, &am);
    psw_out_frame_end(&o);
    char *b = malloc(o.total);
    memcpy(b, o.sb.data, o.total);   /* small: no referenced payload */
    *len = o.total;
    psw_out_destroy(&o);
    return b;
}

/* The same after an AUTH that the throttle held back: an address with
 * recent failed authentications has its next proof checked only after a
 * delay (up to 2 s), and psd reads nothing meanwhile. A request the
 * client pipelined behind its AUTH runs once the proof is checked; the
 * connection then has no frame on its way and is not closed for one. */
static void request_behind_a_throttled_auth_keeps_the_frame_clock_off(
    void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4,
                      "[server]\nauth_token = " TOKEN "\n"
                      "frame_timeout = 1\nheartbeat_ms = 5000\n"
                      "peer_timeout_ms = 20000\n"
                      "[table.d]\nkind = dense\nrows = 1000\ndim = 1\n"))
        fail_msg("cluster did not start");
    /* Five wrong proofs from 127.0.0.5: its next is checked 1.6 s after
     * the last. */
    for (int i = 0; i < 5; i++) {
        int fd = raw_connect_from(c.port[0], "127.0.0.5");
        psw_transcript t;
        hello_challenged(fd, &t, 10 + (uint64_t)i);
        size_t len;
        char *f = auth_frame(WRONG, &t, &len);
        raw_send(fd, f, len);
        free(f);
        int st = 0;
        EXPECT_INT(read_handshake(fd, &t, &st), PSW_OP_HELLO_OK,
                   "refusal %d", i);
        EXPECT_INT(st, PSW_EAUTH, "refusal %d's status", i);
        close(fd);
    }
    int fd = raw_connect_from(c.port[0], "127.0.0.5");
    psw_transcript t;
    hello_challenged(fd, &t, 20);
    size_t alen, plen;
    char *af = auth_frame(TOKEN, &t, &alen);
    psw_msg pull = { .op = PSW_OP_PULL_RANGE, .ts = 1, .table = 0,
                     .first = 0, .count = 10 };
    char *pf = raw_frame_bytes(&pull, 1, &plen);
    char both[512];
    assert_true(alen + plen <= sizeof both);
    memcpy(both, af, alen);
    memcpy(both + alen, pf, plen);
    raw_send(fd, both, alen + plen);
    free(af);
    free(pf);
    int st = -100;
    EXPECT_INT(read_handshake(fd, &t, &st), PSW_OP_HELLO_OK, "HELLO_OK");
    EXPECT_INT(st, 0, "HELLO_OK's status with the right token");
    replies r;
    read_replies(fd, &r, 1, 5000);
    EXPECT_INT(r.n, 1, "replies to the pull pipelined behind AUTH");
    sleep_ms(1500);
    pull.ts = 2;
    raw_send_msgs(fd, &pull, 1);
    read_replies(fd, &r, 1, 5000);
    char *log = cluster_log(&c, 0);
    const char *line = log ? strstr(log, "closing connection") : NULL;
    if (line)
        fail_msg("psd closed the connection: %.*s", (int)strcspn(line, "\n"),
                 line);
    free(log);
    EXPECT_INT(r.n, 1, "replies to a pull 1.5 s later");
    close(fd);
    assert_int_equal(cluster_stop(&c), 0);
}

/* ---- 4. out of memory ---------------------------------------------- */

/* Starts one node with tests/accept_oom.c preloaded: the allocation of
 * every connection from 127.0.0.7 fails, the first taking delay_ms.
 * Skips the test when psd is built with a sanitizer, whose allocator an
 * LD_PRELOAD shim cannot replace. */
/* An HTTP request on the client port (curl, a browser, a scraper
 * given the wrong port) was logged as "frame body of 1195725852 bytes
 * is larger than max_frame": the log says what came now, and where
 * /metrics is. psd goes on serving. */
static void http_on_the_client_port_is_said_as_such(void **state)
{
    (void)state;
    test_cluster c;
    if (cluster_start(&c, 1, 4, "[table.d]\nkind = dense\nrows = 4\n"
                                 "dim = 1\n"))
        fail_msg("cluster did not start");
    int fd = raw_connect(c.port[0]);
    static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(write(fd, get, sizeof get - 1), (ssize_t)(sizeof get - 1));
    replies r;
    read_to_end(fd, &r, 5000);
    close(fd);
    EXPECT_INT(r.eof, 1, "psd closes the connection");
    if (!cluster_log_wait(&c, 0, "it sent text, not psd's frames: \"GET "
                          "/metrics HTTP/1.1\" (/metrics is served over HTTP "
                          "only when [server] metrics_listen is set, not on "
                          "the port psd's clients use)",
                          5000))
        fail_msg("the log should name what came: %s", cluster_log(&c, 0));
    fd = raw_connect(c.port[0]);
    EXPECT_INT(hello(fd), 0, "HELLO on a new connection");
    close(fd);
    assert_int_equal(cluster_stop(&c), 0);
}

static void start_with_accept_oom(test_cluster *c, int delay_ms)
{
    const char *san = cluster_psd_sanitizer();
    if (san) {
        print_message("# psd is built with %s: its calloc cannot be "
                      "replaced by an LD_PRELOAD shim\n", san);
        skip();
    }
    char shim[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", shim, sizeof shim - 32);
    assert_true(n > 0);
    shim[n] = '\0';
    strcpy(strrchr(shim, '/') + 1, "accept_oom.so");
    if (access(shim, R_OK))
        fail_msg("no shim at %s", shim);
    char delay[16];
    snprintf(delay, sizeof delay, "%d", delay_ms);
    setenv("LD_PRELOAD", shim, 1);
    setenv("PSD_TEST_ACCEPT_OOM_FROM", "127.0.0.7", 1);
    setenv("PSD_TEST_ACCEPT_OOM_DELAY_MS", delay, 1);
    int rc = cluster_start(c, 1, 4,
                           "[table.d]\nkind = dense\nrows = 10\ndim = 1\n");
    unsetenv("LD_PRELOAD");
    unsetenv("PSD_TEST_ACCEPT_OOM_FROM");
    unsetenv("PSD_TEST_ACCEPT_OOM_DELAY_MS");
    if (rc)
        fail_msg("cluster did not start");
}

/* How many times text appears in node 0's log. */
static int log_count(const test_cluster *c, const char *text)
{
    char *log = cluster_log(c, 0);
    int k = 0;
    for (const char *p = log; p && (p = strstr(p, text)); p++)
        k++;
    free(log);
    return k;
}

/* A connection psd has no memory for is closed, and psd goes on
 * accepting: libuv stops watching the listener until the connection its
 * callback was given is accepted, so one failed allocation that left it
 * there would make psd deaf to every later client. */
static void connection_without_memory_is_closed_and_psd_keeps_accepting(
    void **state)
{
    (void)state;
    test_cluster c;
    start_with_accept_oom(&c, 0);
    int a = raw_connect_from(c.port[0], "127.0.0.7");
    if (!cluster_log_wait(&c, 0, "out of memory accepting", 5000))
        fail_msg("psd logged no failed allocation: the shim did not work");
    int b = raw_connect(c.port[0]);
    EXPECT_INT(hello(b), 0, "HELLO on a connection after one psd had no "
               "memory for");
    EXPECT_INT(raw_closed(a), 1, "the connection psd had no memory for "
               "closed");
    close(a);
    close(b);
    assert_int_equal(cluster_stop(&c), 0);
}

/* The same for two such connections taken in one loop turn: the second
 * arrives while the first one's handle is still closing. The first
 * failure takes 300 ms, so that the second is queued by then. */
static void two_connections_without_memory_in_one_turn_are_closed(
    void **state)
{
    (void)state;
    test_cluster c;
    start_with_accept_oom(&c, 300);
    int a = raw_connect_from(c.port[0], "127.0.0.7");
    sleep_ms(100);
    int b = raw_connect_from(c.port[0], "127.0.0.7");
    for (int t = 0; t < 50 && log_count(&c, "out of memory accepting") < 2;
         t++)
        sleep_ms(100);
    EXPECT_INT(log_count(&c, "out of memory accepting"), 2,
               "failed allocations logged");
    int cc = raw_connect(c.port[0]);
    EXPECT_INT(hello(cc), 0, "HELLO on a connection after two psd had no "
               "memory for");
    EXPECT_INT(raw_closed(a), 1, "the first connection without memory "
               "closed");
    EXPECT_INT(raw_closed(b), 1, "the second connection without memory "
               "closed");
    close(a);
    close(b);
    close(cc);
    assert_int_equal(cluster_stop(&c), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_closed_client_gets_every_reply),
        cmocka_unit_test(half_closed_client_gets_replies_that_wait_for_the_journal),
        cmocka_unit_test(connection_sending_a_request_is_not_closed_to_make_room),
        cmocka_unit_test(quiet_connection_after_backpressure_keeps_its_frame_clock_off),
        cmocka_unit_test(request_behind_a_throttled_auth_keeps_the_frame_clock_off),
        cmocka_unit_test(http_on_the_client_port_is_said_as_such),
        cmocka_unit_test(connection_without_memory_is_closed_and_psd_keeps_accepting),
        cmocka_unit_test(two_connections_without_memory_in_one_turn_are_closed),
    };
    return cmocka_run_group_tests_name("conn", tests, NULL, NULL);
}
