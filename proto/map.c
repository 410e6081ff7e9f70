/* Linear-probing hash map with backward-shift deletion (no tombstones,
 * so lookups stay short however many entries come and go). */
#include <stdlib.h>

#include "map.h"
#include "layout.h"

void psw_map_init(psw_map *m)
{
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->n = 0;
}

void psw_map_destroy(psw_map *m)
{
    free(m->keys);
    free(m->vals);
    psw_map_init(m);
}

static size_t slot(uint64_t key, size_t cap)
{
    return (size_t)psw_mix64(key) & (cap - 1);
}

static int grow(psw_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 64;
    uint64_t *k = malloc(cap * sizeof *k);
    void **v = calloc(cap, sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->vals[i])
            continue;
        size_t j = slot(m->keys[i], cap);
        while (v[j])
            j = (j + 1) & (cap - 1);
        k[j] = m->keys[i];
        v[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
    return 0;
}

int psw_map_put(psw_map *m, uint64_t key, void *val)
{
    /* A key there already is replaced in place: that never fails (a
     * caller replacing a value it is about to free relies on it). */
    if (m->cap) {
        size_t j = slot(key, m->cap);
        while (m->vals[j] && m->keys[j] != key)
            j = (j + 1) & (m->cap - 1);
        if (m->vals[j]) {
            m->vals[j] = val;
            return 0;
        }
    }
    if ((m->n + 1) * 2 > m->cap && grow(m))
        return -1;
    size_t j = slot(key, m->cap);
    while (m->vals[j] && m->keys[j] != key)
        j = (j + 1) & (m->cap - 1);
    if (!m->vals[j])
        m->n++;
    m->keys[j] = key;
    m->vals[j] = val;
    return 0;
}

void *psw_map_get(const psw_map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    size_t j = slot(key, m->cap);
    while (m->vals[j]) {
        if (m->keys[j] == key)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void *psw_map_del(psw_map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1, j = slot(key, m->cap);
    while (m->vals[j] && m->keys[j] != key)
        j = (j + 1) & mask;
    void *val = m->vals[j];
    if (!val)
        return NULL;
    /* Shift later members of the probe run back into the hole, so no
     * lookup ever stops early at it. */
    size_t hole = j;
    for (size_t i = (j + 1) & mask; m->vals[i]; i = (i + 1) & mask) {
        size_t home = slot(m->keys[i], m->cap);
        /* Entry i may move to the hole only if its home is not in the
         * cyclic range (hole, i]. */
        int movable = hole <= i ? (home <= hole || home > i)
                                : (home <= hole && home > i);
        if (movable) {
            m->keys[hole] = m->keys[i];
            m->vals[hole] = m->vals[i];
            hole = i;
        }
    }
    m->vals[hole] = NULL;
    m->n--;
    return val;
}
