/* A small open-addressing hash map from uint64 keys to pointers, used to
 * find in-flight requests and pieces by timestamp. Not thread-safe. */
#ifndef PS_MAP_H
#define PS_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_map {
    uint64_t *keys;
    void **vals;            /* NULL marks a free slot */
    size_t cap;             /* power of two, or 0 */
    size_t n;
} ps_map;

void ps_map_init(ps_map *m);
void ps_map_destroy(ps_map *m);
/* Inserts or replaces; val must not be NULL. Returns 0 or -1 (no memory). */
int ps_map_put(ps_map *m, uint64_t key, void *val);
void *ps_map_get(const ps_map *m, uint64_t key);
/* Removes key and returns its value, or NULL. */
void *ps_map_del(ps_map *m, uint64_t key);

#endif
