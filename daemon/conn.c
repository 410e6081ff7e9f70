/* One client connection: the transport half of serving a client; see
 * conn.h. What each request does is request.c's business. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>

#include "conn.h"
#include "log.h"
#include "request.h"
#include "../proto/status.h"

/* Connections being refused at once, beside the fd_room open: the open
 * files limit keeps them out of psd's PSD_FD_RESERVE (psd_conn_accept). */
#define FD_REFUSING 16

/* Before HELLO a peer may send only a small frame (redis does the same
 * before AUTH): nothing large is buffered for an unknown peer. */
#define PRE_HELLO_MAX_FRAME 4096
/* Replies are handed to the socket once this many bytes are batched. */
#define FLUSH_BYTES (256 * 1024)
/* A connection still without HELLO this long may be closed to make room
 * for a new one when the node is full (a real client sends its HELLO at
 * once). */
#define PRE_HELLO_EVICT_MS 1000
/* A quiet connection gives back the buffers it keeps for reuse once they
 * are this large and it has been quiet this long. */
#define TRIM_BYTES (256 * 1024)
#define TRIM_QUIET_MS 1000
/* One connection's share of a loop turn: once it has read this many
 * bytes, or executed this many bytes or frames, it yields until the next
 * turn, so that a client streaming 16 MiB requests (or a flood of small
 * ones) cannot keep the others waiting for more than about one such share
 * (a single frame runs whole: a 16 MiB push is the largest unit). */
#define TURN_BYTES (1024 * 1024)
#define TURN_FRAMES 64

_Static_assert(sizeof(uv_buf_t) == sizeof(struct iovec) &&
               offsetof(uv_buf_t, base) == offsetof(struct iovec, iov_base) &&
               offsetof(uv_buf_t, len) == offsetof(struct iovec, iov_len),
               "uv_buf_t must match struct iovec (libuv documents it on Unix)");

struct psd_conn {
    uv_tcp_t tcp;                /* first: handle pointers cast to conn */
    psd_conns *set;
    psd_node *node;
    psd_conn *prev, *next;
    int refusing;                /* refused at accept, still closing:
                                    counted in set->refusing */
    char peer[64];               /* "host:port" */
    psd_session ss;              /* what request.c knows of us */
    psw_reader rd;
    msgpack_zone zone;           /* containers of the frame being decoded */
    psw_out out;                 /* replies not yet written */
    psw_out spare;               /* a written buffer kept for reuse, so a
                                    stream of large replies does not map
                                    and fault in fresh memory each time */
    int has_spare;
    struct wreq *writes;         /* handed to uv_write, not done */
    size_t queued;               /* bytes handed to uv_write, not done */
    size_t queued_mem;           /* the buffers holding them */
    uint64_t reserve;            /* bytes counted ahead of a growth: the
                                    replies of the frame being executed,
                                    or the receive buffer's next step */
    uint64_t mem;                /* what this connection counts in set->mem */
    int hello_done;
    /* The handshake with a token (auth.h): HELLO, then CHALLENGE sent,
     * then the client's AUTH, whose proof may wait for the throttle
     * (parked: nothing is read meanwhile). */
    uint32_t version;            /* of the HELLO; 0 before it (a u32: one
                                    of 2^31 or more is refused with the
                                    15 fields of the versions above 2) */
    int challenged;              /* CHALLENGE sent, AUTH expected */
    int parked;
    uint64_t park_until_ms;
    int authed;                  /* its proof was right and auth.h counts
                                    it among the client's connections */
    psw_hello hello;             /* its nonce view is not kept */
    psw_transcript tr;
    uint8_t proof[PSW_PROOF_LEN];
    size_t proof_len;
    char ip[48];                 /* the peer's address: for the throttle and
                                    max_connections_per_addr */
    uint64_t accepted_ms;        /* loop time of accept, for hello_timeout */
    uint64_t alive_ms;           /* last sign of life: bytes read (or,
                                    while paused, a write drained) */
    uint64_t sent_ms;            /* last write handed to libuv */
    uint64_t request_ms;         /* last frame holding a request (not only
                                    PING or ACK); accept until then */
    uint64_t frame_ms;           /* when the frame still arriving began, or
                                    0 when none is partly here */
    uint64_t frames;             /* frames handled */
    int paused;                  /* reads and parsing stopped */
    int busy;                    /* a frame of it is being executed: its
                                    receive buffer holds the frame */
    int in_alloc;                /* in on_alloc: closing must wait for
                                    on_read (close_deferred) */
    int close_deferred;
    int waiting;                 /* replies wait for the journal */
    int yielded;                 /* its share of this turn is spent:
                                    reading and parsing stop until the
                                    next turn (in set->deferred) */
    psd_conn *defer_next;
    uint64_t turn;               /* the loop turn spent_* count in */
    uint64_t spent_bytes;        /* read or executed in that turn */
    uint64_t spent_frames;
    int closing;
    int shutting;                /* psd_conn_shutdown was called */
    int peer_done;               /* the peer closed its side (EOF) */
};

typedef struct wreq {
    uv_write_t req;
    psd_conn *c;
    struct wreq *prev, *next;    /* c->writes */
    psw_out out;                 /* the bytes being written, owned */
    size_t mem;                  /* its buffers, counted in queued_mem */
    size_t sent;                 /* of out, written before the request */
} wreq;

static void on_close(uv_handle_t *h);
static void release_rows(psd_node *n, const psw_out *o);
static void process(psd_conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);
static void on_resume(uv_idle_t *h);
static void conn_shutdown(psd_conn *c);

/* ---- memory --------------------------------------------------------- */

/* The bytes of a psw_out's buffers. */
static size_t out_mem(const psw_out *o)
{
    return o->sb.alloc + o->segcap * sizeof(psw_seg) + o->owned;
}

/* Everything this connection holds that a client can make grow: the
 * receive buffer, replies not yet written (and the buffers holding
 * them), the buffer kept for reuse, held requests, and what is counted
 * ahead. */
static uint64_t usage(const psd_conn *c)
{
    return c->rd.cap + out_mem(&c->out) +
           (c->has_spare ? out_mem(&c->spare) : 0) + c->queued_mem +
           c->ss.held_bytes + c->reserve;
}

/* Brings set->mem up to date with c. */
static void account(psd_conn *c)
{
    uint64_t u = c->closing ? 0 : usage(c);
    c->set->mem = c->set->mem - c->mem + u;
    c->mem = u;
}

