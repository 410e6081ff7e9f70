/* The I/O thread of libpsclient: one libuv loop owning one connection
 * per psd node (connect, HELLO, read, write, in-flight lists, deadlines),
 * fed with parts by the Customer (customer.c) through a uv_async wake-up,
 * reporting every reply or failure of a part back to it. See io.h. */
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "customer.h"
#include "internal.h"
#include "io.h"
#include "map.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"

#define BATCH_BYTES (64 * 1024)   /* a queue this full is sent at once */
#define HELLO_MAX_REPLY (1 << 20) /* layout frames are small */

typedef enum { NC_IDLE, NC_CONNECTING, NC_HELLO, NC_READY, NC_CLOSING } nstate;

typedef struct plist {
    psc_part *head, *tail;
} plist;

typedef struct nconn {
    uv_tcp_t tcp;                 /* first: handle pointers cast to nconn */
    uv_connect_t creq;
    psc_io *io;
    int node;                     /* index in the layout; -1: a seed */
    nstate state;
    int was_ready;                /* the connection got past HELLO */
    char name[280];
    struct sockaddr_storage sa;
    uint64_t deadline_ns;         /* for connect + HELLO */
    psw_reader rd;
    msgpack_zone zone;
    psc_map fly_map;               /* (ts << 16 | part) -> part in flight */
    plist fly[2];                 /* in flight, oldest first: [0] requests,
                                     [1] parts that may wait for other
                                     workers (a longer timeout) */
    psc_part *q_head, *q_tail;     /* waiting to be sent */
    size_t q_bytes;
    int drop_status;              /* what in-flight parts fail with */
    char drop_why[200];
} nconn;

/* The I/O thread's own state: touched only on that thread once it runs. */
struct psc_io {
    ps_client *c;
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t tick;
    uv_timer_t batch;
    int batch_armed;
    psc_addr *seeds;              /* ps_open's addresses, tried in order */
    int nseeds, seed_i;
    nconn *seed;                  /* connection to a seed, until the layout
                                     is known */
    nconn **nodes;                /* one per node of the layout */
    int nnodes;
};

