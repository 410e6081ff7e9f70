/* The fault-injection proxy of tests/faultproxy.h: a libuv loop on its
 * own thread, one upstream connection per accepted one, and per direction
 * a frame cutter that decides each frame's fate from a seeded PRNG. */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "faultproxy.h"

#define READ_SIZE 65536
/* Bytes queued toward a receiver (waiting or being written) above which
 * the sender is no longer read, so a slow receiver slows the sender down
 * as it would without the proxy, instead of growing the proxy's memory. */
#define HIGH_WATER ((size_t)4 << 20)
/* A stored frame's buffer starts at most this large and doubles up to the
 * frame's size, so a frame's length alone never allocates much. */
#define FIRST_CAP ((size_t)1 << 20)

/* Bytes on their way to the receiver: a whole frame or a chunk. */
typedef struct unit {
    struct unit *next;
    struct fpipe *pp;
    uint64_t due_ns;         /* not written before this uv_hrtime() */
    uv_write_t req;
    int reset_after;         /* cut_after fired inside this unit */
    size_t len, cap;
    char data[];
} unit;

/* One direction of one connection: reads src, writes dst. */
typedef struct fpipe {
    struct conn *c;
    int dir;
    uv_tcp_t *src, *dst;
    uv_timer_t timer;        /* fires when the queue's head is due */
    uint64_t rng, jrng;      /* frame decisions; jitter */
    /* The frame being cut out of the stream. */
    unsigned char hdr[4];
    unsigned hdr_have;
    int in_frame, store, untouched, raw;
    uint64_t body_len, body_have;
    uint64_t started;        /* frames started on this pipe */
    unit *cur;               /* the stored frame so far */
    unit *held;              /* a reordered frame waiting for the next */
    int held_copies;
    /* Output. */
    unit *qhead, *qtail;     /* waiting for their due time, in order */
    uint64_t last_due;
    size_t queued;           /* bytes in the queue or being written */
    int reading, eof, swallowed, shut, done;
    uv_shutdown_t shut_req;
    char rbuf[READ_SIZE];
} fpipe;

typedef struct conn {
    fp_proxy *p;
    struct conn *prev, *next;
    uv_tcp_t client, server;
    uv_connect_t creq;
    fpipe pipe[2];
    int connected, closing, handles;
    int cutting;             /* cut_after fired: write nothing more */
} conn;

struct fp_proxy {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t wake;
    uv_thread_t thread;
    struct sockaddr_storage target;
    int port;
    uint64_t seed, next_id;
    conn *conns;             /* loop thread only */
    /* The lock guards everything below; the loop thread takes it for
     * short copies only, never across a libuv call. */
    uv_mutex_t lock;
    uv_cond_t cond;
    fp_faults faults[2];
    int cut_armed[2];
    uint64_t cut_left[2];
    int refuse, stop, reset_req;
    uint64_t req_gen, done_gen;
    fp_counts counts;
};

#define LOCKED(p, stmt)                                                    \
    do {                                                                   \
        uv_mutex_lock(&(p)->lock);                                         \
        stmt;                                                              \
        uv_mutex_unlock(&(p)->lock);                                       \
    } while (0)

/* ---- randomness ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), so a probability of 1.0 always hits. */
static double rnd01(uint64_t *s)
{
    return (double)(splitmix64(s) >> 11) * 0x1.0p-53;
}

/* Draws only for a fault that is on, so the pattern of, say, drop 0.2
 * depends on the seed and the frames alone, not on fields left at 0. */
static int chance(uint64_t *s, double prob)
{
    return prob > 0 && rnd01(s) < prob;
}

static fp_faults faults_of(fp_proxy *p, int dir)
{
    fp_faults f;
    LOCKED(p, f = p->faults[dir]);
    return f;
}

static int frame_faults_on(const fp_faults *f)
{
    return f->drop > 0 || f->dup > 0 || f->reorder > 0 || f->corrupt > 0 ||
           f->blackhole;
}

/* ---- units ----------------------------------------------------------- */

