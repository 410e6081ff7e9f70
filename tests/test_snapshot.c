/* Unit tests of daemon/snapshot.c and daemon/journal.c: a snapshot brings
 * back every table's rows with their optimizer state bit for bit (shown by
 * the next update landing on the same bits), the workers' clocks and the
 * memory of applied pushes; a snapshot cut short or with any bit flipped,
 * or taken under another layout, is refused with its file, offset and
 * reason; a write that fails (file size limit) keeps the old snapshot;
 * journal segments replay in order, a torn last record is cut off, damage
 * elsewhere is refused, and segments without the snapshot before them
 * are refused. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "../daemon/journal.h"
#include "../daemon/node.h"
#include "../daemon/snapshot.h"
#include "../proto/frame.h"
#include "../proto/status.h"

#include "expect.h"
#include "membuf.h"

#define TAIL 4096   /* a page */
#define ERRLEN 600

/* Every updater with state, dense and sparse, and a bsp table (its sums
 * of the current clock are part of the state). Sections one by one, for
 * configs that add, drop or move tables; %d: shards, then adam's dim. */
#define CLUSTER                                                             \
    "[cluster]\nnodes = 127.0.0.1:7070, 127.0.0.1:7071\nshards = %d\n"     \
    "workers = 2\n"
#define T_ADAM                                                              \
    "[table.adam]\nkind = dense\nrows = 50\ndim = %d\nupdater = adam\n"    \
    "lr = 0.01\ninit = uniform -0.1 0.1\nseed = 3\n"
#define T_ADAGRAD                                                           \
    "[table.adagrad]\nkind = sparse\ndim = 4\nupdater = adagrad\nlr = 0.1\n"
#define T_FTRL                                                              \
    "[table.ftrl]\nkind = sparse\ndim = 4\nupdater = ftrl\nlr = 0.05\n"     \
    "l1 = 0.001\nl2 = 0.01\n"
#define T_SGD                                                               \
    "[table.sgd]\nkind = dense\nrows = 20\ndim = 2\nupdater = sgd\n"       \
    "lr = 0.5\n"
#define T_BSP                                                               \
    "[table.bsp]\nkind = sparse\ndim = 3\nupdater = sum\n"                 \
    "consistency = bsp\n"
static const char *const INI = CLUSTER T_ADAM T_ADAGRAD T_FTRL T_SGD T_BSP;

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/psd-test-snapshot-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh node `index` of the layout in ini (a CLUSTER and tables, with
 * shards and the dim of table adam). */
