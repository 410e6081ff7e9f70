/* Slicing requests into per-node parts; see slice.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bufpool.h"
#include "scan.h"
#include "slice.h"
#include "../proto/layout.h"
#include "../proto/msg.h"
#include "../proto/status.h"

_Static_assert(PSW_MAX_NODES <= 65536, "a key's node must fit a uint16_t");

/* Payload a part aims at; see rows_per_part. */
#define PART_BYTES (256 * 1024)
#define PART_BYTES_NARROW (1024 * 1024)
#define NARROW_ROW 64                /* bytes of a row with its key */

static uint32_t shard_of(const psc_shape *sh, uint64_t key)
{
    return sh->table->dense
               ? psw_dense_shard_of(sh->table->rows, sh->shards, key)
               : psw_sparse_shard_of(sh->shards, key);
}

static int node_of(const psc_shape *sh, uint64_t key)
{
    return psw_node_of_shard(shard_of(sh, key), sh->nnodes);
}

/* Nodes of the shards, for finding many keys' nodes without divisions:
 * built once per request when the shards are few. */
#define SHARD_MAP_MAX 4096

typedef struct nodemap {
    uint32_t mask;               /* shards - 1 when a power of two, else 0 */
    int use;                     /* node[] is filled */
    uint16_t node[SHARD_MAP_MAX];
} nodemap;

static void nodemap_init(nodemap *m, const psc_shape *sh)
{
    m->use = !sh->table->dense && sh->shards <= SHARD_MAP_MAX &&
             (sh->shards & (sh->shards - 1)) == 0;
    m->mask = sh->shards - 1;
    if (m->use)
        for (uint32_t s = 0; s < sh->shards; s++)
            m->node[s] = (uint16_t)psw_node_of_shard(s, sh->nnodes);
}

/* node_of, the same answer (psw_sparse_shard_of is h mod shards). */
static int nodemap_of(const nodemap *m, const psc_shape *sh, uint64_t key)
{
    return m->use ? m->node[psw_mix64(key) & m->mask] : node_of(sh, key);
}

static int is_push(int op)
{
    return psw_op_has(op, PSW_OPF_PUSHES);
}

static int is_pull(int op)
{
    return psw_op_has(op, PSW_OPF_PULLS);
}

size_t psc_part_wire(const psw_msg *m, size_t rowb)
{
    uint64_t rows = psw_op_has(m->op, PSW_OPF_RANGED) ? m->count : m->nkeys;
    return PSW_MSG_OVERHEAD + m->nkeys * 8 + m->vals_len +
           (is_pull(m->op) ? rows * rowb : 0);
}

/* One allocation for the request, its parts and `extra` bytes after
 * them (8-byte aligned), from pool when it is large (pool may be NULL).
 * The request and parts are zeroed; the extra bytes may not be. */
static psc_req *req_alloc(psc_bufpool *pool, int nparts, size_t extra,
                          void **tail)
{
    size_t head = sizeof(psc_req) + (size_t)nparts * sizeof(psc_part);
    head = (head + 7) & ~(size_t)7;
    psc_req *r;
    size_t cap = 0;
    if (pool && head + extra >= PSC_POOL_MIN) {
        if (!(r = psc_bufpool_take(pool, head + extra, &cap)))
            return NULL;
        memset(r, 0, head);
        r->pool = pool;
        r->cap = cap;
    } else if (!(r = calloc(1, head + extra)))
        return NULL;
    r->nparts = nparts;
    r->pending = nparts;
    r->next_part = (uint32_t)nparts;
    r->parts = (psc_part *)(r + 1);
    for (int i = 0; i < nparts; i++)
        r->parts[i].req = r;
    if (tail)
        *tail = (char *)r + head;
    return r;
}

static void part_init(psc_part *p, const psc_shape *sh, int op, int node,
                      uint32_t index)
{
    p->node = node;
    p->msg.op = op;
    p->msg.part = index;
    p->msg.table = sh->table_id;
}

