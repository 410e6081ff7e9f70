/* Unit tests of slicing (client/slice.c) and of the Customer
 * (client/customer.c): keyed and ranged requests cut into per-node parts
 * against the shared layout, replies placed into the caller's buffer, and
 * the request lifecycle (timestamps, completion, waits, the failure
 * memory). Pure: no sockets, no I/O thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>
#include <cmocka.h>

#include "../client/bufpool.h"
#include "../client/customer.h"
#include "../client/scan.h"
#include "../client/slice.h"
#include "../proto/layout.h"
#include "../proto/status.h"

#include "expect.h"

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fail_msg("calloc(%zu, %zu): got NULL", n, size);
    }
    return p;
}

/* ---- shapes and layout ---------------------------------------------- */

#define TABLE_ID 7

static psw_table_desc desc_make(int dense, uint32_t dim, uint64_t rows)
{
    psw_table_desc t;
    memset(&t, 0, sizeof t);
    t.id = TABLE_ID;
    snprintf(t.name, sizeof t.name, "%s", dense ? "emb_dense" : "emb_sparse");
    t.dense = dense;
    t.dim = dim;
    t.rows = dense ? rows : 0;
    return t;
}

static psc_shape shape_make(const psw_table_desc *t, int nnodes,
                           uint32_t shards)
{
    psc_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.nnodes = nnodes;
    sh.shards = shards;
    sh.table = t;
    sh.table_id = TABLE_ID;
    sh.max_payload = (uint64_t)1 << 26;
    return sh;
}

/* The layout's answer, computed from proto/layout.h directly. */
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

static int has_push(int op)
{
    return psw_op_has(op, PSW_OPF_PUSHES);
}

static int has_pull(int op)
{
    return psw_op_has(op, PSW_OPF_PULLS);
}

static float float_at(const char *b, size_t i)
{
    float f;
    memcpy(&f, b + i * sizeof(float), sizeof f);
    return f;
}

/* Sparse keys spread over a wide range; distinct. */
static uint64_t spread_key(size_t i)
{
    return (uint64_t)i * 0x9e3779b97f4a7c15ULL + 3;
}

/* The value a pushed row carries, or a server answers, for key k. */
static float row_val(uint64_t k, uint32_t j)
{
    return (float)(k % 65536) * 4.0f + (float)j;
}

/* ---- keyed requests ------------------------------------------------- */

/* Checks a keyed request against the caller's arrays: one part per node
 * touched, numbered in order, each key exactly once on its own node, pos
 * leading back to the caller's index, values carried with their key. For
 * push-only requests (no pos) keys must be distinct. */
static void check_keyed_parts(const psc_shape *sh, int op,
                              const uint64_t *keys, size_t n,
                              const float *vals, const float *out,
                              const psc_req *r)
{
    const uint32_t dim = sh->table->dim;
    int *touched = xcalloc((size_t)sh->nnodes, sizeof *touched);
    int nodes = 0;
    for (size_t i = 0; i < n; i++)
        if (!touched[node_of(sh, keys[i])]++)
            nodes++;
    EXPECT_INT(r->nparts, nodes, "parts of a request touching %d nodes",
               nodes);
    EXPECT_INT(r->pending, r->nparts, "pending parts of a new request");
    EXPECT_INT(r->status, PS_OK, "status of a new request");
    EXPECT_PTR(r->error, NULL, "error of a new request");
    EXPECT_INT(r->op, op, "request op");
    EXPECT_INT(r->dim, dim, "request dim");

    char *seen = xcalloc(n, 1);
    int *part_of_node = xcalloc((size_t)sh->nnodes, sizeof *part_of_node);
    size_t total = 0;
    for (int k = 0; k < r->nparts; k++) {
        const psc_part *p = &r->parts[k];
        EXPECT_PTR(p->req, r, "part %d: req", k);
        EXPECT_INT(p->msg.part, k, "part %d: msg.part", k);
        EXPECT_INT(p->msg.op, op, "part %d: msg.op", k);
        EXPECT_INT(p->msg.table, TABLE_ID, "part %d: msg.table", k);
        EXPECT_INT(p->node >= 0 && p->node < sh->nnodes, 1,
                   "part %d: node %d within 0..%d", k, p->node,
                   sh->nnodes - 1);
        EXPECT_INT(part_of_node[p->node]++, 0,
                   "part %d: earlier parts for node %d", k, p->node);
        EXPECT_INT(p->msg.nkeys > 0, 1, "part %d: has keys", k);
        if (has_push(op))
            EXPECT_U64(p->msg.vals_len, p->msg.nkeys * dim * sizeof(float),
                       "part %d: vals_len", k);
        else
            EXPECT_PTR(p->msg.vals, NULL, "part %d: vals of a pull", k);
        EXPECT_PTR(p->out, has_pull(op) ? out : NULL, "part %d: out", k);
        if (has_pull(op) && r->nparts > 1)
            EXPECT_INT(p->pos != NULL, 1, "part %d: has pos", k);
        for (size_t i = 0; i < p->msg.nkeys; i++) {
            uint64_t key = psw_key_at(p->msg.keys, i);
            EXPECT_INT(node_of(sh, key), p->node, "part %d key %zu (%llu): "
                       "node", k, i, (unsigned long long)key);
            size_t idx = n;
            if (p->pos) {
                idx = p->pos[i];
            } else if (r->nparts == 1) {
                idx = i;
            } else {
                for (size_t x = 0; x < n; x++)
                    if (keys[x] == key)
                        idx = x;
            }
            EXPECT_INT(idx < n, 1, "part %d key %zu: caller index %zu "
                       "below %zu", k, i, idx, n);
            EXPECT_U64(keys[idx], key, "part %d key %zu: caller's key at "
                       "index %zu", k, i, idx);
            EXPECT_INT(seen[idx]++, 0, "part %d key %zu: earlier sightings "
                       "of caller index %zu", k, i, idx);
            if (has_push(op))
                for (uint32_t j = 0; j < dim; j++)
                    EXPECT_FLOAT(float_at(p->msg.vals, i * dim + j),
                                 vals[idx * dim + j], "part %d key %zu "
                                 "(index %zu) col %u: value", k, i, idx, j);
        }
        total += p->msg.nkeys;
    }
    EXPECT_U64(total, n, "keys over all parts");
    free(seen);
    free(part_of_node);
    free(touched);
}

static void fill_keys_vals(uint64_t *keys, float *vals, size_t n,
                           uint32_t dim)
{
    for (size_t i = 0; i < n; i++) {
        keys[i] = spread_key(i);
        for (uint32_t j = 0; j < dim; j++)
            vals[i * dim + j] = (float)i + (float)j * 0.25f;
    }
}

static void test_keyed_push_over_2_nodes_puts_each_key_once_on_its_node(
    void **state)
{
    (void)state;
    enum { N = 200, DIM = 3 };
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    uint64_t keys[N];
    float vals[N * DIM];
    fill_keys_vals(keys, vals, N, DIM);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, N, vals, NULL, &r, err,
                           sizeof err), 0, "psc_req_keys push (%s)", err);
    EXPECT_INT(r->nparts, 2, "parts of 200 spread keys on 2 nodes");
    check_keyed_parts(&sh, PSW_OP_PUSH, keys, N, vals, NULL, r);
    psc_req_free(r);
}

/* ---- the pool of large request buffers (client/bufpool.c) ----------- */

static void test_bufpool_keeps_large_buffers_within_its_limits(void **state)
{
    (void)state;
    psc_bufpool bp;
    psc_bufpool_init(&bp, 1u << 20);
    size_t cap = 0;
    /* Small buffers are malloc's: never kept. */
    void *small = psc_bufpool_take(&bp, PSC_POOL_MIN - 1, &cap);
    EXPECT_INT(small != NULL, 1, "a small take");
    psc_bufpool_give(&bp, small, cap);
    EXPECT_U64(psc_bufpool_held(&bp), 0, "bytes held after a small give");
    /* A large one is kept and given out again for the same size. */
    void *a = psc_bufpool_take(&bp, 300000, &cap);
    EXPECT_U64(cap, 300000, "capacity of a fresh buffer");
    psc_bufpool_give(&bp, a, cap);
    EXPECT_U64(psc_bufpool_held(&bp), 300000, "bytes held after a give");
    size_t cap2 = 0;
    void *b = psc_bufpool_take(&bp, 299000, &cap2);
    EXPECT_PTR(b, a, "a take of about the same size gets the kept buffer");
    EXPECT_U64(cap2, 300000, "its capacity");
    EXPECT_U64(psc_bufpool_held(&bp), 0, "bytes held while it is out");
    psc_bufpool_give(&bp, b, cap2);
    /* Exactly half its size still gets it; one byte less would waste more
     * than half. */
    void *c = psc_bufpool_take(&bp, 149999, &cap);
    EXPECT_INT(c != a, 1, "a take of under half the kept buffer's size "
               "gets a new one");
    EXPECT_U64(psc_bufpool_held(&bp), 300000, "the kept one stays");
    void *h = psc_bufpool_take(&bp, 150000, &cap2);
    EXPECT_PTR(h, a, "a take of exactly half gets the kept buffer");
    psc_bufpool_give(&bp, h, cap2);
    psc_bufpool_give(&bp, c, cap);
    EXPECT_U64(psc_bufpool_held(&bp), 449999, "both kept");
    /* Past max_bytes the oldest go to make room: a client whose requests
     * grew keeps the new size. */
    void *d = psc_bufpool_take(&bp, 700000, &cap);
    psc_bufpool_give(&bp, d, cap);
    EXPECT_U64(psc_bufpool_held(&bp), 849999, "bytes held after a give "
               "past max_bytes: the newest two");
    EXPECT_INT(bp.n, 2, "buffers kept");
    EXPECT_PTR(bp.b[1].p, d, "the newest is kept");
    EXPECT_INT(bp.b[0].p != a, 1, "the oldest is not");
    /* Larger than max_bytes itself: freed. */
    void *e = psc_bufpool_take(&bp, (1u << 20) + 1, &cap);
    psc_bufpool_give(&bp, e, cap);
    EXPECT_U64(psc_bufpool_held(&bp), 849999, "bytes held after a give of "
               "more than max_bytes");
    psc_bufpool_destroy(&bp);

    /* Full by count: the oldest goes. */
    psc_bufpool_init(&bp, (size_t)1 << 30);
    void *out[PSC_POOL_BUFS + 1];
    size_t caps[PSC_POOL_BUFS + 1];
    for (int i = 0; i <= PSC_POOL_BUFS; i++)      /* all out at once */
        out[i] = psc_bufpool_take(&bp, PSC_POOL_MIN, &caps[i]);
    for (int i = 0; i <= PSC_POOL_BUFS; i++)
        psc_bufpool_give(&bp, out[i], caps[i]);
    void *first = out[0];
    EXPECT_INT(bp.n, PSC_POOL_BUFS, "buffers kept at most");
    int found = 0;
    for (int i = 0; i < bp.n; i++)
        found |= bp.b[i].p == first;
    EXPECT_INT(found, 0, "the oldest buffer is no longer kept");
    /* Kept through a tick soon after a take, all freed once idle; a take
     * starts the idle time again. */
    uint64_t t = bp.last_take_ns;
    psc_bufpool_trim(&bp, t + PSC_POOL_IDLE_NS - 1);
    EXPECT_INT(bp.n, PSC_POOL_BUFS, "kept before the idle time");
    bp.last_take_ns = 0;         /* as if nothing was taken for long */
    void *g = psc_bufpool_take(&bp, PSC_POOL_MIN, &cap);
    psc_bufpool_give(&bp, g, cap);
    t = bp.last_take_ns;
    EXPECT_INT(t > 0, 1, "a take starts the idle time again");
    psc_bufpool_trim(&bp, t + PSC_POOL_IDLE_NS - 1);
    EXPECT_INT(bp.n, PSC_POOL_BUFS, "kept before the idle time since the "
               "take");
    psc_bufpool_trim(&bp, t + PSC_POOL_IDLE_NS);
    EXPECT_INT(bp.n, 0, "buffers kept after the idle time");
    EXPECT_U64(psc_bufpool_held(&bp), 0, "bytes held after the idle time");
    psc_bufpool_destroy(&bp);
}

