/* Test helper: starts real psd processes on free loopback ports from a
 * generated ini file, and stops them. Every process started is killed
 * when the test process dies (PR_SET_PDEATHSIG), so a failing or crashing
 * test leaves nothing running. Linux sends that signal when the *thread*
 * that forked psd exits, so start and restart nodes from the thread that
 * outlives the cluster (the test's main thread), never from a helper. */
#ifndef TEST_CLUSTER_H
#define TEST_CLUSTER_H

#include <sys/types.h>

#define CLUSTER_MAX 8

typedef struct test_cluster {
    int n;
    pid_t pid[CLUSTER_MAX];
    int port[CLUSTER_MAX];       /* where node i listens */
    int pub[CLUSTER_MAX];        /* where clients are told node i is: port,
                                    or a proxy's port (cluster_start_opts) */
    char dir[256];               /* temp dir: ini file and logs */
    char ini[300];
    char spec[256];              /* "127.0.0.1:pub0,127.0.0.1:pub1" */
    int stop_ms;                 /* cluster_stop's bound on a node's exit
                                    after SIGTERM (its final snapshot);
                                    0: 10 s */
} test_cluster;

/* Writes an ini with `nodes` nodes on free ports, `shards` shards and
 * the given extra text (tables, [server] settings), starts every node and
 * waits until each accepts connections. Returns 0, or -1 after printing
 * why (and stopping whatever started). */
/* A loopback TCP port nobody listens on right now. */
int cluster_free_port(void);

int cluster_start(test_cluster *c, int nodes, int shards, const char *extra);
/* The same with extra lines for the [cluster] section (for example
 * "workers = 3\nworker_grace = 1\n"). */
int cluster_start_ex(test_cluster *c, int nodes, int shards,
                     const char *cluster_lines, const char *extra);

/* The same, with proxied = 1: node i listens on port[i] while the ini
 * (and so every client) names pub[i], a free port on which the test
 * starts a fault proxy (tests/faultproxy.h) that forwards to port[i]. */
int cluster_start_opts(test_cluster *c, int nodes, int shards, int proxied,
                       const char *cluster_lines, const char *extra);

/* Starts node i again (killing it first if it runs), from the same ini,
 * and waits until it accepts connections. 0 or -1. */
int cluster_restart(test_cluster *c, int i);

/* The same with one more argument for psd (for example
 * "--skip-snapshot"), or NULL. Fails when psd does not come up. */
int cluster_restart_with(test_cluster *c, int i, const char *arg);

/* An empty cluster of n nodes whose ini the test writes itself (at
 * c->ini, in its own folder c->dir, with ports of its choosing) before
 * cluster_launch. 0, or -1 when the folder cannot be made. */
int cluster_prepare(test_cluster *c, int n);

/* Starts node i (killing it first if it runs) without waiting for it:
 * for a start that is expected to fail, or a slow one (cluster_wait_up). */
void cluster_launch(test_cluster *c, int i, const char *arg);

/* Waits up to ms milliseconds for node i to accept connections (the
 * restarts above wait 5 s); 0, or -1 after printing its log. */
int cluster_wait_up(test_cluster *c, int i, int ms);

/* Waits up to ms milliseconds for node i to exit; returns its exit
 * status (128 + signal when killed), or -1 when it still runs. */
int cluster_wait_exit(test_cluster *c, int i, int ms);

/* Sends SIGTERM to every node and waits (up to 10 s, then SIGKILL).
 * Returns 0 if every node exited with status 0. Removes the temp dir. */
int cluster_stop(test_cluster *c);

/* For a signal handler, when the process is about to _exit: SIGKILLs
 * every node without reaping it and removes the ini, the logs and the
 * temp dir. Uses only async-signal-safe calls; does nothing for a zeroed
 * test_cluster. */
void cluster_discard(const test_cluster *c);

/* Kills node i with the given signal and reaps it. */
void cluster_kill(test_cluster *c, int i, int sig);

/* Whether node i is still running. */
int cluster_alive(test_cluster *c, int i);

/* Waits up to ms milliseconds for `text` to appear in node i's log.
 * Returns 1 when it did. */
int cluster_log_wait(const test_cluster *c, int i, const char *text, int ms);

/* Returns the contents of node i's log (malloc'd, caller frees). */
char *cluster_log(const test_cluster *c, int i);

/* Runs `psctl -c INI ARGS 2>&1` ($PSCTL_BIN, else build/psctl) on the
 * cluster's ini; returns what it wrote (malloc'd, caller frees; "" when
 * it wrote nothing) and its exit status in *status (-1: not run). */
char *cluster_psctl(const test_cluster *c, int *status, const char *args);

/* The sanitizer psd ($PSD_BIN, else build/psd) was built with:
 * "AddressSanitizer", "ThreadSanitizer", or NULL for none (or when the
 * file cannot be read). Tests that run psd where a sanitizer cannot (an
 * LD_PRELOAD shim replacing calloc, an address-space limit) skip on it. */
const char *cluster_psd_sanitizer(void);

/* Forks a child that runs fn(arg) and exits with its return value; the
 * child dies with the test process. Returns its pid. */
pid_t spawn(int (*fn)(void *), void *arg);
/* Waits for pid; returns its exit status, or 128+signal. */
int reap(pid_t pid);

#endif