/* Payload limits: one message must fit the server's max_frame both ways. */
static int check_size(const psc_shape *sh, uint64_t rows, uint64_t keybytes,
                      char *err, size_t errlen)
{
    uint64_t rowb = (uint64_t)sh->table->dim * sizeof(float);
    if (rows > sh->max_payload / rowb ||
        rows * rowb + keybytes > sh->max_payload) {
        /* Pieces are cut to fit, so only a row too wide for a message
         * gets here: splitting the request cannot help. */
        if (rows == 1)
            snprintf(err, errlen, "one row of table '%s' (%llu bytes%s) is "
                     "more than a message may carry at the server's "
                     "max_frame (%llu bytes of rows): raise max_frame",
                     sh->table->name, (unsigned long long)rowb,
                     keybytes ? " and its key" : "",
                     (unsigned long long)sh->max_payload);
        else
            snprintf(err, errlen, "a piece of %llu rows of table '%s' "
                     "exceeds the server's max_frame; split the request",
                     (unsigned long long)rows, sh->table->name);
        return PS_ETOOBIG;
    }
    return 0;
}

/* Whether a push goes in two waves (customer.c, stage): only one holding
 * a value that psd may refuse (a NaN or an infinity), and only when it
 * has several parts. Its values are read once here, on the caller's
 * thread, so that every finite push, the common case, goes in one wave,
 * as frames of about PART_BYTES that psd applies while the next ones are
 * on the wire. The
 * read is not free: about 1 ms per 16 MiB here, a sixth of a 16 MiB push
 * at 1 in flight (psbench, with and without it), which buys that psd
 * refuses a push holding a NaN whole; psc_nonfinite (scan.c) reads a
 * large one's back half on a helper thread meanwhile, the other core
 * being idle then. Making the parts' CRCs in the same pass, for the I/O
 * thread to combine, measured no faster. */
static int goes_in_two_waves(int op, int nparts, const float *vals,
                           size_t bytes)
{
    return is_push(op) && nparts > 1 && psc_nonfinite(vals, bytes);
}

/* Rows per part when each row costs rowb bytes of payload: a large
 * request travels as several messages, so the server starts on the first
 * while the rest is still on the wire and its replies stream back
 * meanwhile, instead of one long store-and-forward. Wide rows go in parts
 * of about PART_BYTES; narrow ones (at most NARROW_ROW bytes, sparse
 * embeddings and counters) in parts of PART_BYTES_NARROW: psd's time on
 * them goes into a lookup per key, not into bytes, so shorter parts would
 * add work per message without shortening the pipeline. Measured with
 * psbench, 1 in flight: 1 MiB dense pushes 1.9 -> 3.3 GB/s with 256 KiB
 * parts, 65,536-key dim-1 sparse pushes 54 -> 44 M keys/s. */
static uint64_t part_budget(size_t rowb)
{
    return rowb <= NARROW_ROW ? PART_BYTES_NARROW
                              : PART_BYTES - PSW_BODY_OVERHEAD -
                                    PSW_MSG_OVERHEAD;
}

/* Whether the server's max_frame, not the part size, cut the parts: a
 * request refused for its count of messages then says which to raise. */
static const char *cut_by_frame(const psc_shape *sh, size_t rowb)
{
    return sh->max_payload < part_budget(rowb)
               ? " (the server's max_frame sets the rows per message)"
               : "";
}