static void conn_close(psd_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    account(c);                  /* its memory no longer counts */
    /* Inside its own alloc callback, libuv still has to call the read
     * callback (with UV_ENOBUFS), which uv_close would clear: on_read
     * closes it then. */
    if (c->in_alloc) {
        c->close_deferred = 1;
        return;
    }
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

/* Gives back what a connection keeps for reuse but does not hold data:
 * an empty receive buffer, the spare output buffer. */
static void trim(psd_conn *c)
{
    if (c->has_spare) {
        psw_out_destroy(&c->spare);
        c->has_spare = 0;
    }
    if (c->out.total == 0 && !psw_out_frame_open(&c->out) &&
        out_mem(&c->out) > TRIM_BYTES) {
        psw_out_destroy(&c->out);
        psw_out_init(&c->out);
    } else
        /* A buffer that held a large reply, holding a small one now (a
         * push's answer behind a 256 KiB pull's): its size, reused,
         * closed a lone client under a budget of 1M (a trial). */
        psw_out_shrink(&c->out);
    if (!c->busy)
        psw_reader_trim(&c->rd);
    account(c);
}

/* Every connection gives back what it only keeps for reuse. */
static void trim_all(psd_conns *set)
{
    for (psd_conn *c = set->head; c; c = c->next)
        if (!c->closing)
            trim(c);
}

/* What a connection that only reads holds: the reader's buffer
 * (PSW_READ_CHUNK) and a small write buffer. One using more than twice
 * the reader's holds real data: replies, or a large frame arriving. */
#define CONN_FLOOR (2 * PSW_READ_CHUNK)

/* Keeps all connections' buffers within max_client_memory: when they
 * are over it, connections first give back what they only keep for
 * reuse; then connections are closed (each with a log line) until the
 * total fits: the one using the most, unless none uses more than
 * CONN_FLOOR and some have not done their handshake. Those go first
 * then, oldest first: a flood of peers without the token, each holding a
 * read buffer for a few bytes sent, no longer gets the largest closed, an
 * authenticated client holding a little more. An honest client's
 * handshake takes one round trip, so the oldest is the likeliest to be
 * stalling, and a new client, the newest, goes last (a HELLO needs no
 * token, so having sent one earns nothing). A connection holding much
 * more than the floor is closed first whatever it is, so that clients
 * that hog the budget (past HELLO, which without a token anyone is)
 * cannot shut new clients out. The caller's own connection may be the
 * one closed: check c->closing after. */
static void enforce(psd_conns *set)
{
    uint64_t max = set->node->cfg.max_client_memory;
    if (set->mem <= max)
        return;
    trim_all(set);
    while (set->mem > max) {
        psd_conn *big = NULL, *old = NULL;
        int strangers = 0, nopen = 0;
        for (psd_conn *c = set->head; c; c = c->next) {
            if (c->closing)
                continue;
            nopen++;
            if (!big || c->mem > big->mem)
                big = c;
            if (!c->hello_done) {
                strangers++;
                if (!old || c->accepted_ms <= old->accepted_ms)
                    old = c;
            }
        }
        if (!big)
            break;
        psd_conn *pick = old && big->mem <= CONN_FLOOR ? old : big;
        set->node->stats.conns_over_memory++;
        if (pick == old)
            psd_warn_rep("closing connection from %s, %s: it uses %llu "
                        "bytes of buffers, the oldest of %d connections "
                        "without a handshake done; all %d use %llu "
                        "together, none more than %d, and max_client_memory "
                        "is %llu", pick->peer,
                        pick->version ? "its handshake under way"
                                      : "before its HELLO",
                        (unsigned long long)pick->mem, strangers, nopen,
                        (unsigned long long)set->mem, CONN_FLOOR,
                        (unsigned long long)max);
        else
            psd_warn_rep("closing connection from %s: "
                        "it uses %llu bytes of buffers, the most of all %d "
                        "connections, which use %llu together; "
                        "max_client_memory is %llu", pick->peer,
                        (unsigned long long)pick->mem, nopen,
                        (unsigned long long)set->mem,
                        (unsigned long long)max);
        conn_close(pick);
    }
}

/* ---- closing -------------------------------------------------------- */

/* A broken frame or limit: one log line (collapsed in a flood), a counter,
 * and this connection closes. */
static void reject(psd_conn *c, const char *why)
{
    c->node->stats.proto_errors++;
    psd_warn_rep("closing connection from %s: "
                "%s", c->peer, why);
    conn_close(c);
}

static void on_close(uv_handle_t *h)
{
    psd_conn *c = (psd_conn *)h;
    psd_conns *set = c->set;
    if (c->hello_done)
        psd_request_closed(c->node, &c->ss, uv_now(set->loop));
    if (c->authed)
        psd_auth_closed(set->auth, c->ip, c->hello.client_id,
                        uv_now(set->loop));
    if (c->prev)
        c->prev->next = c->next;
    else
        set->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->yielded) {
        psd_conn **pp = &set->deferred, *last = NULL;
        while (*pp && *pp != c) {
            last = *pp;
            pp = &(*pp)->defer_next;
        }
        if (*pp) {
            *pp = c->defer_next;
            if (set->deferred_tail == c)
                set->deferred_tail = last;
        }
    }
    set->n--;
    set->closed++;
    psw_reader_destroy(&c->rd);
    msgpack_zone_destroy(&c->zone);
    release_rows(c->node, &c->out);
    psw_out_destroy(&c->out);
    if (c->has_spare)
        psw_out_destroy(&c->spare);
    psd_debug("connection from %s closed", c->peer);
    int refused = c->refusing;
    free(c);
    if (refused)
        set->refusing--;
    /* A refusal ended: a connection left waiting is taken. */
    uv_stream_t *l = set->accept_waiting;
    if (l && set->refusing < FD_REFUSING) {
        set->accept_waiting = NULL;
        psd_conn_accept(set, l);
    }
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

/* ---- writing -------------------------------------------------------- */

/* Replies reference dense rows in place (request.c): o lets go of the
 * ones it references, as it is written or dropped. */
static void release_rows(psd_node *n, const psw_out *o)
{
    for (size_t i = 0; i < o->nsegs; i++) {
        uint32_t tag = o->segs[i].tag;
        if (tag > 0 && tag <= (uint32_t)n->ntables)
            n->row_refs[tag - 1]--;
    }
}

/* Turns o's references to rows of `table` that overlap the bytes
 * [lo, hi) into copies of them. req, when
 * o is being written, is its write: libuv has the iovecs of the bytes
 * not yet written (advanced in place past the bytes written, from
 * write_index on), and those pointing into the rows are repointed into
 * the copy. Returns -1 when memory runs out (then nothing is copied of
 * the seg that failed, and o must not be written). */
static int detach_out(psd_node *n, psw_out *o, uv_write_t *req, int table,
                      uintptr_t lo, uintptr_t hi)
{
    for (size_t i = 0; i < o->nsegs; i++) {
        psw_seg *g = &o->segs[i];
        uintptr_t a = (uintptr_t)g->ptr, b = a + g->len;
        if (g->tag != (uint32_t)table + 1 || b <= lo || a >= hi)
            continue;
        if (req && !req->bufs) {
            /* Written whole: libuv dropped the iovecs already. */
            g->tag = 0;
            n->row_refs[table]--;
            continue;
        }
        char *copy = psw_out_seg_own(o, i);
        if (!copy)
            return -1;
        n->row_refs[table]--;
        /* Only iovecs that lie inside this seg: another reply's rows may
         * start inside it and end past it (overlapping pulls), and the
         * copy holds this seg's bytes only. */
        for (unsigned j = req ? req->write_index : 0; req && j < req->nbufs;
             j++) {
            uintptr_t at = (uintptr_t)req->bufs[j].base;
            if (at >= a && at < b && req->bufs[j].len <= b - at)
                req->bufs[j].base = copy + (at - a);
        }
    }
    return 0;
}

/* The bytes of o's references to rows of `table` that overlap [lo, hi)
 * and are still to be written: what detach_out would copy. */
static uint64_t overlap_bytes(const psw_out *o, const uv_write_t *req,
                              int table, uintptr_t lo, uintptr_t hi)
{
    uint64_t sum = 0;
    if (req && !req->bufs)
        return 0;
    for (size_t i = 0; i < o->nsegs; i++) {
        const psw_seg *g = &o->segs[i];
        uintptr_t a = (uintptr_t)g->ptr, b = a + g->len;
        if (g->tag == (uint32_t)table + 1 && b > lo && a < hi)
            sum += g->len;
    }
    return sum;
}

/* What c's copies of those rows would take. */
static uint64_t copies_needed(const psd_conn *c, int table, uintptr_t lo,
                              uintptr_t hi)
{
    uint64_t sum = overlap_bytes(&c->out, NULL, table, lo, hi);
    for (const wreq *w = c->writes; w; w = w->next)
        sum += overlap_bytes(&w->out, &w->req, table, lo, hi);
    return sum;
}

/* Gives c's replies their own copies of the rows (see detach_rows),
 * counted in its memory. */
static void detach_conn(psd_conn *c, int table, uintptr_t lo, uintptr_t hi)
{
    if (detach_out(c->node, &c->out, NULL, table, lo, hi))
        c->out.oom = 1;          /* flush rejects the connection */
    for (wreq *w = c->writes; w; w = w->next) {
        size_t before = w->out.owned;
        int rc = detach_out(c->node, &w->out, &w->req, table, lo, hi);
        w->mem += w->out.owned - before;
        c->queued_mem += w->out.owned - before;
        if (rc) {
            psd_warn("connection from %s: out of memory copying rows "
                     "a push changes", c->peer);
            conn_close(c);
            return;
        }
    }
    account(c);
}

/* Frees at once what c, just closed, would have written: the copies a
 * push made for it earlier must not stay while copies are made for
 * others (its memory no longer counts). Its socket is closed, so libuv
 * writes none of it; on_write and on_close then find nothing left. The
 * replies of a frame c is executing stay (request.c still packs them). */
static void drop_unwritten(psd_conn *c)
{
    for (wreq *w = c->writes; w; w = w->next) {
        release_rows(c->node, &w->out);
        psw_out_destroy(&w->out);
        psw_out_init(&w->out);
    }
    if (!c->busy) {
        release_rows(c->node, &c->out);
        psw_out_destroy(&c->out);
        psw_out_init(&c->out);
    }
}

/* The node's hook before the rows of `table` in [lo, hi) change: every
 * reply that still references them, built or being written, gets its own
 * copy. A
 * connection that cannot get the memory is closed (its replies never go
 * out, so none carries changed rows). The copies count in
 * max_client_memory before they are made, like any growth: replies owed
 * to clients that do not read would otherwise turn from references into
 * up to max_output of memory each, past the budget; a connection whose
 * copies do not fit is closed instead. A connection closed (uv_close
 * shuts its socket at once, and its writes are cancelled) sends nothing
 * more: it needs no copy (one whose close waits for its read callback
 * still gets them). */
static void detach_rows(void *arg, int table, uintptr_t lo, uintptr_t hi)
{
    psd_conns *set = arg;
    uint64_t max = set->node->cfg.max_client_memory;
    for (psd_conn *c = set->head; c && set->node->row_refs[table]; c = c->next) {
        if (c->closing && !c->close_deferred)
            continue;
        uint64_t need = copies_needed(c, table, lo, hi);
        if (need && set->mem + need > max)
            trim_all(set);
        if (need && set->mem + need > max) {
            /* The copies would be its memory: it is the connection over
             * the budget, not the one pushing (whose receive buffer holds
             * the push). */
            set->node->stats.conns_over_memory++;
            psd_warn_rep("closing connection from %s: its replies not yet "
                        "written hold %llu bytes of rows a push changes, "
                        "whose copies would take the buffers of all %d "
                        "connections to %llu bytes; max_client_memory is "
                        "%llu", c->peer, (unsigned long long)need, set->n,
                        (unsigned long long)(set->mem + need),
                        (unsigned long long)max);
            conn_close(c);
            if (c->closing && !c->close_deferred)
                drop_unwritten(c);
            continue;
        }
        if (need)
            detach_conn(c, table, lo, hi);
    }
}

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    psd_conn *c = w->c;
    if (w->prev)
        w->prev->next = w->next;
    else
        c->writes = w->next;
    if (w->next)
        w->next->prev = w->prev;
    release_rows(c->node, &w->out);
    c->queued -= w->out.total;
    c->queued_mem -= w->mem;
    if (status >= 0)
        c->node->stats.bytes_out += w->out.total - w->sent;
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
            psd_log_rep(PSD_LOG_INFO, "write to %s failed: %s", c->peer,
                        uv_strerror(status));
        conn_close(c);
        return;
    }
    if (c->closing)
        return;
    account(c);
    /* Resume well below the limit so a steady stream does not flap. */
    if (c->paused && !c->shutting &&
        c->queued <= psd_config_output(&c->node->cfg) / 4) {
        c->paused = 0;
        process(c);
        if (!c->paused && !c->closing && !c->yielded) {
            int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
            if (rc) {
                psd_warn("connection from %s: cannot resume reading: %s",
                         c->peer, uv_strerror(rc));
                conn_close(c);
                return;
            }
            /* A frame partly here had no chance to arrive while paused;
             * with none here (the frames that waited have run), no clock
             * runs. */
            if (psw_reader_pending(&c->rd) == 0)
                c->frame_ms = 0;
            else if (c->frame_ms)
                c->frame_ms = uv_now(c->set->loop);
        }
    }
    maybe_finish(c);
}

