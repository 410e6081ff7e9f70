/* One client connection: read bytes, cut frames, decode, dispatch each
 * request to its table, batch the replies of everything read together
 * into one write, and enforce the limits. A bad frame closes only this
 * connection, with one log line; a bad request gets an error reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "log.h"
#include "server.h"
#include "sync.h"
#include "../proto/status.h"

/* Before HELLO a peer may send only a small frame (redis does the same
 * before AUTH): nothing large is buffered for an unknown peer. */
#define PRE_HELLO_MAX_FRAME 4096
/* Room for a reply's fields and error text, besides its rows. */
#define REPLY_FIELDS 512
/* Replies are handed to the socket once this many bytes are batched. */
#define FLUSH_BYTES (256 * 1024)

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec) &&
               offsetof(uv_buf_t, base) == offsetof(struct iovec, iov_base) &&
               offsetof(uv_buf_t, len) == offsetof(struct iovec, iov_len),
               "uv_buf_t must match struct iovec (libuv documents it on Unix)");

struct psd_conn {
    uv_tcp_t tcp;                /* first: handle pointers cast to conn */
    psd_server *srv;
    psd_conn *prev, *next;
    char peer[64];
    psw_reader rd;
    msgpack_zone zone;           /* containers of the frame being decoded */
    psw_out out;                 /* replies not yet written */
    psw_out spare;               /* a written buffer kept for reuse, so a
                                    stream of large replies does not map
                                    and fault in fresh memory each time */
    int has_spare;
    size_t queued;               /* bytes handed to uv_write, not done */
    int hello_done;
    uint64_t accepted_ms;        /* loop time of accept, for hello_timeout */
    uint64_t client_id;
    int32_t worker;
    int paused;                  /* reads and parsing stopped */
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

psd_conn *psd_conn_next(psd_conn *c)
{
    return c->next;
}

int32_t psd_conn_worker(const psd_conn *c)
{
    return c->worker;
}

void psd_conn_set_worker(psd_conn *c, int32_t worker)
{
    c->worker = worker;
}

const char *psd_conn_peer(const psd_conn *c)
{
    return c->peer;
}

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
    c->srv->stats.proto_errors++;
    psd_warn("closing connection from %s: %s", c->peer, why);
    conn_close(c);
}

