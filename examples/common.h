/* Helpers shared by the example trainers (fashion_softmax, fashion_mlp,
 * reuters_lr): messages prefixed with the program's name, psd failure
 * reports, option parsing, the clock, the shuffle, data loading and table
 * lookup. */
#ifndef COMMON_H
#define COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "idx.h"
#include "psclient.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/* Sets the name that starts every later message, e.g.
 * complain_as("fashion_mlp[%d]", worker); it is cut at 63 bytes. */
void complain_as(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* Prints "NAME: message" and a newline to stderr. */
void complain(const char *fmt, ...) PRINTF_LIKE(1, 2);

/* Reports a failed psd call: what we were doing, the code's text and the
 * library's detail from c (NULL: a failed ps_open's, kept for this
 * thread). Returns -1 so callers can `return report_failure(...)`. */
int report_failure(ps_client *c, const char *what, int rc);

/* Reports a failed ps_open of servers by its code alone: libpsclient
 * (not quiet) printed the detail already. Returns -1. */
int report_open_failure(const char *servers, int rc);

/* A failed request whose cause may pass: a node unreachable or silent for
 * longer than the request's bounded time (a restart, a partition). The
 * trainers treat it as a pause, not the end: they say so and go on. */
int transient_failure(int rc);

/* Waits for request ts. Returns 0 when it succeeded; 1 after a message
 * when it failed for a transient reason (the caller may try again, or
 * carry on); -1 after a message when it failed for good. */
int wait_or_pause(ps_client *c, ps_ts ts, const char *what);

/* Prints "<label>" and the client's statistics line (ps_stats_format) to
 * stdout, then resets them: one line per epoch. */
void print_stats(ps_client *c, const char *label);

/* Seconds on the monotonic clock. */
double now(void);

/* True if s is one of the strings of the NULL-terminated list. */
int is_one_of(const char *s, const char *const *list);

/* Parses the decimal int s, the value of option `name`, in lo..hi. Returns
 * 0 with *out set, or -1 after a message. */
int parse_int(const char *name, const char *s, int lo, int hi, int *out);

/* splitmix64: a tiny generator, so that every process (and every run)
 * shuffles the same way on every platform. Advances *s. */
uint64_t next_random(uint64_t *s);

/* Shuffles a[0..n) in place (Fisher-Yates), drawing from *rng. */
void shuffle(size_t *a, size_t n, uint64_t *rng);

/* idx_load_split, with a message on failure. Returns 0, or -1 after a
 * message. On success *out owns its arrays until idx_destroy(out). */
int load_split(const char *dir, const char *split, idx_set *out);

/* Looks up table `name` and checks that it is dense with `rows` rows and a
 * dim in dim_lo..dim_hi. Returns its id and sets *dim, or returns -1 after
 * a message. */
int find_table(ps_client *c, const char *name, uint64_t rows,
               uint32_t dim_lo, uint32_t dim_hi, uint32_t *dim);

#endif
