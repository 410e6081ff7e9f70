/* libFuzzer target for the daemon's request handling (daemon/request.c),
 * in process: a psd_node serving a small fixed cluster (request_conf.h)
 * and two sessions standing in for connections, fed the way daemon/conn.c
 * feeds them, with no sockets.
 *
 * Input: one or more frame bodies back to back, each one msgpack value
 * (cut where psw_guard says the value ends; bytes it cannot bound form the
 * last body). Body k comes from connection k % 2, so that one connection's
 * CLOCK can release another's held replies. As in conn.c, a body over the
 * frame limit, one that does not decode, or a message that does not decode
 * or is a REPLY closes its connection. A connection's first body may start
 * with a HELLO, which goes to psd_request_hello (then a HELLO_OK is packed
 * and checked) and the rest of its messages follow as a pipelined frame
 * (conn.c wants the HELLO in a frame of its own: the same session, in
 * fewer bodies); without one the connection is a reader with client_id 0,
 * as a HELLO of (0, 0, -1) would make it. As in conn.c on a node without
 * a token, protocol versions PSW_VERSION_MIN to PSW_VERSION are taken,
 * an OPENED on a connection of a version before 4 closes it, and so does
 * a HELLO in a later body. The clock moves 100 ms per body, with a
 * psd_request_tick after each. At the end the clock jumps 10 s (the node
 * logs whom it waits for), connection 1 closes, the clock passes
 * worker_grace, and connection 0 closes. The node is built afresh for
 * every input, so an input alone reproduces what it did.
 *
 * Checked: what the sanitizers check; every reply frame reads back as a
 * peer reads it (length, CRC, at most max_frame, only REPLYs, error
 * replies without rows); no request is answered twice; a frame adds no
 * more replies than psd_request_frame_bound said (plus the bounds of
 * the held requests it releases); a closed session counts no held bytes;
 * the answered callback comes with a frame to send; no held reply
 * outlives its session (sessions are freed at close, so a late one is a
 * use-after-free).
 * ADMIN goes to a stand-in for the server's hook (fake_admin), whose
 * answers of every length up to twice max_frame reach both the reply
 * that fits a frame and the one that goes in a frame of its own, longer
 * than max_frame: psctl, the only client that sends ADMINs, reads frames
 * of up to 64 MiB, and psd counts such an answer once it is packed, past
 * the bound psd_request_frame_bound gave. So a frame longer than
 * max_frame must hold one message, an ADMIN's successful reply, and the
 * bound of a frame grows by the answers fake_admin made that one frame
 * could not carry. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "decode.h"
#include "disk.h"
#include "fuzz.h"
#include "request_conf.h"
#include "../../daemon/config.h"
#include "../../daemon/log.h"
#include "../../daemon/node.h"
#include "../../daemon/request.h"
#include "../../proto/frame.h"
#include "../../proto/msg.h"
#include "../../proto/status.h"

#define NCONN 2
#define MAX_BODIES 64
#define PRE_HELLO_MAX_FRAME 4096     /* daemon/conn.c */
#define HELLO_OK_MAX_FRAME (1u << 20) /* what a client reads HELLO_OK with */
#define T0_MS 1000000
#define STEP_MS 100
#define WAIT_LOG_MS 10000            /* daemon/request.c */
#define PSCTL_MAX_FRAME (64u << 20)  /* daemon/psctl.c reads ADMIN answers */

/* One connection of the current input. */
#define ADMIN_TS 2048                /* more than an 8 KB input holds */

typedef struct conn {
    psd_session *ss;     /* malloc'd, freed when the connection closes */
    int hello_done;
    uint32_t version;    /* of its HELLO; PSW_VERSION without one */
    int closed;
    /* The ts of the ADMINs it sent: their replies carry text, of any
     * length, not rows. More than ADMIN_TS of them: every reply may be
     * one (admin_many). */
    uint64_t admin_ts[ADMIN_TS];
    int nadmin, admin_many;
} conn;

