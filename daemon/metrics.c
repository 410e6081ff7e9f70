/* The /metrics HTTP listener; see metrics.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

typedef struct mconn {
    psd_metrics *m;
    struct mconn *prev, *next;   /* m->head's list, while not closing */
    int answered;                /* a response is being written */
    int head;                    /* a HEAD request: the headers only */
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    char req[REQ_MAX];
    size_t len;
    char *resp;
    int closing, closed;         /* handles closed so far, of 2 */
} mconn;

static void on_closed(uv_handle_t *h)
{
    mconn *c = h->data;
    if (++c->closed == 2) {
        c->m->open--;
        free(c->resp);
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

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    mclose(w->data);
}

static void respond(mconn *c, const char *status, const char *type,
                    const char *body, size_t len)
{
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->answered = 1;
    char head[256];
    int hn = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, type, len);
    c->resp = malloc((size_t)hn + len);
    if (!c->resp) {
        mclose(c);
        return;
    }
    memcpy(c->resp, head, (size_t)hn);
    if (c->head)
        len = 0;                 /* Content-Length says the GET's */
    memcpy(c->resp + hn, body, len);
    uv_buf_t b = uv_buf_init(c->resp, (unsigned)((size_t)hn + len));
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written))
        mclose(c);
}

static void answer(mconn *c)
{
    static const char text[] = "text/plain; charset=utf-8";
    char *nl = memchr(c->req, '\n', c->len);
    size_t line = nl ? (size_t)(nl - c->req) : c->len;
    char method[8] = "", path[64] = "";
    /* "GET /metrics HTTP/1.1": method and path, query ignored. */
    char first[128];
    snprintf(first, sizeof first, "%.*s", (int)line, c->req);
    if (sscanf(first, "%7s %63s", method, path) != 2) {
        respond(c, "400 Bad Request", text, "bad request\n", 12);
        return;
    }
    path[strcspn(path, "?")] = '\0';
    /* HEAD too: HTTP asks it of every server, and probes use it. */
    c->head = strcmp(method, "HEAD") == 0;
    if (strcmp(method, "GET") != 0 && !c->head) {
        respond(c, "405 Method Not Allowed", text, "only GET or HEAD\n", 17);
        return;
    }
    if (strcmp(path, "/metrics") != 0 && strcmp(path, "/") != 0) {
        respond(c, "404 Not Found", text, "see /metrics\n", 13);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    if (c->m->body(c->m->arg, "metrics", 7, &body, &len) != PSW_OK || !body) {
        free(body);
        respond(c, "500 Internal Server Error", text, "out of memory\n", 14);
        return;
    }
    respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body,
            len);
    free(body);
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
    c->len += (size_t)n;
    /* The request ends with an empty line; its body, if any, is ignored. */
    for (size_t i = 0; i + 1 < c->len; i++)
        if (c->req[i] == '\n' &&
            (c->req[i + 1] == '\n' ||
             (c->req[i + 1] == '\r' && i + 2 < c->len && c->req[i + 2] == '\n'))) {
            answer(c);
            return;
        }
    if (c->len == REQ_MAX)
        respond(c, "431 Request Header Fields Too Large", "text/plain",
                "request too large\n", 18);
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
     * keep Prometheus out; only when every one is being answered is the
     * newcomer closed. */
    if (live >= MAX_OPEN) {
        mconn *old = m->head;
        while (old && old->answered)
            old = old->next;
        mclose(old && old != c ? old : c);
        if (c->closing)
            return;
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
    psd_info("metrics on http://%s/metrics", where);
    return 0;
}

void psd_metrics_stop(psd_metrics *m)
{
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
        if (c->answered)
            continue;
        if (c->len == 0)
            mclose(c);
        else if (uv_timer_get_due_in(&c->timer) > STOP_GRACE_MS)
            uv_timer_start(&c->timer, on_timeout, STOP_GRACE_MS, 0);
    }
}
