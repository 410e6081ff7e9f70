/* One client connection: the transport half of serving a client; see
 * conn.h. What each request does is request.c's business. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "conn.h"
#include "log.h"
#include "request.h"
#include "../proto/status.h"

/* Before HELLO a peer may send only a small frame (redis does the same
 * before AUTH): nothing large is buffered for an unknown peer. */
#define PRE_HELLO_MAX_FRAME 4096
/* Replies are handed to the socket once this many bytes are batched. */
#define FLUSH_BYTES (256 * 1024)

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec) &&
               offsetof(uv_buf_t, base) == offsetof(struct iovec, iov_base) &&
               offsetof(uv_buf_t, len) == offsetof(struct iovec, iov_len),
               "uv_buf_t must match struct iovec (libuv documents it on Unix)");

struct psd_conn {
    uv_tcp_t tcp;                /* first: handle pointers cast to conn */
    psd_conns *set;
    psd_node *node;
    psd_conn *prev, *next;
    char peer[64];
    psd_session ss;              /* what request.c knows of us */
    psw_reader rd;
    msgpack_zone zone;           /* containers of the frame being decoded */
    psw_out out;                 /* replies not yet written */
    psw_out spare;               /* a written buffer kept for reuse, so a
                                    stream of large replies does not map
                                    and fault in fresh memory each time */
    int has_spare;
    size_t queued;               /* bytes handed to uv_write, not done */
    int hello_done;
    /* The handshake with a token (auth.h): HELLO, then CHALLENGE sent,
     * then the client's AUTH, whose proof may wait for the throttle
     * (parked: nothing is read meanwhile). */
    int version;                 /* of the HELLO; 0 before it */
    int challenged;              /* CHALLENGE sent, AUTH expected */
    int parked;
    uint64_t park_until_ms;
    psw_hello hello;             /* its nonce view is not kept */
    psw_transcript tr;
    uint8_t proof[PSW_PROOF_LEN];
    size_t proof_len;
    char ip[48];                 /* the peer's address, for the throttle */
    uint64_t accepted_ms;        /* loop time of accept, for hello_timeout */
    uint64_t alive_ms;           /* last sign of life: bytes read (or,
                                    while paused, a write drained) */
    uint64_t sent_ms;            /* last write handed to libuv */
    int paused;                  /* reads and parsing stopped */
    int waiting;                 /* replies wait for the journal */
    int closing;
    int shutting;                /* psd_conn_shutdown was called */
};

typedef struct wreq {
    uv_write_t req;
    psd_conn *c;
    psw_out out;                 /* the bytes being written, owned */
} wreq;

static void on_close(uv_handle_t *h);
static void process(psd_conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void conn_close(psd_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* A broken frame: one log line, a counter, and this connection closes. */
static void reject(psd_conn *c, const char *why)
{
    c->node->stats.proto_errors++;
    psd_warn("closing connection from %s: %s", c->peer, why);
    conn_close(c);
}

static void on_close(uv_handle_t *h)
{
    psd_conn *c = (psd_conn *)h;
    psd_conns *set = c->set;
    if (c->hello_done)
        psd_request_closed(c->node, &c->ss, uv_now(set->loop));
    if (c->prev)
        c->prev->next = c->next;
    else
        set->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    set->n--;
    psw_reader_destroy(&c->rd);
    msgpack_zone_destroy(&c->zone);
    psw_out_destroy(&c->out);
    if (c->has_spare)
        psw_out_destroy(&c->spare);
    psd_debug("connection from %s closed", c->peer);
    free(c);
}

static void pause_reading(psd_conn *c)
{
    if (!c->paused) {
        c->paused = 1;
        uv_read_stop((uv_stream_t *)&c->tcp);
    }
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    psd_conn *c = req->data;
    (void)status;
    free(req);
    conn_close(c);
}

/* Shutdown path: nothing more is read; once the queued replies are out
 * the write side is shut down and the handle closed. */
static void maybe_finish(psd_conn *c)
{
    if (!c->shutting || c->closing || c->queued || c->waiting)
        return;
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown)) {
        free(req);
        conn_close(c);
        return;
    }
    req->data = c;
}

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    psd_conn *c = w->c;
    c->queued -= w->out.total;
    /* A write completing only means the kernel took it: not a sign of
     * life, except while reading is paused for backpressure, when the
     * queue drains only as fast as the peer reads. */
    if (status >= 0 && c->paused)
        c->alive_ms = uv_now(c->set->loop);
    if (!c->has_spare && !c->closing) {
        psw_out_reset(&w->out);
        c->spare = w->out;
        c->has_spare = 1;
    } else
        psw_out_destroy(&w->out);
    free(w);
    if (status < 0) {
        if (!c->closing)
            psd_info("write to %s failed: %s", c->peer, uv_strerror(status));
        conn_close(c);
        return;
    }
    if (c->closing)
        return;
    /* Resume well below the limit so a steady stream does not flap. */
    if (c->paused && !c->shutting && c->queued <= c->node->cfg.max_output / 4) {
        c->paused = 0;
        process(c);
        if (!c->paused && !c->closing) {
            int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
            if (rc) {
                psd_warn("connection from %s: cannot resume reading: %s",
                         c->peer, uv_strerror(rc));
                conn_close(c);
                return;
            }
        }
    }
    maybe_finish(c);
}