static void node_from(psd_node *n, const char *ini, int index, int shards,
                      int dim)
{
    char path[128], text[2048], err[ERRLEN];
    snprintf(path, sizeof path, "%s/psd.ini", dir);
    /* ini is one of this file's CLUSTER-and-tables strings. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(text, sizeof text, ini, shards, dim);
#pragma GCC diagnostic pop
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    psd_config c;
    if (psd_config_load(&c, path, err, sizeof err))
        fail_msg("config: %s", err);
    if (psd_node_init(n, &c, index, 1000, err, sizeof err))
        fail_msg("node: %s", err);
}

/* A fresh node `index` of the test layout (shards, dim of table adam). */
static void make_node(psd_node *n, int index, int shards, int dim)
{
    node_from(n, INI, index, shards, dim);
}

/* Keys this node owns in table t (sparse): the first `n` found. */
static void owned_keys(const psd_node *nd, int t, uint64_t *keys, int n)
{
    int owner;
    char err[ERRLEN];
    int got = 0;
    for (uint64_t k = 1; got < n; k++)
        if (psd_table_check_keys(nd->tables[t], (const char *)&k, 1, &owner,
                                 err, sizeof err) == 0)
            keys[got++] = k;
}

/* Dense rows this node owns: first ones found. */
static void owned_rows(const psd_node *nd, int t, uint64_t *rows, int n)
{
    int owner;
    char err[ERRLEN];
    int got = 0;
    for (uint64_t r = 0; got < n; r++)
        if (psd_table_check_range(nd->tables[t], r, 1, &owner, err,
                                  sizeof err) == 0)
            rows[got++] = r;
}

/* A gradient that differs per step, row and column. */
static void grad(float *g, int dim, int step, uint64_t row)
{
    for (int j = 0; j < dim; j++)
        g[j] = (float)((int)((step * 7 + row * 3 + (uint64_t)j) % 11) - 5) /
               8.0f;
}

#define NK 6

/* Pushes `steps` rounds of gradients into every table of node nd, from
 * step `from` on. */
static void train(psd_node *nd, int from, int steps)
{
    uint64_t keys[NK];
    float g[64 * NK];
    for (int s = from; s < from + steps; s++) {
        for (int t = 0; t < nd->ntables; t++) {
            const psd_table_conf *tc = psd_table_conf_get(nd->tables[t]);
            int dim = (int)tc->dim;
            if (tc->dense)
                owned_rows(nd, t, keys, NK);
            else
                owned_keys(nd, t, keys, NK);
            for (int i = 0; i < NK; i++)
                grad(g + i * dim, dim, s, keys[i]);
            if (tc->dense) {
                for (int i = 0; i < NK; i++)
                    psd_table_push_range(nd->tables[t], keys[i], 1,
                                         (const char *)(g + i * dim));
            } else if (tc->consistency == PSD_CONS_BSP) {
                assert_int_equal(psd_table_accumulate(nd->tables[t],
                                                      (const char *)keys, NK,
                                                      (const char *)g), 0);
            } else {
                assert_int_equal(psd_table_push(nd->tables[t],
                                                (const char *)keys, NK,
                                                (const char *)g), 0);
            }
        }
    }
}

/* Every table of a node as the bytes psd_table_save writes. */
static membuf image(const psd_node *nd)
{
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    for (int t = 0; t < nd->ntables; t++)
        assert_int_equal(psd_table_save(nd->tables[t], &o), 0);
    return m;
}

/* Pulls NK owned rows of every table into out (as bytes). */
static membuf pulls(psd_node *nd)
{
    membuf m = { 0 };
    uint64_t keys[NK];
    float v[64 * NK];
    for (int t = 0; t < nd->ntables; t++) {
        const psd_table_conf *tc = psd_table_conf_get(nd->tables[t]);
        size_t bytes = NK * tc->dim * sizeof(float);
        if (tc->dense) {
            owned_rows(nd, t, keys, NK);
            for (int i = 0; i < NK; i++)
                psd_table_pull_range(nd->tables[t], keys[i], 1,
                                     (char *)(v + i * tc->dim));
        } else {
            owned_keys(nd, t, keys, NK);
            assert_int_equal(psd_table_pull(nd->tables[t], (const char *)keys,
                                            NK, (char *)v), 0);
        }
        mem_put(&m, v, bytes);
    }
    return m;
}

static void expect_same(const membuf *a, const membuf *b, const char *what)
{
    EXPECT_U64(a->len, b->len, "%s: bytes", what);
    for (size_t i = 0; i < a->len; i++)
        if (a->p[i] != b->p[i])
            fail_msg("%s: they differ at byte %zu of %zu", what, i, a->len);
}

/* A node trained a while, with two workers' clocks moved and a client's
 * pushes remembered. */
static void trained_node(psd_node *nd, int shards, int dim)
{
    make_node(nd, 1, shards, dim);
    train(nd, 0, 5);
    char err[ERRLEN];
    int a = 1, b = 2;
    assert_int_equal(psd_sync_join(&nd->sync, 0, 11, &a, "10.0.0.1:1", err,
                                   sizeof err), 0);
    assert_int_equal(psd_sync_join(&nd->sync, 1, 12, &b, "10.0.0.2:1", err,
                                   sizeof err), 0);
    assert_int_equal(psd_sync_reach(&nd->sync, 0, 0, 3, err, sizeof err), 0);
    assert_int_equal(psd_sync_reach(&nd->sync, 1, 0, 4, err, sizeof err), 0);
    psd_sync_advance(&nd->sync, 1000);
    psd_sync_summed(&nd->sync, 1);   /* worker 1 pushed into the bsp sums */
    psd_dclient *c = psd_dedup_attach(nd->dedup, 77, 5, 1000);
    assert_non_null(c);
    assert_int_equal(psd_dedup_record(c, 40, 1, PSW_OK), 0);
    assert_int_equal(psd_dedup_record(c, 41, 0, PSW_ENOMEM), 0);
    psd_dedup_ack(c, 30, UINT64_MAX);
}

static void test_a_snapshot_restores_every_updater_state_bit_for_bit(
    void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN];
    trained_node(&a, 16, 8);
    psd_snap_info wi, ri;
    if (psd_snapshot_write(&a, dir, 3, 7, &wi, err, sizeof err))
        fail_msg("write: %s", err);
    make_node(&b, 1, 16, 8);
    if (psd_snapshot_load(&b, dir, 2000, &ri, NULL, err, sizeof err))
        fail_msg("load: %s", err);
    EXPECT_U64(ri.generation, 3, "generation");
    EXPECT_U64(ri.journal_seq, 7, "journal segment");
    EXPECT_U64(ri.bytes, wi.bytes, "size");
    membuf ia = image(&a), ib = image(&b);
    expect_same(&ia, &ib, "saved tables");
    /* The same next steps land on the same bits: the weights and every
     * moment, accumulator and step counter came back, not just the
     * weights. */
    train(&a, 5, 3);
    train(&b, 5, 3);
    assert_int_equal(psd_table_apply_accumulated(a.tables[4], 1.0f), 0);
    assert_int_equal(psd_table_apply_accumulated(b.tables[4], 1.0f), 0);
    membuf pa = pulls(&a), pb = pulls(&b);
    expect_same(&pa, &pb, "rows after three more steps");
    /* And the state did matter: a node that lost it ends elsewhere. */
    psd_node c;
    make_node(&c, 1, 16, 8);
    train(&c, 5, 3);
    membuf pc = pulls(&c);
    EXPECT_INT(pa.len == pc.len && memcmp(pa.p, pc.p, pa.len) == 0, 0,
               "a fresh node matches the restored one");
    /* Clocks: the node's and each worker's. */
    EXPECT_U64(b.sync.clock, 3, "node clock");
    uint64_t clk, bar;
    psd_sync_position(&b.sync, 1, &clk, &bar);
    EXPECT_U64(clk, 4, "worker 1's clock");
    EXPECT_INT(b.sync.workers[0].state, PSD_W_GONE,
               "a worker live at the snapshot comes back lost");
    /* Who pushed into the sums: the divisor of aggregate = mean. */
    EXPECT_U64(b.sync.workers[1].summed, a.sync.workers[1].summed,
               "worker 1 pushed into the sums of the clock in progress");
    EXPECT_U64(b.sync.workers[0].summed, 0, "worker 0 did not");
    /* Applied pushes: a retry is still recognised, with its status. */
    psd_dclient *dc = psd_dedup_attach(b.dedup, 77, 5, 2000);
    int st = -1;
    EXPECT_INT(psd_dedup_seen(dc, 41, 0, &st), 1, "push 41.0 after restart");
    EXPECT_INT(st, PSW_ENOMEM, "its status");
    EXPECT_INT(psd_dedup_seen(dc, 20, 0, &st), 1, "a push below the ACK");
    EXPECT_INT(psd_dedup_seen(dc, 42, 0, &st), 0, "a new push");
    free(ia.p), free(ib.p), free(pa.p), free(pb.p), free(pc.p);
    psd_node_destroy(&a);
    psd_node_destroy(&b);
    psd_node_destroy(&c);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(*len);
    assert_int_equal(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

static void write_file(const char *path, const char *p, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Loads the snapshot in dir into a fresh node 1; returns the result and
 * leaves the message in err. */
static int try_load(int shards, int dim, char *err)
{
    psd_node b;
    make_node(&b, 1, shards, dim);
    int rc = psd_snapshot_load(&b, dir, 2000, NULL, NULL, err, ERRLEN);
    psd_node_destroy(&b);
    return rc;
}

static void test_every_cut_and_every_flipped_bit_is_refused_with_an_offset(
    void **state)
{
    (void)state;
    psd_node a;
    char err[ERRLEN], path[128];
    trained_node(&a, 4, 2);
    assert_int_equal(psd_snapshot_write(&a, dir, 1, 1, NULL, err,
                                        sizeof err), 0);
    psd_node_destroy(&a);
    psd_snapshot_path(path, sizeof path, dir, 1);
    size_t len;
    char *good = read_file(path, &len);
    char *bad = malloc(len);
    assert_int_equal(try_load(4, 2, err), 0);
    /* Every length short of the whole file. */
    for (size_t cut = 0; cut < len; cut++) {
        write_file(path, good, cut);
        if (try_load(4, 2, err) != -1)
            fail_msg("a snapshot cut to %zu of %zu bytes was accepted", cut,
                     len);
        if (!strstr(err, path) || !strstr(err, "offset "))
            fail_msg("cut to %zu: the message lacks file or offset: %s", cut,
                     err);
    }
    /* Every byte with one bit flipped (a different bit each time). */
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, good, len);
        bad[i] ^= (char)(1 << (i % 8));
        write_file(path, bad, len);
        if (try_load(4, 2, err) != -1)
            fail_msg("a bit flipped at byte %zu of %zu was accepted", i, len);
        if (!strstr(err, "offset "))
            fail_msg("flip at %zu: no offset in \"%s\"", i, err);
        /* Damage, said as damage: a flip in a table's header was taken
         * for a changed config ("--drop-table", "updater changed"), though
         * the file was written under this very layout. */
        if (strstr(err, "--drop-table") || strstr(err, "in the config") ||
            strstr(err, "updater changed") || strstr(err, "do not fit"))
            fail_msg("flip at %zu taken for a changed config: %s", i, err);
    }
    /* A byte more. */
    write_file(path, good, len);
    FILE *f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    assert_int_equal(try_load(4, 2, err), -1);
    EXPECT_INT(strstr(err, "after the end marker") != NULL, 1, "%s", err);
    char want[200];
    snprintf(want, sizeof want, "%s: offset %zu: ", path, len);
    EXPECT_INT(strstr(err, want) != NULL, 1, "want \"%s\" in \"%s\"", want,
               err);
    print_message("# %zu cuts and %zu flipped bits refused\n", len, len);
    free(good);
    free(bad);
}

/* Sets the header field of n bytes at offset `at` of the snapshot image f
 * to v, and the header's CRC (bytes 60..63, over 0..59) to match. */
static void set_header_field(char *f, size_t at, const void *v, size_t n)
{
    memcpy(f + at, v, n);
    uint32_t crc = psw_crc32c(0, f, 60);
    memcpy(f + 60, &crc, 4);
}

/* Node 1 of the test layout (4 shards, dim 2), trained, into a snapshot
 * whose path goes in path. */
static void trained_snapshot(psd_node *a, char *path, size_t len)
{
    char err[ERRLEN];
    trained_node(a, 4, 2);
    if (psd_snapshot_write(a, dir, 1, 1, NULL, err, sizeof err))
        fail_msg("write: %s", err);
    psd_snapshot_path(path, len, dir, 1);
}

/* Rewrites the snapshot at path as an older format wrote it: each worker
 * of the SYNC section (79 bytes in format 4) without its last 42 (the
 * clients refused for good, the lost one, unknown) for format 3, its
 * last 43 (`closed` too) for format 2, and its last 51 (`summed` too)
 * for format 1; the section's
 * length and CRC and the header's version and CRC made to match. */
static void as_format(const char *path, uint32_t v)
{
    size_t len, out = 0;
    char *f = read_file(path, &len), *g = malloc(len);
    /* 40: format 4 as psd 0.4.0 wrote it, without each worker's lost
     * client and unknown (70 bytes, not 79). */
    uint32_t crc, keep = v == 1 ? 28 : v == 2 ? 36 : v == 40 ? 70 : 37;
    uint32_t hv = v == 40 ? 4 : v;
    memcpy(g, f, 64);
    set_header_field(g, 8, &hv, 4);
    out = 64;
    for (size_t at = 64; at < len;) {
        uint32_t kind;
        memcpy(&kind, f + at, 4);
        size_t start = out, pl;
        if (kind == 2) {
            uint32_t w;
            memcpy(&w, f + at + 8 + 16, 4);
            memcpy(g + out, f + at, 8 + 20);
            out += 8 + 20;
            for (uint32_t i = 0; i < w; i++) {
                memcpy(g + out, f + at + 28 + (size_t)i * 79, keep);
                out += keep;
            }
            pl = 20 + (size_t)w * 79;
        } else {
            /* Other sections are copied whole. Their end is where the
             * stored length equals the payload's bytes so far and the
             * CRC after it matches: the length is not known up front. */
            for (pl = 0;; pl++) {
                uint64_t l;
                uint32_t c;
                assert_true(at + 8 + pl + 12 <= len);
                memcpy(&l, f + at + 8 + pl, 8);
                memcpy(&c, f + at + 16 + pl, 4);
                if (l == pl && c == psw_crc32c(0, f + at, 8 + pl))
                    break;
            }
            memcpy(g + out, f + at, 8 + pl);
            out += 8 + pl;
        }
        uint64_t l = out - start - 8;
        memcpy(g + out, &l, 8);
        crc = psw_crc32c(0, g + start, out - start);
        memcpy(g + out + 8, &crc, 4);
        out += 12;
        at += 8 + pl + 12;
        if (kind == 0xffff)
            break;
    }
    write_file(path, g, out);
    free(f);
    free(g);
}

/* Snapshots written before format 2 (no `summed` per worker) still load,
 * with no worker taken for one that pushed into the sums, and so do those
 * of format 2 (no `closed`); a format this psd does not know is refused,
 * naming what it reads. */
static void test_snapshots_of_formats_1_and_2_still_load(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN], path[128];
    trained_snapshot(&a, path, sizeof path);
    as_format(path, 1);
    make_node(&b, 1, 4, 2);
    psd_snap_info si, ci;
    psd_snap_tables ct = { 0 };
    if (psd_snapshot_check(dir, 1, &b.cfg, &ct, &ci, err, sizeof err))
        fail_msg("psd --check of a snapshot of format 1: %s", err);
    free(ct.map);
    if (psd_snapshot_load(&b, dir, 2000, &si, NULL, err, sizeof err))
        fail_msg("a snapshot of format 1: %s", err);
    /* What psd's start and --check say of an older format. */
    EXPECT_INT(si.version, 1, "the format the load reports");
    EXPECT_INT(ci.version, 1, "the format --check reports");
    membuf ia = image(&a), ib = image(&b);
    expect_same(&ia, &ib, "tables of a format 1 snapshot");
    EXPECT_U64(b.sync.clock, 3, "node clock");
    EXPECT_U64(b.sync.workers[1].summed, 0, "summed, which format 1 lacks");
    psd_node_destroy(&b);
    free(ib.p);
    /* Format 2 has `summed`, not `closed`. */
    psd_node_destroy(&a);
    trained_snapshot(&a, path, sizeof path);
    as_format(path, 2);
    make_node(&b, 1, 4, 2);
    if (psd_snapshot_load(&b, dir, 2000, &si, NULL, err, sizeof err))
        fail_msg("a snapshot of format 2: %s", err);
    EXPECT_INT(si.version, 2, "the format the load reports");
    ib = image(&b);
    expect_same(&ia, &ib, "tables of a format 2 snapshot");
    EXPECT_U64(b.sync.workers[1].summed, a.sync.workers[1].summed,
               "summed, which format 2 has");
    psd_node_destroy(&b);
    /* Format 5 is not one this psd knows. */
    size_t len;
    char *f = read_file(path, &len);
    uint32_t v = 5;
    set_header_field(f, 8, &v, 4);
    write_file(path, f, len);
    make_node(&b, 1, 4, 2);
    EXPECT_INT(psd_snapshot_load(&b, dir, 2000, NULL, NULL, err, ERRLEN), -1,
               "format 5");
    EXPECT_INT(strstr(err, "format version 5, this psd reads 1..4") != NULL, 1,
               "%s", err);
    EXPECT_INT(strstr(err, "a newer psd wrote it") != NULL, 1,
               "what to do after a downgrade: %s", err);
    free(f), free(ia.p), free(ib.p);
    psd_node_destroy(&a);
    psd_node_destroy(&b);
}

/* psd 0.4.0 wrote format 4 with 70 bytes a worker; the layout grew to 79
 * before 0.4.1 under the same number, and a 0.4.0 folder was refused as
 * damaged ("workers section: worker 0 has ended mask 0x0 over its
 * replaced clients, or unknown = 59": the upgrade trial), --check having
 * passed it. It loads now, its workers as format 3's (whom they had
 * replaced not known), and --check reads it too. */
