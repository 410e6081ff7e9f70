/* libpsclient's public API and its I/O thread: one libuv loop owning one
 * connection per psd node, fed by callers through a locked queue and a
 * uv_async wake-up. The Customer (customer.c) decides what to send; this
 * file moves bytes, runs timeouts and reports completions. */
#include <errno.h>
#include <stdarg.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "customer.h"
#include "map.h"
#include "nodes.h"
#include "psclient.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"

/* The public codes are the wire codes. */
_Static_assert((int)PS_EINVAL == (int)PSW_EINVAL, "PS_EINVAL");
_Static_assert((int)PS_ENOMEM == (int)PSW_ENOMEM, "PS_ENOMEM");
_Static_assert((int)PS_ECONN == (int)PSW_ECONN, "PS_ECONN");
_Static_assert((int)PS_ETIMEDOUT == (int)PSW_ETIMEDOUT, "PS_ETIMEDOUT");
_Static_assert((int)PS_EPROTO == (int)PSW_EPROTO, "PS_EPROTO");
_Static_assert((int)PS_EAUTH == (int)PSW_EAUTH, "PS_EAUTH");
_Static_assert((int)PS_ENOTABLE == (int)PSW_ENOTABLE, "PS_ENOTABLE");
_Static_assert((int)PS_EKEY == (int)PSW_EKEY, "PS_EKEY");
_Static_assert((int)PS_ETOOBIG == (int)PSW_ETOOBIG, "PS_ETOOBIG");
_Static_assert((int)PS_ECLOSED == (int)PSW_ECLOSED, "PS_ECLOSED");
_Static_assert((int)PS_ESERVER == (int)PSW_ESERVER, "PS_ESERVER");
_Static_assert((int)PS_ENOTOWNER == (int)PSW_ENOTOWNER, "PS_ENOTOWNER");

#define FAIL_RING 1024            /* failed requests whose status we keep */
#define BATCH_BYTES (64 * 1024)   /* a queue this full is sent at once */
#define HELLO_MAX_REPLY (1 << 20) /* layout frames are small */

typedef enum { NC_IDLE, NC_CONNECTING, NC_HELLO, NC_READY, NC_CLOSING } nstate;

typedef struct plist {
    ps_part *head, *tail;
} plist;

typedef struct nconn {
    uv_tcp_t tcp;                 /* first: handle pointers cast to nconn */
    uv_connect_t creq;
    ps_client *cl;
    int node;                     /* index in the layout; -1: a seed */
    nstate state;
    int was_ready;                /* the connection got past HELLO */
    char name[280];
    struct sockaddr_storage sa;
    uint64_t deadline_ns;         /* for connect + HELLO */
    psw_reader rd;
    msgpack_zone zone;
    ps_map fly_map;               /* (ts << 16 | part) -> part in flight */
    plist fly[2];                 /* in flight, oldest first: [0] requests,
                                     [1] parts that may wait for other
                                     workers (a longer timeout) */
    ps_part *q_head, *q_tail;     /* waiting to be sent */
    size_t q_bytes;
    int drop_status;              /* what in-flight parts fail with */
    char drop_why[200];
} nconn;

/* A thread inside ps_wait: woken only when its own request completes, so
 * a caller with many requests in flight is not woken by every reply. */
typedef struct ts_waiter {
    struct ts_waiter *next;
    ps_ts ts;
    pthread_cond_t cv;
} ts_waiter;

typedef struct failure {
    ps_ts ts;
    int status;
    char text[200];
} failure;

struct ps_client {
    ps_options opt;
    char *token;
    uint64_t client_id, incarnation;

    /* Shared between callers and the I/O thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* open, ps_wait_all, backpressure */
    int cv_waiters;               /* threads waiting on cv */
    ts_waiter *ts_waiters;        /* threads in ps_wait */
    ps_part *sq_head, *sq_tail;   /* submitted parts, all nodes */
    ps_map reqs;                  /* ts -> request not yet complete */
    ps_ts last_ts;
    size_t inflight_bytes;
    int first_error;              /* since the last ps_wait_all */
    char first_error_text[200];
    failure *fails;               /* ring of FAIL_RING, lazily allocated */
    uint64_t nfails;
    ps_ts fails_forgotten;        /* newest failure pushed out of the ring */
    int closing;
    int open_state;               /* 0 connecting, 1 open, < 0 failed */
    char open_err[256];

    /* Set once the layout is known; read-only afterwards. */
    psw_layout layout;

    /* I/O thread only. */
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t tick;
    uv_timer_t batch;
    int batch_armed;
    ps_addr *seeds;
    int nseeds, seed_i;
    nconn *seed;
    nconn **nodes;
    int nnodes;
    uint64_t clock, barrier;      /* ps_clock / ps_barrier calls made */
};

/* ---- errors --------------------------------------------------------- */

static _Thread_local struct {
    const ps_client *c;
    char msg[256];
} tls_err;

