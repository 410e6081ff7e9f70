/* Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/): small
 * valid inputs built with proto/'s own encoders, so the seeds follow the
 * protocol as it changes. Frames use the values of PROTOCOL.md section 13;
 * fuzz_request's bodies are written for its fixed cluster
 * (request_conf.h). `make fuzz-seeds` rewrites tests/fuzz/corpus with it,
 * and tests/test_fuzz_regressions.sh checks that the committed corpus is
 * what it writes. Usage: make_seeds DIR (DIR/fuzz_frame/... are created). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "disk.h"
#include "../../daemon/secret.h"
#include "fuzz.h"
#include "request_conf.h"
#include "../../daemon/journal.h"
#include "../../daemon/log.h"
#include "../../daemon/request.h"
#include "../../daemon/snapshot.h"
#include "../../proto/frame.h"
#include "../../proto/layout.h"
#include "../../proto/msg.h"
#include "../../proto/status.h"

static const char *outdir;
static psw_out out;

/* A byte string being built (a stream of frames, or of bodies). */
typedef struct bytes {
    char *p;
    size_t n;
} bytes;

static void die(const char *what)
{
    fprintf(stderr, "make_seeds: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void append(bytes *b, const void *p, size_t n)
{
    char *np = realloc(b->p, b->n + n + 1);
    if (!np)
        die("realloc");
    memcpy(np + b->n, p, n);
    b->p = np;
    b->n += n;
}

static void write_seed(const char *target, const char *name, const void *p,
                       size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", outdir, target);
    if (mkdir(path, 0777) && errno != EEXIST)
        die(path);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f))
        die(path);
}

/* ---- frames --------------------------------------------------------- */

static void begin(void)
{
    psw_out_reset(&out);
    psw_out_frame_begin(&out);
}

/* Closes the frame begun and returns it whole (length, body, CRC). */
static bytes end(void)
{
    bytes b = { 0 };
    psw_out_frame_end(&out);
    if (out.oom)
        die("packing");
    b.p = fuzz_flatten(&out, &b.n);
    if (!b.p)
        die("flatten");
    return b;
}

/* The body of a whole frame. */
static bytes body_of(bytes frame)
{
    bytes b = { 0 };
    append(&b, frame.p + PSW_FRAME_HDR,
           frame.n - PSW_FRAME_HDR - PSW_FRAME_CRC);
    return b;
}

static void keys_le(char *dst, const uint64_t *k, size_t n)
{
    if (n)
        memcpy(dst, k, 8 * n);       /* the host is little-endian (msg.h) */
}

static psw_msg req(int op, uint64_t ts, uint32_t part, uint32_t table)
{
    psw_msg m = { .op = op, .ts = ts, .part = part, .table = table };
    return m;
}

static void pack_keys(int op, uint64_t ts, uint32_t table, const uint64_t *k,
                      size_t n, const float *vals, size_t nvals)
{
    static char kb[8 * 1024];
    if (n > sizeof kb / 8) {
        fprintf(stderr, "make_seeds: %zu keys is too many\n", n);
        exit(1);
    }
    keys_le(kb, k, n);
    psw_msg m = req(op, ts, 0, table);
    m.keys = kb;
    m.nkeys = n;
    m.vals = (const char *)vals;
    m.vals_len = 4 * nvals;
    psw_pack_request(&out, &m);
}

static void pack_range(int op, uint64_t ts, uint32_t table, uint64_t first,
                       uint64_t count, const float *vals, size_t nvals)
{
    psw_msg m = req(op, ts, 0, table);
    m.first = first;
    m.count = count;
    m.vals = (const char *)vals;
    m.vals_len = 4 * nvals;
    psw_pack_request(&out, &m);
}

static void pack_control(int op, uint64_t ts, uint32_t part, uint64_t value)
{
    psw_msg m = req(op, ts, part, 0);
    m.value = value;
    psw_pack_request(&out, &m);
}

static void pack_hello(uint32_t version, uint64_t client, uint64_t inc,
                       int32_t worker, const char *token)
{
    psw_hello h = { version, client, inc, worker, token,
                    token ? strlen(token) : 0 };
    psw_pack_hello(&out, &h);
}

/* A HELLO_OK for the cluster of PROTOCOL.md section 13 (S = 16, 2 nodes,
 * table emb), with one more table of each other kind and mode. */
static void pack_hello_ok(int status, const char *text)
{
    char nodes[2][PSW_ADDR_MAX] = { "127.0.0.1:7070", "[::1]:7071" };
    psw_table_desc t[3] = {
        { 0, "emb", 0, 2, 0, PSW_CONS_ASYNC },
        { 1, "w", 1, 4, 10, PSW_CONS_BSP },
        { 2, "b", 1, 1, 3, PSW_CONS_SSP },
    };
    psw_cluster l = { .status = status, .version = PSW_VERSION,
                      .node_index = 0, .epoch = 0x1234567890abcdefULL,
                      .max_frame = 64 << 20, .shards = 16, .nnodes = 2,
                      .nodes = nodes, .ntables = 3, .tables = t,
                      .worker_clock = 3, .worker_barrier = 1,
                      .heartbeat_ms = 1000, .peer_timeout_ms = 4000,
                      /* accepted: version 3 with a proof; refused: the
                         14 fields of version 2 */
                      .proof_state = status == PSW_OK ? PSW_PROOF_SET
                                                      : PSW_PROOF_ABSENT };
    memset(l.proof, 0x5a, sizeof l.proof);
    snprintf(l.text, sizeof l.text, "%s", text);
    psw_pack_hello_ok(&out, &l);
}

/* The frames every wire target starts from, in PROTOCOL.md order. */
typedef struct named {
    const char *name;
    bytes frame;
} named;