static void test_a_snapshot_of_psd_0_4_0_loads(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN], path[128];
    trained_snapshot(&a, path, sizeof path);
    as_format(path, 40);
    make_node(&b, 1, 4, 2);
    psd_snap_info si, ci;
    psd_snap_tables ct = { 0 };
    if (psd_snapshot_check(dir, 1, &b.cfg, &ct, &ci, err, sizeof err))
        fail_msg("psd --check of a snapshot of psd 0.4.0: %s", err);
    free(ct.map);
    if (psd_snapshot_load(&b, dir, 2000, &si, NULL, err, sizeof err))
        fail_msg("a snapshot of psd 0.4.0: %s", err);
    EXPECT_INT(si.version, 4, "the format the load reports");
    membuf ia = image(&a), ib = image(&b);
    expect_same(&ia, &ib, "tables of a snapshot of psd 0.4.0");
    EXPECT_U64(b.sync.clock, a.sync.clock, "node clock");
    for (int i = 0; i < b.sync.nworkers; i++) {
        EXPECT_U64(b.sync.workers[i].clock, a.sync.workers[i].clock,
                   "worker %d's clock", i);
        EXPECT_U64(b.sync.workers[i].summed, a.sync.workers[i].summed,
                   "worker %d's summed", i);
    }
    free(ia.p), free(ib.p);
    psd_node_destroy(&a);
    psd_node_destroy(&b);
}

/* Writes the snapshot f (len bytes) to path under layout shape `shape`;
 * a node 1 of the test layout must refuse it as another layout. */
static void refused_under_shape(const char *path, char *f, size_t len,
                                uint64_t shape, const char *what)
{
    psd_node b;
    char err[ERRLEN];
    set_header_field(f, 24, &shape, 8);
    write_file(path, f, len);
    make_node(&b, 1, 4, 2);
    EXPECT_INT(psd_snapshot_load(&b, dir, 2000, NULL, NULL, err, ERRLEN), -1,
               "%s", what);
    EXPECT_INT(strstr(err, "taken under another layout") != NULL, 1,
               "%s: %s", what, err);
    psd_node_destroy(&b);
}

/* psd 0.1 wrote format 1 under a shape of no updater nor consistency
 * mode (node.h): such a snapshot loads, each table's mode from the
 * config, and reports that shape for the journal after it. Format 1
 * under today's shape loads as before; a later format under the 0.1
 * shape, or format 1 under a shape of neither, is another layout. The
 * upgrade trial's 0.1 folder was refused, its message blaming a
 * consistency mode nobody changed. */
static void test_a_snapshot_of_psd_0_1_loads(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN], path[128];
    trained_snapshot(&a, path, sizeof path);
    as_format(path, 1);
    uint64_t old = psd_config_shape_0_1(&a.cfg);
    assert_true(old != psd_config_shape(&a.cfg));
    size_t len;
    char *f = read_file(path, &len);
    set_header_field(f, 24, &old, 8);
    write_file(path, f, len);
    make_node(&b, 1, 4, 2);
    psd_snap_info si;
    if (psd_snapshot_load(&b, dir, 2000, &si, NULL, err, sizeof err))
        fail_msg("a snapshot of psd 0.1: %s", err);
    membuf ia = image(&a), ib = image(&b);
    expect_same(&ia, &ib, "tables of a snapshot of psd 0.1");
    EXPECT_U64(si.shape, old, "the shape its journal goes on under");
    EXPECT_INT(si.of_0_1, 1, "said to be psd 0.1's");
    EXPECT_U64(b.sync.clock, 3, "node clock");
    psd_node_destroy(&b);
    refused_under_shape(path, f, len, old ^ 1,
                        "format 1 under a shape of neither kind");
    /* Format 2 never carried the shape of psd 0.1. */
    free(f);
    psd_node_destroy(&a);
    trained_snapshot(&a, path, sizeof path);
    as_format(path, 2);
    f = read_file(path, &len);
    refused_under_shape(path, f, len, old,
                        "format 2 under the shape of psd 0.1");
    free(f), free(ia.p), free(ib.p);
    psd_node_destroy(&a);
}

/* Node 1 of the test layout with both workers at clock 4: worker 0
 * left, not by a close, worker 1 as `st1`; saved as format v (4: as
 * written today), then loaded into b. */
static void load_left_workers(psd_node *b, uint32_t v, psd_wstate st1)
{
    psd_node a;
    char err[ERRLEN], path[128];
    trained_node(&a, 4, 2);
    for (int i = 0; i < 2; i++) {
        psd_worker *w = &a.sync.workers[i];
        w->state = i ? st1 : PSD_W_LEFT;
        w->owner = NULL;
        w->closed = 0;
        w->clock = 4;
        w->barrier = 1;
    }
    if (psd_snapshot_write(&a, dir, 1, 1, NULL, err, sizeof err))
        fail_msg("write: %s", err);
    psd_snapshot_path(path, sizeof path, dir, 1);
    if (v < 4)
        as_format(path, v);
    make_node(b, 1, 4, 2);
    if (psd_snapshot_load(b, dir, 2000, NULL, NULL, err, sizeof err))
        fail_msg("format %u: %s", v, err);
    psd_node_destroy(&a);
}

/* The psd that wrote formats 1 and 2 did not say whether a worker left
 * by its own close: it took a job for over when every worker had left
 * at one clock and barrier count, and the next job waited for all of
 * them. Read by this psd, such a snapshot ends the job the same way (it
 * took every worker for one lost, and the first job after an upgrade
 * went on with the first worker alone); so does a leave of that psd
 * replayed from the journal after it, while this psd's own records say
 * which kind of leave each was. A snapshot of today's format whose
 * workers were lost, not closed, keeps its job going, as before. */
static void test_an_older_snapshot_whose_workers_all_left_ends_the_job(
    void **state)
{
    (void)state;
    psd_node b;
    for (uint32_t v = 1; v <= 2; v++) {
        load_left_workers(&b, v, PSD_W_LEFT);
        for (int i = 0; i < 2; i++)
            EXPECT_INT(b.sync.workers[i].state, PSD_W_ABSENT,
                       "format %u, worker %d", v, i);
        psd_node_destroy(&b);
    }
    /* Worker 1 still live when it was written: its leave comes from the
     * journal, in a record of the older psd (closed not known: -1). */
    load_left_workers(&b, 2, PSD_W_LIVE);
    EXPECT_INT(b.sync.workers[0].state, PSD_W_LEFT, "before the replay");
    assert_int_equal(psd_sync_replay(&b.sync, 1, 0, -1, 12, 4, 1, NULL,
                                     0, 0, 0, 2000), 0);
    for (int i = 0; i < 2; i++)
        EXPECT_INT(b.sync.workers[i].state, PSD_W_ABSENT,
                   "after the older psd's leave, worker %d", i);
    psd_node_destroy(&b);
    /* This psd's own record after such a snapshot (it crashed before its
     * first snapshot) says the leave was a lost worker's: the job goes
     * on, as it did live. */
    load_left_workers(&b, 2, PSD_W_LIVE);
    assert_int_equal(psd_sync_replay(&b.sync, 1, 0, 0, 12, 4, 1, NULL,
                                     0, 0, 0, 2000), 0);
    EXPECT_INT(b.sync.workers[1].state, PSD_W_LEFT,
               "a lost worker in this psd's record");
    EXPECT_INT(b.sync.workers[1].closed, 0, "not closed");
    psd_node_destroy(&b);
    /* Formats 3 and 4: lost workers leave a job that goes on. */
    for (uint32_t v = 3; v <= 4; v++) {
        load_left_workers(&b, v, PSD_W_LEFT);
        for (int i = 0; i < 2; i++)
            EXPECT_INT(b.sync.workers[i].state, PSD_W_LEFT,
                       "format %u, lost worker %d", v, i);
        assert_int_equal(psd_sync_replay(&b.sync, 1, 0, 0, 12, 4, 1, NULL, 0,
                                         0, 0, 2000), 0);
        EXPECT_INT(b.sync.workers[1].state, PSD_W_LEFT,
                   "format %u, a lost worker replayed", v);
        psd_node_destroy(&b);
    }
}

/* A header whose CRC checks but whose journal_seq is near 2^64 (no node
 * rotates its journal that often) is refused: taken as it is, the start
 * would delete every journal segment below it. */
static void test_a_journal_seq_out_of_range_is_refused(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN], path[128];
    trained_snapshot(&a, path, sizeof path);
    size_t len;
    char *f = read_file(path, &len);
    uint64_t seq = UINT64_MAX;
    set_header_field(f, 40, &seq, 8);
    write_file(path, f, len);
    make_node(&b, 1, 4, 2);
    EXPECT_INT(psd_snapshot_load(&b, dir, 2000, NULL, NULL, err, ERRLEN), -1,
               "journal_seq 2^64 - 1");
    EXPECT_INT(strstr(err, "out of range") != NULL, 1, "%s", err);
    free(f);
    psd_node_destroy(&a);
    psd_node_destroy(&b);
}

static void test_a_snapshot_of_another_layout_is_refused(void **state)
{
    (void)state;
    psd_node a;
    char err[ERRLEN];
    trained_node(&a, 16, 8);
    assert_int_equal(psd_snapshot_write(&a, dir, 1, 1, NULL, err,
                                        sizeof err), 0);
    psd_node_destroy(&a);
    assert_int_equal(try_load(8, 8, err), -1);
    EXPECT_INT(strstr(err, "another layout") != NULL, 1, "shards: %s", err);
    EXPECT_INT(strstr(err, "offset 0") != NULL, 1, "at the header: %s", err);
    assert_int_equal(try_load(16, 4, err), -1);
    EXPECT_INT(strstr(err, "dim 8") != NULL && strstr(err, "dim 4") != NULL,
               1, "dim: %s", err);
    /* Node 0 does not take node 1's file. */
    psd_node z;
    make_node(&z, 0, 16, 8);
    char p0[128], p1[128];
    psd_snapshot_path(p0, sizeof p0, dir, 0);
    psd_snapshot_path(p1, sizeof p1, dir, 1);
    assert_int_equal(rename(p1, p0), 0);
    EXPECT_INT(psd_snapshot_load(&z, dir, 0, NULL, NULL, err, sizeof err), -1,
               "node 0 loading node 1's snapshot");
    EXPECT_INT(strstr(err, "taken by node 1, this is node 0") != NULL, 1,
               "%s", err);
    unlink(p0);
    EXPECT_INT(psd_snapshot_load(&z, dir, 0, NULL, NULL, err, sizeof err), 1,
               "no snapshot at all");
    psd_node_destroy(&z);
}