static void on_close(uv_handle_t *h)
{
    psd_conn *c = (psd_conn *)h;
    psd_server *s = c->srv;
    psd_sync_conn_closed(s, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
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
    if (!c->shutting || c->closing || c->queued)
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
    if (c->paused && !c->shutting && c->queued <= c->srv->cfg.max_output / 4) {
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
    if (c->queued > c->srv->cfg.max_output)
        pause_reading(c);
}

/* ---- requests ------------------------------------------------------- */

/* Packs an error reply and counts it. */
static void reply_error(psd_conn *c, const psw_msg *m, int status,
                        const char *text)
{
    c->srv->stats.request_errors++;
    psd_debug("request %llu from %s: %s", (unsigned long long)m->ts, c->peer,
              text);
    psw_pack_reply(&c->out, m->ts, m->part, status, text, 0, 0);
}

/* Packs a reply carrying `nbytes` of rows produced by fill(), or an error
 * if the rows cannot be produced. */
static void reply_rows(psd_conn *c, const psw_msg *m, psd_table *t,
                       size_t nbytes)
{
    psw_mark mark = psw_out_mark(&c->out);
    uint64_t clock = psd_table_conf_get(t)->consistency == PSD_CONS_ASYNC
                         ? 0 : c->srv->global;
    char *p = psw_pack_reply(&c->out, m->ts, m->part, PSW_OK, NULL, nbytes,
                             clock);
    if (!p)
        return;                  /* oom is flagged on c->out */
    int rc = 0;
    if (m->op == PSW_OP_PULL_RANGE)
        psd_table_pull_range(t, m->first, m->count, p);
    else
        rc = psd_table_pull(t, m->keys, m->nkeys, p);
    if (rc) {
        psw_out_rewind(&c->out, mark);
        reply_error(c, m, rc, "out of memory creating rows");
    }
}

static void dispatch(psd_conn *c, const psw_msg *m)
{
    psd_server *s = c->srv;
    char err[256];
    int owner = -1, rc;

    s->stats.requests++;
    if (m->op == PSW_OP_CLOCK || m->op == PSW_OP_BARRIER ||
        m->op == PSW_OP_LEAVE) {
        psd_sync_message(s, c, m);
        return;
    }
    if (m->table >= (uint32_t)s->ntables) {
        snprintf(err, sizeof err, "no table with id %u (%d tables)", m->table,
                 s->ntables);
        reply_error(c, m, PSW_ENOTABLE, err);
        return;
    }
    psd_table *t = s->tables[m->table];
    const psd_table_conf *tc = psd_table_conf_get(t);
    size_t rowb = (size_t)tc->dim * sizeof(float);
    int ranged = m->op == PSW_OP_PUSH_RANGE || m->op == PSW_OP_PULL_RANGE;
    uint64_t nrows = ranged ? m->count : m->nkeys;
    int pushes = m->op == PSW_OP_PUSH || m->op == PSW_OP_PUSHPULL ||
                 m->op == PSW_OP_PUSH_RANGE;
    int pulls = m->op != PSW_OP_PUSH && m->op != PSW_OP_PUSH_RANGE;

    if (pushes && (nrows > SIZE_MAX / rowb || m->vals_len != nrows * rowb)) {
        snprintf(err, sizeof err, "%llu rows of table '%s' need %llu bytes of "
                 "values, got %zu", (unsigned long long)nrows, tc->name,
                 (unsigned long long)(nrows * rowb), m->vals_len);
        reply_error(c, m, PSW_EINVAL, err);
        return;
    }
    /* A reply frame must fit the limit the client reads with. */
    if (pulls && (nrows > SIZE_MAX / rowb ||
                  nrows * rowb > s->cfg.max_frame - 64)) {
        snprintf(err, sizeof err, "pulling %llu rows of table '%s' exceeds "
                 "max_frame (%llu bytes)", (unsigned long long)nrows, tc->name,
                 (unsigned long long)s->cfg.max_frame);
        reply_error(c, m, PSW_ETOOBIG, err);
        return;
    }
    rc = ranged ? psd_table_check_range(t, m->first, m->count, &owner, err,
                                        sizeof err)
                : psd_table_check_keys(t, m->keys, m->nkeys, &owner, err,
                                       sizeof err);
    if (rc == PSW_ENOTOWNER) {
        size_t l = strlen(err);
        snprintf(err + l, sizeof err - l, " (%s), not by this node %d",
                 s->layout.nodes[owner], s->node);
    }
    if (rc) {
        reply_error(c, m, rc, err);
        return;
    }
    if (pushes) {
        if (tc->consistency == PSD_CONS_BSP)
            /* Summed now, applied once when the clock ends. */
            rc = ranged ? psd_table_accumulate_range(t, m->first, m->count,
                                                     m->vals)
                        : psd_table_accumulate(t, m->keys, m->nkeys, m->vals);
        else if (ranged)
            psd_table_push_range(t, m->first, m->count, m->vals);
        else
            rc = psd_table_push(t, m->keys, m->nkeys, m->vals);
        if (rc) {
            reply_error(c, m, PSW_ENOMEM, "out of memory creating rows");
            return;
        }
    }
    if (pulls && nrows && !psd_sync_pull_ready(s, c, tc)) {
        if (psd_sync_hold(s, c, m))
            reply_error(c, m, PSW_ENOMEM, "out of memory holding a pull");
        return;                  /* answered when the slow worker catches up */
    }
    if (pulls && nrows)
        reply_rows(c, m, t, (size_t)nrows * rowb);
    else
        psw_pack_reply(&c->out, m->ts, m->part, PSW_OK, NULL, 0, 0);
}

/* Bytes the reply to m can take at most: its rows (when it pulls valid
 * rows) plus room for the fields and an error text. */
static size_t reply_bound(const psd_conn *c, const psw_msg *m)
{
    const psd_server *s = c->srv;
    size_t bound = REPLY_FIELDS;
    if (m->table >= (uint32_t)s->ntables || m->op == PSW_OP_PUSH ||
        m->op == PSW_OP_PUSH_RANGE)
        return bound;
    uint64_t rows = m->op == PSW_OP_PULL_RANGE ? m->count : m->nkeys;
    uint64_t rowb = (uint64_t)psd_table_conf_get(s->tables[m->table])->dim * 4;
    if (rows > s->cfg.max_frame / rowb)
        return bound;            /* answered with PSW_ETOOBIG */
    return bound + (size_t)(rows * rowb);
}

/* Answers a HELLO with a refusal (status and reason, no layout), then
 * closes the connection once the answer is out. */
static void refuse_hello(psd_conn *c, int status, const char *why)
{
    psw_layout refused = c->srv->layout;
    refused.status = status;
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

static void handle_hello(psd_conn *c, const msgpack_object *msg)
{
    psd_server *s = c->srv;
    psw_hello h;
    char why[200];
    if (psw_hello_decode(msg, &h, why, sizeof why)) {
        reject(c, why);
        return;
    }
    if (h.version != PSW_VERSION) {
        snprintf(why, sizeof why, "protocol version %u is not supported "
                 "(this server speaks %d)", h.version, PSW_VERSION);
        refuse_hello(c, PSW_EPROTO, why);
        return;
    }
    if (h.worker >= 0 &&
        psd_sync_join(s, c, h.worker, h.client_id, why, sizeof why)) {
        refuse_hello(c, PSW_EINVAL, why);
        return;
    }
    c->hello_done = 1;
    c->client_id = h.client_id;
    c->rd.max_frame = (size_t)s->cfg.max_frame;
    /* A worker learns where this node has it, so its next ps_clock names
     * the right clock after a rejoin or a lost connection. */
    psw_layout l = s->layout;
    psd_sync_position(s, h.worker, &l.worker_clock, &l.worker_barrier);
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &l);
    psw_out_frame_end(&c->out);
    psd_debug("hello from %s: client %016llx worker %d", c->peer,
              (unsigned long long)h.client_id, (int)h.worker);
}

static void handle_frame(psd_conn *c, const char *body, size_t len)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];
    int n;

    c->srv->stats.frames++;
    msgpack_zone_clear(&c->zone);
    if (psw_frame_decode(body, len, &c->zone, &obj, err, sizeof err) ||
        (n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err)) < 0) {
        reject(c, err);
        return;
    }
    if (!c->hello_done) {
        if (n != 1) {
            reject(c, "the first frame must hold one HELLO");
            return;
        }
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
    /* The rows one frame asks for may not exceed max_frame: otherwise a
     * single small frame of range pulls could make psd build gigabytes of
     * replies before backpressure gets a say. Clients budget their frames
     * the same way. */
    uint64_t rows_bytes = 0;
    for (int i = 0; i < n; i++)
        rows_bytes += reply_bound(c, &m[i]) - REPLY_FIELDS;
    if (rows_bytes > c->srv->cfg.max_frame) {
        char why[200];
        snprintf(why, sizeof why, "the replies to one frame would carry %llu "
                 "bytes of rows; max_frame is %llu",
                 (unsigned long long)rows_bytes,
                 (unsigned long long)c->srv->cfg.max_frame);
        if (m != &one)
            free(m);
        reject(c, why);
        return;
    }
    /* Replies go out in frames of at most max_frame, the limit clients
     * read with: a frame of many pulls may need several reply frames. */
    psw_out_frame_begin(&c->out);
    for (int i = 0; i < n; i++) {
        if (c->out.frame_msgs > 0 &&
            psw_out_frame_body(&c->out) + reply_bound(c, &m[i]) >
                c->srv->cfg.max_frame) {
            psw_out_frame_end(&c->out);
            psw_out_frame_begin(&c->out);
        }
        dispatch(c, &m[i]);
    }
    psw_out_frame_end(&c->out);
    if (m != &one)
        free(m);
}