static int wire_frames(named *f)
{
    static const uint64_t k2[] = { 7, 42 };
    static const float rows[] = { 0.5f, -1.0f, 0.25f, 2.0f };
    int n = 0;

    begin();
    pack_hello(PSW_VERSION, 0x0123456789abcdefULL, 1700000000000000000ULL,
               -1, NULL);
    f[n++] = (named){ "hello", end() };
    begin();
    pack_hello(PSW_VERSION, 7, 8, 0, "0123456789abcdef0123456789abcdef");
    f[n++] = (named){ "hello_worker_nonce", end() };
    begin();
    pack_hello(2, 7, 8, 0, "secret");
    f[n++] = (named){ "hello_v2_token", end() };
    begin();
    {
        psw_challenge ch = { .node_index = 1 };
        memset(ch.nonce, 0xab, sizeof ch.nonce);
        psw_pack_challenge(&out, &ch);
    }
    f[n++] = (named){ "challenge", end() };
    begin();
    {
        psw_auth_msg a = { "0123456789abcdef0123456789abcdef", 32 };
        psw_pack_auth(&out, &a);
    }
    f[n++] = (named){ "auth", end() };
    begin();
    {
        psw_auth_msg a = { NULL, 0 };
        psw_pack_auth(&out, &a);
    }
    f[n++] = (named){ "auth_nil", end() };
    begin();
    pack_hello_ok(PSW_OK, "");
    f[n++] = (named){ "hello_ok", end() };
    begin();
    pack_hello_ok(PSW_EINVAL, "worker 5 is out of range: the cluster has "
                  "workers = 2 (ids 0..1)");
    f[n++] = (named){ "hello_ok_refused", end() };
    begin();
    pack_keys(PSW_OP_PULL, 1, 0, k2, 2, NULL, 0);
    f[n++] = (named){ "pull", end() };
    begin();
    pack_control(PSW_OP_ACK, 0, 0, 5);
    pack_keys(PSW_OP_PULL, 1, 0, k2, 2, NULL, 0);
    f[n++] = (named){ "ack_pull", end() };
    begin();
    pack_keys(PSW_OP_PUSH, 2, 0, k2, 2, rows, 4);
    f[n++] = (named){ "push", end() };
    begin();
    pack_keys(PSW_OP_PUSHPULL, 3, 0, k2, 2, rows, 4);
    f[n++] = (named){ "pushpull", end() };
    begin();
    pack_range(PSW_OP_PUSH_RANGE, 4, 1, 2, 1, rows, 4);
    f[n++] = (named){ "push_range", end() };
    begin();
    pack_range(PSW_OP_PULL_RANGE, 5, 1, 1, 8, NULL, 0);
    f[n++] = (named){ "pull_range", end() };
    begin();
    memcpy(psw_pack_reply(&out, 1, 0, PSW_OK, NULL, sizeof rows, 0), rows,
           sizeof rows);
    f[n++] = (named){ "reply_rows", end() };
    begin();
    psw_pack_reply(&out, 3, 0, PSW_EKEY, "table 'w' has no row 12 "
                   "(rows = 10)", 0, 0);
    f[n++] = (named){ "reply_error", end() };
    begin();
    psw_pack_reply(&out, 1, 0, PSW_OK, NULL, 0, 0);
    psw_pack_reply(&out, 9, 0, PSW_OK, NULL, 0, 1);
    f[n++] = (named){ "reply_push_clock", end() };
    begin();
    pack_control(PSW_OP_CLOCK, 9, 0, 1);
    f[n++] = (named){ "clock", end() };
    begin();
    pack_control(PSW_OP_BARRIER, 10, 0, 1);
    f[n++] = (named){ "barrier", end() };
    begin();
    pack_control(PSW_OP_LEAVE, 11, 1, 0);
    f[n++] = (named){ "leave", end() };
    begin();
    pack_control(PSW_OP_PING, 0, 0, 0);
    f[n++] = (named){ "ping", end() };
    begin();
    psw_msg adm = req(PSW_OP_ADMIN, 12, 0, 0);
    adm.text = "stats";
    adm.text_len = 5;
    psw_pack_request(&out, &adm);
    f[n++] = (named){ "admin", end() };

    /* A frame as Python's msgpack.packb writes it: a fixarray, not array32. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_uint8(&pk, PSW_OP_PULL);
    msgpack_pack_uint8(&pk, 1);
    msgpack_pack_uint8(&pk, 0);
    msgpack_pack_uint8(&pk, 0);
    char kb[16];
    keys_le(kb, k2, 2);
    msgpack_pack_bin_with_body(&pk, kb, sizeof kb);
    bytes py = { 0 };
    unsigned char hdr[4], crc[4];
    fuzz_put_be32(hdr, (uint32_t)(sb.size + PSW_FRAME_CRC));
    fuzz_put_be32(crc, psw_crc32c(0, sb.data, sb.size));
    append(&py, hdr, 4);
    append(&py, sb.data, sb.size);
    append(&py, crc, 4);
    msgpack_sbuffer_destroy(&sb);
    f[n++] = (named){ "pull_fixarray", py };
    return n;
}

/* fuzz_frame: a selector byte (fuzz_frame.c) and a stream; fuzz_msg: a
 * body. */
static void wire_seeds(void)
{
    named f[32];
    int n = wire_frames(f);
    bytes all = { 0 };
    for (int i = 0; i < n; i++) {
        char sel = 0;
        bytes one = { 0 };
        append(&one, &sel, 1);
        append(&one, f[i].frame.p, f[i].frame.n);
        write_seed("fuzz_frame", f[i].name, one.p, one.n);
        free(one.p);
        bytes body = body_of(f[i].frame);
        write_seed("fuzz_msg", f[i].name, body.p, body.n);
        free(body.p);
        append(&all, f[i].frame.p, f[i].frame.n);
    }
    /* The whole stream under each cut, and with the pre-HELLO limit. */
    static const struct {
        const char *name;
        unsigned char sel;
    } cuts[] = {
        { "stream_whole", 0 }, { "stream_bytes", 1 },
        { "stream_halves", 2 | 15 << 3 }, { "stream_chunks4", 3 },
        { "stream_chunks4_small_limit", 3 | 4 },
    };
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        bytes s = { 0 };
        append(&s, &cuts[c].sel, 1);
        append(&s, all.p, all.n);
        write_seed("fuzz_frame", cuts[c].name, s.p, s.n);
        free(s.p);
    }
    free(all.p);
    for (int i = 0; i < n; i++)
        free(f[i].frame.p);

    /* Keys of PSW_REF_MIN bytes or more are referenced, not copied, when
     * fuzz_msg packs them again. */
    uint64_t keys[PSW_REF_MIN / 8 + 1];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        keys[i] = i;
    begin();
    pack_keys(PSW_OP_PULL, 6, 0, keys, sizeof keys / sizeof keys[0], NULL, 0);
    bytes fr = end(), body = body_of(fr);
    write_seed("fuzz_msg", "pull_referenced_keys", body.p, body.n);
    free(fr.p);
    free(body.p);
}

/* ---- fuzz_request ----------------------------------------------------- */

/* Sparse keys and dense rows of the fixed cluster that node 0 owns. */
static uint64_t owned_key(int nth)
{
    for (uint64_t k = 1;; k++)
        if (psw_node_of_shard(psw_sparse_shard_of(FUZZ_REQ_SHARDS, k),
                              FUZZ_REQ_NODES) == 0 && nth-- == 0)
            return k;
}

static uint64_t other_key(void)
{
    for (uint64_t k = 1;; k++)
        if (psw_node_of_shard(psw_sparse_shard_of(FUZZ_REQ_SHARDS, k),
                              FUZZ_REQ_NODES) != 0)
            return k;
}

/* A dense row of a table of `rows` rows that node `node` owns. */
static uint64_t dense_row(uint64_t rows, int node, int nth)
{
    for (uint64_t r = 0; r < rows; r++)
        if (psw_node_of_shard(psw_dense_shard_of(rows, FUZZ_REQ_SHARDS, r),
                              FUZZ_REQ_NODES) == node && nth-- == 0)
            return r;
    fprintf(stderr, "make_seeds: no row %d on node %d\n", nth, node);
    exit(1);
}