static int is_admin_reply(const conn *c, uint64_t ts)
{
    if (c->admin_many)
        return 1;
    for (int i = 0; i < c->nadmin; i++)
        if (c->admin_ts[i] == ts)
            return 1;
    return 0;
}

static psd_node node;                /* built afresh for every input */
static conn conns[NCONN];
static psw_out outs[NCONN];          /* reset between inputs */
static psw_out hello_out;
static msgpack_zone zone, zone_chk;
static uint64_t requests, replies;   /* of the current input */
/* What fake_admin's answers that one frame cannot carry add past the
 * bound, counted from the start of each psd_request_frame. */
static uint64_t admin_beyond;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_disk_config();          /* loaded and checked once, up front */
    psd_log_set_level(PSD_LOG_ERROR);
    msgpack_zone_init(&zone, 4096);
    msgpack_zone_init(&zone_chk, 4096);
    for (int i = 0; i < NCONN; i++)
        psw_out_init(&outs[i]);
    psw_out_init(&hello_out);
    return 0;
}

/* The server's ADMIN hook, as far as request.c can tell: a command
 * starting with 'x' fails, any other is answered with text whose length
 * follows from the command's bytes, from 0 to twice max_frame. */
static int fake_admin(void *arg, const char *cmd, size_t len, char **text,
                      size_t *textlen)
{
    (void)arg;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)cmd[i]) * 1099511628211ull;
    size_t n = (size_t)(h % (2 * node.cfg.max_frame + 1));
    if (len && cmd[0] == 'x')
        n = 16;
    *text = malloc(n + 1);
    FUZZ_CHECK(*text != NULL, "out of memory for an ADMIN answer");
    memset(*text, 'a', n);
    (*text)[n] = '\0';          /* as the server's: an error's is a string */
    *textlen = n;
    if (n > psw_payload_max(node.cluster.max_frame))
        admin_beyond += psw_reply_max(n) + PSW_REPLY_FRAME_COST;
    return len && cmd[0] == 'x' ? PSW_EINVAL : PSW_OK;
}

/* Reads back every frame in c's output as a client would, then empties
 * the output: length, CRC, at most max_frame (or psctl's limit for an
 * ADMIN's answer alone in its frame), only REPLY messages. */
static void check_output(conn *c)
{
    psw_out *o = &outs[c - conns];
    FUZZ_CHECK(!psw_out_frame_open(o), "connection %d: a reply frame was "
               "left open", (int)(c - conns));
    FUZZ_CHECK(!o->oom, "connection %d: out of memory packing replies",
               (int)(c - conns));
    if (o->total == 0)
        return;
    size_t len;
    char *buf = fuzz_flatten(o, &len);
    FUZZ_CHECK(buf != NULL, "out of memory flattening %zu bytes", o->total);
    psw_reader rd;
    psw_reader_init(&rd, c->nadmin || c->admin_many
                             ? PSCTL_MAX_FRAME : (size_t)node.cfg.max_frame);
    char *dst;
    size_t room, at = 0;
    while (at < len) {
        FUZZ_CHECK(psw_reader_space(&rd, &dst, &room) == 0,
                   "psw_reader_space failed");
        size_t k = len - at < room ? len - at : room;
        memcpy(dst, buf + at, k);
        psw_reader_commit(&rd, k);
        at += k;
        const char *body;
        size_t blen;
        int rc;
        while ((rc = psw_reader_next(&rd, &body, &blen)) == 1) {
            msgpack_object obj;
            const msgpack_object *msgs;
            char err[160] = "";
            FUZZ_CHECK(fuzz_decode_body(body, blen, &zone_chk, &obj) == 0,
                       "a reply frame of %zu bytes does not decode", blen);
            int n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err,
                                       sizeof err);
            FUZZ_CHECK(n > 0, "a reply frame that is not a frame: %s", err);
            int alone = blen > node.cfg.max_frame;
            FUZZ_CHECK(!alone || n == 1, "a reply frame of %zu bytes, past "
                       "max_frame, holds %d messages", blen, n);
            for (int i = 0; i < n; i++) {
                psw_msg m;
                FUZZ_CHECK(psw_msg_decode(&msgs[i], &m, err, sizeof err) == 0
                           && m.op == PSW_OP_REPLY, "message %d of a reply "
                           "frame is not a REPLY: %s", i, err);
                FUZZ_CHECK(m.status == PSW_OK || m.vals_len == 0,
                           "an error reply (%d) with %zu bytes of rows",
                           m.status, m.vals_len);
                FUZZ_CHECK(m.vals_len % 4 == 0 || is_admin_reply(c, m.ts),
                           "a reply with %zu bytes of rows", m.vals_len);
                FUZZ_CHECK(!alone || (is_admin_reply(c, m.ts) &&
                                      m.status == PSW_OK &&
                                      m.vals_len > psw_payload_max(
                                                       node.cluster.max_frame) &&
                                      m.vals_len <= PSW_ADMIN_REPLY_MAX),
                           "a reply frame of %zu bytes, past max_frame, "
                           "that is no ADMIN's answer (status %d, %zu "
                           "bytes)", blen, m.status, m.vals_len);
                replies++;
            }
        }
        FUZZ_CHECK(rc == 0, "connection %d: a client reading with max_frame "
                   "%llu would drop this reply stream: %s", (int)(c - conns),
                   (unsigned long long)node.cfg.max_frame, rd.why);
    }
    FUZZ_CHECK(psw_reader_pending(&rd) == 0, "%zu bytes of a partial reply "
               "frame", psw_reader_pending(&rd));
    psw_reader_destroy(&rd);
    free(buf);
    psw_out_reset(o);
}