/* Fills the newest kept buffer (which must be `buf`) with junk, slices a
 * request that must take it, checks the request and frees it (back to
 * the pool). */
static void reslice_dirtied(const psc_shape *sh, psc_bufpool *bp, int op,
                             const uint64_t *keys, size_t n,
                             const float *vals, float *out, const void *buf)
{
    EXPECT_INT(bp->n > 0, 1, "buffers kept");
    EXPECT_PTR(bp->b[bp->n - 1].p, buf, "the newest kept buffer");
    /* Taken and given back to be written (ASan poisons kept buffers). */
    size_t cap;
    void *p = psc_bufpool_take(bp, bp->b[bp->n - 1].cap, &cap);
    EXPECT_PTR(p, buf, "the buffer taken to be filled");
    memset(p, 0xA5, cap);
    psc_bufpool_give(bp, p, cap);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(sh, op, keys, n, vals, out, &r, err, sizeof err),
               0, "op %d from a reused buffer (%s)", op, err);
    EXPECT_PTR(r, buf, "op %d reuses the buffer", op);
    check_keyed_parts(sh, op, keys, n, vals, out, r);
    psc_req_free(r);
}

/* A request over 2 nodes large enough for the pool is sliced right from a
 * reused buffer too (its header zeroed, its copies rewritten), and its
 * buffer goes back to the pool when it is freed. */
static void test_keyed_requests_reuse_pooled_buffers(void **state)
{
    (void)state;
    enum { N = 40000, DIM = 1 };   /* the scratch alone is 80 KB */
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    psc_bufpool bp;
    psc_bufpool_init(&bp, (size_t)64 << 20);
    sh.pool = &bp;
    uint64_t *keys = xcalloc(N, sizeof *keys);
    float *vals = xcalloc(N, sizeof *vals), *out = xcalloc(N, sizeof *out);
    fill_keys_vals(keys, vals, N, DIM);
    char err[256] = "";
    psc_req *r = NULL;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, &r, err,
                           sizeof err), 0, "first request (%s)", err);
    check_keyed_parts(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, r);
    EXPECT_PTR(r->pool, &bp, "a large request's pool");
    /* The slicer's scratch went back already. */
    size_t scratch = psc_bufpool_held(&bp);
    EXPECT_U64(scratch, N * sizeof(uint16_t), "bytes held while the "
               "request is out: the per-key scratch");
    void *first = r;
    psc_req_free(r);
    EXPECT_INT(psc_bufpool_held(&bp) > scratch, 1, "the request's buffer is "
               "kept when it is freed");
    /* Junk in the whole buffer: a reuse must not rely on what it held. */
    for (size_t i = 0; i < N; i++) {
        keys[i] = spread_key(i + N);
        vals[i] = -(float)i;
    }
    reslice_dirtied(&sh, &bp, PSW_OP_PUSHPULL, keys, N, vals, out, first);
    /* A pull (no values: its copies are laid out differently, in less
     * than the buffer holds) from the same buffer. */
    reslice_dirtied(&sh, &bp, PSW_OP_PULL, keys, N, NULL, out, first);
    /* One node: nothing is copied, nothing pooled. */
    psc_shape one = shape_make(&t, 1, 16);
    one.pool = &bp;
    size_t held = psc_bufpool_held(&bp);
    EXPECT_INT(psc_req_keys(&one, PSW_OP_PUSH, keys, N, vals, NULL, &r, err,
                           sizeof err), 0, "one node's request (%s)", err);
    EXPECT_PTR(r->pool, NULL, "a request that borrows the caller's arrays");
    EXPECT_U64(psc_bufpool_held(&bp), held, "bytes held");
    psc_req_free(r);
    free(keys);
    free(vals);
    free(out);
    psc_bufpool_destroy(&bp);
}

static void test_keyed_pushpull_over_2_nodes_maps_pos_back_and_carries_vals(
    void **state)
{
    (void)state;
    enum { N = 150, DIM = 2 };
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    fill_keys_vals(keys, vals, N, DIM);
    /* Repeated keys are separate entries with their own values. */
    keys[10] = keys[3];
    keys[11] = keys[3];
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, &r, err,
                           sizeof err), 0, "psc_req_keys pushpull (%s)", err);
    check_keyed_parts(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, r);
    psc_req_free(r);
}

static void test_keyed_dense_over_4_nodes_puts_each_row_on_its_node(
    void **state)
{
    (void)state;
    enum { N = 300, DIM = 4 };
    psw_table_desc t = desc_make(1, DIM, 1000);
    psc_shape sh = shape_make(&t, 4, 16);
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    fill_keys_vals(keys, vals, N, DIM);
    for (size_t i = 0; i < N; i++)
        keys[i] = (i * 337) % 1000;
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, &r, err,
                           sizeof err), 0, "psc_req_keys pushpull (%s)", err);
    EXPECT_INT(r->nparts, 4, "parts over 4 nodes");
    check_keyed_parts(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, r);
    psc_req_free(r);
}

/* A plain pull over two nodes: ps_pull passes vals == NULL. */
static void test_keyed_pull_over_2_nodes_maps_pos_back_to_caller_index(
    void **state)
{
    (void)state;
    enum { N = 200, DIM = 3 };
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    fill_keys_vals(keys, vals, N, DIM);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                           sizeof err), 0, "psc_req_keys pull (%s)", err);
    EXPECT_INT(r->nparts, 2, "parts of 200 spread keys on 2 nodes");
    check_keyed_parts(&sh, PSW_OP_PULL, keys, N, NULL, out, r);
    psc_req_free(r);
}

/* The first n keys k = 0, 1, ... that live on `node`. */
static void keys_on_node(const psc_shape *sh, int node, uint64_t *keys,
                         size_t n)
{
    size_t got = 0;
    for (uint64_t k = 0; got < n; k++)
        if (node_of(sh, k) == node)
            keys[got++] = k;
}

static void check_borrowed(const psc_shape *sh, int op, const uint64_t *keys,
                           size_t n, const float *vals, float *out, int node)
{
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(sh, op, keys, n, vals, out, &r, err, sizeof err),
               0, "op %d: psc_req_keys (%s)", op, err);
    EXPECT_INT(r->nparts, 1, "op %d: parts", op);
    EXPECT_INT(r->pending, 1, "op %d: pending", op);
    const psc_part *p = &r->parts[0];
    EXPECT_INT(p->node, node, "op %d: node", op);
    EXPECT_INT(p->msg.part, 0, "op %d: msg.part", op);
    EXPECT_PTR(p->msg.keys, keys, "op %d: keys borrowed", op);
    EXPECT_U64(p->msg.nkeys, n, "op %d: nkeys", op);
    EXPECT_PTR(p->msg.vals, has_push(op) ? vals : NULL,
               "op %d: vals borrowed", op);
    EXPECT_PTR(p->out, has_pull(op) ? out : NULL, "op %d: out borrowed", op);
    EXPECT_PTR(p->pos, NULL, "op %d: pos", op);
    psc_req_free(r);
}

static void test_keys_all_on_one_node_make_one_part_borrowing_buffers(
    void **state)
{
    (void)state;
    enum { N = 40, DIM = 3 };
    psw_table_desc t = desc_make(0, DIM, 0);
    uint64_t keys[N];
    float vals[N * DIM] = { 0 }, out[N * DIM];
    const int ops[] = { PSW_OP_PUSH, PSW_OP_PULL, PSW_OP_PUSHPULL };

    psc_shape two = shape_make(&t, 2, 16);
    keys_on_node(&two, 1, keys, N);
    for (size_t i = 0; i < 3; i++)
        check_borrowed(&two, ops[i], keys, N, ops[i] == PSW_OP_PULL ? NULL
                       : vals, out, 1);

    psc_shape one = shape_make(&t, 1, 16);
    for (size_t i = 0; i < N; i++)
        keys[i] = spread_key(i);
    for (size_t i = 0; i < 3; i++)
        check_borrowed(&one, ops[i], keys, N, ops[i] == PSW_OP_PULL ? NULL
                       : vals, out, 0);
}

static void answer_and_check_scatter(psc_req *r, const uint64_t *keys,
                                     size_t n, const float *out, int ranged,
                                     uint64_t first);

/* Rows of a dense table in order, over nodes whose shards alternate, go
 * as runs that borrow the caller's keys, values and output (no copy into
 * per-node groups), each part on one node, every key once in the caller's
 * order; a pull's rows land in place. Keys alternating node by node are
 * still grouped (copied), one run per key would be a message per key. */