static unit *unit_new(fpipe *pp, const void *data, size_t len, size_t cap)
{
    unit *u = malloc(sizeof *u + cap);
    if (!u)
        return NULL;
    memset(u, 0, sizeof *u);
    u->pp = pp;
    u->cap = cap;
    u->len = len;
    if (len)
        memcpy(u->data, data, len);
    return u;
}

static void unit_list_free(unit *u)
{
    while (u) {
        unit *next = u->next;
        free(u);
        u = next;
    }
}

/* ---- connections ----------------------------------------------------- */

static void conn_reset(conn *c);
static void pipe_flush(fpipe *pp);

/* Frees what the connection still holds once its handles are closed. */
static void conn_free(conn *c)
{
    for (int d = 0; d < 2; d++) {
        fpipe *pp = &c->pipe[d];
        unit_list_free(pp->qhead);
        free(pp->cur);
        free(pp->held);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        c->p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn *c = ((fpipe *)h->data)->c;
    if (--c->handles == 0)
        conn_free(c);
}

/* Closes the connection's four handles; with rst, both sockets first get
 * SO_LINGER {1, 0} so the close sends RST (what uv_tcp_close_reset does,
 * but that refuses a handle with a shutdown pending). */
static void conn_close_handles(conn *c, int rst)
{
    uv_tcp_t *tcp[2] = { &c->client, &c->server };
    for (int i = 0; i < 2; i++) {
        uv_os_fd_t fd;
        if (rst && uv_fileno((uv_handle_t *)tcp[i], &fd) == 0) {
            struct linger l = { 1, 0 };
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        uv_close((uv_handle_t *)tcp[i], on_conn_handle_closed);
    }
    uv_close((uv_handle_t *)&c->pipe[0].timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->pipe[1].timer, on_conn_handle_closed);
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    LOCKED(c->p, c->p->counts.open--);
    conn_close_handles(c, 0);
}

static void conn_reset(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    LOCKED(c->p, (c->p->counts.open--, c->p->counts.reset++));
    conn_close_handles(c, 1);
}

/* ---- reading --------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    fpipe *pp = h->data;
    *buf = uv_buf_init(pp->rbuf, sizeof pp->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

/* Reads the pipe's source when nothing holds it back: the connection is
 * up, the source has not ended, no pause, the receiver keeps up. */
static void pipe_update_reading(fpipe *pp)
{
    conn *c = pp->c;
    fp_faults f = faults_of(c->p, pp->dir);
    int want = c->connected && !c->closing && !pp->eof && !f.pause &&
               pp->queued < HIGH_WATER;
    if (want && !pp->reading) {
        if (uv_read_start((uv_stream_t *)pp->src, on_alloc, on_read) == 0)
            pp->reading = 1;
    } else if (!want && pp->reading) {
        uv_read_stop((uv_stream_t *)pp->src);
        pp->reading = 0;
    }
}

/* ---- writing --------------------------------------------------------- */

static void maybe_shutdown(fpipe *pp);

static void on_written(uv_write_t *req, int status)
{
    unit *u = req->data;
    fpipe *pp = u->pp;
    conn *c = pp->c;
    int reset = u->reset_after;
    pp->queued -= u->len;
    free(u);
    if (c->closing)
        return;              /* cancelled by the close */
    if (status < 0 || reset) {
        conn_reset(c);
        return;
    }
    pipe_update_reading(pp);
    maybe_shutdown(pp);
}

/* Writes a due unit, or the part of it cut_after still allows and then
 * resets the connection once those bytes are out. */
static void write_unit(fpipe *pp, unit *u)
{
    fp_proxy *p = pp->c->p;
    size_t len = u->len;
    uv_mutex_lock(&p->lock);
    if (p->cut_armed[pp->dir]) {
        if (p->cut_left[pp->dir] <= len) {
            len = (size_t)p->cut_left[pp->dir];
            p->cut_armed[pp->dir] = 0;
            u->reset_after = 1;
            pp->c->cutting = 1;
        } else {
            p->cut_left[pp->dir] -= len;
        }
    }
    p->counts.dir[pp->dir].bytes_out += len;
    uv_mutex_unlock(&p->lock);
    if (u->reset_after && len == 0) {
        pp->queued -= u->len;
        free(u);
        conn_reset(pp->c);
        return;
    }
    uv_buf_t b = uv_buf_init(u->data, (unsigned)len);
    u->req.data = u;
    if (uv_write(&u->req, (uv_stream_t *)pp->dst, &b, 1, on_written) != 0) {
        pp->queued -= u->len;
        free(u);
        conn_reset(pp->c);
    }
}

static void on_due(uv_timer_t *t)
{
    pipe_flush(t->data);
}

/* Writes every unit that is due, in order, and arms the timer for the
 * next one; sends FIN when the source has ended and nothing is left. */
static void pipe_flush(fpipe *pp)
{
    uint64_t now = uv_hrtime();
    while (pp->qhead && pp->qhead->due_ns <= now && !pp->c->closing &&
           !pp->c->cutting) {
        unit *u = pp->qhead;
        pp->qhead = u->next;
        if (!pp->qhead)
            pp->qtail = NULL;
        u->next = NULL;
        write_unit(pp, u);
    }
    if (pp->c->closing || pp->c->cutting)
        return;
    if (pp->qhead) {
        /* Whole milliseconds, rounded up, plus one: the loop's clock is
         * truncated to the millisecond, and a unit is never early. */
        uint64_t ms = (pp->qhead->due_ns - now + 999999) / 1000000 + 1;
        uv_timer_start(&pp->timer, on_due, ms, 0);
    } else {
        maybe_shutdown(pp);
    }
}

/* Queues u (taken) to be written after the delay, never before a unit
 * queued earlier. */
static void enqueue(fpipe *pp, const fp_faults *f, unit *u, int untouched)
{
    uint64_t now = uv_hrtime(), due = now;
    if (!untouched && (f->delay_ms || f->jitter_ms)) {
        int64_t ms = f->delay_ms;
        if (f->jitter_ms)
            ms += (int64_t)(splitmix64(&pp->jrng) %
                            (2 * (uint64_t)f->jitter_ms + 1)) -
                  (int64_t)f->jitter_ms;
        due += (uint64_t)(ms > 0 ? ms : 0) * 1000000;
    }
    if (due < pp->last_due)
        due = pp->last_due;  /* order is kept whatever the jitter */
    pp->last_due = due;
    u->due_ns = due;
    if (pp->qtail)
        pp->qtail->next = u;
    else
        pp->qhead = u;
    pp->qtail = u;
    pp->queued += u->len;
    if (pp->qhead == u)
        pipe_flush(pp);
}

/* Our FIN went out; when both directions have ended, close. */
static void on_shutdown(uv_shutdown_t *req, int status)
{
    fpipe *pp = req->data;
    conn *c = pp->c;
    if (c->closing)
        return;
    if (status < 0) {
        conn_reset(c);
        return;
    }
    pp->done = 1;
    if (c->pipe[0].done && c->pipe[1].done)
        conn_close(c);
}

/* FIN for FIN: once the source has ended and everything before it is
 * written (libuv orders the shutdown after pending writes). */
static void maybe_shutdown(fpipe *pp)
{
    if (!pp->eof || pp->swallowed || pp->shut || pp->qhead ||
        pp->c->closing || pp->c->cutting)
        return;
    pp->shut = 1;
    pp->shut_req.data = pp;
    if (uv_shutdown(&pp->shut_req, (uv_stream_t *)pp->dst, on_shutdown) != 0)
        conn_reset(pp->c);
}

/* ---- frames ---------------------------------------------------------- */

/* Bumps one counter of the pipe's direction. */
#define COUNT(pp, field)                                                   \
    LOCKED((pp)->c->p, (pp)->c->p->counts.dir[(pp)->dir].field++)

/* Passes n bytes on as they came (a copy), or discards them into the
 * blackhole. */
static void chunk(fpipe *pp, const fp_faults *f, const void *data, size_t n,
                  int untouched)
{
    if (f->blackhole || n == 0)
        return;
    unit *u = unit_new(pp, data, n, n);
    if (!u) {
        conn_reset(pp->c);
        return;
    }
    enqueue(pp, f, u, untouched);
}

/* Queues a whole frame (taking u), twice when it was duplicated. */
static void send_frame(fpipe *pp, const fp_faults *f, unit *u, int copies)
{
    unit *twin = copies == 2 ? unit_new(pp, u->data, u->len, u->len) : NULL;
    enqueue(pp, f, u, 0);
    COUNT(pp, forwarded);
    if (twin) {
        enqueue(pp, f, twin, 0);
        COUNT(pp, forwarded);
    }
}

/* Sends the frame that reorder held back, if any. */
static void release_held(fpipe *pp, const fp_faults *f)
{
    if (!pp->held)
        return;
    unit *u = pp->held;
    pp->held = NULL;
    send_frame(pp, f, u, pp->held_copies);
}

/* A frame's first byte: it is stored whole only when a frame fault may
 * act on it; otherwise its bytes pass on as they arrive, so the proxy adds
 * no latency of its own in transparent mode. */
static void frame_begin(fpipe *pp, const fp_faults *f)
{
    pp->in_frame = 1;
    pp->untouched = pp->started++ < f->skip_frames;
    pp->store = !pp->untouched && frame_faults_on(f);
}

/* Bytes of the current frame: kept when it is stored whole, passed on
 * at once otherwise. The header is kept in pp->hdr either way. */
static void frame_part(fpipe *pp, const fp_faults *f, const char *data,
                       size_t n, int header)
{
    if (!pp->store) {
        chunk(pp, f, data, n, pp->untouched);
        return;
    }
    if (header || !pp->cur)
        return;
    unit *u = pp->cur;
    if (u->len + n > u->cap) {
        size_t cap = u->cap * 2;
        size_t whole = (size_t)(4 + pp->body_len);
        if (cap < u->len + n)
            cap = u->len + n;
        if (cap > whole)
            cap = whole;
        unit *bigger = realloc(u, sizeof *u + cap);
        if (!bigger) {
            conn_reset(pp->c);
            return;
        }
        u = pp->cur = bigger;
        u->cap = cap;
    }
    memcpy(u->data + u->len, data, n);
    u->len += n;
}

/* The header is complete: start buffering the body, or fall back to raw
 * bytes for a length larger than anything the proxy will buffer. */
static void frame_header(fpipe *pp, const fp_faults *f)
{
    pp->body_len = (uint64_t)pp->hdr[0] << 24 | (uint64_t)pp->hdr[1] << 16 |
                   (uint64_t)pp->hdr[2] << 8 | pp->hdr[3];
    pp->body_have = 0;
    if (pp->body_len > FP_MAX_FRAME) {
        pp->raw = 1;
        pp->in_frame = 0;
        COUNT(pp, passthrough);
        release_held(pp, f);
        if (pp->store)
            chunk(pp, f, pp->hdr, 4, 0);
        return;
    }
    if (pp->store) {
        size_t whole = (size_t)(4 + pp->body_len);
        pp->cur = unit_new(pp, pp->hdr, 4,
                           whole < FIRST_CAP ? whole : FIRST_CAP);
        if (!pp->cur)
            conn_reset(pp->c);
    }
}

/* A whole frame has been read: decide its fate. */
static void frame_end(fpipe *pp, const fp_faults *f)
{
    pp->in_frame = 0;
    pp->hdr_have = 0;
    COUNT(pp, frames);
    if (!pp->store) {
        if (f->blackhole) {
            COUNT(pp, blackholed);
        } else {
            COUNT(pp, forwarded);
            release_held(pp, f);
        }
        return;
    }
    unit *u = pp->cur;
    pp->cur = NULL;
    if (!u)
        return;              /* out of memory: the connection is resetting */
    if (f->blackhole) {
        free(u);
        COUNT(pp, blackholed);
        return;
    }
    if (chance(&pp->rng, f->drop)) {
        free(u);
        COUNT(pp, dropped);
        return;
    }
    if (chance(&pp->rng, f->corrupt) && pp->body_len > 0) {
        uint64_t at = 4 + splitmix64(&pp->rng) % pp->body_len;
        unsigned bit = (unsigned)(splitmix64(&pp->rng) % 8);
        ((unsigned char *)u->data)[at] ^= (unsigned char)(1u << bit);
        COUNT(pp, corrupted);
    }
    int copies = 1;
    if (chance(&pp->rng, f->dup)) {
        copies = 2;
        COUNT(pp, duplicated);
    }
    /* A frame that arrives while another is held is the one the held
     * frame goes after, so it is never held itself: 1.0 swaps pairs. */
    if (!pp->held && chance(&pp->rng, f->reorder)) {
        pp->held = u;
        pp->held_copies = copies;
        COUNT(pp, reordered);
        return;
    }
    send_frame(pp, f, u, copies);
    release_held(pp, f);
}

/* Cuts n bytes of the stream into frames and acts on them. */
static void feed(fpipe *pp, const fp_faults *f, const char *data, size_t n)
{
    while (n > 0 && !pp->c->closing) {
        if (pp->raw) {
            chunk(pp, f, data, n, 0);
            return;
        }
        if (!pp->in_frame)
            frame_begin(pp, f);
        size_t k;
        if (pp->hdr_have < 4) {
            k = 4 - pp->hdr_have < n ? 4 - pp->hdr_have : n;
            memcpy(pp->hdr + pp->hdr_have, data, k);
            frame_part(pp, f, data, k, 1);
            pp->hdr_have += (unsigned)k;
            if (pp->hdr_have == 4) {
                frame_header(pp, f);
                if (!pp->raw && pp->body_len == 0)
                    frame_end(pp, f);
            }
        } else {
            uint64_t left = pp->body_len - pp->body_have;
            k = left < n ? (size_t)left : n;
            frame_part(pp, f, data, k, 0);
            pp->body_have += k;
            if (pp->body_have == pp->body_len)
                frame_end(pp, f);
        }
        data += k;
        n -= k;
    }
}

/* The source sent FIN: pass on what is held (a reordered frame, the
 * bytes of a frame cut short), then FIN, unless the blackhole eats it. */
static void pipe_eof(fpipe *pp)
{
    fp_faults f = faults_of(pp->c->p, pp->dir);
    pp->eof = 1;
    pp->reading = 0;         /* libuv stops reading at EOF */
    if (f.blackhole) {
        pp->swallowed = 1;
        return;
    }
    release_held(pp, &f);
    if (pp->cur) {
        enqueue(pp, &f, pp->cur, 1);
        pp->cur = NULL;
    } else if (pp->in_frame && pp->store && pp->hdr_have < 4) {
        chunk(pp, &f, pp->hdr, pp->hdr_have, 1);
    }
    pipe_flush(pp);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    fpipe *pp = s->data;
    conn *c = pp->c;
    if (n == 0 || c->closing)
        return;
    if (n < 0) {
        if (n == UV_EOF) {
            pipe_eof(pp);
        } else if (faults_of(c->p, pp->dir).blackhole) {
            uv_read_stop(s);     /* swallowed like everything else */
            pp->reading = 0;
            pp->eof = pp->swallowed = 1;
        } else {
            conn_reset(c);       /* RST for RST */
        }
        return;
    }
    fp_faults f = faults_of(c->p, pp->dir);
    LOCKED(c->p, c->p->counts.dir[pp->dir].bytes_in += (uint64_t)n);
    feed(pp, &f, buf->base, (size_t)n);
    if (!c->closing)
        pipe_update_reading(pp);
}

/* ---- accepting ------------------------------------------------------- */

static void on_connected(uv_connect_t *req, int status)
{
    conn *c = req->data;
    if (c->closing)
        return;
    if (status < 0) {
        conn_reset(c);       /* the client sees RST: nobody is there */
        return;
    }
    c->connected = 1;
    pipe_update_reading(&c->pipe[0]);
    pipe_update_reading(&c->pipe[1]);
}

/* Sets up one direction; its PRNG depends only on the seed, the
 * connection's number and the direction, so runs can be replayed. */
static void pipe_init(conn *c, int dir, uv_tcp_t *src, uv_tcp_t *dst)
{
    fp_proxy *p = c->p;
    fpipe *pp = &c->pipe[dir];
    uint64_t t = p->next_id * 2 + (uint64_t)dir;
    pp->c = c;
    pp->dir = dir;
    pp->src = src;
    pp->dst = dst;
    pp->rng = p->seed + splitmix64(&t);
    pp->jrng = pp->rng ^ 0x6a09e667f3bcc909ULL;
    src->data = pp;
    uv_timer_init(&p->loop, &pp->timer);
    pp->timer.data = pp;
}

static void on_refused_closed(uv_handle_t *h)
{
    free(h);
}

/* A new client: refused at once, or given its own upstream connection.
 * The client is read only once the upstream connection is up. */
static void on_connection(uv_stream_t *listener, int status)
{
    fp_proxy *p = listener->data;
    if (status < 0)
        return;
    int refuse;
    LOCKED(p, refuse = p->refuse);
    if (refuse) {
        uv_tcp_t *t = malloc(sizeof *t);
        if (!t)
            return;
        uv_tcp_init(&p->loop, t);
        if (uv_accept(listener, (uv_stream_t *)t) == 0)
            LOCKED(p, p->counts.refused++);
        uv_close((uv_handle_t *)t, on_refused_closed);
        return;
    }
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->p = p;
    uv_tcp_init(&p->loop, &c->client);
    uv_tcp_init(&p->loop, &c->server);
    pipe_init(c, FP_UP, &c->client, &c->server);
    pipe_init(c, FP_DOWN, &c->server, &c->client);
    c->handles = 4;
    p->next_id++;
    c->next = p->conns;
    if (p->conns)
        p->conns->prev = c;
    p->conns = c;
    if (uv_accept(listener, (uv_stream_t *)&c->client) != 0) {
        c->closing = 1;
        conn_close_handles(c, 0);
        return;
    }
    LOCKED(p, (p->counts.accepted++, p->counts.open++));
    /* Requests and replies are small and latency-bound (PROTOCOL.md §1). */
    uv_tcp_nodelay(&c->client, 1);
    uv_tcp_nodelay(&c->server, 1);
    c->creq.data = c;
    if (uv_tcp_connect(&c->creq, &c->server,
                       (const struct sockaddr *)&p->target, on_connected))
        conn_reset(c);
}

/* ---- the loop thread ------------------------------------------------- */

/* Applies what the API asked for: stop, reset everything, a new pause
 * setting; then tells the waiting caller it is done. */
static void on_wake(uv_async_t *a)
{
    fp_proxy *p = a->data;
    uint64_t gen;
    int stop, reset;
    uv_mutex_lock(&p->lock);
    gen = p->req_gen;
    stop = p->stop;
    reset = p->reset_req;
    p->reset_req = 0;
    uv_mutex_unlock(&p->lock);
    if (stop) {
        for (conn *c = p->conns; c; c = c->next)
            conn_close(c);
        uv_close((uv_handle_t *)&p->listener, NULL);
        uv_close((uv_handle_t *)&p->wake, NULL);
        return;
    }
    for (conn *c = p->conns; c; c = c->next) {
        if (reset)
            conn_reset(c);
        if (!c->closing) {   /* a pause set or cleared */
            pipe_update_reading(&c->pipe[0]);
            pipe_update_reading(&c->pipe[1]);
        }
    }
    uv_mutex_lock(&p->lock);
    p->done_gen = gen;
    uv_cond_broadcast(&p->cond);
    uv_mutex_unlock(&p->lock);
}

static void loop_thread(void *arg)
{
    fp_proxy *p = arg;
    /* A write to a peer that reset raises SIGPIPE in this thread; blocked
     * here, it stays pending and the write fails with EPIPE instead. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    uv_run(&p->loop, UV_RUN_DEFAULT);
}

/* Asks the loop thread to look at the settings and waits until it has. */
static void wake_and_wait(fp_proxy *p)
{
    uint64_t gen = ++p->req_gen;
    uv_async_send(&p->wake);
    while (p->done_gen < gen)
        uv_cond_wait(&p->cond, &p->lock);
}

/* ---- the API --------------------------------------------------------- */

static int resolve(const char *host, int port, struct sockaddr_storage *out)
{
    char service[16];
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc)
        return rc;
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

fp_proxy *fp_start(const char *target_host, int target_port, uint64_t seed,
                   char *err, size_t errlen)
{
    return fp_start_at(0, target_host, target_port, seed, err, errlen);
}

fp_proxy *fp_start_at(int listen_port, const char *target_host,
                      int target_port, uint64_t seed, char *err,
                      size_t errlen)
{
    fp_proxy *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->seed = seed;
    int rc = resolve(target_host, target_port, &p->target);
    if (rc) {
        snprintf(err, errlen, "%s:%d: %s", target_host, target_port,
                 gai_strerror(rc));
        free(p);
        return NULL;
    }
    const char *what = "uv_loop_init";
    if ((rc = uv_loop_init(&p->loop)) != 0) {
        snprintf(err, errlen, "%s: %s", what, uv_strerror(rc));
        free(p);
        return NULL;
    }
    struct sockaddr_in at;
    struct sockaddr_storage bound;
    int len = sizeof bound;
    uv_tcp_init(&p->loop, &p->listener);
    p->listener.data = p;
    uv_ip4_addr("127.0.0.1", listen_port, &at);
    if ((rc = uv_tcp_bind(&p->listener, (const struct sockaddr *)&at, 0)))
        what = "bind";
    else if ((rc = uv_listen((uv_stream_t *)&p->listener, 128, on_connection)))
        what = "listen";
    else if ((rc = uv_tcp_getsockname(&p->listener, (struct sockaddr *)&bound,
                                      &len)))
        what = "getsockname";
    if (rc) {
        snprintf(err, errlen, "%s 127.0.0.1:%d: %s", what, listen_port,
                 uv_strerror(rc));
        uv_close((uv_handle_t *)&p->listener, NULL);
        uv_run(&p->loop, UV_RUN_DEFAULT);
        uv_loop_close(&p->loop);
        free(p);
        return NULL;
    }
    p->port = ntohs(((const struct sockaddr_in *)&bound)->sin_port);
    uv_async_init(&p->loop, &p->wake, on_wake);
    p->wake.data = p;
    uv_mutex_init(&p->lock);
    uv_cond_init(&p->cond);
    if ((rc = uv_thread_create(&p->thread, loop_thread, p)) != 0) {
        snprintf(err, errlen, "uv_thread_create: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)&p->listener, NULL);
        uv_close((uv_handle_t *)&p->wake, NULL);
        uv_run(&p->loop, UV_RUN_DEFAULT);
        uv_loop_close(&p->loop);
        uv_cond_destroy(&p->cond);
        uv_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    return p;
}

int fp_port(const fp_proxy *p)
{
    return p->port;
}

void fp_set(fp_proxy *p, int dir, const fp_faults *f)
{
    uv_mutex_lock(&p->lock);
    for (int d = 0; d < 2; d++) {
        if (dir != FP_BOTH && dir != d)
            continue;
        p->faults[d] = *f;
        p->cut_armed[d] = f->cut_after > 0;
        p->cut_left[d] = f->cut_after;
    }
    wake_and_wait(p);
    uv_mutex_unlock(&p->lock);
}

void fp_reset_all(fp_proxy *p)
{
    uv_mutex_lock(&p->lock);
    p->reset_req = 1;
    wake_and_wait(p);
    uv_mutex_unlock(&p->lock);
}

void fp_refuse(fp_proxy *p, int on)
{
    LOCKED(p, p->refuse = on);
}

void fp_stats(const fp_proxy *p, fp_counts *out)
{
    fp_proxy *q = (fp_proxy *)p;    /* the lock changes; the counts do not */
    LOCKED(q, *out = q->counts);
}

void fp_stop(fp_proxy *p)
{
    if (!p)
        return;
    LOCKED(p, p->stop = 1);
    uv_async_send(&p->wake);
    uv_thread_join(&p->thread);
    if (uv_loop_close(&p->loop) != 0)
        fprintf(stderr, "faultproxy: a handle outlived fp_stop\n");
    uv_cond_destroy(&p->cond);
    uv_mutex_destroy(&p->lock);
    free(p);
}
