/* libpsclient: the client library trainers link to push gradients to and
 * pull weights from psd parameter servers.
 *
 * Every call is thread-safe. A background I/O thread owns the sockets, so
 * communication overlaps the caller's compute. Several clients may live in
 * one process. The first push of 1 MiB or more in several parts also
 * starts one helper thread for the whole process, kept blocked while
 * idle, which reads half of such a push for NaN and infinities beside the
 * calling thread. Link with `pkg-config --cflags --libs psclient`.
 *
 * fork(): a client does not survive it. In the child, requests, waits and
 * closes on a client opened before the fork return PS_ECLOSED (ps_close
 * only forgets it); ps_table, ps_position and ps_stats still read what it
 * knew. Open a new client in the child. The child also holds copies of
 * the parent's sockets: while it lives, a parent that dies is noticed by
 * the nodes only after peer_timeout_ms (as a vanished host is), not at
 * once, which delays a bsp worker's replacement by as much. */
#ifndef PSCLIENT_H
#define PSCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PS_API __attribute__((visibility("default")))
#else
#define PS_API
#endif

/* The library's version, the one place it is written: the Makefile reads
 * these three lines for the shared object's name and psclient.pc, and psd
 * and psctl print them for --version. */
#define PS_VERSION_MAJOR 0
#define PS_VERSION_MINOR 4
#define PS_VERSION_PATCH 7

typedef struct ps_client ps_client;  /* opaque */
typedef int64_t ps_ts;               /* > 0: a request's timestamp; < 0: a PS_E* code */

/* Completion callback: runs exactly once for every accepted request, on the
 * I/O thread, with the request's status (PS_OK or a PS_E* code). It must
 * not block: while it runs no request is sent or read, and those that fail
 * for time meanwhile say that a callback held the thread, and how long.
 * It may issue requests; the calls that wait for the I/O thread
 * (ps_wait and ps_wait_all with a timeout other than 0, ps_clock,
 * ps_barrier, ps_close, ps_close_now) return PS_EINVAL there, or for the
 * two closes do nothing but say so on stderr, rather than wait for the
 * thread they run on. Polling (a timeout of 0) is allowed: the callback's
 * own request reads as PS_PENDING until it returns. ps_last_error on the
 * I/O thread is that thread's own: a failure's text reaches the thread
 * that waits for the request. When it runs, the request's buffers are no
 * longer used by the library. It must return: one that ends the thread
 * (pthread_exit) or jumps out of it (longjmp, a C++ exception) leaves the
 * client without its I/O thread, and what waits for it then waits for
 * ever. */
typedef void (*ps_done_fn)(ps_ts ts, int status, void *arg);

/* Status codes. All errors are negative. The values also travel on the wire. */
enum {
    PS_OK = 0,
    PS_EINVAL = -1,     /* bad argument */
    PS_ENOMEM = -2,     /* out of memory */
    PS_ECONN = -3,      /* could not connect, or the connection was lost */
    PS_ETIMEDOUT = -4,  /* no answer within the request's bounded time */
    PS_EPROTO = -5,     /* the peer broke the protocol */
    PS_EAUTH = -6,      /* authentication failed */
    PS_ENOTABLE = -7,   /* no such table */
    PS_EKEY = -8,       /* key or row out of the table's range */
    PS_ETOOBIG = -9,    /* a request piece exceeds the server's max_frame,
                           or a request is beyond what one request can be
                           (more than 2^32 - 1 keys, or 65,535 parts) */
    PS_ECLOSED = -10,   /* the client is closing */
    PS_ESERVER = -11,   /* the server failed to carry out the request (a
                           push: its text says whether it may have been
                           applied, e.g. a copy of one a node forgot) */
    PS_ENOTOWNER = -12, /* the server does not own that shard (layout mismatch) */
    PS_EBUSY = -13,     /* the server is at a limit (max_connections, or a
                           push past max_unacked_pushes or
                           max_remembered_pushes: not applied), or
                           ps_open's worker id is held by another client's
                           connection: later */
    PS_ENONFINITE = -14,/* a pushed value is NaN or +-Inf and the table's
                           nonfinite = reject: the push is refused whole,
                           on every node and at any size (its parts
                           without such a value are sent only once those
                           with one were answered; meanwhile every request
                           issued after it waits too, on every node, so
                           that requests keep their order: a node down
                           holds them all up to their bounded time). Only
                           while a SIGHUP has set
                           nonfinite differently on some nodes can a node
                           that allows them apply its part; the error's
                           text then says "applied in part" (and a push
                           whose every such value goes to nodes that allow
                           them succeeds; psctl tables names the nodes
                           that differ) */
    PS_EFULL = -15,     /* a sparse table holds max_rows rows on a node (or
                           one shard the 2^32 - 2 or 3 * 2^30 rows a shard
                           can hold): a push that would add rows there is
                           refused (pulls work) */
    PS_PENDING = 1      /* not an error: from ps_wait_timeout and
                           ps_wait_all_timeout only, what they wait for is
                           still in flight */
};

