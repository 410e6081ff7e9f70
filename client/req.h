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
    uint64_t deadline_ns;        /* when the part times out */
    int slow;                    /* may wait for other workers (clock,
                                    barrier, ssp pull): longer timeout */
    size_t wire_bytes;           /* what it adds to a frame's budget: its
                                    message and the rows of its reply */
} psc_part;

struct psc_req {
    ps_ts ts;
    int op;
    uint32_t dim;
    int pending;                 /* parts not answered yet */
    int status;                  /* first error, or PS_OK */
    char *error;                 /* detail of that error, owned, or NULL */
    ps_done_fn cb;
    void *arg;
    size_t bytes;                /* counted against max_inflight_bytes */
    int nparts;
    psc_part *parts;             /* nparts, in the same allocation */
};

/* Frees a request with its parts (and any copies slicing made). NULL is
 * a no-op. */
void psc_req_free(psc_req *r);

#endif
