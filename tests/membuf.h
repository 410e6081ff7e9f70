/* A growing memory buffer as the byte streams of daemon/stream.h, for
 * tests that save state and load it back without a file. Header only:
 * each test binary that includes it gets its own static copy. A failed
 * allocation fails the running cmocka test. */
#ifndef TEST_MEMBUF_H
#define TEST_MEMBUF_H

#include <stdlib.h>
#include <string.h>

#include "../daemon/stream.h"

typedef struct membuf {
    char *p;
    size_t len, cap;     /* bytes written, and room for them */
    size_t at;           /* bytes read back */
} membuf;

/* psd_sink's write: appends n bytes. */
static inline int mem_put(void *ctx, const void *p, size_t n)
{
    membuf *m = ctx;
    if (m->len + n > m->cap) {
        m->cap = (m->len + n) * 2;
        m->p = realloc(m->p, m->cap);
        assert_non_null(m->p);
    }
    memcpy(m->p + m->len, p, n);
    m->len += n;
    return 0;
}

/* psd_source's read: the next n bytes, or -1 past what was written. */
static inline int mem_get(void *ctx, void *p, size_t n)
{
    membuf *m = ctx;
    if (m->len - m->at < n)
        return -1;
    memcpy(p, m->p + m->at, n);
    m->at += n;
    return 0;
}

#endif