typedef struct ps_options {          /* ps_options_init() sets worker = -1 and defaults;
                                        keep room to grow without breaking the ABI */
    int worker;                      /* 0..workers-1 for bsp/ssp tables, -1: not a worker;
                                        below -1: ps_open fails with PS_EINVAL */
    int connect_timeout_ms;          /* ps_open keeps trying (with backoff) this long,
                                        each handshake for request_timeout_ms at
                                        most; default 5000 */
    int request_timeout_ms;          /* per attempt: a part unanswered this long makes
                                        the client reconnect and send it again;
                                        default 10000 */
    int max_retries;                 /* default 2: a request is sent at most 1 + max_retries
                                        times and fails with PS_ETIMEDOUT
                                        once request_timeout_ms x (max_retries + 1)
                                        have passed since the call
                                        handed it on (after slicing it
                                        and any wait for room under
                                        max_inflight_bytes), or
                                        sooner when its last attempt ends
                                        with its connection: a part
                                        unanswered in time closes its
                                        connection, and every part in
                                        flight on it has had that attempt
                                        (its error says "no attempts
                                        left" and why the connection
                                        closed). Time is looked at every
                                        quarter of the smallest of
                                        request_timeout_ms,
                                        connect_timeout_ms and the
                                        cluster's heartbeat (5 to 100
                                        ms): a part is judged up to about
                                        two such periods after its time */
    int batch_delay_us;              /* how long a small request may wait for company,
                                        0..1000000; default 0: send as soon as
                                        the I/O thread runs. In whole ms, rounded
                                        down: under 1000, the I/O loop's next turn
                                        (what other threads submit meanwhile) */
    size_t max_inflight_bytes;       /* calls block beyond this (backpressure); default 256 MiB.
                                        A lone request always goes, whatever its size:
                                        0 means one request at a time. The client also
                                        keeps, for reuse, up to this (when not 0) or
                                        64 MiB, the lower, of the buffers that keyed
                                        requests on a cluster of several nodes need
                                        (their grouped copies and per-key scratch,
                                        64 KiB or more each), and frees them after 10 s without such
                                        a request; a request may take a kept buffer of
                                        up to twice what it needs */
    const char *auth_token;          /* the cluster's token (16..255 bytes; one final
                                        line break is dropped, as psd drops it from
                                        auth_token_file); NULL or "":
                                        $PSD_AUTH_TOKEN, else the ini's auth_token /
                                        auth_token_file when ps_open is given the ini,
                                        else none. Copied by ps_open */
    int sync_timeout_ms;             /* how long ps_clock, ps_barrier and a pull
                                        held by an ssp table may wait for slower
                                        workers; default 600000 (10 min),
                                        also when 0 or less. A node that
                                        cannot be reached fails them as
                                        any request, after
                                        request_timeout_ms x
                                        (max_retries + 1), counted from
                                        when its connection was found
                                        dead (a stopped psd keeps it
                                        open: peer_timeout_ms later,
                                        as HELLO_OK says). Meanwhile
                                        each is sent again every
                                        request_timeout_ms on the same
                                        connection (a lost frame would
                                        hold it until this bound; the
                                        node keeps one copy), counted
                                        in ps_stats' resends */
    int busy_poll_us;                /* while a thread waits in ps_wait (or
                                        ps_wait_all, or on backpressure) and a
                                        request is in flight, the I/O thread
                                        polls its sockets without sleeping for
                                        up to this long after each event, so a
                                        reply that comes meanwhile is read
                                        without waking a sleeping thread (about
                                        a sixth of a small request's round trip
                                        on a VM). Costs up to that much CPU per
                                        wait, only while a caller waits anyway.
                                        0..1000000; default 50; 0: never */
    int quiet;                       /* 1: nothing on stderr: ps_open does not
                                        print why it failed (ps_last_error(NULL)
                                        still says), nor the I/O thread that a
                                        worker rejoined past clocks it missed
                                        (ps_stats' clocks_skipped counts them),
                                        for a caller that reports these itself;
                                        default 0 (and quiet when the process
                                        started with fd 2 closed: ps_open
                                        then opens /dev/null on whichever of
                                        fds 0, 1 and 2 are closed, where the
                                        I/O thread's descriptors would go) */
    char reserved[52];               /* room to grow; ps_options_init zeroes it */
} ps_options;