/* Hands the batched replies to libuv; stops reading (and parsing) while
 * more than max_output bytes wait to be written. */
static void flush(psd_conn *c)
{
    if (c->closing || c->out.total == 0)
        return;
    /* Journal records go out before the replies that depend on them, and
     * with fsync = always those replies wait for the fsync. */
    psd_node_commit(c->node);
    if (c->ss.need_lsn > c->node->durable_lsn) {
        c->waiting = 1;
        return;
    }
    c->waiting = 0;
    if (c->out.oom) {
        reject(c, "out of memory building replies");
        return;
    }
    wreq *w = malloc(sizeof *w);
    size_t cnt = psw_out_iovcnt(&c->out);
    struct iovec small[16], *iov = cnt <= 16 ? small : malloc(cnt * sizeof *iov);
    if (!w || !iov) {
        free(w);
        if (iov != small)
            free(iov);
        reject(c, "out of memory queueing replies");
        return;
    }
    w->c = c;
    w->out = c->out;             /* ownership moves to the write request */
    if (c->has_spare) {
        c->out = c->spare;
        c->has_spare = 0;
    } else
        psw_out_init(&c->out);
    psw_out_iov(&w->out, iov);
    /* libuv copies the buffer array; the bytes live in w->out. */
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, (const uv_buf_t *)iov,
                      (unsigned)cnt, on_write);
    if (iov != small)
        free(iov);
    if (rc < 0) {
        psw_out_destroy(&w->out);
        free(w);
        psd_info("write to %s failed: %s", c->peer, uv_strerror(rc));
        conn_close(c);
        return;
    }
    c->queued += w->out.total;
    c->sent_ms = uv_now(c->set->loop);
    if (c->queued > c->node->cfg.max_output)
        pause_reading(c);
}

/* request.c packed a held reply into our output outside of a frame we
 * were handling: send it. */
static void on_answered(psd_session *ss)
{
    psd_conn *c = (psd_conn *)(void *)((char *)ss - offsetof(psd_conn, ss));
    flush(c);
}

/* Answers a HELLO with a refusal (status and reason, no layout), then
 * closes the connection once the answer is out. */
static void refuse_hello(psd_conn *c, int status, const char *why)
{
    psw_cluster refused = c->node->cluster;
    refused.status = status;
    refused.proof_state = c->version >= 3 ? PSW_PROOF_NIL : PSW_PROOF_ABSENT;
    snprintf(refused.text, sizeof refused.text, "%s", why);
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &refused);
    psw_out_frame_end(&c->out);
    psd_warn("refusing %s: %s", c->peer, why);
    c->shutting = 1;
    pause_reading(c);
    flush(c);
    maybe_finish(c);
}

/* Anything wrong before a client has authenticated, on a node with a
 * token: counted by the throttle, logged (collapsed), answered EAUTH. */
static void refuse_auth(psd_conn *c, const char *why)
{
    char text[300];
    psd_auth_failed(c->set->auth, c->ip, c->peer, why,
                    uv_now(c->set->loop));
    snprintf(text, sizeof text, "authentication failed: %s", why);
    c->node->stats.auth_failures++;
    /* refuse_hello logs at warn: the throttled log above says it once. */
    psw_cluster refused = c->node->cluster;
    refused.status = PSW_EAUTH;
    refused.proof_state = c->version >= 3 ? PSW_PROOF_NIL : PSW_PROOF_ABSENT;
    snprintf(refused.text, sizeof refused.text, "%s", text);
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &refused);
    psw_out_frame_end(&c->out);
    c->shutting = 1;
    pause_reading(c);
    flush(c);
    maybe_finish(c);
}

