/* The /metrics HTTP listener; see metrics.h. */
#define _DEFAULT_SOURCE            /* TIOCOUTQ */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>

#include "log.h"
#include "metrics.h"
#include "../proto/status.h"

#define REQ_MAX 8192
#define TIMEOUT_MS 5000
#define MAX_OPEN 16
#define BACKLOG 64               /* connections the kernel queues for us */
_Static_assert(PSD_METRICS_FDS == MAX_OPEN + 2 * BACKLOG + 1,
               "metrics.h's count of descriptors");
#define STOP_GRACE_MS 1000       /* for a request begun when psd stops */
#define SAMPLE_MS 100            /* how often answers' progress is read */
#define LINGER_MS 2000           /* reading what follows an answer, */
#define LINGER_BYTES (256 << 10) /* and at most this much of it */
/* A body that took the loop CACHE_MIN_NS or more of its CPU time to
 * build is served again to the scrapes of the next CACHE_TIMES times
 * that long (at most CACHE_MAX_NS): a node of 4096 tables took 80 ms per
 * scrape, and four scrapers kept a small pull's p99 at 0.5 s. A small
 * node's body is built for every scrape, as fresh as its counters: CPU
 * time, not the clock's, so that a loop preempted on a busy machine
 * does not make a 0.1 ms body look costly (a test that scraped right
 * after a push read the figures from before it). */
#define CACHE_MIN_NS 5000000ull
#define CACHE_TIMES 10
#define CACHE_MAX_NS 1000000000ull

/* A body, shared by the connections writing it and the cache. */
typedef struct mbody {
    int refs;
    size_t len;
    char *text;
} mbody;

typedef struct mconn {
    psd_metrics *m;
    struct mconn *prev, *next;   /* m->head's list, while not closing */
    int answered;                /* a response is being written */
    uint64_t left;               /* bytes of it its peer had not taken at
                                    the last look (libuv's queue and the
                                    kernel's) */
    uint64_t moved_ms;           /* when that last shrank (or the answer
                                    began) */
    int head;                    /* a HEAD request: the headers only */
    int error;                   /* the answer is an error (not 200) */
    int lingering;               /* answered; what comes is dropped */
    size_t dropped;              /* the bytes dropped so far */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    uv_shutdown_t sd;
    char req[REQ_MAX];
    size_t len;
    char resp[256];              /* the headers, or a short error's all */
    mbody *body;                 /* the figures written, or NULL */
    int closing, closed;         /* handles closed so far, of 2 */
} mconn;

static void body_drop(mbody *b)
{
    if (b && --b->refs == 0) {
        free(b->text);
        free(b);
    }
}

static void on_closed(uv_handle_t *h)
{
    mconn *c = h->data;
    if (++c->closed == 2) {
        c->m->open--;
        body_drop(c->body);
        free(c);
    }
}

static void mclose(mconn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->m->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, on_closed);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}

static void on_timeout(uv_timer_t *t);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_shut(uv_shutdown_t *r, int status)
{
    mconn *c = r->data;
    if (status < 0 || c->closing) {
        mclose(c);
        return;
    }
    c->lingering = 1;
    c->len = 0;
    /* Not past a stop's grace (psd_metrics_stop closed the listener). */
    uv_timer_start(&c->timer, on_timeout,
                   c->m->listening ? LINGER_MS : STOP_GRACE_MS, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
        mclose(c);
}

/* Closing with bytes of the peer's unread makes the kernel send a reset,
 * which can discard the answer before the peer has read it: a request
 * past REQ_MAX got "connection reset" where it was answered 431 (a
 * security trial). So after an error, or with bytes still unread (a body
 * psd ignores), the answer is followed by a FIN, and what the peer sends
 * is read and dropped until it closes, for at most LINGER_MS. */
static void on_written(uv_write_t *w, int status)
{
    mconn *c = w->data;
    uv_os_fd_t fd;
    int unread = 0;
    if (!c->error && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
        (void)ioctl(fd, FIONREAD, &unread);
    c->sd.data = c;
    if (status < 0 || c->closing || (!c->error && unread <= 0) ||
        uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shut))
        mclose(c);
}

/* The bytes of c's answer its peer has not taken yet: still queued in
 * libuv, or in the kernel unsent or unacknowledged. */
static uint64_t peer_left(mconn *c)
{
    uint64_t left = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    uv_os_fd_t fd;
    int outq = 0;
    if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
        ioctl(fd, TIOCOUTQ, &outq) == 0 && outq > 0)
        left += (uint64_t)outq;
    return left;
}

