/* The I/O thread of libpsclient: one libuv loop owning one connection
 * per psd node, fed with parts by the Customer (customer.c) through a
 * uv_async wake-up, reporting every reply or failure of a part back to
 * it. It keeps the Customer's promises on the wire: a connection that
 * breaks, stays silent past peer_timeout_ms or leaves a part unanswered
 * past request_timeout_ms is closed, re-made with exponential backoff and
 * jitter, and every unanswered part is sent again (the server applies a
 * push once, whatever the copies); a part fails only when its bounded
 * time is up. Idle connections carry PINGs both ways. See io.h. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "customer.h"
#include "internal.h"
#include "io.h"
#include "../proto/map.h"
#include "slice.h"
#include "stats.h"
#include "../proto/frame.h"
#include "../proto/auth.h"
#include "../proto/layout.h"
#include "../proto/msg.h"
#include "../proto/status.h"

/* What a trainer whose clock, barrier or ssp pull timed out reads next:
 * the node knows whom it waits for, the client does not. */
#define WHO_HINT                                                            \
    "the node's log says whom it waits for, after 10 s of waiting; "       \
    "psctl --json stats lists each worker's state, clock and barrier; "    \
    "psctl end-job ends a job an earlier run left half-done"

#define BATCH_BYTES (64 * 1024)   /* a queue this full is sent at once */
#define HELLO_MAX_REPLY (2 << 20) /* layout frames: 4096 nodes of up to
                                     262 bytes fit */
#define BACKOFF_MIN_MS 50         /* reconnect delays double from here */
#define BACKOFF_MAX_MS 2000       /* up to here, with jitter */
#define LAST_TRY_MS 100           /* ps_open's last attempt, before its end */
#define MS 1000000ULL             /* ns per ms */
#define ADDRS_MAX 8               /* addresses kept of a name that has more */

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
    char name[280];
    /* The node's addresses in the resolver's order (a name may have
     * several: IPv6 and IPv4, or a DNS name with many records). An
     * attempt that never connects goes on to the next at once; the one
     * that connected is kept for reconnections (sa_i). */
    struct sockaddr_storage sa[ADDRS_MAX];
    int nsa, sa_i;
    int reached;                  /* this attempt connected (TCP) */
    uint64_t connect_ns;          /* when this attempt started */
    uint64_t hello_ns;            /* connect + HELLO must end by then */
    uint64_t attempt_end_ns;      /* hello_ns once connected (before, it
                                     may be earlier: see nc_dial) */
    uint64_t retry_ns;            /* IDLE: no new attempt before then */
    uint64_t backoff_ms;          /* the last delay; 0 after a success */
    int ever_ready;               /* a later HELLO_OK is a reconnection */
    uint64_t w_clock;             /* the clock count this node gave our
                                     worker at its last HELLO_OK */
    int w_known;                  /* w_clock was given */
    uint32_t version;             /* the protocol version our HELLOs take:
                                     a worker's 4, or 3 once the node
                                     refused 4 (an older release); a
                                     reader's 3 (proto/msg.h) */
    int fell_back;                /* refused 4 by that node just now: the
                                     same address again, at once, in 3 */
    int fatal;                    /* refused for good: PS_E*, else 0 */
    int mismatch;                 /* after ps_open, the node described
                                     another layout at its last HELLO_OK:
                                     what waits for it fails, and it is
                                     asked again after the backoff */
    int last_status;              /* why the last connection or attempt
                                     ended: what a failed open returns */
    char last_why[640];
    int drop_status;              /* why the current one is closing */
    char drop_why[640];          /* a node's refusal is up to PSW_TEXT_MAX */
    uint64_t recv_ns, send_ns;    /* last bytes in, last write out */
    uint64_t ready_ns;            /* when this connection passed HELLO */
    uint64_t down_ns;             /* since when the node has had no
                                     connection past HELLO (0: it has one,
                                     or never had one yet) */
    uint64_t max_frame;           /* what the node's latest HELLO_OK said;
                                     0 before the first */
    ps_ts acked;                  /* the ACK this connection carried */
    /* The handshake: our nonce, then (a node with a token) the transcript
     * both proofs cover once its CHALLENGE came. */
    psw_transcript tr;
    int challenged;
    /* A node named by a host name is looked up again (in the background)
     * whenever a connection to it ends, so a node that comes back at
     * another address (a rescheduled container) is found again. */
    char host[PSW_HOST_MAX];      /* "" for a numeric address */
    char port[8];
    uv_getaddrinfo_t gai;
    int gai_busy;
    psw_reader rd;
    /* The walk over the reply frame being received that finds large rows
     * to read straight into their part's out (divert_rows). */
    int walk;                     /* 0 not begun, 1 on, -1 given up */
    uint32_t walk_left;           /* messages not yet passed */
    size_t walk_at;               /* body offset (psw_reader_divert's) */
    int walk_skip;                /* values to pass before the next
                                     message, when inside one */
    psc_part *direct;             /* the part whose rows go to out now */
    msgpack_zone zone;
    psw_map fly_map;              /* (ts << 16 | part) -> part in flight */
    plist fly[2];                 /* in flight, oldest first: [0] requests,
                                     [1] parts that may wait for other
                                     workers (bounded by sync_timeout_ms) */
    uint64_t sends;               /* parts sent so far (psc_part.seq) */
    psc_part *q_head, *q_tail;    /* waiting to be sent */
    size_t q_bytes;
    psc_stats st;                 /* this node's counters */
    psc_stats base;               /* their values at the last reset */
} nconn;

/* The I/O thread's own state: touched only on that thread once it runs
 * (the stats, read by ps_stats, excepted). */
