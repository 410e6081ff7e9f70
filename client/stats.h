/* What a client measures of itself: counts, bytes and latency histograms
 * per kind of request, kept by the I/O thread (the only writer of almost
 * every field) and read by any thread through ps_stats. Memory is fixed:
 * a histogram is PSW_HIST_N counters (proto/hist.h), whatever the number of requests. */
#ifndef PSC_STATS_H
#define PSC_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "psclient.h"
#include "../proto/hist.h"


typedef struct psc_opstat {
    uint64_t requests, errors, parts;
    uint64_t payload_sent, payload_received;
    uint64_t hist[PSW_HIST_N];
} psc_opstat;

/* Every field is a uint64_t counter: a reset is a snapshot subtracted
 * word by word (psc_stats_since). */
typedef struct psc_stats {
    psc_opstat op[PS_STAT_KINDS];
    uint64_t frames_sent, frames_received;
    uint64_t bytes_sent, bytes_received;
    uint64_t payload_sent, payload_received;
    uint64_t backpressure_ns, sync_wait_ns;   /* caller threads: atomic */
    uint64_t timeouts, resends, duplicates, reconnects;
    uint64_t clocks_skipped, barriers_skipped;
} psc_stats;

/* The kind of a request op (PSW_OP_*), or -1 (LEAVE is not counted). */
int psc_stat_kind(int op);

/* Single-writer add: the I/O thread owns the counter; readers on other
 * threads see whole values (relaxed atomics, no locked instruction). */
static inline void psc_add(uint64_t *v, uint64_t d)
{
    __atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + d,
                     __ATOMIC_RELAXED);
}

/* Add from any thread (rare events: a caller blocked, a clock). */
static inline void psc_add_shared(uint64_t *v, uint64_t d)
{
    __atomic_fetch_add(v, d, __ATOMIC_RELAXED);
}

/* Records one latency in a histogram (I/O thread). */
static inline void psc_hist_add(uint64_t *hist, uint64_t ns)
{
    psc_add(&hist[psw_hist_bucket(ns)], 1);
}

/* out = now - base, read word by word with relaxed loads. */
void psc_stats_since(const psc_stats *now, const psc_stats *base,
                     psc_stats *out);
/* dst += src, word by word (totals over nodes). */
void psc_stats_sum(psc_stats *dst, const psc_stats *src);
/* The public summary: counts, bytes, quantiles from the histograms. */
void psc_stats_export(const psc_stats *s, ps_stats_t *out);

#endif
