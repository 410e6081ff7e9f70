/* libpsclient's public API (psclient.h): options, open and close, table
 * lookup, the request calls, waits, clocks and barriers. Each call is a
 * thin step: slicing (slice.c) builds the request, the Customer
 * (customer.c) tracks it, the I/O thread (io.c) carries it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "customer.h"
#include "internal.h"
#include "io.h"
#include "nodes.h"
#include "psclient.h"
#include "slice.h"
#include "../proto/auth.h"
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
_Static_assert((int)PS_EBUSY == (int)PSW_EBUSY, "PS_EBUSY");
_Static_assert((int)PS_ENONFINITE == (int)PSW_ENONFINITE, "PS_ENONFINITE");
_Static_assert((int)PS_EFULL == (int)PSW_EFULL, "PS_EFULL");

/* ---- errors --------------------------------------------------------- */

/* The detail of each thread's last failure per client (ps_last_error).
 * One slot per client: a failure on one client must not wipe another's.
 * A slot is known by the client's address and its random id, so that a
 * client opened where a closed one was starts with no detail. When the
 * slots are taken, the one written longest ago makes room. */
#define ERR_SLOTS 8

static _Thread_local struct err_slot {
    const ps_client *c;
    uint64_t id;                 /* c->client_id */
    uint64_t written;            /* tls_err_writes when last written */
    char msg[1024];              /* a failed push names its nodes and
                                    whether it was applied in part */
} tls_err[ERR_SLOTS];
static _Thread_local uint64_t tls_err_writes;

static struct err_slot *err_slot(const ps_client *c)
{
    for (int i = 0; i < ERR_SLOTS; i++)
        if (tls_err[i].c == c && tls_err[i].id == c->client_id)
            return &tls_err[i];
    return NULL;
}

void psc_set_error(const ps_client *c, const char *fmt, ...)
{
    struct err_slot *s = err_slot(c);
    if (!s) {
        s = &tls_err[0];
        for (int i = 1; i < ERR_SLOTS; i++)
            if (tls_err[i].written < s->written)
                s = &tls_err[i];
        s->c = c;
        s->id = c->client_id;
    }
    s->written = ++tls_err_writes;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
}

const char *ps_strerror(int code)
{
    if (code == PS_PENDING)      /* the client's own: never on the wire */
        return "still in flight";
    return psw_strerror(code);
}

/* Why the calling thread's last ps_open failed: there is no client to
 * keep it in, and a binding (Python in a notebook) may not show stderr. */
static _Thread_local char tls_open_err[1024];  /* as open_err */
static _Thread_local int tls_open_quiet;     /* ps_options.quiet */

/* Says why ps_open fails, for ps_last_error(NULL) and, unless the caller
 * asked for quiet (a binding that raises the reason itself), on stderr. */
__attribute__((format(printf, 1, 2)))
static void open_failed(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_open_err, sizeof tls_open_err, fmt, ap);
    va_end(ap);
    if (!tls_open_quiet)
        fprintf(stderr, "libpsclient: ps_open: %s\n", tls_open_err);
}

const char *ps_last_error(ps_client *c)
{
    if (!c)
        return tls_open_err;
    const struct err_slot *s = err_slot(c);
    return s ? s->msg : "";
}

void ps_options_init(ps_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->worker = -1;
    o->connect_timeout_ms = 5000;
    o->request_timeout_ms = 10000;
    o->max_retries = 2;
    o->batch_delay_us = 0;
    o->max_inflight_bytes = (size_t)256 << 20;
    o->auth_token = NULL;
    o->sync_timeout_ms = 600000;
    o->busy_poll_us = 50;
}

/* ---- public API ----------------------------------------------------- */

/* fork() copies the client but not its I/O thread: in the child every
 * request was taken and never sent, every wait hung (the request's time
 * limit is the I/O thread's), and ps_close of a worker hung on its LEAVE.
 * Each process counts the forks it came from (a handler run in the child,
 * registered at the first ps_open); a client opened under another count
 * is refused, PS_ECLOSED, and ps_close only forgets it (freeing it would
 * take locks that a thread of the parent may have held at the fork). */
static unsigned fork_count;
static pthread_once_t first_open_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    /* The child has this one thread; atomic like forked()'s read, which
     * a thread of the parent may have been making at the fork. */
    __atomic_add_fetch(&fork_count, 1, __ATOMIC_RELAXED);
}

/* Whether fd 2 was closed at the first ps_open: the library's sockets
 * may then take it, and a line for stderr would go into a node's
 * connection (read there as a frame). Every client is quiet then. */
static int stderr_closed;

static void at_first_open(void)
{
    (void)pthread_atfork(NULL, NULL, on_fork_child);
    stderr_closed = fcntl(STDERR_FILENO, F_GETFD) < 0 && errno == EBADF;
}