/* The body of the frame packed since begin(), appended to b. */
static void take_body(bytes *b)
{
    bytes fr = end(), body = body_of(fr);
    append(b, body.p, body.n);
    free(fr.p);
    free(body.p);
}

static void request_seeds(void)
{
    const char *t = "fuzz_request";
    float v[256];
    for (int i = 0; i < 256; i++)
        v[i] = 0.125f * (float)(i + 1);
    uint64_t s2[2] = { owned_key(0), owned_key(1) };
    uint64_t d2[2] = { dense_row(1000, 0, 0), dense_row(1000, 0, 1) };
    uint64_t b2[2] = { dense_row(10, 0, 0), dense_row(10, 0, 1) };
    uint64_t a1 = dense_row(3, 0, 0);
    bytes b;

    /* A reader's HELLO with every data and session op after it. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 1, 1, -1, NULL);
    pack_keys(PSW_OP_PUSH, 1, FUZZ_T_DENSE_SUM, d2, 2, v, 8);
    pack_keys(PSW_OP_PULL, 2, FUZZ_T_DENSE_SUM, d2, 2, NULL, 0);
    pack_keys(PSW_OP_PUSHPULL, 3, FUZZ_T_SPARSE_ADAGRAD, s2, 2, v, 16);
    pack_range(PSW_OP_PUSH_RANGE, 4, FUZZ_T_DENSE_SUM, d2[0], 2, v, 8);
    pack_range(PSW_OP_PULL_RANGE, 5, FUZZ_T_DENSE_SUM, d2[0], 2, NULL, 0);
    pack_control(PSW_OP_PING, 0, 0, 0);
    pack_control(PSW_OP_ACK, 0, 0, 3);
    pack_keys(PSW_OP_PUSH, 6, FUZZ_T_SPARSE_FTRL_SSP, s2, 2, v, 6);
    pack_keys(PSW_OP_PUSH, 7, FUZZ_T_SPARSE_SGD_BSP, s2, 2, v, 2);
    pack_keys(PSW_OP_PUSH, 8, FUZZ_T_DENSE_ASSIGN_SSP, &a1, 1, v, 1);
    pack_keys(PSW_OP_PUSHPULL, 9, FUZZ_T_SPARSE_ADAM, s2, 2, v, 4);
    pack_control(PSW_OP_LEAVE, 10, 0, 0);
    take_body(&b);
    write_seed(t, "reader_every_op", b.p, b.n);
    free(b.p);

    /* No HELLO: a reader with client_id 0. */
    b = (bytes){ 0 };
    begin();
    pack_keys(PSW_OP_PUSH, 1, FUZZ_T_SPARSE_ADAGRAD, s2, 2, v, 16);
    pack_keys(PSW_OP_PULL, 2, FUZZ_T_SPARSE_ADAGRAD, s2, 2, NULL, 0);
    take_body(&b);
    write_seed(t, "no_hello", b.p, b.n);
    free(b.p);

    /* bsp: worker 0 pushes and clocks (held), worker 1 does, releasing it. */
    b = (bytes){ 0 };
    for (int w = 0; w < 2; w++) {
        begin();
        pack_hello(PSW_VERSION, 10 + (uint64_t)w, 1, w, NULL);
        if (w == 0)              /* version 4: worker 1's first push */
            pack_control(PSW_OP_OPENED, 0, 0, 0);  /* takes it in */
        pack_keys(PSW_OP_PUSH, 1, FUZZ_T_DENSE_ADAM_BSP, b2, 2, v, 4);
        pack_keys(PSW_OP_PUSH, 2, FUZZ_T_SPARSE_SGD_BSP, s2, 1, v, 1);
        pack_range(PSW_OP_PUSH_RANGE, 3, FUZZ_T_DENSE_ADAM_BSP, b2[0], 2, v,
                   4);
        pack_control(PSW_OP_CLOCK, 4, 0, 1);
        pack_keys(PSW_OP_PULL, 5, FUZZ_T_DENSE_ADAM_BSP, b2, 2, NULL, 0);
        take_body(&b);
    }
    write_seed(t, "bsp_two_workers", b.p, b.n);
    free(b.p);

    /* ssp: worker 0 runs two clocks ahead, its pulls wait for worker 1. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 20, 1, 0, NULL);
    pack_control(PSW_OP_CLOCK, 1, 0, 1);
    pack_control(PSW_OP_CLOCK, 2, 0, 2);
    pack_keys(PSW_OP_PULL, 3, FUZZ_T_SPARSE_FTRL_SSP, s2, 2, NULL, 0);
    pack_range(PSW_OP_PULL_RANGE, 4, FUZZ_T_DENSE_ASSIGN_SSP, a1, 1, NULL, 0);
    pack_keys(PSW_OP_PUSHPULL, 5, FUZZ_T_DENSE_ASSIGN_SSP, &a1, 1, v, 1);
    take_body(&b);
    begin();
    pack_hello(PSW_VERSION, 21, 1, 1, NULL);
    pack_control(PSW_OP_CLOCK, 1, 0, 2);
    take_body(&b);
    write_seed(t, "ssp_held_pulls", b.p, b.n);
    free(b.p);

    /* Barriers, then a LEAVE that releases the other worker's CLOCK. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 30, 1, 0, NULL);
    pack_control(PSW_OP_BARRIER, 1, 0, 1);
    pack_control(PSW_OP_CLOCK, 2, 0, 1);
    take_body(&b);
    begin();
    pack_hello(PSW_VERSION, 31, 1, 1, NULL);
    pack_control(PSW_OP_BARRIER, 1, 0, 1);
    pack_control(PSW_OP_LEAVE, 2, 0, 0);
    take_body(&b);
    write_seed(t, "barrier_leave", b.p, b.n);
    free(b.p);

    /* Worker 0 leaves, and a new client takes its id: a rejoin. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 70, 1, 0, NULL);
    pack_control(PSW_OP_CLOCK, 1, 0, 3);
    pack_control(PSW_OP_LEAVE, 2, 0, 0);
    take_body(&b);
    begin();
    pack_hello(PSW_VERSION, 71, 1, 0, NULL);
    pack_control(PSW_OP_CLOCK, 1, 0, 1);
    take_body(&b);
    write_seed(t, "rejoin", b.p, b.n);
    free(b.p);

    /* A hundred new sparse keys: hash tables grow while holding rows, and
     * adam keeps a step per row. */
    uint64_t many[100];
    for (int i = 0; i < 100; i++)
        many[i] = owned_key(i);
    b = (bytes){ 0 };
    begin();
    pack_keys(PSW_OP_PUSH, 1, FUZZ_T_SPARSE_ADAM, many, 100, v, 200);
    pack_keys(PSW_OP_PULL, 2, FUZZ_T_SPARSE_ADAM, many, 100, NULL, 0);
    take_body(&b);
    write_seed(t, "many_keys", b.p, b.n);
    free(b.p);

    /* More pushes in flight than the exactly-once table first holds. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 80, 1, -1, NULL);
    for (int i = 0; i < 40; i++)
        pack_keys(PSW_OP_PUSH, (uint64_t)i + 1, FUZZ_T_DENSE_SUM, d2, 1, v, 4);
    pack_control(PSW_OP_ACK, 0, 0, 30);
    take_body(&b);
    write_seed(t, "dedup_many", b.p, b.n);
    free(b.p);

    /* A held CLOCK answered only when the other worker's grace runs out
     * after its connection closes (at the end of the input). */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 40, 1, 0, NULL);
    pack_control(PSW_OP_CLOCK, 1, 0, 1);
    take_body(&b);
    begin();
    pack_hello(PSW_VERSION, 41, 1, 1, NULL);
    take_body(&b);
    write_seed(t, "grace_release", b.p, b.n);
    free(b.p);

    /* Every error a well-formed request can get. */
    b = (bytes){ 0 };
    uint64_t far = 5000, theirs = dense_row(1000, 1, 0), ok1 = d2[0];
    uint64_t sk = other_key();
    begin();
    pack_keys(PSW_OP_PULL, 1, 99, s2, 1, NULL, 0);
    pack_keys(PSW_OP_PUSH, 2, FUZZ_T_DENSE_SUM, &ok1, 1, v, 3);
    pack_range(PSW_OP_PULL_RANGE, 3, FUZZ_T_DENSE_SUM, 0, 1000, NULL, 0);
    pack_range(PSW_OP_PULL_RANGE, 4, FUZZ_T_SPARSE_ADAGRAD, 0, 1, NULL, 0);
    pack_keys(PSW_OP_PULL, 5, FUZZ_T_DENSE_SUM, &far, 1, NULL, 0);
    pack_keys(PSW_OP_PULL, 6, FUZZ_T_DENSE_SUM, &theirs, 1, NULL, 0);
    pack_keys(PSW_OP_PULL, 7, FUZZ_T_SPARSE_ADAGRAD, &sk, 1, NULL, 0);
    pack_range(PSW_OP_PULL_RANGE, 8, FUZZ_T_DENSE_SUM, 0, 0, NULL, 0);
    pack_control(PSW_OP_CLOCK, 9, 0, 1);
    pack_control(PSW_OP_BARRIER, 10, 0, 1);
    take_body(&b);
    write_seed(t, "request_errors", b.p, b.n);
    free(b.p);

    /* Exactly-once: a repeated push, then pushes below the ACK mark. */
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 50, 2, -1, NULL);
    pack_keys(PSW_OP_PUSH, 3, FUZZ_T_SPARSE_ADAGRAD, s2, 1, v, 8);
    pack_keys(PSW_OP_PUSH, 3, FUZZ_T_SPARSE_ADAGRAD, s2, 1, v, 8);
    pack_keys(PSW_OP_PUSHPULL, 4, FUZZ_T_DENSE_SUM, d2, 1, v, 4);
    pack_keys(PSW_OP_PUSHPULL, 4, FUZZ_T_DENSE_SUM, d2, 1, v, 4);
    pack_control(PSW_OP_ACK, 0, 0, 5);
    pack_keys(PSW_OP_PUSH, 3, FUZZ_T_SPARSE_ADAGRAD, s2, 1, v, 8);
    pack_range(PSW_OP_PUSH_RANGE, 6, FUZZ_T_DENSE_SUM, d2[0], 1, v, 4);
    take_body(&b);
    write_seed(t, "dedup", b.p, b.n);
    free(b.p);

    /* Refused HELLOs: another version; a worker out of range. */
    b = (bytes){ 0 };
    begin();
    pack_hello(1, 60, 1, -1, NULL);
    take_body(&b);
    write_seed(t, "hello_old_version", b.p, b.n);
    free(b.p);
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 61, 1, 5, NULL);
    take_body(&b);
    write_seed(t, "hello_worker_out_of_range", b.p, b.n);
    free(b.p);

    /* Pulls whose rows add up past max_frame: the frame is refused. */
    b = (bytes){ 0 };
    begin();
    for (int i = 0; i < 5; i++)
        pack_range(PSW_OP_PULL_RANGE, 1, FUZZ_T_DENSE_SUM, d2[0], 60,
                   NULL, 0);
    take_body(&b);
    write_seed(t, "rows_over_max_frame", b.p, b.n);
    free(b.p);

    /* Enough error replies to need a second reply frame. */
    b = (bytes){ 0 };
    begin();
    for (int i = 0; i < 100; i++)
        pack_keys(PSW_OP_PULL, (uint64_t)i + 1, 99, NULL, 0, NULL, 0);
    take_body(&b);
    write_seed(t, "replies_past_one_frame", b.p, b.n);
    free(b.p);

    /* NaN and infinity: a push of two parts, one holding a NaN, is
     * refused whole, and so is its third part in a later frame; a range
     * push with an infinity is refused; a table that allows them takes
     * one. Body 1 comes from the other connection. */
    float bad[16];
    memcpy(bad, v, sizeof bad);
    bad[5] = NAN;
    float inf[8];
    memcpy(inf, v, sizeof inf);
    inf[7] = -INFINITY;
    uint64_t l1 = dense_row(4, 0, 0);
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 70, 1, -1, NULL);
    psw_msg part = req(PSW_OP_PUSH, 1, 0, FUZZ_T_SPARSE_ADAGRAD);
    part.keys = (const char *)s2;
    part.nkeys = 2;
    part.vals = (const char *)v;
    part.vals_len = 64;
    psw_pack_request(&out, &part);
    part.part = 1;
    part.vals = (const char *)bad;
    psw_pack_request(&out, &part);
    pack_range(PSW_OP_PUSH_RANGE, 2, FUZZ_T_DENSE_SUM, d2[0], 2, inf, 8);
    pack_keys(PSW_OP_PUSH, 3, FUZZ_T_DENSE_LOOSE, &l1, 1, bad + 5, 1);
    pack_keys(PSW_OP_PULL, 4, FUZZ_T_SPARSE_ADAGRAD, s2, 2, NULL, 0);
    take_body(&b);
    begin();
    pack_keys(PSW_OP_PULL, 1, FUZZ_T_DENSE_LOOSE, &l1, 1, NULL, 0);
    take_body(&b);
    begin();
    part.part = 2;
    part.vals = (const char *)v;
    psw_pack_request(&out, &part);
    take_body(&b);
    write_seed(t, "nonfinite_refused_whole", b.p, b.n);
    free(b.p);

    /* max_rows: 3 rows fit, a fourth key is refused, old keys and pulls
     * go on; on the bsp table the clock's new keys count too. */
    uint64_t s5[5];
    for (int i = 0; i < 5; i++)
        s5[i] = owned_key(i);
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 80, 1, -1, NULL);
    pack_keys(PSW_OP_PUSH, 1, FUZZ_T_SPARSE_CAPPED, s5, 3, v, 6);
    pack_keys(PSW_OP_PUSH, 2, FUZZ_T_SPARSE_CAPPED, s5 + 2, 2, v, 4);
    pack_keys(PSW_OP_PUSHPULL, 3, FUZZ_T_SPARSE_CAPPED, s5, 3, v, 6);
    pack_keys(PSW_OP_PULL, 4, FUZZ_T_SPARSE_CAPPED, s5, 5, NULL, 0);
    pack_keys(PSW_OP_PUSH, 5, FUZZ_T_SPARSE_SGD_BSP, s5, 4, v, 4);
    pack_keys(PSW_OP_PUSH, 6, FUZZ_T_SPARSE_SGD_BSP, s5 + 4, 1, v, 1);
    take_body(&b);
    write_seed(t, "max_rows", b.p, b.n);
    free(b.p);

    /* A push with ts 0 is refused; a pull with ts 0 is not. */
    b = (bytes){ 0 };
    begin();
    pack_keys(PSW_OP_PUSH, 0, FUZZ_T_DENSE_SUM, d2, 2, v, 8);
    pack_keys(PSW_OP_PULL, 0, FUZZ_T_DENSE_SUM, d2, 2, NULL, 0);
    take_body(&b);
    write_seed(t, "push_ts_zero", b.p, b.n);
    free(b.p);

    /* An operator's commands (fake_admin answers them by their bytes):
     * one whose answer goes in a frame of its own, past max_frame
     * ("stats": 7,870 bytes), one that fits beside the others ("layout":
     * 620), one refused ("xyz"), and end-job, the node's own, which
     * ends nothing here. */
    static const char *const cmds[] = { "stats", "layout", "xyz", "end-job" };
    b = (bytes){ 0 };
    begin();
    pack_hello(PSW_VERSION, 90, 1, -1, NULL);
    pack_keys(PSW_OP_PULL, 1, FUZZ_T_DENSE_SUM, d2, 2, NULL, 0);
    for (int i = 0; i < 4; i++) {
        psw_msg adm = req(PSW_OP_ADMIN, 2 + (uint64_t)i, 0, 0);
        adm.text = cmds[i];
        adm.text_len = strlen(cmds[i]);
        psw_pack_request(&out, &adm);
    }
    pack_keys(PSW_OP_PULL, 6, FUZZ_T_DENSE_SUM, d2, 2, NULL, 0);
    take_body(&b);
    write_seed(t, "admin", b.p, b.n);
    free(b.p);

    /* Workers of protocol version 3 (no OPENED: joined at the HELLO);
     * an OPENED from one closes its connection. */
    b = (bytes){ 0 };
    for (int w = 0; w < 2; w++) {
        begin();
        pack_hello(3, 100 + (uint64_t)w, 1, w, NULL);
        pack_keys(PSW_OP_PUSH, 1, FUZZ_T_DENSE_SUM, d2, 2, v, 8);
        pack_control(PSW_OP_CLOCK, 2, 0, 1);
        take_body(&b);
    }
    begin();
    pack_control(PSW_OP_OPENED, 0, 0, 0);
    take_body(&b);
    write_seed(t, "workers_of_version_3", b.p, b.n);
    free(b.p);

    /* A REPLY sent to the server closes the connection. */
    b = (bytes){ 0 };
    begin();
    psw_pack_reply(&out, 1, 0, PSW_OK, NULL, 0, 0);
    take_body(&b);
    write_seed(t, "reply_to_server", b.p, b.n);
    free(b.p);
}