/* The HELLO is accepted (and the client authenticated, when there is a
 * token): the session starts, HELLO_OK carries the layout (and the
 * server's proof). */
static void finish_hello(psd_conn *c, const psw_hello *h, int authed)
{
    psw_cluster reply;
    char why[200];
    int rc = psd_request_hello(c->node, &c->ss, h, &reply, why, sizeof why);
    if (rc) {
        refuse_hello(c, rc, why);
        return;
    }
    c->hello_done = 1;
    c->rd.max_frame = (size_t)c->node->cfg.max_frame;
    /* Answer in the client's version: a version 2 client gets the 14
     * fields it knows. */
    reply.version = h->version;
    reply.proof_state = h->version >= 3 ? PSW_PROOF_NIL : PSW_PROOF_ABSENT;
    if (authed) {
        psd_auth_prove(c->set->auth, &c->tr, reply.proof);
        reply.proof_state = PSW_PROOF_SET;
    }
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &reply);
    psw_out_frame_end(&c->out);
    psw_wipe(reply.proof, sizeof reply.proof);
    psd_debug("hello from %s: client %016llx worker %d%s", c->peer,
              (unsigned long long)h->client_id, (int)h->worker,
              authed ? ", authenticated" : "");
}

static void handle_hello(psd_conn *c, const msgpack_object *msg)
{
    psw_hello h;
    char why[200];
    int auth = psd_auth_on(c->set->auth);
    if (psw_hello_decode(msg, &h, why, sizeof why)) {
        if (auth)
            refuse_auth(c, why);
        else
            reject(c, why);
        return;
    }
    c->version = (int)h.version;
    if (h.version < PSW_VERSION_MIN || h.version > PSW_VERSION) {
        snprintf(why, sizeof why, "protocol version %u is not supported "
                 "(this server speaks %d..%d)", h.version, PSW_VERSION_MIN,
                 PSW_VERSION);
        refuse_hello(c, PSW_EPROTO, why);
        return;
    }
    if (!auth) {
        finish_hello(c, &h, 0);
        return;
    }
    if (h.version < 3) {
        refuse_auth(c, "this node requires a token, and protocol version 2 "
                    "cannot authenticate: upgrade the client");
        return;
    }
    if (!h.nonce || h.nonce_len != PSW_NONCE_LEN) {
        refuse_auth(c, "the HELLO carries no client nonce");
        return;
    }
    /* The challenge: a fresh nonce of ours, so a recorded answer is worth
     * nothing on another connection, and the node's index, so an answer
     * meant for one node is worth nothing on another. */
    c->hello = h;
    c->hello.nonce = NULL;
    c->hello.nonce_len = 0;
    c->tr = (psw_transcript){ .version = h.version, .client_id = h.client_id,
                              .incarnation = h.incarnation,
                              .worker = h.worker,
                              .node_index = c->node->index };
    memcpy(c->tr.cnonce, h.nonce, PSW_NONCE_LEN);
    psw_auth_nonce(c->tr.snonce);
    psw_challenge ch = { .node_index = c->node->index };
    memcpy(ch.nonce, c->tr.snonce, PSW_NONCE_LEN);
    psw_out_frame_begin(&c->out);
    psw_pack_challenge(&c->out, &ch);
    psw_out_frame_end(&c->out);
    c->challenged = 1;
}

/* Checks the proof an AUTH brought (its turn came: see the throttle). */
static void check_proof(psd_conn *c)
{
    if (psd_auth_check(c->set->auth, &c->tr, c->proof, c->proof_len)) {
        refuse_auth(c, "wrong token (the client's proof does not match)");
        return;
    }
    psd_auth_succeeded(c->set->auth, c->ip);
    finish_hello(c, &c->hello, 1);
}

static void handle_auth(psd_conn *c, const msgpack_object *msg)
{
    psw_auth_msg a;
    char why[200];
    if (psw_auth_decode(msg, &a, why, sizeof why)) {
        refuse_auth(c, why);
        return;
    }
    c->challenged = 0;
    if (!a.proof) {
        refuse_auth(c, "the client has no token and this node requires "
                    "one (ps_options.auth_token, PSD_AUTH_TOKEN, or the "
                    "ini's auth_token / auth_token_file)");
        return;
    }
    c->proof_len = a.proof_len < PSW_PROOF_LEN ? a.proof_len : PSW_PROOF_LEN;
    memcpy(c->proof, a.proof, c->proof_len);
    if (a.proof_len != PSW_PROOF_LEN)
        c->proof_len = 0;        /* never right */
    uint64_t wait = psd_auth_admit(c->set->auth, c->ip, uv_now(c->set->loop));
    if (wait) {
        /* Recent failures from this address: its attempts are checked one
         * per delay. Nothing more is read meanwhile. */
        c->parked = 1;
        c->park_until_ms = wait;
        uv_read_stop((uv_stream_t *)&c->tcp);
        return;
    }
    check_proof(c);
}