static void set_error(const ps_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(const ps_client *c, const char *fmt, ...)
{
    va_list ap;
    tls_err.c = c;
    va_start(ap, fmt);
    vsnprintf(tls_err.msg, sizeof tls_err.msg, fmt, ap);
    va_end(ap);
}

const char *ps_strerror(int code)
{
    return psw_strerror(code);
}

const char *ps_last_error(ps_client *c)
{
    return tls_err.c == c ? tls_err.msg : "";
}

void ps_options_init(ps_options *o)
{
    memset(o, 0, sizeof *o);
    o->worker = -1;
    o->connect_timeout_ms = 5000;
    o->request_timeout_ms = 10000;
    o->max_retries = 2;
    o->batch_delay_us = 0;
    o->max_inflight_bytes = (size_t)256 << 20;
    o->auth_token = NULL;
    o->sync_timeout_ms = 600000;
}

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

/* ---- completion ----------------------------------------------------- */

/* Runs on the I/O thread when the last part of r settled: callback first,
 * so that when ps_wait returns the callback has already run. */
static void complete(ps_client *c, ps_req *r)
{
    if (r->cb)
        r->cb(r->ts, r->status, r->arg);
    pthread_mutex_lock(&c->mu);
    ps_map_del(&c->reqs, (uint64_t)r->ts);
    c->inflight_bytes -= r->bytes;
    if (r->status != PS_OK) {
        const char *why = r->error ? r->error : "";
        if (!c->fails)
            c->fails = calloc(FAIL_RING, sizeof *c->fails);
        if (c->fails) {
            failure *f = &c->fails[c->nfails++ % FAIL_RING];
            if (f->ts > c->fails_forgotten)
                c->fails_forgotten = f->ts;   /* overwritten: forgotten */
            f->ts = r->ts;
            f->status = r->status;
            snprintf(f->text, sizeof f->text, "%s", why);
        }
        if (c->first_error == PS_OK) {
            c->first_error = r->status;
            snprintf(c->first_error_text, sizeof c->first_error_text,
                     "request %lld: %s", (long long)r->ts, why);
        }
    }
    for (ts_waiter *w = c->ts_waiters; w; w = w->next)
        if (w->ts == r->ts)
            pthread_cond_signal(&w->cv);
    if (c->cv_waiters)
        pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    ps_req_free(r);
}

static void settle_fail(ps_client *c, ps_part *p, int status, const char *why)
{
    if (ps_part_fail(p, status, why))
        complete(c, p->req);
}

/* ---- connections ---------------------------------------------------- */

static void nc_drop(nconn *nc, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void nc_send(nconn *nc);
static void nc_connect(nconn *nc);
static void open_done(ps_client *c, int state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static nconn *nc_new(ps_client *c, int node)
{
    nconn *nc = calloc(1, sizeof *nc);
    if (!nc)
        return NULL;
    nc->cl = c;
    nc->node = node;
    nc->state = NC_IDLE;
    ps_map_init(&nc->fly_map);
    msgpack_zone_init(&nc->zone, 8192);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    return nc;
}

static void nc_free(nconn *nc)
{
    if (!nc)
        return;
    ps_map_destroy(&nc->fly_map);
    msgpack_zone_destroy(&nc->zone);
    psw_reader_destroy(&nc->rd);
    free(nc);
}

typedef struct wreq {
    uv_write_t req;
    psw_out out;
} wreq;

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    nconn *nc = req->data;
    psw_out_destroy(&w->out);
    free(w);
    if (status < 0 && status != UV_ECANCELED)
        nc_drop(nc, PS_ECONN, "write to %s failed: %s", nc->name,
                uv_strerror(status));
}

/* Writes a finished psw_out (ownership passes to the write). */
static int nc_write(nconn *nc, wreq *w)
{
    size_t cnt = psw_out_iovcnt(&w->out);
    struct iovec small[16], *iov = cnt <= 16 ? small : malloc(cnt * sizeof *iov);
    if (!iov)
        return -1;
    psw_out_iov(&w->out, iov);
    w->req.data = nc;
    int rc = uv_write(&w->req, (uv_stream_t *)&nc->tcp, (const uv_buf_t *)iov,
                      (unsigned)cnt, on_write);
    if (iov != small)
        free(iov);
    return rc;
}

static void fly_unlink(nconn *nc, ps_part *p)
{
    plist *l = &nc->fly[p->slow];
    if (p->prev)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->next = p->prev = NULL;
}

static void fly_append(nconn *nc, ps_part *p)
{
    plist *l = &nc->fly[p->slow];
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
}

static uint64_t fly_key(uint64_t ts, uint32_t part)
{
    return ts << 16 | part;
}

/* Fails everything in flight (and, when the connection never came up,
 * everything queued for it). */
static void nc_fail_all(nconn *nc, int status, const char *why, int queued)
{
    ps_client *c = nc->cl;
    ps_map_destroy(&nc->fly_map);
    for (int k = 0; k < 2; k++) {
        ps_part *p = nc->fly[k].head;
        nc->fly[k].head = nc->fly[k].tail = NULL;
        while (p) {
            ps_part *n = p->next;
            p->next = p->prev = NULL;
            settle_fail(c, p, status, why);
            p = n;
        }
    }
    ps_part *p;
    if (!queued)
        return;
    p = nc->q_head;
    nc->q_head = nc->q_tail = NULL;
    nc->q_bytes = 0;
    while (p) {
        ps_part *n = p->next;
        p->next = NULL;
        settle_fail(c, p, status, why);
        p = n;
    }
}

static void on_nc_closed(uv_handle_t *h)
{
    nconn *nc = (nconn *)h;
    ps_client *c = nc->cl;
    int was_ready = nc->was_ready;
    nc->state = NC_IDLE;
    nc->was_ready = 0;
    psw_reader_destroy(&nc->rd);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    /* A connection that never came up takes its queue down with it, so a
     * dead server fails requests instead of retrying forever. */
    pthread_mutex_lock(&c->mu);
    int closing = c->closing;
    pthread_mutex_unlock(&c->mu);
    nc_fail_all(nc, nc->drop_status, nc->drop_why, !was_ready || closing);
    if (closing)
        return;
    if (c->open_state == 0) {
        if (nc == c->seed && c->seed_i + 1 < c->nseeds) {
            c->seed_i++;         /* try the next address we were given */
            nc_connect(nc);
            return;
        }
        open_done(c, nc->drop_status, "%s", nc->drop_why);
        return;
    }
    if (nc->q_head)
        nc_connect(nc);          /* parts wait: try once more */
}

static void nc_drop(nconn *nc, int status, const char *fmt, ...)
{
    if (nc->state == NC_CLOSING || nc->state == NC_IDLE)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nc->drop_why, sizeof nc->drop_why, fmt, ap);
    va_end(ap);
    nc->drop_status = status;
    nc->state = NC_CLOSING;
    uv_close((uv_handle_t *)&nc->tcp, on_nc_closed);
}

/* Moves as many queued parts as fit into one frame. */
static size_t frame_parts(const nconn *nc, uint64_t max_frame)
{
    size_t n = 0, bytes = 16;
    for (ps_part *p = nc->q_head; p; p = p->next) {
        if (n && (bytes + p->wire_bytes > max_frame || n == PSW_MAX_MSGS))
            break;
        bytes += p->wire_bytes;
        n++;
    }
    return n;
}

/* Sends everything queued: small parts share frames, all frames go out in
 * one write. Parts move to the in-flight list with their deadline. */
static void nc_send(nconn *nc)
{
    ps_client *c = nc->cl;
    if (nc->state != NC_READY || !nc->q_head)
        return;
    wreq *w = malloc(sizeof *w);
    if (!w) {
        nc_drop(nc, PS_ENOMEM, "out of memory sending to %s", nc->name);
        return;
    }
    psw_out_init(&w->out);
    uint64_t now = now_ns();
    uint64_t deadline[2] = {
        now + (uint64_t)c->opt.request_timeout_ms *
                  (uint64_t)(c->opt.max_retries + 1) * 1000000ULL,
        now + (uint64_t)c->opt.sync_timeout_ms * 1000000ULL
    };
    while (nc->q_head) {
        size_t n = frame_parts(nc, c->layout.max_frame);
        psw_out_frame_begin(&w->out);
        for (size_t i = 0; i < n; i++) {
            ps_part *p = nc->q_head;
            nc->q_head = p->next;
            nc->q_bytes -= p->wire_bytes;
            psw_pack_request(&w->out, &p->msg);
            p->deadline_ns = deadline[p->slow];
            fly_append(nc, p);
            if (ps_map_put(&nc->fly_map, fly_key(p->msg.ts, p->msg.part), p))
                w->out.oom = 1;
        }
        psw_out_frame_end(&w->out);
    }
    nc->q_tail = NULL;
    if (w->out.oom || nc_write(nc, w)) {
        psw_out_destroy(&w->out);
        free(w);
        nc_drop(nc, PS_ENOMEM, "cannot send to %s", nc->name);
    }
}

static void nc_send_hello(nconn *nc)
{
    ps_client *c = nc->cl;
    wreq *w = malloc(sizeof *w);
    if (!w) {
        nc_drop(nc, PS_ENOMEM, "out of memory");
        return;
    }
    psw_out_init(&w->out);
    psw_hello h = { PSW_VERSION, c->client_id, c->incarnation,
                    c->opt.worker, NULL, 0 };
    psw_out_frame_begin(&w->out);
    psw_pack_hello(&w->out, &h);
    psw_out_frame_end(&w->out);
    if (w->out.oom || nc_write(nc, w)) {
        psw_out_destroy(&w->out);
        free(w);
        nc_drop(nc, PS_ECONN, "cannot send HELLO to %s", nc->name);
    }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    nconn *nc = (nconn *)h;
    char *p;
    size_t n;
    (void)suggested;
    if (psw_reader_space(&nc->rd, &p, &n)) {
        buf->base = NULL;
        buf->len = 0;
        return;
    }
    buf->base = p;
    buf->len = n;
}

static void on_connect(uv_connect_t *req, int status)
{
    nconn *nc = req->data;
    if (nc->state != NC_CONNECTING)
        return;
    if (status < 0) {
        nc_drop(nc, PS_ECONN, "cannot connect to %s: %s", nc->name,
                uv_strerror(status));
        return;
    }
    uv_tcp_nodelay(&nc->tcp, 1);
    nc->state = NC_HELLO;
    uv_read_start((uv_stream_t *)&nc->tcp, on_alloc, on_read);
    nc_send_hello(nc);
}

static void nc_connect(nconn *nc)
{
    ps_client *c = nc->cl;
    if (nc->state != NC_IDLE)
        return;
    if (nc == c->seed && c->open_state == 0) {
        const ps_addr *a = &c->seeds[c->seed_i];
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_socktype = SOCK_STREAM;
        snprintf(nc->name, sizeof nc->name, "%s:%s", a->host, a->port);
        /* Seeds may be host names; resolving blocks only ps_open. */
        int g = getaddrinfo(a->host, a->port, &hints, &res);
        if (g || !res) {
            nc->state = NC_CONNECTING;       /* so nc_drop closes it */
            uv_tcp_init(&c->loop, &nc->tcp);
            nc_drop(nc, PS_ECONN, "cannot resolve %s: %s", nc->name,
                    gai_strerror(g));
            return;
        }
        memcpy(&nc->sa, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
    }
    uv_tcp_init(&c->loop, &nc->tcp);
    nc->state = NC_CONNECTING;
    nc->deadline_ns = now_ns() + (uint64_t)c->opt.connect_timeout_ms * 1000000ULL;
    nc->creq.data = nc;
    int rc = uv_tcp_connect(&nc->creq, &nc->tcp, (struct sockaddr *)&nc->sa,
                            on_connect);
    if (rc)
        nc_drop(nc, PS_ECONN, "cannot connect to %s: %s", nc->name,
                uv_strerror(rc));
}

/* Parses a numeric "host:port" / "[v6]:port" from the layout. */
static int numeric_addr(const char *s, struct sockaddr_storage *sa)
{
    char host[PSW_ADDR_MAX];
    const char *colon = strrchr(s, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
        memcpy(host, s + 1, hl - 2);
        host[hl - 2] = '\0';
        return uv_ip6_addr(host, atoi(colon + 1), (struct sockaddr_in6 *)sa);
    }
    memcpy(host, s, hl);
    host[hl] = '\0';
    return uv_ip4_addr(host, atoi(colon + 1), (struct sockaddr_in *)sa);
}

/* The first HELLO_OK gives the layout: every node gets a connection. */
static int adopt_layout(ps_client *c, nconn *seed, psw_layout *l)
{
    c->nodes = calloc((size_t)l->nnodes, sizeof *c->nodes);
    if (!c->nodes)
        return -1;
    c->nnodes = l->nnodes;
    pthread_mutex_lock(&c->mu);
    c->layout = *l;              /* read by callers only after open */
    pthread_mutex_unlock(&c->mu);
    memset(l, 0, sizeof *l);
    seed->node = c->layout.node_index;
    c->nodes[seed->node] = seed;
    c->seed = NULL;
    for (int i = 0; i < c->nnodes; i++) {
        if (c->nodes[i])
            continue;
        nconn *nc = nc_new(c, i);
        if (!nc)
            return -1;
        c->nodes[i] = nc;
        snprintf(nc->name, sizeof nc->name, "%s", c->layout.nodes[i]);
        if (numeric_addr(c->layout.nodes[i], &nc->sa)) {
            open_done(c, PS_EPROTO, "bad node address %s in the layout",
                      c->layout.nodes[i]);
            return 0;
        }
        nc_connect(nc);
    }
    return 0;
}

static void check_open(ps_client *c)
{
    if (c->open_state != 0 || !c->nodes)
        return;
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i]->state != NC_READY)
            return;
    open_done(c, 1, "%s", "");
}