/* Opens /dev/null on whichever of fds 0, 1 and 2 are closed (a trainer
 * started with `2>&-` or `0<&-`): libuv puts its loop's descriptors on
 * the lowest free ones and asserts, when the loop closes, that none is
 * below 3, so ps_close and a failed ps_open aborted the trainer (a client
 * API trial); a socket there would also take what the program writes to
 * stdout or stderr. At each open: the program may close them after the
 * first. Not close-on-exec, as standard descriptors are. */
static void hold_std_fds(void)
{
    int fd;
    while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= STDERR_FILENO)
        ;
    if (fd > STDERR_FILENO)
        close(fd);
}

static int forked(ps_client *c, const char *what)
{
    if (__atomic_load_n(&fork_count, __ATOMIC_RELAXED) == c->forks)
        return 0;
    psc_set_error(c, "%s: this client was opened before a fork(), by the "
                  "parent process: its I/O thread did not come along, so it "
                  "cannot be used here; open a new client in this process",
                  what);
    return 1;
}


static uint64_t random_id(void)
{
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1)
            v = 0;
        fclose(f);
    }
    return v ^ uv_hrtime() ^ ((uint64_t)getpid() << 32);
}

static void client_free(ps_client *c)
{
    psw_wipe(c->token, sizeof c->token);
    psc_customer_destroy(&c->cu);
    psc_bufpool_destroy(&c->pool);
    psw_cluster_free(&c->cluster);
    pthread_mutex_destroy(&c->open_mu);
    pthread_cond_destroy(&c->open_cv);
    free(c);
}

/* Stops the I/O thread and frees the client. */
static void client_stop(ps_client *c)
{
    psc_io_stop(c);
    client_free(c);
}

/* Whether an option is out of its range; then which, in why. */
static int bad_options(const ps_options *o, char *why, size_t len)
{
    const struct { const char *name; long long v, lo, hi; } f[] = {
        { "connect_timeout_ms", o->connect_timeout_ms, 1, INT_MAX },
        { "request_timeout_ms", o->request_timeout_ms, 1, INT_MAX },
        { "max_retries", o->max_retries, 0, INT_MAX },
        /* A wait for company past a second would outlast requests'
         * bounded time while they sit in the queue. */
        { "batch_delay_us", o->batch_delay_us, 0, 1000000 },
        { "worker", o->worker, -1, INT_MAX },
        { "busy_poll_us", o->busy_poll_us, 0, 1000000 },
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi) {
            snprintf(why, len, "%s = %lld; it must be %lld..%lld",
                     f[i].name, f[i].v, f[i].lo, f[i].hi);
            return 1;
        }
    return 0;
}

/* The Customer's wake-up, for parts it queues on the I/O thread. */
static void wake_io(void *c)
{
    psc_io_wake(c);
}

static int wait_for_start(ps_client *c);

