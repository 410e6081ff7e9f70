/* A table's storage on one node: the shards this node owns, each a dense
 * row range or a sparse hash of uint64 keys, with per-row optimizer state.
 * Requests are checked whole (ownership, ranges) before anything changes,
 * so a rejected request leaves no partial update behind. */
#ifndef PSD_TABLE_H
#define PSD_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "stream.h"

typedef struct psd_table psd_table;

/* Creates table `conf` (copied) as node `node` of `nnodes` would hold it:
 * only shards s with s % nnodes == node get storage. Dense rows are
 * initialised now; sparse rows on first touch. Returns NULL with a reason
 * in err when memory runs out. */
psd_table *psd_table_new(const psd_table_conf *conf, uint32_t shards,
                         int nnodes, int node, char *err, size_t errlen);
void psd_table_free(psd_table *t);

const psd_table_conf *psd_table_conf_get(const psd_table *t);

/* Replaces the updater's hyper-parameters (a reload); the updater kind
 * must stay the same, since optimizer state depends on it. */
void psd_table_set_params(psd_table *t, const psd_updater_params *p);

/* Applies a reload's max_rows and nonfinite policy. */
void psd_table_set_limits(psd_table *t, uint64_t max_rows,
                          int allow_nonfinite);

/* The rows one shard of a sparse table can hold: 2^32 - 2 where rows
 * live in their slots, 3 * 2^30 in chunks (32-bit row numbers; chunked
 * slots stop doubling at 2^32); 0 for a dense table. Lowering it is for
 * tests of that limit, which no machine of today's memory reaches in a
 * test's time. */
uint64_t psd_table_shard_rows_max(const psd_table *t);
void psd_table_lower_shard_rows_max(psd_table *t, uint64_t rows);

/* Checks that every key (n little-endian uint64 at `keys`, unaligned) is
 * valid for the table and owned by this node. Returns 0, PSW_EKEY or
 * PSW_ENOTOWNER (*owner set to the owning node) with a reason in err. */
int psd_table_check_keys(const psd_table *t, const char *keys, size_t n,
                         int *owner, char *err, size_t errlen);
/* The same for dense rows first..first+count-1. */
int psd_table_check_range(const psd_table *t, uint64_t first, uint64_t count,
                          int *owner, char *err, size_t errlen);

/* For a push of n keys to a sparse table: 0 when the rows it would
 * create (each new key counted once; on a bsp table, with the keys of
 * the current clock's sum that are new too) keep the table within
 * max_rows on this node, and each shard within the rows one shard can
 * hold (psd_table_shard_rows_max), else PSW_EFULL with the reason in err
 * (or PSW_ENOMEM). Always 0 for dense tables. */
int psd_table_check_growth(const psd_table *t, const char *keys, size_t n,
                           char *err, size_t errlen);

/* Apply a push / copy out rows, after the checks above passed. vals and
 * out hold n * dim floats, unaligned. A push creates the sparse rows it
 * touches first; that is the only failure (PSW_ENOMEM). The first time a
 * table runs out of memory, the rows of the keys before the failing one
 * have been updated (*applied says how many keys; the others not); from
 * then on (psd_table_careful) its pushes make every row they need before
 * they update any, and one that cannot is refused whole (*applied 0),
 * its new rows left at their initial values, as a pull would read them.
 * A pull creates nothing: a sparse key without a row reads its initial
 * row (the initialiser is a function of the key), so pulls never grow a
 * table; it returns 0. */
int psd_table_push_some(psd_table *t, const char *keys, size_t n,
                        const char *vals, size_t *applied);
int psd_table_push(psd_table *t, const char *keys, size_t n, const char *vals);
/* Whether the table ran out of memory in a push (psd_table_push_some). */
int psd_table_careful(const psd_table *t);
int psd_table_pull(psd_table *t, const char *keys, size_t n, char *out);
void psd_table_push_range(psd_table *t, uint64_t first, uint64_t count,
                          const char *vals);
void psd_table_pull_range(const psd_table *t, uint64_t first, uint64_t count,
                          char *out);

/* Dense tables: the weights of owned row `first` in place, and in *run
 * how many of the count rows from it lie contiguous after it (the rest of
 * its shard). NULL for a sparse table. The memory changes with every push
 * to those rows (a reply that references it must copy it first). */
const float *psd_table_dense_run(const psd_table *t, uint64_t first,
                                 uint64_t count, uint64_t *run);