/* One table as the bytes psd_table_save writes. */
static membuf table_image(const psd_table *t)
{
    membuf m = { 0 };
    psd_sink o = { mem_put, &m };
    assert_int_equal(psd_table_save(t, &o), 0);
    return m;
}

/* Loads the snapshot in dir into a fresh node 1 of ini, matching tables
 * by name (drop: a name or NULL), under psd_snapshot_check as well; the
 * two must agree. Returns the load's result, its map in *tm, the node in
 * *b (destroyed on a refusal) and the message in err. */
static int load_into(psd_node *b, const char *ini, const char *drop,
                     psd_snap_tables *tm, char *err)
{
    const char *names[1] = { drop };
    psd_snap_tables ct = { .drop = names, .ndrop = drop ? 1 : 0 };
    *tm = ct;
    node_from(b, ini, 1, 16, 8);
    char cerr[ERRLEN];
    psd_snap_info ci;
    int rc_c = psd_snapshot_check(dir, 1, &b->cfg, &ct, &ci, cerr, ERRLEN);
    int rc = psd_snapshot_load(b, dir, 2000, NULL, tm, err, ERRLEN);
    EXPECT_INT(rc_c, rc, "--check (%s) and the load (%s) agree", cerr,
               rc ? err : "OK");
    if (rc == 0) {
        EXPECT_INT(ct.nmap == tm->nmap && ct.added == tm->added &&
                   ct.dropped == tm->dropped && (ct.map == NULL) ==
                   (tm->map == NULL) && (!ct.map || memcmp(ct.map, tm->map,
                   ct.nmap * sizeof *ct.map) == 0), 1,
                   "--check matches the tables as the load does");
    } else {
        EXPECT_INT(strcmp(cerr, err), 0, "the same refusal: %s / %s", cerr,
                   err);
        psd_node_destroy(b);
    }
    free(ct.map);
    return rc;
}

/* A snapshot's tables are found in the config by name: tables may be
 * added and sections moved, and each kept table comes back bit for bit;
 * one the config no longer has is refused unless dropped by name; a kept
 * table whose kind, dim, rows, updater or consistency changed is
 * refused. */
static void test_tables_are_matched_by_name(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN];
    trained_node(&a, 16, 8);
    assert_int_equal(psd_snapshot_write(&a, dir, 1, 1, NULL, err,
                                        sizeof err), 0);
    psd_snap_tables tm;
    /* A table added in front, the others in reverse order. */
    static const char *const moved =
        CLUSTER "[table.fresh]\ndim = 5\n" T_BSP T_SGD T_FTRL T_ADAGRAD
        T_ADAM;
    if (load_into(&b, moved, NULL, &tm, err))
        fail_msg("tables added and moved: %s", err);
    static const int32_t want[5] = { 5, 4, 3, 2, 1 };
    EXPECT_INT(tm.map != NULL && tm.nmap == 5 &&
               memcmp(tm.map, want, sizeof want) == 0, 1, "the map");
    EXPECT_INT(tm.added, 1, "tables added");
    EXPECT_INT(tm.dropped, 0, "tables dropped");
    for (int i = 0; i < 5; i++) {
        membuf x = table_image(a.tables[i]), y = table_image(b.tables[5 - i]);
        expect_same(&x, &y, psd_table_conf_get(a.tables[i])->name);
        free(x.p), free(y.p);
    }
    EXPECT_U64(psd_table_rows(b.tables[0]), 0, "rows of the new table");
    EXPECT_U64(b.sync.clock, 3, "node clock");
    psd_dclient *dc = psd_dedup_attach(b.dedup, 77, 5, 2000);
    int st = -1;
    EXPECT_INT(psd_dedup_seen(dc, 41, 0, &st), 1, "an applied push");
    free(tm.map);
    psd_node_destroy(&b);
    /* Where the caller asks for the config's tables in order (NULL), the
     * header says they are not. */
    node_from(&b, moved, 1, 16, 8);
    EXPECT_INT(psd_snapshot_load(&b, dir, 2000, NULL, NULL, err, ERRLEN), -1,
               "strict");
    EXPECT_INT(strstr(err, "holds 5 tables, the config 6: psd --reshard "
                      "moves the tables as they are") != NULL, 1, "%s", err);
    psd_node_destroy(&b);

    /* ftrl gone: refused, naming it and the way to let it go... */
    static const char *const gone = CLUSTER T_ADAM T_ADAGRAD T_SGD T_BSP;
    EXPECT_INT(load_into(&b, gone, NULL, &tm, err), -1, "a table gone");
    EXPECT_INT(strstr(err, "table 'ftrl' (sparse, dim 4) is in the snapshot "
                      "but not in the config") != NULL &&
               strstr(err, "--drop-table ftrl") != NULL, 1, "%s", err);
    EXPECT_INT(tm.map == NULL, 1, "no map after a refusal");
    EXPECT_INT(load_into(&b, gone, "adam", &tm, err), -1, "another dropped");
    /* ...which --drop-table does; the rest is as it was. */
    if (load_into(&b, gone, "ftrl", &tm, err))
        fail_msg("ftrl dropped: %s", err);
    static const int32_t want2[5] = { 0, 1, -1, 2, 3 };
    EXPECT_INT(tm.map != NULL && memcmp(tm.map, want2, sizeof want2) == 0, 1,
               "the map with ftrl dropped");
    EXPECT_INT(tm.dropped, 1, "dropped");
    EXPECT_INT(tm.added, 0, "added");
    for (int i = 0; i < 5; i++) {
        if (want2[i] < 0)
            continue;
        membuf x = table_image(a.tables[i]);
        membuf y = table_image(b.tables[want2[i]]);
        expect_same(&x, &y, psd_table_conf_get(a.tables[i])->name);
        free(x.p), free(y.p);
    }
    free(tm.map);
    psd_node_destroy(&b);
    /* A dropped table is read past, not built: its header is the file's
     * word alone, and rows beyond what any config allows are refused
     * before anything is sized by them (they made psd write past a
     * buffer), while a row count that does not fit its shards is found
     * by the read. adam, table 0, has its rows at byte 77 (section
     * header 8, kind 1, dim 4). */
    static const char *const no_adam = CLUSTER T_ADAGRAD T_FTRL T_SGD T_BSP;
    char path[128];
    psd_snapshot_path(path, sizeof path, dir, 1);
    size_t flen;
    char *file = read_file(path, &flen);
    uint64_t rows = (uint64_t)1 << 62;
    memcpy(file + 77, &rows, 8);
    write_file(path, file, flen);
    EXPECT_INT(load_into(&b, no_adam, "adam", &tm, err), -1, "rows 2^62");
    EXPECT_INT(strstr(err, "table 'adam': updater 4, dim 8, rows "
                      "4611686018427387904: not a table psd writes") != NULL,
               1, "%s", err);
    rows = 1000;
    memcpy(file + 77, &rows, 8);
    write_file(path, file, flen);
    EXPECT_INT(load_into(&b, no_adam, "adam", &tm, err), -1, "rows 1000");
    EXPECT_INT(strstr(err, "table section: shard 1 holds 3 rows, the table "
                      "63 here") != NULL, 1, "%s", err);
    rows = 50;
    memcpy(file + 77, &rows, 8);
    write_file(path, file, flen);
    free(file);
    if (load_into(&b, no_adam, "adam", &tm, err))
        fail_msg("adam dropped: %s", err);
    free(tm.map);
    psd_node_destroy(&b);

    /* A kept table whose dim changed, among moved ones. */
    static const char *const dim5 =
        CLUSTER T_BSP T_SGD T_FTRL
        "[table.adagrad]\nkind = sparse\ndim = 5\nupdater = adagrad\n" T_ADAM;
    EXPECT_INT(load_into(&b, dim5, NULL, &tm, err), -1, "dim changed");
    EXPECT_INT(strstr(err, "table 'adagrad' is sparse, dim 4, rows 0 in the "
                      "snapshot and sparse, dim 5, rows 0 in the config") !=
               NULL, 1, "%s", err);
    /* Its updater. */
    static const char *const upd =
        CLUSTER T_ADAM T_ADAGRAD T_FTRL
        "[table.sgd]\nkind = dense\nrows = 20\ndim = 2\nupdater = sum\n"
        T_BSP "[table.fresh]\ndim = 5\n";
    EXPECT_INT(load_into(&b, upd, NULL, &tm, err), -1, "updater changed");
    EXPECT_SUBSTR(err, "(to keep the weights under another updater: psd "
                  "--export with the old ini, then psd --import into the "
                  "new one)", "the way to keep them");
    EXPECT_INT(strstr(err, "table 'sgd': its updater changed") != NULL, 1,
               "%s", err);
    /* Its consistency mode, which only the shape holds: with a table
     * added, and with one dropped (whose own mode psd cannot know). */
    static const char *const ssp =
        CLUSTER T_ADAM T_ADAGRAD T_FTRL T_SGD "consistency = ssp\n" T_BSP
        "[table.fresh]\ndim = 5\n";
    EXPECT_INT(load_into(&b, ssp, NULL, &tm, err), -1, "sgd now ssp");
    EXPECT_INT(strstr(err, "consistency mode changed") != NULL &&
               strstr(err, "offset 24") != NULL, 1, "%s", err);
    static const char *const ssp_gone =
        CLUSTER T_ADAM T_ADAGRAD T_SGD "consistency = ssp\n" T_BSP;
    EXPECT_INT(load_into(&b, ssp_gone, "ftrl", &tm, err), -1,
               "sgd now ssp, ftrl dropped");
    EXPECT_INT(strstr(err, "consistency mode changed") != NULL, 1, "%s",
               err);
    /* The bsp table turned async: its saved sums do not fit it. */
    static const char *const async =
        CLUSTER "[table.bsp]\nkind = sparse\ndim = 3\nupdater = sum\n" T_ADAM
        T_ADAGRAD T_FTRL T_SGD;
    EXPECT_INT(load_into(&b, async, NULL, &tm, err), -1, "bsp now async");
    EXPECT_INT(strstr(err, "sums of a clock saved for a table that is not "
                      "bsp") != NULL, 1, "%s", err);
    psd_node_destroy(&a);
}