static void test_long_runs_on_one_node_borrow_the_callers_buffers(
    void **state)
{
    (void)state;
    enum { DIM = 1024, ROWS = 8192, N = 4096, FIRST = 100 };
    psw_table_desc t = desc_make(1, DIM, ROWS);
    psc_shape sh = shape_make(&t, 2, 16);
    uint64_t *keys = xcalloc(N, sizeof *keys);
    float *vals = xcalloc((size_t)N * DIM, sizeof(float));
    float *out = xcalloc((size_t)N * DIM, sizeof(float));
    for (size_t i = 0; i < N; i++)
        keys[i] = FIRST + i;
    const int ops[] = { PSW_OP_PUSH, PSW_OP_PULL, PSW_OP_PUSHPULL };
    int push_parts = 0;
    for (size_t o = 0; o < 3; o++) {
        int op = ops[o];
        psc_req *r = NULL;
        char err[256] = "";
        EXPECT_INT(psc_req_keys(&sh, op, keys, N, has_push(op) ? vals : NULL,
                                has_pull(op) ? out : NULL, &r, err,
                                sizeof err), 0, "op %d (%s)", op, err);
        if (op == PSW_OP_PUSH)
            push_parts = r->nparts;
        size_t next = 0;
        int nodes_seen[2] = { 0, 0 };
        /* A pushpull of several parts a node goes as pushes, then pulls
         * of the same keys (slice_keys): the pulls are the second half. */
        int split = op == PSW_OP_PUSHPULL;
        int m = split ? r->nparts / 2 : r->nparts;
        for (int k = 0; k < m; k++) {
            const psc_part *p = &r->parts[k];
            const uint64_t *pk = (const uint64_t *)(const void *)p->msg.keys;
            EXPECT_PTR(pk, keys + next, "op %d part %d: keys borrowed in "
                       "order", op, k);
            EXPECT_INT(p->msg.part, k, "op %d: part index", op);
            EXPECT_INT(p->msg.op, split ? PSW_OP_PUSH : op, "op %d part %d: "
                       "its op", op, k);
            for (size_t i = 0; i < p->msg.nkeys; i++)
                EXPECT_INT(node_of(&sh, keys[next + i]), p->node,
                           "op %d part %d: key %zu's node", op, k, i);
            EXPECT_PTR(p->msg.vals, has_push(op)
                                        ? (const char *)(vals + next * DIM)
                                        : NULL, "op %d part %d: vals", op, k);
            EXPECT_PTR(p->out, has_pull(op) && !split ? out + next * DIM
                                                      : NULL,
                       "op %d part %d: out", op, k);
            EXPECT_PTR(p->pos, NULL, "op %d part %d: pos", op, k);
            if (split) {
                const psc_part *q = &r->parts[m + k];
                EXPECT_INT(q->msg.op, PSW_OP_PULL, "pushpull part %d: op",
                           m + k);
                EXPECT_INT(q->msg.part, m + k, "pushpull: part index");
                EXPECT_INT(q->node, p->node, "pushpull part %d: node",
                           m + k);
                EXPECT_PTR(q->msg.keys, p->msg.keys, "pushpull part %d: "
                           "the keys of push part %d", m + k, k);
                EXPECT_U64(q->msg.nkeys, p->msg.nkeys, "pushpull part %d: "
                           "keys", m + k);
                EXPECT_PTR(q->msg.vals, NULL, "pushpull part %d: vals",
                           m + k);
                EXPECT_PTR(q->out, out + next * DIM, "pushpull part %d: out",
                           m + k);
                EXPECT_PTR(q->pos, NULL, "pushpull part %d: pos", m + k);
            }
            nodes_seen[p->node] = 1;
            next += p->msg.nkeys;
        }
        /* The push's parts, twice for the pushpull (the pushes, then
         * their pulls). */
        EXPECT_INT(r->nparts, split ? 2 * push_parts : push_parts,
                   "op %d: parts", op);
        EXPECT_U64(next, N, "op %d: keys covered", op);
        EXPECT_INT(nodes_seen[0] && nodes_seen[1], 1, "op %d: both nodes",
                   op);
        if (op == PSW_OP_PULL)
            answer_and_check_scatter(r, keys, N, out, 0, 0);
        psc_req_free(r);
    }
    /* Node by node: grouped, so the parts hold copies. */
    uint64_t k0[N / 2], k1[N / 2];
    keys_on_node(&sh, 0, k0, N / 2);
    keys_on_node(&sh, 1, k1, N / 2);
    for (size_t i = 0; i < N / 2; i++) {
        keys[2 * i] = k0[i];
        keys[2 * i + 1] = k1[i];
    }
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                            sizeof err), 0, "alternating keys (%s)", err);
    for (int k = 0; k < r->nparts; k++) {
        const uint64_t *pk = (const uint64_t *)(const void *)r->parts[k].msg.keys;
        EXPECT_INT(pk >= keys && pk < keys + N, 0, "part %d of alternating "
                   "keys: its own copy", k);
    }
    answer_and_check_scatter(r, keys, N, out, 0, 0);
    psc_req_free(r);
    free(keys);
    free(vals);
    free(out);
}

/* Runs that would need more than the 65,535 parts a request may have fall
 * back to groups when those fit: rows in order over tiny shards, with 2
 * keys a part, make 72,000 run parts but 60,000 grouped ones. */
static void test_runs_past_the_part_limit_fall_back_to_groups(void **state)
{
    (void)state;
    enum { DIM = 16, N = 120000 };
    psw_table_desc t = desc_make(1, DIM, N);
    psc_shape sh = shape_make(&t, 2, 24000);      /* 5 rows a shard */
    sh.max_payload = 144;                         /* 2 keys a part */
    uint64_t *keys = xcalloc(N, sizeof *keys);
    float *out = xcalloc((size_t)N * DIM, sizeof(float));
    for (size_t i = 0; i < N; i++)
        keys[i] = i;
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                            sizeof err), 0, "pull of %d rows in order (%s)",
               N, err);
    EXPECT_INT(r ? r->nparts : -1, 60000, "parts");
    psc_req_free(r);
    free(keys);
    free(out);
}

static void test_dense_key_past_last_row_returns_ekey_with_message(
    void **state)
{
    (void)state;
    psw_table_desc t = desc_make(1, 2, 1000);
    psc_shape sh = shape_make(&t, 2, 16);
    const uint64_t keys[3] = { 0, 999, 1000 };
    float vals[6] = { 0 };
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, 3, vals, NULL, &r, err,
                           sizeof err), PS_EKEY, "push of rows {0, 999, 1000}");
    EXPECT_PTR(r, NULL, "request after a refusal");
    EXPECT_SUBSTR(err, "no row 1000", "message");
    EXPECT_SUBSTR(err, "emb_dense", "message");
    const uint64_t huge = UINT64_MAX;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, &huge, 1, NULL, vals, &r, err,
                           sizeof err), PS_EKEY, "pull of row UINT64_MAX");
    EXPECT_PTR(r, NULL, "request after a refusal");
}

/* A request larger than one message may carry is cut into parts that
 * each fit; only a single row too large for any message is refused. */
static void test_keyed_request_over_max_payload_is_cut_into_parts(void **state)
{
    (void)state;
    enum { DIM = 4 };                 /* 16 bytes a row + 8 a key */
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 1, 16);
    sh.max_payload = 96;              /* exactly 4 keyed rows */
    uint64_t keys[8];
    float vals[8 * DIM] = { 0 }, out[8 * DIM];
    for (size_t i = 0; i < 8; i++)
        keys[i] = spread_key(i);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, 4, vals, NULL, &r, err,
                           sizeof err), 0, "4 rows in 96 bytes (%s)", err);
    EXPECT_INT(r->nparts, 1, "parts of 4 rows");
    psc_req_free(r);
    r = NULL;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, 5, NULL, out, &r, err,
                           sizeof err), 0, "5 rows in 96 bytes (%s)", err);
    EXPECT_INT(r->nparts, 2, "parts of 5 rows");
    EXPECT_INT(r->parts[0].msg.nkeys, 4, "rows of part 0");
    EXPECT_INT(r->parts[1].msg.nkeys, 1, "rows of part 1");
    EXPECT_PTR(r->parts[1].msg.keys, (const char *)(keys + 4), "keys of part 1");
    EXPECT_PTR(r->parts[1].out, out + 4 * DIM, "out of part 1");
    psc_req_free(r);
    r = NULL;

    /* Split per node too: 5 + 3 keys on two nodes make 2 + 1 parts. */
    psc_shape two = shape_make(&t, 2, 16);
    two.max_payload = 96;
    keys_on_node(&two, 0, keys, 5);
    keys_on_node(&two, 1, keys + 5, 3);
    EXPECT_INT(psc_req_keys(&two, PSW_OP_PUSH, keys, 8, vals, NULL, &r, err,
                           sizeof err), 0, "5 + 3 rows on 2 nodes (%s)", err);
    EXPECT_INT(r->nparts, 3, "parts");
    for (int k = 0; k < r->nparts; k++)
        EXPECT_INT(r->parts[k].msg.nkeys * 8 + r->parts[k].msg.vals_len <= 96,
                   1, "part %d within max_payload", k);
    psc_req_free(r);
    r = NULL;

    sh.max_payload = 16;              /* less than one keyed row */
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, 1, vals, NULL, &r, err,
                           sizeof err), PS_ETOOBIG, "a row larger than a message");
    EXPECT_PTR(r, NULL, "request after a refusal");
    EXPECT_SUBSTR(err, "max_frame", "message");
    /* Splitting cannot help a row wider than a message: say what can. */
    EXPECT_SUBSTR(err, "raise max_frame", "message");

    /* More than 65535 messages, their rows cut by a small max_frame: the
     * refusal says so (it named neither what to split nor max_frame). */
    sh.max_payload = 32;              /* one keyed row of dim 4 (24 bytes) */
    size_t many = 70000;
    uint64_t *mk = calloc(many, sizeof *mk);
    float *mv = calloc(many * DIM, sizeof *mv);
    assert_non_null(mk);
    assert_non_null(mv);
    for (size_t i = 0; i < many; i++)
        mk[i] = i;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, mk, many, mv, NULL, &r, err,
                           sizeof err), PS_ETOOBIG, "70000 rows, 1 a message");
    EXPECT_SUBSTR(err, "needs 70000 messages of 1 rows; at most 65535: split "
                  "the request (the server's max_frame sets the rows per "
                  "message)", "message");
    free(mk);
    free(mv);
}

/* ---- range requests ------------------------------------------------- */

/* Checks a range request: parts in order cover first..first+count-1
 * exactly once, each inside one shard when `per_shard`, every row on the
 * part's node, each borrowing its slice of the caller's buffer. */
static void check_range_parts(const psc_shape *sh, int op, uint64_t first,
                              uint64_t count, const float *vals,
                              const float *out, const psc_req *r,
                              int per_shard)
{
    const uint32_t dim = sh->table->dim;
    const uint64_t rows = sh->table->rows;
    EXPECT_INT(r->pending, r->nparts, "pending parts of a new request");
    EXPECT_INT(r->op, op, "request op");
    uint64_t next = first;
    for (int k = 0; k < r->nparts; k++) {
        const psc_part *p = &r->parts[k];
        uint64_t a = p->msg.first, c = p->msg.count;
        EXPECT_PTR(p->req, r, "part %d: req", k);
        EXPECT_INT(p->msg.part, k, "part %d: msg.part", k);
        EXPECT_INT(p->msg.op, op, "part %d: msg.op", k);
        EXPECT_INT(p->msg.table, TABLE_ID, "part %d: msg.table", k);
        EXPECT_U64(a, next, "part %d: first row", k);
        EXPECT_INT(c >= 1 && c <= first + count - a, 1, "part %d: count "
                   "%llu within 1..%llu", k, (unsigned long long)c,
                   (unsigned long long)(first + count - a));
        uint32_t sa = psw_dense_shard_of(rows, sh->shards, a);
        uint32_t sb = psw_dense_shard_of(rows, sh->shards, a + c - 1);
        if (per_shard)
            EXPECT_INT(sb, sa, "part %d (rows %llu..%llu): shard of its "
                       "last row vs its first", k, (unsigned long long)a,
                       (unsigned long long)(a + c - 1));
        for (uint64_t row = a; row < a + c; row++)
            EXPECT_INT(node_of(sh, row), p->node, "part %d: node of row "
                       "%llu", k, (unsigned long long)row);
        size_t off = (size_t)(a - first) * dim;
        EXPECT_PTR(p->msg.vals, has_push(op) ? (const void *)(vals + off)
                                             : NULL, "part %d: vals", k);
        EXPECT_U64(p->msg.vals_len, has_push(op) ? c * dim * sizeof(float)
                                                 : 0, "part %d: vals_len", k);
        EXPECT_PTR(p->out, has_pull(op) ? out + off : NULL, "part %d: out",
                   k);
        EXPECT_PTR(p->pos, NULL, "part %d: pos", k);
        EXPECT_U64(p->msg.nkeys, 0, "part %d: nkeys", k);
        next = a + c;
    }
    EXPECT_U64(next, first + count, "row after the last part");
}