/* ---- fuzz_journal and fuzz_snapshot ---------------------------------- */

/* Files written with the daemon's own writers (daemon/journal.c,
 * daemon/snapshot.c) for nodes of the fixed cluster (request_conf.h),
 * in folders of their own (disk.h), and read back as seeds. */

#define SEG_SEP "PSDJSEG\n"      /* fuzz_journal.c's separator */
#define T0_MS 1000000

/* fuzz_journal's flags (byte 0 of an input; fuzz_journal.c). */
#define JF_FIRST(seq) ((seq) - 1)            /* the first segment's number */
#define JF_FROM(seq) (((seq) - 1) << 2)      /* the replay starts there */
#define JF_GAP 0x10
#define JF_NODE1 0x20
#define JF_FIX_CRCS 0x40
#define JF_OTHER 0x80
/* Its `pick` (byte 1): the damage of the derived check, to the record
 * `back` records before the last. */
#define JP(kind, back) ((kind) | (back) << 2)
enum { JP_SHORT, JP_ZEROS, JP_PAGE_ZEROS, JP_ZERO_PAGE };

static const char *jdir;
static uint64_t shape;

/* Sparse key `nth` that node `node` owns. */
static uint64_t node_key(int node, int nth)
{
    for (uint64_t k = 1;; k++)
        if (psw_node_of_shard(psw_sparse_shard_of(FUZZ_REQ_SHARDS, k),
                              FUZZ_REQ_NODES) == node && nth-- == 0)
            return k;
}