/* Hands the batched replies to libuv; stops reading (and parsing) while
 * more than max_output bytes wait to be written. */
static void flush(psd_conn *c)
{
    if (c->closing)
        return;
    /* Before anything else: a first frame that ran out of memory left
     * total at 0, and nothing after it could be sent. */
    if (c->out.oom) {
        reject(c, "out of memory building replies");
        return;
    }
    if (c->out.total == 0)
        return;
    /* Journal records go out before the replies that depend on them, and
     * with fsync = always those replies wait for the fsync. */
    psd_node_commit(c->node);
    if (c->ss.need_lsn > c->node->durable_lsn) {
        c->waiting = 1;
        return;
    }
    c->waiting = 0;
    size_t cnt = psw_out_iovcnt(&c->out);
    struct iovec small[16], *iov = cnt <= 16 ? small : malloc(cnt * sizeof *iov);
    if (!iov) {
        reject(c, "out of memory queueing replies");
        return;
    }
    psw_out_iov(&c->out, iov);
    /* With nothing of c's queued in libuv, the replies are written at
     * once. Written whole, they need no write request, and libuv has no
     * write to finish: that spares a system call per reply (libuv 1.44
     * re-arms the socket's epoll registration when a queued write
     * completes), which is a few percent of a small request's round
     * trip. What the kernel does not take goes through uv_write. Not
     * while reading is paused or the connection shuts down: what resumes
     * or finishes it is a queued write completing (on_write). */
    size_t done = 0;
    if (!c->writes && !c->paused && !c->shutting) {
        int n = uv_try_write((uv_stream_t *)&c->tcp, (const uv_buf_t *)iov,
                             (unsigned)cnt);
        if (n < 0 && n != UV_EAGAIN) {
            if (iov != small)
                free(iov);
            psd_log_rep(PSD_LOG_INFO, "write to %s failed: %s", c->peer,
                        uv_strerror(n));
            conn_close(c);
            return;
        }
        done = n > 0 ? (size_t)n : 0;
        c->node->stats.bytes_out += done;
        if (done == c->out.total) {
            if (iov != small)
                free(iov);
            release_rows(c->node, &c->out);
            psw_out_reset(&c->out);
            c->sent_ms = uv_now(c->set->loop);
            account(c);
            return;
        }
    }
    size_t k = psw_iov_skip(iov, done);
    wreq *w = malloc(sizeof *w);
    if (!w) {
        if (iov != small)
            free(iov);
        reject(c, "out of memory queueing replies");
        return;
    }
    w->c = c;
    w->out = c->out;             /* ownership moves to the write request */
    w->mem = out_mem(&w->out);
    w->sent = done;
    if (c->has_spare) {
        c->out = c->spare;
        c->has_spare = 0;
    } else
        psw_out_init(&c->out);
    /* libuv copies the buffer array; the bytes live in w->out. */
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp,
                      (const uv_buf_t *)iov + k, (unsigned)(cnt - k), on_write);
    if (iov != small)
        free(iov);
    if (rc < 0) {
        release_rows(c->node, &w->out);
        psw_out_destroy(&w->out);
        free(w);
        psd_log_rep(PSD_LOG_INFO, "write to %s failed: %s", c->peer,
                    uv_strerror(rc));
        conn_close(c);
        return;
    }
    w->prev = NULL;
    w->next = c->writes;
    if (c->writes)
        c->writes->prev = w;
    c->writes = w;
    c->queued += w->out.total;
    c->queued_mem += w->mem;
    c->sent_ms = uv_now(c->set->loop);
    account(c);
    if (c->queued > psd_config_output(&c->node->cfg))
        pause_reading(c);
}

