/* Slicing: cuts one push or pull into parts, one wire message each,
 * grouped by the node that holds their keys (proto/layout.h decides), each
 * small enough for the server's max_frame. No sockets; the only lock is
 * the pool's (sh->pool), for large copies and scratch. */
#ifndef PSC_SLICE_H
#define PSC_SLICE_H

#include <stddef.h>
#include <stdint.h>

#include "req.h"
#include "../proto/msg.h"

/* What slicing needs to know about the cluster and the table. */
typedef struct psc_shape {
    int nnodes;
    uint32_t shards;
    const psw_table_desc *table;
    uint32_t table_id;
    uint64_t max_payload;        /* largest payload one message may carry */
    struct psc_bufpool *pool;    /* where large copies and scratch come
                                    from (bufpool.h); NULL: malloc */
} psc_shape;

/* What part message m adds to a frame's budget (psc_part.wire_bytes):
 * the message, and the rows of its reply (rowb bytes each) when it
 * pulls. */
size_t psc_part_wire(const psw_msg *m, size_t rowb);

/* Builds the request for a keyed op (PSW_OP_PUSH, PULL or PUSHPULL):
 * one part per node touched. When every key lives on one node the part
 * borrows keys, vals and out as they are; otherwise keys (and values) are
 * copied, grouped by node, in the same allocation as the request. Returns
 * 0 and *out, or PS_EKEY / PS_ETOOBIG / PS_ENOMEM with a reason in err.
 * The timestamp is given when the Customer accepts the request. */
int psc_req_keys(const psc_shape *sh, int op, const uint64_t *keys, size_t n,
                const float *vals, float *out, psc_req **req, char *err,
                size_t errlen);

/* The same for a dense range op (PSW_OP_PUSH_RANGE or PULL_RANGE): one
 * part per run of consecutive shards on one node, each borrowing its
 * slice of vals or out; nothing is copied. */
int psc_req_range(const psc_shape *sh, int op, uint64_t first, uint64_t count,
                 const float *vals, float *out, psc_req **req, char *err,
                 size_t errlen);

/* A request of no keys (PSW_OP_CLOCK, BARRIER, LEAVE, or a PUSH of no
 * rows, whose table the caller sets) carrying `value`: one part for node
 * `node`, or for every node when node is -1. */
int psc_req_control(int nnodes, int node, int op, uint64_t value,
                   psc_req **req);

#endif
