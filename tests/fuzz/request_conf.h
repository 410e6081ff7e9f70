/* The fixed cluster fuzz_request serves as node 0, and the facts about it
 * that make_seeds.c needs to write requests it accepts. Small tables keep
 * every input's memory bounded (dense rows <= 1000, sparse dim <= 8); a
 * small max_frame makes the frame-size rules easy to reach, and so do the
 * small limits on remembered pushes; two nodes
 * make some keys another node's; one table per updater and consistency
 * mode; a sparse table with max_rows (and a bsp one) and a dense one
 * that allows NaN and infinities, besides the default that refuses them.
 * Change the text and the constants together. */
#ifndef PSD_FUZZ_REQUEST_CONF_H
#define PSD_FUZZ_REQUEST_CONF_H

#define FUZZ_REQ_INI                                                       \
    "[cluster]\n"                                                          \
    "nodes = 127.0.0.1:7070, 127.0.0.1:7071\n"                             \
    "shards = 4\n"                                                         \
    "workers = 2\n"                                                        \
    "worker_grace = 1\n"                                                   \
    "[server]\n"                                                           \
    "max_frame = 4K\n"                                                     \
    "client_ttl = 1\n"                                                     \
    "max_unacked_pushes = 16\n"                                            \
    "max_remembered_pushes = 24\n"                                         \
    "[table.dense_sum]\n"                                                  \
    "kind = dense\n"                                                       \
    "rows = 1000\n"                                                        \
    "dim = 4\n"                                                            \
    "init = uniform -1 1\n"                                                \
    "[table.sparse_adagrad]\n"                                             \
    "dim = 8\n"                                                            \
    "updater = adagrad\n"                                                  \
    "[table.dense_adam_bsp]\n"                                             \
    "kind = dense\n"                                                       \
    "rows = 10\n"                                                          \
    "dim = 2\n"                                                            \
    "updater = adam\n"                                                     \
    "consistency = bsp\n"                                                  \
    "aggregate = mean\n"                                                   \
    "[table.sparse_ftrl_ssp]\n"                                            \
    "dim = 3\n"                                                            \
    "updater = ftrl\n"                                                     \
    "consistency = ssp\n"                                                  \
    "staleness = 1\n"                                                      \
    "init = normal 0 0.1\n"                                                \
    "[table.sparse_sgd_bsp]\n"                                             \
    "dim = 1\n"                                                            \
    "updater = sgd\n"                                                      \
    "consistency = bsp\n"                                                  \
    "max_rows = 4\n"                                                       \
    "[table.dense_assign_ssp]\n"                                           \
    "kind = dense\n"                                                       \
    "rows = 3\n"                                                           \
    "dim = 1\n"                                                            \
    "updater = assign\n"                                                   \
    "consistency = ssp\n"                                                  \
    "init = constant 0.5\n"                                                \
    "[table.sparse_adam]\n"                                                \
    "dim = 2\n"                                                            \
    "updater = adam\n"                                                     \
    "[table.sparse_capped]\n"                                              \
    "dim = 2\n"                                                            \
    "max_rows = 3\n"                                                       \
    "[table.dense_loose]\n"                                                \
    "kind = dense\n"                                                       \
    "rows = 4\n"                                                           \
    "dim = 1\n"                                                            \
    "nonfinite = allow\n"

#define FUZZ_REQ_NODES 2
#define FUZZ_REQ_SHARDS 4
#define FUZZ_REQ_WORKERS 2
#define FUZZ_REQ_MAX_FRAME 4096

/* Table ids, in section order. */
enum {
    FUZZ_T_DENSE_SUM, FUZZ_T_SPARSE_ADAGRAD, FUZZ_T_DENSE_ADAM_BSP,
    FUZZ_T_SPARSE_FTRL_SSP, FUZZ_T_SPARSE_SGD_BSP, FUZZ_T_DENSE_ASSIGN_SSP,
    FUZZ_T_SPARSE_ADAM, FUZZ_T_SPARSE_CAPPED, FUZZ_T_DENSE_LOOSE,
    FUZZ_T_COUNT
};

/* Tables fuzz_snapshot lets go (psd --drop-table): not in the fixed
 * config, but in one of the seeds (make_seeds.c, node0_moved_tables). */
#define FUZZ_DROPPED_DENSE "gone_dense"
#define FUZZ_DROPPED_SPARSE "gone_sparse"

#endif
