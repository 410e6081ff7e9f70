/* Where a key lives: the shard of a key or row and the node of a shard.
 * Daemon and client must agree bit for bit, so the one definition lives
 * here and both include it. Pure functions, no allocation. */
#ifndef PSW_LAYOUT_H
#define PSW_LAYOUT_H

#include <stdint.h>

/* A well-mixed 64-bit hash (the splitmix64 finaliser): sequential ids
 * spread evenly over shards. Also used to seed initialisers. */
static inline uint64_t psw_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* Dense tables split rows 0..rows-1 into `shards` contiguous ranges;
 * shard s starts at floor(s * rows / shards). The config refuses tables
 * where rows * shards does not fit in 64 bits. */
static inline uint64_t psw_dense_shard_start(uint64_t rows, uint32_t shards,
                                             uint32_t s)
{
    return (uint64_t)s * rows / shards;
}

/* The shard holding dense row r (r < rows): the largest s whose start is
 * <= r, i.e. floor(((r + 1) * shards - 1) / rows). */
static inline uint32_t psw_dense_shard_of(uint64_t rows, uint32_t shards,
                                          uint64_t r)
{
    return (uint32_t)(((r + 1) * shards - 1) / rows);
}

static inline uint32_t psw_sparse_shard_of(uint32_t shards, uint64_t key)
{
    return (uint32_t)(psw_mix64(key) % shards);
}

/* Shards map to nodes round-robin: shard s lives on node s mod nnodes. */
static inline int psw_node_of_shard(uint32_t s, int nnodes)
{
    return (int)(s % (uint32_t)nnodes);
}

/* The rows of a dense table of `rows` that node `node` of nnodes holds. */
static inline uint64_t psw_dense_rows_on_node(uint64_t rows, uint32_t shards,
                                              int nnodes, int node)
{
    uint64_t held = 0;
    for (uint32_t s = 0; s < shards; s++)
        if (psw_node_of_shard(s, nnodes) == node)
            held += psw_dense_shard_start(rows, shards, s + 1) -
                    psw_dense_shard_start(rows, shards, s);
    return held;
}

#endif
