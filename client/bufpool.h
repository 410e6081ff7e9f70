/* Large buffers a client keeps for reuse: the copies a keyed request
 * split over several nodes makes of its keys, values and pull positions
 * (grouped by node, slice.c), and the slicer's per-key scratch.
 *
 * Why: given back to malloc at each request's completion, buffers of
 * hundreds of KiB went back to the kernel whenever glibc trimmed the top
 * of its heap (after every drain of the requests in flight, say a
 * training step's ps_wait_all), and the next requests touched every page
 * anew: 9,000-15,000 page faults per burst of 64 requests of 65,536 keys
 * over 2 nodes, about 10 us each in this project's VM, which made 64 in
 * flight no faster than 1 for the first 150-300 ms after each pause. A
 * client must not tune malloc for the whole process (mallopt), so it
 * keeps its own.
 *
 * Rules: only buffers of PSC_POOL_MIN bytes or more come from the pool;
 * it keeps at most PSC_POOL_BUFS of them and max_bytes in all, the most
 * recently given back (older ones are freed to make room, so a client
 * whose requests grew keeps the new sizes, not the old); a request takes
 * the most recently kept buffer that fits and is at most twice its size;
 * after PSC_POOL_IDLE_NS without a take, psc_bufpool_trim frees
 * everything (an idle client holds nothing). Take, give, trim and held
 * are thread-safe (callers take, the I/O thread gives back completed
 * requests and trims); init and destroy are not. Buffers are freed
 * outside the lock. */
#ifndef PSC_BUFPOOL_H
#define PSC_BUFPOOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PSC_POOL_MIN (64u * 1024)
#define PSC_POOL_BUFS 128
#define PSC_POOL_MAX_BYTES ((size_t)64 << 20)
#define PSC_POOL_IDLE_NS (10ull * 1000 * 1000 * 1000)

typedef struct psc_poolbuf {
    void *p;
    size_t cap;
} psc_poolbuf;

typedef struct psc_bufpool {
    pthread_mutex_t mu;
    size_t max_bytes;            /* what may be kept in all */
    size_t held;                 /* bytes kept now */
    int n;                       /* buffers kept, oldest first */
    psc_poolbuf b[PSC_POOL_BUFS];
    uint64_t last_take_ns;       /* the last psc_bufpool_take, monotonic */
} psc_bufpool;

/* max_bytes: the most it keeps (0: nothing is kept, every take is a
 * malloc and every give a free). */
void psc_bufpool_init(psc_bufpool *bp, size_t max_bytes);

/* Frees what it keeps. Nothing may be taken from it or given back to it
 * afterwards (a give would lock a destroyed mutex). */
void psc_bufpool_destroy(psc_bufpool *bp);

/* A buffer of at least n bytes, uninitialised (bp may be NULL: malloc),
 * with its capacity in *cap; NULL when memory runs out. The caller owns
 * it until it gives it back with psc_bufpool_give (with that capacity). */
void *psc_bufpool_take(psc_bufpool *bp, size_t n, size_t *cap);

/* Gives back a buffer from psc_bufpool_take: kept (the oldest kept
 * buffers freed to make room) unless it is under PSC_POOL_MIN or over
 * max_bytes, then freed. p may be NULL. */
void psc_bufpool_give(psc_bufpool *bp, void *p, size_t cap);

/* Frees everything kept when nothing was taken for PSC_POOL_IDLE_NS
 * before now_ns (the I/O thread's tick). */
void psc_bufpool_trim(psc_bufpool *bp, uint64_t now_ns);

/* Bytes kept now (for tests). */
size_t psc_bufpool_held(psc_bufpool *bp);

#endif
