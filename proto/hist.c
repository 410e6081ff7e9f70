/* Log-linear latency histograms; see hist.h. */
#include "hist.h"

size_t psw_hist_bucket(uint64_t ns)
{
    if (ns < PSW_HIST_SUB)
        return (size_t)ns;
    int e = 63 - __builtin_clzll(ns);            /* floor(log2 ns), >= 3 */
    size_t octave = (size_t)e - 2;
    size_t b = octave * PSW_HIST_SUB + (size_t)((ns >> (e - 3)) - 8);
    return b < PSW_HIST_N ? b : PSW_HIST_N - 1;
}

uint64_t psw_hist_mid(size_t b)
{
    if (b < PSW_HIST_SUB)
        return b;
    size_t octave = b / PSW_HIST_SUB, sub = b % PSW_HIST_SUB;
    int shift = (int)octave - 1;                 /* e - 3 */
    uint64_t lo = (uint64_t)(8 + sub) << shift, width = (uint64_t)1 << shift;
    return lo + width / 2;
}

uint64_t psw_hist_quantile(const uint64_t *hist, double q)
{
    uint64_t total = 0, seen = 0;
    for (size_t b = 0; b < PSW_HIST_N; b++)
        total += hist[b];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)total);
    if (rank >= total)
        rank = total - 1;
    for (size_t b = 0; b < PSW_HIST_N; b++) {
        seen += hist[b];
        if (seen > rank)
            return psw_hist_mid(b);
    }
    return 0;
}

uint64_t psw_hist_max(const uint64_t *hist)
{
    for (size_t b = PSW_HIST_N; b-- > 0;)
        if (hist[b])
            return psw_hist_mid(b);
    return 0;
}
