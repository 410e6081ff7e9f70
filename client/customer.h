/* The Customer: the trainer's agent inside libpsclient, in ps-lite's
 * sense. It gives every accepted request its timestamp, keeps the table
 * of requests in flight and the bytes they hold (blocking callers beyond
 * max_inflight_bytes), settles each part's reply or failure into its
 * request, completes a request when its last part settled (callback
 * first, then wake-ups), remembers recent failures, and answers waits.
 * It touches no socket: the I/O thread (io.c) takes the parts it hands
 * out and reports back what happened to each. */
#ifndef PSC_CUSTOMER_H
#define PSC_CUSTOMER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../proto/map.h"
#include "req.h"
#include "stats.h"

#define PSC_FAIL_RING 1024       /* failed requests whose status is kept */
#define PSC_TEXT_MAX 1024        /* a failure's text, NUL included: a
                                    node's reason (up to 511 bytes) with
                                    the request and node before it */

typedef struct psc_failure {
    ps_ts ts;
    int status;
    char *text;                  /* owned; fit_text to PSC_TEXT_MAX (a
                                    longer one keeps its end); NULL when
                                    memory ran out */
} psc_failure;

/* A thread inside psc_customer_wait. It sleeps on the customer's
 * wait_cv[ts % PSC_WAIT_CVS] and is woken when request ts completes, and
 * when a request of the same slot that another thread waits for does (it
 * looks again and sleeps): with N threads waiting, about N / 16 share a
 * slot. A caller with many requests in flight is not woken by replies
 * that no thread waits for. */
typedef struct psc_waiter {
    struct psc_waiter *next;
    ps_ts ts;
} psc_waiter;

#define PSC_WAIT_CVS 16

/* Everything here is shared between callers and the I/O thread, under mu. */
typedef struct psc_customer {
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* ps_wait_all and backpressure */
    int cv_waiters;              /* threads waiting on cv */
    int sleepers;                /* threads blocked in a wait of any kind
                                    (atomic: the I/O thread reads it without
                                    mu, to decide whether to busy-poll) */
    psc_waiter *waiters;         /* threads waiting for one request */
    pthread_cond_t wait_cv[PSC_WAIT_CVS]; /* where they sleep, by ts: they
                                    live as long as the customer, so the
                                    I/O thread wakes them after it lets go
                                    of mu (customer.c, complete) */
    psc_part *sq_head, *sq_tail; /* accepted parts the I/O thread has not
                                    taken yet, all nodes */
    psc_part *dq_head, *dq_tail; /* accepted parts that wait behind a push
                                    whose held parts were not released yet
                                    (customer.c: a connection keeps its
                                    order), in submission order */
    int holding;                 /* such pushes: 0 or 1 */
    psw_map reqs;                /* ts -> request not yet complete */
    ps_ts last_ts;
    ps_ts low;                   /* every request below it is complete
                                    (atomic: the I/O thread acks it) */
    size_t inflight_bytes;
    size_t max_inflight_bytes;
    int first_error;             /* since the last psc_customer_wait_all */
    char first_error_text[PSC_TEXT_MAX];  /* fit_text, as psc_failure's */
    psc_failure *fails;          /* ring of PSC_FAIL_RING, made on demand */
    uint64_t nfails;
    ps_ts fails_forgotten;       /* newest failure pushed out of the ring */
    int closing;
    ps_ts abandon_ts;            /* requests up to it fail with PS_ECLOSED
                                    wherever they are (ps_close_now); 0:
                                    none */
    psc_stats *stats;            /* where completions are counted */
    void (*wake)(void *);        /* tells the I/O thread that parts were
                                    queued (for held parts, which the I/O
                                    thread itself releases); NULL: none */
    void *wake_arg;
    uint64_t clock_sent;         /* the largest CLOCK value queued (mu) */
    uint64_t pushed_step;        /* the largest step of the requests that
                                    completed with a part applied or
                                    perhaps applied (atomic: written by
                                    the I/O thread; client.c, mark_pushed) */
    uint64_t cb_held_ns;         /* how long the last completion callback
                                    that ran PSC_CB_HELD_NS or more ran */
    uint64_t cb_held_at;         /* when it ended (uv_hrtime); 0: none
                                    (both atomic: psc_customer_cb_held) */
} psc_customer;

/* A completion callback that ran this long held every request of the
 * client meanwhile (they run on the I/O thread): the requests that then
 * fail for time say so (psc_customer_cb_held). */