/* request.c packed a held reply into our output outside of a frame we
 * were handling: send it. */
static void on_answered(psd_session *ss)
{
    psd_conn *c = (psd_conn *)(void *)((char *)ss - offsetof(psd_conn, ss));
    flush(c);
    account(c);
    enforce(c->set);
}

/* ---- HELLO ------------------------------------------------------------ */

/* The HELLO_OK of a refusal: status and reason, and no layout (no node
 * address, no table, epoch 0): a refused peer, maybe one that never
 * authenticated, learns nothing of the cluster from it. The fields a
 * client reads of a refusal keep their meaning. */
static psw_cluster refusal(const psd_conn *c, int status, const char *why)
{
    const psw_cluster *k = &c->node->cluster;
    psw_cluster r;
    memset(&r, 0, sizeof r);
    r.status = status;
    snprintf(r.text, sizeof r.text, "%s", why);
    r.version = k->version;
    r.node_index = 0;
    r.max_frame = k->max_frame;
    r.shards = 1;
    r.heartbeat_ms = k->heartbeat_ms;
    r.peer_timeout_ms = k->peer_timeout_ms;
    r.proof_state = c->version >= 3 ? PSW_PROOF_NIL : PSW_PROOF_ABSENT;
    return r;
}

/* Answers a HELLO with a refusal (refusal()), then closes the connection
 * once the answer is out. */
static void refuse_hello(psd_conn *c, int status, const char *why)
{
    psw_cluster refused = refusal(c, status, why);
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &refused);
    psw_out_frame_end(&c->out);
    psd_warn_rep("refusing %s: %s", c->peer, why);
    c->shutting = 1;
    pause_reading(c);
    flush(c);
    maybe_finish(c);
}

/* Anything wrong before a client has authenticated, on a node with a
 * token: counted by the throttle, logged (collapsed), answered EAUTH. */
static void refuse_auth_as(psd_conn *c, const char *why, int guess)
{
    char text[300];
    psd_auth_failed(c->set->auth, c->ip, c->hello.client_id, c->peer, why,
                    guess,
                    uv_now(c->set->loop));
    snprintf(text, sizeof text, "authentication failed: %s", why);
    c->node->stats.auth_failures++;
    /* refuse_hello logs at warn: the throttled log above says it once. */
    psw_cluster refused = refusal(c, PSW_EAUTH, text);
    psw_out_frame_begin(&c->out);
    psw_pack_hello_ok(&c->out, &refused);
    psw_out_frame_end(&c->out);
    c->shutting = 1;
    pause_reading(c);
    flush(c);
    maybe_finish(c);
}

/* A handshake refused before any proof was checked (malformed, out of
 * order, no token): not a guess, so the address's throttle is left as
 * it is (see psd_auth_failed). */
static void refuse_auth(psd_conn *c, const char *why)
{
    refuse_auth_as(c, why, 0);
}

/* The HELLO is accepted (and the client authenticated, when there is a
 * token): the session starts, HELLO_OK carries the layout (and the
 * server's proof). */
static void finish_hello(psd_conn *c, const psw_hello *h, int authed)
{
    psw_cluster reply;
    char why[200];
    int rc = psd_request_hello(c->node, &c->ss, h, uv_now(c->set->loop),
                               &reply, why, sizeof why);
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
    c->version = h.version;
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
        refuse_auth_as(c, "wrong token (the client's proof does not match)",
                       1);
        return;
    }
    c->authed = psd_auth_succeeded(c->set->auth, c->ip, c->hello.client_id);
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
    uint64_t wait = psd_auth_admit(c->set->auth, c->ip, c->hello.client_id,
                                   uv_now(c->set->loop));
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

/* A parked AUTH's time came: it asks the throttle again, since other
 * connections from its address parked until the same moment and only
 * one of them may be checked then (the others wait for the next delay).
 * Admitted, it is checked and the connection reads on. */
static void unpark(psd_conn *c)
{
    uint64_t wait = psd_auth_admit(c->set->auth, c->ip, c->hello.client_id,
                                   uv_now(c->set->loop));
    if (wait) {
        c->park_until_ms = wait;
        return;
    }
    c->parked = 0;
    check_proof(c);
    if (c->closing || c->shutting)
        return;
    if (!c->paused && !c->yielded) {
        int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
        if (rc) {
            reject(c, "cannot resume reading");
            return;
        }
    }
    process(c);
    /* Nothing was read while parked: the frames pipelined behind the
     * AUTH have run, and a frame partly here starts its clock now. */
    if (psw_reader_pending(&c->rd) == 0)
        c->frame_ms = 0;
    else
        c->frame_ms = uv_now(c->set->loop);
}

/* ---- fairness: a share of each loop turn ------------------------------ */

/* What c has read and executed in the current loop turn. */
static void turn_sync(psd_conn *c)
{
    if (c->turn != c->set->turn) {
        c->turn = c->set->turn;
        c->spent_bytes = 0;
        c->spent_frames = 0;
    }
}

static int turn_spent(psd_conn *c)
{
    turn_sync(c);
    return c->spent_bytes >= TURN_BYTES || c->spent_frames >= TURN_FRAMES;
}

/* c has had its share of this turn: it stops reading (the rest waits in
 * the kernel and in its receive buffer, in order) and goes to the back of
 * the deferred list, which the idle handle resumes on the next turn. */
static void yield_turn(psd_conn *c)
{
    psd_conns *set = c->set;
    if (c->yielded || c->closing || !set->turn_handles)
        return;                  /* shutting down: nothing more is read */
    c->yielded = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->defer_next = NULL;
    if (set->deferred_tail)
        set->deferred_tail->defer_next = c;
    else
        set->deferred = c;
    set->deferred_tail = c;
    if (!uv_is_active((uv_handle_t *)&set->resume_idle))
        uv_idle_start(&set->resume_idle, on_resume);
}

/* The start of a new turn for the connections that yielded: each handles
 * what it has buffered (with a fresh share) and reads again, unless
 * something else (backpressure, the auth throttle, shutdown) stops it. */