static void on_answered(psd_session *ss)
{
    FUZZ_CHECK(!psw_out_frame_open(ss->out) && ss->out->total > 0,
               "answered called with nothing to send (%zu bytes, frame %s)",
               ss->out->total, psw_out_frame_open(ss->out) ? "open" : "closed");
}

/* Packs a HELLO_OK as conn.c does, reads it back as a client does, and
 * checks it says what was meant. */
static void check_hello_ok(const psw_cluster *sent)
{
    psw_out_reset(&hello_out);
    psw_out_frame_begin(&hello_out);
    psw_pack_hello_ok(&hello_out, sent);
    psw_out_frame_end(&hello_out);
    size_t len;
    char *buf = fuzz_flatten(&hello_out, &len);
    FUZZ_CHECK(buf != NULL && len > PSW_FRAME_HDR + PSW_FRAME_CRC &&
               fuzz_be32(buf) == len - PSW_FRAME_HDR &&
               len - PSW_FRAME_HDR - PSW_FRAME_CRC <= HELLO_OK_MAX_FRAME,
               "HELLO_OK frame of %zu bytes", len);
    size_t blen = len - PSW_FRAME_HDR - PSW_FRAME_CRC;
    FUZZ_CHECK(psw_crc32c(0, buf + PSW_FRAME_HDR, blen) ==
               fuzz_be32(buf + PSW_FRAME_HDR + blen), "HELLO_OK CRC");
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[256] = "";
    FUZZ_CHECK(fuzz_decode_body(buf + PSW_FRAME_HDR, blen, &zone_chk, &obj)
               == 0, "HELLO_OK body does not decode");
    FUZZ_CHECK(psw_frame_messages(&obj, 1, &msgs, err, sizeof err) == 1,
               "HELLO_OK frame: %s", err);
    psw_cluster got;
    FUZZ_CHECK(psw_hello_ok_decode(&msgs[0], &got, err, sizeof err) == 0,
               "HELLO_OK does not decode: %s", err);
    FUZZ_CHECK(got.status == sent->status && strcmp(got.text, sent->text) == 0,
               "HELLO_OK status %d \"%s\", want %d \"%s\"", got.status,
               got.text, sent->status, sent->text);
    if (sent->status == PSW_OK)
        FUZZ_CHECK(got.nnodes == node.cfg.nnodes &&
                   got.ntables == node.ntables &&
                   got.max_frame == node.cfg.max_frame &&
                   got.shards == node.cfg.shards && got.node_index == 0 &&
                   got.epoch == node.cluster.epoch &&
                   got.worker_clock == sent->worker_clock &&
                   got.worker_barrier == sent->worker_barrier,
                   "HELLO_OK layout: %d nodes %d tables max_frame %llu",
                   got.nnodes, got.ntables,
                   (unsigned long long)got.max_frame);
    psw_cluster_free(&got);
    free(buf);
    psw_out_reset(&hello_out);
}

