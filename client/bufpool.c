/* Large buffers kept for reuse (bufpool.h says why and the rules). */
#include "bufpool.h"

#include <stdlib.h>

#include <uv.h>

/* Under AddressSanitizer a kept buffer is poisoned: a request used after
 * it was freed would otherwise read or write a pooled buffer unseen. */
#if defined(__has_feature)      /* clang */
#if __has_feature(address_sanitizer)
#define PSC_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(PSC_ASAN)   /* gcc, clang */
#include <sanitizer/asan_interface.h>
#define POOL_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define POOL_POISON(p, n) ((void)(p), (void)(n))
#define POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

void psc_bufpool_init(psc_bufpool *bp, size_t max_bytes)
{
    pthread_mutex_init(&bp->mu, NULL);
    bp->max_bytes = max_bytes;
    bp->held = 0;
    bp->n = 0;
    bp->last_take_ns = uv_hrtime();
}

/* Takes kept buffer i out of the array; under mu. */
static psc_poolbuf take_out(psc_bufpool *bp, int i)
{
    psc_poolbuf x = bp->b[i];
    POOL_UNPOISON(x.p, x.cap);
    bp->held -= x.cap;
    bp->n--;
    for (int j = i; j < bp->n; j++)
        bp->b[j] = bp->b[j + 1];
    return x;
}

void psc_bufpool_destroy(psc_bufpool *bp)
{
    while (bp->n)
        free(take_out(bp, bp->n - 1).p);
    pthread_mutex_destroy(&bp->mu);
}

void *psc_bufpool_take(psc_bufpool *bp, size_t n, size_t *cap)
{
    if (bp && n >= PSC_POOL_MIN) {
        void *p = NULL;
        pthread_mutex_lock(&bp->mu);
        bp->last_take_ns = uv_hrtime();
        /* The newest first: its pages are the likeliest to be cached. */
        for (int i = bp->n - 1; i >= 0; i--)
            if (bp->b[i].cap >= n && bp->b[i].cap - n <= n) {
                psc_poolbuf x = take_out(bp, i);
                p = x.p;
                *cap = x.cap;
                break;
            }
        pthread_mutex_unlock(&bp->mu);
        if (p)
            return p;
    }
    void *p = malloc(n ? n : 1);
    *cap = p ? n : 0;
    return p;
}

void psc_bufpool_give(psc_bufpool *bp, void *p, size_t cap)
{
    if (!p)
        return;
    if (!bp || cap < PSC_POOL_MIN || cap > bp->max_bytes) {
        free(p);
        return;
    }
    /* Room is made by the oldest: they are the sizes least likely to be
     * asked for again. Freed after mu is let go. */
    void *gone[PSC_POOL_BUFS];
    int ngone = 0;
    pthread_mutex_lock(&bp->mu);
    while (bp->n && (bp->n == PSC_POOL_BUFS || bp->held + cap > bp->max_bytes))
        gone[ngone++] = take_out(bp, 0).p;
    bp->b[bp->n++] = (psc_poolbuf){ p, cap };
    bp->held += cap;
    POOL_POISON(p, cap);
    pthread_mutex_unlock(&bp->mu);
    for (int i = 0; i < ngone; i++)
        free(gone[i]);
}

void psc_bufpool_trim(psc_bufpool *bp, uint64_t now_ns)
{
    void *gone[PSC_POOL_BUFS];
    int ngone = 0;
    pthread_mutex_lock(&bp->mu);
    if (now_ns > bp->last_take_ns &&
        now_ns - bp->last_take_ns >= PSC_POOL_IDLE_NS)
        while (bp->n)
            gone[ngone++] = take_out(bp, bp->n - 1).p;
    pthread_mutex_unlock(&bp->mu);
    for (int i = 0; i < ngone; i++)
        free(gone[i]);
}

size_t psc_bufpool_held(psc_bufpool *bp)
{
    pthread_mutex_lock(&bp->mu);
    size_t h = bp->held;
    pthread_mutex_unlock(&bp->mu);
    return h;
}