static void on_resume(uv_idle_t *h)
{
    psd_conns *set = h->data;
    psd_conn *c = set->deferred;
    set->deferred = set->deferred_tail = NULL;
    while (c) {
        psd_conn *next = c->defer_next;
        c->defer_next = NULL;
        c->yielded = 0;
        if (!c->closing) {
            uint64_t now = uv_now(set->loop), before = c->frames;
            process(c);
            if (!c->yielded && !c->paused && !c->parked && !c->shutting &&
                !c->closing) {
                int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc,
                                       on_read);
                if (rc) {
                    psd_warn("connection from %s: cannot resume reading: %s",
                             c->peer, uv_strerror(rc));
                    conn_close(c);
                }
            }
            /* As on_read: a frame partly here began when the last whole
             * one before it was taken. */
            if (psw_reader_pending(&c->rd) == 0)
                c->frame_ms = 0;
            else if (!c->frame_ms || c->frames != before)
                c->frame_ms = now;
        }
        c = next;
    }
    if (!set->deferred)
        uv_idle_stop(h);
}

static void conns_check(psd_conns *set);

static void on_turn(uv_check_t *h)
{
    psd_conns *set = h->data;
    set->turn++;
    /* After the poll of a turn whose tick came late (psd_conns_tick). */
    if (set->recheck) {
        set->recheck = 0;
        conns_check(set);
    }
}

/* The two handles behind fairness, made on the first accept (so that a
 * node that fails to listen has none to close). */
static void turn_handles_init(psd_conns *set)
{
    if (set->turn_handles)
        return;
    set->turn_handles = 1;
    uv_check_init(set->loop, &set->turn_check);
    set->turn_check.data = set;
    uv_check_start(&set->turn_check, on_turn);
    uv_unref((uv_handle_t *)&set->turn_check);
    uv_idle_init(set->loop, &set->resume_idle);
    set->resume_idle.data = set;
    uv_unref((uv_handle_t *)&set->resume_idle);
}

/* ---- reading ---------------------------------------------------------- */

/* Handles one frame. Returns 0 once it is handled, or 1 when it must wait
 * (its replies do not fit the output budget): it was put back unread and
 * reading stopped until the client reads what it is owed. */
static int handle_frame(psd_conn *c, const char *body, size_t len)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];
    int n;

    msgpack_zone_clear(&c->zone);
    if (psw_frame_decode(body, len, &c->zone, &obj, err, sizeof err) ||
        (n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err)) < 0) {
        /* Before authentication anything wrong is a failed attempt: the
         * throttle counts it and the client learns why (EAUTH). */
        if (!c->hello_done && psd_auth_on(c->set->auth))
            refuse_auth(c, err);
        else
            reject(c, err);
        return 0;
    }
    if (!c->hello_done) {
        c->node->stats.frames++;
        int auth = psd_auth_on(c->set->auth);
        if (n != 1) {
            if (auth)
                refuse_auth(c, "a frame of several messages before "
                            "authentication");
            else
                reject(c, "the first frame must hold one HELLO");
            return 0;
        }
        if (c->challenged)
            handle_auth(c, &msgs[0]);
        else if (c->version && auth)
            refuse_auth(c, "a second HELLO");
        else
            handle_hello(c, &msgs[0]);
        return 0;
    }
    /* Decode every message before applying any, so a malformed message
     * late in a frame cannot leave the frame half applied. */
    psw_msg one, *m = n == 1 ? &one : malloc((size_t)n * sizeof *m);
    if (!m) {
        reject(c, "out of memory decoding a frame");
        return 0;
    }
    int requests = 0;
    for (int i = 0; i < n; i++) {
        int bad = psw_msg_decode(&msgs[i], &m[i], err, sizeof err);
        if (!bad && m[i].op == PSW_OP_REPLY) {
            snprintf(err, sizeof err, "a reply sent to the server");
            bad = 1;
        }
        if (!bad && m[i].op == PSW_OP_OPENED && c->version < 4) {
            snprintf(err, sizeof err, "an OPENED on a connection of "
                     "protocol version %u (it is version 4's)", c->version);
            bad = 1;
        }
        /* The handshake's ops are no request: named as what they are,
         * not as an unknown op. */
        const msgpack_object *o = &msgs[i];
        if (bad && o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size &&
            o->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            uint64_t op = o->via.array.ptr[0].via.u64;
            if (op == PSW_OP_HELLO || op == PSW_OP_AUTH)
                snprintf(err, sizeof err, "a second %s (the connection "
                         "is past its handshake)",
                         op == PSW_OP_HELLO ? "HELLO" : "AUTH");
            else if (op == PSW_OP_HELLO_OK || op == PSW_OP_CHALLENGE)
                snprintf(err, sizeof err, "a %s sent to the server",
                         op == PSW_OP_HELLO_OK ? "HELLO_OK" : "CHALLENGE");
        }
        if (bad) {
            char why[200];
            snprintf(why, sizeof why, "message %d: %s", i, err);
            if (m != &one)
                free(m);
            reject(c, why);
            return 0;
        }
        requests += !psw_op_has(m[i].op, PSW_OPF_SESSION);
    }
    /* The replies must fit the output budget before the frame runs: a
     * frame whose replies would take the output past max_output waits,
     * unread, until the client has read what it is owed (with nothing
     * owed, any frame runs: its replies are bounded by max_frame, an
     * operator's long answer by PSW_ADMIN_REPLY_MAX). */
    uint64_t bound = psd_request_frame_bound(c->node, m, n);
    uint64_t owed = c->out.total + c->queued;
    if (owed > 0 && owed + bound > psd_config_output(&c->node->cfg)) {
        if (m != &one)
            free(m);
        psw_reader_unread(&c->rd);
        pause_reading(c);
        return 1;
    }
    c->node->stats.frames++;
    c->frames++;
    if (requests)
        c->request_ms = uv_now(c->set->loop);
    c->reserve = bound;
    account(c);
    c->busy = 1;                 /* enforce may trim: not this buffer */
    enforce(c->set);
    c->busy = 0;
    if (c->closing) {
        if (m != &one)
            free(m);
        return 0;
    }
    char why[200];
    c->ss.rd = &c->rd;
    c->busy = 1;
    int rc = psd_request_frame(c->node, &c->ss, m, n, uv_now(c->set->loop),
                               why, sizeof why);
    c->busy = 0;
    c->ss.rd = NULL;
    c->reserve = 0;
    if (m != &one)
        free(m);
    msgpack_zone_clear(&c->zone);
    if (rc)
        reject(c, why);
    else
        account(c);
    return 0;
}