int ps_open(ps_client **out, const char *servers, const ps_options *o)
{
    char err[1024] = "";
    tls_open_err[0] = '\0';
    tls_open_quiet = o && o->quiet;
    if (!out) {
        open_failed("the place for the client (ps_client **) is NULL");
        return PS_EINVAL;
    }
    *out = NULL;
    ps_client *c = calloc(1, sizeof *c);
    if (!c) {
        open_failed("out of memory");
        return PS_ENOMEM;
    }
    pthread_once(&first_open_once, at_first_open);
    hold_std_fds();
    c->forks = __atomic_load_n(&fork_count, __ATOMIC_RELAXED);
    if (o)
        c->opt = *o;
    else
        ps_options_init(&c->opt);
    if (stderr_closed)
        c->opt.quiet = tls_open_quiet = 1;
    if (c->opt.sync_timeout_ms <= 0)
        c->opt.sync_timeout_ms = 600000;     /* options from before it existed */
    if (bad_options(&c->opt, err, sizeof err)) {
        open_failed("invalid options: %s", err);
        free(c);
        return PS_EINVAL;
    }
    if (psw_auth_init()) {
        open_failed("libsodium cannot start");
        free(c);
        return PS_ENOMEM;
    }
    pthread_mutex_init(&c->open_mu, NULL);
    pthread_cond_init(&c->open_cv, NULL);
    psc_customer_init(&c->cu, c->opt.max_inflight_bytes, &c->stats);
    /* A limit on the bytes in flight limits what is kept too (0 is one
     * request at a time, not a memory limit). */
    size_t inflight = c->opt.max_inflight_bytes;
    psc_bufpool_init(&c->pool, inflight && inflight < PSC_POOL_MAX_BYTES
                                   ? inflight : PSC_POOL_MAX_BYTES);
    /* The token: the option, else the environment, else the ini. */
    const char *tok = c->opt.auth_token && *c->opt.auth_token
                          ? c->opt.auth_token : getenv("PSD_AUTH_TOKEN");
    const char *from = tok == c->opt.auth_token ? "ps_options.auth_token"
                                                 : "PSD_AUTH_TOKEN";
    if (tok && !*tok)
        tok = NULL;
    psc_servers sv;
    int rc = psc_servers_parse(servers, tok == NULL, 0, &sv, err, sizeof err);
    if (rc) {
        open_failed("%s", err);
        client_free(c);
        return rc;
    }
    if (tok) {
        /* One line break at the end goes, as psd drops it from the ini's
         * auth_token_file: a token read from that file whole (Python's
         * open(f).read()) was refused for its newline. */
        size_t n = psw_token_trim(tok, strlen(tok));
        if (n < sizeof c->token) {
            memcpy(c->token, tok, n);
            c->token_len = n;
        } else
            c->token_len = n;    /* refused below */
    } else {
        memcpy(c->token, sv.token, sv.token_len);
        c->token_len = sv.token_len;
        from = "the ini's auth_token";
        psw_wipe(sv.token, sizeof sv.token);
    }
    /* A token no node could hold (psd refuses such tokens) fails here,
     * before anything is sent. */
    if (c->token_len &&
        (c->token_len >= sizeof c->token ||
         psw_token_check(c->token, c->token_len, err, sizeof err))) {
        if (c->token_len >= sizeof c->token)
            snprintf(err, sizeof err, "a token must be %d..%d bytes, got "
                     "%zu", PSW_AUTH_TOKEN_MIN, PSW_AUTH_TOKEN_MAX,
                     c->token_len);
        open_failed("%s: %s", from, err);
        free(sv.seeds);
        client_free(c);
        return PS_EAUTH;
    }
    psc_addr *seeds = sv.seeds;
    int nseeds = sv.nseeds;
    c->client_id = random_id();
    c->incarnation = uv_hrtime();
    int src = psc_io_start(c, seeds, nseeds, err, sizeof err);
    if (src) {
        open_failed("cannot start the I/O thread: %s", err);
        client_free(c);
        return src;
    }
    c->cu.wake = wake_io;
    c->cu.wake_arg = c;
    pthread_mutex_lock(&c->open_mu);
    while (c->open_state == PSC_OPENING)
        pthread_cond_wait(&c->open_cv, &c->open_mu);
    int st = c->open_state == PSC_OPEN ? PS_OK : c->open_status;
    pthread_mutex_unlock(&c->open_mu);
    if (st != PS_OK) {
        open_failed("%s", c->open_err);
        client_stop(c);
        return st;
    }
    if ((st = wait_for_start(c)) != PS_OK) {
        open_failed("worker %d starts at clock %llu: waiting for every node "
                    "to reach it: %s", c->opt.worker,
                    (unsigned long long)c->clock, ps_last_error(c));
        client_stop(c);
        return st;
    }
    *out = c;
    return 0;
}

/* A call that waits for the I/O thread, made on it (from a completion
 * callback): it would wait for itself, and it hung for good (ps_close
 * would join its own thread). Refused, saying why: 1 when it is. */
static int from_callback(ps_client *c, const char *what)
{
    if (!psc_io_on_thread(c))
        return 0;
    psc_set_error(c, "%s from a completion callback: callbacks run on the "
                  "client's I/O thread, which %s waits for, so it would "
                  "never return; call it from another thread (a callback "
                  "may poll with ps_wait_timeout(c, ts, 0), its own request "
                  "reading as PS_PENDING)", what, what);
    return 1;
}

int ps_wait_all(ps_client *c)
{
    return ps_wait_all_timeout(c, -1);
}

int ps_wait_all_timeout(ps_client *c, int timeout_ms)
{
    if (!c)
        return PS_EINVAL;
    if (forked(c, "ps_wait_all"))
        return PS_ECLOSED;
    if (timeout_ms != 0 && from_callback(c, "ps_wait_all"))
        return PS_EINVAL;
    char err[sizeof c->cu.first_error_text];
    int st = psc_customer_wait_all(&c->cu, timeout_ms, err, sizeof err);
    if (st < 0)
        psc_set_error(c, "%s", err);
    return st;
}

static int control(ps_client *c, int op, int node, uint64_t value);

/* Whether the cluster has a table of the given consistency. */
static int has_tables(const ps_client *c, int consistency)
{
    for (int i = 0; i < c->cluster.ntables; i++)
        if (c->cluster.tables[i].consistency == consistency)
            return 1;
    return 0;
}

/* A worker of a cluster with bsp tables that starts beyond a node's clock
 * waits until every node has reached its clock: a new process for a
 * worker lost in the middle of an iteration starts after that iteration
 * (the pushes made before the loss are in its sums; PROTOCOL.md §10.3),
 * and a push made while the node still sums that iteration would go into
 * it. The CLOCK names the clock the nodes gave it, so it moves nothing
 * (or, on a node that saw less of the lost process, the same as the
 * others); it is answered when the node gets there, at once on a node
 * already there. */