/* Fills *o with the defaults above (o NULL: nothing). */
PS_API void ps_options_init(ps_options *o);

/* Connects to a psd cluster. `servers` is "host:port[,host:port...]" naming
 * any psd nodes (the full layout is fetched from them; hosts may be names:
 * the first entry that answers describes the cluster, the rest are tried
 * only while none has, so an entry of another cluster after it is never
 * asked), or the path of the cluster's ini file (its [cluster] nodes are used). `o`
 * may be NULL for defaults; it is copied. With a token (see auth_token)
 * every node must prove it knows it, and the client proves it too; a
 * wrong or missing token fails with PS_EAUTH at once, naming the node.
 * A node whose name does not resolve yet is looked up again, as a node
 * that does not answer is tried again, within connect_timeout_ms; names
 * are looked up by the system's resolver, and one that does not answer
 * can hold ps_open past connect_timeout_ms by its own timeout (resolv.conf's
 * timeout x attempts).
 * A worker id held by another client's connection is a busy refusal, and
 * ps_open keeps trying within connect_timeout_ms: a replacement for a
 * crashed worker gets in as soon as every node has seen the old
 * connection close (at once when the process died on a live host; within
 * the cluster's peer_timeout_ms when its host vanished), while a second
 * live process claiming the id fails with PS_EBUSY ("worker 0 is already
 * connected from ...") once that time is up.
 * A worker is taken in by the nodes (of release 0.3.4 or later) only once
 * every node answered its open: one whose ps_open fails part way (a node
 * too busy to answer within connect_timeout_ms) is put back on every
 * node as it was before, so a bsp or ssp job waits for it as before: call
 * ps_open again. (Not a ps_open that fails in the wait below, after every
 * node answered: that worker was taken in, and is left lost on every
 * node.) An open worker keeps a connection to every node, made
 * again at once when lost, until ps_close.
 * A worker on a cluster with bsp tables that starts beyond a node's clock
 * (a new process for a worker lost in the middle of an iteration starts
 * after that iteration) returns once every node has reached its clock:
 * it waits, up to sync_timeout_ms, for the other workers to finish that
 * iteration (and so for any other lost worker to come back or its
 * worker_grace to run out). That wait is a CLOCK, counted as one in
 * ps_stats; if it fails, the worker is left lost on the nodes, as after a
 * crash, and ps_open may be called again. With only ssp tables a new
 * process starts at the lost one's clock (ps_position says which): ssp
 * pushes are applied as they come, so what the lost one pushed in its
 * unfinished step stands, and redoing the step pushes again.
 * Returns 0 and sets *c, or a negative PS_E* code with *c = NULL
 * (ps_strerror() explains the code; the details, such as which option is
 * out of range or which node refused, go to stderr and to
 * ps_last_error(NULL) on the calling thread). c itself NULL: PS_EINVAL,
 * as every call answers a NULL it needs. */
PS_API int ps_open(ps_client **c, const char *servers, const ps_options *o);