/* How conn.c answers a HELLO of this version: a version 2 client gets
 * the 14 fields it knows. */
static void in_version(psw_cluster *l, uint32_t version)
{
    l->proof_state = version >= 3 ? PSW_PROOF_NIL : PSW_PROOF_ABSENT;
}

/* conn.c's refuse_hello: the HELLO_OK it sends, then the close. */
static void refuse(int status, const char *why, uint32_t version)
{
    psw_cluster refused = node.cluster;
    refused.status = status;
    snprintf(refused.text, sizeof refused.text, "%s", why);
    in_version(&refused, version);
    check_hello_ok(&refused);
}

/* conn.c's handle_hello after the HELLO decoded. Returns 1 when accepted,
 * 0 when refused (the connection then closes). */
static int hello(conn *c, const psw_hello *h, uint64_t now)
{
    char why[200] = "";
    if (h->version < PSW_VERSION_MIN || h->version > PSW_VERSION) {
        snprintf(why, sizeof why, "protocol version %u is not supported "
                 "(this server speaks %d..%d)", h->version, PSW_VERSION_MIN,
                 PSW_VERSION);
        refuse(PSW_EPROTO, why, h->version);
        return 0;
    }
    psw_cluster reply;
    int rc = psd_request_hello(&node, c->ss, h, now, &reply, why,
                               sizeof why);
    if (rc) {
        /* EINVAL (out of range, a replaced client) or EBUSY (the id is
         * held by another client's connection), always with a reason. */
        FUZZ_CHECK((rc == PSW_EINVAL || rc == PSW_EBUSY) && why[0],
                   "psd_request_hello returned %d (%s)", rc, why);
        refuse(rc, why, h->version);
        return 0;
    }
    FUZZ_CHECK(reply.nodes == node.cluster.nodes &&
               reply.tables == node.cluster.tables, "HELLO_OK does not share "
               "the node's arrays");
    in_version(&reply, h->version);
    check_hello_ok(&reply);
    c->version = h->version;
    return 1;
}

static void close_conn(conn *c, uint64_t now)
{
    if (c->closed)
        return;
    psd_request_closed(&node, c->ss, now);
    FUZZ_CHECK(c->ss->held_bytes == 0, "a closed session still counts %llu "
               "bytes of held requests",
               (unsigned long long)c->ss->held_bytes);
    check_output(c);
    free(c->ss);
    c->ss = NULL;
    c->closed = 1;
}