/* Handles every complete frame buffered, unless paused by backpressure. */
static void process(psd_conn *c)
{
    const char *body;
    size_t len;
    while (!c->paused && !c->parked && !c->closing && !c->yielded) {
        if (turn_spent(c)) {
            yield_turn(c);
            break;
        }
        int rc = psw_reader_next(&c->rd, &body, &len);
        if (rc == 0)
            break;
        /* A frame that is not whole (a CRC that does not match, a
         * length past the limit) is what a damaged network makes as
         * well as a hostile peer: the connection ends, as after the
         * HELLO, and the client may dial again. Refusing it as an
         * authentication failure made one flipped bit in a handshake
         * lock a client out for good (the client never retries PS_EAUTH)
         * and counted the network's faults as guesses. What an intact
         * frame says before the client authenticated is still judged by
         * the handshake (refuse_auth). */
        if (rc < 0) {
            char why[320], line[96];
            /* A browser, curl or a scraper pointed at the client port
             * was reported as a frame of a gigabyte: say what came. */
            if (!c->hello_done && psw_reader_text(&c->rd, line, sizeof line))
                snprintf(why, sizeof why, "it sent text, not psd's frames: "
                         "\"%s\" (/metrics is served over HTTP %s, not on "
                         "the port psd's clients use)", line,
                         c->node->cfg.nmetrics
                             ? "at [server] metrics_listen's address"
                             : "only when [server] metrics_listen is set");
            else
                snprintf(why, sizeof why, "%s%s", c->rd.why,
                         c->hello_done  ? ""
                         : c->challenged ? " (before AUTH)"
                                         : " (before HELLO)");
            reject(c, why);
            return;
        }
        int wait = handle_frame(c, body, len);
        /* What decoding the frame took (up to 24 bytes per element, 12 MiB
         * under the guard's cap, proto/frame.c) is not in usage(): give it
         * back now, not when a refused frame's handle closes (connections
         * refused in one turn would each hold their own) nor while a frame
         * waits for backpressure. */
        msgpack_zone_clear(&c->zone);
        if (wait)
            break;
        c->spent_bytes += len;
        c->spent_frames++;
        if (c->out.total >= FLUSH_BYTES)
            flush(c);
    }
    flush(c);
    account(c);
    enforce(c->set);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    psd_conn *c = (psd_conn *)h;
    char *p;
    size_t n;
    (void)suggested;
    buf->base = NULL;            /* read_cb gets UV_ENOBUFS */
    buf->len = 0;
    if (c->closing)
        return;
    /* The buffer's growth is counted before it happens. */
    size_t grow = psw_reader_grow(&c->rd);
    if (grow) {
        c->reserve = grow;
        account(c);
        c->in_alloc = 1;
        enforce(c->set);
        c->in_alloc = 0;
        c->reserve = 0;
        if (c->closing)
            return;              /* on_read gets UV_ENOBUFS and closes */
    }
    if (psw_reader_space(&c->rd, &p, &n))
        return;
    account(c);
    buf->base = p;
    /* At most a turn's share per read: the rest stays in the kernel until
     * this connection's next share. */
    buf->len = n;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    psd_conn *c = (psd_conn *)st;
    (void)buf;
    if (c->close_deferred) {
        c->close_deferred = 0;
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return;
    }
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        /* A frame cut short (a client that died mid-write, or one that
         * closed on purpose) can never be whole: it is dropped, and said. */
        size_t part = psw_reader_cut(&c->rd);
        if ((n == UV_EOF || n == UV_ECONNRESET) && part)
            psd_warn_rep("connection from %s closed in the middle of a frame "
                         "(%zu bytes of it came): that frame is dropped, "
                         "nothing of it applied", c->peer, part);
        if (n == UV_ENOBUFS) {
            /* Memory, not the peer's fault: counted with the connections
             * closed for memory, not as a protocol error (212 of them
             * read as malformed frames in the memory trial). */
            c->node->stats.conns_over_memory++;
            psd_warn_rep("closing connection from %s: out of memory for "
                         "the receive buffer", c->peer);
            conn_close(c);
        } else if (n == UV_EOF && c->hello_done) {
            /* The client has nothing more to send; it may have shut down
             * only its side and still read (shutdown(SHUT_WR) after its
             * last request): what it is owed goes out, then we close. */
            c->peer_done = 1;
            c->alive_ms = uv_now(c->set->loop);
            conn_shutdown(c);
        } else {
            if (n != UV_EOF)
                psd_log_rep(PSD_LOG_INFO, "connection from %s: %s", c->peer,
                            uv_strerror((int)n));
            conn_close(c);
        }
        return;
    }
    psw_reader_commit(&c->rd, (size_t)n);
    c->node->stats.bytes_in += (uint64_t)n;
    uint64_t now = uv_now(c->set->loop), before = c->frames;
    c->alive_ms = now;
    turn_sync(c);
    c->spent_bytes += (uint64_t)n;
    process(c);
    /* The clock of a frame that is partly here starts with its first
     * byte: a frame begun in this read (another ended), or a first one. */
    if (psw_reader_pending(&c->rd) == 0)
        c->frame_ms = 0;
    else if (!c->frame_ms || c->frames != before)
        c->frame_ms = now;
}

/* ---- accepting -------------------------------------------------------- */

/* "host:port" of the peer into out, the host alone into ip. An IPv4
 * peer of a dual-stack listener ([::]) is written as IPv4: it read
 * "::ffff:127.0.0.1" in every line, where a grep for 127.0.0.1 found
 * nothing (an addressing trial). */
static void peer_name(uv_tcp_t *t, char *out, size_t cap, char *ip,
                      size_t iplen)
{
    struct sockaddr_storage sa;
    int len = sizeof sa;
    int port = 0;
    snprintf(ip, iplen, "?");
    if (uv_tcp_getpeername(t, (struct sockaddr *)&sa, &len) == 0) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&sa;
        if (sa.ss_family == AF_INET6 &&
            IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
            struct sockaddr_in v4 = { .sin_family = AF_INET,
                                      .sin_port = a6->sin6_port };
            memcpy(&v4.sin_addr, a6->sin6_addr.s6_addr + 12, 4);
            uv_ip4_name(&v4, ip, iplen);
            port = ntohs(v4.sin_port);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
            uv_ip6_name(a, ip, iplen);
            port = ntohs(a->sin6_port);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&sa;
            uv_ip4_name(a, ip, iplen);
            port = ntohs(a->sin_port);
        }
    }
    snprintf(out, cap, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
}

void psd_conns_init(psd_conns *set, uv_loop_t *loop, psd_node *node)
{
    memset(set, 0, sizeof *set);
    set->loop = loop;
    set->node = node;
    set->fd_room = INT_MAX;
    node->detach = detach_rows;
    node->detach_arg = set;
}

/* Whether c may be closed to make room: a connection that has not sent
 * its HELLO for a while, or one that has sent no request for idle_timeout
 * and waits for nothing (no held reply, no reply unwritten) and is not
 * sending one (no byte of a frame here). Workers are kept: closing one
 * would start its grace and could drop it from bsp and ssp tables. */
static int evictable(const psd_conn *c, uint64_t now)
{
    if (c->closing || c->shutting)
        return 0;
    if (!c->hello_done)
        return now - c->accepted_ms >= PRE_HELLO_EVICT_MS;
    return c->ss.worker < 0 && c->ss.held_bytes == 0 && c->queued == 0 &&
           c->out.total == 0 && psw_reader_pending(&c->rd) == 0 &&
           now - c->request_ms >=
               (uint64_t)c->node->cfg.idle_timeout * 1000;
}

/* Closes the connection (from host, when host is not NULL) that has been
 * idle longest, if one may be closed to make room for `for_peer`. Returns
 * whether it did. */