static size_t rows_per_part(const psc_shape *sh, size_t rowb)
{
    /* A wide part's frame, with its headers, stays within the 256 KiB
     * that the I/O thread batches into one frame and psd into one write
     * of replies (BATCH_FRAME_MAX in io.c, FLUSH_BYTES in daemon/conn.c),
     * so two such parts go out per write, keyed or ranged alike. Parts
     * of exactly 256 KiB of rows (64 rows of dim 1024) went out one per
     * write each way: 16 MiB push_range 2.8 -> 3.9 GB/s, pull_range
     * 3.6 -> 7.2 GB/s (1 in flight, one node). */
    uint64_t budget = part_budget(rowb);
    /* A smaller max_frame makes smaller parts, never a refusal. */
    if (budget > sh->max_payload)
        budget = sh->max_payload;
    size_t r = (size_t)(budget / rowb);
    return r ? r : 1;
}

/* Fills the parts of one node's keys, chunk by chunk. keys, vals (when
 * pushing) and pos (NULL: rows land in order at out) describe the node's
 * rows; k is the index of its first part. Returns the next index. */
static int fill_parts(psc_req *r, const psc_shape *sh, int op, int nd, int k,
                      const uint64_t *keys, size_t n, const char *vals,
                      float *out, const uint32_t *pos, size_t rpp)
{
    size_t rowb = (size_t)sh->table->dim * sizeof(float);
    for (size_t a = 0; a < n; a += rpp, k++) {
        size_t m = n - a < rpp ? n - a : rpp;
        psc_part *p = &r->parts[k];
        part_init(p, sh, op, nd, (uint32_t)k);
        p->msg.keys = (const char *)(keys + a);
        p->msg.nkeys = m;
        if (is_push(op)) {
            p->msg.vals = vals + a * rowb;
            p->msg.vals_len = m * rowb;
        }
        if (is_pull(op)) {
            p->out = pos ? out : out + a * sh->table->dim;
            p->pos = pos ? pos + a : NULL;
        }
    }
    return k;
}

/* Makes the nparts PUSHPULL parts at the head of r's 2 * nparts into
 * PUSHes, and the tail into PULLs of the same keys, in the same order
 * (see slice_keys). */
static void split_pushpull(psc_req *r, size_t nparts)
{
    for (size_t i = 0; i < nparts; i++) {
        psc_part *p = &r->parts[i], *q = &r->parts[nparts + i];
        *q = *p;
        q->msg.op = PSW_OP_PULL;
        q->msg.part = (uint32_t)(nparts + i);
        q->msg.vals = NULL;
        q->msg.vals_len = 0;
        p->msg.op = PSW_OP_PUSH;
        p->out = NULL;
        p->pos = NULL;
    }
}

/* The end of the run of keys from i on that live on the same node. */
static size_t home_run_end(const uint16_t *home, size_t i, size_t n)
{
    size_t j = i + 1;
    while (j < n && home[j] == home[i])
        j++;
    return j;
}

/* psc_req_keys with its scratch: count (nnodes, zeroed) and, with
 * several nodes, home (n entries). */