static int wait_for_start(ps_client *c)
{
    uint64_t start = __atomic_load_n(&c->clock, __ATOMIC_RELAXED);
    if (c->opt.worker < 0 || start == 0 || !has_tables(c, PSW_CONS_BSP))
        return PS_OK;
    return control(c, PSW_OP_CLOCK, -1, start);
}

/* ps_close and ps_close_now return nothing: from a callback the reason
 * goes to stderr too (unless quiet), and the client stays open. */
static int close_from_callback(ps_client *c, const char *what)
{
    if (!from_callback(c, what))
        return 0;
    if (!c->opt.quiet)
        fprintf(stderr, "libpsclient: %s: %s (the client was not closed)\n",
                what, ps_last_error(c));
    return 1;
}

static ps_ts submit(ps_client *c, psc_req *r, ps_done_fn cb, void *arg);

/* Before a worker's LEAVE, when it pushed to a bsp table in a clock it
 * never called ps_clock for: a push of no rows to every node, so that each
 * counts it in that clock's `aggregate = mean` divisor (a node counts a
 * worker that left when its pushes of the clock reached that node).
 * Without it, a worker that pushed to some nodes' rows and closed was
 * counted there only, and rows of one table were divided by 3 on one node
 * and by 2 on the other (an updater trial). Not after a ps_clock for that
 * clock that is under way or failed: the nodes that took it count the
 * worker as one that reached it, and the mark would fall in their next
 * clock (a review); a node that did not take it counts the worker as
 * after a crash. Every request before it is complete (ps_close drained
 * them). */
static ps_ts mark_pushed(ps_client *c)
{
    uint64_t step = __atomic_load_n(&c->cu.pushed_step, __ATOMIC_RELAXED);
    if (step <= c->cu.clock_sent)
        return 0;
    int table = -1;
    for (int i = 0; i < c->cluster.ntables && table < 0; i++)
        if (c->cluster.tables[i].consistency == PSW_CONS_BSP)
            table = i;
    psc_req *r;
    if (table < 0 ||
        psc_req_control(c->cluster.nnodes, -1, PSW_OP_PUSH, 0, &r))
        return 0;
    for (int k = 0; k < r->nparts; k++)
        r->parts[k].msg.table = (uint32_t)table;
    /* Waited for with the LEAVE after it on each connection, so that a
     * node down costs one request's bound at close, not two. */
    return submit(c, r, NULL, NULL);
}

/* A reader that pushed says goodbye too: a LEAVE, which changes nothing
 * for a reader, carries in its frame the ACK of every request before it,
 * so that the nodes forget its pushes now. Without it the last one stayed
 * unacknowledged for client_ttl, and was then forgotten with a warning
 * that read as a crash's (a soak trial: one a second under churn). Waited
 * for 1 s at most (request_timeout_ms if shorter): a courtesy, which a
 * close with a node down must not turn into a wait of a whole attempt; a
 * node that cannot answer forgets the pushes after client_ttl, as
 * before. */
static void reader_leaves(ps_client *c)
{
    int n = c->cluster.nnodes, ms = c->opt.request_timeout_ms < 1000
                                        ? c->opt.request_timeout_ms : 1000;
    ps_ts *ts = calloc((size_t)n, sizeof *ts);
    if (!ts)
        return;
    /* Only to the nodes its pushes went to: the others have nothing of
     * it to forget, and one down would hold the close (a review). */
    for (int k = 0; k < n; k++) {
        psc_req *r;
        if ((__atomic_load_n(&c->pushed_to[k >> 3], __ATOMIC_RELAXED) >>
             (k & 7) & 1) &&
            psc_req_control(n, k, PSW_OP_LEAVE, 0, &r) == 0)
            ts[k] = submit(c, r, NULL, NULL);
    }
    uint64_t end = uv_hrtime() + (uint64_t)ms * 1000000;
    for (int k = 0; k < n; k++) {
        uint64_t now = uv_hrtime();
        if (ts[k] > 0)
            ps_wait_timeout(c, ts[k], now < end ? (int)((end - now) / 1000000)
                                                : 0);
    }
    free(ts);
}

void ps_close(ps_client *c)
{
    if (!c || forked(c, "ps_close") || close_from_callback(c, "ps_close"))
        return;
    /* Every request, also those callbacks issue while it waits. */
    psc_customer_drain(&c->cu);
    /* A worker says goodbye, so bsp/ssp tables stop waiting for it at
     * once instead of after worker_grace. A node that answered it holds
     * a reader's connection from then on: lost, it is not made again
     * (a new HELLO would join the worker anew there). */
    __atomic_store_n(&c->leaving, 1, __ATOMIC_RELAXED);
    if (c->opt.worker >= 0) {
        ps_ts mark = mark_pushed(c);
        control(c, PSW_OP_LEAVE, -1, 0);
        if (mark > 0)            /* done, unless the LEAVE was not sent */
            (void)ps_wait(c, mark);
    } else
        reader_leaves(c);
    client_stop(c);
}