struct psc_io {
    ps_client *c;
    pthread_t thread;
    pthread_t self;               /* the I/O thread's id, as it sees it:
                                     set by it before anything runs on
                                     it, published by self_set */
    int self_set;
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t tick;
    uv_timer_t batch;
    uv_timer_t retry;             /* the next reconnection attempt */
    int batch_armed;
    uint64_t open_ns;             /* ps_open gives up then */
    uint64_t rng;                 /* jitter */
    psc_addr *seeds;              /* ps_open's addresses, tried in order */
    uint64_t cut_max;             /* the largest c->max_frame ever was */
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
static void nc_dial(nconn *nc);
static void arm_retry(psc_io *io);
static void open_done(psc_io *io, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static uint64_t now_ns(void)
{
    return uv_hrtime();
}

/* The protocol version a connection's HELLO takes first (proto/msg.h). */
static uint32_t hello_version(const ps_client *c)
{
    return c->opt.worker >= 0 ? PSW_VERSION : PSW_VERSION_READER;
}

/* Whether nc is made again when lost, with nothing to send: an open
 * worker's connections are (PROTOCOL.md, section 12): a node lets a
 * worker it has no connection from go after worker_grace, and takes one
 * whose connection closed before its OPENED arrived for one never
 * joined. Not a failed open's seed, nor once ps_close sends LEAVE (a
 * node that answered it would take a new HELLO for a new join). Read on
 * the I/O thread, which writes open_state. */
static int keeps_up(const nconn *nc)
{
    const ps_client *c = nc->io->c;
    return c->opt.worker >= 0 && c->open_state == PSC_OPEN &&
           nc != nc->io->seed &&
           !__atomic_load_n(&c->leaving, __ATOMIC_RELAXED);
}

static nconn *nc_new(psc_io *io, int node)
{
    nconn *nc = calloc(1, sizeof *nc);
    if (!nc)
        return NULL;
    nc->io = io;
    nc->node = node;
    nc->state = NC_IDLE;
    nc->version = hello_version(io->c);
    psw_map_init(&nc->fly_map);
    msgpack_zone_init(&nc->zone, 8192);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    return nc;
}

static void nc_free(nconn *nc)
{
    if (!nc)
        return;
    psw_map_destroy(&nc->fly_map);
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

static int client_closing(ps_client *c)
{
    pthread_mutex_lock(&c->cu.mu);
    int closing = c->cu.closing;
    pthread_mutex_unlock(&c->cu.mu);
    return closing;
}

/* ---- failing parts --------------------------------------------------- */

/* Fails a part for good. why says what went wrong; the note says whether
 * a push may have been applied, which only the sends tell. */
static void part_fail(ps_client *c, psc_part *p, int status, const char *why)
{
    char text[1024];
    const char *note = "";
    if (psw_op_has(p->msg.op, PSW_OPF_PUSHES)) {
        note = p->sends == 0 ? " (never sent: this part was not applied)"
                             : " (sent but not answered: it may have been "
                               "applied)";
        p->req->maybe += p->sends > 0;
    }
    /* A callback that blocks is the trainer's own doing, and nothing in
     * "not sent within its bounded time" says so (a trial's callback slept
     * 3 s: every request issued meanwhile failed so). It comes first, as
     * the likeliest cause: after it the node's causes read as the reason
     * (an API trial). */
    char held[200] = "";
    uint64_t cb = status == PS_ETIMEDOUT
                      ? psc_customer_cb_held(&c->cu, p->req->submit_ns)
                      : 0;
    if (cb)
        snprintf(held, sizeof held, "a completion callback held this "
                 "client's I/O thread for %llu ms meanwhile (callbacks run "
                 "on it, and while one runs no request is sent or read); "
                 "else: ", (unsigned long long)(cb / MS));
    snprintf(text, sizeof text, "%s%s%s", held, why, note);
    if (psc_part_fail(p, status, text))
        psc_customer_complete(&c->cu, p->req);
}

static void fail_list(ps_client *c, psc_part *p, int status, const char *why)
{
    while (p) {
        psc_part *n = p->next;
        p->next = p->prev = NULL;
        part_fail(c, p, status, why);
        p = n;
    }
}

static void fail_queue(nconn *nc, int status, const char *why)
{
    psc_part *p = nc->q_head;
    nc->q_head = nc->q_tail = NULL;
    nc->q_bytes = 0;
    fail_list(nc->io->c, p, status, why);
}

/* A request's bounded time, request_timeout_ms × (max_retries + 1), in
 * ns. Both may be up to INT_MAX ("retry for ever"): the product then
 * stays at its largest instead of wrapping round to a short time. */
static uint64_t bounded_ns(const ps_client *c)
{
    uint64_t ms = (uint64_t)c->opt.request_timeout_ms *
                  ((uint64_t)c->opt.max_retries + 1);   /* < 2^62 */
    return ms > UINT64_MAX / MS ? UINT64_MAX : ms * MS;
}

/* Fails the queued parts whose bounded time is up. */
static void expire_queue(nconn *nc, uint64_t now)
{
    const ps_client *c = nc->io->c;
    uint64_t bound = bounded_ns(c);
    psc_part **pp = &nc->q_head, *last = NULL;
    while (*pp) {
        psc_part *p = *pp;
        /* A part that may wait for other workers (sync_timeout_ms) waits
         * that long only for them: a node that cannot be reached fails
         * it as it fails any request, once unreachable for the request
         * bound since it went down or since the call, whichever is later
         * (ten minutes of silence for a dead node would look like a slow
         * worker). */
        uint64_t from = nc->down_ns > p->req->submit_ns ? nc->down_ns
                                                        : p->req->submit_ns;
        int unreachable = p->slow && nc->down_ns && now >= from &&
                          now - from >= bound;
        if (now >= p->expire_ns || unreachable) {
            *pp = p->next;
            nc->q_bytes -= p->wire_bytes;
            p->next = NULL;
            char why[1024];
            if (unreachable)
                /* Both figures: the bound counts from the call when the
                 * node was down before it ("unreachable for 2578 ms
                 * (request_timeout_ms x ...)" read as a 2578 ms bound). */
                snprintf(why, sizeof why, "request %llu: node %d (%s) "
                         "unreachable for %llu ms (request_timeout_ms x "
                         "(max_retries + 1) = %llu ms, from the call or the "
                         "loss, whichever came later): %.400s",
                         (unsigned long long)p->msg.ts, nc->node, nc->name,
                         (unsigned long long)((now - nc->down_ns) / MS),
                         (unsigned long long)(bound / MS),
                         nc->last_why[0] ? nc->last_why : "not connected");
            else if (nc->state == NC_READY && p->slow)
                /* A part that may wait for other workers, bounded by
                 * sync_timeout_ms alone, still queued behind the send
                 * window (a node that stopped reading). */
                snprintf(why, sizeof why, "request %llu: not sent to node "
                         "%d (%s) within sync_timeout_ms (%d ms), its bound: "
                         "it waited behind 8 MiB of requests the node had "
                         "not read", (unsigned long long)p->msg.ts, nc->node,
                         nc->name, c->opt.sync_timeout_ms);
            else if (nc->state == NC_READY)
                /* Connected, yet never sent (nc_send): it was held. */
                snprintf(why, sizeof why, "request %llu: not sent to node "
                         "%d (%s) within its bounded time (request_timeout_ms "
                         "x (max_retries + 1)): it waited until the node was "
                         "connected again, or behind a push of non-finite "
                         "values, whose parts holding them go first, alone, "
                         "or behind 8 MiB of requests the node had not read",
                         (unsigned long long)p->msg.ts, nc->node, nc->name);
            else
                snprintf(why, sizeof why, "request %llu: node %d (%s) did "
                         "not answer within its bounded time: %s",
                         (unsigned long long)p->msg.ts, nc->node, nc->name,
                         nc->last_why[0] ? nc->last_why : "not connected");
            part_fail(nc->io->c, p, PS_ETIMEDOUT, why);
        } else {
            last = p;
            pp = &p->next;
        }
    }
    nc->q_tail = last;
}

/* The bytes of rows p's reply carries (0 for a push). */
static uint64_t part_rows(const psc_part *p)
{
    return p->out ? (p->msg.op == PSW_OP_PULL_RANGE ? p->msg.count
                                                     : p->msg.nkeys) *
                        p->req->dim * sizeof(float)
                  : 0;
}

/* Whether the node would refuse p for its size: its message must fit a
 * frame of max_frame, and the rows of its reply one message's payload
 * (PROTOCOL.md §7). Each way on its own: wire_bytes adds both, which
 * bounds the parts that share a frame, but a PUSHPULL alone in its frame
 * carries its rows both ways and fits when each way does. */
static int too_big(const nconn *nc, const psc_part *p)
{
    uint64_t rows = part_rows(p);
    return PSW_BODY_OVERHEAD + p->wire_bytes - rows > nc->max_frame ||
           rows > psw_payload_max(nc->max_frame);
}

/* Rows of p (a push, pull or range op) that one message to nc may
 * carry: its request within max_frame, the rows of its reply within one
 * message's payload (too_big). */
static uint64_t rows_fitting(const nconn *nc, const psc_part *p)
{
    uint64_t rowb = (uint64_t)p->req->dim * sizeof(float);
    uint64_t fixed = PSW_BODY_OVERHEAD + PSW_MSG_OVERHEAD;
    int keyed = p->msg.op == PSW_OP_PUSH || p->msg.op == PSW_OP_PULL;
    int push = psw_op_has(p->msg.op, PSW_OPF_PUSHES);
    uint64_t per = (keyed ? 8 : 0) + (push ? rowb : 0);
    if (nc->max_frame <= fixed || !rowb)
        return 0;
    uint64_t n = per ? (nc->max_frame - fixed) / per : UINT64_MAX;
    if (p->out && psw_payload_max(nc->max_frame) / rowb < n)
        n = psw_payload_max(nc->max_frame) / rowb;
    return n;
}

/* Rows [at, at + n) of part p as a part of their own, q. */
static void part_rows_of(const psc_part *p, psc_part *q, uint64_t at,
                         uint64_t n)
{
    size_t dim = p->req->dim, rowb = dim * sizeof(float);
    *q = *p;
    q->next = q->prev = NULL;
    q->direct = 0;
    if (p->msg.op == PSW_OP_PUSH || p->msg.op == PSW_OP_PULL) {
        q->msg.keys = p->msg.keys + at * 8;
        q->msg.nkeys = n;
    } else {
        q->msg.first = p->msg.first + at;
        q->msg.count = n;
    }
    if (p->msg.vals) {
        q->msg.vals = p->msg.vals + at * rowb;
        q->msg.vals_len = n * rowb;
    }
    if (p->out) {
        q->pos = p->pos ? p->pos + at : NULL;
        q->out = p->pos ? p->out : p->out + at * dim;
    }
    q->wire_bytes = psc_part_wire(&q->msg, rowb);
}

/* Cuts queued part p, too large for nc's max_frame, into parts that fit,
 * in its place in the queue (linked after it; p becomes the first): the
 * request's new parts take numbers after its others. Only a part whose
 * rows may go in several messages without changing what it does: a pull
 * (a pull again reads rows as they are), or a push never sent. A push
 * sent may have been applied, and the node knows its copy by its number
 * only; a pushpull's rows are read after its own push, which another
 * message of the same keys would not see; a push holding a NaN is sent
 * so that it is refused whole. Returns the last of the parts,
 * or NULL (p unchanged) where it cannot be cut or memory ran out. */
static psc_part *recut(nconn *nc, psc_part *p, const char **why_not)
{
    int op = p->msg.op;
    psc_req *r = p->req;
    if (op == PSW_OP_PUSHPULL) {
        *why_not = "a pushpull part, which reads its rows after its own push";
        return NULL;
    }
    int push = op != PSW_OP_PULL && op != PSW_OP_PULL_RANGE;
    if (push && p->sends) {
        *why_not = "a push sent before, which the node knows by its number";
        return NULL;
    }
    /* Its pieces without one would be applied where the push must be
     * refused whole (customer.c, stage): a push of several parts with one
     * (r->whole), or this part alone holding one (a push of one part, not
     * read at submit; a review saw rows 0..188 of 200 applied). */
    if (push && (r->whole || psw_nonfinite(p->msg.vals, p->msg.vals_len))) {
        *why_not = "a push holding a NaN or an infinity, which goes whole";
        return NULL;
    }
    uint64_t rows = op == PSW_OP_PUSH || op == PSW_OP_PULL ? p->msg.nkeys
                                                            : p->msg.count;
    uint64_t per = rows_fitting(nc, p);
    psc_part q;
    if (per)
        part_rows_of(p, &q, 0, per);
    /* too_big(q) is not expected: rows_fitting is exact. */
    if (!per || rows <= 1 || too_big(nc, &q)) {
        *why_not = "one row does not fit";
        return NULL;
    }
    uint64_t k = (rows + per - 1) / per;
    if (k - 1 > (uint64_t)PSW_MAX_PARTS - r->next_part) {
        *why_not = "more parts than a request may have";
        return NULL;
    }
    psc_part_more *m = malloc(sizeof *m + (size_t)(k - 1) * sizeof(psc_part));
    if (!m) {
        *why_not = "out of memory";
        return NULL;
    }
    m->next = r->more;
    r->more = m;
    nc->q_bytes -= p->wire_bytes;
    psc_part *after = p->next, *last = p;
    for (uint64_t i = 1; i < k; i++) {
        psc_part *x = &m->parts[i - 1];
        uint64_t at = i * per;
        part_rows_of(p, x, at, rows - at < per ? rows - at : per);
        x->msg.part = r->next_part++;
        nc->q_bytes += x->wire_bytes;
        last->next = x;
        last = x;
    }
    last->next = after;
    q.next = p->next;            /* the first new part */
    *p = q;
    nc->q_bytes += p->wire_bytes;
    /* The request waits for every part (none of a first wave: a push
     * holding a NaN is not cut), and counts its pushes' parts. */
    r->pending += (int)(k - 1);
    if (push)
        r->more_pushes += (int)(k - 1);
    return last;
}

/* Cuts again, or fails, the queued parts too large for the node's
 * max_frame. Parts are cut for the smallest max_frame the nodes had said
 * when their request was made; a node that came back since with a
 * smaller one would refuse such a part's frame and close the connection,
 * at every retransmission until its time ran out. */
static void fail_oversized(nconn *nc)
{
    /* Nothing to do while the node takes frames as large as any requests
     * were ever cut for. */
    if (nc->max_frame >= nc->io->cut_max)
        return;
    psc_part *out = NULL, **out_tail = &out;
    psc_part **pp = &nc->q_head, *last = NULL;
    const char *why_not = "";
    while (*pp) {
        psc_part *p = *pp, *cut = NULL;
        int big = too_big(nc, p);
        if (big && (cut = recut(nc, p, &why_not)) != NULL) {
            last = cut;
            pp = &cut->next;
        } else if (big) {
            p->cannot = why_not;
            *pp = p->next;
            nc->q_bytes -= p->wire_bytes;
            p->next = NULL;
            *out_tail = p;
            out_tail = &p->next;
        } else {
            last = p;
            pp = &p->next;
        }
    }
    nc->q_tail = last;
    while (out) {
        psc_part *p = out;
        out = p->next;
        p->next = NULL;
        char why[600];
        snprintf(why, sizeof why, "node %d (%s) came back with max_frame "
                 "%llu, too small for this %llu-byte piece, which could "
                 "not be cut again (%s)",
                 nc->node, nc->name, (unsigned long long)nc->max_frame,
                 (unsigned long long)(PSW_BODY_OVERHEAD + p->wire_bytes),
                 p->cannot);
        part_fail(nc->io->c, p, PS_ETOOBIG, why);
    }
}

/* ---- writing --------------------------------------------------------- */

typedef struct wreq {
    uv_write_t req;
    psw_out out;
} wreq;

/* Bytes packed ahead of the kernel: nc_send stops packing once libuv
 * holds this many unwritten, and goes on when a write completes and less
 * than half is left. Packing everything queued at once (300,000 small
 * pushes a trainer had in flight, some 400 MB of copies) kept the I/O
 * thread from reading for seconds on a busy machine: the node's replies
 * waited unread, both ends took the other for dead (peer_timeout_ms),
 * and the attempts' deadlines ran while the parts sat in libuv's queue,
 * not on the wire. */
#define SEND_AHEAD (8u << 20)

/* The bytes libuv holds for nc, not yet taken by the kernel. */
static size_t unwritten(nconn *nc)
{
    return uv_stream_get_write_queue_size((uv_stream_t *)&nc->tcp);
}

static void on_write(uv_write_t *req, int status)
{
    wreq *w = (wreq *)req;
    nconn *nc = req->data;
    psw_out_destroy(&w->out);
    free(w);
    if (status < 0 && status != UV_ECANCELED)
        nc_drop(nc, PS_ECONN, "write to %s failed: %s", nc->name,
                uv_strerror(status));
    else if (status == 0 && nc->q_head && unwritten(nc) < SEND_AHEAD / 2)
        nc_send(nc);
}

/* Writes a finished psw_out (ownership passes to the write, unless it
 * fails: then the caller still owns w). With nothing queued in libuv it is
 * written at once, and when the kernel takes it whole no write request is
 * queued: libuv 1.44 re-arms the socket's epoll registration when a queued
 * write completes, a system call per request that this spares. What the
 * kernel does not take goes through uv_write. Returns 0 or a libuv error
 * (UV_ENOMEM when memory ran out, here or building w). */
static int nc_write(nconn *nc, wreq *w)
{
    if (w->out.oom)
        return UV_ENOMEM;
    size_t cnt = psw_out_iovcnt(&w->out);
    struct iovec small[16], *iov = cnt <= 16 ? small : malloc(cnt * sizeof *iov);
    if (!iov)
        return UV_ENOMEM;
    psw_out_iov(&w->out, iov);
    uv_stream_t *s = (uv_stream_t *)&nc->tcp;
    size_t total = w->out.total;
    /* EAGAIN as well when libuv still has writes queued: order holds. */
    int rc = uv_try_write(s, (const uv_buf_t *)iov, (unsigned)cnt);
    size_t done = rc > 0 ? (size_t)rc : 0;
    rc = rc < 0 && rc != UV_EAGAIN ? rc : 0;
    if (rc == 0 && done == total) {
        psw_out_destroy(&w->out);
        free(w);
    } else if (rc == 0) {
        size_t k = psw_iov_skip(iov, done);
        w->req.data = nc;
        rc = uv_write(&w->req, s, (const uv_buf_t *)iov + k,
                      (unsigned)(cnt - k), on_write);
    }
    if (iov != small)
        free(iov);
    if (rc == 0) {
        nc->send_ns = now_ns();
        psc_add(&nc->st.bytes_sent, total);
    }
    return rc;
}

/* Drops nc after nc_write failed with rc: out of memory, or the socket
 * refused the bytes (the peer reset the connection, say). */
static void nc_write_failed(nconn *nc, int rc, const char *what)
{
    nc_drop(nc, rc == UV_ENOMEM ? PS_ENOMEM : PS_ECONN, "cannot send %s to %s: "
            "%s", what, nc->name, uv_strerror(rc));
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

/* The in-flight map's key of (ts, part): parts are numbered below 65536
 * (slice.c), and the low 48 bits of ts tell apart the timestamps in
 * flight at once (fly_find checks the whole). A reply naming a part
 * outside that range was never sent (fly_sent). */
static uint64_t fly_key(uint64_t ts, uint32_t part)
{
    return ts << 16 | part;
}

static int fly_sent(uint64_t part)
{
    return part <= 0xffff;
}

/* The part in flight that a reply of (ts, part) answers, or NULL. The
 * key keeps 48 bits of ts: the part found must have the whole of it (a
 * timestamp of 2^48 and more was taken for one never sent, and every
 * request from then on failed unanswered). */
static psc_part *fly_find(nconn *nc, uint64_t ts, uint64_t part)
{
    psc_part *p = fly_sent(part)
                      ? psw_map_get(&nc->fly_map, fly_key(ts, (uint32_t)part))
                      : NULL;
    return p && (uint64_t)p->msg.ts == ts ? p : NULL;
}

/* Tells the server which requests it may forget, in the open frame, when
 * the Customer's mark moved since this connection last said. */
static void pack_ack(nconn *nc, psw_out *o)
{
    ps_ts low = psc_customer_low(&nc->io->c->cu);
    if (low <= nc->acked)
        return;
    psw_msg ack = { .op = PSW_OP_ACK, .value = (uint64_t)low };
    psw_pack_request(o, &ack);
    nc->acked = low;
}

/* Parts share a frame up to this size: psd starts on a frame only once it
 * has all of it, so frames of a quarter megabyte let it work on the first
 * while the next ones arrive, with their keys still in cache (1 MiB
 * dense pushes, 1 in flight: 1.9 GB/s with 1 MiB frames, 3.3 with these;
 * a part larger than this goes in a frame of its own). A push holding a
 * NaN or an infinity needs no frame of its own: its finite parts are held
 * back until its other parts were applied (customer.c, stage). */
#define BATCH_FRAME_MAX (256u << 10)

/* Moves as many queued parts as fit into one frame. */
static size_t frame_parts(const nconn *nc)
{
    size_t n = 0, bytes = PSW_BODY_OVERHEAD + PSW_MSG_OVERHEAD;
    uint64_t cap = nc->max_frame < BATCH_FRAME_MAX ? nc->max_frame
                                                   : BATCH_FRAME_MAX;
    /* What psd counts the frame's replies at before it runs it (its
     * rows, or an error's text, and a reply frame's cost, each: the size
     * rule of PROTOCOL.md §9) stays within max_frame too: 4,000 one-key
     * requests of 76 bytes each are 2 MB to psd, and under a small
     * max_client_memory such a frame closed its connection at every
     * try. */
    uint64_t replies = 0;
    for (psc_part *p = nc->q_head; p; p = p->next) {
        uint64_t r = psw_reply_max(part_rows(p)) + PSW_REPLY_FRAME_COST;
        if (n && (bytes + p->wire_bytes > cap ||
                  replies + r > nc->max_frame || n + 1 == PSW_MAX_MSGS))
            break;
        bytes += p->wire_bytes;
        replies += r;
        n++;
    }
    return n;
}

/* Counts part p sent (once per copy): its kind's parts and payload. */
static void count_sent(nconn *nc, const psc_part *p)
{
    uint64_t payload = 8 * p->msg.nkeys + p->msg.vals_len;
    /* The request's kind: a pushpull may go as pushes and pulls. */
    int k = psc_stat_kind(p->req->op);
    if (k >= 0) {
        psc_add(&nc->st.op[k].parts, 1);
        psc_add(&nc->st.op[k].payload_sent, payload);
    }
    psc_add(&nc->st.payload_sent, payload);
}

/* Sends everything queued: small parts share frames, and the frames go
 * out in writes of about WRITE_BYTES, each started as soon as it is built,
 * so that the kernel carries the first frames while the next ones are
 * checksummed. Parts move to the in-flight list with this attempt's
 * deadline. */
#define WRITE_BYTES (256u << 10)
static void nc_send(nconn *nc)
{
    psc_io *io = nc->io;
    ps_client *c = io->c;
    if (nc->state != NC_READY || !nc->q_head || unwritten(nc) >= SEND_AHEAD)
        return;
    /* A part whose time ran out while queued since the last tick (this
     * node may have just come back, or a push's second wave was held)
     * fails here: sent, it would be past its deadline at once, and the
     * tick would drop this healthy connection for it. */
    expire_queue(nc, now_ns());
    fail_oversized(nc);
    if (!nc->q_head)
        return;
    wreq *w = malloc(sizeof *w);
    if (!w) {
        nc_drop(nc, PS_ENOMEM, "out of memory sending to %s", nc->name);
        return;
    }
    psw_out_init(&w->out);
    uint64_t now = now_ns(), frames = 0;
    int rc = 0;
    uint64_t attempt = (uint64_t)c->opt.request_timeout_ms * MS;
    while (nc->q_head) {
        size_t n = frame_parts(nc);
        psw_out_frame_begin(&w->out);
        if (frames == 0)
            pack_ack(nc, &w->out);
        for (size_t i = 0; i < n; i++) {
            psc_part *p = nc->q_head;
            nc->q_head = p->next;
            nc->q_bytes -= p->wire_bytes;
            psw_pack_request(&w->out, &p->msg);
            if (p->sends++ > 0)
                psc_add(&nc->st.resends, 1);
            p->sent_ns = now;
            p->seq = nc->sends++;
            p->direct = 0;
            /* An attempt never outlasts the part's bounded time. A part
             * a node may hold (slow) is sent again each attempt's time
             * on the same connection (resend_held), its bound being its
             * own (sync_timeout_ms). */
            p->attempt_ns = !p->slow && now + attempt > p->expire_ns
                                ? p->expire_ns : now + attempt;
            count_sent(nc, p);
            fly_append(nc, p);
            if (psw_map_put(&nc->fly_map, fly_key(p->msg.ts, p->msg.part), p))
                w->out.oom = 1;
        }
        psw_out_frame_end(&w->out);
        frames++;
        if (nc->q_head && w->out.total >= WRITE_BYTES) {
            if ((rc = nc_write(nc, w)) != 0)
                break;
            w = NULL;
            /* The rest when a write completes (on_write). */
            if (unwritten(nc) >= SEND_AHEAD)
                break;
            w = malloc(sizeof *w);
            if (!w) {
                rc = UV_ENOMEM;
                break;
            }
            psw_out_init(&w->out);
        }
    }
    if (!nc->q_head)
        nc->q_tail = NULL;
    psc_add(&nc->st.frames_sent, frames);
    if (rc == 0 && w)
        rc = nc_write(nc, w);
    if (rc) {
        if (w)
            psw_out_destroy(&w->out);
        free(w);
        /* The parts still queued and those in flight fail or are resent
         * with the drop, like any on a lost connection. */
        nc_write_failed(nc, rc, "requests");
    }
}

/* Sends again, on this live connection, each part a node may hold (a
 * clock, a barrier, an ssp pull) that has had no answer for an attempt's
 * time (request_timeout_ms): its frame, or the answer's, may have been
 * lost without the connection breaking, and it would otherwise wait for
 * sync_timeout_ms (ten minutes by default). A node drops a copy of a
 * request it holds (the same ts and part); one it answered already it
 * answers again, a duplicate here. The frames copy
 * the parts' keys and values: the first copy's answer may complete a part
 * (its buffers handed back to the caller) while this write is queued. */
static void resend_held(nconn *nc, uint64_t now)
{
    const ps_client *c = nc->io->c;
    uint64_t attempt = (uint64_t)c->opt.request_timeout_ms * MS;
    wreq *w = NULL;
    uint64_t frames = 0;
    for (psc_part *p = nc->fly[1].head; p; p = p->next) {
        if (now < p->attempt_ns || now >= p->expire_ns || p == nc->direct)
            continue;
        if (!w) {
            w = malloc(sizeof *w);
            if (!w)
                return;          /* the next tick tries again */
            psw_out_init(&w->out);
        }
        psw_out_frame_begin(&w->out);
        if (frames == 0)
            pack_ack(nc, &w->out);
        psw_pack_request(&w->out, &p->msg);
        psw_out_frame_end(&w->out);
        frames++;
        p->sends++;
        p->attempt_ns = now + attempt;
        psc_add(&nc->st.resends, 1);
        count_sent(nc, p);       /* "resends included" */
    }
    if (!w)
        return;
    for (size_t i = 0; i < w->out.nsegs && !w->out.oom; i++)
        if (w->out.segs[i].tag != PSW_TAG_OWNED &&
            !psw_out_seg_own(&w->out, i))
            w->out.oom = 1;
    psc_add(&nc->st.frames_sent, frames);
    int rc = nc_write(nc, w);
    if (rc) {
        psw_out_destroy(&w->out);
        free(w);
        nc_write_failed(nc, rc, "requests sent again");
    }
}

/* A frame with one session message (and an ACK first when due, with a
 * PING); what names it when the write fails. Out of memory, nothing is
 * sent: the next tick sends a PING again, and the node takes in a worker
 * whose OPENED this was at its first request. */
static void nc_session(nconn *nc, int op, const char *what)
{
    wreq *w = malloc(sizeof *w);
    if (!w)
        return;
    psw_out_init(&w->out);
    psw_msg m = { .op = op };
    psw_out_frame_begin(&w->out);
    if (op == PSW_OP_PING)
        pack_ack(nc, &w->out);
    psw_pack_request(&w->out, &m);
    psw_out_frame_end(&w->out);
    psc_add(&nc->st.frames_sent, 1);
    int rc = nc_write(nc, w);
    if (rc) {
        psw_out_destroy(&w->out);
        free(w);
        nc_write_failed(nc, rc, what);
    }
}

/* A PING (and an ACK when due): the server learns we live. */
static void nc_ping(nconn *nc)
{
    nc_session(nc, PSW_OP_PING, "a PING");
}

/* An OPENED (protocol version 4): this worker's open reached every node,
 * or (after a reconnection) did long ago, so the node takes it in for
 * good; until then, a connection lost takes back its HELLO there
 * (PROTOCOL.md, section 10.1). */
static void nc_opened(nconn *nc)
{
    if (nc->version >= 4)        /* a worker's: hello_version */
        nc_session(nc, PSW_OP_OPENED, "an OPENED");
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
    /* A fresh nonce per connection: the node's proof must cover it, so an
     * answer recorded on another connection is worth nothing here. */
    nc->challenged = 0;
    nc->tr = (psw_transcript){ .version = nc->version,
                               .client_id = c->client_id,
                               .incarnation = c->incarnation,
                               .worker = c->opt.worker };
    psw_auth_nonce(nc->tr.cnonce);
    psw_hello h = { nc->version, c->client_id, c->incarnation,
                    c->opt.worker, (const char *)nc->tr.cnonce,
                    PSW_NONCE_LEN };
    psw_out_frame_begin(&w->out);
    psw_pack_hello(&w->out, &h);
    psw_out_frame_end(&w->out);
    psc_add(&nc->st.frames_sent, 1);
    int rc = nc_write(nc, w);
    if (rc) {
        psw_out_destroy(&w->out);
        free(w);
        nc_write_failed(nc, rc, "HELLO");
    }
}

/* ps_open gives up: its time ran out with node nc (NULL: none in
 * particular) not connected, for the reason why. Said one way whether
 * the tick saw the deadline pass or an attempt failed after it. */
static void open_gave_up(psc_io *io, const nconn *nc, int status,
                         const char *why)
{
    /* "cannot connect to NAME: connection refused" (or "NAME (ip,
     * address i of n): ...") names NAME once more: the rest alone. */
    char lead[sizeof nc->name + 32];
    char it[sizeof nc->drop_why + sizeof nc->last_why + 64];
    snprintf(lead, sizeof lead, "cannot connect to %s", nc ? nc->name : "");
    size_t k = strlen(lead);
    if (nc && !strncmp(why, lead, k) && (why[k] == ':' || why[k] == ' ')) {
        why += k;
        why += !strncmp(why, ": ", 2) ? 2 : *why == ' ';
    }
    /* "cannot resolve NAME: ..." (or "NAME (node 1's ...): ...") the
     * same way: "cannot resolve it". */
    snprintf(lead, sizeof lead, "cannot resolve %s", nc ? nc->name : "");
    k = strlen(lead);
    if (nc && !strncmp(why, lead, k) && (why[k] == ':' || why[k] == ' ')) {
        snprintf(it, sizeof it, "cannot resolve it%s", why + k);
        why = it;
    }
    /* Still on the seeds: none of the addresses listed answered, and
     * naming only the last one tried read as if the others were up. */
    if (nc && status == PS_EBUSY)
        /* Reached and refused for the while (a worker id in use): "no
         * connection" read as if nothing had answered (a trial). */
        open_done(io, status,
                  "%s kept refusing the open until connect_timeout_ms (%d "
                  "ms) ran out%s%s", nc->name,
                  io->c->opt.connect_timeout_ms, why[0] ? ": " : "", why);
    else if (nc && nc == io->seed && io->nseeds > 1)
        open_done(io, status,
                  "no connection to any of the %d addresses listed within "
                  "connect_timeout_ms (%d ms); the last tried, %s%s%s",
                  io->nseeds, io->c->opt.connect_timeout_ms, nc->name,
                  why[0] ? ": " : "", why);
    else
        open_done(io, status,
                  "no connection to %s within connect_timeout_ms (%d ms)%s%s",
                  nc ? nc->name : "the cluster",
                  io->c->opt.connect_timeout_ms, why[0] ? ": " : "", why);
}

/* ---- closing and reconnecting ---------------------------------------- */

/* Jittered exponential backoff: the next attempt waits between half and
 * all of a delay that doubles from BACKOFF_MIN_MS to BACKOFF_MAX_MS, so
 * clients that lost the same server do not come back in lock step. A
 * connection that had passed HELLO is made again at once: the server was
 * answering, so the connection failed (a lost frame, a reset), not
 * necessarily the server; if the new one fails too, the delays start. */
static void schedule_retry(nconn *nc)
{
    psc_io *io = nc->io;
    if (nc->ready_ns) {
        nc->ready_ns = 0;
        nc->retry_ns = 0;
        arm_retry(io);
        return;
    }
    uint64_t b = nc->backoff_ms ? 2 * nc->backoff_ms : BACKOFF_MIN_MS;
    if (b > BACKOFF_MAX_MS)
        b = BACKOFF_MAX_MS;
    nc->backoff_ms = b;
    io->rng = psw_mix64(io->rng + 0x9e3779b97f4a7c15ULL);
    uint64_t delay = b / 2 + io->rng % (b / 2 + 1), now = now_ns();
    nc->retry_ns = now + delay * MS;
    /* ps_open makes one last attempt LAST_TRY_MS before its deadline
     * rather than let the delay run past it: a worker id held by a
     * vanished host's connection is freed once the node notices
     * (peer_timeout_ms, 4 s by default, against 5 s of connect_timeout_ms)
     * and delays near the top leave gaps of up to 2 s, so a replacement
     * started at once often gave up with PS_EBUSY in between. */
    if (io->c->open_state == PSC_OPENING && io->open_ns > LAST_TRY_MS * MS) {
        uint64_t last = io->open_ns - LAST_TRY_MS * MS;
        if (now < last && nc->retry_ns > last)
            nc->retry_ns = last;
    }
    arm_retry(io);
}

/* Takes the part sent first among the heads of the two in-flight lists:
 * they interleave (a push issued after an ssp pull or a CLOCK goes after
 * it), and the server must see them again in that order. */
static psc_part *fly_pop_oldest(nconn *nc)
{
    psc_part *a = nc->fly[0].head, *b = nc->fly[1].head;
    psc_part *p = !b || (a && a->seq < b->seq) ? a : b;
    if (p)
        fly_unlink(nc, p);
    return p;
}

/* Puts the parts that were in flight back at the head of the queue, in
 * the order they were sent, to go out again on the next connection; a
 * part that has had all its attempts, or whose time is up, fails with
 * status: PS_ETIMEDOUT, as ps_options.max_retries promises, whatever
 * ended the connection (its text says that), or PS_ECLOSED or the node's
 * final refusal, which fail everything (now = UINT64_MAX). */
static void requeue_in_flight(nconn *nc, uint64_t now, int status)
{
    ps_client *c = nc->io->c;
    psc_part *head = NULL, *tail = NULL, *p;
    psw_map_destroy(&nc->fly_map);
    psw_map_init(&nc->fly_map);
    while ((p = fly_pop_oldest(nc)) != NULL) {
        int spent = !p->slow && p->sends > c->opt.max_retries;
        if (spent || now >= p->expire_ns || p->abandoned) {
            /* The connection's reason may be another request's ("no
             * reply ... to request 2959"): said as the connection's. */
            char why[800];
            snprintf(why, sizeof why, "request %llu%s: its connection "
                     "closed: %s", (unsigned long long)p->msg.ts,
                     spent && !p->abandoned ? " (no attempts left)" : "",
                     nc->drop_why);
            part_fail(c, p, p->abandoned ? PS_ECLOSED : status, why);
        } else {
            if (tail)
                tail->next = p;
            else
                head = p;
            tail = p;
            nc->q_bytes += p->wire_bytes;
        }
    }
    if (!head)
        return;
    tail->next = nc->q_head;
    if (!nc->q_head)
        nc->q_tail = tail;
    nc->q_head = head;
}

/* Takes a lookup's addresses that can be connected to for nc's next
 * attempts. The address in use stays first choice while the name still
 * has it, so that a reconnection does not go through the dead ones
 * again. An answer with none (only link-local ones) leaves nc's as they
 * were. Returns how many were link-local. */
static int take_addrs(nconn *nc, const struct addrinfo *res)
{
    struct sockaddr_storage cur = nc->sa[nc->sa_i];
    int had = nc->nsa > 0, usable = 0, local = 0;
    for (const struct addrinfo *a = res; a; a = a->ai_next) {
        int ll = psw_addr_link_local(a->ai_addr);
        local += ll;
        usable += !ll && a->ai_addrlen <= sizeof nc->sa[0];
    }
    if (!usable)
        return local;
    nc->nsa = 0;
    nc->sa_i = 0;
    for (const struct addrinfo *a = res; a && nc->nsa < ADDRS_MAX;
         a = a->ai_next) {
        if (a->ai_addrlen > sizeof nc->sa[0] ||
            psw_addr_link_local(a->ai_addr))
            continue;
        memset(&nc->sa[nc->nsa], 0, sizeof nc->sa[0]);
        memcpy(&nc->sa[nc->nsa], a->ai_addr, a->ai_addrlen);
        if (had && !memcmp(&nc->sa[nc->nsa], &cur, sizeof cur))
            nc->sa_i = nc->nsa;
        nc->nsa++;
    }
    return local;
}

/* A node of the layout whose name did not resolve (yet): why, kept as
 * its last attempt's reason for the open's end to say. */
static void unresolved(nconn *nc, const char *what)
{
    nc->last_status = PS_ECONN;
    snprintf(nc->last_why, sizeof nc->last_why, "cannot resolve %s (node "
             "%d's address from the layout): %s", nc->name, nc->node, what);
}

/* The resolver's words for a failed lookup, as getaddrinfo gives them
 * (gai_strerror), so that a seed's and a layout node's read alike. */
static const char *lookup_error(int status)
{
    switch (status) {
    case UV_EAI_NONAME:
        return gai_strerror(EAI_NONAME);
    case UV_EAI_AGAIN:
        return gai_strerror(EAI_AGAIN);
    case UV_EAI_FAIL:
        return gai_strerror(EAI_FAIL);
    case UV_EAI_MEMORY:
        return gai_strerror(EAI_MEMORY);
    case UV_EAI_FAMILY:
        return gai_strerror(EAI_FAMILY);
    default:
        return uv_strerror(status);
    }
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
                        struct addrinfo *res)
{
    nconn *nc = req->data;
    nc->gai_busy = 0;
    int had = nc->nsa, local = 0;
    if (status == 0 && res)
        local = take_addrs(nc, res);
    uv_freeaddrinfo(res);
    if (had)
        return;
    /* A layout node's name, while ps_open waits: tried as soon as it
     * resolves; looked up again later when it does not (yet). */
    psc_io *io = nc->io;
    if (io->c->open_state != PSC_OPENING)
        return;
    if (nc->nsa) {
        /* Resolved: the "cannot resolve" kept for the open's end no longer
         * holds (it was said of a node that had connected, with its
         * status, a trial). */
        nc->last_status = 0;
        nc->last_why[0] = '\0';
        if (nc->state == NC_IDLE)
            nc_connect(nc);
        return;
    }
    if (local) {
        open_done(io, PS_ECONN, "node %d's address %s from the layout: it "
                  "resolves only to link-local addresses: "
                  PSW_LINK_LOCAL_WHY, nc->node, nc->name);
        return;
    }
    /* Its retries (nc_connect) look it up again. */
    unresolved(nc, status ? lookup_error(status) : "no usable address");
}

/* Looks the node's name up again for its next connection; the address it
 * has stays in use until an answer comes. */
static void re_resolve(nconn *nc)
{
    if (!nc->host[0] || nc->gai_busy)
        return;
    struct addrinfo hints = { 0 };
    hints.ai_socktype = SOCK_STREAM;
    nc->gai.data = nc;
    if (uv_getaddrinfo(&nc->io->loop, &nc->gai, on_resolved, nc->host,
                       nc->port, &hints) == 0)
        nc->gai_busy = 1;
}

/* Whether a refusal can never succeed on a retry. */
static int refusal_is_final(int status)
{
    return status != PS_EBUSY && status != PS_ECONN && status != PS_ETIMEDOUT &&
           status != PS_ENOMEM;
}

static void on_nc_closed(uv_handle_t *h)
{
    nconn *nc = (nconn *)h;
    psc_io *io = nc->io;
    ps_client *c = io->c;
    uint64_t now = now_ns();
    nc->state = NC_IDLE;
    psw_reader_destroy(&nc->rd);
    psw_reader_init(&nc->rd, HELLO_MAX_REPLY);
    nc->walk = 0;
    nc->direct = NULL;
    nc->last_status = nc->drop_status;
    snprintf(nc->last_why, sizeof nc->last_why, "%s", nc->drop_why);
    if (client_closing(c)) {
        nc->drop_status = PS_ECLOSED;
        requeue_in_flight(nc, UINT64_MAX, PS_ECLOSED);
        fail_queue(nc, PS_ECLOSED, "the client closed");
        return;
    }
    if (nc->fatal) {
        /* Refused for a reason a retry cannot fix: everything for this
         * node fails now, and so will what comes later. */
        requeue_in_flight(nc, UINT64_MAX, nc->fatal);
        fail_queue(nc, nc->fatal, nc->drop_why);
        if (c->open_state == PSC_OPENING)
            open_done(io, nc->fatal, "%s", nc->drop_why);
        return;
    }
    if (nc->mismatch) {
        /* Another layout: what waits for this node fails now, with the
         * reason; what comes later waits for the next attempt, which may
         * find the node restarted with the right ini. It was refused for
         * good, and a trainer whose nodes were put right kept failing
         * every push to that node until it was restarted (a trial). */
        requeue_in_flight(nc, UINT64_MAX, nc->drop_status);
        fail_queue(nc, nc->drop_status, nc->drop_why);
        /* Said once: an attempt that fails otherwise (the node stopped
         * to be put right) waits as for any node that is down, and one
         * that meets the other layout again sets it again. */
        nc->mismatch = 0;
    }
    if (!nc->down_ns && nc->ever_ready)
        nc->down_ns = now;
    requeue_in_flight(nc, now, PS_ETIMEDOUT);
    /* Refused version 4 by an older node (handle_hello_ok): the same
     * address again, at once, in version 3; not the next seed, which
     * may be a node of this release. */
    int again = nc->fell_back;
    nc->fell_back = 0;
    /* Any other attempt of the seed may reach another node (the next
     * seed, or another address of its name): version 4 again. */
    if (!again && nc == io->seed)
        nc->version = hello_version(c);
    /* An address that did not connect: the name's next one, at once (a
     * lookup started now would replace the list being walked). */
    int next_addr = !nc->reached && nc->sa_i + 1 < nc->nsa &&
                    (nc->q_head || c->open_state == PSC_OPENING ||
                     keeps_up(nc));
    /* Not once the open's time is up: the failed open's teardown would
     * wait for that lookup (a slow resolver's seconds). */
    if (!next_addr && !(c->open_state == PSC_OPENING && now >= io->open_ns))
        re_resolve(nc);
    if (c->open_state == PSC_OPENING) {
        if (now >= io->open_ns) {
            open_gave_up(io, nc, nc->drop_status, nc->drop_why);
            return;
        }
        if (again) {
            nc_dial(nc);
            return;
        }
        if (next_addr) {
            nc->sa_i++;
            nc_dial(nc);
            return;
        }
        if (nc == io->seed && io->seed_i + 1 < io->nseeds) {
            io->seed_i++;         /* try the next address we were given */
            nc_connect(nc);
            return;
        }
        if (nc == io->seed)
            io->seed_i = 0;       /* all tried: again from the first */
        nc->sa_i = 0;
        schedule_retry(nc);
        return;
    }
    if (again || next_addr) {
        nc->sa_i += !again;
        nc_dial(nc);
        return;
    }
    if (!nc->reached)
        nc->sa_i = 0;             /* none connected: from the first again */
    if (nc->q_head || keeps_up(nc))
        schedule_retry(nc);
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

/* ---- connecting ------------------------------------------------------- */

/* ---- large rows straight into out ------------------------------------ */

/* Rows of a reply at least this large are read straight into the part's
 * out instead of the receive buffer (saving a copy of them). */
#define DIRECT_MIN (64 * 1024)

/* Reads a msgpack unsigned integer at p (n bytes here): returns its size,
 * 0 when incomplete, -1 when it is something else. */
static int get_uint(const uint8_t *p, size_t n, uint64_t *v)
{
    if (n < 1)
        return 0;
    int k = p[0] < 0x80 ? 0 : p[0] == 0xcc ? 1 : p[0] == 0xcd ? 2
          : p[0] == 0xce ? 4 : p[0] == 0xcf ? 8 : -1;
    if (k < 0)
        return -1;
    if (n < (size_t)k + 1)
        return 0;
    *v = k ? 0 : p[0];
    for (int i = 1; i <= k; i++)
        *v = *v << 8 | p[i];
    return k + 1;
}

/* Looks at the message at m (n bytes here): for a REPLY with status OK
 * whose rows are a BIN of at least DIRECT_MIN bytes, returns 1 with its
 * (ts, part), the payload's offset *at in m, its header's size *hdr and
 * its length; 0 when more bytes are needed to tell; -1 for any other
 * message. */
static int reply_rows_at(const uint8_t *m, size_t n, uint64_t *ts,
                         uint64_t *part, size_t *at, size_t *hdr,
                         uint64_t *len)
{
    if (n < 2)
        return 0;
    if (m[0] != 0x97 || m[1] != PSW_OP_REPLY)
        return -1;
    size_t i = 2;
    int k = get_uint(m + i, n - i, ts);
    if (k <= 0)
        return k;
    i += (size_t)k;
    if ((k = get_uint(m + i, n - i, part)) <= 0)
        return k;
    i += (size_t)k;
    if (n - i < 1)
        return 0;
    if (m[i++] != 0x00)              /* status: PSW_OK */
        return -1;
    if (n - i < 5)
        return 0;
    if (m[i] == 0xc5) {
        *len = (uint64_t)m[i + 1] << 8 | m[i + 2];
        *hdr = 3;
    } else if (m[i] == 0xc6) {
        *len = (uint64_t)m[i + 1] << 24 | (uint64_t)m[i + 2] << 16 |
               (uint64_t)m[i + 3] << 8 | m[i + 4];
        *hdr = 5;
    } else
        return -1;
    *at = i + *hdr;
    return *len >= DIRECT_MIN ? 1 : -1;
}

/* Follows the reply frame being received, message by message as its
 * bytes arrive, and sends the rows of a large reply for a part in flight
 * (rows in order at out, the size it expects) straight into its out
 * (psw_reader_divert). The reader still checks the frame's CRC before
 * psw_reader_next returns it, so a part completes only from a frame that
 * arrived intact; one that did not closes the connection and the part is
 * sent again (its out may hold anything meanwhile). */
static void divert_rows(nconn *nc)
{
    psw_reader *r = &nc->rd;
    if (nc->walk < 0 || psw_reader_diverting(r))
        return;
    size_t have = r->len - r->off;
    if (have < PSW_FRAME_HDR + 5)
        return;
    const uint8_t *f = (const uint8_t *)r->buf + r->off;
    if (!nc->walk) {
        uint32_t flen = (uint32_t)f[0] << 24 | (uint32_t)f[1] << 16 |
                        (uint32_t)f[2] << 8 | f[3];
        if (flen < DIRECT_MIN || f[4] != 0xdd) {
            nc->walk = -1;
            return;
        }
        nc->walk = 1;
        nc->walk_left = (uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 |
                        (uint32_t)f[7] << 8 | f[8];
        nc->walk_at = 5;
        nc->walk_skip = 0;
    }
    const uint8_t *b = f + PSW_FRAME_HDR;
    size_t avail = have - PSW_FRAME_HDR;
    while (nc->walk_left > 0 && nc->walk_at < avail) {
        const uint8_t *m = b + nc->walk_at;
        size_t n = avail - nc->walk_at;
        if (nc->walk_skip) {
            /* A value not all here may look malformed to the guard: the
             * decoder judges the frame, not this walk. */
            long g = psw_guard(m, n, 8);
            if (g <= 0) {
                if (g < 0 && n >= 4096)
                    nc->walk = -1;
                return;
            }
            nc->walk_at += (size_t)g;
            if (--nc->walk_skip == 0)
                nc->walk_left--;
            continue;
        }
        uint64_t ts = 0, part = 0, len = 0;
        size_t at = 0, hdr = 0;
        int rc = reply_rows_at(m, n, &ts, &part, &at, &hdr, &len);
        if (rc == 0)
            return;
        if (rc > 0 && n < at + len) {
            psc_part *p = fly_find(nc, ts, part);
            size_t rows = p && p->msg.op == PSW_OP_PULL_RANGE
                              ? (size_t)p->msg.count : p ? p->msg.nkeys : 0;
            if (p && p->out && !p->pos &&
                len == rows * p->req->dim * sizeof(float) &&
                psw_reader_divert(r, nc->walk_at + at, hdr, (char *)p->out,
                                  (size_t)len) == 0) {
                p->direct = 1;
                nc->direct = p;
                nc->walk_at += at;
                nc->walk_skip = 2;   /* the text and the clock after it */
                return;
            }
        }
        nc->walk_skip = 1;           /* the whole message */
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

/* "ps-1:7071" alone, or "ps-1:7071 (10.0.0.3, address 2 of 3)" when the
 * name has several, so that a failure says which one failed. */
static void addr_label(const nconn *nc, char *buf, size_t len)
{
    char ip[64] = "?";
    const struct sockaddr_storage *sa = &nc->sa[nc->sa_i];
    if (nc->nsa < 2) {
        snprintf(buf, len, "%s", nc->name);
        return;
    }
    if (sa->ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)sa, ip, sizeof ip);
    else
        uv_ip4_name((const struct sockaddr_in *)sa, ip, sizeof ip);
    snprintf(buf, len, "%s (%s, address %d of %d)", nc->name, ip,
             nc->sa_i + 1, nc->nsa);
}

static void on_connect(uv_connect_t *req, int status)
{
    nconn *nc = req->data;
    if (nc->state != NC_CONNECTING)
        return;
    if (status < 0) {
        char where[400];
        addr_label(nc, where, sizeof where);
        nc_drop(nc, PS_ECONN, "cannot connect to %s: %s%s", where,
                uv_strerror(status),
                psw_addr_ipv6_off((struct sockaddr *)&nc->sa[nc->sa_i],
                                  -status));
        return;
    }
    /* Nothing listens there (psw_addr_self_connected): said as the
     * refusal it stands for, and closed at once, freeing the node's port. */
    uv_os_fd_t fd;
    if (!uv_fileno((const uv_handle_t *)&nc->tcp, &fd) &&
        psw_addr_self_connected(fd)) {
        char where[400];
        addr_label(nc, where, sizeof where);
        nc_drop(nc, PS_ECONN, "cannot connect to %s: %s (the connection "
                "reached itself: its local port was the node's)", where,
                uv_strerror(UV_ECONNREFUSED));
        return;
    }
    nc->reached = 1;
    nc->hello_ns = nc->attempt_end_ns;
    /* While ps_open waits, a handshake gets a request's attempt at most
     * (as a reconnect's does): one whose frame was lost, or that a
     * stalled psd holds, is tried again on a new connection within the
     * open's time, not waited for until the open gives up. */
    uint64_t per = (uint64_t)nc->io->c->opt.request_timeout_ms * MS,
             now = now_ns();
    if (nc->io->c->open_state == PSC_OPENING && nc->hello_ns > now + per)
        nc->hello_ns = now + per;
    uv_tcp_nodelay(&nc->tcp, 1);
    nc->state = NC_HELLO;
    nc->recv_ns = now_ns();
    uv_read_start((uv_stream_t *)&nc->tcp, on_alloc, on_read);
    nc_send_hello(nc);
}

static void nc_connect(nconn *nc)
{
    psc_io *io = nc->io;
    if (nc->state != NC_IDLE || nc->fatal)
        return;
    /* A node of the layout whose name did not resolve yet: looked up in
     * the background, and tried again. Not here, blocking: the seed's
     * connection needs this thread meanwhile (a slow resolver held it
     * past the node's peer_timeout_ms, and the open past its end). */
    if (nc != io->seed && !nc->nsa) {
        /* Not once the open's time is up (as on_nc_closed): its
         * teardown would wait for that lookup. */
        if (!(io->c->open_state == PSC_OPENING && now_ns() >= io->open_ns))
            re_resolve(nc);
        schedule_retry(nc);
        return;
    }
    if (nc == io->seed) {
        const psc_addr *a = &io->seeds[io->seed_i];
        /* An IPv6 host in brackets, as the address is written: the
         * port's colon is otherwise one of its own. */
        snprintf(nc->name, sizeof nc->name,
                 strchr(a->host, ':') ? "[%s]:%s" : "%s:%s", a->host,
                 a->port);
        struct addrinfo hints = { 0 }, *res = NULL;
        hints.ai_socktype = SOCK_STREAM;
        /* Seeds may be host names; resolving blocks only ps_open, before
         * any connection needs this thread. */
        int g = getaddrinfo(a->host, a->port, &hints, &res), local = 0;
        nc->nsa = 0;
        if (!g && res)
            local = take_addrs(nc, res);
        if (res)
            freeaddrinfo(res);
        if (g || !nc->nsa) {
            nc->reached = 0;
            nc->state = NC_CONNECTING;       /* so nc_drop closes it */
            uv_tcp_init(&io->loop, &nc->tcp);
            if (!g && local)
                nc_drop(nc, PS_ECONN, "%s resolves only to link-local "
                        "addresses: " PSW_LINK_LOCAL_WHY, nc->name);
            else
                nc_drop(nc, PS_ECONN, "cannot resolve %s: %s", nc->name,
                        g ? gai_strerror(g) : "no address");
            return;
        }
    }
    nc_dial(nc);
}

/* One attempt at the address nc->sa[nc->sa_i]. */
static void nc_dial(nconn *nc)
{
    psc_io *io = nc->io;
    ps_client *c = io->c;
    uint64_t now = now_ns();
    /* An attempt gets connect_timeout_ms, but no longer than a request
     * attempt once the client is open, nor past the open's own limit. */
    uint64_t limit = (uint64_t)c->opt.connect_timeout_ms * MS;
    if (c->open_state != PSC_OPENING &&
        (uint64_t)c->opt.request_timeout_ms * MS < limit)
        limit = (uint64_t)c->opt.request_timeout_ms * MS;
    int opening = c->open_state == PSC_OPENING;
    uint64_t end = now + limit;
    if (opening && io->open_ns < end)
        end = io->open_ns;
    nc->connect_ns = now;
    nc->attempt_end_ns = end;
    nc->hello_ns = end;
    /* While ps_open waits, the addresses still to try (this name's, and
     * a seed's later seeds) share its time until one connects: an address
     * that never answers must not take all of it. */
    if (opening && end > now) {
        uint64_t left = (uint64_t)(nc->nsa - nc->sa_i);
        if (nc == io->seed)
            left += (uint64_t)(io->nseeds - io->seed_i - 1);
        if (left > 1)
            nc->hello_ns = now + (end - now) / left;
    }
    nc->reached = 0;
    uv_tcp_init(&io->loop, &nc->tcp);
    nc->state = NC_CONNECTING;
    nc->creq.data = nc;
    int rc = uv_tcp_connect(&nc->creq, &nc->tcp,
                            (struct sockaddr *)&nc->sa[nc->sa_i], on_connect);
    if (rc) {
        char where[400];
        addr_label(nc, where, sizeof where);
        nc_drop(nc, PS_ECONN, "cannot connect to %s: %s%s", where,
                uv_strerror(rc),
                psw_addr_ipv6_off((struct sockaddr *)&nc->sa[nc->sa_i], -rc));
    }
}

/* Whether a connection waits to be made again at retry_ns: idle, not
 * refused for good, and with a reason to exist (parts queued, ps_open
 * still waiting, or an open worker's: keeps_up). on_retry and arm_retry
 * must agree on it: a connection the timer waits for but on_retry will
 * not make re-arms the timer at 0 ms from its own callback, and libuv
 * 1.44 runs such a timer again in the same pass, forever (the loop never
 * polls, so not even ps_close's wake gets in). */
static int awaits_retry(const nconn *nc, int opening)
{
    return nc && nc->state == NC_IDLE && !nc->fatal &&
           (nc->q_head || opening || keeps_up(nc));
}

/* Whether a connection should be (re)made now: waiting, and past its
 * backoff. */
static int wants_connect(const nconn *nc, uint64_t now, int opening)
{
    return awaits_retry(nc, opening) && now >= nc->retry_ns;
}

static void on_retry(uv_timer_t *t)
{
    psc_io *io = t->data;
    uint64_t now = now_ns();
    int opening = io->c->open_state == PSC_OPENING;
    if (wants_connect(io->seed, now, opening))
        nc_connect(io->seed);
    for (int i = 0; i < io->nnodes; i++)
        if (wants_connect(io->nodes[i], now, opening))
            nc_connect(io->nodes[i]);
    arm_retry(io);
}

/* Arms the retry timer for the earliest pending reconnection. */
static void arm_retry(psc_io *io)
{
    uint64_t next = UINT64_MAX, now = now_ns();
    int opening = io->c->open_state == PSC_OPENING;
    /* A seed in backoff when the open failed (its time ran out, the tick
     * said so) waits for nothing any more: its timer stops here. */
    if (awaits_retry(io->seed, opening))
        next = io->seed->retry_ns;
    for (int i = 0; i < io->nnodes; i++) {
        const nconn *nc = io->nodes[i];
        if (awaits_retry(nc, opening) && nc->retry_ns < next)
            next = nc->retry_ns;
    }
    if (next == UINT64_MAX) {
        uv_timer_stop(&io->retry);
        return;
    }
    uint64_t ms = next > now ? (next - now + MS - 1) / MS : 0;
    uv_timer_start(&io->retry, on_retry, ms, 0);
}

/* Takes node nc's address from the layout ("host:port", a name or a
 * numeric address): a numeric one into nc->sa (0), a name into nc->host
 * and nc->port for re_resolve to look up in the background (-2); -1 with
 * why for one that cannot be used. */
static int take_node_address(nconn *nc, const char *s, char *why, size_t whylen)
{
    psw_addr a;
    char port[8];
    if (psw_addr_parse(s, strlen(s), &a, why, whylen))
        return -1;
    if (a.kind == PSW_HOST_NAME) {
        memcpy(nc->host, a.host, sizeof a.host);
        snprintf(nc->port, sizeof nc->port, "%d", a.port);
        return -2;
    }
    struct addrinfo hints = { 0 }, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    snprintf(port, sizeof port, "%d", a.port);
    int g = getaddrinfo(a.host, port, &hints, &res);
    if (g || !res) {
        if (res)
            freeaddrinfo(res);
        snprintf(why, whylen, "cannot resolve it: %s",
                 g ? gai_strerror(g) : "no address");
        return -1;
    }
    nc->nsa = 0;
    int local = take_addrs(nc, res);
    freeaddrinfo(res);
    if (!nc->nsa) {
        if (local)
            snprintf(why, whylen, "it resolves only to link-local "
                     "addresses: " PSW_LINK_LOCAL_WHY);
        else
            snprintf(why, whylen, "cannot resolve it: no usable address");
        return -1;
    }
    return 0;
}

static void start_tick(psc_io *io);

/* The first HELLO_OK gives the layout: every node gets a connection. */
static int adopt_layout(psc_io *io, nconn *seed, psw_cluster *l)
{
    ps_client *c = io->c;
    /* Every node's connection exists before any is used: the ticks, the
     * retries and the shutdown walk all of them, also after the open
     * failed part way (a node whose name does not resolve). */
    nconn **nodes = calloc((size_t)l->nnodes, sizeof *nodes);
    if (!nodes)
        return -1;
    for (int i = 0; i < l->nnodes; i++)
        if (i != l->node_index && !(nodes[i] = nc_new(io, i))) {
            for (int k = 0; k < i; k++)
                nc_free(nodes[k]);
            free(nodes);
            return -1;
        }
    io->nodes = nodes;
    io->nnodes = l->nnodes;
    /* Read by callers only after the open completes, which publishes it
     * (open_done takes open_mu). */
    c->cluster = *l;
    memset(l, 0, sizeof *l);
    seed->node = c->cluster.node_index;
    /* The seed was reached as ps_open's caller named it; from now on it is
     * this node of the layout, looked up again by that name if it has
     * one. */
    psw_addr sa;
    char why0[160];
    const char *me = c->cluster.nodes[seed->node];
    if (psw_addr_parse(me, strlen(me), &sa, why0, sizeof why0) == 0 &&
        sa.kind == PSW_HOST_NAME) {
        memcpy(seed->host, sa.host, sizeof sa.host);
        snprintf(seed->port, sizeof seed->port, "%d", sa.port);
    }
    io->nodes[seed->node] = seed;
    io->seed = NULL;
    start_tick(io);              /* the heartbeat sets the pace now */
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        if (nc == seed)
            continue;
        snprintf(nc->name, sizeof nc->name, "%s", c->cluster.nodes[i]);
        char why[300];
        int r = take_node_address(nc, c->cluster.nodes[i], why, sizeof why);
        if (r == -1) {
            open_done(io, PS_ECONN, "node %d's address %s from the layout: "
                      "%s", i, c->cluster.nodes[i], why);
            return 0;
        }
        /* A name: looked up in the background (on_resolved connects), not
         * here: the seed's connection needs this thread meanwhile, and a
         * slow resolver held it past the node's peer_timeout_ms. One that
         * does not resolve yet is looked up again and tried, as a node
         * that is down is, until connect_timeout_ms: the DNS record of a
         * node started with its trainers (a pod behind a headless
         * service) may come a moment after the layout naming it. */
        if (r == -2) {
            unresolved(nc, "no answer from the resolver yet");
            re_resolve(nc);
            schedule_retry(nc);
            continue;
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
    /* Every node answered: each may take this worker in for good. Until
     * now a failed open left every node as it was. */
    for (int i = 0; i < io->nnodes; i++)
        nc_opened(io->nodes[i]);
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

/* ---- reading --------------------------------------------------------- */

/* The node for messages: "node 1 (host:port)", or a seed's address. */
static const char *who(nconn *nc)
{
    static _Thread_local char buf[320];
    if (nc->node < 0)
        return nc->name;
    snprintf(buf, sizeof buf, "node %d (%s)", nc->node, nc->name);
    return buf;
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
    uint64_t l_max_frame = l.max_frame;
    if (l.status > PSW_OK || l.status < PS_EFULL) {
        /* A code this client does not know (a newer psd): PS_EPROTO, as
         * for a reply, so that ps_open and the requests it fails return
         * only PS_E* codes; the code and the reason go in the text. */
        nc->fatal = PS_EPROTO;
        nc_drop(nc, PS_EPROTO, "%s refused the connection with status %d, "
                "which this client does not know: %s", who(nc),
                (int)l.status, l.text);
        psw_cluster_free(&l);
        return;
    }
    /* A node of a release before 0.3.4 speaks up to version 3: asked
     * again in it, it takes this worker in at its HELLO, as before
     * (without section 10.1's pending join there). The refusal's version
     * field is the node's own. */
    if (l.status == PSW_EPROTO && nc->version > PSW_VERSION_READER &&
        l.version >= PSW_VERSION_READER && l.version < nc->version) {
        nc->version = PSW_VERSION_READER;
        nc->fell_back = 1;
        nc_drop(nc, PS_ECONN, "%s speaks protocol version %u, not %d: "
                "connecting again in version %d", who(nc), l.version,
                PSW_VERSION, PSW_VERSION_READER);
        psw_cluster_free(&l);
        return;
    }
    if (l.status != PSW_OK) {
        if (refusal_is_final(l.status))
            nc->fatal = l.status;
        nc_drop(nc, l.status, "%s refused the connection: %s", who(nc),
                l.text);
        psw_cluster_free(&l);
        return;
    }
    /* With a token, the node must prove it holds it too before it sees
     * a single request: else it may be anyone. */
    if (c->token_len &&
        (l.proof_state != PSW_PROOF_SET ||
         psw_auth_verify(c->token, c->token_len, PSW_ROLE_SERVER, &nc->tr,
                         l.proof, PSW_PROOF_LEN))) {
        nc->fatal = PS_EAUTH;
        if (!nc->challenged)
            nc_drop(nc, PS_EAUTH, "%s accepted us without authentication: "
                    "it has no auth_token, or it is not a psd node of this "
                    "cluster; nothing was sent to it", who(nc));
        else
            nc_drop(nc, PS_EAUTH, "%s could not prove that it knows the "
                    "token: its token differs from ours, or it is not a psd "
                    "node of this cluster; nothing was sent to it",
                    who(nc));
        psw_cluster_free(&l);
        return;
    }
    if (io->nodes) {
        /* Every node must describe the same cluster, and be the node we
         * meant to reach. */
        /* Refused for good while ps_open runs (a list or an ini that is
         * wrong); after it, the node may be put right (a rolling restart
         * half done, undone): asked again (on_nc_closed). Not a worker's
         * node of an older release (version 3): a HELLO of version 3
         * takes the worker in at once, and every retry would join it
         * there anew, holding that node's clocks (a review). */
        int *bad = c->open_state == PSC_OPENING ||
                           (c->opt.worker >= 0 && nc->version < 4)
                       ? &nc->fatal : &nc->mismatch;
        if (l.epoch == c->cluster.epoch && l.node_index != nc->node) {
            /* The same layout: another node of it answers here. */
            *bad = PS_EPROTO;
            nc_drop(nc, PS_EPROTO, "%s is answered by node %d of this "
                    "cluster, where the nodes list puts node %d: two "
                    "entries of the list reach the same psd (one address "
                    "written two ways, or a name resolving to another "
                    "node's address?)", nc->name, l.node_index, nc->node);
            psw_cluster_free(&l);
            return;
        }
        if (l.epoch != c->cluster.epoch || l.node_index != nc->node) {
            /* Which setting differs, where HELLO_OK shows it: the
             * epochs alone sent a trial's operator to diff the files. */
            char diff[300];
            psw_cluster_diff(&c->cluster, &l, diff, sizeof diff);
            *bad = PS_EPROTO;
            /* Which of the two is wrong is not known here: the layout
             * is the first node's to answer, not the ini's (a client
             * does not read the tables), so both are named (a trial
             * read node 1 blamed where node 0 ran another file). */
            int ref = c->cluster.node_index;
            char from[PSW_ADDR_MAX + 80];
            if (nc->node == ref)
                snprintf(from, sizeof from, "from the one it described "
                         "when this client opened (it was restarted with "
                         "another file since, or the others were)");
            else
                snprintf(from, sizeof from, "from node %d's at %s, the "
                         "first node to answer", ref, c->cluster.nodes[ref]);
            nc_drop(nc, PS_EPROTO, "%s describes a different cluster layout "
                    "%s (node %d, epoch %016llx; expected node %d, epoch "
                    "%016llx): %s%s; one of the two runs another ini file: "
                    "are all nodes running the same one (and, in a rolling "
                    "upgrade, releases that agree on what the layout "
                    "holds: README, \"Upgrading psd\")?", nc->name, from,
                    l.node_index,
                    (unsigned long long)l.epoch, nc->node,
                    (unsigned long long)c->cluster.epoch,
                    diff[0] ? "it has " : "their nodes, shards and tables "
                    "agree: the files differ in [cluster] workers or a bsp "
                    "table's aggregate or an ssp table's staleness", diff);
            psw_cluster_free(&l);
            return;
        }
        psw_cluster_free(&l);
        nc->mismatch = 0;
    } else if (adopt_layout(io, nc, &l)) {
        psw_cluster_free(&l);
        nc_drop(nc, PS_ENOMEM, "out of memory");
        return;
    }
    /* Resume counting where the node has this worker (a rejoin starts at
     * the cluster's counts). The client's counts already hold every call
     * made (a failed one is retried under the same number), so a
     * reconnection that finds the node ahead of them means the node let
     * the worker go (its connection lost for longer than worker_grace)
     * and it joined anew at the cluster's clock and barrier count: its
     * trainer's next ps_clock ends an iteration the cluster has passed,
     * and its calls succeed all the same, so it is said here. The first
     * node to answer moves the counts, so a skip is counted once (on that
     * node's figures: the total is what means something).
     *
     * A reconnection moves the clock count only as far as every node has
     * it: one node that let the worker go (its link to that node cut for
     * longer than worker_grace) may have moved on with the other workers
     * alone, while the other nodes still wait for this worker's next
     * clock. Moved to that one node's count, the worker named each clock
     * one further than its iteration for the rest of the job, on every
     * node: each clock summed its step i with the others' step i + 1.
     * Let go by every node, it moves once the last has answered (each
     * node's count is then the cluster's). At ps_open the largest is
     * taken, as before: a new process starts after its predecessor's
     * sums, which nodes may hold one clock apart. The barrier count has
     * one keeper, node 0. */
    if (c->opt.worker >= 0) {
        uint64_t had = __atomic_load_n(&c->clock, __ATOMIC_RELAXED);
        uint64_t had_b = __atomic_load_n(&c->barrier, __ATOMIC_RELAXED);
        nc->w_clock = l_clock;
        nc->w_known = 1;
        for (int i = 0; nc->ever_ready && i < io->nnodes; i++) {
            const nconn *o = io->nodes[i];
            if (o != nc && o->w_known && o->w_clock < l_clock)
                l_clock = o->w_clock;
        }
        uint64_t dk = nc->ever_ready && l_clock > had ? l_clock - had : 0;
        uint64_t db = nc->ever_ready && l_barrier > had_b ? l_barrier - had_b
                                                         : 0;
        if (dk)
            psc_add(&nc->st.clocks_skipped, dk);
        if (db)
            psc_add(&nc->st.barriers_skipped, db);
        if ((dk || db) && !c->opt.quiet)
            fprintf(stderr, "libpsclient: worker %d rejoined %s, whose "
                    "counts for it were ahead of its own: it had been let "
                    "go (its connection lost for longer than worker_grace), "
                    "and its clock moved on %llu (%llu to %llu) and its "
                    "barrier count %llu (%llu to %llu), to the cluster's\n",
                    c->opt.worker, nc->name, (unsigned long long)dk,
                    (unsigned long long)had,
                    (unsigned long long)(dk ? l_clock : had),
                    (unsigned long long)db, (unsigned long long)had_b,
                    (unsigned long long)(db ? l_barrier : had_b));
        atomic_max(&c->clock, l_clock);
        atomic_max(&c->barrier, l_barrier);
    }
    nc->state = NC_READY;
    nc->ready_ns = now_ns();
    nc->down_ns = 0;
    nc->backoff_ms = 0;
    nc->acked = 0;
    nc->last_status = 0;
    nc->last_why[0] = '\0';
    if (nc->ever_ready)
        psc_add(&nc->st.reconnects, 1);
    nc->ever_ready = 1;
    /* Reply frames are at most max_frame: the size rule of proto/msg.h.
     * A node may come back with another max_frame (its ini edited):
     * requests made from now on are cut for the smallest any node said. */
    nc->max_frame = l_max_frame;
    nc->rd.max_frame = (size_t)l_max_frame;
    uint64_t least = l_max_frame;
    for (int i = 0; i < io->nnodes; i++)
        if (io->nodes[i]->max_frame && io->nodes[i]->max_frame < least)
            least = io->nodes[i]->max_frame;
    __atomic_store_n(&c->max_frame, least, __ATOMIC_RELAXED);
    if (least > io->cut_max)
        io->cut_max = least;
    /* A reconnection of an open client: taken in at once (at its next
     * request the node would anyway). Not the connection that completes
     * the open: check_open sends every node its OPENED then. */
    int was_open = c->open_state == PSC_OPEN;
    check_open(io);
    if (was_open)
        nc_opened(nc);
    nc_send(nc);
}

/* A reply for a part in flight settles it; one for a part that is not
 * (late after a resend, or a duplicate) is counted and dropped: it can
 * never complete another request, since (ts, part) are never reused. */
static void handle_reply(nconn *nc, const psw_msg *m)
{
    ps_client *c = nc->io->c;
    /* One look-up: taken out, and put back in the case that never comes
     * in one client's life (another part whose timestamp differs by a
     * multiple of 2^48 under the same key). */
    psc_part *p = fly_sent(m->part)
                      ? psw_map_del(&nc->fly_map, fly_key(m->ts, m->part))
                      : NULL;
    if (p && (uint64_t)p->msg.ts != m->ts) {
        /* Out of memory, it stays in flight unmapped: its reply is then
         * dropped, it times out and goes again (the map is rebuilt). */
        (void)psw_map_put(&nc->fly_map, fly_key(m->ts, m->part), p);
        p = NULL;
    }
    if (!p) {
        psc_add(&nc->st.duplicates, 1);
        return;
    }
    fly_unlink(nc, p);
    /* Rows read straight into out left an empty BIN in the frame. */
    size_t got = m->vals_len;
    if (p->direct)
        got = (p->msg.op == PSW_OP_PULL_RANGE ? (size_t)p->msg.count
                                              : p->msg.nkeys) *
              p->req->dim * sizeof(float);
    int k = psc_stat_kind(p->req->op);
    if (k >= 0) {
        psc_opstat *o = &nc->st.op[k];
        psc_add(&o->requests, 1);
        if (m->status != PSW_OK)
            psc_add(&o->errors, 1);
        psc_add(&o->payload_received, got);
        /* on_read noted the time the reply arrived. */
        psc_hist_add(o->hist, nc->recv_ns - p->sent_ns);
    }
    psc_add(&nc->st.payload_received, got);
    if (psc_part_reply(p, m, nc->io->nnodes > 1 ? nc->name : NULL))
        psc_customer_complete_at(&c->cu, p->req, nc->recv_ns);
}

/* A node with a token challenges us: answer with our proof, or, without
 * a token, with none (the node then refuses us with EAUTH, and its log
 * says who tried). */
static void handle_challenge(nconn *nc, const msgpack_object *msg)
{
    ps_client *c = nc->io->c;
    psw_challenge ch;
    char err[160];
    if (nc->challenged || psw_challenge_decode(msg, &ch, err, sizeof err)) {
        nc_drop(nc, PS_EPROTO, "%s: %s", nc->name,
                nc->challenged ? "a second CHALLENGE" : err);
        return;
    }
    if (nc->node >= 0 && ch.node_index != nc->node) {
        nc->fatal = PS_EPROTO;
        nc_drop(nc, PS_EPROTO, "%s answers as node %d: are all nodes "
                "running the same ini file?", who(nc), (int)ch.node_index);
        return;
    }
    nc->challenged = 1;
    nc->tr.node_index = ch.node_index;
    memcpy(nc->tr.snonce, ch.nonce, PSW_NONCE_LEN);
    uint8_t proof[PSW_PROOF_LEN];
    psw_auth_msg a = { NULL, 0 };
    if (c->token_len) {
        psw_auth_proof(c->token, c->token_len, PSW_ROLE_CLIENT, &nc->tr,
                       proof);
        a.proof = (const char *)proof;
        a.proof_len = PSW_PROOF_LEN;
    }
    wreq *w = malloc(sizeof *w);
    if (!w) {
        nc_drop(nc, PS_ENOMEM, "out of memory");
        return;
    }
    psw_out_init(&w->out);
    psw_out_frame_begin(&w->out);
    psw_pack_auth(&w->out, &a);     /* copied: 32 bytes < PSW_REF_MIN */
    psw_out_frame_end(&w->out);
    psw_wipe(proof, sizeof proof);
    psc_add(&nc->st.frames_sent, 1);
    int rc = nc_write(nc, w);
    if (rc) {
        psw_out_destroy(&w->out);
        free(w);
        nc_write_failed(nc, rc, "AUTH");
    }
}

static void handle_frame(nconn *nc, const char *body, size_t len)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];
    int n;
    psc_add(&nc->st.frames_received, 1);
    msgpack_zone_clear(&nc->zone);
    if (psw_frame_decode(body, len, &nc->zone, &obj, err, sizeof err) ||
        (n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err)) < 0) {
        nc_drop(nc, PS_EPROTO, "bad frame from %s: %s", nc->name, err);
        return;
    }
    if (nc->state == NC_HELLO) {
        uint32_t op = 0;
        if (n == 1 && msgs[0].type == MSGPACK_OBJECT_ARRAY &&
            msgs[0].via.array.size > 0 &&
            msgs[0].via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            op = (uint32_t)msgs[0].via.array.ptr[0].via.u64;
        if (op == PSW_OP_CHALLENGE)
            handle_challenge(nc, &msgs[0]);
        else
            handle_hello_ok(nc, &msgs[0]);
        return;
    }
    for (int i = 0; i < n && nc->state == NC_READY; i++) {
        psw_msg m;
        if (psw_msg_decode(&msgs[i], &m, err, sizeof err)) {
            nc_drop(nc, PS_EPROTO, "bad reply from %s: %s", nc->name, err);
            return;
        }
        if (m.op == PSW_OP_PING)
            continue;            /* liveness: the bytes were noted */
        if (m.op != PSW_OP_REPLY) {
            nc_drop(nc, PS_EPROTO, "bad reply from %s: op %d is not a reply",
                    nc->name, m.op);
            return;
        }
        handle_reply(nc, &m);
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
    nc->recv_ns = now_ns();
    psc_add(&nc->st.bytes_received, (uint64_t)n);
    psw_reader_commit(&nc->rd, (size_t)n);
    const char *body;
    size_t len;
    int rc;
    while (nc->state == NC_HELLO || nc->state == NC_READY) {
        rc = psw_reader_next(&nc->rd, &body, &len);
        if (rc == 0)
            break;
        if (rc < 0) {
            char line[96];
            /* A web server or sshd at a node's address answers the
             * HELLO with a line of text: say it, not a frame's size. */
            if (psw_reader_text(&nc->rd, line, sizeof line))
                nc_drop(nc, PS_EPROTO, "%s is not a psd node: it answered "
                        "\"%s\" (check the servers given to ps_open)",
                        nc->name, line);
            else
                nc_drop(nc, PS_EPROTO, "bad frame from %s: %s", nc->name,
                        nc->rd.why);
            return;
        }
        nc->walk = 0;
        nc->direct = NULL;
        handle_frame(nc, body, len);
    }
    if (nc->state == NC_READY)
        divert_rows(nc);
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
        /* What a bsp or ssp job then waits for: the worker again. Not
         * for a refusal (a busy id is held by another process), nor
         * before the layout said which tables there are. */
        size_t n = strlen(c->open_err);
        if (c->opt.worker >= 0 && psc_has_sync_tables(c) &&
            n < sizeof c->open_err &&
            (status == PS_ETIMEDOUT || status == PS_ECONN))
            snprintf(c->open_err + n, sizeof c->open_err - n,
                     "; worker %d's open did not complete: the nodes of "
                     "release 0.3.4 or later that got its HELLO have put "
                     "it back as it was before it (not taken in), so a job "
                     "that waits for it goes on once it is started again",
                     c->opt.worker);
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
    uv_close((uv_handle_t *)&io->retry, NULL);
    if (io->seed)                /* still opening: no layout yet */
        nc_drop(io->seed, PS_ECLOSED, "client closed");
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        if (nc->gai_busy)         /* a lookup not yet started is dropped */
            uv_cancel((uv_req_t *)&nc->gai);
        if (nc->state == NC_IDLE)
            fail_queue(nc, PS_ECLOSED, "the client closed");
        else
            nc_drop(nc, PS_ECLOSED, "client closed");
    }
}

static void send_all(psc_io *io)
{
    uint64_t now = now_ns();
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        if (wants_connect(nc, now, 0))
            nc_connect(nc);
        else
            nc_send(nc);
    }
    arm_retry(io);
}

static void on_batch(uv_timer_t *t)
{
    psc_io *io = t->data;
    io->batch_armed = 0;
    send_all(io);
}

#define ABANDON_WHY "the client closed without waiting for it (ps_close_now)"

/* ps_close_now: every part of a request up to upto fails with
 * PS_ECLOSED. Queued ones fail at once; one in flight fails as its
 * connection closes, since a write libuv still holds may read the
 * caller's buffers, and rows may be arriving straight into out. */
static void abandon(psc_io *io, ps_ts upto)
{
    for (int i = 0; i < io->nnodes; i++) {
        nconn *nc = io->nodes[i];
        psc_part **pp = &nc->q_head, *last = NULL;
        while (*pp) {
            psc_part *p = *pp;
            if (p->req->ts > upto) {
                last = p;
                pp = &p->next;
                continue;
            }
            *pp = p->next;
            nc->q_bytes -= p->wire_bytes;
            p->next = NULL;
            char why[160];
            snprintf(why, sizeof why, "request %llu: " ABANDON_WHY,
                     (unsigned long long)p->msg.ts);
            part_fail(io->c, p, PS_ECLOSED, why);
        }
        nc->q_tail = last;
        int flying = 0;
        for (int k = 0; k < 2; k++)
            for (psc_part *p = nc->fly[k].head; p; p = p->next)
                if (p->req->ts <= upto) {
                    p->abandoned = 1;
                    flying = 1;
                }
        if (flying)
            nc_drop(nc, PS_ECLOSED, ABANDON_WHY);
    }
}

static void on_wake(uv_async_t *a)
{
    psc_io *io = a->data;
    ps_client *c = io->c;
    int closing;
    ps_ts upto;
    psc_part *p = psc_customer_take(&c->cu, &closing, &upto);
    uint64_t bound = bounded_ns(c);
    uint64_t slow_bound = (uint64_t)c->opt.sync_timeout_ms * MS;

    size_t queued = 0;
    while (p) {
        psc_part *n = p->next;
        nconn *nc = io->nodes[p->node];
        p->next = NULL;
        uint64_t b = p->slow ? slow_bound : bound;
        p->expire_ns = b > UINT64_MAX - p->req->submit_ns
                           ? UINT64_MAX : p->req->submit_ns + b;
        if (nc->fatal) {
            /* Refused for good and still closing: its reason is not the
             * last one yet (the request failed with the connection
             * before's, "nothing heard ... presumed dead": test_modes'
             * a_lost_worker_back_after_end_job_is_refused, now and
             * then). */
            part_fail(c, p, nc->fatal,
                      nc->state == NC_CLOSING ? nc->drop_why : nc->last_why);
            p = n;
            continue;
        }
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
    if (upto)
        abandon(io, upto);
    /* A small request may wait batch_delay_us for company; a full batch,
     * or no delay configured, goes now. libuv's timers count whole
     * milliseconds: the delay is rounded down, never up (rounded up, 1 us
     * cost every request a millisecond), and one under 1 ms waits for the
     * loop's next turn: the requests other threads submit meanwhile go
     * with it. */
    /* Not while closing: the goodbyes of ps_close (the LEAVEs, and a
     * reader's ACK with them) have no company to wait for, and a close
     * bounds its wait for them (a review: with a delay of 1 s a reader's
     * goodbye never went). */
    if (c->opt.batch_delay_us > 0 && queued && queued < BATCH_BYTES &&
        !__atomic_load_n(&c->leaving, __ATOMIC_RELAXED)) {
        if (!io->batch_armed) {
            io->batch_armed = 1;
            uv_timer_start(&io->batch, on_batch,
                           (uint64_t)c->opt.batch_delay_us / 1000, 0);
        }
        return;
    }
    send_all(io);
}

/* Deadlines and heartbeats of one node's connection. */
static void tick_node(psc_io *io, nconn *nc, uint64_t now)
{
    ps_client *c = io->c;
    if ((nc->state == NC_CONNECTING || nc->state == NC_HELLO) &&
        now > nc->hello_ns) {
        char where[400];
        addr_label(nc, where, sizeof where);
        /* The loop runs its timers before it polls: a refusal the kernel
         * gave already (a loaded host, a short connect_timeout_ms) is
         * said as on_connect says it, not as no answer (a trial: 7 of 400
         * opens of a refused port raised a timeout). */
        uv_os_fd_t fd;
        int e = 0;
        socklen_t elen = sizeof e;
        if (nc->state == NC_CONNECTING &&
            !uv_fileno((const uv_handle_t *)&nc->tcp, &fd) &&
            !getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) && e) {
            nc_drop(nc, PS_ECONN, "cannot connect to %s: %s%s", where,
                    uv_strerror(-e),
                    psw_addr_ipv6_off((struct sockaddr *)&nc->sa[nc->sa_i],
                                      e));
            return;
        }
        /* "reconnecting": a request failing with this text may have
         * been sent long after the first connection was made. */
        /* Connected, the HELLO sent, no answer: the useful clue is that
         * something takes connections there. */
        /* A try the open's end cut short says so: its figure alone
         * (108 ms, after three tries of 500) read as the whole wait. */
        uint64_t had = nc->hello_ns > nc->connect_ns
                           ? nc->hello_ns - nc->connect_ns : 0;
        const char *cut = c->open_state == PSC_OPENING &&
                                  nc->hello_ns >= io->open_ns &&
                                  had + MS <
                                      (uint64_t)c->opt.connect_timeout_ms * MS
                              ? ", the last try, which the open's end cut "
                                "short"
                              : "";
        nc_drop(nc, PS_ETIMEDOUT, nc->state == NC_HELLO
                    ? "connected to %s, but no answer to the handshake "
                      "within %llu ms of %s%s (a stopped psd, one too busy "
                      "to answer in time (raise connect_timeout_ms, and "
                      "request_timeout_ms, which bounds each try, when "
                      "many clients start at once), a network losing "
                      "packets (each loss costs a resend's wait), or not a "
                      "psd on that port)"
                    /* No connection was made: "of connecting" read as if
                     * one had been (a multi-host trial). */
                    : "no answer from %s within %llu ms of %s%s (no "
                      "connection made: the host down or unreachable, or "
                      "a firewall dropping it)", where,
                /* The time it had, which the open's end may have cut
                 * below nothing (dialled after it: hello_ns before
                 * connect_ns read as 18446744073701 ms). */
                (unsigned long long)((had + MS - 1) / MS),
                nc->ever_ready               ? "reconnecting"
                : nc->state == NC_HELLO      ? "connecting"
                                             : "dialling",
                cut);
        return;
    }
    /* Queued parts whose time is up, connected or not: the node down, a
     * push's second wave held, or parts behind SEND_AHEAD bytes the node
     * has not read (the next write's completion may be long in coming: a
     * node that stopped reading, its connection kept by PINGs or
     * peer_timeout_ms 0). */
    if (nc->q_head)
        expire_queue(nc, now);
    if (nc->state != NC_READY)
        return;
    /* Parts that may wait for other workers: only their own bound. */
    while (nc->fly[1].head && now >= nc->fly[1].head->expire_ns) {
        psc_part *p = nc->fly[1].head;
        if (unwritten(nc) > 0) {
            /* A write libuv has not finished may still read its keys (or
             * a pushpull's values): failing it now would hand the caller
             * back buffers the library still sends. Closing cancels those
             * writes first; on_nc_closed then fails it, its time up. */
            nc_drop(nc, PS_ETIMEDOUT, "no answer from %s within "
                    "sync_timeout_ms (%d ms): waiting for other workers "
                    "(%s)", nc->name, c->opt.sync_timeout_ms, WHO_HINT);
            return;
        }
        fly_unlink(nc, p);
        if (p == nc->direct) {
            /* Its out may be freed once it fails: the rest is dropped. */
            psw_reader_undivert(&nc->rd);
            nc->direct = NULL;
        }
        psw_map_del(&nc->fly_map, fly_key(p->msg.ts, p->msg.part));
        char why[800];
        snprintf(why, sizeof why, "request %llu: no answer from %s within "
                 "sync_timeout_ms (%d ms): waiting for other workers (%s)",
                 (unsigned long long)p->msg.ts, nc->name,
                 c->opt.sync_timeout_ms, WHO_HINT);
        part_fail(c, p, PS_ETIMEDOUT, why);
    }
    resend_held(nc, now);
    psc_part *p = nc->fly[0].head;
    if (p && now >= p->attempt_ns) {
        psc_add(&nc->st.timeouts, 1);
        if (now >= p->expire_ns)
            nc_drop(nc, PS_ETIMEDOUT, "no reply from %s to request %llu "
                    "within its bounded time (attempt %d of %lld)", nc->name,
                    (unsigned long long)p->msg.ts, p->sends,
                    (long long)c->opt.max_retries + 1);
        else
            nc_drop(nc, PS_ETIMEDOUT, "no reply from %s within %d ms to "
                    "request %llu (attempt %d of %lld)", nc->name,
                    c->opt.request_timeout_ms, (unsigned long long)p->msg.ts,
                    p->sends, (long long)c->opt.max_retries + 1);
        return;
    }
    uint64_t dead = (uint64_t)c->cluster.peer_timeout_ms * MS;
    if (dead && now - nc->recv_ns >= dead) {
        nc_drop(nc, PS_ECONN, "nothing heard from %s for %llu ms: presumed "
                "dead (peer_timeout_ms %u)", nc->name,
                (unsigned long long)((now - nc->recv_ns) / MS),
                c->cluster.peer_timeout_ms);
        return;
    }
    uint64_t beat = (uint64_t)c->cluster.heartbeat_ms * MS;
    if (beat && now - nc->send_ns >= beat)
        nc_ping(nc);
}

static void on_tick(uv_timer_t *t)
{
    psc_io *io = t->data;
    ps_client *c = io->c;
    uint64_t now = now_ns();
    if (io->seed)
        tick_node(io, io->seed, now);
    for (int i = 0; i < io->nnodes; i++)
        tick_node(io, io->nodes[i], now);
    psc_bufpool_trim(&c->pool, now);
    if (c->open_state == PSC_OPENING && now >= io->open_ns) {
        nconn *nc = io->seed;
        for (int i = 0; !nc && i < io->nnodes; i++)
            if (io->nodes[i]->state != NC_READY)
                nc = io->nodes[i];
        /* Dropped in this tick (tick_node): its reason is not the last
         * one yet. */
        const char *why = !nc ? "" : nc->state == NC_CLOSING ? nc->drop_why
                                                              : nc->last_why;
        /* The status of the last attempt that ended, not of one being
         * dropped in this tick: a process stopped past the deadline drops
         * its attempt at the handshake's timeout when it resumes, and a
         * node's refusal (PS_EBUSY) said more. Its reason goes with it:
         * PS_EPROTO beside "no answer to the handshake" alone misled. */
        int st = nc && nc->last_status ? nc->last_status
                 : nc && nc->state == NC_CLOSING && nc->drop_status
                     ? nc->drop_status    /* the only attempt: its own */
                     : PS_ETIMEDOUT;
        char both[sizeof nc->drop_why + sizeof nc->last_why + 40];
        if (nc && nc->state == NC_CLOSING && nc->last_status &&
            nc->last_status != nc->drop_status && nc->last_why[0]) {
            /* The status's own reason first (what a caller matches),
             * then the attempt the open's end cut short; not one dialled
             * as the open ended, which had no time at all ("no answer
             * within 0 ms" after "connection refused" said nothing). */
            if (nc->hello_ns < nc->connect_ns + MS) {
                why = nc->last_why;
            } else {
                snprintf(both, sizeof both, "%s (the last attempt: %s)",
                         nc->last_why, why);
                why = both;
            }
        }
        open_gave_up(io, nc, st, why);
    }
}

/* The tick looks often enough for every deadline it checks: a quarter of
 * the smallest of them, between 5 and 100 ms. */
static void start_tick(psc_io *io)
{
    const ps_client *c = io->c;
    int period = c->opt.request_timeout_ms / 4;
    if (c->opt.connect_timeout_ms / 4 < period)
        period = c->opt.connect_timeout_ms / 4;
    if (c->cluster.heartbeat_ms && (int)c->cluster.heartbeat_ms / 4 < period)
        period = (int)c->cluster.heartbeat_ms / 4;
    period = period < 5 ? 5 : period > 100 ? 100 : period;
    uv_timer_start(&io->tick, on_tick, (uint64_t)period, (uint64_t)period);
}

static void run(psc_io *io);

static void *io_main(void *arg)
{
    psc_io *io = arg;
    /* Its own id, not io->thread, which pthread_create writes from the
     * calling thread, maybe after this thread has run a callback. */
    io->self = pthread_self();
    __atomic_store_n(&io->self_set, 1, __ATOMIC_RELEASE);
    /* SIGPIPE from a write to a vanished server goes to this thread;
     * blocking it here leaves the trainer's own handling untouched. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    nc_connect(io->seed);
    run(io);
    return NULL;
}

/* Whether a request (not a clock, barrier or held pull, which may wait
 * long) is in flight on some connection. */
static int in_flight(const psc_io *io)
{
    for (int i = 0; i < io->nnodes; i++)
        if (io->nodes[i] && io->nodes[i]->fly[0].head)
            return 1;
    return 0;
}

/* The I/O thread's loop. After each turn, while a caller is blocked
 * waiting and a request is in flight, it polls without sleeping for up
 * to busy_poll_us: on a VM, a thread sleeping in epoll_wait on an idle CPU
 * takes several microseconds to wake when the reply lands, a sixth of a
 * small request's round trip (4 KiB, psd and client on different CPUs:
 * p50 50 -> 41 us). A caller that computes meanwhile costs nothing: no
 * one waits, nothing spins. */
static void run(psc_io *io)
{
    uint64_t spin = (uint64_t)io->c->opt.busy_poll_us * 1000;
    while (uv_run(&io->loop, UV_RUN_ONCE)) {
        uint64_t t0 = spin ? uv_hrtime() : 0;
        while (spin && psc_customer_waited(&io->c->cu) && in_flight(io) &&
               uv_hrtime() - t0 < spin)
            if (!uv_run(&io->loop, UV_RUN_NOWAIT))
                return;
    }
}


/* 0 when a few descriptors can be opened now, else a UV_E* code. libuv's
 * first loop in a process makes a pipe of its own and aborts when it
 * cannot: a trainer near its open files limit died in ps_open (a fault
 * trial). This narrows the window; it cannot close it. */
static int fds_free(void)
{
    int p[2], q[2], rc = 0;
    if (pipe(p))
        return uv_translate_sys_error(errno);
    if (pipe(q))
        rc = uv_translate_sys_error(errno);
    else {
        close(q[0]);
        close(q[1]);
    }
    close(p[0]);
    close(p[1]);
    return rc;
}

/* After a uv_loop_init that failed: libuv 1.44 leaves its epoll
 * descriptor open (one leaked per failed ps_open, a fault trial). Closed
 * only when it is still an epoll descriptor, never another one. */
static void drop_backend(uv_loop_t *loop)
{
    int fd = uv_backend_fd(loop);
    char path[64], what[64];
    if (fd < 0)
        return;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, what, sizeof what - 1);
    if (n > 0) {
        what[n] = '\0';
        if (!strcmp(what, "anon_inode:[eventpoll]"))
            close(fd);
    }
}

/* ---- start, stop, stats ----------------------------------------------- */

int psc_io_start(ps_client *c, psc_addr *seeds, int nseeds, char *why,
                 size_t whylen)
{
    psc_io *io = calloc(1, sizeof *io);
    snprintf(why, whylen, "out of memory");
    if (!io) {
        free(seeds);
        return PS_ENOMEM;
    }
    io->c = c;
    io->seeds = seeds;
    io->nseeds = nseeds;
    io->rng = c->client_id;
    io->open_ns = now_ns() + (uint64_t)c->opt.connect_timeout_ms * MS;
    io->seed = nc_new(io, -1);
    int rc = io->seed ? fds_free() : UV_ENOMEM;
    if (rc == 0 && (rc = uv_loop_init(&io->loop)))
        drop_backend(&io->loop);
    else if (rc == 0 && (rc = uv_async_init(&io->loop, &io->wake, on_wake)))
        uv_loop_close(&io->loop);
    if (rc) {
        /* Mostly fds: libuv's loop takes a few of its own. */
        snprintf(why, whylen, "its event loop: %s%s", uv_strerror(rc),
                 rc == UV_EMFILE || rc == UV_ENFILE
                     ? " (raise the limit on open files: ulimit -n)" : "");
        nc_free(io->seed);
        free(seeds);
        free(io);
        return rc == UV_ENOMEM ? PS_ENOMEM : PS_ECONN;
    }
    uv_timer_init(&io->loop, &io->tick);
    uv_timer_init(&io->loop, &io->batch);
    uv_timer_init(&io->loop, &io->retry);
    io->wake.data = io->tick.data = io->batch.data = io->retry.data = io;
    start_tick(io);
    c->io = io;
    int trc = pthread_create(&io->thread, NULL, io_main, io);
    if (trc) {
        snprintf(why, whylen, "its thread: %s%s", strerror(trc),
                 trc == EAGAIN ? " (a limit on threads or processes, "
                                 "ulimit -u, or on memory for its stack, "
                                 "ulimit -v or ulimit -s)" : "");
        uv_close((uv_handle_t *)&io->wake, NULL);
        uv_close((uv_handle_t *)&io->tick, NULL);
        uv_close((uv_handle_t *)&io->batch, NULL);
        uv_close((uv_handle_t *)&io->retry, NULL);
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
    return c->io && __atomic_load_n(&c->io->self_set, __ATOMIC_ACQUIRE) &&
           pthread_equal(pthread_self(), c->io->self);
}

void psc_io_stop(ps_client *c)
{
    psc_io *io = c->io;
    if (!io)
        return;
    psc_customer_close(&c->cu);
    uv_async_send(&io->wake);
    pthread_join(io->thread, NULL);
    if (uv_loop_close(&io->loop) && !c->opt.quiet)
        fprintf(stderr, "libpsclient: event loop closed with open handles\n");
    io_free(io);
    c->io = NULL;
}

int psc_io_stats(const ps_client *c, int node, psc_stats *out)
{
    const psc_io *io = c->io;
    if (node < -1 || node >= io->nnodes)
        return PS_EINVAL;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < io->nnodes; i++)
        if (node < 0 || node == i) {
            psc_stats d;
            psc_stats_since(&io->nodes[i]->st, &io->nodes[i]->base, &d);
            psc_stats_sum(out, &d);
        }
    return 0;
}

void psc_io_stats_reset(ps_client *c)
{
    static const psc_stats zero;
    psc_io *io = c->io;
    for (int i = 0; i < io->nnodes; i++)
        psc_stats_since(&io->nodes[i]->st, &zero, &io->nodes[i]->base);
}
