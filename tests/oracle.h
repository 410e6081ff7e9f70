/* The counter oracle for fault tests: clients push +1.0 to a fixed set of
 * keys and count what was acknowledged; afterwards every key must hold
 * exactly the acknowledged count when nothing failed (nothing lost,
 * nothing applied twice), and lie between the acknowledged count and that
 * plus the failed pushes otherwise. Used by tests/test_faults.c and
 * tests/soak.c. */
#ifndef TEST_ORACLE_H
#define TEST_ORACLE_H

#include <stdatomic.h>
#include <stdint.h>

#include "psclient.h"

#define ORACLE_KEYS 32           /* sparse keys, spread over every node */
#define ORACLE_TABLE "count"     /* a sparse table of dim 1, updater sum */

typedef struct oracle_job {
    const char *spec;            /* servers for ps_open */
    ps_options opt;
    int pushes, inflight;
    atomic_int *stop;            /* when set and nonzero: push no more */
    int acked, failed;           /* results */
    char last_error[300];
    int nkeys;                   /* keys 0..nkeys-1; 0: ORACLE_KEYS */
} oracle_job;

/* The i-th key (0..ORACLE_KEYS-1). */
uint64_t oracle_key(int i);

/* Runs one client: `pushes` pushes of +1 to every key, `inflight`
 * outstanding. A pthread start routine (arg: the oracle_job). */
void *oracle_run(void *arg);

/* Runs `jobs` (at most 8) such clients at once; adds up their results. */
void oracle_run_many(const char *spec, const ps_options *opt, int jobs,
                     int pushes, int inflight, int *acked, int *failed);

/* As oracle_run_many, but the clients stop pushing (and drain what is in
 * flight) once *stop becomes nonzero; pushes is then an upper bound. */
void oracle_run_until(const char *spec, const ps_options *opt, int jobs,
                      int pushes, int inflight, atomic_int *stop,
                      int *acked, int *failed);

/* Pulls every key through spec and checks lo <= value <= hi. Returns 0,
 * or -1 with the first offending key and value written to why. */
int oracle_check(const char *spec, int lo, int hi, char *why, size_t len);

/* The same for keys 0..nkeys-1, opened with opt (NULL: defaults). */
int oracle_check_n(const char *spec, const ps_options *opt, int nkeys,
                   int lo, int hi, char *why, size_t len);

#endif