/* Waits for every outstanding request to complete, leaves the training
 * (a worker is no longer waited for by bsp/ssp tables; one whose pushes
 * to a bsp table were applied in a clock it has not called ps_clock for
 * first tells every node so, with a push of no rows, so that every node
 * counts it in that clock's aggregate = mean; a reader that pushed says
 * goodbye too, to the nodes it pushed to, so that they forget its pushes
 * at once, waiting 1 s at most, request_timeout_ms if shorter), then
 * closes the
 * connections, stops the I/O thread and frees the client. NULL is a no-op.
 * No other call on `c` may be running or made afterwards. Requests that
 * callbacks issue meanwhile are taken and waited for too (a pull that
 * follows a push): a callback that issues its request again whenever it
 * fails keeps ps_close waiting as long as the node stays down (each
 * attempt fails within its bounded time); ps_close_now refuses them.
 * A worker's goodbye is a request as others are: with a node down,
 * ps_close takes the outstanding requests' bounded time and then the
 * goodbye's (request_timeout_ms * (max_retries + 1) each: 6 s in all with
 * request_timeout_ms = 1000 and max_retries = 2); ps_close_now waits
 * request_timeout_ms for the goodbye. Either waits too for a lookup of a
 * node's name that is under way (one is made whenever a connection to a
 * node named by a host name ends): a resolver that does not answer holds
 * them up to its own timeout (resolv.conf's timeout x attempts), which no
 * call can cut short. */
PS_API void ps_close(ps_client *c);

/* Like ps_close, without waiting for outstanding requests: each fails at
 * once with PS_ECLOSED (its callback runs, with that status only: the
 * client is gone when ps_close_now returns; a push sent but not answered
 * may have been applied, one never sent was not).
 * A request a callback issues meanwhile is refused: the call returns
 * PS_ECLOSED and no callback runs for it (a callback that retries what
 * failed would otherwise keep the close from ending). A worker then leaves the
 * training as with ps_close, waiting at most request_timeout_ms for the
 * nodes' answers (a node that has not answered by then counts the
 * worker lost, as after a crash: worker_grace), and without telling the
 * nodes its pushes did not reach that it pushed (as after a crash, only
 * those count it in the clock's aggregate = mean); a reader says no
 * goodbye (its pushes are forgotten after client_ttl). For a program that stops
 * (Ctrl-C, a fatal error) while a request is held by a stopped node or a
 * slow bsp/ssp peer: ps_close would wait sync_timeout_ms for it.
 * NULL is a no-op. No other call on `c` may be running or made
 * afterwards: not from a signal handler's thread while another waits in
 * ps_wait (the client is freed under it). For Ctrl-C, let the waiting
 * thread wait in slices (ps_wait_timeout(c, ts, 100) in a loop), check a
 * flag the handler sets, and call ps_close_now itself. */
PS_API void ps_close_now(ps_client *c);

/* Static text for a status code. */
PS_API const char *ps_strerror(int code);

/* Detail of the last failure seen by the calling thread on this client
 * (for example "table 'fashion' has no row 785 (rows = 785)"), or "" if none.
 * With c NULL: why the calling thread's last ps_open failed ("" when it
 * succeeded), valid until its next ps_open.
 * Failures on other clients leave it alone: a thread keeps the detail of
 * the last 8 clients it saw fail. Valid until the thread's next call on
 * this client, or its failure on 8 other clients. */
PS_API const char *ps_last_error(ps_client *c);

typedef struct ps_table_info { int id; int dense; uint32_t dim; uint64_t rows; } ps_table_info;

/* Looks up a table by name. Returns its id (>= 0) and fills *info when
 * info is not NULL, or PS_ENOTABLE. */
PS_API int ps_table(ps_client *c, const char *name, ps_table_info *info);