/* Opens segment seq under inits mark `inits`: 0, as a psd before the
 * mark wrote (the fuzzer's changes to those bytes make marks of its
 * own), or the fixed config's, as psd writes today. */
static psd_journal *jopen_marked(int node, uint64_t seg_shape, uint64_t seq,
                                 uint32_t inits)
{
    char err[256];
    psd_journal *j = psd_journal_open(jdir, node, seg_shape, inits, seq, err,
                                      sizeof err);
    if (!j) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    return j;
}

static psd_journal *jopen(int node, uint64_t seg_shape, uint64_t seq)
{
    return jopen_marked(node, seg_shape, seq, 0);
}

static void jwrite(psd_journal *j)
{
    char err[256];
    if (psd_journal_write(j, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
}

static void jrotate(psd_journal *j)
{
    char err[256];
    if (psd_journal_rotate(j, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
}

/* A push of n rows of `dim` (keys, or from row `first` for PUSH_RANGE),
 * values from vals (n * dim of them) or, when NULL, counting up. */
static void jpush(psd_journal *j, int op, uint64_t client, uint64_t ts,
                  uint32_t table, const uint64_t *keys, uint64_t first,
                  size_t n, uint32_t dim, const float *vals, int status)
{
    static char kb[8 * 64];
    static float v[2048];
    if (n * dim > sizeof v / sizeof v[0] ||
        (op != PSW_OP_PUSH_RANGE && n > sizeof kb / 8)) {
        fprintf(stderr, "make_seeds: a push of %zu rows is too big\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n * dim; i++)
        v[i] = vals ? vals[i] : 0.25f * (float)(i + 1);
    psw_msg m = req(op, ts, 0, table);
    if (op == PSW_OP_PUSH_RANGE) {
        m.first = first;
        m.count = n;
    } else {
        keys_le(kb, keys, n);
        m.keys = kb;
        m.nkeys = n;
    }
    m.vals = (const char *)v;
    m.vals_len = 4 * n * dim;
    if (!psd_journal_push(j, client, 1, &m, status)) {
        fprintf(stderr, "make_seeds: out of memory\n");
        exit(1);
    }
}

/* One push to table t of node `node`: two keys of its own for a sparse
 * table, one of its rows for a dense one (ranged; some tables have no
 * two neighbouring rows on a node). */
static void jpush_table(psd_journal *j, int node, uint64_t client,
                        uint64_t ts, int t)
{
    const psd_table_conf *tc = &fuzz_disk_config()->tables[t];
    uint64_t k[2] = { node_key(node, t), node_key(node, t + 9) };
    if (tc->dense)
        jpush(j, PSW_OP_PUSH_RANGE, client, ts, (uint32_t)t, NULL,
              dense_row(tc->rows, node, 0), 1, tc->dim, NULL, 0);
    else
        jpush(j, PSW_OP_PUSH, client, ts, (uint32_t)t, k, 0, 2, tc->dim,
              NULL, 0);
}

/* Every kind of record a node journals, for node `node`: its tables'
 * hyper-parameters, two workers joining, a push to every table (keyed,
 * ranged, a PUSHPULL, a keyed push to a dense table with an infinity
 * where nonfinite = allow, one answered ENOMEM part-way), a clock that
 * applies the bsp sums, pushes into the next clock's sums, an ACK, a
 * reload's hyper-parameters and a worker leaving. */
static void jhistory(psd_journal *j, int node, uint64_t client)
{
    const psd_config *cfg = fuzz_disk_config();
    for (int t = 0; t < cfg->ntables; t++)
        psd_journal_params(j, (uint32_t)t, &cfg->tables[t].upd);
    /* Worker 1 took over from a lost client, and one was let go by an
     * end-job before: the fuzzer varies their clients and mask. */
    const uint64_t none[PSD_J_REPLACED] = { 0 };
    const uint64_t refused[PSD_J_REPLACED] = { 0, 0, client + 7, client + 8 };
    psd_journal_worker(j, 0, 1, 0, client, 0, 0, none, 0, 0, 0);
    psd_journal_worker(j, 1, 1, 0, client + 1, 0, 0, refused, 4, 0, 0);
    uint64_t ts = 1;
    for (int t = 0; t < cfg->ntables; t++)
        jpush_table(j, node, client, ts++, t);
    uint64_t k1 = node_key(node, 20);
    jpush(j, PSW_OP_PUSHPULL, client + 1, ts++, FUZZ_T_SPARSE_ADAGRAD, &k1, 0,
          1, 8, NULL, 0);
    uint64_t row = dense_row(4, node, 0);
    float inf = INFINITY;
    jpush(j, PSW_OP_PUSH, client + 1, ts++, FUZZ_T_DENSE_LOOSE, &row, 0, 1, 1,
          &inf, 0);
    jpush(j, PSW_OP_PUSH, client, ts++, FUZZ_T_SPARSE_ADAM, &k1, 0, 1, 2,
          NULL, PSW_ENOMEM);
    psd_journal_clock(j, 1, 2);
    jpush_table(j, node, client, ts++, FUZZ_T_DENSE_ADAM_BSP);
    jpush_table(j, node, client + 1, ts++, FUZZ_T_SPARSE_SGD_BSP);
    psd_journal_ack(j, client, 1, 4);
    psd_updater_params p = cfg->tables[FUZZ_T_SPARSE_ADAGRAD].upd;
    p.lr *= 0.5f;
    psd_journal_params(j, FUZZ_T_SPARSE_ADAGRAD, &p);
    psd_journal_worker(j, 1, 0, 0, client + 1, 1, 0, refused, 4,
                       client + 1, 1);
    jwrite(j);
}

/* The node's segment seq as written. */
static bytes jread(int node, uint64_t seq)
{
    char path[512];
    psd_journal_path(path, sizeof path, jdir, node, seq);
    bytes b = { 0 };
    b.p = fuzz_disk_read(path, &b.n);
    return b;
}

/* A fuzz_journal input: flags, pick, then the segments given (n of
 * them) with the separator between. */
static void journal_seed(const char *name, uint8_t flags, uint8_t pick,
                         const bytes *segs, int n)
{
    bytes b = { 0 };
    append(&b, &flags, 1);
    append(&b, &pick, 1);
    for (int i = 0; i < n; i++) {
        if (i)
            append(&b, SEG_SEP, strlen(SEG_SEP));
        append(&b, segs[i].p, segs[i].n);
    }
    write_seed("fuzz_journal", name, b.p, b.n);
    free(b.p);
}

static void journal_seeds(void)
{
    bytes seg[3];
    psd_journal *j;

    /* Every record kind in one segment; the derived check cuts its last
     * record short. */
    fuzz_disk_clear(jdir);
    j = jopen(0, shape, 1);
    jhistory(j, 0, 100);
    psd_journal_close(j);
    seg[0] = jread(0, 1);
    journal_seed("history", 0, JP(JP_SHORT, 0), seg, 1);
    /* The same with its last record cut short, as a crash leaves it. */
    bytes cut = { seg[0].p, seg[0].n - 5 };
    journal_seed("history_torn", JF_FIX_CRCS, JP(JP_ZEROS, 1), &cut, 1);
    /* ... and with three pages of zeros after it. */
    bytes zeros = { 0 };
    append(&zeros, seg[0].p, seg[0].n);
    char page[4096] = { 0 };
    for (int i = 0; i < 3; i++)
        append(&zeros, page, sizeof page);
    journal_seed("history_zero_pages", 0, JP(JP_ZERO_PAGE, 0), &zeros, 1);
    free(zeros.p);
    /* Cut short in a segment that is not the newest: refused. */
    bytes two[2] = { cut, seg[0] };
    journal_seed("torn_before_newest", 0, 0, two, 2);
    /* After a snapshot with journal_seq 2, segment 1 (cut short) is not
     * read. */
    journal_seed("from_snapshot", JF_FIRST(1) | JF_FROM(2), 0, two, 2);
    /* Starting at 3 where the snapshot says 1: refused. */
    journal_seed("missing_snapshot", JF_FIRST(3) | JF_FROM(1), 0, seg, 1);
    free(seg[0].p);
    /* The history begun under the fixed config's inits mark, as psd
     * writes a segment today: its pushes are checked against the mark
     * (no seed had one, and the fuzzer made none). */
    fuzz_disk_clear(jdir);
    j = jopen_marked(0, shape, 1, psd_config_inits(fuzz_disk_config()));
    jhistory(j, 0, 100);
    psd_journal_close(j);
    seg[0] = jread(0, 1);
    journal_seed("history_of_this_inis_mark", 0, JP(JP_SHORT, 0), seg, 1);
    free(seg[0].p);

    /* A rotation: the new segment repeats the hyper-parameters; a gap
     * before the last is refused. */
    fuzz_disk_clear(jdir);
    j = jopen(0, shape, 1);
    jhistory(j, 0, 200);
    jrotate(j);
    jpush_table(j, 0, 200, 20, FUZZ_T_SPARSE_FTRL_SSP);
    psd_journal_clock(j, 2, 1);
    jrotate(j);
    psd_journal_close(j);
    for (int i = 0; i < 3; i++)
        seg[i] = jread(0, (uint64_t)i + 1);
    journal_seed("rotated", 0, JP(JP_ZEROS, 2), seg, 3);
    journal_seed("rotated_gap", JF_GAP, 0, seg, 3);
    for (int i = 0; i < 3; i++)
        free(seg[i].p);

    /* Node 1 in a folder it shares with node 0. */
    fuzz_disk_clear(jdir);
    j = jopen(1, shape, 1);
    jhistory(j, 1, 300);
    psd_journal_close(j);
    seg[0] = jread(1, 1);
    journal_seed("node1_shared_folder", JF_NODE1 | JF_OTHER,
                 JP(JP_PAGE_ZEROS, 0), seg, 1);
    /* Node 1's journal where node 0 looks: refused at its start. */
    journal_seed("another_node", 0, 0, seg, 1);
    free(seg[0].p);

    /* Another layout's journal: refused at its start. */
    fuzz_disk_clear(jdir);
    j = jopen(0, shape ^ 1, 1);
    psd_journal_clock(j, 1, 1);
    psd_journal_close(j);
    seg[0] = jread(0, 1);
    journal_seed("another_shape", 0, 0, seg, 1);
    free(seg[0].p);

    /* A record that spans a page boundary with zeros before it (a push
     * to a dense table whose values are 0 but for the last 200), which
     * the derived check zeros from that boundary on, as a power loss may
     * leave it. */
    fuzz_disk_clear(jdir);
    j = jopen(0, shape, 1);
    jhistory(j, 0, 400);
    static float mostly0[250 * 4];
    for (int i = 800; i < 1000; i++)
        mostly0[i] = 1.0f;
    jpush(j, PSW_OP_PUSH_RANGE, 400, 30, FUZZ_T_DENSE_SUM, NULL, 0, 250, 4,
          mostly0, 0);
    jwrite(j);
    psd_journal_close(j);
    seg[0] = jread(0, 1);
    journal_seed("page_of_zeros", 0, JP(JP_PAGE_ZEROS, 0), seg, 1);
    free(seg[0].p);

    /* Pushes the node must refuse: to a table it does not have, and to
     * a key of the other node. */
    fuzz_disk_clear(jdir);
    j = jopen(0, shape, 1);
    uint64_t k = node_key(0, 0);
    jpush(j, PSW_OP_PUSH, 500, 1, FUZZ_T_COUNT, &k, 0, 1, 1, NULL, 0);
    jrotate(j);
    k = node_key(1, 0);
    jpush(j, PSW_OP_PUSH, 500, 2, FUZZ_T_SPARSE_CAPPED, &k, 0, 1, 2, NULL, 0);
    jwrite(j);
    psd_journal_close(j);
    for (int i = 0; i < 2; i++)
        seg[i] = jread(0, (uint64_t)i + 1);
    journal_seed("push_to_no_table", 0, 0, seg, 1);
    journal_seed("push_to_other_node", JF_FIRST(2) | JF_FROM(2), 0, seg + 1,
                 1);
    for (int i = 0; i < 2; i++)
        free(seg[i].p);

    /* Nothing but an empty segment. */
    static char none[1];
    bytes empty = { none, 0 };
    journal_seed("empty_segment", 0, 0, &empty, 1);
}

/* Node `node` as it stands after `history` replayed (rows in every
 * table, bsp sums of the clock in progress, workers, applied pushes) or,
 * with history 0, fresh; written by psd_snapshot_write. Its creation time
 * is set to a fixed one (the header's CRC made again), so that the seed
 * is the same at every run. */
static void snapshot_seed(const char *name, int node, int history,
                          uint64_t generation, uint64_t journal_seq)
{
    char err[512], path[512];
    const char *sdir = fuzz_disk_dir("seeds-snapshot");
    psd_node n;
    fuzz_disk_node(&n, node, T0_MS);
    if (history) {
        fuzz_disk_clear(jdir);
        psd_journal *j = jopen(node, shape, 1);
        jhistory(j, node, 600);
        psd_journal_close(j);
        psd_replay_ctx ctx = { &n, T0_MS, NULL, 0, 0 };
        uint64_t next, records;
        char cut[512];
        if (psd_journal_replay(jdir, node, shape, n.inits, 1,
                               (size_t)n.cfg.max_frame + 4096,
                               psd_request_replay, &ctx, &next, &records,
                               cut, sizeof cut, err, sizeof err)) {
            fprintf(stderr, "make_seeds: %s\n", err);
            exit(1);
        }
        psd_node_apply_params(&n);
    }
    fuzz_disk_clear(sdir);
    if (psd_snapshot_write(&n, sdir, generation, journal_seq, NULL, err,
                           sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    psd_node_destroy(&n);
    psd_snapshot_path(path, sizeof path, sdir, node);
    bytes b = { 0 };
    b.p = fuzz_disk_read(path, &b.n);
    uint64_t created = 1700000000000ull;     /* docs/durability.md §5 */
    memcpy(b.p + 48, &created, 8);
    uint32_t crc = psw_crc32c(0, b.p, 60);
    memcpy(b.p + 60, &crc, 4);
    write_seed("fuzz_snapshot", name, b.p, b.n);
    free(b.p);
}

static void *copy_of(const void *p, size_t n)
{
    void *q = malloc(n ? n : 1);
    if (!q) {
        fprintf(stderr, "make_seeds: out of memory\n");
        exit(1);
    }
    if (n)                       /* p is NULL for an empty list */
        memcpy(q, p, n);
    return q;
}

/* The snapshot in the seeds folder (node 0's, of the fixed config),
 * loaded into a node whose tables are the fixed config's in reverse
 * order less the last (dropped by name), plus a dense and a sparse table
 * the fixed config lacks (FUZZ_DROPPED), and written again: loaded under
 * the fixed config it has its tables moved, one added and two to drop,
 * so the fuzzer starts from a file whose tables psd matches by name. */
static void snapshot_seed_moved(const char *name)
{
    char err[512], path[512];
    const char *sdir = fuzz_disk_dir("seeds-snapshot");
    const psd_config *s = fuzz_disk_config();
    psd_config d = *s;
    d.nodes = copy_of(s->nodes, (size_t)s->nnodes * sizeof *s->nodes);
    d.listen = copy_of(s->listen, (size_t)s->nlisten * sizeof *s->listen);
    d.notes = copy_of(s->notes, (size_t)s->nnotes * sizeof *s->notes);
    d.ntables = s->ntables + 1;
    d.tables = calloc((size_t)d.ntables, sizeof *d.tables);
    if (!d.tables) {
        fprintf(stderr, "make_seeds: out of memory\n");
        exit(1);
    }
    for (int i = 0; i < s->ntables - 1; i++)
        d.tables[i] = s->tables[s->ntables - 2 - i];
    d.tables[s->ntables - 1] = s->tables[FUZZ_T_DENSE_ADAM_BSP];
    d.tables[s->ntables] = s->tables[FUZZ_T_SPARSE_FTRL_SSP];
    snprintf(d.tables[s->ntables - 1].name, sizeof d.tables->name, "%s",
             FUZZ_DROPPED_DENSE);
    snprintf(d.tables[s->ntables].name, sizeof d.tables->name, "%s",
             FUZZ_DROPPED_SPARSE);
    psd_node n;
    const char *drop[1] = { s->tables[s->ntables - 1].name };
    psd_snap_tables tm = { .drop = drop, .ndrop = 1 };
    if (psd_node_init(&n, &d, 0, T0_MS, err, sizeof err) ||
        psd_snapshot_load(&n, sdir, T0_MS, NULL, &tm, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    free(tm.map);
    fuzz_disk_clear(sdir);
    if (psd_snapshot_write(&n, sdir, 3, 3, NULL, err, sizeof err)) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
    psd_node_destroy(&n);
    psd_snapshot_path(path, sizeof path, sdir, 0);
    bytes b = { 0 };
    b.p = fuzz_disk_read(path, &b.n);
    uint64_t created = 1700000000000ull;     /* as snapshot_seed's */
    memcpy(b.p + 48, &created, 8);
    uint32_t crc = psw_crc32c(0, b.p, 60);
    memcpy(b.p + 60, &crc, 4);
    write_seed("fuzz_snapshot", name, b.p, b.n);
    free(b.p);
}

static void disk_seeds(void)
{
    psd_log_set_level(PSD_LOG_ERROR);
    jdir = fuzz_disk_dir("seeds-journal");
    shape = psd_config_shape(fuzz_disk_config());
    journal_seeds();
    snapshot_seed("node0_fresh", 0, 0, 1, 1);
    snapshot_seed("node0_history", 0, 1, 2, 2);
    snapshot_seed_moved("node0_moved_tables");
    snapshot_seed("node1_history", 1, 1, 7, 12);
}

/* ---- fuzz_config ---------------------------------------------------- */

static void config_seeds(void)
{
    static const struct {
        const char *name;
        const char *text;
    } seeds[] = {
        { "minimal.ini", "[cluster]\nnodes = 127.0.0.1:7070\n" },
        { "request.ini", FUZZ_REQ_INI },
        { "everything.ini",
          "\xEF\xBB\xBF; every setting, not at its default\n"
          "[cluster]\n"
          "nodes = 127.0.0.1:7070, [::1]:7071,\n"
          "        ps-2.example:7072 ; a continuation line\n"
          "listen = 0.0.0.0:7070, [::]:7071, 0.0.0.0:7072\n"
          "shards = 65535\nworkers = 3\nworker_grace = 0\n"
          "[server]\n"
          "data_dir = /tmp/psd\nsnapshot_interval = 0\n"
          "durability = log\nfsync = always\n"
          "auth_token = correct-horse-battery-staple\n"
          "max_frame = 1G\nlog_level = debug\nmax_output = 1K\n"
          "max_connections = 1\nhello_timeout = 3600\n"
          "heartbeat_ms = 10\npeer_timeout_ms = 20000\nclient_ttl = 1\n"
          "[table.w]\nkind = dense\nrows = 10\ndim = 65536\n"
          "updater = ftrl\nlr = 0.5\nbeta = 2\nl1 = 0.1\nl2 = 1e-3\n"
          "init = normal -1 0.5\nseed = 18446744073709551615\n"
          "consistency = ssp\nstaleness = 65535\naggregate = mean\n"
          "[table.emb_2]\ndim = 1\nupdater = adam\nbeta1 = 0\n"
          "beta2 = 0.5\nepsilon = 1e-30\ninit = uniform -0.1 0.1\n"
          "[table.b-c]\nkind = sparse\ndim = 7\nupdater = sgd\n"
          "init = constant 3\nconsistency = bsp\n" },
        /* The settings everything.ini lacks (added since), not at their
         * defaults; auth_token_file in a seed of its own (everything.ini
         * sets auth_token, and both are refused together). */
        { "everything_newer.ini",
          "; the settings everything.ini lacks, not at their defaults\n"
          "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\n"
          "[server]\nsnapshot_journal_mb = 1\n"
          "metrics_listen = 127.0.0.1:9100, 127.0.0.1:9101\n"
          "max_connections_per_addr = 2\nmax_client_memory = 2M\n"
          "frame_timeout = 1\nidle_timeout = 86400\n"
          "max_unacked_pushes = 10\nmax_remembered_pushes = 100\n"
          "[table.x]\nkind = dense\nrows = 4\ndim = 1\nnonfinite = allow\n"
          "[table.y]\ndim = 2\nmax_rows = 1000\n" },
        { "token_file.ini", "[cluster]\nnodes = 127.0.0.1:7070\n"
          "[server]\nauth_token_file = /etc/psd/token\n" },
        { "err_unknown_key.ini", "[cluster]\nnodes = 127.0.0.1:1\nfoo = 1\n" },
        { "err_duplicate_section.ini",
          "[cluster]\nnodes = 127.0.0.1:1\n[table.t]\ndim = 1\n"
          "[table.t]\ndim = 2\n" },
        { "err_bad_value.ini", "[cluster]\nnodes = 127.0.0.1:1\n"
          "[server]\nmax_frame = 12X\n" },
        { "err_no_cluster.ini", "[server]\nlog_level = warn\n" },
        { "err_heartbeat.ini", "[cluster]\nnodes = 127.0.0.1:1\n[server]\n"
          "heartbeat_ms = 3000\n" },
        { "err_rows_overflow.ini", "[cluster]\nnodes = 127.0.0.1:1\n"
          "shards = 65535\n[table.d]\nkind = dense\ndim = 1\n"
          "rows = 18446744073709551615\n" },
        { "err_header.ini", "[cluster\nnodes = 127.0.0.1:1\n" },
        { "err_outside.ini", "nodes = 127.0.0.1:1\n[cluster]\n" },
        { "err_listen_count.ini", "[cluster]\nnodes = 127.0.0.1:1, "
          "127.0.0.1:2\nlisten = 0.0.0.0:1\n" },
        { "err_bind_clash.ini", "[cluster]\nnodes = 127.0.0.1:7070\n"
          "[server]\nmetrics_listen = 127.0.0.1:7070\n" },
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
        write_seed("fuzz_config", seeds[i].name, seeds[i].text,
                   strlen(seeds[i].text));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    psd_secret_fix(FUZZ_SECRET);         /* the same bytes at every run */
    if (mkdir(outdir, 0777) && errno != EEXIST)
        die(outdir);
    psw_out_init(&out);
    wire_seeds();
    request_seeds();
    config_seeds();
    disk_seeds();
    psw_out_destroy(&out);
    return 0;
}
