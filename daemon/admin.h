/* What an operator asks a node (psctl, the ADMIN op) and what it says
 * about itself: the `stats` document (JSON), the same figures in
 * Prometheus text format for /metrics, `save` (start a snapshot now) and
 * `ping`. Keeps a ten-second window of counters, sampled once a second
 * on the loop, so that rates are what happened lately, not averages
 * since start. Reads the node, its connections and its durability; owns
 * nothing of them. */
#ifndef PSD_ADMIN_H
#define PSD_ADMIN_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "durable.h"
#include "node.h"

#define PSD_ADMIN_WINDOW 10      /* seconds of the rate window */

typedef struct psd_admin {
    uv_loop_t *loop;
    psd_node *node;
    psd_conns *conns;
    psd_durable *dur;
    /* Why the last SIGHUP's file was refused, "" after one that took
     * (the server's; NULL: no reloads). */
    const char *reload_error;
    uint64_t start_ms;
    uv_timer_t tick;
    /* Ring of per-second samples of the counters (collect() in admin.c
     * says which): ring[i] taken at ring_ms[i]. */
    uint64_t *ring;
    uint64_t ring_ms[PSD_ADMIN_WINDOW + 1];
    size_t width;                /* counters per sample */
    int head, filled;
} psd_admin;

/* Starts the sampling timer. 0, or -1 when memory runs out. */
int psd_admin_init(psd_admin *a, uv_loop_t *loop, psd_node *n,
                   psd_conns *conns, psd_durable *dur);
/* Closes the timer (the loop then ends) and frees the ring. */
void psd_admin_stop(psd_admin *a);

/* psd's resident set, in bytes (/proc/self/statm); 0 when unknown.
 * Shown by the stats, and weighed by the server's trim of freed memory. */
uint64_t psd_rss_bytes(void);

/* Answers one command: "ping", "stats" (JSON), "metrics" (Prometheus
 * text), "rates" (per-second rates over the window, one `name{labels}
 * value` per line like metrics), "save" (JSON: the generation started or
 * already being written). "end-job" never reaches it: it changes the
 * training state, and request.c carries it out.
 * Matches psd_node.admin: returns PSW_OK or a PSW_E* code with *text (a
 * malloc'd string the caller frees, NULL when memory ran out). */
int psd_admin_command(void *arg, const char *cmd, size_t len, char **text,
                      size_t *textlen);

#endif
