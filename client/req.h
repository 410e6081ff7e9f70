/* A request and its parts: the unit the Customer tracks. A request is
 * one push or pull of the caller with its timestamp; a part is one wire
 * message of it, bound for one node. slice.c builds them, customer.c
 * tracks them to completion, io.c carries the parts. Data only. */
#ifndef PSC_REQ_H
#define PSC_REQ_H

#include <stddef.h>
#include <stdint.h>

#include "psclient.h"
#include "../proto/msg.h"

typedef struct psc_req psc_req;
struct psc_customer;

/* One wire message of a request, bound for one node. */
typedef struct psc_part {
    psc_req *req;
    int node;
    psw_msg msg;                 /* op, ts, part, table, keys/vals views */
    float *out;                  /* where pulled rows go (NULL: no pull) */
    const uint32_t *pos;         /* keyed pulls split over nodes: the
                                    caller's index of each key; NULL when
                                    rows land in order at out */
    struct psc_part *next;       /* send queue or in-flight list */
    struct psc_part *prev;
    uint64_t expire_ns;          /* when the part fails for good */
    uint64_t attempt_ns;         /* while in flight: when this attempt
                                    times out */
    uint64_t sent_ns;            /* when this attempt was sent */
    uint64_t seq;                /* its place in its connection's sends
                                    (io.c: the order a requeue keeps) */
    int sends;                   /* attempts so far */
    int direct;                  /* this attempt's rows are being read
                                    straight into out (io.c) */
    int slow;                    /* may wait for other workers (clock,
                                    barrier, ssp pull): sync_timeout_ms
                                    bounds it, not attempts */
    size_t wire_bytes;           /* what it adds to a frame's budget: its
                                    message and the rows of its reply */
    int abandoned;               /* ps_close_now gave up on it while in
                                    flight: it fails with PS_ECLOSED when
                                    its connection has closed (io.c) */
    const char *cannot;          /* why it could not be cut again for a
                                    smaller max_frame (io.c), or NULL */
    int first;                   /* a part of a push sent in two waves
                                    (psc_req.held) that goes first: it
                                    holds a NaN or an infinity */
} psc_part;

struct psc_req {
    ps_ts ts;
    int op;
    uint32_t dim;
    uint64_t submit_ns;          /* when the Customer accepted it: its
                                    attempts' deadlines count from here */
    uint64_t call_ns;            /* when the call that made it began (0:
                                    submit_ns): ps_stats' latency counts
                                    from here, slicing and a wait for
                                    room (max_inflight_bytes) included */
    int pending;                 /* parts not answered yet */
    int nok;                     /* parts that push answered PS_OK */
    int maybe;                   /* parts of a push that failed but may
                                    have been applied: sent and not
                                    answered (io.c, part_fail), or
                                    answered by a node that forgot
                                    whether it applied them */
    int nfail;                   /* parts of a push that failed */
    int status;                  /* first error, or PS_OK */
    char *error;                 /* detail of that error, owned, or NULL */
    ps_done_fn cb;
    void *arg;
    size_t bytes;                /* counted against max_inflight_bytes */
    uint64_t payload_out;        /* bytes of keys and rows it sends */
    uint64_t payload_in;         /* bytes of rows it receives */
    int whole;                   /* a push of several parts holding a
                                    NaN or an infinity: sent in two waves
                                    (customer.c, stage) */
    psc_part *held;              /* such a push's parts that hold no NaN
                                    or infinity, sent only once the others
                                    were applied; else NULL */
    int first_pending;           /* parts of the first wave not answered */
    struct psc_customer *cu;     /* that took it, to send the held parts */
    uint64_t step;               /* a worker's push to a bsp table: the
                                    clock it counts in, 1 + the largest
                                    CLOCK queued before it (the caller
                                    sets 1, psc_customer_submit the
                                    value); 0 for any other request */
    int nparts;
    psc_part *parts;             /* nparts, in the same allocation */
    uint32_t next_part;          /* the number the next part cut again
                                    takes (io.c, recut): nparts and up */
    struct psc_part_more *more;  /* such parts, an allocation each, or
                                    NULL */
    int more_pushes;             /* how many of them push */
    struct psc_bufpool *pool;    /* where the allocation goes back to
                                    (NULL: free), and its capacity */
    size_t cap;
};

/* Parts of a request cut again after it was queued (io.c, recut), which
 * do not fit its allocation. */
typedef struct psc_part_more {
    struct psc_part_more *next;
    psc_part parts[];
} psc_part_more;

/* Frees a request with its parts (and any copies slicing made), or
 * gives the allocation back to its pool. NULL is a no-op. */
void psc_req_free(psc_req *r);

#endif