static void atomic_max(uint64_t *v, uint64_t x)
{
    uint64_t cur = __atomic_load_n(v, __ATOMIC_RELAXED);
    while (cur < x && !__atomic_compare_exchange_n(v, &cur, x, 0,
                                                   __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED))
        ;
}

static void handle_hello_ok(nconn *nc, const msgpack_object *msg)
{
    ps_client *c = nc->cl;
    psw_layout l;
    char err[160];
    if (psw_hello_ok_decode(msg, &l, err, sizeof err)) {
        nc_drop(nc, PS_EPROTO, "%s: %s", nc->name, err);
        return;
    }
    uint64_t l_clock = l.worker_clock, l_barrier = l.worker_barrier;
    if (l.status != PSW_OK) {
        nc_drop(nc, l.status, "%s refused the connection: %s", nc->name,
                l.text);
        psw_layout_free(&l);
        return;
    }
    if (c->nodes) {
        /* Every node must describe the same cluster, and be the node we
         * meant to reach. */
        if (l.epoch != c->layout.epoch || l.node_index != nc->node) {
            nc_drop(nc, PS_EPROTO, "%s describes a different cluster layout "
                    "(node %d, epoch %016llx; expected node %d, epoch "
                    "%016llx): are all nodes running the same ini file?",
                    nc->name, l.node_index, (unsigned long long)l.epoch,
                    nc->node, (unsigned long long)c->layout.epoch);
            psw_layout_free(&l);
            return;
        }
        psw_layout_free(&l);
    } else if (adopt_layout(c, nc, &l)) {
        psw_layout_free(&l);
        nc_drop(nc, PS_ENOMEM, "out of memory");
        return;
    }
    /* Resume counting where the node has this worker (a rejoin starts at
     * the cluster's clock; a node may be ahead after a lost reply). */
    if (c->opt.worker >= 0) {
        atomic_max(&c->clock, l_clock);
        atomic_max(&c->barrier, l_barrier);
    }
    nc->state = NC_READY;
    nc->was_ready = 1;
    /* Replies may carry a whole max_frame of rows. */
    nc->rd.max_frame = (size_t)c->layout.max_frame + 4096;
    check_open(c);
    nc_send(nc);
}

