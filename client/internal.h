/* struct ps_client and what the files of libpsclient share about it.
 * Not installed: psclient.h is the only public header. */
#ifndef PSC_INTERNAL_H
#define PSC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "bufpool.h"
#include "customer.h"
#include "psclient.h"
#include "stats.h"
#include "../proto/msg.h"

struct psc_io;                   /* io.c: the I/O thread and connections */

typedef enum {
    PSC_OPENING,                 /* ps_open waits for every node's HELLO_OK */
    PSC_OPEN,
    PSC_OPEN_FAILED              /* open_status says why */
} psc_open_state;

struct ps_client {
    ps_options opt;              /* copied at ps_open; opt.auth_token is
                                    the caller's and not used after it */
    char token[256];             /* the token in force (auth_token, else
                                    PSD_AUTH_TOKEN, else the ini's); token_len
                                    0: none. Wiped at close */
    size_t token_len;
    uint64_t client_id;          /* random per client */
    uint64_t incarnation;        /* when it was opened, in ns */
    unsigned forks;              /* the process's fork count at ps_open
                                    (client.c, forked) */

    psc_customer cu;             /* requests, under its own lock */
    psc_bufpool pool;            /* large request copies kept for reuse
                                    (bufpool.h); destroyed once the I/O
                                    thread stopped and cu is gone, when
                                    no request can be given back */
    psc_stats stats;             /* per request (the Customer counts) */
    psc_stats stats_base;        /* their values at the last reset */

    /* ps_open's hand-shake with the I/O thread. */
    pthread_mutex_t open_mu;
    pthread_cond_t open_cv;
    psc_open_state open_state;
    int open_status;             /* PS_E* when PSC_OPEN_FAILED */
    char open_err[1024];

    /* The cluster as HELLO_OK described it: written by the I/O thread
     * before the open completes, read-only afterwards. */
    psw_cluster cluster;
    uint64_t max_frame;          /* the smallest max_frame the nodes' latest
                                    HELLO_OKs said: what requests are cut
                                    for (atomic; the I/O thread writes) */

    struct psc_io *io;           /* the I/O thread's own state */
    uint64_t clock, barrier;     /* ps_clock / ps_barrier calls made
                                    (atomics) */
    int leaving;                 /* ps_close or ps_close_now is sending
                                    LEAVE (atomic): a connection is no
                                    longer made again for a worker with
                                    nothing to send (io.c, keeps_up) */
    unsigned char pushed_to[PSW_MAX_NODES / 8];  /* bit n: a push went to
                                    node n (atomics): a reader's close ACKs
                                    it there (client.c, reader_leaves) */
    uint64_t clock_failed;       /* the number the last ps_clock failed
                                    with, named again by the next; 0 */
    uint64_t barrier_failed;     /* the same for ps_barrier (atomics) */
    ps_ts clock_pending;         /* a ps_clock_timeout that returned
                                    PS_PENDING: its request, waited for
                                    by the next call instead of a new
                                    one; 0 (atomics) */
    ps_ts barrier_pending;       /* the same for ps_barrier_timeout */
    int clock_in, barrier_in;    /* a thread is in ps_clock(_timeout),
                                    ps_barrier(_timeout): a second is
                                    refused (client.c, sync_call; atomics) */
};

/* Whether the layout c->cluster has a bsp or ssp table (0 before it is
 * known). Read by the I/O thread while it opens, by any thread after. */
int psc_has_sync_tables(const ps_client *c);

/* Records the detail of a failure for ps_last_error on this thread. */
void psc_set_error(const ps_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