/* Requests. keys: n keys in any order (duplicates allowed: a push applies
 * each occurrence in turn, so with adagrad, adam or ftrl a key given twice
 * takes two optimizer steps, not one with the sum as TensorFlow's sparse
 * updates do; sum the rows first for that. On a bsp table a clock's
 * pushes are summed per key first, duplicates included); vals, grads and
 * out: n * dim floats, row-major. Every buffer is borrowed until the
 * request completes (its callback ran, or ps_wait for it returned); pulled
 * rows are written straight into out (large ones as they arrive, before
 * their frame's CRC is checked: a request that fails may leave anything in
 * out; one that succeeds has exactly the rows the server sent). cb may be
 * NULL. Returns the request's
 * timestamp (> 0), or a negative PS_E* code, in which case cb never runs.
 * Timestamps number a client's accepted requests one by one from 1; a
 * call that fails takes none, and each ps_clock and ps_barrier sent takes
 * one too, so a push right after a ps_clock is numbered 2 past the one
 * before it (so does the CLOCK a worker's ps_open sends when it rejoins a
 * bsp job past clock 0: its first request is then 2). A call blocks while more than max_inflight_bytes are in
 * flight. The call itself slices a keyed request by the shard layout
 * into one piece per node, routing each key then: time in the caller's
 * thread that grows with n (a trial's push of 140 million keys of dim 4
 * spent 20 s in the call, its pull of 100 million 6 s); what overlaps
 * compute is the communication after it. The keys and a push's rows are
 * read again when the pieces are sent, often straight from the caller's
 * buffers (a request whose keys all go to one node copies nothing), and
 * resent from them after a loss: a key or row changed before the request
 * completes goes out changed, to the node its old key was routed to (a
 * key moved to another node's shard is refused there, PS_ENOTOWNER; one
 * on the same node updates the wrong row). */
PS_API ps_ts ps_push(ps_client *c, int table, const uint64_t *keys, size_t n,
                     const float *vals, ps_done_fn cb, void *arg);
PS_API ps_ts ps_pull(ps_client *c, int table, const uint64_t *keys, size_t n,
                     float *out, ps_done_fn cb, void *arg);
/* Pushes grads, then pulls the rows as they are after that push, in one
 * round trip: every occurrence of a key reads its row after the whole
 * push. A pushpull sent again after its answer was lost, whose push the
 * node had applied, is not applied twice but reads the rows as they are
 * then, after any pushes made since. (A request whose rows take more than one message on some node
 * goes as its pushes, then pulls of the same keys queued right behind
 * them, which sends the keys twice.) */
PS_API ps_ts ps_pushpull(ps_client *c, int table, const uint64_t *keys, size_t n,
                         const float *grads, float *out, ps_done_fn cb, void *arg);
/* Dense tables: rows first..first+count-1, no key lists on the wire.
 * count 0 is PS_EINVAL, as n = 0 keys is for ps_push; rows past the table
 * are PS_EKEY. */
PS_API ps_ts ps_push_range(ps_client *c, int table, uint64_t first, uint64_t count,
                           const float *vals, ps_done_fn cb, void *arg);
PS_API ps_ts ps_pull_range(ps_client *c, int table, uint64_t first, uint64_t count,
                           float *out, ps_done_fn cb, void *arg);

/* Blocks until request ts completes and returns its status: PS_OK or a
 * PS_E* code. Never hangs forever: a part that gets no answer is sent
 * again on a new connection (reconnecting with backoff, 50 ms doubling to
 * 2 s, with jitter) until its bounded time (see ps_options.max_retries)
 * is up; then the request fails with PS_ETIMEDOUT (whatever the node
 * did: refused connections, a lost connection, silence), and
 * ps_last_error says whether it may have been applied (in part: a
 * request spanning several nodes is a part per node, and each node
 * applies its part or not on its own, so a failed push may be in force on
 * some nodes and not on others, and a new ps_push of the same gradient
 * is applied again on those that had it). A push sent again by the library is applied
 * once: the server remembers what it applied. The
 * status of a completed request that failed is remembered for the last
 * 1024 failures. A completed request whose failure may have been
 * forgotten since (more than 1024 failures came after it) reads
 * PS_EINVAL with a note in ps_last_error, never a false PS_OK; so does
 * one that succeeded, if it is waited for (again) only after that many
 * failures: its status is then not known either. A
 * negative PS_E* code in place of ts (what a request call that failed
 * returned) is returned as it is, ps_last_error unchanged, so that
 * ps_wait(c, ps_push(...)) reports why the push was not made. Any other
 * ts never issued: PS_EINVAL. */
PS_API int ps_wait(ps_client *c, ps_ts ts);
/* Blocks until every request issued so far has completed. Returns the
 * first error among the requests that completed since the previous
 * ps_wait_all (then forgets it), or PS_OK. That error counts even when a
 * ps_wait (or a callback) already returned it: threads that share a
 * client and each call ps_wait_all may see another's handled failure. */