/* The throttle let a parked AUTH through: check it, then read on. */
static void unpark(psd_conn *c)
{
    c->parked = 0;
    check_proof(c);
    if (c->closing || c->shutting)
        return;
    if (!c->paused) {
        int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc) {
            reject(c, "cannot resume reading");
            return;
        }
    }
    process(c);
}

static void handle_frame(psd_conn *c, const char *body, size_t len)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];
    int n;

    c->node->stats.frames++;
    msgpack_zone_clear(&c->zone);
    if (psw_frame_decode(body, len, &c->zone, &obj, err, sizeof err) ||
        (n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err)) < 0) {
        reject(c, err);
        return;
    }
    if (!c->hello_done) {
        int auth = psd_auth_on(c->set->auth);
        if (n != 1) {
            if (auth)
                refuse_auth(c, "a frame of several messages before "
                            "authentication");
            else
                reject(c, "the first frame must hold one HELLO");
            return;
        }
        if (c->challenged)
            handle_auth(c, &msgs[0]);
        else if (c->version && auth)
            refuse_auth(c, "a second HELLO");
        else
            handle_hello(c, &msgs[0]);
        return;
    }
    /* Decode every message before applying any, so a malformed message
     * late in a frame cannot leave the frame half applied. */
    psw_msg one, *m = n == 1 ? &one : malloc((size_t)n * sizeof *m);
    if (!m) {
        reject(c, "out of memory decoding a frame");
        return;
    }
    for (int i = 0; i < n; i++) {
        int bad = psw_msg_decode(&msgs[i], &m[i], err, sizeof err);
        if (!bad && m[i].op == PSW_OP_REPLY) {
            snprintf(err, sizeof err, "a reply sent to the server");
            bad = 1;
        }
        if (bad) {
            char why[200];
            snprintf(why, sizeof why, "message %d: %s", i, err);
            if (m != &one)
                free(m);
            reject(c, why);
            return;
        }
    }
    char why[200];
    int rc = psd_request_frame(c->node, &c->ss, m, n, uv_now(c->set->loop),
                               why, sizeof why);
    if (m != &one)
        free(m);
    if (rc)
        reject(c, why);
}

/* Handles every complete frame buffered, unless paused by backpressure. */
static void process(psd_conn *c)
{
    const char *body;
    size_t len;
    while (!c->paused && !c->parked && !c->closing) {
        int rc = psw_reader_next(&c->rd, &body, &len);
        if (rc == 0)
            break;
        if (rc < 0) {
            char why[160];
            snprintf(why, sizeof why, "%s%s", c->rd.why,
                     c->hello_done ? "" : " (before HELLO)");
            if (!c->hello_done && psd_auth_on(c->set->auth))
                refuse_auth(c, why);
            else
                reject(c, why);
            return;
        }
        handle_frame(c, body, len);
        if (c->out.total >= FLUSH_BYTES)
            flush(c);
    }
    flush(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    psd_conn *c = (psd_conn *)h;
    char *p;
    size_t n;
    (void)suggested;
    if (psw_reader_space(&c->rd, &p, &n)) {
        buf->base = NULL;        /* read_cb gets UV_ENOBUFS */
        buf->len = 0;
        return;
    }
    buf->base = p;
    buf->len = n;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    psd_conn *c = (psd_conn *)st;
    (void)buf;
    if (n == 0)
        return;
    if (n < 0) {
        if (n == UV_ENOBUFS)
            reject(c, "out of memory for the receive buffer");
        else {
            if (n != UV_EOF)
                psd_info("connection from %s: %s", c->peer, uv_strerror((int)n));
            conn_close(c);
        }
        return;
    }
    psw_reader_commit(&c->rd, (size_t)n);
    c->alive_ms = uv_now(c->set->loop);
    process(c);
}

static void peer_name(uv_tcp_t *t, char *out, size_t cap, char *ip,
                      size_t iplen)
{
    struct sockaddr_storage sa;
    int len = sizeof sa;
    char host[48] = "?";
    int port = 0;
    if (uv_tcp_getpeername(t, (struct sockaddr *)&sa, &len) == 0) {
        if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
            uv_ip6_name(a, host, sizeof host);
            port = ntohs(a->sin6_port);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&sa;
            uv_ip4_name(a, host, sizeof host);
            port = ntohs(a->sin_port);
        }
    }
    snprintf(out, cap, "%s:%d", host, port);
    snprintf(ip, iplen, "%s", host);
}

