/* A small open-addressing hash map from uint64 keys to pointers: the
 * client finds in-flight requests and pieces by timestamp in it, psd a
 * session's held requests. Not thread-safe. */
#ifndef PSW_MAP_H
#define PSW_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct psw_map {
    uint64_t *keys;
    void **vals;            /* NULL marks a free slot */
    size_t cap;             /* power of two, or 0 */
    size_t n;
} psw_map;

void psw_map_init(psw_map *m);
void psw_map_destroy(psw_map *m);
/* Inserts or replaces; val must not be NULL. Returns 0 or -1 (no memory
 * for a new key; replacing never fails). */
int psw_map_put(psw_map *m, uint64_t key, void *val);
void *psw_map_get(const psw_map *m, uint64_t key);
/* Removes key and returns its value, or NULL. */
void *psw_map_del(psw_map *m, uint64_t key);

#endif