/* Distinct shards holding rows first..first+count-1. */
static int shards_touched(const psc_shape *sh, uint64_t first, uint64_t count)
{
    int n = 0;
    uint32_t last = UINT32_MAX;
    for (uint64_t row = first; row < first + count; row++) {
        uint32_t s = psw_dense_shard_of(sh->table->rows, sh->shards, row);
        if (s != last)
            n++;
        last = s;
    }
    return n;
}

static void test_range_over_2_nodes_covers_rows_once_one_shard_per_part(
    void **state)
{
    (void)state;
    enum { DIM = 3 };
    psw_table_desc t = desc_make(1, DIM, 1000);
    psc_shape sh = shape_make(&t, 2, 16);
    float *buf = xcalloc(1000 * DIM, sizeof(float));
    const int ops[] = { PSW_OP_PUSH_RANGE, PSW_OP_PULL_RANGE };
    for (size_t i = 0; i < 2; i++) {
        psc_req *r = NULL;
        char err[256] = "";
        int push = ops[i] == PSW_OP_PUSH_RANGE;
        EXPECT_INT(psc_req_range(&sh, ops[i], 10, 980, push ? buf : NULL,
                                push ? NULL : buf, &r, err, sizeof err),
                   0, "op %d rows 10..989 (%s)", ops[i], err);
        EXPECT_INT(r->nparts, 16, "op %d: parts of rows 10..989 over 16 "
                   "shards", ops[i]);
        check_range_parts(&sh, ops[i], 10, 980, buf, buf, r, 1);
        psc_req_free(r);
    }
    free(buf);
}

static void test_range_on_1_node_is_one_part_for_the_whole_range(
    void **state)
{
    (void)state;
    enum { DIM = 2 };
    float *buf = xcalloc(1000 * DIM, sizeof(float));
    psw_table_desc t = desc_make(1, DIM, 1000);
    psw_table_desc tiny = desc_make(1, DIM, 3);
    const psw_table_desc *descs[2] = { &t, &tiny };
    for (int d = 0; d < 2; d++) {
        psc_shape sh = shape_make(descs[d], 1, 16);
        uint64_t first = d ? 0 : 10, count = d ? 3 : 980;
        psc_req *r = NULL;
        char err[256] = "";
        EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, first, count, NULL,
                                buf, &r, err, sizeof err), 0,
                   "rows %d: pull_range (%s)", (int)descs[d]->rows, err);
        EXPECT_INT(r->nparts, 1, "rows %d: parts", (int)descs[d]->rows);
        check_range_parts(&sh, PSW_OP_PULL_RANGE, first, count, NULL, buf, r,
                          0);
        EXPECT_INT(r->parts[0].node, 0, "node");
        psc_req_free(r);
    }
    free(buf);
}

/* A range refused for its rows says which: an empty one names itself,
 * rather than "rows 5..4" or, from row 0, every row up to 2^64 - 1. */
static void test_refused_ranges_name_their_rows(void **state)
{
    (void)state;
    psw_table_desc t = desc_make(1, 1, 10);
    psc_shape sh = shape_make(&t, 1, 4);
    static const struct {
        uint64_t first, count;
        int code;                /* no rows is a bad argument, as no keys */
        const char *text;
    } cases[] = {
        { 0, 0, PS_EINVAL, "an empty range (count 0) at row 0 of table" },
        { 5, 0, PS_EINVAL, "an empty range (count 0) at row 5 of table" },
        { 8, 4, PS_EKEY, "rows 8..11 go past the end of table 'emb_dense' "
          "(rows = 10: its last row is 9)" },
        { 10, 2, PS_EKEY, "rows 10..11 are outside table 'emb_dense' (rows "
          "= 10)" },
        { 2, UINT64_MAX, PS_EKEY, "18446744073709551615 rows from row 2 "
          "(past row 2^64 - 1) are outside" },
        { UINT64_MAX, 2, PS_EKEY, "2 rows from row 18446744073709551615 "
          "(past row 2^64 - 1) are outside" },
        { UINT64_MAX, 1, PS_EKEY, "rows 18446744073709551615.."
          "18446744073709551615 are outside" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        psc_req *r = NULL;
        char err[256] = "";
        EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, cases[i].first,
                                 cases[i].count, NULL, NULL, &r, err,
                                 sizeof err), cases[i].code, "case %zu", i);
        EXPECT_SUBSTR(err, cases[i].text, "case %zu", i);
    }
}

static void test_range_with_fewer_rows_than_shards_covers_each_row_once(
    void **state)
{
    (void)state;
    enum { DIM = 2 };
    psw_table_desc t = desc_make(1, DIM, 3);
    psc_shape sh = shape_make(&t, 2, 16);
    float vals[3 * DIM] = { 0 };
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PUSH_RANGE, 0, 3, vals, NULL, &r, err,
                            sizeof err), 0, "push_range 0..2 (%s)", err);
    /* Rows 0, 1, 2 live in shards 5, 10, 15: three parts. */
    EXPECT_INT(r->nparts, 3, "parts");
    EXPECT_INT(r->nparts, shards_touched(&sh, 0, 3), "parts vs shards");
    check_range_parts(&sh, PSW_OP_PUSH_RANGE, 0, 3, vals, NULL, r, 1);
    psc_req_free(r);
}

/* Small tables have empty shards between their rows. A part may step
 * over empty shards (the server checks only shards that hold rows of the
 * range), but every row of a part must live on the part's node and every
 * row must be covered exactly once. */
static void test_range_parts_cover_small_tables_with_empty_shards(void **state)
{
    (void)state;
    enum { DIM = 1 };
    float out[40 * DIM];
    for (int nnodes = 2; nnodes <= 3; nnodes++) {
        for (uint64_t rows = 1; rows <= 40; rows++) {
            psw_table_desc t = desc_make(1, DIM, rows);
            psc_shape sh = shape_make(&t, nnodes, 16);
            psc_req *r = NULL;
            char err[256] = "";
            EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, 0, rows, NULL,
                                    out, &r, err, sizeof err), 0,
                       "%d nodes, rows %llu: pull_range (%s)", nnodes,
                       (unsigned long long)rows, err);
            check_range_parts(&sh, PSW_OP_PULL_RANGE, 0, rows, NULL, out, r,
                              0);
            psc_req_free(r);
        }
    }
}

static void test_range_on_sparse_table_returns_einval(void **state)
{
    (void)state;
    psw_table_desc t = desc_make(0, 2, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    float out[20];
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, 0, 10, NULL, out, &r, err,
                            sizeof err), PS_EINVAL, "pull_range on sparse");
    EXPECT_PTR(r, NULL, "request after a refusal");
    EXPECT_SUBSTR(err, "sparse", "message");
}

/* Rows past the end are PS_EKEY; no rows at all is PS_EINVAL, as no keys
 * is for ps_push. */
static void test_range_empty_or_past_end_is_refused(void **state)
{
    (void)state;
    psw_table_desc t = desc_make(1, 2, 1000);
    psc_shape sh = shape_make(&t, 2, 16);
    float buf[2 * 2];
    const struct { uint64_t first, count; } bad[] = {
        { 0, 0 }, { 999, 2 }, { 1000, 1 }, { 0, 1001 }, { UINT64_MAX, 2 },
        { 500, UINT64_MAX },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        psc_req *r = NULL;
        char err[256] = "";
        EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, bad[i].first,
                                bad[i].count, NULL, buf, &r, err, sizeof err),
                   bad[i].count ? PS_EKEY : PS_EINVAL, "first %llu count %llu",
                   (unsigned long long)bad[i].first,
                   (unsigned long long)bad[i].count);
        EXPECT_PTR(r, NULL, "request after a refusal");
        EXPECT_SUBSTR(err, "rows = 1000", "message");
    }
    /* The last row alone is fine. */
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PULL_RANGE, 999, 1, NULL, buf, &r,
                            err, sizeof err), 0, "row 999 (%s)", err);
    EXPECT_INT(r->nparts, 1, "parts of row 999");
    EXPECT_INT(r->parts[0].node, 1, "node of row 999 (shard 15)");
    psc_req_free(r);
}

static void test_range_over_max_payload_is_cut_into_parts(void **state)
{
    (void)state;
    enum { DIM = 4 };                 /* 16 bytes a row */
    psw_table_desc t = desc_make(1, DIM, 1000);
    psc_shape sh = shape_make(&t, 1, 16);
    sh.max_payload = 96;              /* 6 rows */
    float buf[7 * DIM] = { 0 };
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PUSH_RANGE, 0, 6, buf, NULL, &r, err,
                            sizeof err), 0, "6 rows in 96 bytes (%s)", err);
    EXPECT_INT(r->nparts, 1, "parts of 6 rows");
    psc_req_free(r);
    r = NULL;
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PUSH_RANGE, 0, 7, buf, NULL, &r, err,
                            sizeof err), 0, "7 rows in 96 bytes (%s)", err);
    EXPECT_INT(r->nparts, 2, "parts of 7 rows");
    check_range_parts(&sh, PSW_OP_PUSH_RANGE, 0, 7, buf, NULL, r, 0);
    psc_req_free(r);
    r = NULL;
    sh.max_payload = 8;               /* less than one row */
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PUSH_RANGE, 0, 1, buf, NULL, &r, err,
                            sizeof err), PS_ETOOBIG, "a row larger than a message");
    EXPECT_PTR(r, NULL, "request after a refusal");
    EXPECT_SUBSTR(err, "max_frame", "message");
    /* Splitting cannot help a row wider than a message: say what can. */
    EXPECT_SUBSTR(err, "raise max_frame", "message");

    /* More than 65535 messages, their rows cut by a small max_frame: the
     * refusal says so (it named only the range to split). */
    psw_table_desc big = desc_make(1, DIM, 200000);
    psc_shape bsh = shape_make(&big, 1, 16);
    bsh.max_payload = 32;             /* two rows */
    EXPECT_INT(psc_req_range(&bsh, PSW_OP_PULL_RANGE, 0, 200000, NULL, buf,
                            &r, err, sizeof err), PS_ETOOBIG,
               "200000 rows, 2 a message");
    EXPECT_SUBSTR(err, "65535 messages of 2 rows: split the range (the "
                  "server's max_frame sets the rows per message)", "message");
}

/* A wide part's frame, headers included, fits the 256 KiB that the I/O
 * thread batches into one frame and psd into one write of replies, keyed
 * or ranged: parts of exactly 256 KiB of rows went out one per write
 * (ranged 16 MiB pushes a quarter, pulls two fifths slower than keyed). */