/* Every SAMPLE_MS while answers are written: each one whose peer took
 * more since notes when, so that the one to close for room is the one
 * that has gone longest without taking anything. */
static void on_sample(uv_timer_t *t)
{
    psd_metrics *m = t->data;
    uint64_t now = uv_now(m->loop);
    int writing = 0;
    for (mconn *c = m->head; c; c = c->next) {
        if (!c->answered)
            continue;
        writing++;
        uint64_t left = peer_left(c);
        if (left < c->left) {
            if (c->left != UINT64_MAX)
                c->moved_ms = now;
            c->left = left;
        }
    }
    if (!writing)
        uv_timer_stop(t);
}

/* Answers with status and body (len bytes): a short text, copied, or
 * the shared figures b, which the connection holds until it closes. */
static void respond(mconn *c, const char *status, const char *type,
                    const char *body, size_t len, mbody *b)
{
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->answered = 1;
    c->error = strncmp(status, "200 ", 4) != 0;
    /* Its start is no sign of a reader: a scrape being read lost, as the
     * oldest, to never-readers answered in the same turn (a review). */
    uint64_t now = uv_now(c->m->loop);
    c->moved_ms = now > 2 * SAMPLE_MS ? now - 2 * SAMPLE_MS : 0;
    c->left = UINT64_MAX;
    if (c->m->sample_init && !uv_is_active((uv_handle_t *)&c->m->sample))
        uv_timer_start(&c->m->sample, on_sample, SAMPLE_MS, SAMPLE_MS);
    int hn = snprintf(c->resp, sizeof c->resp, "HTTP/1.1 %s\r\nContent-Type: "
                      "%s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, type, len);
    if (hn < 0 || (size_t)hn + (b ? 0 : len) >= sizeof c->resp) {
        mclose(c);
        return;
    }
    uv_buf_t bufs[2] = { uv_buf_init(c->resp, (unsigned)hn) };
    unsigned n = 1;
    if (c->head)
        len = 0;                 /* Content-Length says the GET's */
    if (b) {
        b->refs++;
        c->body = b;
        bufs[n++] = uv_buf_init(b->text, (unsigned)len);
    } else {
        memcpy(c->resp + hn, body, len);
        bufs[0].len += len;
    }
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, bufs, n, on_written))
        mclose(c);
}

/* The CPU time of the calling thread, in ns (0 where unknown: then
 * nothing is cached). */
static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t))
        return 0;
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The figures, a reference the caller drops: the cache while it is
 * young (CACHE_MIN_NS), else built now. NULL for want of memory. */
static mbody *figures(psd_metrics *m)
{
    uint64_t now = uv_hrtime();
    if (m->cache && now < m->cache_until) {
        m->cache->refs++;
        return m->cache;
    }
    uint64_t cpu0 = thread_cpu_ns();
    body_drop(m->cache);
    m->cache = NULL;
    mbody *b = calloc(1, sizeof *b);
    if (!b || m->body(m->arg, "metrics", 7, &b->text, &b->len) != PSW_OK ||
        !b->text || b->len > UINT32_MAX) {
        if (b)
            free(b->text);
        free(b);
        return NULL;
    }
    b->refs = 1;
    uint64_t cpu1 = thread_cpu_ns();
    uint64_t cost = cpu1 > cpu0 ? cpu1 - cpu0 : 0;
    /* Not once stopped: a request that ends in the grace of a stop is
     * answered, and nothing would free a cache made then. */
    if (cost >= CACHE_MIN_NS && m->listening) {
        uint64_t keep = cost * CACHE_TIMES;
        m->cache = b;            /* the cache's reference */
        m->cache_until = uv_hrtime() + (keep < CACHE_MAX_NS ? keep
                                                            : CACHE_MAX_NS);
        b->refs++;
    }
    return b;
}