static void test_a_failed_write_keeps_the_old_snapshot(void **state)
{
    (void)state;
    psd_node a;
    char err[ERRLEN], path[128], tmp[160];
    trained_node(&a, 16, 8);
    assert_int_equal(psd_snapshot_write(&a, dir, 1, 1, NULL, err,
                                        sizeof err), 0);
    psd_snapshot_path(path, sizeof path, dir, 1);
    size_t len;
    char *old = read_file(path, &len);
    /* A disk that fills up: the file size limit stops the writer half
     * way (EFBIG, with SIGXFSZ ignored as psd does). */
    struct rlimit save, small;
    getrlimit(RLIMIT_FSIZE, &save);
    small = save;
    small.rlim_cur = 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    train(&a, 5, 1);
    int rc = psd_snapshot_write(&a, dir, 2, 1, NULL, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &save);
    signal(SIGXFSZ, prev);
    EXPECT_INT(rc, -1, "writing past the limit");
    EXPECT_INT(strstr(err, "File too large") != NULL, 1, "%s", err);
    size_t len2;
    char *now = read_file(path, &len2);
    EXPECT_INT(len2 == len && memcmp(old, now, len) == 0, 1,
               "the old snapshot is untouched");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    EXPECT_INT(access(tmp, F_OK), -1, "no temporary file left behind");
    psd_snap_info si;
    psd_node b;
    make_node(&b, 1, 16, 8);
    assert_int_equal(psd_snapshot_load(&b, dir, 0, &si, NULL, err, ERRLEN),
                     0);
    EXPECT_U64(si.generation, 1, "the generation loaded");
    psd_node_destroy(&b);
    psd_node_destroy(&a);
    free(old);
    free(now);
}

/* The tools' all-or-none writes (psd --reshard, --import): staged
 * snapshots are loaded by no start; committed, they all are. A node whose
 * snapshot stayed staged (a tool killed between two renames) is refused
 * by a start and by --check, where it started from init beside nodes
 * with their model. */
static void test_staged_snapshots_take_their_names_all_at_once(void **state)
{
    (void)state;
    psd_node a, b;
    char err[ERRLEN], path[128];
    psd_snap_info si;
    trained_node(&a, 16, 8);
    assert_int_equal(psd_snapshot_stage(&a, dir, 3, 1, &si, err,
                                        sizeof err), 0);
    psd_snapshot_path(path, sizeof path, dir, 1);
    EXPECT_INT(access(path, F_OK), -1, "staged: no snapshot yet");
    make_node(&b, 1, 16, 8);
    EXPECT_INT(psd_snapshot_load(&b, dir, 0, &si, NULL, err, ERRLEN), -1,
               "a start beside a staged snapshot only");
    EXPECT_SUBSTR(err, "psd-node1.snap.staged: no snapshot of node 1 beside "
                  "it: a psd --reshard or --import was cut off", "why");
    /* And how to finish it: the old advice, removing it, left a half
     * model that --check passed. */
    EXPECT_SUBSTR(err, "every .staged file is whole: renaming each to "
                  "psd-nodeN.snap finishes it", "what to do");
    psd_snap_tables tm = { 0 };
    EXPECT_INT(psd_snapshot_check(dir, 1, &b.cfg, &tm, &si, err, ERRLEN), -1,
               "--check beside a staged snapshot only");
    psd_node_destroy(&b);
    unsigned char want[2] = { 0, 1 };
    EXPECT_INT(psd_snapshot_commit_all(dir, want, 2, err, sizeof err), 0,
               "commit: %s", err);
    EXPECT_INT(access(path, F_OK), 0, "committed: the snapshot is there");
    make_node(&b, 1, 16, 8);
    EXPECT_INT(psd_snapshot_load(&b, dir, 0, &si, NULL, err, ERRLEN), 0,
               "a start on the committed snapshot: %s", err);
    EXPECT_U64(si.generation, 3, "its generation");
    psd_node_destroy(&b);
    /* A rename that fails (node 0 was never staged): none is in place. */
    unlink(path);
    assert_int_equal(psd_snapshot_stage(&a, dir, 4, 1, &si, err,
                                        sizeof err), 0);
    unsigned char both[2] = { 1, 1 };
    EXPECT_INT(psd_snapshot_commit_all(dir, both, 2, err, sizeof err), -1,
               "commit with node 0 not staged");
    EXPECT_INT(access(path, F_OK), -1, "node 1's not in place either");
    char staged[160];
    psd_snapshot_staged_path(staged, sizeof staged, dir, 1);
    EXPECT_INT(access(staged, F_OK), -1, "nor left staged");
    psd_node_destroy(&a);
}

/* ---- the journal ------------------------------------------------------ */

typedef struct seen {
    int pushes, clocks;
    uint64_t last_ts, last_clock;
    float sum;
} seen;

static int count_record(void *ctx, const psd_jrecord *r, char *err,
                        size_t errlen)
{
    (void)err;
    (void)errlen;
    seen *s = ctx;
    if (r->type == PSD_J_CLOCK) {
        s->clocks++;
        s->last_clock = r->clock;
        return 0;
    }
    s->pushes++;
    s->last_ts = r->msg.ts;
    float v;
    memcpy(&v, r->msg.vals, 4);
    s->sum += v;
    return 0;
}

static void put_pushes(psd_journal *j, int from, int n)
{
    char err[ERRLEN];
    for (int i = from; i < from + n; i++) {
        uint64_t key = (uint64_t)i;
        float v = 1.0f;
        psw_msg m = { 0 };
        m.op = PSW_OP_PUSH;
        m.ts = (uint64_t)i;
        m.table = 0;
        m.nkeys = 1;
        m.keys = (const char *)&key;
        m.vals = (const char *)&v;
        m.vals_len = 4;
        assert_int_not_equal(psd_journal_push(j, 9, 1, &m, PSW_OK), 0);
    }
    assert_int_equal(psd_journal_write(j, err, sizeof err), 0);
}

static int replay(uint64_t from, seen *s, uint64_t *next, char *err)
{
    uint64_t records;
    memset(s, 0, sizeof *s);
    char cut[300];
    return psd_journal_replay(dir, 2, 0xabc, 0, from, 1 << 20, count_record, s,
                              next, &records, cut, sizeof cut, err, ERRLEN);
}

/* What replay hands over of WORKER records. */
typedef struct workers_seen {
    int n;
    psd_jrecord r[4];
} workers_seen;

static int keep_worker(void *ctx, const psd_jrecord *r, char *err,
                       size_t errlen)
{
    (void)err;
    (void)errlen;
    workers_seen *s = ctx;
    if (r->type == PSD_J_WORKER && s->n < 4)
        s->r[s->n++] = *r;
    return 0;
}

/* Seals body (len bytes) as a record at p: length, CRCs (section 6). */
static size_t put_record(char *p, const char *body, uint32_t len)
{
    uint32_t crc = psw_crc32c(0, body, len);
    memcpy(p, &len, 4);
    memcpy(p + 4, &crc, 4);
    crc = psw_crc32c(0, p, 8);
    memcpy(p + 8, &crc, 4);
    memcpy(p + 12, body, len);
    return 12 + (size_t)len;
}

/* A WORKER record carries the clients refused for good as that worker
 * (a restart forgot them, and let a replaced process back); one of a
 * psd before them (32-byte body) still reads, as not saying; an ended
 * mask marking an empty entry is a malformed record. */
static void test_worker_records_carry_the_refused_clients(void **state)
{
    (void)state;
    char err[ERRLEN], path[300];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    const uint64_t refused[PSD_J_REPLACED] = { 0, 0, 70, 71 };
    assert_int_not_equal(psd_journal_worker(j, 1, 0, 0, 72, 3, 1, refused,
                                            8, 72, 0), 0);
    assert_int_equal(psd_journal_write(j, err, sizeof err), 0);
    psd_journal_close(j);
    /* The record again as a psd before them wrote it: its first 32. */
    psd_journal_path(path, sizeof path, dir, 2, 1);
    size_t len;
    char *f = read_file(path, &len);
    EXPECT_INT((int)len, 28 + 12 + 80, "START, then a WORKER of 80 bytes");
    f = realloc(f, len + 44 + 92);
    assert_non_null(f);
    len += put_record(f + len, f + 28 + 12, 32);
    write_file(path, f, len);
    workers_seen s = { 0 };
    uint64_t next, records;
    assert_int_equal(psd_journal_replay(dir, 2, 0xabc, 0, 1, 1 << 20,
                                        keep_worker, &s, &next, &records,
                                        NULL, 0, err, sizeof err), 0);
    EXPECT_INT(s.n, 2, "two WORKER records");
    EXPECT_INT(s.r[0].has_replaced, 1, "this psd's record says");
    EXPECT_U64(s.r[0].replaced[2], 70, "a replaced client");
    EXPECT_U64(s.r[0].replaced[3], 71, "the newest");
    EXPECT_INT((int)s.r[0].ended_mask, 8, "71 let go by end-job");
    EXPECT_U64(s.r[0].client_id, 72, "its client");
    EXPECT_U64(s.r[0].lost_id, 72, "lost, its grace ran out");
    EXPECT_INT(s.r[0].unknown, 0, "whom it replaced is known");
    EXPECT_U64(s.r[0].lost_id, 72, "lost, its grace ran out");
    EXPECT_INT(s.r[0].unknown, 0, "whom it replaced is known");
    EXPECT_INT(s.r[1].has_replaced, 0, "an older psd's does not");
    EXPECT_INT(s.r[1].unknown, 1, "so whom it replaced is unknown");
    EXPECT_U64(s.r[1].clock, 3, "the rest as written");
    /* Bit 1 of the mask: an end-job's on an empty entry; a lost client
     * not the worker's own. */
    for (int bad = 0; bad < 2; bad++) {
        char body[80];
        uint64_t other = 73;
        memcpy(body, f + 28 + 12, 80);
        if (bad == 0)
            body[64] = 2;
        else
            memcpy(body + 72, &other, 8);
        len = 28 + put_record(f + 28, body, 80);
        write_file(path, f, len);
        EXPECT_INT(psd_journal_replay(dir, 2, 0xabc, 0, 1, 1 << 20, keep_worker,
                                      &s, &next, &records, NULL, 0, err,
                                      sizeof err),
                   -1, "%s", bad ? "another lost client" : "a mask on an "
                   "empty entry");
        EXPECT_SUBSTR(err, "malformed record", "why");
    }
    free(f);
    psd_journal_prune(dir, 2, 100);
}