static int evict_idle(psd_conns *set, const psd_conn *newc, const char *host,
                      const char *limit)
{
    uint64_t now = uv_now(set->loop);
    psd_conn *oldest = NULL;
    for (psd_conn *c = set->head; c; c = c->next) {
        if (c == newc || (host && strcmp(c->ip, host)) || !evictable(c, now))
            continue;
        uint64_t since = c->hello_done ? c->request_ms : c->accepted_ms;
        uint64_t best = !oldest ? 0 : oldest->hello_done ? oldest->request_ms
                                                         : oldest->accepted_ms;
        if (!oldest || since < best)
            oldest = c;
    }
    if (!oldest)
        return 0;
    uint64_t since = oldest->hello_done ? oldest->request_ms
                                        : oldest->accepted_ms;
    set->node->stats.conns_evicted++;
    psd_warn_rep("closing connection from %s, "
                "%s for %.1f s, to make room for %s: %s", oldest->peer,
                oldest->hello_done ? "idle" : "without HELLO",
                (double)(now - since) / 1000, newc->peer, limit);
    conn_close(oldest);
    return 1;
}

static void drop_pending(psd_conns *set, uv_stream_t *listener);

static void on_drop_closed(uv_handle_t *h)
{
    psd_conns *set = h->data;
    uv_stream_t *listener = set->drop_waiting;
    set->drop_closing = 0;
    set->drop_waiting = NULL;
    if (listener)
        drop_pending(set, listener);
}

/* Takes the connection pending on listener off it and closes it, for
 * want of memory to serve it. Left pending, it would stop psd accepting
 * for good: libuv 1.44 stops watching a listener whose callback did not
 * call uv_accept until uv_accept is called. While the handle of the
 * previous such connection still closes, this one waits in libuv (which
 * accepts nothing else meanwhile) until on_drop_closed takes it. */
static void drop_pending(psd_conns *set, uv_stream_t *listener)
{
    if (set->drop_closing) {
        set->drop_waiting = listener;
        psd_debug("out of memory accepting a connection: it waits for "
                  "the previous one to close");
        return;
    }
    char peer[64], ip[48];
    uv_tcp_init(set->loop, &set->drop);
    set->drop.data = set;
    set->drop_closing = 1;
    if (uv_accept(listener, (uv_stream_t *)&set->drop) == 0)
        peer_name(&set->drop, peer, sizeof peer, ip, sizeof ip);
    else
        snprintf(peer, sizeof peer, "?");
    psd_error("out of memory accepting a connection from %s: closing it",
              peer);
    uv_close((uv_handle_t *)&set->drop, on_drop_closed);
}

