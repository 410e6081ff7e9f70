/* The psd server of one node: its listener and connections, the timers
 * that drive the HELLO timeout and the training modes, reload and stop,
 * all on one libuv loop thread. What it serves is a psd_node (node.h). */
#ifndef PSD_SERVER_H
#define PSD_SERVER_H

#include <uv.h>

#include "admin.h"
#include "config.h"
#include "conn.h"
#include "durable.h"
#include "metrics.h"
#include "node.h"
#include "auth.h"

typedef struct psd_server {
    uv_loop_t *loop;
    char cfg_path[4096];
    int fd_max;                  /* max_connections at the last look at
                                    the open files limit (fd_room_update) */
    psd_node node;
    psd_durable dur;             /* snapshots and the journal */
    uv_tcp_t listener;
    psd_conns conns;
    psd_admin admin;             /* psctl's commands, the stats */
    psd_metrics metrics;         /* /metrics, when metrics_listen is set */
    psd_auth *auth;              /* the token in force and the throttle */
    struct sockaddr_storage bind; /* the node's address, resolved */
    int listen_fd, metrics_fd;   /* bound by psd_server_init, -1 once
                                    their listeners own them */
    int stopping;
    char reload_error[640];      /* why the last reload failed; "" */
    uv_timer_t conn_timer;       /* HELLO timeout, heartbeats, dead peers */
    uv_timer_t mode_timer;       /* training modes: grace, wait logs */
    uint64_t journal_retry_ms;   /* a failed journal is tried this often */
    uint64_t journal_tried_ms;   /* when it last was */
    uint64_t trim_looked;        /* conns.closed at the last tick */
    int trim_due;                /* connections closed since the last
                                    look at what lies free (trim_freed) */
    uint64_t trim_ms;            /* the last malloc_trim (loop time) */
} psd_server;

/* Takes ownership of *cfg (left zeroed), runs the checks of preflight.h
 * (the token file, host names, protected mode: no non-loopback address
 * without a token), binds the node's port and metrics_listen's (not
 * listening yet: connections are refused while it loads, and a port
 * another process listens on stops it before it loads anything), builds node
 * `node`'s tables and restores them from
 * its data folder as opts say (psd_durable_start: --skip-snapshot,
 * --drop-table). Returns 0, or -1 with the reasons (one per line) in
 * err. */
int psd_server_init(psd_server *s, uv_loop_t *loop, psd_config *cfg,
                    const char *cfg_path, int node,
                    const psd_start_opts *opts, char *err, size_t errlen);

/* psd --check -n NODE: whether another program listens on node `node`'s
 * port at sa (psd_preflight's bind), or on its metrics_listen, which
 * would stop psd_server_init.
 * For when no psd runs that node: a port its own live node holds is
 * expected (--check before a SIGHUP). Other bind failures are left to
 * preflight (an address not of this host) and to the start. 0, or -1 with
 * "PATH:LINE: [cluster] KEY: node N cannot listen on ADDR: address already
 * in use (hint)" in err ([server] metrics_listen for that one). */
int psd_server_check_bind(const psd_config *cfg, const char *path, int node,
                          const struct sockaddr_storage *sa, char *err,
                          size_t errlen);

/* Listens on the ports psd_server_init bound, opens the node's files for
 * writing (psd_durable_open) and starts accepting. 0 or -1 with err. */
int psd_server_listen(psd_server *s, char *err, size_t errlen);

/* Re-reads the config file and applies what can change live (see
 * psd_node_reload). A file that does not parse, or that changes what may
 * not change, is logged and the running configuration kept. */
void psd_server_reload(psd_server *s);

/* Stops accepting, lets every connection finish writing what it owes,
 * then closes them. The loop ends once everything is closed. */
void psd_server_stop(psd_server *s);

/* Writes the final snapshot (after the loop has finished, so nothing
 * changes any more). 0, or -1 after logging why. */
int psd_server_final(psd_server *s);

/* One line for the service manager's STATUS=: what this node serves.
 * Valid until the next call. */
const char *psd_server_status(psd_server *s);

/* Frees tables and config; call after the loop has finished. */
void psd_server_destroy(psd_server *s);

#endif