static void handle_frame(nconn *nc, const char *body, size_t len)
{
    ps_client *c = nc->cl;
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];
    int n;
    msgpack_zone_clear(&nc->zone);
    if (psw_frame_decode(body, len, &nc->zone, &obj, err, sizeof err) ||
        (n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err)) < 0) {
        nc_drop(nc, PS_EPROTO, "bad frame from %s: %s", nc->name, err);
        return;
    }
    if (nc->state == NC_HELLO) {
        handle_hello_ok(nc, &msgs[0]);
        return;
    }
    for (int i = 0; i < n && nc->state == NC_READY; i++) {
        psw_msg m;
        if (psw_msg_decode(&msgs[i], &m, err, sizeof err)) {
            nc_drop(nc, PS_EPROTO, "bad reply from %s: %s", nc->name, err);
            return;
        }
        if (m.op != PSW_OP_REPLY) {
            nc_drop(nc, PS_EPROTO, "bad reply from %s: op %d is not a reply",
                    nc->name, m.op);
            return;
        }
        ps_part *p = ps_map_del(&nc->fly_map, fly_key(m.ts, m.part));
        if (!p) {
            nc_drop(nc, PS_EPROTO, "%s answered request %llu part %u, which "
                    "is not in flight", nc->name, (unsigned long long)m.ts,
                    m.part);
            return;
        }
        fly_unlink(nc, p);
        if (ps_part_reply(p, &m))
            complete(c, p->req);
    }
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    nconn *nc = (nconn *)st;
    (void)buf;
    if (n == 0)
        return;
    if (n < 0) {
        nc_drop(nc, PS_ECONN, "connection to %s lost: %s", nc->name,
                n == UV_EOF ? "closed by the server" : uv_strerror((int)n));
        return;
    }
    psw_reader_commit(&nc->rd, (size_t)n);
    const char *body;
    size_t len;
    int rc;
    while (nc->state == NC_HELLO || nc->state == NC_READY) {
        rc = psw_reader_next(&nc->rd, &body, &len);
        if (rc == 0)
            break;
        if (rc < 0) {
            nc_drop(nc, PS_EPROTO, "bad frame from %s: %s", nc->name,
                    rc == PSW_ETOOBIG ? "larger than max_frame" : "empty");
            return;
        }
        handle_frame(nc, body, len);
    }
}