void psd_conn_accept(psd_conns *set, uv_stream_t *listener)
{
    psd_node *node = set->node;
    /* With FD_REFUSING newcomers being refused (a refusal takes a few
     * loop turns to be written and closed), the next is left with libuv
     * (which accepted it from the kernel and holds its descriptor) until
     * one of them has closed (on_close): libuv stops watching a listener
     * whose callback did not take its connection, until uv_accept, so
     * those after it wait in the kernel's listen queue. Taken at once, a
     * burst of newcomers used up the descriptors, and the kernel refused
     * the next ones, which libuv closes unseen. Bounded by the refusals,
     * not by the connections open: a reload that lowered the room under
     * them left every newcomer waiting, none refused nor an idle one
     * closed for it, until a client left. */
    if (set->refusing >= FD_REFUSING) {
        set->accept_waiting = listener;
        return;
    }
    psd_conn *c = calloc(1, sizeof *c);
    if (!c) {
        drop_pending(set, listener);
        return;
    }
    c->set = set;
    c->node = node;
    turn_handles_init(set);
    uv_tcp_init(set->loop, &c->tcp);
    c->next = set->head;
    if (set->head)
        set->head->prev = c;
    set->head = c;
    set->n++;
    psw_reader_init(&c->rd, PRE_HELLO_MAX_FRAME);
    psw_reader_scan(&c->rd, 1);
    msgpack_zone_init(&c->zone, 8192);
    psw_out_init(&c->out);
    c->ss = (psd_session){ .worker = -1, .peer = c->peer, .out = &c->out,
                           .answered = on_answered };
    if (uv_accept(listener, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    peer_name(&c->tcp, c->peer, sizeof c->peer, c->ip, sizeof c->ip);
    c->accepted_ms = c->alive_ms = c->sent_ms = c->request_ms =
        uv_now(set->loop);
    /* Room for a newcomer: over a limit, the connection idle longest
     * (from the same address, for the per-address limit) makes way;
     * with none idle, the newcomer is refused. */
    int open = 0, from_host = 0;
    for (psd_conn *o = set->head; o; o = o->next)
        if (!o->closing) {
            open++;
            from_host += strcmp(o->ip, c->ip) == 0;
        }
    char why[128];
    why[0] = '\0';
    if (from_host > node->cfg.max_connections_per_addr) {
        int v6 = strchr(c->ip, ':') != NULL;
        snprintf(why, sizeof why, "max_connections_per_addr (%d) reached for "
                 "%s%s%s", node->cfg.max_connections_per_addr, v6 ? "[" : "",
                 c->ip, v6 ? "]" : "");
        if (evict_idle(set, c, c->ip, why)) {
            why[0] = '\0';
            open--;
        }
    }
    /* The open files limit may leave room for fewer (server.c): refused
     * the same way, rather than reset by the kernel unseen. */
    int cap = node->cfg.max_connections < set->fd_room
                  ? node->cfg.max_connections : set->fd_room;
    if (!why[0] && open > cap) {
        if (cap == node->cfg.max_connections)
            snprintf(why, sizeof why, "max_connections (%d) reached", cap);
        else
            snprintf(why, sizeof why, "the open files limit leaves room for "
                     "%d connections (max_connections %d)", cap,
                     node->cfg.max_connections);
        if (evict_idle(set, c, NULL, why))
            why[0] = '\0';
    }
    if (why[0]) {
        node->stats.conns_refused++;
        c->refusing = 1;
        set->refusing++;
        /* A typed refusal, so the client knows to come back later rather
         * than seeing a reset. */
        refuse_hello(c, PSW_EBUSY, why);
        account(c);
        return;
    }
    node->stats.conns_accepted++;
    uv_tcp_nodelay(&c->tcp, 1);
    psd_debug("connection from %s", c->peer);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- timers ----------------------------------------------------------- */

/* A PING written on its own, not through c->out. */
typedef struct ping_write {
    uv_write_t req;
    psw_out out;
    psd_node *node;              /* counts the bytes */
} ping_write;

static void on_ping_written(uv_write_t *req, int status)
{
    ping_write *p = (ping_write *)req;
    /* A failed write shows on the reads. */
    if (status >= 0)
        p->node->stats.bytes_out += p->out.total;
    psw_out_destroy(&p->out);
    free(p);
}

/* Sends a frame holding one PING: the peer learns we are alive. While
 * replies wait for the journal's fsync (fsync = always), they hold c->out,
 * and a PING added to them would wait too: a disk that stalls for longer
 * than the clients' peer_timeout_ms would make every client give up on
 * psd and send its requests again. So the PING goes on its own, after
 * what libuv already has: c->out holds whole frames only, none of them
 * handed to libuv yet, so the stream stays a sequence of whole frames. */
static void send_ping(psd_conn *c)
{
    psw_msg ping = { .op = PSW_OP_PING };
    if (!c->waiting) {
        psw_out_frame_begin(&c->out);
        psw_pack_request(&c->out, &ping);
        psw_out_frame_end(&c->out);
        flush(c);
        return;
    }
    ping_write *p = malloc(sizeof *p);
    if (!p)
        return;                  /* the next beat tries again */
    psw_out_init(&p->out);
    p->node = c->node;
    psw_out_frame_begin(&p->out);
    psw_pack_request(&p->out, &ping);
    psw_out_frame_end(&p->out);
    struct iovec iov[4];
    size_t cnt = psw_out_iovcnt(&p->out);
    if (p->out.oom || cnt > 4) {
        psw_out_destroy(&p->out);
        free(p);
        return;
    }
    psw_out_iov(&p->out, iov);
    if (uv_write(&p->req, (uv_stream_t *)&c->tcp, (const uv_buf_t *)iov,
                 (unsigned)cnt, on_ping_written)) {
        psw_out_destroy(&p->out);
        free(p);
        return;
    }
    c->sent_ms = uv_now(c->set->loop);
}

/* The timeouts of every connection (HELLO, silence, a frame arriving),
 * then the PINGs due. */
static void conns_check(psd_conns *set)
{
    const psd_config *cfg = &set->node->cfg;
    uint64_t now = uv_now(set->loop);
    uint64_t hello = (uint64_t)cfg->hello_timeout * 1000;
    uint64_t dead = (uint64_t)cfg->peer_timeout_ms;
    uint64_t beat = (uint64_t)cfg->heartbeat_ms;
    uint64_t whole = (uint64_t)cfg->frame_timeout * 1000;
    psd_conn *last = NULL;
    for (psd_conn *c = set->head, *n; c; c = n) {
        n = c->next;
        last = c;
        if (c->closing)
            continue;
        char why[300];
        if (!c->hello_done) {
            if (c->parked && now >= c->park_until_ms &&
                now - c->accepted_ms < hello)
                continue;        /* its turn: below */
            if (now - c->accepted_ms >= hello && c->parked) {
                /* Its proof never had a turn: said as busy, which a
                 * client retries until its connect_timeout_ms, with the
                 * reason (closed unanswered, a trial's ps_open and psctl
                 * said "no answer to the handshake" and advised a longer
                 * timeout, which did not help). */
                int v6 = strchr(c->ip, ':') != NULL;
                snprintf(why, sizeof why, "its proof waited hello_timeout "
                         "(%d s) for a turn of the authentication throttle: "
                         "wrong proofs from %s%s%s are checked one per "
                         "delay, up to 2 s (a peer there guessing the "
                         "token?)", cfg->hello_timeout, v6 ? "[" : "", c->ip,
                         v6 ? "]" : "");
                c->parked = 0;   /* refused once: the next tick closes it
                                    if the answer is still not out */
                refuse_hello(c, PSW_EBUSY, why);
            } else if (now - c->accepted_ms >= hello) {
                snprintf(why, sizeof why, "no HELLO within %d s",
                         cfg->hello_timeout);
                reject(c, why);
            }
            continue;
        }
        if (now - c->alive_ms >= dead && c->peer_done) {
            /* Not a vanished peer: one that closed its side (a client
             * that gave up waiting for a reply and reconnected) and was
             * owed replies that could not go out since: they wait for
             * the journal, or it reads no more. */
            psd_log_rep(PSD_LOG_INFO, "closing connection from %s: it "
                        "closed its side %llu ms ago, and %s", c->peer,
                        (unsigned long long)(now - c->alive_ms),
                        c->waiting ? "its replies still wait for the journal"
                                   : "has not read what it is owed");
            conn_close(c);
            continue;
        }
        if (now - c->alive_ms >= dead) {
            set->node->stats.peers_lost++;
            psd_warn_rep("closing connection from "
                        "%s: nothing heard for %llu ms (peer_timeout_ms %d): "
                        "presumed dead", c->peer,
                        (unsigned long long)(now - c->alive_ms),
                        cfg->peer_timeout_ms);
            conn_close(c);
            continue;
        }
        /* A frame that stops half-way (or trickles in) would hold its
         * bytes for ever: it has frame_timeout to arrive whole, counted
         * while psd reads the connection. */
        if (!c->paused && c->frame_ms && now - c->frame_ms >= whole) {
            set->node->stats.frames_timed_out++;
            snprintf(why, sizeof why, "a frame has been arriving for %llu s "
                     "(%zu bytes of it here); frame_timeout is %d s",
                     (unsigned long long)((now - c->frame_ms) / 1000),
                     psw_reader_pending(&c->rd), cfg->frame_timeout);
            reject(c, why);
            continue;
        }
        if (now - c->sent_ms >= beat && !c->shutting)
            send_ping(c);
        /* Buffers kept for reuse go back once the connection is quiet. */
        if (now - c->alive_ms >= TRIM_QUIET_MS &&
            now - c->sent_ms >= TRIM_QUIET_MS && c->queued == 0 &&
            ((c->has_spare && out_mem(&c->spare) > TRIM_BYTES) ||
             (psw_reader_pending(&c->rd) == 0 && c->rd.cap > TRIM_BYTES)))
            trim(c);
    }
    /* Proofs whose turn may have come ask the throttle oldest first (the
     * list runs from the newest): among those of one lane the longest
     * waiting is checked, the others wait for the next delay. Newest
     * first, a peer sending a wrong proof at each delay took every turn
     * of its address and the others there were closed at hello_timeout. */
    for (psd_conn *c = last, *p; c; c = p) {
        p = c->prev;
        if (!c->closing && !c->hello_done && c->parked &&
            now >= c->park_until_ms && now - c->accepted_ms < hello)
            unpark(c);
    }
    psd_log_flush();
}

void psd_conns_tick(psd_conns *set)
{
    uint64_t now = uv_now(set->loop);
    psd_auth_tick(set->auth, now);
    /* A tick more than two periods late comes after the loop's own stall
     * (a sparse shard's hash table doubling, a long apply): nothing was
     * read meanwhile, and what peers sent waits unread, since timers run
     * before the loop polls. Judged now, healthy peers were closed as
     * "presumed dead" (a node stalled 23 s lost every client, a worker's
     * loss beginning its grace). The checks then wait for this turn's
     * poll, which reads what they sent: on_turn runs them right after it.
     * A loop slow at every turn still checks at every turn. */
    uint64_t period = set->tick_period ? set->tick_period : 250;
    uint64_t gap = set->tick_ms ? now - set->tick_ms : 0;
    set->tick_ms = now;
    if (gap > 2 * period && set->turn_handles) {
        if (gap >= 1000 && set->node->writer_forked)
            psd_warn_rep("the event loop was blocked for %llu ms (a "
                         "snapshot writer runs: the first write to each "
                         "page of the tables since its fork copies that "
                         "page, so pushes run slower until most are copied; "
                         "docs/durability.md, \"The forked writer\"): "
                         "connections are judged once what they sent "
                         "meanwhile is read", (unsigned long long)gap);
        else if (gap >= 1000)
            psd_warn_rep("the event loop was blocked for %llu ms (a long "
                         "request, a sparse table growing, or psd not "
                         "running: stopped, or short of CPU): connections "
                         "are judged once what they sent meanwhile is read",
                         (unsigned long long)gap);
        set->recheck = 1;
        return;
    }
    conns_check(set);
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
    /* The owner has closed the listener, and with it the connection
     * libuv held for it: nothing is left to take off it. */
    set->drop_waiting = NULL;
    set->accept_waiting = NULL;
    if (set->turn_handles) {
        set->turn_handles = 0;
        uv_close((uv_handle_t *)&set->turn_check, NULL);
        uv_close((uv_handle_t *)&set->resume_idle, NULL);
    }
    for (psd_conn *c = set->head, *n; c; c = n) {
        n = c->next;
        conn_shutdown(c);
    }
}