static void test_the_journal_replays_segments_in_order(void **state)
{
    (void)state;
    char err[ERRLEN];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    put_pushes(j, 0, 10);
    assert_int_equal(psd_journal_rotate(j, err, sizeof err), 0);
    EXPECT_U64(psd_journal_seq(j), 2, "after a rotation");
    assert_int_not_equal(psd_journal_clock(j, 5, 2), 0);
    put_pushes(j, 10, 5);
    EXPECT_U64(psd_journal_written(j), 18, "LSNs: 2 starts, 15 pushes, 1 "
               "clock");
    psd_journal_close(j);
    seen s;
    uint64_t next;
    assert_int_equal(replay(1, &s, &next, err), 0);
    EXPECT_INT(s.pushes, 15, "pushes");
    EXPECT_INT(s.clocks, 1, "clocks");
    EXPECT_U64(s.last_ts, 14, "the last push");
    EXPECT_U64(next, 3, "the segment to open next");
    /* From the snapshot's segment on. */
    assert_int_equal(replay(2, &s, &next, err), 0);
    EXPECT_INT(s.pushes, 5, "pushes of segment 2");
    /* Another layout shape is refused. */
    uint64_t records;
    assert_int_equal(psd_journal_replay(dir, 2, 0xdef, 0, 1, 1 << 20,
                                        count_record, &s, &next, &records,
                                        NULL, 0, err, sizeof err), -1);
    EXPECT_INT(strstr(err, "layout shape") != NULL, 1, "%s", err);
    /* Without the snapshot that covered segment 1, segment 2 alone is a
     * hole in the history. */
    psd_journal_prune(dir, 2, 2);
    EXPECT_U64(psd_journal_first(dir, 2), 2, "segment 1 is gone");
    assert_int_equal(replay(1, &s, &next, err), -1);
    EXPECT_INT(strstr(err, "snapshot that covers segments 1..1 is "
                           "missing") != NULL, 1, "%s", err);
    /* psd --check finds the same hole, and reads the segments a replay
     * from the snapshot's segment would. */
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0, 1, 1 << 20, err,
                                 sizeof err), -1,
               "--check without the snapshot");
    EXPECT_INT(strstr(err, "snapshot that covers segments 1..1 is "
                           "missing") != NULL, 1, "%s", err);
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0, 2, 1 << 20, err,
                                 sizeof err), 0,
               "--check with it: %s", err);
    EXPECT_INT(psd_journal_check(dir, 2, 0xdef, 0, 2, 1 << 20, err,
                                 sizeof err), -1,
               "--check under another layout");
    EXPECT_INT(strstr(err, "layout shape") != NULL, 1, "%s", err);
    psd_journal_prune(dir, 2, 100);
    EXPECT_U64(psd_journal_first(dir, 2), 0, "all gone");
}

/* A journal begun by psd 0.1 (no snapshot before it) carries that
 * release's shape: psd_journal_shape says so, and the replay takes it
 * under that shape; a journal of today's shape, or of neither, is left
 * to the replay under today's, which refuses the latter. */
static void test_a_journal_begun_by_psd_0_1_replays(void **state)
{
    (void)state;
    char err[ERRLEN];
    uint64_t today = 0xabc, then = 0x123, records, next;
    int of_0_1 = -1;
    EXPECT_U64(psd_journal_shape(dir, 2, today, then, &of_0_1), today,
               "no journal");
    EXPECT_INT(of_0_1, 0, "no journal");
    psd_journal *j = psd_journal_open(dir, 2, then, 0, 1, err, sizeof err);
    assert_non_null(j);
    put_pushes(j, 0, 4);
    psd_journal_close(j);
    uint64_t shape = psd_journal_shape(dir, 2, today, then, &of_0_1);
    EXPECT_U64(shape, then, "a journal begun by psd 0.1");
    EXPECT_INT(of_0_1, 1, "a journal begun by psd 0.1");
    seen s = { 0 };
    EXPECT_INT(psd_journal_replay(dir, 2, shape, 0, 1, 1 << 20, count_record,
                                  &s, &next, &records, NULL, 0, err,
                                  sizeof err), 0, "%s", err);
    EXPECT_INT(s.pushes, 4, "pushes");
    EXPECT_INT(psd_journal_check(dir, 2, shape, 0, 1, 1 << 20, err,
                                 sizeof err), 0, "--check: %s", err);
    psd_journal_prune(dir, 2, 100);
    /* Under a shape of neither: today's, which the replay refuses. */
    j = psd_journal_open(dir, 2, 0x456, 0, 1, err, sizeof err);
    assert_non_null(j);
    psd_journal_close(j);
    EXPECT_U64(psd_journal_shape(dir, 2, today, then, &of_0_1), today,
               "a journal of another layout");
    EXPECT_INT(of_0_1, 0, "a journal of another layout");
    psd_journal_prune(dir, 2, 100);
}

/* A segment missing between the snapshot's and the newest stops the
 * replay, and `psd --check` says so too (it said OK, and the start then
 * failed: an operators' trial). */
static void test_a_segment_missing_in_the_middle_fails_the_check(void **state)
{
    (void)state;
    char err[ERRLEN], path[300];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    for (int i = 0; i < 2; i++) {
        put_pushes(j, i * 3, 3);
        assert_int_equal(psd_journal_rotate(j, err, sizeof err), 0);
    }
    put_pushes(j, 6, 3);
    psd_journal_close(j);
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0, 1, 1 << 20, err,
                                 sizeof err), 0,
               "all three there: %s", err);
    psd_journal_path(path, sizeof path, dir, 2, 2);
    assert_int_equal(unlink(path), 0);
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0, 1, 1 << 20, err,
                                 sizeof err), -1,
               "segment 2 of 1..3 missing");
    EXPECT_SUBSTR(err, "psd-node2.journal.0000000002: missing (segments "
                  "1..3 are there)", "--check");
    seen s;
    uint64_t next;
    assert_int_equal(replay(1, &s, &next, err), -1);
    EXPECT_SUBSTR(err, "psd-node2.journal.0000000002: missing", "replay");
    /* There but not to be opened (a trial's file of another owner; here a
     * link to itself, which root cannot open either): said as it is, not
     * "missing". */
    assert_int_equal(symlink(path, path), 0);
    assert_int_equal(replay(1, &s, &next, err), -1);
    EXPECT_SUBSTR(err, "psd-node2.journal.0000000002: cannot open it: ",
                  "replay of a segment there");
    EXPECT_INT(strstr(err, "missing") == NULL, 1, "not missing: %s", err);
    assert_int_equal(unlink(path), 0);
    psd_journal_prune(dir, 2, 100);
}

/* The inits a segment's rows started from are in its START record: a
 * push in a segment of other inits is refused at that push (replayed, it
 * would land on rows of other values), by the replay and the check; a
 * segment of other inits without a push replays (a clean stop's last),
 * and 0 (an earlier psd's segment, or a caller that does not ask) checks
 * nothing. */
static void test_a_push_made_on_other_inits_is_refused(void **state)
{
    (void)state;
    char err[ERRLEN], path[300], cut[300];
    uint64_t next, records;
    seen s;
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0x123456, 1, err,
                                      sizeof err);
    assert_non_null(j);
    assert_int_equal(psd_journal_rotate(j, err, sizeof err), 0);
    put_pushes(j, 0, 3);
    psd_journal_close(j);
    psd_journal_path(path, sizeof path, dir, 2, 2);
    memset(&s, 0, sizeof s);
    EXPECT_INT(psd_journal_replay(dir, 2, 0xabc, 0x123456, 1, 1 << 20,
                                  count_record, &s, &next, &records, cut,
                                  sizeof cut, err, ERRLEN), 0,
               "the same inits: %s", err);
    EXPECT_INT(s.pushes, 3, "pushes replayed");
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0x123456, 1, 1 << 20, err,
                                 sizeof err), 0, "checked: %s", err);
    memset(&s, 0, sizeof s);
    EXPECT_INT(psd_journal_replay(dir, 2, 0xabc, 0x654321, 1, 1 << 20,
                                  count_record, &s, &next, &records, cut,
                                  sizeof cut, err, ERRLEN), -1,
               "other inits");
    EXPECT_INT(s.pushes, 0, "pushes replayed onto other inits");
    EXPECT_SUBSTR(err, "psd-node2.journal.0000000002: offset ", "replay");
    EXPECT_SUBSTR(err, ": this push was journaled on rows made with other "
                  "inits (mark 123456, this ini's 654321): a table's init "
                  "or seed changed", "replay");
    char cerr[ERRLEN];
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0x654321, 1, 1 << 20, cerr,
                                 sizeof cerr), -1, "checked, other inits");
    EXPECT_INT(strcmp(cerr, err), 0, "the check says \"%s\", the replay "
               "\"%s\"", cerr, err);
    /* Not asked (0): replayed. */
    EXPECT_INT(psd_journal_replay(dir, 2, 0xabc, 0, 1, 1 << 20,
                                  count_record, &s, &next, &records, cut,
                                  sizeof cut, err, ERRLEN), 0,
               "inits not asked: %s", err);
    /* Segment 1 alone holds no push: any inits replay it. */
    assert_int_equal(unlink(path), 0);
    EXPECT_INT(psd_journal_replay(dir, 2, 0xabc, 0x654321, 1, 1 << 20,
                                  count_record, &s, &next, &records, cut,
                                  sizeof cut, err, ERRLEN), 0,
               "a segment of other inits without a push: %s", err);
    EXPECT_INT(psd_journal_check(dir, 2, 0xabc, 0x654321, 1, 1 << 20, err,
                                 sizeof err), 0, "checked: %s", err);
    psd_journal_prune(dir, 2, 100);
}