static void nc_drop(nconn *nc, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void nc_send(nconn *nc);
static void nc_connect(nconn *nc);
static void open_done(psc_io *io, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static nconn *nc_new(psc_io *io, int node)
{
    nconn *nc = calloc(1, sizeof *nc);
    if (!nc)
        return NULL;
    nc->io = io;
    nc->node = node;
    nc->state = NC_IDLE;
    psc_map_init(&nc->fly_map);
    msgpack_zone_init(&nc->zone, 8192);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    return nc;
}

static void nc_free(nconn *nc)
{
    if (!nc)
        return;
    psc_map_destroy(&nc->fly_map);
    msgpack_zone_destroy(&nc->zone);
    psw_reader_destroy(&nc->rd);
    free(nc);
}

static void io_free(psc_io *io)
{
    if (io->nodes)
        for (int i = 0; i < io->nnodes; i++)
            nc_free(io->nodes[i]);
    free(io->nodes);
    nc_free(io->seed);
    free(io->seeds);
    free(io);
}


/* ---- connections ---------------------------------------------------- */

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

static void settle_fail(ps_client *c, psc_part *p, int status, const char *why)
{
    if (psc_part_fail(p, status, why))
        psc_customer_complete(&c->cu, p->req);
}

static int client_closing(ps_client *c)
{
    pthread_mutex_lock(&c->cu.mu);
    int closing = c->cu.closing;
    pthread_mutex_unlock(&c->cu.mu);
    return closing;
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

static void fly_unlink(nconn *nc, psc_part *p)
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

static void fly_append(nconn *nc, psc_part *p)
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
    psc_io *io = nc->io;
    ps_client *c = io->c;
    psc_map_destroy(&nc->fly_map);
    for (int k = 0; k < 2; k++) {
        psc_part *p = nc->fly[k].head;
        nc->fly[k].head = nc->fly[k].tail = NULL;
        while (p) {
            psc_part *n = p->next;
            p->next = p->prev = NULL;
            settle_fail(c, p, status, why);
            p = n;
        }
    }
    psc_part *p;
    if (!queued)
        return;
    p = nc->q_head;
    nc->q_head = nc->q_tail = NULL;
    nc->q_bytes = 0;
    while (p) {
        psc_part *n = p->next;
        p->next = NULL;
        settle_fail(c, p, status, why);
        p = n;
    }
}

static void on_nc_closed(uv_handle_t *h)
{
    nconn *nc = (nconn *)h;
    psc_io *io = nc->io;
    ps_client *c = io->c;
    int was_ready = nc->was_ready;
    nc->state = NC_IDLE;
    nc->was_ready = 0;
    psw_reader_destroy(&nc->rd);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    /* A connection that never came up takes its queue down with it, so a
     * dead server fails requests instead of retrying forever. */
    int closing = client_closing(c);
    nc_fail_all(nc, nc->drop_status, nc->drop_why, !was_ready || closing);
    if (closing)
        return;
    if (c->open_state == PSC_OPENING) {
        if (nc == io->seed && io->seed_i + 1 < io->nseeds) {
            io->seed_i++;         /* try the next address we were given */
            nc_connect(nc);
            return;
        }
        open_done(io, nc->drop_status, "%s", nc->drop_why);
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
    size_t n = 0, bytes = PSW_BODY_OVERHEAD;
    for (psc_part *p = nc->q_head; p; p = p->next) {
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
    psc_io *io = nc->io;
    ps_client *c = io->c;
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
        size_t n = frame_parts(nc, c->cluster.max_frame);
        psw_out_frame_begin(&w->out);
        for (size_t i = 0; i < n; i++) {
            psc_part *p = nc->q_head;
            nc->q_head = p->next;
            nc->q_bytes -= p->wire_bytes;
            psw_pack_request(&w->out, &p->msg);
            p->deadline_ns = deadline[p->slow];
            fly_append(nc, p);
            if (psc_map_put(&nc->fly_map, fly_key(p->msg.ts, p->msg.part), p))
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
    psc_io *io = nc->io;
    ps_client *c = io->c;
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
    psc_io *io = nc->io;
    ps_client *c = io->c;
    if (nc->state != NC_IDLE)
        return;
    if (nc == io->seed && c->open_state == PSC_OPENING) {
        const psc_addr *a = &io->seeds[io->seed_i];
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_socktype = SOCK_STREAM;
        snprintf(nc->name, sizeof nc->name, "%s:%s", a->host, a->port);
        /* Seeds may be host names; resolving blocks only ps_open. */
        int g = getaddrinfo(a->host, a->port, &hints, &res);
        if (g || !res) {
            nc->state = NC_CONNECTING;       /* so nc_drop closes it */
            uv_tcp_init(&io->loop, &nc->tcp);
            nc_drop(nc, PS_ECONN, "cannot resolve %s: %s", nc->name,
                    gai_strerror(g));
            return;
        }
        memcpy(&nc->sa, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
    }
    uv_tcp_init(&io->loop, &nc->tcp);
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
static int adopt_layout(psc_io *io, nconn *seed, psw_cluster *l)
{
    ps_client *c = io->c;
    io->nodes = calloc((size_t)l->nnodes, sizeof *io->nodes);
    if (!io->nodes)
        return -1;
    io->nnodes = l->nnodes;
    /* Read by callers only after the open completes, which publishes it
     * (open_done takes open_mu). */
    c->cluster = *l;
    memset(l, 0, sizeof *l);
    seed->node = c->cluster.node_index;
    io->nodes[seed->node] = seed;
    io->seed = NULL;
    for (int i = 0; i < io->nnodes; i++) {
        if (io->nodes[i])
            continue;
        nconn *nc = nc_new(io, i);
        if (!nc)
            return -1;
        io->nodes[i] = nc;
        snprintf(nc->name, sizeof nc->name, "%s", c->cluster.nodes[i]);
        if (numeric_addr(c->cluster.nodes[i], &nc->sa)) {
            open_done(io, PS_EPROTO, "bad node address %s in the layout",
                      c->cluster.nodes[i]);
            return 0;
        }
        nc_connect(nc);
    }
    return 0;
}

static void check_open(psc_io *io)
{
    if (io->c->open_state != PSC_OPENING || !io->nodes)
        return;
    for (int i = 0; i < io->nnodes; i++)
        if (io->nodes[i]->state != NC_READY)
            return;
    open_done(io, PS_OK, "%s", "");
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
    psc_io *io = nc->io;
    ps_client *c = io->c;
    psw_cluster l;
    char err[160];
    if (psw_hello_ok_decode(msg, &l, err, sizeof err)) {
        nc_drop(nc, PS_EPROTO, "%s: %s", nc->name, err);
        return;
    }
    uint64_t l_clock = l.worker_clock, l_barrier = l.worker_barrier;
    if (l.status != PSW_OK) {
        nc_drop(nc, l.status, "%s refused the connection: %s", nc->name,
                l.text);
        psw_cluster_free(&l);
        return;
    }
    if (io->nodes) {
        /* Every node must describe the same cluster, and be the node we
         * meant to reach. */
        if (l.epoch != c->cluster.epoch || l.node_index != nc->node) {
            nc_drop(nc, PS_EPROTO, "%s describes a different cluster layout "
                    "(node %d, epoch %016llx; expected node %d, epoch "
                    "%016llx): are all nodes running the same ini file?",
                    nc->name, l.node_index, (unsigned long long)l.epoch,
                    nc->node, (unsigned long long)c->cluster.epoch);
            psw_cluster_free(&l);
            return;
        }
        psw_cluster_free(&l);
    } else if (adopt_layout(io, nc, &l)) {
        psw_cluster_free(&l);
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
    /* Reply frames are at most max_frame: the size rule of proto/msg.h. */
    nc->rd.max_frame = (size_t)c->cluster.max_frame;
    check_open(io);
    nc_send(nc);
}

static void handle_frame(nconn *nc, const char *body, size_t len)
{
    psc_io *io = nc->io;
    ps_client *c = io->c;
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
        psc_part *p = psc_map_del(&nc->fly_map, fly_key(m.ts, m.part));
        if (!p) {
            nc_drop(nc, PS_EPROTO, "%s answered request %llu part %u, which "
                    "is not in flight", nc->name, (unsigned long long)m.ts,
                    m.part);
            return;
        }
        fly_unlink(nc, p);
        if (psc_part_reply(p, &m))
            psc_customer_complete(&c->cu, p->req);
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

/* Ends ps_open's wait: the client is open (status PS_OK) or failed. */
static void open_done(psc_io *io, int status, const char *fmt, ...)
{
    ps_client *c = io->c;
    pthread_mutex_lock(&c->open_mu);
    if (c->open_state == PSC_OPENING) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->open_err, sizeof c->open_err, fmt, ap);
        va_end(ap);
        c->open_status = status;
        c->open_state = status == PS_OK ? PSC_OPEN : PSC_OPEN_FAILED;
        pthread_cond_broadcast(&c->open_cv);
    }
    pthread_mutex_unlock(&c->open_mu);
}

static void shutdown_io(psc_io *io)
{
    uv_close((uv_handle_t *)&io->wake, NULL);
    uv_close((uv_handle_t *)&io->tick, NULL);
    uv_close((uv_handle_t *)&io->batch, NULL);
    if (io->seed)                 /* still opening: no layout yet */
        nc_drop(io->seed, PS_ECLOSED, "client closed");
    for (int i = 0; i < io->nnodes; i++)
        if (io->nodes[i])
            nc_drop(io->nodes[i], PS_ECLOSED, "client closed");
}

static void send_all(psc_io *io)
{
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        if (nc->state == NC_IDLE && nc->q_head)
            nc_connect(nc);
        else
            nc_send(nc);
    }
}

static void on_batch(uv_timer_t *t)
{
    psc_io *io = t->data;
    io->batch_armed = 0;
    send_all(io);
}

static void on_wake(uv_async_t *a)
{
    psc_io *io = a->data;
    ps_client *c = io->c;
    int closing;
    psc_part *p = psc_customer_take(&c->cu, &closing);

    size_t queued = 0;
    while (p) {
        psc_part *n = p->next;
        nconn *nc = io->nodes[p->node];
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
        shutdown_io(io);
        return;
    }
    /* A small request may wait batch_delay_us for company; a full batch,
     * or no delay configured, goes now. */
    if (c->opt.batch_delay_us > 0 && queued && queued < BATCH_BYTES) {
        if (!io->batch_armed) {
            io->batch_armed = 1;
            uv_timer_start(&io->batch, on_batch,
                           (uint64_t)(c->opt.batch_delay_us + 999) / 1000, 0);
        }
        return;
    }
    send_all(io);
}

/* Periodic check of connect and request deadlines. Parts are in flight
 * oldest first, so only the head of each list needs a look. */
static void on_tick(uv_timer_t *t)
{
    psc_io *io = t->data;
    ps_client *c = io->c;
    uint64_t now = now_ns();
    nconn *seed = io->seed;
    if (seed && (seed->state == NC_CONNECTING || seed->state == NC_HELLO) &&
        now > seed->deadline_ns)
        nc_drop(seed, PS_ETIMEDOUT, "no answer from %s within %d ms",
                seed->name, c->opt.connect_timeout_ms);
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        if ((nc->state == NC_CONNECTING || nc->state == NC_HELLO) &&
            now > nc->deadline_ns)
            nc_drop(nc, PS_ETIMEDOUT, "no answer from %s within %d ms",
                    nc->name, c->opt.connect_timeout_ms);
        else if (nc->state == NC_READY)
            for (int k = 0; k < 2; k++) {
                psc_part *p = nc->fly[k].head;
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
    psc_io *io = arg;
    /* SIGPIPE from a write to a vanished server goes to this thread;
     * blocking it here leaves the trainer's own handling untouched. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    nc_connect(io->seed);
    uv_run(&io->loop, UV_RUN_DEFAULT);
    return NULL;
}


/* ---- start and stop --------------------------------------------------- */

int psc_io_start(ps_client *c, psc_addr *seeds, int nseeds)
{
    psc_io *io = calloc(1, sizeof *io);
    if (!io) {
        free(seeds);
        return PS_ENOMEM;
    }
    io->c = c;
    io->seeds = seeds;
    io->nseeds = nseeds;
    io->seed = nc_new(io, -1);
    if (!io->seed || uv_loop_init(&io->loop)) {
        nc_free(io->seed);
        free(seeds);
        free(io);
        return PS_ENOMEM;
    }
    uv_async_init(&io->loop, &io->wake, on_wake);
    uv_timer_init(&io->loop, &io->tick);
    uv_timer_init(&io->loop, &io->batch);
    io->wake.data = io->tick.data = io->batch.data = io;
    int period = c->opt.request_timeout_ms / 4;
    if (c->opt.connect_timeout_ms / 4 < period)
        period = c->opt.connect_timeout_ms / 4;
    period = period < 5 ? 5 : period > 100 ? 100 : period;
    uv_timer_start(&io->tick, on_tick, (uint64_t)period, (uint64_t)period);
    c->io = io;
    if (pthread_create(&io->thread, NULL, io_main, io)) {
        uv_close((uv_handle_t *)&io->wake, NULL);
        uv_close((uv_handle_t *)&io->tick, NULL);
        uv_close((uv_handle_t *)&io->batch, NULL);
        uv_run(&io->loop, UV_RUN_DEFAULT);
        uv_loop_close(&io->loop);
        io_free(io);
        c->io = NULL;
        return PS_ENOMEM;
    }
    return 0;
}

void psc_io_wake(ps_client *c)
{
    uv_async_send(&c->io->wake);
}

int psc_io_on_thread(const ps_client *c)
{
    return c->io && pthread_equal(pthread_self(), c->io->thread);
}

void psc_io_stop(ps_client *c)
{
    psc_io *io = c->io;
    if (!io)
        return;
    psc_customer_close(&c->cu);
    uv_async_send(&io->wake);
    pthread_join(io->thread, NULL);
    if (uv_loop_close(&io->loop))
        fprintf(stderr, "libpsclient: event loop closed with open handles\n");
    io_free(io);
    c->io = NULL;
}