PS_API int ps_wait_all(ps_client *c);
/* ps_wait and ps_wait_all that give up after timeout_ms milliseconds (0:
 * only look; < 0: no limit, as ps_wait and ps_wait_all) and then return
 * PS_PENDING: the request, or one issued before the call, is still in
 * flight, its buffers still in use; nothing is cancelled or forgotten
 * (ps_wait_all_timeout keeps the first error for the call that returns
 * it). For a caller that must stay responsive while it waits: a binding
 * that checks for Ctrl-C between waits of 100 ms, a trainer that polls
 * (ps_wait_timeout(c, ts, 0), like MPI_Test). */
PS_API int ps_wait_timeout(ps_client *c, ps_ts ts, int timeout_ms);
PS_API int ps_wait_all_timeout(ps_client *c, int timeout_ms);

/* Training modes, for clients opened with ps_options.worker = 0..workers-1
 * (the cluster's [cluster] workers):
 * ps_clock: this worker finished its current iteration (all its pushes
 *   before the call belong to it). It returns once every node has taken
 *   the clock; on a cluster with bsp tables that is when every live worker
 *   has finished the iteration and its summed pushes were applied, so a
 *   pull issued after ps_clock sees the new weights. ssp tables do not
 *   wait here: a worker's pull waits instead, until the slowest live
 *   worker is at most `staleness` clocks behind it.
 * ps_barrier: returns once every live worker has called it as often.
 * A worker that called ps_close, or whose connection stayed lost for
 * worker_grace seconds, is no longer waited for. Both return PS_OK, or
 * the error of a node that failed, or PS_EINVAL (see ps_last_error): from
 * a client that is not a worker, and for ps_clock also on a cluster
 * without bsp or ssp tables (async tables have no clocks; a barrier works
 * with any tables). They block: never call them from a callback. A call
 * that failed (PS_ETIMEDOUT after sync_timeout_ms, a node lost) may be
 * made again: it names the same clock (or barrier) as the failed one,
 * which nodes that already took it answer once they reach it, so the
 * worker stays in step with the others. A worker is one trainer: call
 * them from one thread of it at a time; a call while another thread is
 * in the same function (ps_clock or ps_clock_timeout; ps_barrier or
 * ps_barrier_timeout) returns PS_EINVAL at once, counting nothing. That
 * covers one call: between a trainer's own slices of ps_clock_timeout
 * (below) another thread's call would join the clock under way, so keep
 * other threads out then (the Python binding does). */
PS_API int ps_clock(ps_client *c);
PS_API int ps_barrier(ps_client *c);
/* ps_clock and ps_barrier that give up waiting after timeout_ms
 * milliseconds (0: only look; < 0: no limit, as ps_clock and ps_barrier)
 * and then return PS_PENDING: the clock (or barrier) is still under way,
 * and the next ps_clock or ps_clock_timeout (ps_barrier...) waits for it
 * instead of sending another, returning once it is done. A trainer waits
 * in slices so that it can be interrupted (the Python binding's Ctrl-C)
 * or do other work meanwhile; sync_timeout_ms still bounds the whole.
 * While a clock is under way so, while another thread waits in ps_clock,
 * or after a ps_clock that failed, a push to a bsp table (it would count
 * in that clock) is refused with PS_EINVAL until a call for that clock
 * returns PS_OK; pulls and other tables'
 * pushes are not. From a completion callback they return PS_EINVAL, as
 * ps_clock does, with a timeout of 0 too: a call may send the CLOCK, and
 * the clock's state belongs to the trainer's thread. */
PS_API int ps_clock_timeout(ps_client *c, int timeout_ms);
PS_API int ps_barrier_timeout(ps_client *c, int timeout_ms);
/* 1 when this worker's last ps_clock (barrier != 0: ps_barrier) is not
 * done: it returned PS_PENDING, or it failed, so the next call names the
 * same clock; 0 when it succeeded (or none was made); PS_EINVAL for a
 * NULL c. For a binding whose wait an exception cut short, to tell a
 * clock still under way from one that completed as it was cut. */
PS_API int ps_sync_outstanding(ps_client *c, int barrier);