/* The inits mark of a one-table config whose table line is `init`. */
static uint32_t inits_of(const char *init)
{
    char path[128], err[ERRLEN];
    snprintf(path, sizeof path, "%s/inits.ini", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "[cluster]\nnodes = 127.0.0.1:7070\n[table.e]\ndim = 2\n%s\n",
            init);
    assert_int_equal(fclose(f), 0);
    psd_config c;
    if (psd_config_load(&c, path, err, sizeof err))
        fail_msg("config: %s", err);
    uint32_t m = psd_config_inits(&c);
    psd_config_destroy(&c);
    unlink(path);
    return m;
}

/* The mark covers what makes a row's values, and nothing else: a change
 * that makes the same rows must not stop a node after a crash (a
 * review: the seed of zeros, zeros written as constant 0). */
static void test_the_inits_mark_covers_what_makes_rows(void **state)
{
    (void)state;
    uint32_t zeros = inits_of("init = zeros");
    EXPECT_INT(zeros != 0, 1, "never 0");
    EXPECT_INT(inits_of("") == zeros, 1, "the default is zeros");
    EXPECT_INT(inits_of("init = constant 0") == zeros, 1, "constant 0");
    EXPECT_INT(inits_of("init = constant -0") == zeros, 1, "constant -0");
    EXPECT_INT(inits_of("init = zeros\nseed = 7") == zeros, 1,
               "a seed draws nothing for zeros");
    EXPECT_INT(inits_of("init = constant 1\nseed = 7") ==
                   inits_of("init = constant 1"), 1, "nor for constant");
    EXPECT_INT(inits_of("init = constant 1") != zeros, 1, "constant 1");
    EXPECT_INT(inits_of("init = normal 0 1") != inits_of("init = normal 0 2"),
               1, "a normal's std");
    EXPECT_INT(inits_of("init = normal 0 1\nseed = 7") !=
                   inits_of("init = normal 0 1"), 1, "a normal's seed");
    EXPECT_INT(inits_of("init = uniform -1 1\nseed = 7") !=
                   inits_of("init = uniform -1 1"), 1, "a uniform's seed");
    EXPECT_INT(inits_of("init = uniform 0 1") != inits_of("init = normal 0 1"),
               1, "the kind");
    EXPECT_INT(inits_of("init = normal 0 0\nseed = 5") == zeros, 1,
               "normal 0 0 draws 0 every time");
    EXPECT_INT(inits_of("init = normal 2 0") == inits_of("init = constant 2"),
               1, "normal 2 0 is constant 2");
    /* What psd logs (and the stats show) puts back the same mark: 7
     * digits wrote 1/sqrt(512) as another float (a review). */
    psd_init_params ip = { PSD_INIT_NORMAL, 0.0f, 0.0441941738f, 3 };
    char text[96], line[128];
    psd_init_format(text, sizeof text, &ip);
    snprintf(line, sizeof line, "init = %s\nseed = 3", text);
    EXPECT_INT(inits_of(line) ==
                   inits_of("init = normal 0 0.0441941738\nseed = 3"), 1,
               "\"%s\" puts back the mark", text);
    ip = (psd_init_params){ PSD_INIT_UNIFORM, -0.1f, 0.1f, 0 };
    psd_init_format(text, sizeof text, &ip);
    EXPECT_STR(text, "uniform -0.1 0.1", "no more digits than needed");
}

/* Segment 1 of node 2's journal with four pushes; its path into path. */
static void four_pushes(char *path, size_t len)
{
    char err[ERRLEN];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    put_pushes(j, 0, 4);
    psd_journal_close(j);
    psd_journal_path(path, len, dir, 2, 1);
}

static void test_a_torn_last_record_is_cut_and_damage_elsewhere_refused(
    void **state)
{
    (void)state;
    char err[ERRLEN], path[128];
    four_pushes(path, sizeof path);
    size_t len;
    char *good = read_file(path, &len);
    /* A crash cut the last record at any byte: the three before it
     * replay, and the file is cut back to them. */
    size_t rec = (len - 28) / 4;         /* start record: 12 + 16 */
    for (size_t cut = len - rec + 1; cut < len; cut++) {
        write_file(path, good, cut);
        seen s;
        uint64_t next;
        if (replay(1, &s, &next, err))
            fail_msg("cut at %zu: %s", cut, err);
        EXPECT_INT(s.pushes, 3, "records before the torn one");
        struct stat st;
        stat(path, &st);
        EXPECT_U64((uint64_t)st.st_size, len - rec, "the file was cut back");
    }
    /* A flipped bit anywhere is damage, even in the last record's length
     * (its header has a CRC of its own, so it is not taken for a cut). */
    char *bad = malloc(len);
    for (size_t i = 0; i < len; i++) {
        memcpy(bad, good, len);
        bad[i] ^= 0x10;
        write_file(path, bad, len);
        seen s;
        uint64_t next;
        int rc = replay(1, &s, &next, err);
        if (rc != -1)
            fail_msg("a flip at byte %zu of %zu was accepted", i, len);
        if (!strstr(err, path) || !strstr(err, "offset "))
            fail_msg("flip at %zu: %s", i, err);
    }
    /* A torn record that is not the last segment's is damage too. */
    write_file(path, good, len - 3);
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 2, err, sizeof err);
    put_pushes(j, 4, 1);
    psd_journal_close(j);
    seen s;
    uint64_t next;
    assert_int_equal(replay(1, &s, &next, err), -1);
    EXPECT_INT(strstr(err, "truncated record") != NULL, 1, "%s", err);
    psd_journal_prune(dir, 2, 100);
    free(good);
    free(bad);
}

/* The unfinished end of the last write, in a file psd's user may read
 * but not write: psd cannot cut it, and said only "truncated record",
 * which reads as damage the operator must cut by hand. It says what it
 * is and why it was not cut. Run as nobody in a child (root may cut
 * anything). */
static void test_a_torn_tail_psd_may_not_cut_says_so(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    char path[128];
    four_pushes(path, sizeof path);
    size_t len;
    char *good = read_file(path, &len);
    write_file(path, good, len - 3);
    free(good);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(chmod(path, 0644), 0);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        if (setgid(65534) || setuid(65534))
            _exit(2);
        seen sn;
        uint64_t next;
        char e[ERRLEN];
        int rc = replay(1, &sn, &next, e);
        dprintf(pfd[1], "%d %s", rc, e);
        _exit(0);
    }
    close(pfd[1]);
    char out[ERRLEN + 16] = "";
    ssize_t n = read(pfd[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = '\0';
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    assert_int_equal(chmod(dir, 0700), 0);
    EXPECT_INT(WIFEXITED(st) && WEXITSTATUS(st) == 0, 1, "the child ran");
    EXPECT_SUBSTR(out, "-1 ", "refused");
    EXPECT_SUBSTR(out, "the end of a write that a crash left unfinished, "
                  "which psd could not cut off: Permission denied", "why");
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    EXPECT_U64((uint64_t)sb.st_size, len - 3, "the file as it was");
    psd_journal_prune(dir, 2, 100);
}

/* n pushes of one dense row of `dim` floats, 1.0 each (ts from+1..). */
static void put_rows(psd_journal *j, int from, int n, size_t dim)
{
    char err[ERRLEN];
    float *v = malloc(dim * sizeof *v);
    for (size_t i = 0; i < dim; i++)
        v[i] = 1.0f;
    for (int i = from; i < from + n; i++) {
        uint64_t key = (uint64_t)i;
        psw_msg m = { 0 };
        m.op = PSW_OP_PUSH;
        m.ts = (uint64_t)i + 1;
        m.nkeys = 1;
        m.keys = (const char *)&key;
        m.vals = (const char *)v;
        m.vals_len = dim * sizeof *v;
        assert_int_not_equal(psd_journal_push(j, 9, 1, &m, PSW_OK), 0);
    }
    assert_int_equal(psd_journal_write(j, err, sizeof err), 0);
    free(v);
}

/* Replays the newest segment as `bytes` (len of them) and says how many
 * pushes came back (-1: refused, with the reason in err) and the file's
 * size after it (*size). */
static int replay_as(const char *path, const char *bytes, size_t len,
                     uint64_t *size, char *cut, size_t cutlen, char *err)
{
    write_file(path, bytes, len);
    seen s;
    memset(&s, 0, sizeof s);
    uint64_t next, records;
    int rc = psd_journal_replay(dir, 2, 0xabc, 0, 1, 1 << 20, count_record, &s,
                                &next, &records, cut, cutlen, err, ERRLEN);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    *size = (uint64_t)st.st_size;
    return rc ? -1 : s.pushes;
}

/* A power loss can leave an append's new length on disk without its data:
 * the file then ends in zeros, from where writing stopped (a record's
 * start, or a page boundary inside it). That is a torn tail too, and is
 * cut; zeros that stop short of the end, or start inside a page, or end
 * a segment that is not the newest, are damage. */
static void test_a_tail_of_zeros_is_cut_and_other_zeros_refused(void **state)
{
    (void)state;
    char err[ERRLEN], cut[600], path[128];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    /* Three records of 8,084 bytes each after the 28-byte start record:
     * the last spans 16,196..24,280, across the page boundary 20,480. */
    put_rows(j, 0, 3, 2000);
    psd_journal_close(j);
    psd_journal_path(path, sizeof path, dir, 2, 1);
    size_t len;
    char *good = read_file(path, &len);
    size_t rec = 12 + 64 + 8 + 8000, last = 28 + 2 * rec;
    EXPECT_U64(len, 28 + 3 * rec, "the segment's size");
    char *img = calloc(1, len + 3 * TAIL);
    uint64_t size;

    /* The length grew by two pages that were never written. */
    memcpy(img, good, len);
    EXPECT_INT(replay_as(path, img, len + 2 * TAIL, &size, cut, sizeof cut,
                         err), 3, "pushes before two pages of zeros: %s", err);
    EXPECT_U64(size, len, "the file was cut back to its records");
    EXPECT_INT(strstr(cut, path) && strstr(cut, "zeros to the end"), 1,
               "what replay says it cut: '%s'", cut);

    /* The last record was never written at all. */
    memset(img + last, 0, len - last);
    EXPECT_INT(replay_as(path, img, len, &size, cut, sizeof cut, err), 2,
               "pushes before a record of zeros: %s", err);
    EXPECT_U64(size, last, "cut at the zeroed record");

    /* Its first page went out, the next did not. */
    memcpy(img, good, len);
    memset(img + 20480, 0, len - 20480);
    EXPECT_INT(replay_as(path, img, len, &size, cut, sizeof cut, err), 2,
               "pushes before a record zero from a page on: %s", err);
    EXPECT_U64(size, last, "cut at the record that was half written");

    /* Zeros from inside a page: not how a write stops, but damage. */
    memcpy(img, good, len);
    memset(img + 20480 + 100, 0, len - 20480 - 100);
    EXPECT_INT(replay_as(path, img, len, &size, cut, sizeof cut, err), -1,
               "zeros from inside a page");
    EXPECT_INT(strstr(err, "record CRC mismatch") != NULL, 1, "%s", err);
    EXPECT_U64(size, len, "a refused segment is left as it is");
    EXPECT_INT(cut[0], 0, "nothing cut: '%s'", cut);

    /* A record zero from a page on, but with bytes after the zeros. */
    memcpy(img, good, len);
    memset(img + 20480, 0, len - 20480 - 1);
    EXPECT_INT(replay_as(path, img, len, &size, cut, sizeof cut, err), -1,
               "zeros followed by a byte");

    /* A last record whose CRCs check was written whole: zeros in it from
     * a page on are its data, and a record psd cannot read is damage. */
    {
        enum { BODY = 8000 };
        char *rec2 = calloc(1, 12 + BODY);
        rec2[12] = 9;                        /* no such record type */
        uint32_t blen = BODY, bcrc = psw_crc32c(0, rec2 + 12, BODY), hcrc;
        memcpy(rec2, &blen, 4);
        memcpy(rec2 + 4, &bcrc, 4);
        hcrc = psw_crc32c(0, rec2, 8);
        memcpy(rec2 + 8, &hcrc, 4);
        char *both = malloc(len + 12 + BODY);
        memcpy(both, good, len);
        memcpy(both + len, rec2, 12 + BODY);
        EXPECT_INT(replay_as(path, both, len + 12 + BODY, &size, cut,
                             sizeof cut, err), -1,
                   "a whole record psd cannot read, zeros from a page on");
        EXPECT_INT(strstr(err, "malformed record") != NULL, 1, "%s", err);
        free(both);
        free(rec2);
    }

    /* The same zeros, with a newer segment after this one. */
    memcpy(img, good, len);
    write_file(path, img, len + TAIL);
    j = psd_journal_open(dir, 2, 0xabc, 0, 2, err, sizeof err);
    assert_non_null(j);
    put_rows(j, 3, 1, 4);
    psd_journal_close(j);
    seen s;
    uint64_t next;
    assert_int_equal(replay(1, &s, &next, err), -1);
    EXPECT_INT(strstr(err, "record header CRC mismatch") != NULL, 1, "%s",
               err);
    psd_journal_prune(dir, 2, 100);
    free(img);
    free(good);
}

static void test_a_failed_journal_write_leaves_whole_records(void **state)
{
    (void)state;
    char err[ERRLEN], path[128];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    put_pushes(j, 0, 2);
    struct rlimit save, small;
    getrlimit(RLIMIT_FSIZE, &save);
    small = save;
    psd_journal_path(path, sizeof path, dir, 2, 1);
    struct stat st;
    stat(path, &st);
    small.rlim_cur = (rlim_t)st.st_size + 30;   /* half a record more */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &small);
    uint64_t key = 5;
    float v = 1.0f;
    psw_msg m = { .op = PSW_OP_PUSH, .ts = 2, .nkeys = 1,
                  .keys = (const char *)&key, .vals = (const char *)&v,
                  .vals_len = 4 };
    psd_journal_push(j, 9, 1, &m, PSW_OK);
    int rc = psd_journal_write(j, err, sizeof err);
    setrlimit(RLIMIT_FSIZE, &save);
    signal(SIGXFSZ, prev);
    EXPECT_INT(rc, -1, "a write past the limit");
    EXPECT_U64(psd_journal_written(j), 3, "the record is not written");
    struct stat st2;
    stat(path, &st2);
    EXPECT_U64((uint64_t)st2.st_size, (uint64_t)st.st_size,
               "the half record was cut off");
    /* Room again: the record goes out whole, and everything replays. */
    assert_int_equal(psd_journal_write(j, err, sizeof err), 0);
    EXPECT_U64(psd_journal_written(j), 4, "written now");
    psd_journal_close(j);
    seen s;
    uint64_t next;
    assert_int_equal(replay(1, &s, &next, err), 0);
    EXPECT_INT(s.pushes, 3, "pushes replayed");
    psd_journal_prune(dir, 2, 100);
}

