/* Client statistics: histogram arithmetic, snapshots and the public
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

size_t psc_hist_bucket(uint64_t ns)
{
    if (ns < PSC_HIST_SUB)
        return (size_t)ns;
    int e = 63 - __builtin_clzll(ns);            /* floor(log2 ns), >= 3 */
    size_t octave = (size_t)e - 2;
    size_t b = octave * PSC_HIST_SUB + (size_t)((ns >> (e - 3)) - 8);
    return b < PSC_HIST_N ? b : PSC_HIST_N - 1;
}

uint64_t psc_hist_mid(size_t b)
{
    if (b < PSC_HIST_SUB)
        return b;
    size_t octave = b / PSC_HIST_SUB, sub = b % PSC_HIST_SUB;
    int shift = (int)octave - 1;                 /* e - 3 */
    uint64_t lo = (uint64_t)(8 + sub) << shift, width = (uint64_t)1 << shift;
    return lo + width / 2;
}

void psc_stats_since(const psc_stats *now, const psc_stats *base,
                     psc_stats *out)
{
    const uint64_t *a = (const uint64_t *)(const void *)now;
    const uint64_t *b = (const uint64_t *)(const void *)base;
    uint64_t *o = (uint64_t *)(void *)out;
    for (size_t i = 0; i < sizeof *now / sizeof(uint64_t); i++)
        o[i] = __atomic_load_n(&a[i], __ATOMIC_RELAXED) -
               __atomic_load_n(&b[i], __ATOMIC_RELAXED);
}

void psc_stats_sum(psc_stats *dst, const psc_stats *src)
{
    uint64_t *d = (uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (size_t i = 0; i < sizeof *dst / sizeof(uint64_t); i++)
        d[i] += s[i];
}

/* The latency below which a fraction q of the recorded ones lie, as the
 * middle of its bucket, in microseconds; 0 with nothing recorded. */
static double quantile_us(const uint64_t *hist, double q)
{
    uint64_t total = 0, seen = 0;
    for (size_t b = 0; b < PSC_HIST_N; b++)
        total += hist[b];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total);
    if (rank >= total)
        rank = total - 1;
    for (size_t b = 0; b < PSC_HIST_N; b++) {
        seen += hist[b];
        if (seen > rank)
            return (double)psc_hist_mid(b) / 1000.0;
    }
    return 0;
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
        for (size_t b = PSC_HIST_N; b-- > 0;)
            if (o->hist[b]) {
                p->max_us = (double)psc_hist_mid(b) / 1000.0;
                break;
            }
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
}