static void answer(mconn *c, size_t at)
{
    static const char text[] = "text/plain; charset=utf-8";
    const char *req = c->req + at;
    size_t rlen = c->len - at;
    char *nl = memchr(req, '\n', rlen);
    size_t line = nl ? (size_t)(nl - req) : rlen;
    char method[8] = "", target[1024] = "";
    /* "GET /metrics HTTP/1.1": method and path, query ignored. */
    char first[1100];
    snprintf(first, sizeof first, "%.*s", (int)line, req);
    if (sscanf(first, "%7s %1023s", method, target) != 2) {
        respond(c, "400 Bad Request", text, "bad request\n", 12, NULL);
        return;
    }
    /* The absolute form a server must take too (RFC 9112, 3.2.2):
     * "http://host:port/metrics" is "/metrics". */
    const char *path = target;
    if (!strncasecmp(path, "http://", 7) || !strncasecmp(path, "https://", 8)) {
        path = strchr(strstr(path, "://") + 3, '/');
        if (!path)
            path = "/";
    }
    size_t plen = strcspn(path, "?");
    /* HEAD too: HTTP asks it of every server, and probes use it. */
    c->head = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !c->head) {
        respond(c, "405 Method Not Allowed", text, "only GET or HEAD\n", 17,
                NULL);
        return;
    }
    if (!(plen == 8 && !memcmp(path, "/metrics", 8)) &&
        !(plen == 1 && path[0] == '/')) {
        respond(c, "404 Not Found", text, "see /metrics\n", 13, NULL);
        return;
    }
    mbody *b = figures(c->m);
    if (!b) {
        respond(c, "500 Internal Server Error", text, "out of memory\n", 14,
                NULL);
        return;
    }
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8",
            b->text, b->len, b);
    body_drop(b);                /* figures' reference; c holds its own */
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    mconn *c = h->data;
    *buf = uv_buf_init(c->req + c->len, (unsigned)(REQ_MAX - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    mconn *c = s->data;
    if (n < 0) {
        mclose(c);
        return;
    }
    if (c->lingering) {
        /* Dropped: c->len stays 0. Bounded in bytes too: a client that
         * kept sending had psd read 200 MB in its 2 s, and one that came
         * back did it again (a review). */
        c->dropped += (size_t)n;
        if (c->dropped > LINGER_BYTES)
            mclose(c);
        return;
    }
    c->len += (size_t)n;
    /* Empty lines before the request line are passed over (RFC 9112,
     * 2.2: a client may send one after a body). The request ends with an
     * empty line; its body, if any, is ignored. */
    size_t at = 0;
    while (at < c->len && (c->req[at] == '\r' || c->req[at] == '\n'))
        at++;
    for (size_t i = at; i + 1 < c->len; i++)
        if (c->req[i] == '\n' &&
            (c->req[i + 1] == '\n' ||
             (c->req[i + 1] == '\r' && i + 2 < c->len && c->req[i + 2] == '\n'))) {
            answer(c, at);
            return;
        }
    if (c->len == REQ_MAX)
        respond(c, "431 Request Header Fields Too Large", "text/plain",
                "request too large\n", 18, NULL);
}

static void on_timeout(uv_timer_t *t)
{
    mclose(t->data);
}

static void drop_pending(psd_metrics *m);

static void on_drop_closed(uv_handle_t *h)
{
    psd_metrics *m = h->data;
    m->drop_closing = 0;
    if (m->drop_waiting && m->listening) {
        m->drop_waiting = 0;
        drop_pending(m);
    }
}

/* Takes the connection pending on the listener off it and closes it, for
 * want of memory to serve it. Left pending, it would end /metrics for
 * good: libuv stops watching a listener whose callback did not call
 * uv_accept until uv_accept is called (daemon/conn.c does the same for
 * clients). While the previous such connection's handle still closes,
 * this one waits in libuv until on_drop_closed takes it. */
static void drop_pending(psd_metrics *m)
{
    if (m->drop_closing) {
        m->drop_waiting = 1;
        return;
    }
    uv_tcp_init(m->loop, &m->drop);
    m->drop.data = m;
    m->drop_closing = 1;
    uv_accept((uv_stream_t *)&m->listener, (uv_stream_t *)&m->drop);
    psd_error("metrics: out of memory accepting a connection: closing it");
    uv_close((uv_handle_t *)&m->drop, on_drop_closed);
}

static void on_connection(uv_stream_t *l, int status)
{
    psd_metrics *m = l->data;
    if (status < 0)
        return;
    mconn *c = calloc(1, sizeof *c);
    if (!c) {
        drop_pending(m);
        return;
    }
    c->m = m;
    uv_tcp_init(m->loop, &c->tcp);
    uv_timer_init(m->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    m->open++;
    /* Appended: the list stays oldest first. */
    int live = 0;
    mconn **at = &m->head;
    while (*at) {
        c->prev = *at;
        at = &(*at)->next;
        live++;
    }
    *at = c;
    /* Those closing still count in m->open until the loop turn ends,
     * and a turn takes up to the backlog's connections: below this
     * bound they never shut out a scrape (at 2 * MAX_OPEN, a burst of 33
     * idle connections did, the scrape accepted in the same turn). */
    if (uv_accept(l, (uv_stream_t *)&c->tcp) ||
        m->open > MAX_OPEN + 2 * BACKLOG) {
        mclose(c);
        return;
    }
    /* Full: the oldest connection still without a whole request makes
     * room, not the newcomer. A scrape sends its request at once, so
     * connections that send nothing (or never end their request) cannot
     * keep Prometheus out. When every one is being answered, the answer
     * whose reader has stalled longest goes: one not read (a client that
     * asks and never reads a body larger than the socket buffers) held
     * its place for TIMEOUT_MS, and 16 such kept every scrape out. Not
     * the oldest, which may be a scrape being read while later ones are
     * not, nor the one with most bytes queued, which tells the two apart
     * only when their socket buffers differ (reviews). */
    if (live >= MAX_OPEN) {
        /* One read after its answer goes first: it is owed nothing
         * (clients that sent more than an error's request and came back
         * filled the slots with those, and each newcomer closed the
         * scrape still unread: a review). */
        mconn *old = m->head;
        while (old && (!old->lingering || old == c))
            old = old->next;
        if (!old)
            old = m->head;
        while (old && (old->answered || old == c))
            old = old->next;
        if (!old) {
            /* The one whose peer has gone longest without taking a byte
             * of its answer (sampled every SAMPLE_MS, and now), the
             * oldest of equals. */
            on_sample(&m->sample);
            for (mconn *o = m->head; o; o = o->next)
                if (o != c && (!old || o->moved_ms < old->moved_ms))
                    old = o;
        }
        mclose(old);                   /* there is one: live >= 16 */
    }
    uv_timer_start(&c->timer, on_timeout, TIMEOUT_MS, 0);
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
        mclose(c);
}

int psd_metrics_start(psd_metrics *m, uv_loop_t *loop, int fd,
                      const psd_node_addr *a,
                      int (*body)(void *, const char *, size_t, char **,
                                  size_t *),
                      void *arg, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->loop = loop;
    m->body = body;
    m->arg = arg;
    int rc = uv_tcp_init(loop, &m->listener);
    if (rc) {
        close(fd);
    } else {
        m->listening = 1;
        m->listener.data = m;
        rc = uv_tcp_open(&m->listener, fd);
        if (rc)
            close(fd);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&m->listener, BACKLOG, on_connection);
    char where[PSW_ADDR_TEXT_MAX];
    psw_addr_format(a, where, sizeof where);
    if (rc) {
        snprintf(err, errlen, "metrics_listen: cannot listen on %s: %s",
                 where, uv_strerror(rc));
        return -1;
    }
    uv_timer_init(loop, &m->sample);
    m->sample.data = m;
    m->sample_init = 1;
    psd_info("metrics on http://%s/metrics", where);
    return 0;
}

void psd_metrics_stop(psd_metrics *m)
{
    body_drop(m->cache);         /* the connections keep theirs */
    m->cache = NULL;
    if (m->sample_init) {
        uv_close((uv_handle_t *)&m->sample, NULL);
        m->sample_init = 0;
    }
    if (m->listening) {
        uv_close((uv_handle_t *)&m->listener, NULL);
        m->listening = 0;
        m->drop_waiting = 0;     /* closed with the listener */
    }
    /* A connection that has sent nothing goes at once; one whose request
     * has begun may still end it (the stop may take longer anyway), for
     * STOP_GRACE_MS at most rather than the rest of TIMEOUT_MS. */
    for (mconn *c = m->head, *n; c; c = n) {
        n = c->next;
        if (c->answered) {
            /* Reading what follows an answer: the grace at most. */
            if (c->lingering &&
                uv_timer_get_due_in(&c->timer) > STOP_GRACE_MS)
                uv_timer_start(&c->timer, on_timeout, STOP_GRACE_MS, 0);
            continue;
        }
        if (c->len == 0)
            mclose(c);
        else if (uv_timer_get_due_in(&c->timer) > STOP_GRACE_MS)
            uv_timer_start(&c->timer, on_timeout, STOP_GRACE_MS, 0);
    }
}
