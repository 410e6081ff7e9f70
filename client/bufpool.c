/* Large buffers kept for reuse (bufpool.h says why and the rules). */
#include "bufpool.h"

#include <stdlib.h>

#include <uv.h>

void psc_bufpool_init(psc_bufpool *bp, size_t max_bytes)
{
    pthread_mutex_init(&bp->mu, NULL);
    bp->max_bytes = max_bytes;
    bp->held = 0;
    bp->n = 0;
    bp->last_take_ns = uv_hrtime();
}

/* Frees every kept buffer; under mu. */
static void drop_all(psc_bufpool *bp)
{
    for (int i = 0; i < bp->n; i++)
        free(bp->b[i].p);
    bp->n = 0;
    bp->held = 0;
}

void psc_bufpool_destroy(psc_bufpool *bp)
{
    drop_all(bp);
    pthread_mutex_destroy(&bp->mu);
}

void *psc_bufpool_take(psc_bufpool *bp, size_t n, size_t *cap)
{
    if (bp && n >= PSC_POOL_MIN) {
        void *p = NULL;
        pthread_mutex_lock(&bp->mu);
        bp->last_take_ns = uv_hrtime();
        /* The newest first: its pages are the likeliest to be cached. */
        for (int i = bp->n - 1; i >= 0; i--) {
            psc_poolbuf x = bp->b[i];
            if (x.cap >= n && x.cap / 2 <= n) {
                p = x.p;
                *cap = x.cap;
                bp->held -= x.cap;
                bp->n--;
                for (int j = i; j < bp->n; j++)
                    bp->b[j] = bp->b[j + 1];
                break;
            }
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
    if (bp && cap >= PSC_POOL_MIN) {
        pthread_mutex_lock(&bp->mu);
        /* Full by count: the oldest goes, the newest is the one likeliest
         * to be taken again soon. */
        if (bp->n == PSC_POOL_BUFS && cap <= bp->max_bytes) {
            bp->held -= bp->b[0].cap;
            free(bp->b[0].p);
            bp->n--;
            for (int j = 0; j < bp->n; j++)
                bp->b[j] = bp->b[j + 1];
        }
        int keep = bp->n < PSC_POOL_BUFS && bp->held + cap <= bp->max_bytes;
        if (keep) {
            bp->b[bp->n++] = (psc_poolbuf){ p, cap };
            bp->held += cap;
        }
        pthread_mutex_unlock(&bp->mu);
        if (keep)
            return;
    }
    free(p);
}

void psc_bufpool_trim(psc_bufpool *bp, uint64_t now_ns)
{
    pthread_mutex_lock(&bp->mu);
    if (bp->n && now_ns > bp->last_take_ns &&
        now_ns - bp->last_take_ns >= PSC_POOL_IDLE_NS)
        drop_all(bp);
    pthread_mutex_unlock(&bp->mu);
}

size_t psc_bufpool_held(psc_bufpool *bp)
{
    pthread_mutex_lock(&bp->mu);
    size_t h = bp->held;
    pthread_mutex_unlock(&bp->mu);
    return h;
}