static void test_wide_parts_fit_a_256_kib_frame_keyed_and_ranged(void **state)
{
    (void)state;
    enum { DIM = 1024, N = 4096 };    /* 16 MiB of 4 KiB rows */
    const size_t frame_max = 256u << 10;
    psw_table_desc t = desc_make(1, DIM, 8192);
    psc_shape sh = shape_make(&t, 1, 16);
    float *vals = xcalloc((size_t)N * DIM, sizeof(float));
    uint64_t *keys = xcalloc(N, sizeof *keys);
    for (size_t i = 0; i < N; i++)
        keys[i] = 100 + i;
    psc_req *rk = NULL, *rr = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, N, vals, NULL, &rk, err,
                            sizeof err), 0, "keyed push (%s)", err);
    EXPECT_INT(psc_req_range(&sh, PSW_OP_PUSH_RANGE, 100, N, vals, NULL, &rr,
                             err, sizeof err), 0, "ranged push (%s)", err);
    const psc_req *reqs[2] = { rk, rr };
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < reqs[k]->nparts; i++) {
            const psc_part *p = &reqs[k]->parts[i];
            size_t frame = PSW_BODY_OVERHEAD + PSW_MSG_OVERHEAD +
                           8 * p->msg.nkeys + p->msg.vals_len;
            EXPECT_INT(frame <= frame_max, 1,
                       "%s part %d: a frame of %zu bytes, over %zu",
                       k ? "ranged" : "keyed", i, frame, frame_max);
        }
    /* Both cut the rows alike: a ranged part carries no fewer rows. */
    EXPECT_INT(rr->nparts, rk->nparts, "ranged vs keyed parts");
    psc_req_free(rk);
    psc_req_free(rr);
    free(keys);
    free(vals);
}

/* psc_nonfinite reads a large push's back half on a helper thread: a bad
 * value anywhere is found, at either end, on either side of the cut
 * (n / 2 rounded down to 64 bytes) and in the halves' last and first
 * floats; below 1 MiB the caller reads alone. Several threads at once
 * (one takes the helper, the others read alone) and a fork's child
 * (without the parent's helper) get the same answers. */
#define SCAN_FLOATS ((size_t)3 << 20)        /* 12 MiB */
static float *scan_buf;

static int scan_cases(void)
{
    static const float bad[] = { __builtin_nanf(""), __builtin_inff(),
                                 -__builtin_inff() };
    const size_t sizes[] = { 4096, (size_t)1 << 18, ((size_t)1 << 18) + 7,
                             SCAN_FLOATS };
    int wrong = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z], bytes = n * sizeof(float);
        size_t cut = ((bytes / 2) & ~(size_t)63) / sizeof(float);
        const size_t at[] = { 0, cut - 1, cut, cut + 1, n / 3, n - 1 };
        wrong += psc_nonfinite(scan_buf, bytes) != 0;
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
            for (size_t b = 0; b < 3; b++) {
                float was = scan_buf[at[k]];
                scan_buf[at[k]] = bad[b];
                wrong += psc_nonfinite(scan_buf, bytes) != 1;
                scan_buf[at[k]] = was;
            }
    }
    return wrong;
}

static void *scan_thread(void *arg)
{
    int *wrong = arg;
    const size_t bytes = SCAN_FLOATS * sizeof(float);
    for (int i = 0; i < 50; i++)
        *wrong += psc_nonfinite(scan_buf, bytes) != 0;
    return NULL;
}

static void *scan_until_cancelled(void *arg)
{
    (void)arg;
    const size_t bytes = SCAN_FLOATS * sizeof(float);
    for (;;) {
        (void)psc_nonfinite(scan_buf, bytes);
        pthread_testcancel();
    }
    return NULL;
}

static void test_a_large_push_is_read_for_nan_by_two_threads(void **state)
{
    (void)state;
    scan_buf = malloc(SCAN_FLOATS * sizeof *scan_buf);
    assert_non_null(scan_buf);
    for (size_t i = 0; i < SCAN_FLOATS; i++)
        scan_buf[i] = (float)(i % 1000) - 500.0f;
    EXPECT_INT(scan_cases(), 0, "wrong answers");
    pthread_t t[4];
    int wrong[4] = { 0 };
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, scan_thread, &wrong[i]),
                         0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        EXPECT_INT(wrong[i], 0, "wrong answers of thread %d", i);
    }
    /* The helper blocks every signal: a trainer's SIGINT handler runs
     * on a thread of the trainer's (a thread of its own, not the main
     * one, with SIGINT blocked). */
    int blocked = 0;
    char taskdir[64];
    snprintf(taskdir, sizeof taskdir, "/proc/%d/task", (int)getpid());
    DIR *tasks = opendir(taskdir);
    for (struct dirent *e; tasks && (e = readdir(tasks));) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == (int)getpid())
            continue;
        char st_path[400], line[256];
        snprintf(st_path, sizeof st_path, "%s/%s/status", taskdir, e->d_name);
        FILE *f = fopen(st_path, "r");
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "SigBlk:", 7))
                blocked |= (strtoull(line + 7, NULL, 16) >> (SIGINT - 1)) & 1;
        if (f)
            fclose(f);
    }
    if (tasks)
        closedir(tasks);
    EXPECT_INT(blocked, 1, "a thread of the library's with SIGINT blocked");
    pid_t p = fork();
    assert_true(p >= 0);
    if (p == 0)
        _exit(scan_cases() == 0 ? 0 : 1);
    int st;
    assert_int_equal(waitpid(p, &st, 0), p);
    EXPECT_INT(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1,
               "the child's answers (status %#x)", st);
    /* A thread cancelled while it reads (its wait for the helper is a
     * cancellation point) left the lock held: every later fork hung in
     * the library's fork handler, as did every large read (a review).
     * Forks and reads after 30 cancellations, under an alarm. */
    alarm(60);
    for (int i = 0; i < 30; i++) {
        pthread_t c;
        assert_int_equal(pthread_create(&c, NULL, scan_until_cancelled, NULL),
                         0);
        struct timespec d = { 0, (long)(i % 7 + 1) * 300000L };
        nanosleep(&d, NULL);
        pthread_cancel(c);
        pthread_join(c, NULL);
        p = fork();
        assert_true(p >= 0);
        if (p == 0)
            _exit(0);
        assert_int_equal(waitpid(p, &st, 0), p);
        EXPECT_INT(psc_nonfinite(scan_buf, SCAN_FLOATS * sizeof(float)), 0,
                   "a read after cancellation %d", i);
    }
    alarm(0);
    free(scan_buf);
}

/* A push travels as parts in frames of their own unless it holds a value
 * psd may refuse (a NaN or an infinity): then its parts must share a frame
 * (req->whole), so that psd refuses it whole. Pulls and one-part pushes
 * never need it. */
static void test_push_with_nonfinite_value_keeps_its_parts_whole(void **state)
{
    (void)state;
    enum { DIM = 4, N = 40 };
    psw_table_desc t = desc_make(1, DIM, 1000);
    psc_shape sh = shape_make(&t, 1, 16);
    sh.max_payload = 96;              /* 6 rows a part: 7 parts */
    static float vals[N * DIM], out[N * DIM];
    uint64_t keys[N];
    for (size_t i = 0; i < N; i++)
        keys[i] = i;
    for (size_t i = 0; i < N * DIM; i++)
        vals[i] = (float)i * 0.5f;
    static const float bad[] = { __builtin_nanf(""), __builtin_inff(),
                                 -__builtin_inff() };
    char err[256] = "";
    for (int ranged = 0; ranged <= 1; ranged++) {
        for (int b = -1; b < 3; b++) {
            /* b = -1: all finite; else a bad value in the very last float */
            vals[N * DIM - 1] = b < 0 ? 1.0f : bad[b];
            psc_req *r = NULL;
            int rc = ranged ? psc_req_range(&sh, PSW_OP_PUSH_RANGE, 0, N, vals,
                                            NULL, &r, err, sizeof err)
                            : psc_req_keys(&sh, PSW_OP_PUSH, keys, N, vals,
                                           NULL, &r, err, sizeof err);
            EXPECT_INT(rc, 0, "push (%s)", err);
            EXPECT_INT(r->nparts > 1, 1, "parts: %d", r->nparts);
            EXPECT_INT(r->whole, b >= 0, "whole, ranged %d, bad value %d",
                       ranged, b);
            psc_req_free(r);
        }
    }
    /* A pull never; a one-part push with a NaN neither (nothing to share). */
    psc_req *r = NULL;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                           sizeof err), 0, "pull (%s)", err);
    EXPECT_INT(r->whole, 0, "whole of a pull");
    psc_req_free(r);
    r = NULL;
    vals[0] = __builtin_nanf("");
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, 1, vals, NULL, &r, err,
                           sizeof err), 0, "one-row push (%s)", err);
    EXPECT_INT(r->nparts, 1, "parts of one row");
    EXPECT_INT(r->whole, 0, "whole of a one-part push");
    psc_req_free(r);
}

/* ---- replies -------------------------------------------------------- */

/* Answers every part of a pulling request, last part first, as a server
 * would: rows row_val(key) at an odd address. Checks that only the last
 * answer completes the request, then that out holds every caller row. */
static void answer_and_check_scatter(psc_req *r, const uint64_t *keys,
                                     size_t n, const float *out, int ranged,
                                     uint64_t first)
{
    const uint32_t dim = r->dim;
    for (int k = r->nparts - 1; k >= 0; k--) {
        psc_part *p = &r->parts[k];
        size_t rows = ranged ? (size_t)p->msg.count : p->msg.nkeys;
        char *mem = xcalloc(rows * dim * sizeof(float) + 1, 1);
        char *v = mem + 1;
        for (size_t i = 0; i < rows; i++) {
            uint64_t key = ranged ? p->msg.first + i
                                  : psw_key_at(p->msg.keys, i);
            for (uint32_t j = 0; j < dim; j++) {
                float f = row_val(key, j);
                memcpy(v + (i * dim + j) * sizeof f, &f, sizeof f);
            }
        }
        psw_msg m;
        memset(&m, 0, sizeof m);
        m.op = PSW_OP_REPLY;
        m.ts = p->msg.ts;
        m.part = p->msg.part;
        m.status = PSW_OK;
        m.vals = v;
        m.vals_len = rows * dim * sizeof(float);
        EXPECT_INT(psc_part_reply(p, &m, NULL), k == 0, "reply to part %d of %d: "
                   "completed", k, r->nparts);
        EXPECT_INT(r->pending, k, "pending after the reply to part %d", k);
        free(mem);
    }
    EXPECT_INT(r->status, PS_OK, "status after all OK replies");
    EXPECT_PTR(r->error, NULL, "error after all OK replies");
    for (size_t i = 0; i < n; i++) {
        uint64_t key = ranged ? first + i : keys[i];
        for (uint32_t j = 0; j < dim; j++)
            EXPECT_FLOAT(out[i * dim + j], row_val(key, j), "out row %zu "
                         "(key %llu) col %u", i, (unsigned long long)key, j);
    }
}