/* Read errors for the journal's replay: the test binary is linked with
 * --wrap=read and --wrap=fread, so every read() and fread() of the code
 * under test comes here. While eio_after >= 0, reads deliver that many
 * more bytes, then fail with EIO (as a disk with a bad sector does). */
ssize_t __real_read(int fd, void *p, size_t n);
ssize_t __wrap_read(int fd, void *p, size_t n);
size_t __real_fread(void *p, size_t size, size_t n, FILE *f);
size_t __wrap_fread(void *p, size_t size, size_t n, FILE *f);
static long eio_after = -1;

ssize_t __wrap_read(int fd, void *p, size_t n)
{
    if (eio_after < 0)
        return __real_read(fd, p, n);
    if (eio_after == 0) {
        errno = EIO;
        return -1;
    }
    ssize_t k = __real_read(fd, p, n < (size_t)eio_after ? n : (size_t)eio_after);
    if (k > 0)
        eio_after -= k;
    return k;
}

/* fread's short count with errno EIO (what the caller can see of a read
 * error besides ferror, which a wrapper cannot set). */
size_t __wrap_fread(void *p, size_t size, size_t n, FILE *f)
{
    if (eio_after < 0 || size != 1)
        return __real_fread(p, size, n, f);
    size_t want = n < (size_t)eio_after ? n : (size_t)eio_after;
    size_t k = want ? __real_fread(p, 1, want, f) : 0;
    eio_after -= (long)k;
    if (k < n)
        errno = EIO;
    return k;
}

static void test_a_read_error_is_not_taken_for_a_torn_tail(void **state)
{
    (void)state;
    char err[ERRLEN], path[128];
    four_pushes(path, sizeof path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    /* The disk fails in the middle of the second push, in the last
     * segment, where a crash could have cut a record. A read error is
     * not a cut: the records after it were written (and acknowledged),
     * and cutting the file there would lose them for good. */
    size_t rec = ((size_t)st.st_size - 28) / 4;
    seen s;
    uint64_t next;
    eio_after = (long)(28 + rec + rec / 2);
    int rc = replay(1, &s, &next, err);
    eio_after = -1;
    struct stat after;
    assert_int_equal(stat(path, &after), 0);
    EXPECT_INT(rc, -1, "a replay that could not read the segment (%d "
               "pushes replayed)", s.pushes);
    EXPECT_U64((uint64_t)after.st_size, (uint64_t)st.st_size,
               "the segment's size after the read error");
    EXPECT_INT(strstr(err, path) != NULL &&
                   strstr(err, "Input/output error") != NULL,
               1, "%s", err);
    /* The disk works again: everything is there. */
    assert_int_equal(replay(1, &s, &next, err), 0);
    EXPECT_INT(s.pushes, 4, "pushes replayed once the disk reads");
    psd_journal_prune(dir, 2, 100);
}

/* Replays from segment 1 with no descriptor left (RLIMIT_NOFILE at the
 * lowest free one), so that listing the folder fails. */
static int replay_without_descriptors(seen *s, uint64_t *next, char *err)
{
    int lowest = dup(0);
    assert_true(lowest >= 0);
    close(lowest);
    struct rlimit save, none;
    getrlimit(RLIMIT_NOFILE, &save);
    none = save;
    none.rlim_cur = (rlim_t)lowest;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
    int rc = replay(1, s, next, err);
    setrlimit(RLIMIT_NOFILE, &save);
    return rc;
}

static void test_a_folder_that_cannot_be_listed_is_refused(void **state)
{
    (void)state;
    char err[ERRLEN];
    psd_journal *j = psd_journal_open(dir, 2, 0xabc, 0, 1, err, sizeof err);
    assert_non_null(j);
    put_pushes(j, 0, 3);
    psd_journal_close(j);
    /* Not knowing which segments exist is not knowing that there are
     * none: taken for an empty journal, the pushes would be served
     * without, the next segment written over them, and the next
     * snapshot's pruning would delete them. */
    seen s;
    uint64_t next = 0;
    int rc = replay_without_descriptors(&s, &next, err);
    EXPECT_INT(rc, -1, "a replay that could not list %s (%d pushes "
               "replayed, next segment %llu)", dir, s.pushes,
               (unsigned long long)next);
    EXPECT_INT(strstr(err, dir) != NULL &&
                   strstr(err, "Too many open files") != NULL,
               1, "%s", err);
    assert_int_equal(replay(1, &s, &next, err), 0);
    EXPECT_INT(s.pushes, 3, "pushes replayed once the folder can be read");
    psd_journal_prune(dir, 2, 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_a_snapshot_restores_every_updater_state_bit_for_bit, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_every_cut_and_every_flipped_bit_is_refused_with_an_offset,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_snapshot_of_another_layout_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tables_are_matched_by_name,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_failed_write_keeps_the_old_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_staged_snapshots_take_their_names_all_at_once, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_the_journal_replays_segments_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_journal_begun_by_psd_0_1_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_worker_records_carry_the_refused_clients, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_segment_missing_in_the_middle_fails_the_check, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_a_push_made_on_other_inits_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_the_inits_mark_covers_what_makes_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_torn_last_record_is_cut_and_damage_elsewhere_refused,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_torn_tail_psd_may_not_cut_says_so,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_failed_journal_write_leaves_whole_records, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_a_folder_that_cannot_be_listed_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_read_error_is_not_taken_for_a_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_snapshots_of_formats_1_and_2_still_load, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_snapshot_of_psd_0_1_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_snapshot_of_psd_0_4_0_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_an_older_snapshot_whose_workers_all_left_ends_the_job,
            setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_journal_seq_out_of_range_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_tail_of_zeros_is_cut_and_other_zeros_refused, setup,
            teardown),
    };
    int failed = cmocka_run_group_tests_name("snapshot and journal", tests,
                                             NULL, NULL);
    int total = (int)(sizeof tests / sizeof tests[0]);
    printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
