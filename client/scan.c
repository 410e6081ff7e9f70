/* The read of a large push for NaN and infinities, shared with a helper
 * thread: see scan.h. */
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "scan.h"
#include "../proto/frame.h"

/* Below this the hand-over (a condition variable's wake, tens of us)
 * costs about what the second half would: read alone. At 1 MiB the split
 * measured even to 3 % faster (psbench, 1 MiB pushes at 1 in flight). */
#define SPLIT_MIN ((size_t)1 << 20)

/* One helper for the process: a job at a time (a second caller reads
 * alone while it is taken). Every field is under mu. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t posted, done;
    int started;                 /* the helper runs (in this process) */
    int cannot;                  /* no thread could be made for it: not
                                    tried again (until a fork) */
    int taken;                   /* a caller owns the job slot */
    int state;                   /* 0 idle, 1 posted, 2 done */
    const void *p;
    size_t n;
    int result;
} h = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
        PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, NULL, 0, 0 };

static void *helper(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&h.mu);
    for (;;) {
        while (h.state != 1)
            pthread_cond_wait(&h.posted, &h.mu);
        const void *p = h.p;
        size_t n = h.n;
        pthread_mutex_unlock(&h.mu);
        int r = psw_nonfinite(p, n);
        pthread_mutex_lock(&h.mu);
        h.result = r;
        h.state = 2;
        pthread_cond_signal(&h.done);
    }
    return NULL;
}

/* A fork keeps only the thread that made it: the child starts without a
 * helper, and with the lock free (held across the fork by prepare, so
 * that no other thread held it then). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&h.mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&h.mu);
}

static void fork_child(void)
{
    pthread_mutex_unlock(&h.mu);
    pthread_cond_init(&h.posted, NULL);
    pthread_cond_init(&h.done, NULL);
    h.started = h.cannot = h.taken = h.state = 0;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void at_first_split(void)
{
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Takes the job slot, starting the helper when none runs: 1, or 0 when
 * the slot is another caller's or no thread can be made. Under h.mu. */
static int take_slot(void)
{
    if (h.taken || h.cannot)
        return 0;
    if (!h.started) {
        pthread_attr_t a;
        pthread_t t;
        if (pthread_attr_init(&a))
            return 0;
        /* Every signal blocked in it (it inherits the mask): the
         * trainer's signals go to the trainer's threads. */
        sigset_t all, was;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &was);
        int rc = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) ||
                 pthread_create(&t, &a, helper, NULL);
        pthread_sigmask(SIG_SETMASK, &was, NULL);
        pthread_attr_destroy(&a);
        if (rc) {
            h.cannot = 1;        /* a process at its thread limit */
            return 0;
        }
        h.started = 1;
    }
    h.taken = 1;
    return 1;
}

int psc_nonfinite(const void *p, size_t n)
{
    if (n < SPLIT_MIN)
        return psw_nonfinite(p, n);
    (void)pthread_once(&atfork_once, at_first_split);
    /* Not cancelled in the wait for the helper (a cancellation point):
     * the lock would stay held, every fork of the process then hanging
     * in fork_prepare, and the helper would read a buffer its caller
     * had let go (a review). */
    int cancel;
    (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    pthread_mutex_lock(&h.mu);
    if (!take_slot()) {
        pthread_mutex_unlock(&h.mu);
        (void)pthread_setcancelstate(cancel, NULL);
        return psw_nonfinite(p, n);
    }
    /* The back half to the helper, cut at a float (and a cache line). */
    size_t front = (n / 2) & ~(size_t)63;
    h.p = (const char *)p + front;
    h.n = n - front;
    h.state = 1;
    pthread_cond_signal(&h.posted);
    pthread_mutex_unlock(&h.mu);
    int r = psw_nonfinite(p, front);
    pthread_mutex_lock(&h.mu);
    while (h.state != 2)
        pthread_cond_wait(&h.done, &h.mu);
    r |= h.result;
    h.state = 0;
    h.taken = 0;
    pthread_mutex_unlock(&h.mu);
    (void)pthread_setcancelstate(cancel, NULL);
    return r;
}