static void test_pull_reply_scatters_rows_and_completes_on_last_part(
    void **state)
{
    (void)state;
    enum { N = 120, DIM = 3 };
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    char err[256] = "";
    psc_req *r = NULL;

    /* Keyed, 2 nodes, repeated keys: through pos. */
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    fill_keys_vals(keys, vals, N, DIM);
    keys[7] = keys[0];
    for (size_t i = 0; i < N * DIM; i++)
        out[i] = -12345.0f;
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSHPULL, keys, N, vals, out, &r, err,
                           sizeof err), 0, "pushpull (%s)", err);
    EXPECT_INT(r->nparts, 2, "parts");
    answer_and_check_scatter(r, keys, N, out, 0, 0);
    psc_req_free(r);

    /* Keyed, one node: rows land in order. */
    psc_shape one = shape_make(&t, 1, 16);
    for (size_t i = 0; i < N * DIM; i++)
        out[i] = -12345.0f;
    EXPECT_INT(psc_req_keys(&one, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                           sizeof err), 0, "pull on 1 node (%s)", err);
    answer_and_check_scatter(r, keys, N, out, 0, 0);
    psc_req_free(r);

    /* Range over 2 nodes: each part's slice. */
    psw_table_desc d = desc_make(1, DIM, 1000);
    psc_shape dsh = shape_make(&d, 2, 16);
    float *rout = xcalloc(980 * DIM, sizeof(float));
    EXPECT_INT(psc_req_range(&dsh, PSW_OP_PULL_RANGE, 10, 980, NULL, rout, &r,
                            err, sizeof err), 0, "pull_range (%s)", err);
    answer_and_check_scatter(r, NULL, 980, rout, 1, 10);
    psc_req_free(r);
    free(rout);
}

static void test_pull_reply_over_2_nodes_scatters_through_pos(void **state)
{
    (void)state;
    enum { N = 120, DIM = 3 };
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    char err[256] = "";
    psc_req *r = NULL;
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 2, 16);
    fill_keys_vals(keys, vals, N, DIM);
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                           sizeof err), 0, "pull (%s)", err);
    answer_and_check_scatter(r, keys, N, out, 0, 0);
    psc_req_free(r);
}

/* A keyed push of spread keys over `nnodes` nodes, one part per node. */
static psc_req *push_request(int nnodes, uint64_t *keys, float *vals,
                            size_t n, uint32_t dim)
{
    psw_table_desc t = desc_make(0, dim, 0);
    psc_shape sh = shape_make(&t, nnodes, 16);
    fill_keys_vals(keys, vals, n, dim);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_keys(&sh, PSW_OP_PUSH, keys, n, vals, NULL, &r, err,
                           sizeof err), 0, "push (%s)", err);
    EXPECT_INT(r->nparts, nnodes, "parts of a push over %d nodes", nnodes);
    return r;
}

static psw_msg reply_msg(const psc_part *p, int status, const char *text,
                         size_t text_len)
{
    psw_msg m;
    memset(&m, 0, sizeof m);
    m.op = PSW_OP_REPLY;
    m.ts = p->msg.ts;
    m.part = p->msg.part;
    m.status = status;
    m.text = text;
    m.text_len = text_len;
    return m;
}

static void test_push_ok_replies_complete_request_without_error(
    void **state)
{
    (void)state;
    uint64_t keys[100];
    float vals[100 * 2];
    psc_req *r = push_request(2, keys, vals, 100, 2);
    psw_msg m = reply_msg(&r->parts[0], PSW_OK, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 0, "first of 2 replies");
    m = reply_msg(&r->parts[1], PSW_OK, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[1], &m, NULL), 1, "second of 2 replies");
    EXPECT_INT(r->status, PS_OK, "status");
    EXPECT_PTR(r->error, NULL, "error");
    psc_req_free(r);
}

/* A status below every code this client knows (a newer psd's) reaches
 * the caller as PS_EPROTO, with the code and the node's reason. */
static void test_an_unknown_status_is_a_protocol_error_with_its_code(
    void **state)
{
    (void)state;
    uint64_t keys[10];
    float vals[10];
    psc_req *r = push_request(1, keys, vals, 10, 1);
    const char *wire = "a reason from the future";
    psw_msg m = reply_msg(&r->parts[0], PS_EFULL - 1, wire, strlen(wire));
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 1, "the only reply");
    EXPECT_INT(r->status, PS_EPROTO, "status");
    EXPECT_SUBSTR(r->error, "answered status -16, which this client does not "
                  "know: a reason from the future", "its text");
    psc_req_free(r);
}

static void test_error_reply_sets_status_and_text_and_later_ok_keeps_it(
    void **state)
{
    (void)state;
    uint64_t keys[200];
    float vals[200 * 2];
    psc_req *r = push_request(3, keys, vals, 200, 2);
    /* The text is a view of text_len bytes, not NUL-terminated. */
    const char *wire = "shard 3 is owned by node 1#garbage";
    psw_msg m = reply_msg(&r->parts[1], PSW_ENOTOWNER, wire, 26);
    EXPECT_INT(psc_part_reply(&r->parts[1], &m, NULL), 0, "error reply, 1 of 3");
    EXPECT_INT(r->status, PS_ENOTOWNER, "status after the error reply");
    EXPECT_STR(r->error, "shard 3 is owned by node 1", "error text");

    /* Named by node when the request went to several (a trial's max_rows
     * refusal said "on this node" of a push to three). */
    {
        uint64_t k2[200];
        float v2[200 * 2];
        psc_req *q = push_request(3, k2, v2, 200, 2);
        psw_msg e = reply_msg(&q->parts[1], PSW_EFULL, "holds 9 rows on "
                              "this node", 25);
        psc_part_reply(&q->parts[1], &e, "127.0.0.2:13002");
        char want[120];
        snprintf(want, sizeof want, "node %d (127.0.0.2:13002): holds 9 "
                 "rows on this node", q->parts[1].node);
        EXPECT_STR(q->error, want, "a refusal of one of several nodes");
        psc_req_free(q);
    }
    /* A push part sent more than once: the refusal answers the copy last
     * sent, and an earlier one, on a connection since lost, may have been
     * applied (a trial: a refusal at the limits read as not applied, and
     * the rows were there). */
    {
        uint64_t k2[200];
        float v2[200 * 2];
        psc_req *q = push_request(3, k2, v2, 200, 2);
        q->parts[1].sends = 2;
        psw_msg e = reply_msg(&q->parts[1], PSW_EBUSY, "at the limits", 13);
        psc_part_reply(&q->parts[1], &e, NULL);
        EXPECT_STR(q->error, "at the limits (an earlier copy of this part "
                   "was sent too, and may have been applied)",
                   "a refusal of a part sent twice");
        EXPECT_INT(q->maybe, 1, "parts that may have been applied");
        psc_req_free(q);
    }

    m = reply_msg(&r->parts[2], PSW_EKEY, "another", 7);
    EXPECT_INT(psc_part_reply(&r->parts[2], &m, NULL), 0, "error reply, 2 of 3");
    EXPECT_INT(r->status, PS_ENOTOWNER, "status after a second error");
    EXPECT_STR(r->error, "shard 3 is owned by node 1",
               "error text after a second error");

    m = reply_msg(&r->parts[0], PSW_OK, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 1, "OK reply, 3 of 3");
    EXPECT_INT(r->status, PS_ENOTOWNER, "status after a later OK");
    EXPECT_STR(r->error, "shard 3 is owned by node 1",
               "error text after a later OK");
    psc_req_free(r);

    /* A node's text reaches terminals: its control bytes do not. */
    r = push_request(2, keys, vals, 200, 2);
    m = reply_msg(&r->parts[0], PSW_EKEY, "bad\x1b[2Jkey\n\x7f\xc3\xa9", 14);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 0, "error reply with ESC");
    EXPECT_STR(r->error, "bad?[2Jkey??\xc3\xa9", "error text cleaned");
    psc_req_free(r);
    /* C1's CSI written as UTF-8 acts in some terminals too. */
    r = push_request(2, keys, vals, 200, 2);
    m = reply_msg(&r->parts[0], PSW_EKEY, "a\xc2\x9b" "2Jb\xc2\xa0", 8);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 0, "error reply with CSI");
    EXPECT_STR(r->error, "a??2Jb\xc2\xa0", "C1 cleaned, NBSP kept");
    psc_req_free(r);

    /* An error reply without text still sets the status. */
    r = push_request(2, keys, vals, 200, 2);
    m = reply_msg(&r->parts[0], PSW_ESERVER, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 0, "textless error reply");
    EXPECT_INT(r->status, PS_ESERVER, "status");
    m = reply_msg(&r->parts[1], PSW_OK, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[1], &m, NULL), 1, "OK reply, 2 of 2");
    EXPECT_INT(r->status, PS_ESERVER, "status after a later OK");
    psc_req_free(r);
}

static void test_reply_with_wrong_payload_size_is_eproto(void **state)
{
    (void)state;
    enum { N = 10, DIM = 3 };
    psw_table_desc t = desc_make(0, DIM, 0);
    psc_shape sh = shape_make(&t, 1, 16);
    uint64_t keys[N];
    float vals[N * DIM], out[N * DIM];
    fill_keys_vals(keys, vals, N, DIM);
    for (size_t i = 0; i < N * DIM; i++)
        out[i] = -12345.0f;
    float rows[(N + 1) * DIM] = { 0 };
    const size_t sizes[3] = { (N - 1) * DIM * sizeof(float),
                              (N + 1) * DIM * sizeof(float), 0 };
    for (size_t s = 0; s < 3; s++) {
        psc_req *r = NULL;
        char err[256] = "";
        EXPECT_INT(psc_req_keys(&sh, PSW_OP_PULL, keys, N, NULL, out, &r, err,
                               sizeof err), 0, "pull (%s)", err);
        psw_msg m = reply_msg(&r->parts[0], PSW_OK, NULL, 0);
        m.vals = (const char *)rows;
        m.vals_len = sizes[s];
        EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 1, "reply of %zu bytes "
                   "for %d rows: completed", sizes[s], N);
        EXPECT_INT(r->status, PS_EPROTO, "status after %zu bytes", sizes[s]);
        EXPECT_SUBSTR(r->error, "expected", "error text");
        for (size_t i = 0; i < N * DIM; i++)
            EXPECT_FLOAT(out[i], -12345.0f, "out[%zu] after a bad reply", i);
        psc_req_free(r);
    }

    /* The same for a range part. */
    psw_table_desc d = desc_make(1, DIM, 1000);
    psc_shape dsh = shape_make(&d, 1, 16);
    psc_req *r = NULL;
    char err[256] = "";
    EXPECT_INT(psc_req_range(&dsh, PSW_OP_PULL_RANGE, 0, N, NULL, out, &r, err,
                            sizeof err), 0, "pull_range (%s)", err);
    psw_msg m = reply_msg(&r->parts[0], PSW_OK, NULL, 0);
    m.vals = (const char *)rows;
    m.vals_len = (N + 1) * DIM * sizeof(float);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 1, "oversized range reply");
    EXPECT_INT(r->status, PS_EPROTO, "status");
    psc_req_free(r);
}

