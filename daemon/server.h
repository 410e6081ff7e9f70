/* The psd server of one node: its tables, its listener, its connections
 * and counters, all owned by one libuv loop thread. */
#ifndef PSD_SERVER_H
#define PSD_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "config.h"
#include "table.h"
#include "../proto/msg.h"

typedef struct psd_conn psd_conn;

typedef struct psd_stats {
    uint64_t conns_accepted;
    uint64_t conns_refused;      /* over max_connections */
    uint64_t proto_errors;       /* connections closed for a bad frame */
    uint64_t frames;
    uint64_t requests;
    uint64_t request_errors;     /* requests answered with an error */
} psd_stats;

typedef struct psd_server {
    uv_loop_t *loop;
    psd_config cfg;              /* owned; replaced on reload */
    char cfg_path[4096];
    int node;
    psd_table **tables;          /* cfg.ntables entries, owned */
    int ntables;
    psw_layout layout;           /* what HELLO_OK tells clients; owned */
    uv_tcp_t listener;
    psd_conn *conns;             /* doubly linked list */
    int nconns;
    int stopping;
    psd_stats stats;
    /* training modes (sync.c) */
    struct psd_worker *workers;  /* cfg.workers entries */
    int nworkers;
    uint64_t global;             /* clocks finished by every worker that is
                                    waited for */
    uint64_t barrier;            /* barriers every such worker passed */
    struct psd_waiter *waiters;
    uv_timer_t sync_timer;
    uv_timer_t sweep_timer;      /* connections that never said HELLO */
    uint64_t moved_ms;           /* when the clock last moved */
} psd_server;

/* Takes ownership of *cfg (left zeroed) and builds node `node`'s tables.
 * Returns 0, or -1 with a reason in err. */
int psd_server_init(psd_server *s, uv_loop_t *loop, psd_config *cfg,
                    const char *cfg_path, int node, char *err, size_t errlen);

/* Binds the node's address and starts accepting. 0 or -1 with err. */
int psd_server_listen(psd_server *s, char *err, size_t errlen);

/* Re-reads the config file and applies what can change live: updater
 * hyper-parameters, log level, max_output, max_connections.
 * A file that does not parse, or that changes the layout, is logged and
 * the running configuration kept. */
void psd_server_reload(psd_server *s);

/* Stops accepting, lets every connection finish writing what it owes,
 * then closes them. The loop ends once everything is closed. */
void psd_server_stop(psd_server *s);

/* Frees tables and config; call after the loop has finished. */
void psd_server_destroy(psd_server *s);

/* conn.c: accepts one pending connection from the listener. */
void psd_conn_accept(psd_server *s);
/* conn.c: closes connections that sent no HELLO within hello_timeout. */
void psd_conn_sweep(psd_server *s);
/* conn.c: stop reading, flush, close (shutdown path). */
void psd_conn_shutdown(psd_conn *c);
psd_conn *psd_conn_next(psd_conn *c);

#endif
