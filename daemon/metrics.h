/* /metrics over HTTP, for Prometheus: a listener on the node's
 * metrics_listen address, served from psd's own loop. It answers
 * `GET /metrics` (and `GET /`) with the node's figures in the text
 * exposition format and closes the connection; anything else gets 404 or
 * 400. Written by hand rather than with an HTTP library because it is one
 * fixed request on one loop: Debian's HTTP server libraries bring their
 * own threads or poll loops. Requests are read up to 8 KiB within 5 s,
 * at most 16 connections at once (a 17th closes the oldest one whose
 * request has not arrived, else the oldest being answered); the figures
 * are read-only, and a body that was slow to build is served again for a
 * moment (metrics.c, CACHE_MIN_NS). */
#ifndef PSD_METRICS_H
#define PSD_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "config.h"

/* Descriptors /metrics may hold at once: its connections, and those a
 * burst leaves closing within a loop turn (metrics.c), plus the listener:
 * the open files limit keeps them beside psd's own (psd_fd_room). */
#define PSD_METRICS_FDS (16 + 2 * 64 + 1)

typedef struct psd_metrics {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listening;
    int open;                    /* connections being served */
    struct mconn *head;          /* those not closing, oldest first */
    /* A connection there is no memory for is accepted into this handle
     * and closed (metrics.c: drop_pending). */
    uv_tcp_t drop;
    int drop_closing;            /* the handle is not free yet */
    int drop_waiting;            /* a connection waits in libuv for it */
    /* Produces the body: PSW_OK and a malloc'd text (psd_admin_command
     * with "metrics"). */
    int (*body)(void *arg, const char *cmd, size_t len, char **text,
                size_t *textlen);
    void *arg;
    struct mbody *cache;         /* a body costly to build, served again */
    uint64_t cache_until;        /* until then (uv_hrtime) */
    /* While answers are being written: how far each has got, looked at
     * every 100 ms (metrics.c, on_sample). */
    uv_timer_t sample;
    int sample_init;
} psd_metrics;

/* Listens on fd, a socket bound to addr (psd_server_init binds it before
 * the node loads its files), which it takes over: closed by
 * psd_metrics_stop, or here on failure. 0, or -1 with the reason in err. */
int psd_metrics_start(psd_metrics *m, uv_loop_t *loop, int fd,
                      const psd_node_addr *addr,
                      int (*body)(void *, const char *, size_t, char **,
                                  size_t *),
                      void *arg, char *err, size_t errlen);

/* Stops listening and closes the connections that have sent nothing
 * (they would hold the loop, and so psd's stop, for up to 5 s); a request
 * begun has 1 s more to arrive whole, answers being written finish on
 * their own. */
void psd_metrics_stop(psd_metrics *m);

#endif