static void test_part_fail_completes_request_and_keeps_first_error(
    void **state)
{
    (void)state;
    uint64_t keys[100];
    float vals[100 * 2];
    psc_req *r = push_request(2, keys, vals, 100, 2);
    EXPECT_INT(psc_part_fail(&r->parts[1], PS_ETIMEDOUT, "no answer from "
                            "node 1"), 0, "first failure of 2 parts");
    EXPECT_INT(r->status, PS_ETIMEDOUT, "status");
    EXPECT_STR(r->error, "no answer from node 1", "error text");
    EXPECT_INT(psc_part_fail(&r->parts[0], PS_ECONN, "connection lost"), 1,
               "second failure of 2 parts");
    EXPECT_INT(r->status, PS_ETIMEDOUT, "status after a second failure");
    EXPECT_STR(r->error, "no answer from node 1",
               "error text after a second failure");
    psc_req_free(r);

    /* An OK reply, then a failure: the failure completes it. */
    r = push_request(2, keys, vals, 100, 2);
    psw_msg m = reply_msg(&r->parts[0], PSW_OK, NULL, 0);
    EXPECT_INT(psc_part_reply(&r->parts[0], &m, NULL), 0, "OK reply, 1 of 2");
    EXPECT_INT(psc_part_fail(&r->parts[1], PS_ECONN, "connection lost"), 1,
               "failure, 2 of 2");
    EXPECT_INT(r->status, PS_ECONN, "status");
    EXPECT_STR(r->error, "connection lost", "error text");
    psc_req_free(r);
}

static int callbacks;
static int last_cb_status;

static void count_cb(ps_ts ts, int status, void *arg)
{
    (void)ts;
    (void)arg;
    callbacks++;
    last_cb_status = status;
}

static void test_customer_stamps_timestamps_in_order_and_queues_every_part(
    void **state)
{
    (void)state;
    psc_customer cu;
    char err[128];
    uint64_t keys[100];
    float vals[100 * 2];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    psc_req *a = push_request(2, keys, vals, 100, 2);
    psc_req *b = push_request(2, keys, vals, 100, 2);
    int na = a->nparts, nb = b->nparts;
    EXPECT_INT(psc_customer_submit(&cu, a, NULL, NULL, 1, err, sizeof err),
               1, "first timestamp");
    EXPECT_INT(psc_customer_submit(&cu, b, NULL, NULL, 1, err, sizeof err),
               2, "second timestamp");
    int closing = -1, k = 0;
    ps_ts abandon = -1;
    for (psc_part *p = psc_customer_take(&cu, &closing, &abandon); p;
         p = p->next, k++)
        EXPECT_U64(p->msg.ts, k < na ? 1 : 2, "queued part %d: ts", k);
    EXPECT_INT(k, na + nb, "queued parts");
    EXPECT_INT(closing, 0, "closing");
    EXPECT_INT((int)abandon, 0, "abandon");
    EXPECT_PTR(psc_customer_take(&cu, &closing, &abandon), NULL, "a second take");
    for (int i = 0; i < na; i++)
        if (psc_part_fail(&a->parts[i], PS_ECONN, "gone"))
            psc_customer_complete(&cu, a);
    for (int i = 0; i < nb; i++)
        if (psc_part_fail(&b->parts[i], PS_ECONN, "gone"))
            psc_customer_complete(&cu, b);
    EXPECT_INT((int)cu.reqs.n, 0, "requests still tracked");
    psc_customer_destroy(&cu);
}

/* A worker's push to a bsp table is stamped, as the Customer queues it,
 * with the clock it counts in: one past the largest CLOCK queued before
 * it, in the order each connection keeps (a push made by another thread
 * while ps_clock ran was stamped from the caller's count, which may not
 * be the order the nodes saw: a review). A request completes with its
 * step counted as pushed only when a part was applied. */
static void test_customer_stamps_a_bsp_push_with_its_clock(void **state)
{
    (void)state;
    psc_customer cu;
    char err[128];
    uint64_t keys[8];
    float vals[8];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    psc_req *a = push_request(2, keys, vals, 8, 1), *k = NULL;
    psc_req *b = push_request(2, keys, vals, 8, 1);
    a->step = b->step = 1;                   /* as client.c marks them */
    assert_int_equal(psc_req_control(2, -1, PSW_OP_CLOCK, 7, &k), 0);
    EXPECT_INT(psc_customer_submit(&cu, a, NULL, NULL, 1, err, sizeof err),
               1, "push a");
    EXPECT_INT(psc_customer_submit(&cu, k, NULL, NULL, 1, err, sizeof err),
               2, "CLOCK 7");
    EXPECT_INT(psc_customer_submit(&cu, b, NULL, NULL, 1, err, sizeof err),
               3, "push b");
    EXPECT_U64(a->step, 1, "a, before any CLOCK");
    EXPECT_U64(b->step, 8, "b, after CLOCK 7");
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    for (int i = 0; i < 2; i++) {
        psw_msg m = reply_msg(&b->parts[i], PSW_OK, NULL, 0);
        if (psc_part_fail(&a->parts[i], PS_ECONN, "never sent"))
            psc_customer_complete(&cu, a);
        if (psc_part_fail(&k->parts[i], PS_ECONN, "never sent"))
            psc_customer_complete(&cu, k);
        EXPECT_U64(cu.pushed_step, 0, "a, never applied");
        if (psc_part_reply(&b->parts[i], &m, NULL))
            psc_customer_complete(&cu, b);
    }
    EXPECT_U64(cu.pushed_step, 8, "b applied");
    psc_customer_destroy(&cu);
}

/* A failure's detail longer than the Customer keeps loses its middle,
 * not its end: the end says whether a push was applied in part. */
static void test_customer_keeps_the_start_and_end_of_a_long_failure(
    void **state)
{
    (void)state;
    psc_customer cu;
    char err[2048] = "", text[1300];
    uint64_t keys[10];
    float vals[10];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    /* Longer than PSC_TEXT_MAX: a node's reason is shorter, but several
     * nodes' reasons with the request's own notes may not be. */
    int n = snprintf(text, sizeof text, "request 1: node 1 said ");
    memset(text + n, 'x', 1100);
    snprintf(text + n + 1100, sizeof text - (size_t)n - 1100,
             " (it was applied in part)");
    psc_req *bad = push_request(1, keys, vals, 10, 1);
    ps_ts t = psc_customer_submit(&cu, bad, NULL, NULL, 1, err, sizeof err);
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    EXPECT_INT(psc_part_fail(&bad->parts[0], PS_ETIMEDOUT, text), 1,
               "failure completes");
    psc_customer_complete(&cu, bad);
    for (int k = 0; k < 2; k++) {
        int st = k ? psc_customer_wait_all(&cu, -1, err, sizeof err)
                   : psc_customer_wait(&cu, t, -1, err, sizeof err);
        EXPECT_INT(st, PS_ETIMEDOUT, "%s", k ? "wait_all" : "wait");
        const char *end = " (it was applied in part)";
        size_t len = strlen(err);
        if (strncmp(err, "request 1: node 1 said xxx", 26) ||
            len < strlen(end) || strcmp(err + len - strlen(end), end) ||
            !strstr(err, "x ... x") || len >= sizeof cu.first_error_text)
            fail_msg("%s kept \"%s\" (%zu bytes)", k ? "wait_all" : "wait",
                     err, len);
    }
    psc_customer_close(&cu);
    psc_customer_destroy(&cu);
}

/* A push over two nodes whose parts are answered m0 and m1: its status,
 * with what its wait said in err. */
static int two_part_push(const psw_msg *m0, const psw_msg *m1, char *err,
                         size_t errlen)
{
    psc_customer cu;
    uint64_t keys[64];
    float vals[64];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    psc_req *r = push_request(2, keys, vals, 64, 1);
    ps_ts t = psc_customer_submit(&cu, r, NULL, NULL, 1, err, errlen);
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    /* 1 once the last part is answered. */
    EXPECT_INT(psc_part_reply(&r->parts[0], m0, NULL), 0, "part 0 answered");
    EXPECT_INT(psc_part_reply(&r->parts[1], m1, NULL), 1, "part 1 answered");
    psc_customer_complete(&cu, r);
    int rc = psc_customer_wait(&cu, t, -1, err, errlen);
    psc_customer_close(&cu);
    psc_customer_destroy(&cu);
    return rc;
}

/* Fails unless err ends with end. */
static void expect_ending(int k, const char *err, const char *end)
{
    size_t len = strlen(err), el = strlen(end);
    if (len < el || strcmp(err + len - el, end))
        fail_msg("case %d: \"%s\", want it to end \"%s\"", k, err, end);
}

/* A push over two nodes whose parts both failed: the error names one
 * node, and read alone it passed for the only part that failed (a
 * partition trial). The ending counts them, and says which may have
 * landed. */
static void test_a_push_whose_parts_all_failed_says_so(void **state)
{
    (void)state;
    static const struct {
        int status0, status1;
        const char *end;
    } cases[] = {
        { PSW_EBUSY, PSW_EBUSY, " (all 2 of its parts failed: none was "
          "applied)" },
        { PSW_ESERVER, PSW_ESERVER, " (all 2 of its parts failed, and each "
          "may have been applied)" },
        { PSW_EBUSY, PSW_ESERVER, " (all 2 of its parts failed; 1 of them "
          "may have been applied)" },
    };
    for (int k = 0; k < 3; k++) {
        psw_msg m[2];
        for (int i = 0; i < 2; i++) {
            int st = i ? cases[k].status1 : cases[k].status0;
            const char *text = st == PSW_ESERVER ? PSW_FORGOT_TEXT " push 1"
                                                 : "this node remembers 9 "
                                                   "pushes of this client";
            m[i] = (psw_msg){ .status = st, .text = text,
                              .text_len = strlen(text) };
        }
        char err[1024] = "";
        EXPECT_INT(two_part_push(&m[0], &m[1], err, sizeof err),
                   cases[k].status0, "case %d", k);
        expect_ending(k, err, cases[k].end);
    }
}

/* A push over two nodes, one part applied, the other refused by a node
 * that forgot whether it applied it (PSW_FORGOT_TEXT): the whole may have
 * landed, so the ending says "or whole"; refused at a limit (PS_EBUSY,
 * not applied), it says "in part" alone. */
static void test_a_part_a_node_forgot_counts_as_perhaps_applied(
    void **state)
{
    (void)state;
    static const struct {
        int status;
        const char *text, *end;
    } cases[] = {
        { PSW_ESERVER, PSW_FORGOT_TEXT " push 1: ...",
          "it was applied in part, or whole)" },
        { PSW_EBUSY, "this node remembers 9 pushes of this client ...",
          "(other parts of this push were applied: it was applied in "
          "part)" },
    };
    for (int k = 0; k < 2; k++) {
        psw_msg ok = { .status = PSW_OK };
        psw_msg no = { .status = cases[k].status, .text = cases[k].text,
                       .text_len = strlen(cases[k].text) };
        char err[1024] = "";
        EXPECT_INT(two_part_push(&ok, &no, err, sizeof err),
                   cases[k].status, "case %d", k);
        expect_ending(k, err, cases[k].end);
    }
}

