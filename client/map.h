/* A small open-addressing hash map from uint64 keys to pointers, used to
 * find in-flight requests and pieces by timestamp. Not thread-safe. */
#ifndef PSC_MAP_H
#define PSC_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct psc_map {
    uint64_t *keys;
    void **vals;            /* NULL marks a free slot */
    size_t cap;             /* power of two, or 0 */
    size_t n;
} psc_map;

void psc_map_init(psc_map *m);
void psc_map_destroy(psc_map *m);
/* Inserts or replaces; val must not be NULL. Returns 0 or -1 (no memory). */
int psc_map_put(psc_map *m, uint64_t key, void *val);
void *psc_map_get(const psc_map *m, uint64_t key);
/* Removes key and returns its value, or NULL. */
void *psc_map_del(psc_map *m, uint64_t key);

#endif