/* conn.c's handle_frame, for one body from connection c. */
static void handle_body(conn *c, const char *body, size_t len, uint64_t now)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[256] = "", why[200] = "";
    size_t limit = c->hello_done ? (size_t)node.cfg.max_frame
                                 : PRE_HELLO_MAX_FRAME;

    if (len > limit || fuzz_decode_body(body, len, &zone, &obj) != 0) {
        close_conn(c, now);
        return;
    }
    int n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err);
    if (n < 0) {
        close_conn(c, now);
        return;
    }
    int first = 0;
    psw_hello h;
    if (!c->hello_done &&
        psw_hello_decode(&msgs[0], &h, err, sizeof err) == 0) {
        if (!hello(c, &h, now)) {
            close_conn(c, now);
            return;
        }
        first = 1;
    }
    /* Without a HELLO the first frame stands for one of (0, 0, -1): no
     * HELLO is accepted after it, as in conn.c. */
    c->hello_done = 1;
    if (first == n)
        return;
    int count = n - first;
    psw_msg *m = malloc((size_t)count * sizeof *m);
    FUZZ_CHECK(m != NULL, "out of memory for %d messages", count);
    uint64_t asked = 0;
    for (int i = 0; i < count; i++) {
        if (psw_msg_decode(&msgs[first + i], &m[i], err, sizeof err) ||
            m[i].op == PSW_OP_REPLY ||
            (m[i].op == PSW_OP_OPENED && c->version < 4)) {
            free(m);
            close_conn(c, now);
            return;
        }
        asked += !psw_op_has(m[i].op, PSW_OPF_SESSION);
        if (m[i].op == PSW_OP_ADMIN) {
            if (c->nadmin < ADMIN_TS)
                c->admin_ts[c->nadmin++] = m[i].ts;
            else
                c->admin_many = 1;
        }
    }
    /* What conn.c counts against max_output and max_client_memory before
     * the frame runs must bound what the frame adds: its own replies,
     * and held ones of this session it releases, whose bounds the
     * session counted while they were held. */
    uint64_t bound = psd_request_frame_bound(&node, m, count);
    uint64_t held = c->ss->held_bytes;
    size_t before = c->ss->out->total;
    admin_beyond = 0;
    int rc = psd_request_frame(&node, c->ss, m, count, now, why, sizeof why);
    free(m);
    FUZZ_CHECK(c->ss->out->total - before <= bound + held + admin_beyond,
               "a frame added %zu bytes of replies, over its bound %llu "
               "(and %llu held, %llu of long ADMIN answers)",
               c->ss->out->total - before, (unsigned long long)bound,
               (unsigned long long)held, (unsigned long long)admin_beyond);
    if (rc) {
        FUZZ_CHECK(rc == PSW_ETOOBIG && why[0], "psd_request_frame returned "
                   "%d (%s)", rc, why);
        close_conn(c, now);
        return;
    }
    requests += asked;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const peers[NCONN] = { "127.0.0.1:40000",
                                              "127.0.0.1:40001" };
    uint64_t now = T0_MS;

    fuzz_disk_node(&node, 0, now);
    node.admin = fake_admin;
    requests = replies = 0;
    for (int i = 0; i < NCONN; i++) {
        psw_out_reset(&outs[i]);
        conns[i] = (conn){ .ss = calloc(1, sizeof(psd_session)),
                           .version = PSW_VERSION };
        FUZZ_CHECK(conns[i].ss != NULL, "out of memory for a session");
        conns[i].ss->worker = -1;
        conns[i].ss->peer = peers[i];
        conns[i].ss->out = &outs[i];
        conns[i].ss->answered = on_answered;
    }

    size_t off = 0;
    for (int k = 0; off < size && k < MAX_BODIES; k++) {
        long g = psw_guard(data + off, size - off, 8);
        size_t len = g > 0 ? (size_t)g : size - off;
        conn *c = &conns[k % NCONN];
        if (!c->closed) {
            handle_body(c, (const char *)data + off, len, now);
            if (!c->closed)
                check_output(c);
        }
        off += len;
        now += STEP_MS;
        psd_request_tick(&node, now);
        for (int i = 0; i < NCONN; i++)
            if (!conns[i].closed)
                check_output(&conns[i]);
    }

    /* Long enough for the node to say whom a held reply waits for, and
     * to forget clients without a connection. */
    now += WAIT_LOG_MS;
    psd_request_tick(&node, now);
    for (int i = 0; i < NCONN; i++)
        if (!conns[i].closed)
            check_output(&conns[i]);
    /* Connection 1 goes first: once its worker's grace has passed,
     * connection 0's held replies may be answered. */
    close_conn(&conns[1], now);
    now += (uint64_t)node.cfg.worker_grace * 1000 + STEP_MS;
    psd_request_tick(&node, now);
    if (!conns[0].closed)
        check_output(&conns[0]);
    close_conn(&conns[0], now);
    FUZZ_CHECK(node.held == NULL, "held replies outlived every session");
    FUZZ_CHECK(replies <= requests, "%llu replies to %llu requests",
               (unsigned long long)replies, (unsigned long long)requests);
    psd_request_drop_all(&node);
    psd_node_destroy(&node);
    return 0;
}