static void test_customer_remembers_failures_for_wait_and_wait_all(
    void **state)
{
    (void)state;
    psc_customer cu;
    char err[256] = "";
    uint64_t keys[10];
    float vals[10];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    callbacks = 0;
    psc_req *ok = push_request(1, keys, vals, 10, 1);
    psc_req *bad = push_request(1, keys, vals, 10, 1);
    ps_ts t1 = psc_customer_submit(&cu, ok, count_cb, NULL, 1, err,
                                   sizeof err);
    ps_ts t2 = psc_customer_submit(&cu, bad, count_cb, NULL, 1, err,
                                   sizeof err);
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    psw_msg reply = { .op = PSW_OP_REPLY, .status = PS_OK };
    EXPECT_INT(psc_part_reply(&ok->parts[0], &reply, NULL), 1, "ok completes");
    psc_customer_complete(&cu, ok);
    EXPECT_INT(psc_part_fail(&bad->parts[0], PS_ETIMEDOUT, "no reply"), 1,
               "failure completes");
    psc_customer_complete(&cu, bad);
    EXPECT_INT(callbacks, 2, "callbacks run");
    EXPECT_INT(last_cb_status, PS_ETIMEDOUT, "status the callback saw");
    EXPECT_INT(psc_customer_wait(&cu, t1, -1, err, sizeof err), PS_OK,
               "wait for the good one");
    EXPECT_INT(psc_customer_wait(&cu, t2, -1, err, sizeof err), PS_ETIMEDOUT,
               "wait for the failed one");
    EXPECT_STR(err, "no reply", "its detail");
    EXPECT_INT(psc_customer_wait(&cu, 3, -1, err, sizeof err), PS_EINVAL,
               "wait for a timestamp never issued");
    EXPECT_INT(psc_customer_wait_all(&cu, -1, err, sizeof err), PS_ETIMEDOUT,
               "first wait_all");
    EXPECT_SUBSTR(err, "request 2: no reply", "its detail");
    EXPECT_INT(psc_customer_wait_all(&cu, -1, err, sizeof err), PS_OK,
               "second wait_all");
    psc_customer_close(&cu);
    psc_req *late = push_request(1, keys, vals, 10, 1);
    EXPECT_INT(psc_customer_submit(&cu, late, count_cb, NULL, 1, err,
                                   sizeof err), PS_ECLOSED,
               "a submit after close");
    EXPECT_INT(callbacks, 2, "callbacks run (none for a refused request)");
    psc_customer_destroy(&cu);
}


/* A thread in psc_customer_wait for request ts (with a limit of 10 s),
 * or in psc_customer_wait_all when ts is 0, while the test completes
 * requests. */
typedef struct wait_arg {
    psc_customer *cu;
    ps_ts ts;
    int status;
    int done;                    /* atomic */
} wait_arg;

static void *wait_thread(void *p)
{
    wait_arg *a = p;
    char err[256];
    a->status = a->ts ? psc_customer_wait(a->cu, a->ts, 10000, err,
                                          sizeof err)
                      : psc_customer_wait_all(a->cu, -1, err, sizeof err);
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void sleep_1ms(void)
{
    struct timespec ts = { 0, 1000000L };
    nanosleep(&ts, NULL);
}

static int wait_flag(const int *flag, int ms)
{
    for (int t = 0; t < ms && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); t++)
        sleep_1ms();
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

static void complete_all_parts(psc_customer *cu, psc_req *r)
{
    psw_msg reply = { .op = PSW_OP_REPLY, .status = PS_OK };
    int n = r->nparts;           /* the last part's completion frees r */
    for (int i = 0; i < n; i++)
        if (psc_part_reply(&r->parts[i], &reply, NULL))
            psc_customer_complete(cu, r);
}

/* psclient.h: ps_wait_all "blocks until every request issued so far has
 * completed". A request another thread issues after the call must not
 * hold it: with a trainer thread that always keeps one request in
 * flight, waiting for "no request at all" would never return. */
static void test_wait_all_returns_when_requests_issued_before_it_complete(
    void **state)
{
    (void)state;
    psc_customer cu;
    char err[256] = "";
    uint64_t keys[10];
    float vals[10];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    psc_req *before = push_request(1, keys, vals, 10, 1);
    psc_customer_submit(&cu, before, NULL, NULL, 1, err, sizeof err);
    wait_arg a = { &cu, 0, -99, 0 };
    pthread_t th;
    EXPECT_INT(pthread_create(&th, NULL, wait_thread, &a), 0, "thread");
    /* Until the waiter sleeps inside wait_all, the next request would not
     * yet be "issued after" its call. */
    for (int t = 0; t < 5000 && !psc_customer_waited(&cu); t++)
        sleep_1ms();
    EXPECT_INT(psc_customer_waited(&cu), 1, "wait_all is waiting");
    psc_req *after = push_request(1, keys, vals, 10, 1);
    psc_customer_submit(&cu, after, NULL, NULL, 1, err, sizeof err);
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    complete_all_parts(&cu, before);
    int returned = wait_flag(&a.done, 2000);
    complete_all_parts(&cu, after);  /* lets an unfixed wait_all end */
    pthread_join(th, NULL);
    EXPECT_INT(returned, 1, "wait_all returned while a request issued after "
               "it was still in flight");
    EXPECT_INT(a.status, PS_OK, "its status");
    psc_customer_destroy(&cu);
}

/* Waiters sleep on one of PSC_WAIT_CVS condition variables, by ts, and
 * are woken after the I/O thread lets go of the lock (customer.c). With
 * three waiters on every one of them, completing the requests newest
 * first must wake each waiter as its own request completes, and no other:
 * waking one thread of a shared variable (a signal, not a broadcast)
 * could wake the wrong one and leave the right one asleep until its time
 * limit (10 s). */
static void test_waiters_sharing_a_wait_slot_each_wake_for_their_own(
    void **state)
{
    (void)state;
    enum { N = 3 * PSC_WAIT_CVS };
    psc_customer cu;
    char err[256] = "";
    uint64_t keys[4];
    float vals[4];
    static psc_stats stats;
    psc_customer_init(&cu, 1 << 20, &stats);
    psc_req *r[N + 1];
    wait_arg a[N + 1];
    pthread_t th[N + 1];
    for (int i = 1; i <= N; i++) {
        r[i] = push_request(1, keys, vals, 4, 1);
        EXPECT_INT(psc_customer_submit(&cu, r[i], NULL, NULL, 1, err,
                                       sizeof err), i, "timestamp");
    }
    int closing;
    ps_ts abandon;
    psc_customer_take(&cu, &closing, &abandon);
    for (int i = 1; i <= N; i++) {
        a[i] = (wait_arg){ &cu, i, -99, 0 };
        EXPECT_INT(pthread_create(&th[i], NULL, wait_thread, &a[i]), 0,
                   "thread");
    }
    for (int t = 0; t < 5000 &&
                    __atomic_load_n(&cu.sleepers, __ATOMIC_RELAXED) < N; t++)
        sleep_1ms();
    int asleep = __atomic_load_n(&cu.sleepers, __ATOMIC_RELAXED);
    /* Results first, asserts after every thread is joined: a failing
     * assert must not leave threads pointing into this frame. */
    int late = 0, early = 0, bad = 0;
    for (int i = N; i >= 1; i--) {
        complete_all_parts(&cu, r[i]);
        if (!wait_flag(&a[i].done, 2000) && !late)
            late = i;
        for (int k = 1; k < i; k++)
            if (__atomic_load_n(&a[k].done, __ATOMIC_ACQUIRE) && !early)
                early = k;
    }
    for (int i = 1; i <= N; i++) {
        pthread_join(th[i], NULL);
        if (a[i].status != PS_OK && !bad)
            bad = i;
    }
    psc_customer_destroy(&cu);
    EXPECT_INT(asleep, N, "threads asleep in wait");
    EXPECT_INT(late, 0, "a waiter not back 2 s after its request completed");
    EXPECT_INT(early, 0, "a waiter back before its request completed");
    EXPECT_INT(bad, 0, "a waiter whose status was not PS_OK");
}

int main(void)
{
    /* Line-buffered, so failure details (stderr) stay next to their test
     * line when both streams go to one pipe. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_keyed_push_over_2_nodes_puts_each_key_once_on_its_node),
        cmocka_unit_test(test_bufpool_keeps_large_buffers_within_its_limits),
        cmocka_unit_test(test_keyed_requests_reuse_pooled_buffers),
        cmocka_unit_test(
            test_keyed_pushpull_over_2_nodes_maps_pos_back_and_carries_vals),
        cmocka_unit_test(
            test_keyed_dense_over_4_nodes_puts_each_row_on_its_node),
        cmocka_unit_test(
            test_keyed_pull_over_2_nodes_maps_pos_back_to_caller_index),
        cmocka_unit_test(
            test_keys_all_on_one_node_make_one_part_borrowing_buffers),
        cmocka_unit_test(
            test_dense_key_past_last_row_returns_ekey_with_message),
        cmocka_unit_test(test_keyed_request_over_max_payload_is_cut_into_parts),
        cmocka_unit_test(
            test_range_over_2_nodes_covers_rows_once_one_shard_per_part),
        cmocka_unit_test(
            test_range_on_1_node_is_one_part_for_the_whole_range),
        cmocka_unit_test(test_refused_ranges_name_their_rows),
        cmocka_unit_test(test_wide_parts_fit_a_256_kib_frame_keyed_and_ranged),
        cmocka_unit_test(test_long_runs_on_one_node_borrow_the_callers_buffers),
        cmocka_unit_test(test_runs_past_the_part_limit_fall_back_to_groups),
        cmocka_unit_test(
            test_range_with_fewer_rows_than_shards_covers_each_row_once),
        cmocka_unit_test(test_range_parts_cover_small_tables_with_empty_shards),
        cmocka_unit_test(test_range_on_sparse_table_returns_einval),
        cmocka_unit_test(test_range_empty_or_past_end_is_refused),
        cmocka_unit_test(test_range_over_max_payload_is_cut_into_parts),
        cmocka_unit_test(test_push_with_nonfinite_value_keeps_its_parts_whole),
        cmocka_unit_test(test_a_large_push_is_read_for_nan_by_two_threads),
        cmocka_unit_test(
            test_pull_reply_scatters_rows_and_completes_on_last_part),
        cmocka_unit_test(test_pull_reply_over_2_nodes_scatters_through_pos),
        cmocka_unit_test(test_push_ok_replies_complete_request_without_error),
        cmocka_unit_test(
            test_error_reply_sets_status_and_text_and_later_ok_keeps_it),
        cmocka_unit_test(
            test_an_unknown_status_is_a_protocol_error_with_its_code),
        cmocka_unit_test(test_reply_with_wrong_payload_size_is_eproto),
        cmocka_unit_test(
            test_part_fail_completes_request_and_keeps_first_error),
        cmocka_unit_test(
            test_customer_stamps_timestamps_in_order_and_queues_every_part),
        cmocka_unit_test(test_customer_stamps_a_bsp_push_with_its_clock),
        cmocka_unit_test(
            test_customer_remembers_failures_for_wait_and_wait_all),
        cmocka_unit_test(
            test_customer_keeps_the_start_and_end_of_a_long_failure),
        cmocka_unit_test(
            test_a_part_a_node_forgot_counts_as_perhaps_applied),
        cmocka_unit_test(test_a_push_whose_parts_all_failed_says_so),
        cmocka_unit_test(
            test_wait_all_returns_when_requests_issued_before_it_complete),
        cmocka_unit_test(
            test_waiters_sharing_a_wait_slot_each_wake_for_their_own),
    };
    const int total = (int)(sizeof tests / sizeof tests[0]);
    int failed = cmocka_run_group_tests_name("slice", tests, NULL, NULL);

    printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