/* Where this worker stands: the numbers of its last ps_clock and
 * ps_barrier (one that failed counts: the next call retries its number),
 * or, before any, the counts the nodes gave it at ps_open (the largest
 * any node gave; a reconnection may raise them). A worker that rejoins,
 * or a new process for a lost one, starts at the nodes' counts, not at 0:
 * a trainer restarted in the middle of a job reads them to line its steps
 * up with the other workers (a final ps_barrier after fewer ps_clock
 * calls than the others waits for them while they wait in ps_clock).
 * The counts do not start again at 0 for a new job on long-lived nodes:
 * a job starts where the one before ended. So the position tells how far
 * the cluster is, not which step of this job a worker is at: a trainer
 * that may be restarted keeps its own step (in its checkpoint) or the
 * position it read when its job began.
 * *clock and *barrier may be NULL. 0, or PS_EINVAL for a client that is
 * not a worker (both set to 0). */
PS_API int ps_position(ps_client *c, uint64_t *clock, uint64_t *barrier);

/* What the client measures of itself. Kinds of request (PS_STAT_CLOCK
 * counts too the clock ps_open waits for when a worker starts past a
 * node's clock, see ps_open): */
enum {
    PS_STAT_PUSH, PS_STAT_PULL, PS_STAT_PUSHPULL, PS_STAT_PUSH_RANGE,
    PS_STAT_PULL_RANGE, PS_STAT_CLOCK, PS_STAT_BARRIER, PS_STAT_KINDS
};

typedef struct ps_op_stats {
    uint64_t requests;           /* completed (per node: parts answered) */
    uint64_t errors;             /* of those, completed with an error */
    uint64_t parts;              /* wire messages sent, resends included */
    uint64_t payload_sent;       /* bytes of keys and rows sent */
    uint64_t payload_received;   /* bytes of rows received */
    double p50_us, p90_us, p99_us, max_us;  /* latency from the call to
                                    completion, its slicing and any wait
                                    for room under max_inflight_bytes
                                    included (per node: from sending a
                                    part to its reply), as the middle of a
                                    histogram bucket (about 9% wide) */
} ps_op_stats;

typedef struct ps_stats_t {
    ps_op_stats op[PS_STAT_KINDS];
    uint64_t frames_sent, frames_received;
    uint64_t bytes_sent, bytes_received;      /* on the wire, all of it */
    uint64_t payload_sent, payload_received;  /* keys and rows among them:
                                                 the rest is the protocol's
                                                 overhead */
    uint64_t backpressure_us;    /* callers blocked on max_inflight_bytes */
    uint64_t sync_wait_us;       /* callers inside ps_clock / ps_barrier */
    uint64_t timeouts;           /* connections closed for a part
                                    unanswered in time (one however many
                                    parts were in flight on it) */
    uint64_t resends;            /* parts sent again */
    uint64_t duplicates;         /* late or duplicate replies dropped */
    uint64_t reconnects;         /* connections made again after a loss */
    uint64_t clocks_skipped;     /* how far a worker's clock moved on when
                                    it rejoined: lost for longer than
                                    worker_grace, it was let go, and its
                                    reconnection joined anew at the
                                    cluster's clock (also said on stderr
                                    unless quiet). In ps_stats' total: per
                                    node, it is on the node that answered
                                    first */
    uint64_t barriers_skipped;   /* the same for its barrier count */
    uint64_t reserved[14];
} ps_stats_t;

/* Fills *out with everything since ps_open or the last ps_stats_reset:
 * ps_stats for the whole client, ps_stats_node for one node (0..nodes-1)
 * of the cluster. 0, or PS_EINVAL. Counting costs a few stores per
 * request on the I/O thread; reading is safe from any thread. */
PS_API int ps_stats(ps_client *c, ps_stats_t *out);
PS_API int ps_stats_node(ps_client *c, int node, ps_stats_t *out);
PS_API void ps_stats_reset(ps_client *c);

/* One line for people, e.g. "push 100 p50 120 us p99 540 us, pull ...,
 * overhead 1.8%, resends 0, timeouts 0": written to buf (len bytes, NUL
 * terminated, cut if short; buf NULL: nowhere); returns the length it
 * needed, or PS_EINVAL for s NULL. */
PS_API int ps_stats_format(const ps_stats_t *s, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
