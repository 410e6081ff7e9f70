/* Latency histograms of fixed memory, shared by libpsclient (ps_stats) and
 * psd (psctl stats, /metrics) so that both sides report percentiles with
 * the same resolution: log-linear buckets, exact below 8 ns, then 8 per
 * power of two (each about 9% wide) up to 2^40 ns (18 minutes); longer
 * times go to the last bucket. A histogram is PSW_HIST_N uint64_t
 * counters, owned by whoever declares it. */
#ifndef PSW_HIST_H
#define PSW_HIST_H

#include <stddef.h>
#include <stdint.h>

#define PSW_HIST_SUB 8
#define PSW_HIST_N (39 * PSW_HIST_SUB)

/* Bucket of a latency, and the middle of a bucket, in ns. */
size_t psw_hist_bucket(uint64_t ns);
uint64_t psw_hist_mid(size_t bucket);

/* The latency below which a fraction q (0..1) of the recorded ones lie,
 * as the middle of its bucket, in ns; 0 with nothing recorded. */
uint64_t psw_hist_quantile(const uint64_t *hist, double q);
/* The middle of the highest bucket used, in ns; 0 when empty. */
uint64_t psw_hist_max(const uint64_t *hist);

#endif