/* ---- the I/O thread -------------------------------------------------- */

static void open_done(ps_client *c, int state, const char *fmt, ...)
{
    pthread_mutex_lock(&c->mu);
    if (c->open_state == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->open_err, sizeof c->open_err, fmt, ap);
        va_end(ap);
        c->open_state = state;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

static void shutdown_io(ps_client *c)
{
    uv_close((uv_handle_t *)&c->wake, NULL);
    uv_close((uv_handle_t *)&c->tick, NULL);
    uv_close((uv_handle_t *)&c->batch, NULL);
    if (c->seed)                 /* still opening: no layout yet */
        nc_drop(c->seed, PS_ECLOSED, "client closed");
    for (int i = 0; i < c->nnodes; i++)
        if (c->nodes[i])
            nc_drop(c->nodes[i], PS_ECLOSED, "client closed");
}

static void send_all(ps_client *c)
{
    for (int i = 0; i < c->nnodes; i++) {
        nconn *nc = c->nodes[i];
        if (nc->state == NC_IDLE && nc->q_head)
            nc_connect(nc);
        else
            nc_send(nc);
    }
}

static void on_batch(uv_timer_t *t)
{
    ps_client *c = t->data;
    c->batch_armed = 0;
    send_all(c);
}

static void on_wake(uv_async_t *a)
{
    ps_client *c = a->data;
    pthread_mutex_lock(&c->mu);
    ps_part *p = c->sq_head;
    c->sq_head = c->sq_tail = NULL;
    int closing = c->closing;
    pthread_mutex_unlock(&c->mu);

    size_t queued = 0;
    while (p) {
        ps_part *n = p->next;
        nconn *nc = c->nodes[p->node];
        p->next = NULL;
        if (nc->q_tail)
            nc->q_tail->next = p;
        else
            nc->q_head = p;
        nc->q_tail = p;
        nc->q_bytes += p->wire_bytes;
        if (nc->q_bytes > queued)
            queued = nc->q_bytes;
        p = n;
    }
    if (closing) {
        shutdown_io(c);
        return;
    }
    /* A small request may wait batch_delay_us for company; a full batch,
     * or no delay configured, goes now. */
    if (c->opt.batch_delay_us > 0 && queued && queued < BATCH_BYTES) {
        if (!c->batch_armed) {
            c->batch_armed = 1;
            uv_timer_start(&c->batch, on_batch,
                           (uint64_t)(c->opt.batch_delay_us + 999) / 1000, 0);
        }
        return;
    }
    send_all(c);
}

/* Periodic check of connect and request deadlines. Parts are in flight
 * oldest first, so only the head of each list needs a look. */
static void on_tick(uv_timer_t *t)
{
    ps_client *c = t->data;
    uint64_t now = now_ns();
    nconn *seed = c->seed;
    if (seed && (seed->state == NC_CONNECTING || seed->state == NC_HELLO) &&
        now > seed->deadline_ns)
        nc_drop(seed, PS_ETIMEDOUT, "no answer from %s within %d ms",
                seed->name, c->opt.connect_timeout_ms);
    for (int i = 0; i < c->nnodes; i++) {
        nconn *nc = c->nodes[i];
        if ((nc->state == NC_CONNECTING || nc->state == NC_HELLO) &&
            now > nc->deadline_ns)
            nc_drop(nc, PS_ETIMEDOUT, "no answer from %s within %d ms",
                    nc->name, c->opt.connect_timeout_ms);
        else if (nc->state == NC_READY)
            for (int k = 0; k < 2; k++) {
                ps_part *p = nc->fly[k].head;
                if (p && now > p->deadline_ns) {
                    nc_drop(nc, PS_ETIMEDOUT, "no reply from %s within %d ms "
                            "(request %llu)", nc->name,
                            k ? c->opt.sync_timeout_ms
                              : c->opt.request_timeout_ms *
                                    (c->opt.max_retries + 1),
                            (unsigned long long)p->msg.ts);
                    break;
                }
            }
    }
}

static void *io_main(void *arg)
{
    ps_client *c = arg;
    /* SIGPIPE from a write to a vanished server goes to this thread;
     * blocking it here leaves the trainer's own handling untouched. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    nc_connect(c->seed);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    return NULL;
}

/* ---- public API ----------------------------------------------------- */

static uint64_t random_id(void)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1)
            v = 0;
        fclose(f);
    }
    return v ^ now_ns() ^ ((uint64_t)getpid() << 32);
}

