/* Training modes on one node: worker membership, clocks and barriers.
 * bsp tables sum a clock's pushes and apply them once every waited-for
 * worker has finished that clock (ps_clock is answered then); ssp tables
 * apply pushes at once but hold a worker's pull until the slowest worker
 * is at most `staleness` clocks behind it. State is per worker, never per
 * key: memory is proportional to workers (plus held requests). */
#ifndef PSD_SYNC_H
#define PSD_SYNC_H

#include <stdint.h>

#include "server.h"

typedef enum { W_ABSENT, W_LIVE, W_GONE, W_LEFT } psd_wstate;

typedef struct psd_worker {
    psd_wstate state;
    uint64_t clock;          /* ps_clock calls this worker finished */
    uint64_t barrier;        /* barriers it entered */
    psd_conn *conn;          /* while LIVE */
    uint64_t client_id;
    uint64_t gone_ms;        /* when its connection was lost (GONE) */
} psd_worker;

/* A reply held until clocks or barriers move on. */
typedef struct psd_waiter {
    struct psd_waiter *next;
    psd_conn *conn;
    uint64_t need;           /* the clock (or barrier) it waits for */
    psw_msg msg;             /* held pulls: keys point at `keys` */
    char *keys;              /* owned copy of the pulled keys */
} psd_waiter;

int psd_sync_init(psd_server *s);
void psd_sync_stop(psd_server *s);
void psd_sync_destroy(psd_server *s);

/* HELLO from a worker (worker >= 0): 0, or PSW_EINVAL with the reason
 * (out of range, or the id is held by another live client). */
int psd_sync_join(psd_server *s, psd_conn *c, int32_t worker,
                  uint64_t client_id, char *err, size_t errlen);
/* The clock and barrier count node has for `worker` (0 and 0 for -1). */
void psd_sync_position(const psd_server *s, int32_t worker, uint64_t *clock,
                       uint64_t *barrier);

/* A connection closed: its held replies are dropped and its worker, if
 * any, is waited for worker_grace more seconds. */
void psd_sync_conn_closed(psd_server *s, psd_conn *c);

/* CLOCK, BARRIER and LEAVE messages: answered now or held. */
void psd_sync_message(psd_server *s, psd_conn *c, const psw_msg *m);

/* For a pull of an ssp table: whether it may be answered now. When not,
 * psd_sync_hold keeps it (copying its keys) and answers it later. */
int psd_sync_pull_ready(const psd_server *s, const psd_conn *c,
                        const psd_table_conf *tc);
int psd_sync_hold(psd_server *s, psd_conn *c, const psw_msg *m);

/* conn.c: sends a held reply (a pull is carried out now). */
void psd_conn_release(psd_conn *c, const psw_msg *m, int status,
                      const char *text);
int32_t psd_conn_worker(const psd_conn *c);
void psd_conn_set_worker(psd_conn *c, int32_t worker);
const char *psd_conn_peer(const psd_conn *c);

#endif