static int slice_keys(const psc_shape *sh, int op, const uint64_t *keys,
                      size_t n, const float *vals, float *out,
                      psc_req **reqp, size_t *count, uint16_t *home,
                      char *err, size_t errlen)
{
    const psw_table_desc *t = sh->table;
    size_t dim = t->dim, rowb = dim * sizeof(float);
    size_t rpp = rows_per_part(sh, rowb + 8);
    int used = 0, one = -1;
    nodemap map;
    /* Read only with home set, but gcc -O1 (ThreadSanitizer's builds)
     * cannot tell; the table of nodes is left unset, not cleared per
     * request. */
    map.use = 0;
    map.mask = 0;
    if (home)
        nodemap_init(&map, sh);
    for (size_t i = 0; i < n; i++) {
        if (t->dense && keys[i] >= t->rows) {
            snprintf(err, errlen, "table '%s' has no row %llu (rows = %llu)",
                     t->name, (unsigned long long)keys[i],
                     (unsigned long long)t->rows);
            return PS_EKEY;
        }
        /* One node holds everything: no key needs hashing. */
        int nd = 0;
        if (home)
            home[i] = (uint16_t)(nd = nodemap_of(&map, sh, keys[i]));
        if (count[nd]++ == 0) {
            used++;
            one = nd;
        }
    }
    size_t nparts = 0;
    for (int nd = 0; nd < sh->nnodes; nd++) {
        nparts += (count[nd] + rpp - 1) / rpp;
        uint64_t m = count[nd] < rpp ? count[nd] : rpp;
        int rc = m ? check_size(sh, m, 8 * m, err, errlen) : 0;
        if (rc)
            return rc;
    }
    /* Long runs of consecutive keys on one node (rows of a dense table
     * in order, whose shards alternate between nodes) go as parts of
     * their own, borrowing the caller's keys and values like one node's
     * request, instead of being copied into per-node groups: worth it for
     * a request of a part or more whose runs add few parts. */
    size_t run_parts = 0;
    if (used > 1 && n * (rowb + 8) >= PART_BYTES) {
        size_t most = nparts + nparts / 4 + (size_t)sh->nnodes;
        if (most > PSW_MAX_PARTS)
            most = PSW_MAX_PARTS;    /* more than a request may have */
        for (size_t i = 0, j; i < n && run_parts <= most; i = j) {
            j = home_run_end(home, i, n);
            run_parts += (j - i + rpp - 1) / rpp;
        }
        if (run_parts > most)
            run_parts = 0;           /* short runs: grouped below */
        else
            nparts = run_parts;
    }
    /* A pushpull whose rows on some node take several messages goes as
     * that many pushes, then pulls of the same keys: a PUSHPULL message
     * reads its rows right after its own push, so a key that comes again
     * in a later message to the node would read a row that later push had
     * not reached, where the request is the rows as they are after the
     * whole push. A node applies a connection's messages in order, so the
     * pulls, queued behind every push, see them all. */
    int split = op == PSW_OP_PUSHPULL && nparts > (size_t)used;
    size_t nmsgs = split ? 2 * nparts : nparts;
    if (nmsgs > PSW_MAX_PARTS) {
        snprintf(err, errlen, "a request of %zu keys of table '%s' needs "
                 "%zu messages of %zu rows%s; at most 65535: split the "
                 "request%s", n, t->name, nmsgs, rpp,
                 split ? " (a pushpull of several messages a node goes as "
                         "its pushes, then pulls of the same keys)"
                       : "",
                 cut_by_frame(sh, rowb + 8));
        return PS_ETOOBIG;
    }

    psc_req *r;
    if (used == 1) {
        /* The common case: every key on one node, nothing to copy. */
        r = req_alloc(NULL, (int)nmsgs, 0, NULL);
        if (!r)
            return PS_ENOMEM;
        fill_parts(r, sh, op, one, 0, keys, n, (const char *)vals, out, NULL,
                   rpp);
    } else if (run_parts) {
        r = req_alloc(NULL, (int)nmsgs, 0, NULL);
        if (!r)
            return PS_ENOMEM;
        int k = 0;
        for (size_t i = 0, j; i < n; i = j) {
            j = home_run_end(home, i, n);
            k = fill_parts(r, sh, op, home[i], k, keys + i, j - i,
                           vals ? (const char *)(vals + i * dim) : NULL,
                           out ? out + i * dim : NULL, NULL, rpp);
        }
    } else {
        /* Group keys (and values) by node with a counting sort; pos maps
         * each grouped key back to the caller's index for the pull. */
        size_t extra = n * 8 + (is_pull(op) ? n * 4 : 0) +
                       (is_push(op) ? n * rowb : 0);
        void *tail;
        r = req_alloc(sh->pool, (int)nmsgs, extra, &tail);
        if (!r)
            return PS_ENOMEM;
        uint64_t *gk = tail;
        uint32_t *pos = is_pull(op) ? (uint32_t *)(gk + n) : NULL;
        char *gv = is_push(op) ? (char *)(gk + n) + (pos ? n * 4 : 0) : NULL;
        size_t *start = calloc((size_t)sh->nnodes + 1, sizeof *start);
        if (!start) {
            psc_req_free(r);
            return PS_ENOMEM;
        }
        for (int nd = 0; nd < sh->nnodes; nd++)
            start[nd + 1] = start[nd] + count[nd];
        int k = 0;
        for (int nd = 0; nd < sh->nnodes; nd++)
            if (count[nd])
                k = fill_parts(r, sh, op, nd, k, gk + start[nd], count[nd],
                               gv ? gv + start[nd] * rowb : NULL, out,
                               pos ? pos + start[nd] : NULL, rpp);
        for (size_t i = 0; i < n; i++) {
            size_t at = start[home[i]]++;
            gk[at] = keys[i];
            if (pos)
                pos[at] = (uint32_t)i;
            /* A copy of known size for one float: no call per key. */
            if (gv && rowb == sizeof(float))
                memcpy(gv + at * sizeof(float), vals + i, sizeof(float));
            else if (gv)
                memcpy(gv + at * rowb, vals + i * dim, rowb);
        }
        free(start);
    }
    if (split)
        split_pushpull(r, nparts);
    r->op = op;
    r->dim = t->dim;
    r->payload_out = n * (split ? 16 : 8) + (is_push(op) ? n * rowb : 0);
    r->payload_in = is_pull(op) ? n * rowb : 0;
    r->bytes = r->payload_out + r->payload_in;
    /* A frame's size budget covers its replies too: the server refuses
     * frames whose replies would exceed max_frame. */
    for (int i = 0; i < r->nparts; i++) {
        psc_part *p = &r->parts[i];
        p->wire_bytes = psc_part_wire(&p->msg, rowb);
        /* An ssp pull may be held. */
        p->slow = sh->table->consistency == PSW_CONS_SSP &&
                  is_pull(p->msg.op);
    }
    r->whole = goes_in_two_waves(op, r->nparts, vals, n * rowb);
    *reqp = r;
    return 0;
}