void ps_close_now(ps_client *c)
{
    if (!c || forked(c, "ps_close_now") ||
        close_from_callback(c, "ps_close_now"))
        return;
    /* Everything issued so far, and what callbacks issue as theirs
     * fail, fails instead of being waited for. */
    psc_customer_abandon(&c->cu, 1);
    psc_customer_drain(&c->cu);
    __atomic_store_n(&c->leaving, 1, __ATOMIC_RELAXED);  /* as ps_close */
    if (c->opt.worker >= 0) {
        /* Everything before it is over: LEAVE, issued next, goes
         * through. Waited for one attempt's time at most: a node that
         * cannot answer counts this worker lost, as after a crash. Not a
         * reader's goodbye: a close that stops now (Ctrl-C) leaves its
         * pushes to client_ttl, as one it abandoned may be answered. */
        psc_customer_abandon(&c->cu, 0);
        psc_req *r;
        if (psc_req_control(c->cluster.nnodes, -1, PSW_OP_LEAVE, 0, &r) ==
            0) {
            ps_ts ts = submit(c, r, NULL, NULL);
            if (ts > 0)
                ps_wait_timeout(c, ts, c->opt.request_timeout_ms);
        }
    }
    client_stop(c);
}

int ps_table(ps_client *c, const char *name, ps_table_info *info)
{
    if (!c)
        return PS_EINVAL;
    if (!name) {
        /* Said, or ps_last_error would show an earlier failure's text. */
        psc_set_error(c, "ps_table: the table name is NULL");
        return PS_EINVAL;
    }
    for (int i = 0; i < c->cluster.ntables; i++) {
        const psw_table_desc *t = &c->cluster.tables[i];
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
    psc_set_error(c, "no table named '%s' in the cluster", name);
    return PS_ENOTABLE;
}

/* Hands a built request to the Customer and wakes the I/O thread. */
static ps_ts submit(ps_client *c, psc_req *r, ps_done_fn cb, void *arg)
{
    char err[128];
    /* Before the Customer's lock, which a thread the child does not have
     * may have held at the fork. Keyed requests were checked before
     * slicing already (keyed), so no pooled request comes here. */
    if (forked(c, "a request")) {
        psc_req_free(r);
        return PS_ECLOSED;
    }
    if (!r->call_ns)             /* a clock or barrier: from here, before
                                    any wait for room (a review) */
        r->call_ns = uv_hrtime();
    ps_ts ts = psc_customer_submit(&c->cu, r, cb, arg, !psc_io_on_thread(c),
                                   err, sizeof err);
    if (ts < 0) {
        psc_set_error(c, "%s", err);
        return ts;
    }
    psc_io_wake(c);
    return ts;
}

static int shape_of(ps_client *c, int table, psc_shape *sh)
{
    if (table < 0 || table >= c->cluster.ntables) {
        psc_set_error(c, "no table with id %d", table);
        return PS_ENOTABLE;
    }
    sh->nnodes = c->cluster.nnodes;
    sh->shards = c->cluster.shards;
    sh->table = &c->cluster.tables[table];
    sh->table_id = (uint32_t)table;
    sh->max_payload =
        psw_payload_max(__atomic_load_n(&c->max_frame, __ATOMIC_RELAXED));
    sh->pool = &c->pool;
    return 0;
}

/* A push to a bsp table while this worker's clock is not done (a
 * ps_clock_timeout that returned PS_PENDING, or a ps_clock that failed:
 * nodes may have taken it, and the next call names it again) would be
 * summed into that clock, not the next: refused until a call for it
 * returns PS_OK. clock_failed holds its number meanwhile. */
static int clock_under_way(ps_client *c, int op, const psc_shape *sh)
{
    uint64_t k = __atomic_load_n(&c->clock_failed, __ATOMIC_RELAXED);
    if (!k || !psw_op_has(op, PSW_OPF_PUSHES) ||
        sh->table->consistency != PSW_CONS_BSP)
        return 0;
    psc_set_error(c, "a push to bsp table '%s' while this worker's clock "
                  "%llu is %s would count in that clock: it is refused "
                  "until a clock call (ps_clock; clock() in Python) for it "
                  "succeeds", sh->table->name, (unsigned long long)k,
                  __atomic_load_n(&c->clock_pending, __ATOMIC_RELAXED)
                      ? "under way" : "not done (the last call failed)");
    return 1;
}

/* r (of op, to sh's table): a push is one the nodes remember until this
 * client ACKs it (ps_close), and a worker's push to a bsp table counts in
 * a clock, which psc_customer_submit stamps (mark_pushed). */
static void note_push(ps_client *c, int op, const psc_shape *sh, psc_req *r)
{
    if (!psw_op_has(op, PSW_OPF_PUSHES))
        return;
    for (int k = 0; k < r->nparts; k++) {
        int n = r->parts[k].node;
        unsigned char bit = (unsigned char)(1u << (n & 7));
        if (!(__atomic_load_n(&c->pushed_to[n >> 3], __ATOMIC_RELAXED) & bit))
            __atomic_fetch_or(&c->pushed_to[n >> 3], bit, __ATOMIC_RELAXED);
    }
    if (c->opt.worker >= 0 && sh->table->consistency == PSW_CONS_BSP)
        r->step = 1;
}

static ps_ts keyed(ps_client *c, int op, int table, const uint64_t *keys,
                   size_t n, const float *vals, float *out, ps_done_fn cb,
                   void *arg)
{
    psc_shape sh;
    psc_req *r;
    char err[256];
    if (!c)
        return PS_EINVAL;
    uint64_t t0 = uv_hrtime();
    int rc = shape_of(c, table, &sh);
    if (rc)
        return rc;
    if (clock_under_way(c, op, &sh))
        return PS_EINVAL;
    if (n == 0 || !keys || (op != PSW_OP_PULL && !vals) ||
        (op != PSW_OP_PUSH && !out)) {
        psc_set_error(c, "%s", n == 0 ? "no keys given" : "a buffer is NULL");
        return PS_EINVAL;
    }
    /* Before slicing, which takes the pool's lock: a thread the child
     * does not have may have held it at the fork. */
    if (forked(c, "a request"))
        return PS_ECLOSED;
    rc = psc_req_keys(&sh, op, keys, n, vals, out, &r, err, sizeof err);
    if (rc) {
        psc_set_error(c, "%s", rc == PS_ENOMEM ? "out of memory" : err);
        return rc;
    }
    note_push(c, op, &sh, r);
    r->call_ns = t0;
    return submit(c, r, cb, arg);
}

static ps_ts ranged(ps_client *c, int op, int table, uint64_t first,
                    uint64_t count, const float *vals, float *out,
                    ps_done_fn cb, void *arg)
{
    psc_shape sh;
    psc_req *r;
    char err[256];
    if (!c)
        return PS_EINVAL;
    uint64_t t0 = uv_hrtime();
    int rc = shape_of(c, table, &sh);
    if (rc)
        return rc;
    if (clock_under_way(c, op, &sh))
        return PS_EINVAL;
    if ((op == PSW_OP_PUSH_RANGE && !vals) || (op == PSW_OP_PULL_RANGE && !out)) {
        psc_set_error(c, "a buffer is NULL");
        return PS_EINVAL;
    }
    rc = psc_req_range(&sh, op, first, count, vals, out, &r, err, sizeof err);
    if (rc) {
        psc_set_error(c, "%s", rc == PS_ENOMEM ? "out of memory" : err);
        return rc;
    }
    note_push(c, op, &sh, r);
    r->call_ns = t0;
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
    return ps_wait_timeout(c, ts, -1);
}

int ps_wait_timeout(ps_client *c, ps_ts ts, int timeout_ms)
{
    if (!c)
        return PS_EINVAL;
    /* A call that failed returned its PS_E* code in place of a timestamp:
     * ps_wait(c, ps_push(...)) hands it back, with the call's own
     * ps_last_error, instead of "request -8 was never issued". */
    if (ts < 0 && ts >= PS_EFULL)
        return (int)ts;
    if (forked(c, "ps_wait"))
        return PS_ECLOSED;
    if (timeout_ms != 0 && from_callback(c, "ps_wait"))
        return PS_EINVAL;
    char err[sizeof c->cu.first_error_text];   /* as psc_failure's text */
    int st = psc_customer_wait(&c->cu, ts, timeout_ms, err, sizeof err);
    if (st < 0)
        psc_set_error(c, "%s", err);
    return st;
}

/* Sends a control message and waits for every node's answer. */
static int control(ps_client *c, int op, int node, uint64_t value)
{
    psc_req *r;
    int rc = psc_req_control(c->cluster.nnodes, node, op, value, &r);
    if (rc) {
        psc_set_error(c, "out of memory");
        return rc;
    }
    uint64_t t0 = uv_hrtime();
    ps_ts ts = submit(c, r, NULL, NULL);
    rc = ts < 0 ? (int)ts : ps_wait(c, ts);
    if (op != PSW_OP_LEAVE)
        psc_add_shared(&c->stats.sync_wait_ns, uv_hrtime() - t0);
    return rc;
}

int psc_has_sync_tables(const ps_client *c)
{
    return has_tables(c, PSW_CONS_BSP) || has_tables(c, PSW_CONS_SSP);
}

static int is_worker(ps_client *c, const char *what)
{
    if (c->opt.worker >= 0)
        return 1;
    psc_set_error(c, "%s: this client is not a worker (open it with "
                  "ps_options.worker = 0..workers-1)", what);
    return 0;
}

/* A ps_clock or ps_barrier: names the next number, or the one the last
 * call failed with. A call that failed (a timeout, a lost node) may have
 * been taken by some nodes; the same number again is taken by the others
 * and answered by those when they reach it, where the next number would
 * put this worker one clock (or barrier) ahead of the others for good.
 * One that gave up waiting after timeout_ms (PS_PENDING) is still under
 * way: the next call waits for its request rather than send another. */
static int sync_step(ps_client *c, int op, int node, uint64_t *count,
                     uint64_t *failed, ps_ts *pending, int timeout_ms)
{
    uint64_t t0 = uv_hrtime();
    ps_ts ts = __atomic_load_n(pending, __ATOMIC_RELAXED);
    uint64_t next = __atomic_load_n(failed, __ATOMIC_RELAXED);
    if (!ts) {
        if (!next)
            next = __atomic_add_fetch(count, 1, __ATOMIC_RELAXED);
        psc_req *r;
        int rc = psc_req_control(c->cluster.nnodes, node, op, next, &r);
        if (rc) {
            psc_set_error(c, "out of memory");
            __atomic_store_n(failed, next, __ATOMIC_RELAXED);
            return rc;
        }
        ts = submit(c, r, NULL, NULL);
        if (ts < 0) {
            __atomic_store_n(failed, next, __ATOMIC_RELAXED);
            return (int)ts;
        }
        /* Named again by a call after a failure, as after PS_PENDING. */
        __atomic_store_n(failed, next, __ATOMIC_RELAXED);
        /* Under way from now (atomics: another thread's push reads it,
         * clock_under_way), not only once a wait gave up. */
        __atomic_store_n(pending, ts, __ATOMIC_RELAXED);
    }
    int rc = ps_wait_timeout(c, ts, timeout_ms);
    /* The time spent inside the calls, not between them. */
    psc_add_shared(&c->stats.sync_wait_ns, uv_hrtime() - t0);
    if (rc == PS_PENDING)
        return rc;
    __atomic_store_n(pending, 0, __ATOMIC_RELAXED);
    if (rc == PS_OK)
        __atomic_store_n(failed, 0, __ATOMIC_RELAXED);
    return rc;
}

/* One thread at a time: a second thread's ps_clock joined the clock
 * under way (or sent another), so two calls counted one clock or two at
 * random, silently (a Python trial: 601 calls from two threads moved the
 * worker 552 clocks). A worker's clocks are its own steps: refused. */
static int sync_call(ps_client *c, int op, int node, uint64_t *count,
                     uint64_t *failed, ps_ts *pending, int timeout_ms)
{
    const char *name = op == PSW_OP_CLOCK ? "ps_clock" : "ps_barrier";
    /* Before the count moves: submit would refuse it after. */
    if (forked(c, name))
        return PS_ECLOSED;
    int *in = op == PSW_OP_CLOCK ? &c->clock_in : &c->barrier_in, no = 0;
    if (!__atomic_compare_exchange_n(in, &no, 1, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED)) {
        psc_set_error(c, "%s: another thread of this worker is in %s now: "
                      "a worker's %s are its own steps, made by one thread "
                      "at a time", name, name,
                      op == PSW_OP_CLOCK ? "clocks" : "barriers");
        return PS_EINVAL;
    }
    int rc = sync_step(c, op, node, count, failed, pending, timeout_ms);
    __atomic_store_n(in, 0, __ATOMIC_RELEASE);
    return rc;
}

int ps_clock(ps_client *c)
{
    return ps_clock_timeout(c, -1);
}

int ps_clock_timeout(ps_client *c, int timeout_ms)
{
    if (!c)
        return PS_EINVAL;
    if (!is_worker(c, "ps_clock") || from_callback(c, "ps_clock"))
        return PS_EINVAL;
    if (!psc_has_sync_tables(c)) {
        psc_set_error(c, "ps_clock: the cluster has no bsp or ssp table; "
                      "async tables have no clocks");
        return PS_EINVAL;
    }
    return sync_call(c, PSW_OP_CLOCK, -1, &c->clock, &c->clock_failed,
                     &c->clock_pending, timeout_ms);
}

int ps_sync_outstanding(ps_client *c, int barrier)
{
    if (!c)
        return PS_EINVAL;
    /* failed holds the number from the moment a call sends it until a
     * call for it succeeds (sync_step). */
    return __atomic_load_n(barrier ? &c->barrier_failed : &c->clock_failed,
                           __ATOMIC_RELAXED) != 0;
}

int ps_position(ps_client *c, uint64_t *clock, uint64_t *barrier)
{
    uint64_t k = 0, b = 0;
    int worker = c && c->opt.worker >= 0;
    if (worker) {
        k = __atomic_load_n(&c->clock, __ATOMIC_RELAXED);
        b = __atomic_load_n(&c->barrier, __ATOMIC_RELAXED);
    }
    if (clock)
        *clock = k;
    if (barrier)
        *barrier = b;
    if (c && !worker)
        psc_set_error(c, "ps_position: this client is not a worker "
                      "(ps_options.worker = -1): readers have no clock");
    return worker ? PS_OK : PS_EINVAL;
}

/* ---- statistics ------------------------------------------------------ */

/* Requests as the Customer counted them, with the wire counters of the
 * node(s) added. */
static int collect(ps_client *c, int node, ps_stats_t *out)
{
    if (!c)
        return PS_EINVAL;
    if (!out) {
        psc_set_error(c, "%s: the place for the figures is NULL",
                      node < 0 ? "ps_stats" : "ps_stats_node");
        return PS_EINVAL;
    }
    psc_stats wire, all;
    if (psc_io_stats(c, node, &wire))
        return PS_EINVAL;        /* ps_stats_node checked node first */
    if (node < 0) {
        psc_stats_since(&c->stats, &c->stats_base, &all);
        for (int k = 0; k < PS_STAT_KINDS; k++)
            all.op[k].parts = wire.op[k].parts;
        all.frames_sent = wire.frames_sent;
        all.frames_received = wire.frames_received;
        all.bytes_sent = wire.bytes_sent;
        all.bytes_received = wire.bytes_received;
        all.payload_sent = wire.payload_sent;
        all.payload_received = wire.payload_received;
        all.timeouts = wire.timeouts;
        all.resends = wire.resends;
        all.duplicates = wire.duplicates;
        all.reconnects = wire.reconnects;
        all.clocks_skipped = wire.clocks_skipped;
        all.barriers_skipped = wire.barriers_skipped;
    } else
        all = wire;
    psc_stats_export(&all, out);
    return 0;
}

int ps_stats(ps_client *c, ps_stats_t *out)
{
    return collect(c, -1, out);
}

int ps_stats_node(ps_client *c, int node, ps_stats_t *out)
{
    /* Said in ps_last_error, or it would show an earlier failure's text. */
    if (c && (node < 0 || node >= c->cluster.nnodes)) {
        psc_set_error(c, "ps_stats_node: no node %d (the cluster has %d)",
                      node, c->cluster.nnodes);
        return PS_EINVAL;
    }
    return collect(c, node, out);
}

void ps_stats_reset(ps_client *c)
{
    static const psc_stats zero;
    if (!c)
        return;
    psc_stats_since(&c->stats, &zero, &c->stats_base);
    psc_io_stats_reset(c);
}

static const char *const kind_names[PS_STAT_KINDS] = {
    "push", "pull", "pushpull", "push_range", "pull_range", "clock", "barrier"
};

int ps_stats_format(const ps_stats_t *s, char *buf, size_t len)
{
    size_t at = 0;
    int n;
    if (!buf)
        len = 0;                 /* the length needed, written nowhere */
    if (!s) {
        if (len)
            buf[0] = '\0';
        return PS_EINVAL;
    }
#define PUT(...)                                                            \
    do {                                                                    \
        n = snprintf(buf + (at < len ? at : len), at < len ? len - at : 0, \
                     __VA_ARGS__);                                          \
        if (n > 0)                                                          \
            at += (size_t)n;                                                \
    } while (0)
    if (len)
        buf[0] = '\0';
    for (int k = 0; k < PS_STAT_KINDS; k++) {
        const ps_op_stats *o = &s->op[k];
        if (!o->requests)
            continue;
        PUT("%s%s %llu p50 %.0f us p99 %.0f us", at ? ", " : "", kind_names[k],
            (unsigned long long)o->requests, o->p50_us, o->p99_us);
        if (o->errors)
            PUT(" (%llu failed)", (unsigned long long)o->errors);
    }
    uint64_t wire = s->bytes_sent + s->bytes_received;
    uint64_t payload = s->payload_sent + s->payload_received;
    PUT("%soverhead %.1f%%, resends %llu, timeouts %llu", at ? ", " : "",
        wire && wire >= payload ? 100.0 * (double)(wire - payload) /
                                      (double)wire : 0.0,
        (unsigned long long)s->resends, (unsigned long long)s->timeouts);
    if (s->reconnects)
        PUT(", reconnects %llu", (unsigned long long)s->reconnects);
    if (s->clocks_skipped)
        PUT(", clocks skipped %llu", (unsigned long long)s->clocks_skipped);
    if (s->barriers_skipped)
        PUT(", barriers skipped %llu",
            (unsigned long long)s->barriers_skipped);
    if (s->backpressure_us)
        PUT(", blocked %.1f ms", (double)s->backpressure_us / 1000.0);
#undef PUT
    return (int)at;
}

int ps_barrier(ps_client *c)
{
    return ps_barrier_timeout(c, -1);
}

int ps_barrier_timeout(ps_client *c, int timeout_ms)
{
    if (!c)
        return PS_EINVAL;
    if (!is_worker(c, "ps_barrier") || from_callback(c, "ps_barrier"))
        return PS_EINVAL;
    /* node 0 keeps barriers */
    return sync_call(c, PSW_OP_BARRIER, 0, &c->barrier, &c->barrier_failed,
                     &c->barrier_pending, timeout_ms);
}
