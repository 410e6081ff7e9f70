/* Helpers shared by the example trainers: messages, psd failure reports,
 * option parsing, the clock, the shuffle, data loading and table lookup. */
#include "common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The start of every message: the program's name, and once known the
 * worker's, e.g. "fashion_softmax[1]". */
static char me[64] = "example";

void complain_as(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(me, sizeof me, fmt, ap);
    va_end(ap);
}

void complain(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", me);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int report_failure(ps_client *c, const char *what, int rc)
{
    /* NULL: a failed ps_open's detail, kept for this thread. */
    const char *detail = ps_last_error(c);
    if (detail && *detail)
        complain("%s: %s (%s)", what, ps_strerror(rc), detail);
    else
        complain("%s: %s", what, ps_strerror(rc));
    return -1;
}

int report_open_failure(const char *servers, int rc)
{
    /* Not ps_last_error's text: libpsclient printed it (not quiet), and
     * it read twice. */
    complain("cannot connect to %s: %s (libpsclient said why, above)",
             servers, ps_strerror(rc));
    return -1;
}

int transient_failure(int rc)
{
    return rc == PS_ETIMEDOUT || rc == PS_ECONN || rc == PS_EBUSY;
}

int wait_or_pause(ps_client *c, ps_ts ts, const char *what)
{
    int rc = ts < 0 ? (int)ts : ps_wait(c, ts);
    if (rc == PS_OK)
        return 0;
    report_failure(c, what, rc);
    if (!transient_failure(rc))
        return -1;
    complain("%s: the cluster did not answer in time; carrying on", what);
    return 1;
}

void print_stats(ps_client *c, const char *label)
{
    ps_stats_t s;
    char line[1024];
    if (ps_stats(c, &s) != PS_OK)
        return;
    ps_stats_format(&s, line, sizeof line);
    printf("%s%s\n", label, line);
    ps_stats_reset(c);
}

double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int is_one_of(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(s, *list) == 0)
            return 1;
    return 0;
}

int parse_int(const char *name, const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        complain("%s: '%s' is not a number in %d..%d", name, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

uint64_t next_random(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The bound is far below 2^32, so scaling the top 32 random bits by it is
 * unbiased enough and avoids a division. */
void shuffle(size_t *a, size_t n, uint64_t *rng)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(((next_random(rng) >> 32) * (uint64_t)i) >> 32);
        size_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

int load_split(const char *dir, const char *split, idx_set *out)
{
    char err[1024];
    if (idx_load_split(dir, split, out, err, sizeof err) < 0) {
        complain("%s", err);
        return -1;
    }
    return 0;
}

int find_table(ps_client *c, const char *name, uint64_t rows,
               uint32_t dim_lo, uint32_t dim_hi, uint32_t *dim)
{
    ps_table_info info;
    int rc = ps_table(c, name, &info);
    if (rc < 0) {
        char what[128];
        snprintf(what, sizeof what, "table '%s'", name);
        return report_failure(c, what, rc);
    }
    if (!info.dense || info.rows != rows || info.dim < dim_lo ||
        info.dim > dim_hi) {
        /* Only the largest dim: the trainers either want one exact dim or
         * take any up to a limit. */
        complain("table '%s' is %s with rows %llu, dim %u; want dense, "
                 "rows %llu, dim %u", name, info.dense ? "dense" : "sparse",
                 (unsigned long long)info.rows, (unsigned)info.dim,
                 (unsigned long long)rows, (unsigned)dim_hi);
        return -1;
    }
    *dim = info.dim;
    return rc;
}