int psc_req_keys(const psc_shape *sh, int op, const uint64_t *keys, size_t n,
                const float *vals, float *out, psc_req **reqp, char *err,
                size_t errlen)
{
    if (n > UINT32_MAX) {
        snprintf(err, errlen, "%zu keys in one request; at most %u", n,
                 UINT32_MAX);
        return PS_ETOOBIG;
    }
    size_t *count = calloc((size_t)sh->nnodes, sizeof *count);
    /* With several nodes, each key's node (a hash and two divisions) is
     * worked out once and kept for the grouping pass: from the pool for
     * large requests, like their copies (a fresh 128 KiB for 65,536 keys
     * was mapped and unmapped by malloc each time). */
    size_t home_cap = 0;
    uint16_t *home = sh->nnodes > 1 && n
                         ? psc_bufpool_take(sh->pool, n * sizeof *home,
                                            &home_cap)
                         : NULL;
    int rc = PS_ENOMEM;
    if (count && (sh->nnodes == 1 || !n || home))
        rc = slice_keys(sh, op, keys, n, vals, out, reqp, count, home, err,
                        errlen);
    free(count);
    psc_bufpool_give(sh->pool, home, home_cap);
    return rc;
}

/* The row after the run of rows that starts at `row`, lives on one node
 * and is at most rpp rows long (bounded by end). */
static uint64_t run_end(const psc_shape *sh, uint64_t row, uint64_t end,
                        uint64_t rpp)
{
    int nd = node_of(sh, row);
    uint64_t stop = row;
    if (end - row > rpp)
        end = row + rpp;
    while (stop < end && node_of(sh, stop) == nd)
        stop = psw_dense_shard_start(sh->table->rows, sh->shards,
                                     shard_of(sh, stop) + 1);
    return stop < end ? stop : end;
}