void psd_conns_init(psd_conns *set, uv_loop_t *loop, psd_node *node)
{
    memset(set, 0, sizeof *set);
    set->loop = loop;
    set->node = node;
}

void psd_conn_accept(psd_conns *set, uv_stream_t *listener)
{
    psd_node *node = set->node;
    psd_conn *c = calloc(1, sizeof *c);
    if (!c) {
        psd_error("out of memory accepting a connection");
        return;
    }
    c->set = set;
    c->node = node;
    uv_tcp_init(set->loop, &c->tcp);
    c->next = set->head;
    if (set->head)
        set->head->prev = c;
    set->head = c;
    set->n++;
    psw_reader_init(&c->rd, PRE_HELLO_MAX_FRAME);
    msgpack_zone_init(&c->zone, 8192);
    psw_out_init(&c->out);
    c->ss = (psd_session){ .worker = -1, .peer = c->peer, .out = &c->out,
                           .answered = on_answered };
    if (uv_accept(listener, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    peer_name(&c->tcp, c->peer, sizeof c->peer, c->ip, sizeof c->ip);
    c->accepted_ms = c->alive_ms = c->sent_ms = uv_now(set->loop);
    if (set->n > node->cfg.max_connections) {
        char why[96];
        node->stats.conns_refused++;
        snprintf(why, sizeof why, "max_connections (%d) reached",
                 node->cfg.max_connections);
        /* A typed refusal, so the client knows to come back later rather
         * than seeing a reset. */
        refuse_hello(c, PSW_EBUSY, why);
        return;
    }
    node->stats.conns_accepted++;
    uv_tcp_nodelay(&c->tcp, 1);
    psd_debug("connection from %s", c->peer);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Sends a frame holding one PING: the peer learns we are alive. */
static void send_ping(psd_conn *c)
{
    psw_msg ping = { .op = PSW_OP_PING };
    psw_out_frame_begin(&c->out);
    psw_pack_request(&c->out, &ping);
    psw_out_frame_end(&c->out);
    flush(c);
}

void psd_conns_tick(psd_conns *set)
{
    const psd_config *cfg = &set->node->cfg;
    uint64_t now = uv_now(set->loop);
    psd_auth_tick(set->auth, now);
    uint64_t hello = (uint64_t)cfg->hello_timeout * 1000;
    uint64_t dead = (uint64_t)cfg->peer_timeout_ms;
    uint64_t beat = (uint64_t)cfg->heartbeat_ms;
    for (psd_conn *c = set->head, *n; c; c = n) {
        n = c->next;
        if (c->closing)
            continue;
        char why[96];
        if (!c->hello_done) {
            if (c->parked && now >= c->park_until_ms &&
                now - c->accepted_ms < hello) {
                unpark(c);
                continue;
            }
            if (now - c->accepted_ms >= hello) {
                snprintf(why, sizeof why, "no HELLO within %d s",
                         cfg->hello_timeout);
                reject(c, why);
            }
            continue;
        }
        if (now - c->alive_ms >= dead) {
            set->node->stats.peers_lost++;
            psd_warn("closing connection from %s: nothing heard for %llu ms "
                     "(peer_timeout_ms %d): presumed dead", c->peer,
                     (unsigned long long)(now - c->alive_ms),
                     cfg->peer_timeout_ms);
            conn_close(c);
            continue;
        }
        if (now - c->sent_ms >= beat && !c->shutting)
            send_ping(c);
    }
}

void psd_conns_durable(psd_conns *set)
{
    for (psd_conn *c = set->head, *n; c; c = n) {
        n = c->next;
        if (c->waiting)
            flush(c);
    }
}

/* Shutdown path: nothing more is read; what is owed is written first. */
static void conn_shutdown(psd_conn *c)
{
    if (c->closing)
        return;
    c->shutting = 1;
    pause_reading(c);
    maybe_finish(c);
}

void psd_conns_shutdown(psd_conns *set)
{
    for (psd_conn *c = set->head, *n; c; c = n) {
        n = c->next;
        conn_shutdown(c);
    }
}