#define PSC_CB_HELD_NS (100 * 1000 * 1000ull)

/* How long the last completion callback that ran PSC_CB_HELD_NS or more
 * held the I/O thread, if it ended at or after since_ns (a request's
 * call); else 0. */
uint64_t psc_customer_cb_held(const psc_customer *cu, uint64_t since_ns);

/* stats (owned by the caller, outliving cu) receives the per-request
 * counts and latencies. */
void psc_customer_init(psc_customer *cu, size_t max_inflight_bytes,
                       psc_stats *stats);
void psc_customer_destroy(psc_customer *cu);

/* Accepts request r (ownership passes to the Customer until it completes):
 * waits while the bytes in flight exceed the limit (unless may_wait is 0:
 * the I/O thread, which must never wait on itself), gives r the next
 * timestamp and queues its parts for the I/O thread. Returns the
 * timestamp, or PS_ECLOSED / PS_ENOMEM with the reason in err (r is freed
 * then and its callback never runs). The caller then wakes the I/O
 * thread. */
ps_ts psc_customer_submit(psc_customer *cu, psc_req *r, ps_done_fn cb,
                          void *arg, int may_wait, char *err, size_t errlen);

/* The I/O thread takes every queued part (a list linked by next, in
 * submission order); *closing says whether the client is closing, and
 * *abandon up to which request everything fails now (0: none). */
psc_part *psc_customer_take(psc_customer *cu, int *closing, ps_ts *abandon);

/* Settles one part with its reply: copies pulled rows into place, or
 * records the error, named by node (its address, or NULL: a cluster of
 * one node). Returns 1 when this was the request's
 * last part: call psc_customer_complete. */
int psc_part_reply(psc_part *p, const psw_msg *reply, const char *node);

/* Settles a part that will get no reply (timeout, lost connection).
 * Returns 1 when this was the request's last part. */
int psc_part_fail(psc_part *p, int status, const char *why);

/* Completes a request whose parts all settled (on the I/O thread): runs
 * its callback, then forgets it, remembers a failure, counts it, moves
 * the low-water mark, wakes its waiters and any caller blocked on
 * backpressure, and frees it. */
void psc_customer_complete(psc_customer *cu, psc_req *r);
/* The same, with the time of completion (uv_hrtime's clock) given by a
 * caller that has just read it. */
void psc_customer_complete_at(psc_customer *cu, psc_req *r, uint64_t now_ns);

/* The timestamp below which every request is complete: what the client
 * may tell servers to forget (ACK). Any thread. */
static inline ps_ts psc_customer_low(const psc_customer *cu)
{
    return __atomic_load_n(&cu->low, __ATOMIC_RELAXED);
}

/* Whether a thread is blocked waiting for a completion. Any thread. */
static inline int psc_customer_waited(const psc_customer *cu)
{
    return __atomic_load_n(&cu->sleepers, __ATOMIC_RELAXED) > 0;
}

/* Blocks until request ts completes; returns its status, with the detail
 * of a failure in err. A failure pushed out of the ring since reads
 * PS_EINVAL, never a false PS_OK; so does a ts never issued. With
 * timeout_ms >= 0 it waits at most that long (0: not at all) and returns
 * PS_PENDING when ts is still in flight; < 0 waits as long as it takes. */
int psc_customer_wait(psc_customer *cu, ps_ts ts, int timeout_ms, char *err,
                      size_t errlen);

/* Blocks until every request issued before the call completed (those
 * issued meanwhile, by other threads, are not waited for); returns the
 * first error since the last call (then forgets it), with its detail in
 * err, or PS_OK. timeout_ms as for psc_customer_wait: PS_PENDING leaves
 * the first error for the next call. */
int psc_customer_wait_all(psc_customer *cu, int timeout_ms, char *err,
                          size_t errlen);

/* Blocks until no request at all is in flight, including those that
 * callbacks issue meanwhile (ps_close). */
void psc_customer_drain(psc_customer *cu);

/* ps_close_now: requests, wherever they are, fail with PS_ECLOSED
 * instead of being sent or waited for; every one when `later` (also
 * those issued from now on), else those issued so far. The I/O thread
 * acts on it at its next take, which this wakes. */
void psc_customer_abandon(psc_customer *cu, int later);

/* From now on submits fail with PS_ECLOSED and blocked submitters wake. */
void psc_customer_close(psc_customer *cu);

#endif