static void client_free(ps_client *c)
{
    if (c->nodes)
        for (int i = 0; i < c->nnodes; i++)
            nc_free(c->nodes[i]);
    free(c->nodes);
    nc_free(c->seed);
    free(c->seeds);
    free(c->fails);
    free(c->token);
    ps_map_destroy(&c->reqs);
    psw_layout_free(&c->layout);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* Stops the I/O thread and frees the client. */
static void client_stop(ps_client *c)
{
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    pthread_mutex_unlock(&c->mu);
    uv_async_send(&c->wake);
    pthread_join(c->thread, NULL);
    if (uv_loop_close(&c->loop))
        fprintf(stderr, "libpsclient: event loop closed with open handles\n");
    client_free(c);
}

int ps_open(ps_client **out, const char *servers, const ps_options *o)
{
    char err[256];
    *out = NULL;
    ps_client *c = calloc(1, sizeof *c);
    if (!c)
        return PS_ENOMEM;
    if (o)
        c->opt = *o;
    else
        ps_options_init(&c->opt);
    if (c->opt.sync_timeout_ms <= 0)
        c->opt.sync_timeout_ms = 600000;     /* options from before it existed */
    if (c->opt.connect_timeout_ms <= 0 || c->opt.request_timeout_ms <= 0 ||
        c->opt.max_retries < 0 || c->opt.batch_delay_us < 0 ||
        c->opt.worker < -1) {
        fprintf(stderr, "libpsclient: ps_open: invalid options\n");
        free(c);
        return PS_EINVAL;
    }
    if (c->opt.auth_token) {
        fprintf(stderr, "libpsclient: ps_open: auth_token is not supported "
                "by this release\n");
        free(c);
        return PS_EINVAL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    ps_map_init(&c->reqs);
    int rc = ps_nodes_parse(servers, &c->seeds, &c->nseeds, err, sizeof err);
    if (rc) {
        fprintf(stderr, "libpsclient: ps_open: %s\n", err);
        client_free(c);
        return rc;
    }
    c->client_id = random_id();
    c->incarnation = now_ns();
    c->seed = nc_new(c, -1);
    if (!c->seed || uv_loop_init(&c->loop)) {
        client_free(c);
        return PS_ENOMEM;
    }
    uv_async_init(&c->loop, &c->wake, on_wake);
    uv_timer_init(&c->loop, &c->tick);
    uv_timer_init(&c->loop, &c->batch);
    c->wake.data = c->tick.data = c->batch.data = c;
    int period = c->opt.request_timeout_ms / 4;
    if (c->opt.connect_timeout_ms / 4 < period)
        period = c->opt.connect_timeout_ms / 4;
    period = period < 5 ? 5 : period > 100 ? 100 : period;
    uv_timer_start(&c->tick, on_tick, (uint64_t)period, (uint64_t)period);
    if (pthread_create(&c->thread, NULL, io_main, c)) {
        uv_close((uv_handle_t *)&c->wake, NULL);
        uv_close((uv_handle_t *)&c->tick, NULL);
        uv_close((uv_handle_t *)&c->batch, NULL);
        uv_run(&c->loop, UV_RUN_DEFAULT);
        uv_loop_close(&c->loop);
        client_free(c);
        return PS_ENOMEM;
    }
    pthread_mutex_lock(&c->mu);
    while (c->open_state == 0)
        pthread_cond_wait(&c->cv, &c->mu);
    int st = c->open_state;
    pthread_mutex_unlock(&c->mu);
    if (st < 0) {
        fprintf(stderr, "libpsclient: ps_open: %s\n", c->open_err);
        client_stop(c);
        return st;
    }
    *out = c;
    return 0;
}

int ps_wait_all(ps_client *c)
{
    if (!c)
        return PS_EINVAL;
    pthread_mutex_lock(&c->mu);
    c->cv_waiters++;
    while (c->reqs.n > 0)
        pthread_cond_wait(&c->cv, &c->mu);
    c->cv_waiters--;
    int st = c->first_error;
    if (st != PS_OK)
        set_error(c, "%s", c->first_error_text);
    c->first_error = PS_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

static int control(ps_client *c, int op, int node, uint64_t value);

void ps_close(ps_client *c)
{
    if (!c)
        return;
    ps_wait_all(c);
    /* A worker says goodbye, so bsp/ssp tables stop waiting for it at
     * once instead of after worker_grace. */
    if (c->opt.worker >= 0)
        control(c, PSW_OP_LEAVE, -1, 0);
    client_stop(c);
}

int ps_table(ps_client *c, const char *name, ps_table_info *info)
{
    if (!c || !name)
        return PS_EINVAL;
    for (int i = 0; i < c->layout.ntables; i++) {
        const psw_table_desc *t = &c->layout.tables[i];
        if (strcmp(t->name, name))
            continue;
        if (info) {
            info->id = (int)t->id;
            info->dense = t->dense;
            info->dim = t->dim;
            info->rows = t->rows;
        }
        return (int)t->id;
    }
    set_error(c, "no table named '%s' in the cluster", name);
    return PS_ENOTABLE;
}

/* Accepts a built request: timestamp, backpressure, queue, wake-up. */
static ps_ts submit(ps_client *c, ps_req *r, ps_done_fn cb, void *arg)
{
    r->cb = cb;
    r->arg = arg;
    pthread_mutex_lock(&c->mu);
    /* Backpressure: wait while the bytes in flight exceed the limit. A
     * lone request always goes, and the I/O thread (callbacks) never
     * waits, since it is the one that would have to wake it. */
    if (!pthread_equal(pthread_self(), c->thread)) {
        c->cv_waiters++;
        while (c->inflight_bytes > 0 && !c->closing &&
               c->inflight_bytes + r->bytes > c->opt.max_inflight_bytes)
            pthread_cond_wait(&c->cv, &c->mu);
        c->cv_waiters--;
    }
    if (c->closing) {
        pthread_mutex_unlock(&c->mu);
        ps_req_free(r);
        set_error(c, "the client is closing");
        return PS_ECLOSED;
    }
    ps_ts ts = ++c->last_ts;
    ps_req_set_ts(r, ts);
    if (ps_map_put(&c->reqs, (uint64_t)ts, r)) {
        pthread_mutex_unlock(&c->mu);
        ps_req_free(r);
        set_error(c, "out of memory");
        return PS_ENOMEM;
    }
    c->inflight_bytes += r->bytes;
    for (int i = 0; i < r->nparts; i++) {
        ps_part *p = &r->parts[i];
        if (c->sq_tail)
            c->sq_tail->next = p;
        else
            c->sq_head = p;
        c->sq_tail = p;
    }
    pthread_mutex_unlock(&c->mu);
    uv_async_send(&c->wake);
    return ts;
}

static int shape_of(ps_client *c, int table, ps_shape *sh)
{
    if (table < 0 || table >= c->layout.ntables) {
        set_error(c, "no table with id %d", table);
        return PS_ENOTABLE;
    }
    sh->nnodes = c->layout.nnodes;
    sh->shards = c->layout.shards;
    sh->table = &c->layout.tables[table];
    sh->table_id = (uint32_t)table;
    sh->max_payload = c->layout.max_frame > 256 ? c->layout.max_frame - 256 : 0;
    return 0;
}

static ps_ts keyed(ps_client *c, int op, int table, const uint64_t *keys,
                   size_t n, const float *vals, float *out, ps_done_fn cb,
                   void *arg)
{
    ps_shape sh;
    ps_req *r;
    char err[256];
    if (!c)
        return PS_EINVAL;
    int rc = shape_of(c, table, &sh);
    if (rc)
        return rc;
    if (n == 0 || !keys || (op != PSW_OP_PULL && !vals) ||
        (op != PSW_OP_PUSH && !out)) {
        set_error(c, "%s", n == 0 ? "no keys given" : "a buffer is NULL");
        return PS_EINVAL;
    }
    rc = ps_req_keys(&sh, op, keys, n, vals, out, &r, err, sizeof err);
    if (rc) {
        set_error(c, "%s", rc == PS_ENOMEM ? "out of memory" : err);
        return rc;
    }
    return submit(c, r, cb, arg);
}

static ps_ts ranged(ps_client *c, int op, int table, uint64_t first,
                    uint64_t count, const float *vals, float *out,
                    ps_done_fn cb, void *arg)
{
    ps_shape sh;
    ps_req *r;
    char err[256];
    if (!c)
        return PS_EINVAL;
    int rc = shape_of(c, table, &sh);
    if (rc)
        return rc;
    if ((op == PSW_OP_PUSH_RANGE && !vals) || (op == PSW_OP_PULL_RANGE && !out)) {
        set_error(c, "a buffer is NULL");
        return PS_EINVAL;
    }
    rc = ps_req_range(&sh, op, first, count, vals, out, &r, err, sizeof err);
    if (rc) {
        set_error(c, "%s", rc == PS_ENOMEM ? "out of memory" : err);
        return rc;
    }
    return submit(c, r, cb, arg);
}

ps_ts ps_push(ps_client *c, int table, const uint64_t *keys, size_t n,
              const float *vals, ps_done_fn cb, void *arg)
{
    return keyed(c, PSW_OP_PUSH, table, keys, n, vals, NULL, cb, arg);
}

ps_ts ps_pull(ps_client *c, int table, const uint64_t *keys, size_t n,
              float *out, ps_done_fn cb, void *arg)
{
    return keyed(c, PSW_OP_PULL, table, keys, n, NULL, out, cb, arg);
}

ps_ts ps_pushpull(ps_client *c, int table, const uint64_t *keys, size_t n,
                  const float *grads, float *out, ps_done_fn cb, void *arg)
{
    return keyed(c, PSW_OP_PUSHPULL, table, keys, n, grads, out, cb, arg);
}

ps_ts ps_push_range(ps_client *c, int table, uint64_t first, uint64_t count,
                    const float *vals, ps_done_fn cb, void *arg)
{
    return ranged(c, PSW_OP_PUSH_RANGE, table, first, count, vals, NULL, cb,
                  arg);
}

ps_ts ps_pull_range(ps_client *c, int table, uint64_t first, uint64_t count,
                    float *out, ps_done_fn cb, void *arg)
{
    return ranged(c, PSW_OP_PULL_RANGE, table, first, count, NULL, out, cb,
                  arg);
}

int ps_wait(ps_client *c, ps_ts ts)
{
    if (!c)
        return PS_EINVAL;
    pthread_mutex_lock(&c->mu);
    if (ts <= 0 || ts > c->last_ts) {
        pthread_mutex_unlock(&c->mu);
        set_error(c, "request %lld was never issued", (long long)ts);
        return PS_EINVAL;
    }
    if (ps_map_get(&c->reqs, (uint64_t)ts)) {
        ts_waiter w = { c->ts_waiters, ts, PTHREAD_COND_INITIALIZER };
        c->ts_waiters = &w;
        while (ps_map_get(&c->reqs, (uint64_t)ts))
            pthread_cond_wait(&w.cv, &c->mu);
        ts_waiter **pp = &c->ts_waiters;
        while (*pp != &w)
            pp = &(*pp)->next;
        *pp = w.next;
        pthread_cond_destroy(&w.cv);
    }
    int st = PS_OK;
    if (c->nfails) {
        uint64_t n = c->nfails < FAIL_RING ? c->nfails : FAIL_RING;
        for (uint64_t i = 0; i < n; i++) {
            const failure *f = &c->fails[(c->nfails - 1 - i) % FAIL_RING];
            if (f->ts == ts) {
                st = f->status;
                set_error(c, "%s", f->text);
                break;
            }
        }
        if (st == PS_OK && ts <= c->fails_forgotten) {
            st = PS_EINVAL;
            set_error(c, "the status of request %lld is no longer known: more "
                      "than %d requests failed after it (use callbacks or "
                      "ps_wait_all)", (long long)ts, FAIL_RING);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Sends a control message and waits for every node's answer. */
static int control(ps_client *c, int op, int node, uint64_t value)
{
    ps_req *r;
    int rc = ps_req_control(c->layout.nnodes, node, op, value, &r);
    if (rc) {
        set_error(c, "out of memory");
        return rc;
    }
    ps_ts ts = submit(c, r, NULL, NULL);
    return ts < 0 ? (int)ts : ps_wait(c, ts);
}

/* Whether the cluster has a table whose consistency is not async. */
static int has_sync_tables(const ps_client *c)
{
    for (int i = 0; i < c->layout.ntables; i++)
        if (c->layout.tables[i].consistency != PSW_CONS_ASYNC)
            return 1;
    return 0;
}

static int sync_allowed(ps_client *c, const char *what)
{
    if (c->opt.worker < 0) {
        set_error(c, "%s: this client is not a worker (open it with "
                  "ps_options.worker = 0..workers-1)", what);
        return 0;
    }
    if (!has_sync_tables(c)) {
        set_error(c, "%s: the cluster has no bsp or ssp table; async tables "
                  "have no clocks", what);
        return 0;
    }
    return 1;
}

int ps_clock(ps_client *c)
{
    if (!c)
        return PS_EINVAL;
    if (!sync_allowed(c, "ps_clock"))
        return PS_EINVAL;
    uint64_t next = __atomic_add_fetch(&c->clock, 1, __ATOMIC_RELAXED);
    return control(c, PSW_OP_CLOCK, -1, next);
}

int ps_barrier(ps_client *c)
{
    if (!c)
        return PS_EINVAL;
    if (c->opt.worker < 0) {
        set_error(c, "ps_barrier: this client is not a worker (open it with "
                  "ps_options.worker = 0..workers-1)");
        return PS_EINVAL;
    }
    uint64_t next = __atomic_add_fetch(&c->barrier, 1, __ATOMIC_RELAXED);
    return control(c, PSW_OP_BARRIER, 0, next);   /* node 0 keeps barriers */
}
