/* Client statistics: snapshots and the public
 * summary; see stats.h. */
#include <stdio.h>
#include <string.h>

#include "stats.h"
#include "../proto/msg.h"

_Static_assert(sizeof(psc_stats) % sizeof(uint64_t) == 0,
               "psc_stats is an array of uint64_t counters");

int psc_stat_kind(int op)
{
    switch (op) {
    case PSW_OP_PUSH: return PS_STAT_PUSH;
    case PSW_OP_PULL: return PS_STAT_PULL;
    case PSW_OP_PUSHPULL: return PS_STAT_PUSHPULL;
    case PSW_OP_PUSH_RANGE: return PS_STAT_PUSH_RANGE;
    case PSW_OP_PULL_RANGE: return PS_STAT_PULL_RANGE;
    case PSW_OP_CLOCK: return PS_STAT_CLOCK;
    case PSW_OP_BARRIER: return PS_STAT_BARRIER;
    default: return -1;
    }
}

void psc_stats_since(const psc_stats *now, const psc_stats *base,
                     psc_stats *out)
{
    const uint64_t *a = (const uint64_t *)(const void *)now;
    const uint64_t *b = (const uint64_t *)(const void *)base;
    uint64_t *o = (uint64_t *)(void *)out;
    /* out may be a base that another thread reads (ps_stats_reset while
     * ps_stats runs): stored as atomically as it is read. The base word
     * first: a reset stores in it a value the counter had, and counters
     * only grow, so the counter read after it is no smaller. Read the
     * other way round, a reset between the two loads made the difference
     * wrap (a count near 2^64, from a TSan trial's stress program). The
     * clamp guards that rule: a word that stopped being a counter would
     * read 0, not near 2^64. */
    for (size_t i = 0; i < sizeof *now / sizeof(uint64_t); i++) {
        uint64_t from = __atomic_load_n(&b[i], __ATOMIC_ACQUIRE);
        uint64_t to = __atomic_load_n(&a[i], __ATOMIC_RELAXED);
        __atomic_store_n(&o[i], to > from ? to - from : 0, __ATOMIC_RELEASE);
    }
}

void psc_stats_sum(psc_stats *dst, const psc_stats *src)
{
    uint64_t *d = (uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (size_t i = 0; i < sizeof *dst / sizeof(uint64_t); i++)
        d[i] += s[i];
}

static double quantile_us(const uint64_t *hist, double q)
{
    return (double)psw_hist_quantile(hist, q) / 1000.0;
}

void psc_stats_export(const psc_stats *s, ps_stats_t *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < PS_STAT_KINDS; k++) {
        const psc_opstat *o = &s->op[k];
        ps_op_stats *p = &out->op[k];
        p->requests = o->requests;
        p->errors = o->errors;
        p->parts = o->parts;
        p->payload_sent = o->payload_sent;
        p->payload_received = o->payload_received;
        p->p50_us = quantile_us(o->hist, 0.50);
        p->p90_us = quantile_us(o->hist, 0.90);
        p->p99_us = quantile_us(o->hist, 0.99);
        p->max_us = (double)psw_hist_max(o->hist) / 1000.0;
    }
    out->frames_sent = s->frames_sent;
    out->frames_received = s->frames_received;
    out->bytes_sent = s->bytes_sent;
    out->bytes_received = s->bytes_received;
    out->payload_sent = s->payload_sent;
    out->payload_received = s->payload_received;
    out->backpressure_us = s->backpressure_ns / 1000;
    out->sync_wait_us = s->sync_wait_ns / 1000;
    out->timeouts = s->timeouts;
    out->resends = s->resends;
    out->duplicates = s->duplicates;
    out->reconnects = s->reconnects;
    out->clocks_skipped = s->clocks_skipped;
    out->barriers_skipped = s->barriers_skipped;
}