int psc_req_range(const psc_shape *sh, int op, uint64_t first, uint64_t count,
                 const float *vals, float *out, psc_req **reqp, char *err,
                 size_t errlen)
{
    const psw_table_desc *t = sh->table;
    if (!t->dense) {
        snprintf(err, errlen, "table '%s' is sparse: range requests need a "
                 "dense table", t->name);
        return PS_EINVAL;
    }
    if (count == 0 || first >= t->rows || count > t->rows - first) {
        psw_range_error(err, errlen, t->name, first, count, t->rows);
        /* No rows is a bad argument, as no keys is for ps_push. */
        return count == 0 ? PS_EINVAL : PS_EKEY;
    }
    /* A run is a stretch of consecutive non-empty shards on one node;
     * with more than one node every shard is its own run. */
    uint64_t rpp = rows_per_part(sh, (size_t)t->dim * sizeof(float));
    int nparts = 0;
    for (uint64_t row = first; row < first + count && nparts <= PSW_MAX_PARTS;
         nparts++)
        row = run_end(sh, row, first + count, rpp);
    if (nparts > PSW_MAX_PARTS) {
        snprintf(err, errlen, "rows %llu..%llu of table '%s' need more than "
                 "65535 messages of %llu rows: split the range%s",
                 (unsigned long long)first,
                 (unsigned long long)(first + count - 1), t->name,
                 (unsigned long long)rpp,
                 cut_by_frame(sh, (size_t)t->dim * sizeof(float)));
        return PS_ETOOBIG;
    }
    psc_req *r = req_alloc(NULL, nparts, 0, NULL);
    if (!r)
        return PS_ENOMEM;
    size_t dim = t->dim;
    uint64_t row = first, end = first + count;
    for (int k = 0; k < nparts; k++) {
        int nd = node_of(sh, row);
        uint64_t stop = run_end(sh, row, end, rpp);
        int rc = check_size(sh, stop - row, 0, err, errlen);
        if (rc) {
            psc_req_free(r);
            return rc;
        }
        psc_part *p = &r->parts[k];
        part_init(p, sh, op, nd, (uint32_t)k);
        p->msg.first = row;
        p->msg.count = stop - row;
        size_t off = (size_t)(row - first) * dim;
        if (is_push(op)) {
            p->msg.vals = (const char *)(vals + off);
            p->msg.vals_len = (size_t)(stop - row) * dim * sizeof(float);
        }
        p->out = is_pull(op) ? out + off : NULL;
        p->wire_bytes = psc_part_wire(&p->msg, dim * sizeof(float));
        row = stop;
    }
    r->op = op;
    r->dim = t->dim;
    r->bytes = (size_t)count * dim * sizeof(float);
    r->payload_out = is_push(op) ? r->bytes : 0;
    r->payload_in = is_pull(op) ? r->bytes : 0;
    r->whole = goes_in_two_waves(op, r->nparts, vals, r->bytes);
    if (t->consistency == PSW_CONS_SSP && is_pull(op))
        for (int i = 0; i < r->nparts; i++)
            r->parts[i].slow = 1;
    *reqp = r;
    return 0;
}

int psc_req_control(int nnodes, int node, int op, uint64_t value,
                   psc_req **reqp)
{
    int n = node < 0 ? nnodes : 1;
    psc_req *r = req_alloc(NULL, n, 0, NULL);
    if (!r)
        return PS_ENOMEM;
    for (int k = 0; k < n; k++) {
        psc_part *p = &r->parts[k];
        p->node = node < 0 ? k : node;
        p->msg.op = op;
        p->msg.part = (uint32_t)k;
        p->msg.value = value;
        p->wire_bytes = PSW_MSG_OVERHEAD;
        /* What a node holds until other workers catch up; a LEAVE or
         * a push of no rows (client.c, mark_pushed) is answered at once. */
        p->slow = op == PSW_OP_CLOCK || op == PSW_OP_BARRIER;
    }
    r->op = op;
    *reqp = r;
    return 0;
}