/* Bulk-synchronous tables: pushes of the current clock are summed per
 * key into a side table instead of being applied; at the end of the
 * clock every touched key gets the updater once, with the sum times
 * `scale` (1, or 1/workers for aggregate = mean), and the side table is
 * emptied. Memory is proportional to the keys touched in one clock. The
 * same checks as psd_table_push come first. Returns 0 or PSW_ENOMEM. */
/* The same, saying in *applied how many keys (the first ones) were
 * summed when it returns PSW_ENOMEM part way. */
int psd_table_accumulate_some(psd_table *t, const char *keys, size_t n,
                              const char *vals, size_t *applied);
int psd_table_accumulate(psd_table *t, const char *keys, size_t n,
                         const char *vals);
int psd_table_accumulate_range(psd_table *t, uint64_t first, uint64_t count,
                               const char *vals);
int psd_table_apply_accumulated(psd_table *t, float scale);

/* A sparse shard's slots double a few at a time (a lookup probes the
 * doubled slots, then the old ones not moved yet), as rows are created;
 * this moves up to `budget` more old slots of t's growing shards, so that
 * a table no longer growing finishes (the node calls it at its ticks).
 * Returns how many slots it looked at: under budget when none is left. */
size_t psd_table_tidy(psd_table *t, size_t budget);

/* Rows in a bsp table's sums of the current clock (0 for other tables):
 * pushes acknowledged and not applied yet. */
uint64_t psd_table_pending(const psd_table *t);

/* psd --reshard: moves shard s, its rows with their optimizer state and
 * step counters, from src (where it is owned) to dst (where it is owned,
 * and fresh: a dense shard's initial rows are let go), src's and dst's
 * configurations alike in kind, dim, rows, updater and shards. A bsp
 * table's sums are not moved (callers refuse a table with some:
 * psd_table_pending). 0, or -1 with the reason in err. */
int psd_table_move_shard(psd_table *dst, psd_table *src, uint32_t s,
                         char *err, size_t errlen);

/* psd --import: sets the weights of row `key` (owned by this node; a
 * dense row in range) to w (dim floats), creating a sparse row; its
 * optimizer state and step counter stay as they are (zero for a row
 * created here), but for ftrl's z, set so that the weight stands (ftrl
 * computes a weight from z and n at every push). *created: 1 when a
 * sparse row was created, 0 when it was held already (and for dense
 * rows). 0, or PSW_ENOMEM. */
int psd_table_set_row(psd_table *t, uint64_t key, const float *w,
                      int *created);

/* Bytes a table keeps for each shard of the cluster, its node's or not,
 * before any row: what `shards` costs every table on every node (the
 * start's check, daemon/preflight.c, which reads no more of this file).
 * table.c holds its shard record to it. */
#define PSD_TABLE_SHARD_BYTES 176

/* Rows held on this node, and bytes of memory they use (weights, state,
 * index) — for stats and the memory benchmark. */
uint64_t psd_table_rows(const psd_table *t);
size_t psd_table_bytes(const psd_table *t);

/* Fills keys (psd_table_rows(t) entries) with the key of every row this
 * node holds, shard after shard (a dense table's row numbers, a sparse
 * table's keys in each shard's row order). For psd --export, which then
 * pulls their rows. Returns 0 or -1 (memory). */
int psd_table_keys(const psd_table *t, uint64_t *keys);

/* Writes the rows this node holds, with their optimizer state and step
 * counters, and a bsp table's sums of the current clock, so that
 * psd_table_load into a fresh table of the same configuration restores
 * them bit for bit. Returns 0 or -1 (the sink failed). */
int psd_table_save(const psd_table *t, psd_sink *out);

/* Reads what psd_table_save wrote into t, which must be fresh (no sparse
 * row created yet). Everything read is checked against t's layout
 * (shards owned by this node, row counts, keys in their shard, no key
 * twice). Returns 0, or -1 with the reason in err: then t holds a partial
 * state and must be freed, never served. */
int psd_table_load(psd_table *t, psd_source *in, char *err, size_t errlen);

/* Reads past what psd_table_save wrote for a table of configuration conf
 * (node `node` of `nnodes`, `shards` shards), keeping nothing: its shards
 * and row counts are checked (not its keys) and its bytes discarded, a
 * bounded buffer at a time, so a table that is not built (a dropped one,
 * or any under psd --check) costs no memory. conf's dim must be
 * 1..65536; a bsp table's sums are read past too. Returns 0, or -1 with
 * the reason in err. */
int psd_table_skip(const psd_table_conf *conf, uint32_t shards, int nnodes,
                   int node, psd_source *in, char *err, size_t errlen);

#endif
