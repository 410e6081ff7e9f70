/* The Customer: the trainer's agent inside libpsclient. It turns one
 * push/pull into a request with a timestamp, slices it by the shard layout
 * into parts (one wire message each, grouped per server), writes answered
 * rows straight into the caller's buffer and counts parts until the
 * request is complete. Pure bookkeeping: sockets live in client.c. */
#ifndef PS_CUSTOMER_H
#define PS_CUSTOMER_H

#include <stddef.h>
#include <stdint.h>

#include "psclient.h"
#include "../proto/msg.h"

typedef struct ps_req ps_req;

/* One wire message of a request, bound for one node. */
typedef struct ps_part {
    ps_req *req;
    int node;
    psw_msg msg;                 /* op, ts, part, table, keys/vals views */
    float *out;                  /* where pulled rows go (NULL: no pull) */
    const uint32_t *pos;         /* keyed pulls split over nodes: the
                                    caller's index of each key; NULL when
                                    rows land in order at out */
    struct ps_part *next;        /* send queue or in-flight list */
    struct ps_part *prev;
    uint64_t deadline_ns;        /* when the part times out */
    int slow;                    /* may wait for other workers (clock,
                                    barrier, ssp pull): longer timeout */
    size_t wire_bytes;           /* upper bound of its encoded size */
} ps_part;

struct ps_req {
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
    ps_part *parts;              /* nparts, in the same allocation */
};

/* What slicing needs to know about the cluster and the table. */
typedef struct ps_shape {
    int nnodes;
    uint32_t shards;
    const psw_table_desc *table;
    uint32_t table_id;
    uint64_t max_payload;        /* largest payload one message may carry */
} ps_shape;

/* Builds the request for a keyed op (PSW_OP_PUSH, PULL or PUSHPULL):
 * one part per node touched. When every key lives on one node the part
 * borrows keys, vals and out as they are; otherwise keys (and values) are
 * copied, grouped by node, in the same allocation as the request. Returns
 * 0 and *out, or PS_EKEY / PS_ETOOBIG / PS_ENOMEM with a reason in err.
 * ts is filled in later by ps_req_set_ts. */
int ps_req_keys(const ps_shape *sh, int op, const uint64_t *keys, size_t n,
                const float *vals, float *out, ps_req **req, char *err,
                size_t errlen);

/* The same for a dense range op (PSW_OP_PUSH_RANGE or PULL_RANGE): one
 * part per run of consecutive shards on one node, each borrowing its
 * slice of vals or out; nothing is copied. */
int ps_req_range(const ps_shape *sh, int op, uint64_t first, uint64_t count,
                 const float *vals, float *out, ps_req **req, char *err,
                 size_t errlen);

/* A control request (PSW_OP_CLOCK, BARRIER or LEAVE) carrying `value`:
 * one part for node `node`, or for every node when node is -1. */
int ps_req_control(int nnodes, int node, int op, uint64_t value,
                   ps_req **req);

void ps_req_set_ts(ps_req *r, ps_ts ts);
void ps_req_free(ps_req *r);

/* Applies a reply to its part: copies pulled rows into place or records
 * the error. Returns 1 when this completed the request. */
int ps_part_reply(ps_part *p, const psw_msg *reply);

/* Fails a part that will get no reply (timeout, lost connection).
 * Returns 1 when this completed the request. */
int ps_part_fail(ps_part *p, int status, const char *why);

#endif