/* Handles every complete frame buffered, unless paused by backpressure. */
static void process(psd_conn *c)
{
    const char *body;
    size_t len;
    while (!c->paused && !c->closing) {
        int rc = psw_reader_next(&c->rd, &body, &len);
        if (rc == 0)
            break;
        if (rc < 0) {
            char why[128];
            if (rc == PSW_ETOOBIG)
                snprintf(why, sizeof why, "frame larger than max_frame "
                         "(%zu bytes%s)", c->rd.max_frame,
                         c->hello_done ? "" : " before HELLO");
            else
                snprintf(why, sizeof why, "empty frame");
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
    process(c);
}

static void peer_name(uv_tcp_t *t, char *out, size_t cap)
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
}

void psd_conn_accept(psd_server *s)
{
    psd_conn *c = calloc(1, sizeof *c);
    if (!c) {
        psd_error("out of memory accepting a connection");
        return;
    }
    c->srv = s;
    c->worker = -1;
    uv_tcp_init(s->loop, &c->tcp);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    psw_reader_init(&c->rd, PRE_HELLO_MAX_FRAME);
    msgpack_zone_init(&c->zone, 8192);
    psw_out_init(&c->out);
    if (uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    peer_name(&c->tcp, c->peer, sizeof c->peer);
    if (s->nconns > s->cfg.max_connections) {
        s->stats.conns_refused++;
        psd_warn("refusing connection from %s: max_connections (%d) reached",
                 c->peer, s->cfg.max_connections);
        conn_close(c);
        return;
    }
    s->stats.conns_accepted++;
    c->accepted_ms = uv_now(s->loop);
    uv_tcp_nodelay(&c->tcp, 1);
    psd_debug("connection from %s", c->peer);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

void psd_conn_release(psd_conn *c, const psw_msg *m, int status,
                      const char *text)
{
    if (c->closing)
        return;
    /* Inside handle_frame a frame is open: the reply joins it. Otherwise
     * it goes out in a frame of its own right away. */
    int own = !psw_out_frame_open(&c->out);
    if (own)
        psw_out_frame_begin(&c->out);
    if (status != PSW_OK)
        reply_error(c, m, status, text);
    else if (m->op == PSW_OP_PULL || m->op == PSW_OP_PULL_RANGE) {
        psd_table *t = c->srv->tables[m->table];
        uint64_t rows = m->op == PSW_OP_PULL_RANGE ? m->count : m->nkeys;
        reply_rows(c, m, t, (size_t)rows * psd_table_conf_get(t)->dim *
                                sizeof(float));
    } else
        psw_pack_reply(&c->out, m->ts, m->part, PSW_OK, NULL, 0,
                       c->srv->global);
    if (own) {
        psw_out_frame_end(&c->out);
        flush(c);
    }
}

void psd_conn_sweep(psd_server *s)
{
    uint64_t now = uv_now(s->loop), limit = (uint64_t)s->cfg.hello_timeout * 1000;
    for (psd_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (!c->hello_done && !c->closing && now - c->accepted_ms >= limit) {
            char why[64];
            snprintf(why, sizeof why, "no HELLO within %d s",
                     s->cfg.hello_timeout);
            reject(c, why);
        }
    }
}

void psd_conn_shutdown(psd_conn *c)
{
    if (c->closing)
        return;
    c->shutting = 1;
    pause_reading(c);
    maybe_finish(c);
}
