/* psbench: throughput, latency and memory figures for psd, measured against
 * real psd processes it starts, each figure also given as a ratio to
 * baselines measured in the same run (memcpy, raw TCP over loopback).
 * See tests/bench/README.md for what every figure and ratio means. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "psclient.h"
#include "../../proto/layout.h"
#include "../cluster.h"

/* ---- settings ------------------------------------------------------- */

static const char *opt_psd = "build/psd";
static const char *opt_out = "build";
static const char *opt_server_conf = "";  /* extra [server] lines */
static int opt_ms = 300;          /* measured time per cell */
static int opt_warm_ms = 80;      /* warm-up per cell, not measured */
static int opt_timeout_ms = 3000; /* per request in the matrix */
static int opt_matrix = 1, opt_memory = 1, opt_baselines = 1;
static int opt_mem_sparse_dim_big = 16;   /* sparse dim at 10^7 rows */
static const char *opt_f_op, *opt_f_payload;
static int opt_f_inflight, opt_f_workers, opt_f_nodes;   /* 0: any */
static int ncpu = 1;
static int failures;              /* crashes, request errors: exit 1 */

#define MAX_WORKERS 8
#define MAX_SAMPLES (1u << 20)    /* latency samples kept per worker */

/* ---- small helpers -------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}


/* Pins thread/process `tid` (0: the caller) to `cpu`, or to every CPU when
 * cpu < 0. */
static int pin_tid(pid_t tid, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < ncpu; i++)
        if (cpu < 0 || i == cpu)
            CPU_SET(i, &set);
    return sched_setaffinity(tid, sizeof set, &set);
}

/* Pins every thread of process `pid` (main thread and any helpers). */
static void pin_process(pid_t pid, int cpu)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) {
        pin_tid(pid, cpu);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            pin_tid((pid_t)atoi(e->d_name), cpu);
    closedir(d);
}

/* fork() for helpers: the child dies with psbench (PR_SET_PDEATHSIG), so
 * nothing psbench starts can outlive it, even when it crashes. */
static pid_t fork_child(void)
{
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
    }
    return pid;
}

/* Waits for pid up to timeout_ms, then kills it. Returns the exit status,
 * 128+signal when it died of a signal, or -1 when it had to be killed. */
static int reap_within(pid_t pid, int timeout_ms)
{
    int st;
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -1;
        if (now_ns() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_us(1000);
    }
}

static void *shared_alloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
        perror("psbench: mmap");
        exit(1);
    }
    return p;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentile q (0..1) of n sorted samples. */
static double pct(const uint32_t *s, size_t n, double q)
{
    if (!n)
        return NAN;
    return s[(size_t)((double)(n - 1) * q + 0.5)];
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kib = atol(line + 6);
    fclose(f);
    return kib;
}

/* ---- sockets -------------------------------------------------------- */

static int listen_loopback(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        perror("psbench: listen");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int connect_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int read_full(int fd, char *p, size_t n)
{
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- baselines ------------------------------------------------------ */

/* Placements, the index of every baseline array: 0 unpinned, 1 every
 * process of the measurement pinned to CPU 0, 2 (TCP only) the two ends
 * pinned to different CPUs, for reference. */
enum { UNPINNED, PINNED, SPLIT, NPLACE };
static const char *const place_name[NPLACE] = { "unpinned", "pinned",
                                                "split" };
typedef struct baselines {
    double memcpy_gbps[2];
    double stream_gbps[NPLACE];
    double rtt_p50_us[NPLACE], rtt_p99_us[NPLACE];
} baselines;

#define BASE_RUNS 3      /* TCP baselines: the median of 3 fresh pairs */

/* CPU for one end of a TCP baseline: end 0 sends or asks, end 1 receives
 * or echoes; -1 means leave it to the scheduler. */
static int end_cpu(int place, int end)
{
    return place == PINNED ? 0 : place == SPLIT ? (end && ncpu > 1) : -1;
}

static baselines base;

typedef struct base_shm {
    double value, p50, p99;
} base_shm;

static void memcpy_child(int pinned, base_shm *out)
{
    if (pinned)
        pin_tid(0, 0);
    size_t n = 64u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        _exit(1);
    memset(a, 1, n);
    memset(b, 2, n);
    memcpy(b, a, n);
    uint64_t t0 = now_ns(), t, bytes = 0;
    do {
        memcpy(b, a, n);
        a[bytes % n] ^= b[(bytes + 7) % n];   /* keep the copies live */
        bytes += n;
        t = now_ns();
    } while (t - t0 < (uint64_t)opt_ms * 2000000u);
    out->value = (double)bytes / (double)(t - t0);
    _exit(b[12345] == 7 ? 2 : 0);
}

/* One connection, 4 MiB writes for opt_ms; the receiver times from its
 * first byte to EOF. */
static double tcp_stream(int place, base_shm *out)
{
    int port, lfd = listen_loopback(&port);
    size_t chunk = 4u << 20;
    pid_t rx = fork_child();
    if (rx == 0) {
        if (end_cpu(place, 1) >= 0)
            pin_tid(0, end_cpu(place, 1));
        int fd = accept(lfd, NULL, NULL);
        char *buf = malloc(chunk);
        uint64_t bytes = 0, t0 = 0;
        ssize_t k;
        while (fd >= 0 && buf && (k = read(fd, buf, chunk)) > 0) {
            if (!t0)
                t0 = now_ns();
            bytes += (uint64_t)k;
        }
        out->value = (double)bytes / (double)(now_ns() - t0);
        _exit(0);
    }
    pid_t tx = fork_child();
    if (tx == 0) {
        if (end_cpu(place, 0) >= 0)
            pin_tid(0, end_cpu(place, 0));
        int fd = connect_loopback(port);
        char *buf = malloc(chunk);
        if (fd < 0 || !buf)
            _exit(1);
        memset(buf, 'x', chunk);
        uint64_t t0 = now_ns();
        while (now_ns() - t0 < (uint64_t)opt_ms * 1000000u)
            if (write_full(fd, buf, chunk))
                _exit(1);
        close(fd);
        _exit(0);
    }
    close(lfd);
    int a = reap_within(tx, 30000), b = reap_within(rx, 30000);
    if (a || b) {
        fprintf(stderr, "psbench: TCP stream baseline failed (%d, %d)\n", a, b);
        failures++;
    }
    return out->value;
}

/* 64-byte TCP ping-pong (TCP_NODELAY both ends) for opt_ms. */
static void tcp_pingpong(int place, base_shm *out)
{
    int port, lfd = listen_loopback(&port);
    pid_t echo = fork_child();
    if (echo == 0) {
        if (end_cpu(place, 1) >= 0)
            pin_tid(0, end_cpu(place, 1));
        int fd = accept(lfd, NULL, NULL);
        char m[64];
        nodelay(fd);
        while (fd >= 0 && !read_full(fd, m, sizeof m))
            if (write_full(fd, m, sizeof m))
                break;
        _exit(0);
    }
    pid_t cl = fork_child();
    if (cl == 0) {
        if (end_cpu(place, 0) >= 0)
            pin_tid(0, end_cpu(place, 0));
        int fd = connect_loopback(port);
        char m[64];
        size_t cap = 1u << 20, n = 0;
        uint32_t *s = malloc(cap * sizeof *s);
        if (fd < 0 || !s)
            _exit(1);
        nodelay(fd);
        memset(m, 'p', sizeof m);
        for (int i = 0; i < 200; i++)
            if (write_full(fd, m, 64) || read_full(fd, m, 64))
                _exit(1);
        uint64_t t0 = now_ns(), t = t0;
        while (t - t0 < (uint64_t)opt_ms * 1000000u && n < cap) {
            uint64_t a = now_ns();
            if (write_full(fd, m, 64) || read_full(fd, m, 64))
                _exit(1);
            t = now_ns();
            s[n++] = (uint32_t)(t - a);
        }
        qsort(s, n, sizeof *s, cmp_u32);
        out->p50 = pct(s, n, 0.5) / 1e3;
        out->p99 = pct(s, n, 0.99) / 1e3;
        out->value = (double)n;
        _exit(0);
    }
    close(lfd);
    int a = reap_within(cl, 30000), b = reap_within(echo, 30000);
    if (a || b) {
        fprintf(stderr, "psbench: ping-pong baseline failed (%d, %d)\n", a, b);
        failures++;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median3(double *v)
{
    qsort(v, BASE_RUNS, sizeof *v, cmp_double);
    return v[BASE_RUNS / 2];
}

static void measure_baselines(void)
{
    base_shm *sh = shared_alloc(sizeof *sh);
    printf("== baselines (measured now; GB = 1e9 bytes; TCP figures are the "
           "median of %d runs) ==\n", BASE_RUNS);
    for (int p = 0; p < 2; p++) {
        memset(sh, 0, sizeof *sh);
        pid_t pid = fork_child();
        if (pid == 0)
            memcpy_child(p, sh);
        if (reap_within(pid, 30000)) {
            fprintf(stderr, "psbench: memcpy baseline failed\n");
            failures++;
        }
        base.memcpy_gbps[p] = sh->value;
    }
    for (int p = 0; p < NPLACE; p++) {
        double gb[BASE_RUNS], p50[BASE_RUNS], p99[BASE_RUNS];
        for (int r = 0; r < BASE_RUNS; r++) {
            memset(sh, 0, sizeof *sh);
            gb[r] = tcp_stream(p, sh);
            memset(sh, 0, sizeof *sh);
            tcp_pingpong(p, sh);
            p50[r] = sh->p50;
            p99[r] = sh->p99;
        }
        base.stream_gbps[p] = median3(gb);
        base.rtt_p50_us[p] = median3(p50);
        base.rtt_p99_us[p] = median3(p99);
    }
    printf("memcpy %.2f GB/s unpinned, %.2f GB/s pinned\n",
           base.memcpy_gbps[0], base.memcpy_gbps[1]);
    for (int p = 0; p < NPLACE; p++)
        printf("%-9s TCP stream %5.2f GB/s   64 B ping-pong RTT p50 %6.1f us"
               "  p99 %6.1f us\n", place_name[p], base.stream_gbps[p],
               base.rtt_p50_us[p], base.rtt_p99_us[p]);
    printf("(pinned: both ends on CPU 0; split: one end on each of CPU 0 and "
           "1, for reference only)\n\n");
    munmap(sh, sizeof *sh);
}

/* ---- psd processes -------------------------------------------------- */

/* The cluster running now, so that SIGINT/SIGTERM can remove its files
 * (its processes die with psbench through PR_SET_PDEATHSIG). */
static test_cluster *volatile live;

static void on_signal(int sig)
{
    test_cluster *c = live;
    if (c)
        cluster_discard(c);
    _exit(128 + sig);
}

/* Starts `nodes` psd nodes (16 shards, MAX_WORKERS workers, warnings only,
 * the --server-conf lines) with the given tables, through tests/cluster.c,
 * which runs $PSD_BIN (main sets it from --psd). Returns 0 or -1. */
static int bench_start(test_cluster *c, int nodes, const char *tables)
{
    char workers[32], *extra;
    snprintf(workers, sizeof workers, "workers = %d\n", MAX_WORKERS);
    if (asprintf(&extra, "[server]\nlog_level = warn\n%s\n\n%s",
                 opt_server_conf, tables) < 0)
        return -1;
    memset(c, 0, sizeof *c);   /* on_signal may look at it from now on */
    live = c;
    int r = cluster_start_ex(c, nodes, 16, workers, extra);
    free(extra);
    if (r)
        live = NULL;
    return r;
}

static int bench_stop(test_cluster *c)
{
    int r = cluster_stop(c);
    live = NULL;
    return r;
}

/* ---- the matrix ----------------------------------------------------- */

typedef enum { OP_PUSH, OP_PULL, OP_PUSHPULL, OP_PUSH_RANGE, OP_PULL_RANGE,
               NOPS } op_kind;
static const char *const op_name[NOPS] = { "push", "pull", "pushpull",
                                           "push_range", "pull_range" };

typedef struct tabdef {
    const char *name;
    int dense;
    uint32_t dim;
    uint64_t rows;
} tabdef;

static const tabdef tables[] = {
    { "d1", 1, 1, 65536 },
    { "d1k", 1, 1024, 8192 },    /* 4 KiB rows, 32 MiB */
    { "s16", 0, 16, 0 },
    { "s8", 0, 8, 0 },
    { "s1", 0, 1, 0 },
};

static const char bench_tables[] =
    "[table.d1]\nkind = dense\nrows = 65536\ndim = 1\nupdater = sum\n\n"
    "[table.d1k]\nkind = dense\nrows = 8192\ndim = 1024\nupdater = sum\n\n"
    "[table.s16]\nkind = sparse\ndim = 16\nupdater = sum\n\n"
    "[table.s8]\nkind = sparse\ndim = 8\nupdater = sum\n\n"
    "[table.s1]\nkind = sparse\ndim = 1\nupdater = sum\n";

/* A request shape: which table and how many keys (rows) per request. */
typedef struct load {
    const char *label;
    int tab;
    size_t nkeys;
} load;

static const load loads[] = {
    { "4 B", 0, 1 },          /* one row of dim 1 */
    { "4 KiB", 1, 1 },        /* rows of dim 1024 */
    { "64 KiB", 1, 16 },
    { "1 MiB", 1, 256 },
    { "16 MiB", 1, 4096 },
    { "1000x16", 2, 1000 },   /* sparse: keys x dim */
    { "1000x8", 3, 1000 },
    { "65536x1", 4, 65536 },
};
enum { L_4B, L_4K, L_64K, L_1M, L_16M, L_S16, L_S8, L_S1, NLOADS };

typedef struct cell {
    int load, window, workers, nodes, pinned;
    op_kind op;
    /* results */
    int ran, failed;
    long count, errors;
    double secs, reqs, gbps, mkeys, p50, p99;
    double client_p50;       /* worker 0's ps_stats p50, microseconds */
} cell;

#define MAX_CELLS 512
static cell cells[MAX_CELLS];
static int ncells;

static size_t payload_bytes(const cell *c)
{
    const load *l = &loads[c->load];
    return l->nkeys * tables[l->tab].dim * sizeof(float);
}

/* Shared between psbench and its worker processes for one cell. */
typedef struct wres {
    int status;
    long count, errors;
    size_t nsamples;
    double client_p50_us;    /* what the client's own ps_stats measured */
} wres;

typedef struct bench_shm {
    atomic_int ready, go;
    uint64_t t_go, t_end;
    wres w[MAX_WORKERS];
    uint32_t samples[MAX_WORKERS][MAX_SAMPLES];   /* latency, ns */
} bench_shm;

static bench_shm *shm;

typedef struct wctx {
    ps_client *cl;
    const cell *c;
    int table, npool;
    size_t n;                 /* keys (rows) per request */
    size_t rowf;              /* floats per request */
    uint64_t *keys;           /* npool sets of n keys */
    uint64_t *firsts;         /* dense: first row of each set */
    float *vals, *outs;
    ps_ts *ts;
    uint64_t *t_issue;
    _Atomic uint64_t *t_done;
    long errors;
} wctx;

static void on_done(ps_ts ts, int status, void *arg)
{
    (void)ts;
    (void)status;
    atomic_store((_Atomic uint64_t *)arg, now_ns());
}

static ps_ts issue(wctx *x, long i, int slot)
{
    int j = (int)(i % x->npool);
    const uint64_t *k = x->keys + (size_t)j * x->n;
    float *out = x->outs ? x->outs + (size_t)slot * x->rowf : NULL;
    void *arg = (void *)&x->t_done[slot];
    atomic_store(&x->t_done[slot], 0);
    switch (x->c->op) {
    case OP_PUSH:
        return ps_push(x->cl, x->table, k, x->n, x->vals, on_done, arg);
    case OP_PULL:
        return ps_pull(x->cl, x->table, k, x->n, out, on_done, arg);
    case OP_PUSHPULL:
        return ps_pushpull(x->cl, x->table, k, x->n, x->vals, out, on_done, arg);
    case OP_PUSH_RANGE:
        return ps_push_range(x->cl, x->table, x->firsts[j], x->n, x->vals,
                             on_done, arg);
    default:
        return ps_pull_range(x->cl, x->table, x->firsts[j], x->n, out,
                             on_done, arg);
    }
}

/* Issues requests until `end` (and at least min_reqs), keeping up to
 * window in flight and waiting on the oldest. When res is set, records
 * the latency of each request that completed by `end`: at 1 in flight
 * the time ps_wait returned (what a caller sees), otherwise the time its
 * callback ran. Returns the number recorded. */
static long run_phase(wctx *x, uint64_t end, long min_reqs, wres *res,
                      uint32_t *samples)
{
    int W = x->c->window;
    long issued = 0, inflight = 0, counted = 0;
    for (;;) {
        int more = issued < min_reqs || now_ns() < end;
        if (x->errors)
            more = 0;         /* a broken cell: drain and report */
        if (more && inflight < W) {
            int slot = (int)(issued % W);
            x->t_issue[slot] = now_ns();
            x->ts[slot] = issue(x, issued, slot);
            issued++;
            if (x->ts[slot] < 0) {
                x->errors++;
                continue;
            }
            inflight++;
            continue;
        }
        if (!inflight)
            break;
        int slot = (int)((issued - inflight) % W);
        inflight--;
        if (x->ts[slot] < 0)
            continue;
        int rc = ps_wait(x->cl, x->ts[slot]);
        uint64_t t = now_ns();
        if (W > 1) {
            uint64_t d;
            while (!(d = atomic_load(&x->t_done[slot])))
                sched_yield();
            t = d;
        }
        if (rc) {
            if (x->errors++ < 1)
                fprintf(stderr, "psbench: %s: %s\n", ps_strerror(rc),
                        ps_last_error(x->cl));
            continue;
        }
        if (res && t <= end && res->nsamples < MAX_SAMPLES) {
            uint64_t lat = t - x->t_issue[slot];
            samples[res->nsamples++] = lat > UINT32_MAX ? UINT32_MAX
                                                        : (uint32_t)lat;
            counted++;
        }
    }
    return counted;
}

/* One worker process: its own ps_client, a warm-up that touches every key
 * set it will use (so sparse rows exist before timing), then the timed
 * phase started by psbench for all workers at once. */
static int worker_main(const cell *c, int w, const char *spec)
{
    if (c->pinned)
        pin_tid(0, 0);
    ps_options o;
    ps_options_init(&o);
    /* No request here legitimately takes seconds: fail a stuck cell fast. */
    o.request_timeout_ms = opt_timeout_ms;
    o.max_retries = 0;
    wctx x = { .c = c };
    if (ps_open(&x.cl, spec, &o))
        return 2;
    const load *l = &loads[c->load];
    const tabdef *T = &tables[l->tab];
    ps_table_info info;
    x.table = ps_table(x.cl, T->name, &info);
    if (x.table < 0)
        return 3;
    x.n = l->nkeys;
    x.rowf = x.n * T->dim;
    x.npool = x.n >= 65536 ? 4 : 16;
    x.keys = malloc((size_t)x.npool * x.n * sizeof *x.keys);
    x.firsts = malloc((size_t)x.npool * sizeof *x.firsts);
    x.vals = malloc(x.rowf * sizeof *x.vals);
    if (c->op != OP_PUSH && c->op != OP_PUSH_RANGE)
        x.outs = malloc((size_t)c->window * x.rowf * sizeof *x.outs);
    x.ts = calloc((size_t)c->window, sizeof *x.ts);
    x.t_issue = calloc((size_t)c->window, sizeof *x.t_issue);
    x.t_done = calloc((size_t)c->window, sizeof *x.t_done);
    if (!x.keys || !x.firsts || !x.vals || !x.ts || !x.t_issue || !x.t_done ||
        (c->op != OP_PUSH && c->op != OP_PUSH_RANGE && !x.outs))
        return 4;
    for (size_t i = 0; i < x.rowf; i++)
        x.vals[i] = 1e-7f;
    for (int j = 0; j < x.npool; j++) {
        uint64_t *k = x.keys + (size_t)j * x.n;
        if (T->dense) {
            uint64_t span = T->rows - x.n + 1;
            x.firsts[j] = ((uint64_t)(w * x.npool + j) * x.n * 7) % span;
            for (size_t i = 0; i < x.n; i++)
                k[i] = x.firsts[j] + i;
        } else {
            /* psw_mix64 is a bijection: distinct inputs, distinct keys,
             * spread over every shard. */
            for (size_t i = 0; i < x.n; i++)
                k[i] = psw_mix64(((uint64_t)l->tab << 56) | ((uint64_t)w << 48) |
                             ((uint64_t)j * x.n + i));
        }
    }
    run_phase(&x, now_ns() + (uint64_t)opt_warm_ms * 1000000u, x.npool, NULL,
              NULL);
    atomic_fetch_add(&shm->ready, 1);
    while (!atomic_load(&shm->go))
        sleep_us(100);
    wres *r = &shm->w[w];
    ps_stats_reset(x.cl);
    r->count = run_phase(&x, shm->t_end, 0, r, shm->samples[w]);
    r->errors = x.errors;
    /* The client's own view of the same requests (issue: the Customer
     * measures itself), to set next to psbench's outside view. */
    ps_stats_t st;
    static const int kind[] = { [OP_PUSH] = PS_STAT_PUSH,
                                [OP_PULL] = PS_STAT_PULL,
                                [OP_PUSHPULL] = PS_STAT_PUSHPULL,
                                [OP_PUSH_RANGE] = PS_STAT_PUSH_RANGE,
                                [OP_PULL_RANGE] = PS_STAT_PULL_RANGE };
    if (ps_stats(x.cl, &st) == PS_OK)
        r->client_p50_us = st.op[kind[c->op]].p50_us;
    ps_close(x.cl);
    return x.errors ? 5 : 0;
}

static uint32_t *merged;

/* Runs one cell: forks its workers, starts them together, collects. */
static void run_cell(cell *c, const test_cluster *cl)
{
    pid_t pid[MAX_WORKERS];
    memset(shm, 0, offsetof(bench_shm, samples));
    if (c->pinned)
        for (int i = 0; i < cl->n; i++)
            pin_process(cl->pid[i], 0);
    for (int w = 0; w < c->workers; w++) {
        pid[w] = fork_child();
        if (pid[w] == 0)
            _exit(worker_main(c, w, cl->spec));
        if (pid[w] < 0) {
            perror("psbench: fork");
            exit(1);
        }
    }
    uint64_t deadline = now_ns() + 30000000000ull;
    int lost = 0;
    while (atomic_load(&shm->ready) < c->workers && !lost) {
        for (int w = 0; w < c->workers; w++)
            if (waitpid(pid[w], &shm->w[w].status, WNOHANG) == pid[w]) {
                fprintf(stderr, "psbench: worker %d ended before the start "
                        "(status %d)\n", w, shm->w[w].status);
                pid[w] = -1;
                lost = 1;
            }
        if (now_ns() > deadline) {
            fprintf(stderr, "psbench: workers not ready after 30 s\n");
            lost = 1;
        }
        sleep_us(500);
    }
    shm->t_go = now_ns();
    shm->t_end = shm->t_go + (uint64_t)opt_ms * 1000000u;
    atomic_store(&shm->go, 1);
    size_t n = 0;
    for (int w = 0; w < c->workers; w++) {
        int st = pid[w] > 0 ? reap_within(pid[w], opt_ms + 30000) : 1;
        if (st) {
            if (!lost)
                fprintf(stderr, "psbench: worker %d of %s %s failed (%d)\n", w,
                        op_name[c->op], loads[c->load].label, st);
            c->failed = 1;
        }
        c->count += shm->w[w].count;
        c->errors += shm->w[w].errors;
        memcpy(merged + n, shm->samples[w],
               shm->w[w].nsamples * sizeof *merged);
        n += shm->w[w].nsamples;
    }
    if (c->pinned)
        for (int i = 0; i < cl->n; i++)
            pin_process(cl->pid[i], -1);
    qsort(merged, n, sizeof *merged, cmp_u32);
    c->ran = 1;
    c->secs = (double)opt_ms / 1e3;
    c->reqs = (double)c->count / c->secs;
    c->gbps = c->reqs * (double)payload_bytes(c) / 1e9;
    c->mkeys = c->reqs * (double)loads[c->load].nkeys / 1e6;
    c->p50 = pct(merged, n, 0.5) / 1e3;
    c->p99 = pct(merged, n, 0.99) / 1e3;
    c->client_p50 = shm->w[0].client_p50_us;
    if (c->failed || c->errors)
        failures++;
}

static double x_stream(const cell *c)
{
    return c->gbps / base.stream_gbps[c->pinned];
}

static void print_cell_header(void)
{
    printf("%-10s %-8s %4s %2s %2s %-3s %10s %8s %9s %9s %9s %6s %7s %7s "
           "%9s\n", "op", "payload", "infl", "wk", "nd", "pin", "req/s",
           "GB/s", "Mkeys/s", "p50 us", "p99 us", "xTCP", "xRTTpin",
           "xRTTunp", "client p50");
}

static void print_cell(const cell *c)
{
    printf("%-10s %-8s %4d %2d %2d %-3s %10.0f %8.3f %9.2f %9.1f %9.1f "
           "%6.2f %7.1f %7.2f %9.1f%s\n",
           op_name[c->op], loads[c->load].label, c->window, c->workers,
           c->nodes, c->pinned ? "yes" : "no", c->reqs, c->gbps, c->mkeys,
           c->p50, c->p99, x_stream(c), c->p50 / base.rtt_p50_us[PINNED],
           c->p50 / base.rtt_p50_us[UNPINNED], c->client_p50,
           c->failed ? "  FAILED" : c->errors ? "  ERRORS" : "");
    fflush(stdout);
}

static void add_cell(int l, op_kind op, int window, int workers, int nodes,
                     int pinned)
{
    if (ncells == MAX_CELLS || (opt_f_op && strcmp(opt_f_op, op_name[op])) ||
        (opt_f_payload && strcmp(opt_f_payload, loads[l].label)) ||
        (opt_f_inflight && opt_f_inflight != window) ||
        (opt_f_workers && opt_f_workers != workers) ||
        (opt_f_nodes && opt_f_nodes != nodes))
        return;
    cell *c = &cells[ncells++];
    memset(c, 0, sizeof *c);
    c->load = l;
    c->op = op;
    c->window = window;
    c->workers = workers;
    c->nodes = nodes;
    c->pinned = pinned;
}

static const char *const skipped_text[] = {
    "16 MiB x 64 in flight (1 GiB in flight, over the client's 256 MiB "
    "max_inflight_bytes; 1 in flight already streams)",
    "4 and 8 workers: range ops (same server path as keyed contiguous rows; "
    "measured with 1 worker), 16 MiB, and 1 MiB or 65536 keys x 64 in "
    "flight (hundreds of MiB queued)",
    "pinned placement: only 1 node, 1 worker, 1 in flight, 4 B and 4 KiB, "
    "push/pull/push_range/pull_range",
    "extra 8-in-flight cells (1 node, 1 worker, 4 KiB and 64 KiB) to match "
    "the ps-lite table",
};

static void build_matrix(void)
{
    static const int wks[] = { 1, 4, 8 };
    static const int wins[] = { 1, 64 };
    for (int nodes = 1; nodes <= 2; nodes++) {
        if (nodes == 1) {
            for (int l = L_4B; l <= L_4K; l++)
                for (int op = 0; op < NOPS; op++)
                    if (op != OP_PUSHPULL)
                        add_cell(l, (op_kind)op, 1, 1, 1, 1);
            for (int l = L_4K; l <= L_64K; l++)
                for (int op = OP_PUSH; op <= OP_PUSHPULL; op++)
                    add_cell(l, (op_kind)op, 8, 1, 1, 0);
        }
        for (int wi = 0; wi < 3; wi++)
            for (int l = 0; l < NLOADS; l++)
                for (int op = 0; op < NOPS; op++)
                    for (int k = 0; k < 2; k++) {
                        int wk = wks[wi], win = wins[k];
                        int dense = tables[loads[l].tab].dense;
                        if (op >= OP_PUSH_RANGE && !dense)
                            continue;
                        if (l == L_16M && win > 1)
                            continue;
                        if (wk > 1 && (op >= OP_PUSH_RANGE || l == L_16M ||
                                       ((l == L_1M || l == L_S1) && win > 1)))
                            continue;
                        add_cell(l, (op_kind)op, win, wk, nodes, 0);
                    }
    }
}

/* The cell matching a description, or NULL. */
static cell *find(int l, op_kind op, int window, int workers, int nodes,
                  int pinned)
{
    for (int i = 0; i < ncells; i++) {
        cell *c = &cells[i];
        if (c->ran && c->load == l && c->op == op && c->window == window &&
            c->workers == workers && c->nodes == nodes && c->pinned == pinned)
            return c;
    }
    return NULL;
}

static void run_matrix(void)
{
    build_matrix();
    printf("== matrix: %d cells, %d ms each after a %d ms warm-up ==\n", ncells,
           opt_ms, opt_warm_ms);
    printf("skipped: \n");
    for (size_t i = 0; i < sizeof skipped_text / sizeof *skipped_text; i++)
        printf("  - %s\n", skipped_text[i]);
    shm = shared_alloc(sizeof *shm);
    merged = malloc((size_t)MAX_WORKERS * MAX_SAMPLES * sizeof *merged);
    if (!merged)
        exit(1);
    for (int nodes = 1; nodes <= 2; nodes++) {
        test_cluster cl;
        if (bench_start(&cl, nodes, bench_tables)) {
            failures++;
            continue;
        }
        printf("\n-- %d node%s --\n", nodes, nodes > 1 ? "s" : "");
        print_cell_header();
        for (int i = 0; i < ncells; i++) {
            if (cells[i].nodes != nodes)
                continue;
            for (int k = 0; k < cl.n; k++)
                if (!cluster_alive(&cl, k)) {
                    char *log = cluster_log(&cl, k);
                    fprintf(stderr, "psbench: psd node %d died; its log:\n%s\n",
                            k, log ? log : "");
                    free(log);
                    failures++;
                    bench_stop(&cl);
                    return;
                }
            run_cell(&cells[i], &cl);
            print_cell(&cells[i]);
            /* A failed cell can leave psd holding stuck connections: give
             * the cells after it a fresh cluster. */
            if (cells[i].failed || cells[i].errors) {
                if (bench_stop(&cl) || bench_start(&cl, nodes, bench_tables)) {
                    failures++;
                    return;
                }
            }
        }
        if (bench_stop(&cl))
            failures++;
    }
}

/* ---- memory --------------------------------------------------------- */

typedef struct memrow {
    int dense;
    const char *updater;
    unsigned state;            /* state floats per weight float */
    unsigned step;             /* bytes of step counter per row */
    uint64_t rows;
    uint32_t dim;
    long rss_empty, rss_before, rss_after;   /* KiB */
    double secs;
    int failed;
} memrow;

static memrow mems[16];
static int nmems;

static double mem_bytes(const memrow *m)
{
    return (double)(m->rss_after - m->rss_empty) * 1024.0;
}
static double mem_raw(const memrow *m)
{
    return (double)m->rows * m->dim * 4.0;
}
/* What the table cannot do without: key (sparse) + row + optimizer state
 * + step counter. */
static double mem_need(const memrow *m)
{
    return (double)m->rows * ((m->dense ? 0 : 8) +
                              m->dim * 4.0 * (1 + m->state) + m->step);
}

/* Fills every row with pushes of up to 65536 rows, 4 in flight. */
static int mem_fill(const char *spec, const memrow *m)
{
    ps_client *c;
    if (ps_open(&c, spec, NULL))
        return 2;
    int t = ps_table(c, "m", NULL);
    size_t chunk = 65536, W = 4;
    float *vals = malloc(chunk * m->dim * sizeof *vals);
    uint64_t *keys = malloc(W * chunk * sizeof *keys);
    ps_ts ts[4] = { 0 };
    if (t < 0 || !vals || !keys)
        return 3;
    for (size_t i = 0; i < chunk * m->dim; i++)
        vals[i] = 0.001f;
    int bad = 0;
    size_t k = 0;
    for (uint64_t first = 0; first < m->rows; first += chunk, k++) {
        uint64_t n = m->rows - first < chunk ? m->rows - first : chunk;
        size_t s = k % W;
        if (ts[s] > 0 && ps_wait(c, ts[s]))
            bad = 1;
        if (m->dense) {
            ts[s] = ps_push_range(c, t, first, n, vals, NULL, NULL);
        } else {
            for (uint64_t i = 0; i < n; i++)
                keys[s * chunk + i] = psw_mix64(first + i);
            ts[s] = ps_push(c, t, keys + s * chunk, n, vals, NULL, NULL);
        }
        if (ts[s] < 0)
            bad = 1;
    }
    if (ps_wait_all(c))
        bad = 1;
    if (bad)
        fprintf(stderr, "psbench: memory fill: %s\n", ps_last_error(c));
    ps_close(c);
    return bad ? 4 : 0;
}

static void mem_one(memrow *m, long rss_empty)
{
    char tab[256];
    if (m->dense)
        snprintf(tab, sizeof tab, "[table.m]\nkind = dense\nrows = %llu\n"
                 "dim = %u\nupdater = %s\n", (unsigned long long)m->rows,
                 m->dim, m->updater);
    else
        snprintf(tab, sizeof tab, "[table.m]\nkind = sparse\ndim = %u\n"
                 "updater = %s\n", m->dim, m->updater);
    test_cluster cl;
    uint64_t t0 = now_ns();
    m->rss_empty = rss_empty;
    if (bench_start(&cl, 1, tab)) {
        m->failed = 1;
        failures++;
        return;
    }
    m->rss_before = rss_kib(cl.pid[0]);
    pid_t pid = fork_child();
    if (pid == 0)
        _exit(mem_fill(cl.spec, m));
    int st = reap_within(pid, 600000);
    /* Let psd close the filler's connection and free its buffers, so the
     * figure is what the table keeps: wait for two equal readings. */
    long prev = -2;
    for (int i = 0; i < 20; i++) {
        sleep_us(50000);
        m->rss_after = rss_kib(cl.pid[0]);
        if (m->rss_after == prev)
            break;
        prev = m->rss_after;
    }
    if (st) {
        fprintf(stderr, "psbench: memory fill of %s %s failed (%d)\n",
                m->dense ? "dense" : "sparse", m->updater, st);
        m->failed = 1;
        failures++;
    }
    if (bench_stop(&cl))
        failures++;
    m->secs = (double)(now_ns() - t0) / 1e9;
}

static void run_memory(void)
{
    static const struct { const char *name; unsigned state, step; } upd[] = {
        { "sum", 0, 0 }, { "adagrad", 1, 0 }, { "adam", 2, 4 } };
    test_cluster cl;
    long empty = -1;
    if (!bench_start(&cl, 1, "[table.m]\nkind = dense\nrows = 1\ndim = 16\n")) {
        sleep_us(50000);
        empty = rss_kib(cl.pid[0]);
        bench_stop(&cl);
    }
    printf("\n== memory: psd RSS (VmRSS) after filling every row with pushes"
           " ==\n");
    printf("empty psd (one 1-row table): %ld KiB\n", empty);
    printf("%-6s %-7s %9s %3s %9s %9s %9s %9s %7s %7s %5s\n", "table",
           "updater", "rows", "dim", "start MiB", "fill MiB", "total MiB",
           "B/row", "xfloats", "xneeded", "secs");
    for (int d = 1; d >= 0; d--)
        for (int u = 0; u < 3; u++)
            for (int e = 6; e <= 7; e++) {
                memrow *m = &mems[nmems++];
                memset(m, 0, sizeof *m);
                m->dense = d;
                m->updater = upd[u].name;
                m->state = upd[u].state;
                m->step = upd[u].step;
                m->rows = e == 6 ? 1000000 : 10000000;
                m->dim = (!d && e == 7) ? (uint32_t)opt_mem_sparse_dim_big : 16;
                mem_one(m, empty);
                printf("%-6s %-7s %9llu %3u %9.1f %9.1f %9.1f %9.1f %7.2f "
                       "%7.2f %5.1f%s\n",
                       d ? "dense" : "sparse", m->updater,
                       (unsigned long long)m->rows, m->dim,
                       (m->rss_before - empty) / 1024.0,
                       (m->rss_after - m->rss_before) / 1024.0,
                       mem_bytes(m) / 1048576.0, mem_bytes(m) / (double)m->rows,
                       mem_bytes(m) / mem_raw(m), mem_bytes(m) / mem_need(m),
                       m->secs, m->failed ? "  FAILED" : "");
                fflush(stdout);
            }
    printf("start = RSS right after psd started minus the empty psd; fill = "
           "growth while pushing;\ntotal = after filling minus the empty psd."
           " xfloats = total / (rows*dim*4);\nxneeded = total / (rows * "
           "(key 8 if sparse + dim*4*(1+state) + step 4 if adam)),\nstate = "
           "0 sum, 1 adagrad, 2 adam.\n");
}

/* ---- targets and summary -------------------------------------------- */

typedef struct target {
    char what[80];
    char figure[64];
    char goal[40];
    char pslite[24];
    double value, limit;
    int higher_better, have;
} target;

static target targets[40];
static int ntargets;

static target *add_target(const char *what, double value, double limit,
                          int higher_better, const char *pslite)
{
    target *t = &targets[ntargets++];
    memset(t, 0, sizeof *t);
    snprintf(t->what, sizeof t->what, "%s", what);
    snprintf(t->pslite, sizeof t->pslite, "%s", pslite);
    t->value = value;
    t->limit = limit;
    t->higher_better = higher_better;
    t->have = !isnan(value);
    return t;
}

static int pass(const target *t)
{
    return t->have && (t->higher_better ? t->value >= t->limit
                                        : t->value <= t->limit);
}

static void targets_build(void)
{
    static const char *const pl16[] = { "0.97 GB/s", "1.34 GB/s", "0.44 GB/s" };
    for (int op = OP_PUSH; op <= OP_PULL_RANGE; op++) {
        cell *c = find(L_16M, (op_kind)op, 1, 1, 1, 0);
        double lim = op == OP_PUSHPULL ? 0.5 : 0.9;
        char w[80];
        snprintf(w, sizeof w, "16 MiB %s, 1 in flight", op_name[op]);
        target *t = add_target(w, c ? x_stream(c) : NAN, lim, 1,
                               op <= OP_PUSHPULL ? pl16[op]
                               : pl16[op - OP_PUSH_RANGE]);
        snprintf(t->figure, sizeof t->figure, "%.3f GB/s = %.2fx TCP",
                 c ? c->gbps : NAN, t->value);
        snprintf(t->goal, sizeof t->goal, ">= %.1fx TCP stream", lim);
    }
    static const char *const pl4k[] = { "200 us", "160 us" };
    for (int op = OP_PUSH; op <= OP_PULL_RANGE; op++) {
        if (op == OP_PUSHPULL)
            continue;
        for (int pin = 1; pin >= 0; pin--) {
            cell *c = find(L_4K, (op_kind)op, 1, 1, 1, pin);
            double lim = pin ? 3.0 : 1.5;
            char w[80];
            snprintf(w, sizeof w, "4 KiB %s, 1 in flight, %s", op_name[op],
                     pin ? "pinned" : "unpinned");
            target *t = add_target(w, c ? c->p50 / base.rtt_p50_us[pin] : NAN,
                                   lim, 0,
                                   pin ? "~7x" : pl4k[op == OP_PULL ||
                                                      op == OP_PULL_RANGE]);
            if (pin)
                snprintf(t->figure, sizeof t->figure, "p50 %.1f us = %.1fx RTT",
                         c ? c->p50 : NAN, t->value);
            else
                snprintf(t->figure, sizeof t->figure, "p50 %.1f us = %.1fx "
                         "(%.1fx split)", c ? c->p50 : NAN, t->value,
                         c ? c->p50 / base.rtt_p50_us[SPLIT] : NAN);
            snprintf(t->goal, sizeof t->goal, "<= %.1fx RTT %s", lim,
                     pin ? "pinned" : "unpinned");
        }
    }
    for (int op = OP_PULL; op <= OP_PULL_RANGE; op += OP_PULL_RANGE - OP_PULL) {
        cell *c = find(L_4K, (op_kind)op, 64, 1, 1, 0);
        char w[80];
        snprintf(w, sizeof w, "4 KiB %s, 64 in flight", op_name[op]);
        target *t = add_target(w, c ? c->reqs : NAN, 150000, 1,
                               "21200/s @8");
        snprintf(t->figure, sizeof t->figure, "%.0f req/s", t->value);
        snprintf(t->goal, sizeof t->goal, ">= 150000 req/s");
    }
    {
        cell *c = find(L_S8, OP_PULL, 64, 1, 1, 0);
        target *t = add_target("sparse pull 1000 keys x dim 8, 64 in flight",
                               c ? c->mkeys : NAN, 20, 1, "13-50 M");
        snprintf(t->figure, sizeof t->figure, "%.1f M keys/s", t->value);
        snprintf(t->goal, sizeof t->goal, ">= 20 M keys/s");
    }
    for (int k = 1; k <= 64; k += 63) {
        cell *c = find(L_S1, OP_PULL, k, 1, 1, 0);
        char w[80];
        snprintf(w, sizeof w, "sparse pull 65536 keys x dim 1, %d in flight", k);
        target *t = add_target(w, c ? c->mkeys : NAN, 60, 1, "35 M");
        snprintf(t->figure, sizeof t->figure, "%.1f M keys/s", t->value);
        snprintf(t->goal, sizeof t->goal, ">= 60 M keys/s");
    }
    for (int i = 0; i < nmems; i++) {
        memrow *m = &mems[i];
        char w[80];
        snprintf(w, sizeof w, "memory %s %s %llu rows x %u",
                 m->dense ? "dense" : "sparse", m->updater,
                 (unsigned long long)m->rows, m->dim);
        double lim = m->dense ? 1.05 : 2.0;
        target *t = add_target(w, m->failed ? NAN : mem_bytes(m) / mem_need(m),
                               lim, 0, "");
        snprintf(t->figure, sizeof t->figure, "%.1f B/row = %.2fx needed",
                 mem_bytes(m) / (double)m->rows, t->value);
        snprintf(t->goal, sizeof t->goal, "<= %.2fx needed", lim);
    }
}

/* The cells the issue compares with ps-lite, side by side. */
static void print_pslite(void)
{
    static const struct { int l; op_kind op; int win; const char *ps; } rows[] = {
        { L_4B, OP_PUSH, 64, "96000 req/s" },
        { L_4B, OP_PULL, 64, "84000 req/s" },
        { L_4B, OP_PUSHPULL, 64, "81000 req/s" },
        { L_4K, OP_PUSH, 1, "4500 req/s" },
        { L_4K, OP_PULL, 1, "5400 req/s" },
        { L_4K, OP_PUSHPULL, 1, "4100 req/s" },
        { L_4K, OP_PUSH, 8, "19800 req/s" },
        { L_4K, OP_PULL, 8, "21200 req/s" },
        { L_4K, OP_PUSHPULL, 8, "23400 req/s" },
        { L_64K, OP_PUSH, 8, "1.04 GB/s" },
        { L_64K, OP_PULL, 8, "1.01 GB/s" },
        { L_64K, OP_PUSHPULL, 8, "0.77 GB/s" },
        { L_1M, OP_PUSH, 1, "1.58 GB/s" },
        { L_1M, OP_PULL, 1, "1.63 GB/s" },
        { L_1M, OP_PUSHPULL, 1, "1.04 GB/s" },
        { L_16M, OP_PUSH, 1, "0.97 GB/s" },
        { L_16M, OP_PULL, 1, "1.34 GB/s" },
        { L_16M, OP_PUSHPULL, 1, "0.44 GB/s" },
        { L_S1, OP_PUSH, 1, "45 M keys/s" },
        { L_S1, OP_PULL, 1, "35 M keys/s" },
        { L_S1, OP_PUSHPULL, 1, "24 M keys/s" },
    };
    printf("\n== psd vs ps-lite (issue 3's table; 1 node, 1 worker, keyed ops)"
           " ==\n");
    printf("%-9s %-9s %4s %12s %8s %9s %9s   %s\n", "payload", "op", "infl",
           "req/s", "GB/s", "Mkeys/s", "p50 us", "ps-lite");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        cell *c = find(rows[i].l, rows[i].op, rows[i].win, 1, 1, 0);
        if (!c)
            continue;
        printf("%-9s %-9s %4d %12.0f %8.3f %9.2f %9.1f   %s\n",
               loads[rows[i].l].label, op_name[rows[i].op], rows[i].win,
               c->reqs, c->gbps, c->mkeys, c->p50, rows[i].ps);
    }
}

static void print_summary(void)
{
    printf("\n== SUMMARY ==\n");
    printf("baselines: memcpy %.2f GB/s (pinned %.2f); TCP stream %.2f GB/s "
           "(pinned %.2f, split %.2f);\n           64 B ping-pong RTT p50 "
           "%.1f us unpinned, %.1f us pinned to one core, %.1f us split\n",
           base.memcpy_gbps[0], base.memcpy_gbps[1], base.stream_gbps[0],
           base.stream_gbps[1], base.stream_gbps[2], base.rtt_p50_us[0],
           base.rtt_p50_us[1], base.rtt_p50_us[2]);
    if (opt_matrix)
        print_pslite();
    printf("\n== issue 3 targets (informational: a miss never fails the "
           "build) ==\n");
    int met = 0, have = 0;
    for (int i = 0; i < ntargets; i++) {
        target *t = &targets[i];
        have += t->have;
        met += pass(t);
        printf("%-45s %-31s %-21s %-4s%s%s\n", t->what, t->figure, t->goal,
               !t->have ? "n/a" : pass(t) ? "PASS" : "MISS",
               t->pslite[0] ? "  ps-lite " : "", t->pslite);
    }
    printf("targets met: %d of %d\n", met, have);
    if (failures)
        printf("FAILURES: %d (crashes or request errors; see stderr)\n",
               failures);
}

/* ---- CSV and JSON --------------------------------------------------- */

/* A CSV number: empty when there is no figure. */
static void cnum(FILE *f, double v, int prec)
{
    if (isnan(v) || isinf(v))
        fputc(',', f);
    else
        fprintf(f, ",%.*f", prec, v);
}

static void write_csv(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        failures++;
        return;
    }
    fprintf(f, "kind,name,op,table,payload_bytes,keys_per_req,inflight,"
            "workers,nodes,pinned,requests,req_per_s,gb_per_s,keys_per_s,"
            "p50_us,p99_us,x_tcp_stream,x_rtt_pinned,x_rtt_unpinned,errors,"
            "mem_rows,mem_dim,updater,rss_empty_kib,rss_before_kib,"
            "rss_after_kib,bytes_per_row,x_floats,x_needed\n");
    static const char *const bn[] = { "memcpy", "tcp_stream", "pingpong" };
    for (int p = 0; p < NPLACE; p++)
        for (int b = p == SPLIT; b < 3; b++) {
            fprintf(f, "baseline,%s,,,,,,,,%d,,", bn[b], p);
            cnum(f, b == 0 ? base.memcpy_gbps[p]
                    : b == 1 ? base.stream_gbps[p] : NAN, 4);
            fputc(',', f);
            cnum(f, b == 2 ? base.rtt_p50_us[p] : NAN, 2);
            cnum(f, b == 2 ? base.rtt_p99_us[p] : NAN, 2);
            fprintf(f, ",,,,,,,,,,,,,\n");
        }
    for (int i = 0; i < ncells; i++) {
        const cell *c = &cells[i];
        if (!c->ran)
            continue;
        fprintf(f, "cell,%s,%s,%s,%zu,%zu,%d,%d,%d,%d,%ld",
                loads[c->load].label, op_name[c->op],
                tables[loads[c->load].tab].name, payload_bytes(c),
                loads[c->load].nkeys, c->window, c->workers, c->nodes,
                c->pinned, c->count);
        cnum(f, c->reqs, 1);
        cnum(f, c->gbps, 4);
        cnum(f, c->mkeys * 1e6, 0);
        cnum(f, c->p50, 2);
        cnum(f, c->p99, 2);
        cnum(f, x_stream(c), 4);
        cnum(f, c->p50 / base.rtt_p50_us[PINNED], 3);
        cnum(f, c->p50 / base.rtt_p50_us[UNPINNED], 3);
        fprintf(f, ",%ld,,,,,,,,,\n", c->errors);
    }
    for (int i = 0; i < nmems; i++) {
        const memrow *m = &mems[i];
        fprintf(f, "memory,%s,,,,,,,,,,,,,,,,,,,%llu,%u,%s,%ld,%ld,%ld",
                m->dense ? "dense" : "sparse", (unsigned long long)m->rows,
                m->dim, m->updater, m->rss_empty, m->rss_before, m->rss_after);
        cnum(f, mem_bytes(m) / (double)m->rows, 2);
        cnum(f, mem_bytes(m) / mem_raw(m), 4);
        cnum(f, mem_bytes(m) / mem_need(m), 4);
        fputc('\n', f);
    }
    fclose(f);
}

/* JSON has no NaN: a missing figure is null. */
static void jnum(FILE *f, const char *key, double v, const char *sep)
{
    if (isnan(v) || isinf(v))
        fprintf(f, "\"%s\": null%s", key, sep);
    else
        fprintf(f, "\"%s\": %.6g%s", key, v, sep);
}

static void write_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        failures++;
        return;
    }
    fprintf(f, "{\n  \"cpus\": %d, \"cell_ms\": %d, \"warmup_ms\": %d,\n",
            ncpu, opt_ms, opt_warm_ms);
    fprintf(f, "  \"baselines\": {");
    for (int p = 0; p < NPLACE; p++) {
        fprintf(f, "\"%s\": {", place_name[p]);
        if (p != SPLIT)
            jnum(f, "memcpy_gb_per_s", base.memcpy_gbps[p], ", ");
        jnum(f, "tcp_stream_gb_per_s", base.stream_gbps[p], ", ");
        jnum(f, "pingpong_p50_us", base.rtt_p50_us[p], ", ");
        jnum(f, "pingpong_p99_us", base.rtt_p99_us[p], "");
        fprintf(f, "}%s", p == NPLACE - 1 ? "" : ", ");
    }
    fprintf(f, "},\n  \"skipped\": [");
    for (size_t i = 0; i < sizeof skipped_text / sizeof *skipped_text; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", skipped_text[i]);
    fprintf(f, "],\n  \"cells\": [\n");
    int first = 1;
    for (int i = 0; i < ncells; i++) {
        const cell *c = &cells[i];
        if (!c->ran)
            continue;
        fprintf(f, "%s    {\"op\": \"%s\", \"payload\": \"%s\", \"table\": "
                "\"%s\", \"payload_bytes\": %zu, \"keys_per_req\": %zu, "
                "\"inflight\": %d, \"workers\": %d, \"nodes\": %d, "
                "\"pinned\": %s, \"requests\": %ld, \"errors\": %ld, ",
                first ? "" : ",\n", op_name[c->op], loads[c->load].label,
                tables[loads[c->load].tab].name, payload_bytes(c),
                loads[c->load].nkeys, c->window, c->workers, c->nodes,
                c->pinned ? "true" : "false", c->count, c->errors);
        jnum(f, "req_per_s", c->reqs, ", ");
        jnum(f, "gb_per_s", c->gbps, ", ");
        jnum(f, "keys_per_s", c->mkeys * 1e6, ", ");
        jnum(f, "p50_us", c->p50, ", ");
        jnum(f, "p99_us", c->p99, ", ");
        jnum(f, "x_tcp_stream", x_stream(c), ", ");
        jnum(f, "x_rtt_pinned", c->p50 / base.rtt_p50_us[PINNED], ", ");
        jnum(f, "x_rtt_unpinned", c->p50 / base.rtt_p50_us[UNPINNED], "");
        fprintf(f, "}");
        first = 0;
    }
    fprintf(f, "\n  ],\n  \"memory\": [\n");
    for (int i = 0; i < nmems; i++) {
        const memrow *m = &mems[i];
        fprintf(f, "%s    {\"table\": \"%s\", \"updater\": \"%s\", \"rows\": "
                "%llu, \"dim\": %u, \"rss_empty_kib\": %ld, "
                "\"rss_before_kib\": %ld, \"rss_after_kib\": %ld, ",
                i ? ",\n" : "", m->dense ? "dense" : "sparse", m->updater,
                (unsigned long long)m->rows, m->dim, m->rss_empty,
                m->rss_before, m->rss_after);
        jnum(f, "bytes_per_row", mem_bytes(m) / (double)m->rows, ", ");
        jnum(f, "x_floats", mem_bytes(m) / mem_raw(m), ", ");
        jnum(f, "x_needed", mem_bytes(m) / mem_need(m), "");
        fprintf(f, "}");
    }
    fprintf(f, "\n  ],\n  \"targets\": [\n");
    for (int i = 0; i < ntargets; i++) {
        const target *t = &targets[i];
        fprintf(f, "%s    {\"what\": \"%s\", \"figure\": \"%s\", \"goal\": "
                "\"%s\", ", i ? ",\n" : "", t->what, t->figure, t->goal);
        jnum(f, "value", t->have ? t->value : NAN, ", ");
        jnum(f, "limit", t->limit, ", ");
        fprintf(f, "\"verdict\": \"%s\"}",
                !t->have ? "n/a" : pass(t) ? "PASS" : "MISS");
    }
    fprintf(f, "\n  ],\n  \"failures\": %d\n}\n", failures);
    fclose(f);
}

/* ---- main ----------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: psbench [--psd PATH] [--out DIR] [--ms N] [--warm-ms N]\n"
            "               [--timeout-ms N]\n"
            "               [--no-baselines] [--no-matrix] [--no-memory]\n"
            "               [--sparse-dim-1e7 D] [--op OP] [--payload LABEL]\n"
            "               [--inflight N] [--workers N] [--nodes N]\n"
            "The filters (--op ... --nodes) keep only the matching cells.\n"
            "--server-conf TEXT adds lines to the [server] section of every\n"
            "generated ini (for example \"max_output = 1G\").\n"
            "Starts psd processes itself; writes DIR/bench.csv and "
            "DIR/bench.json.\n");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--psd") && i + 1 < argc)
            opt_psd = argv[++i];
        else if (!strcmp(a, "--out") && i + 1 < argc)
            opt_out = argv[++i];
        else if (!strcmp(a, "--ms") && i + 1 < argc)
            opt_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--warm-ms") && i + 1 < argc)
            opt_warm_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--timeout-ms") && i + 1 < argc)
            opt_timeout_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--sparse-dim-1e7") && i + 1 < argc)
            opt_mem_sparse_dim_big = atoi(argv[++i]);
        else if (!strcmp(a, "--op") && i + 1 < argc)
            opt_f_op = argv[++i];
        else if (!strcmp(a, "--payload") && i + 1 < argc)
            opt_f_payload = argv[++i];
        else if (!strcmp(a, "--inflight") && i + 1 < argc)
            opt_f_inflight = atoi(argv[++i]);
        else if (!strcmp(a, "--workers") && i + 1 < argc)
            opt_f_workers = atoi(argv[++i]);
        else if (!strcmp(a, "--nodes") && i + 1 < argc)
            opt_f_nodes = atoi(argv[++i]);
        else if (!strcmp(a, "--no-baselines"))
            opt_baselines = 0;
        else if (!strcmp(a, "--server-conf") && i + 1 < argc)
            opt_server_conf = argv[++i];
        else if (!strcmp(a, "--no-matrix"))
            opt_matrix = 0;
        else if (!strcmp(a, "--no-memory"))
            opt_memory = 0;
        else {
            usage();
            return 2;
        }
    }
    if (opt_ms < 10 || opt_warm_ms < 0 || opt_mem_sparse_dim_big < 1) {
        usage();
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1 || ncpu > CPU_SETSIZE)
        ncpu = 1;
    pin_tid(0, -1);
    if (access(opt_psd, X_OK)) {
        fprintf(stderr, "psbench: %s: %s\n", opt_psd, strerror(errno));
        return 1;
    }
    setenv("PSD_BIN", opt_psd, 1);   /* the psd tests/cluster.c starts */
    uint64_t t0 = now_ns();
    printf("psbench: %d CPUs, psd %s\n\n", ncpu, opt_psd);
    if (opt_baselines)
        measure_baselines();
    if (opt_matrix)
        run_matrix();
    if (opt_memory)
        run_memory();
    targets_build();
    print_summary();
    char path[512];
    snprintf(path, sizeof path, "%s/bench.csv", opt_out);
    write_csv(path);
    snprintf(path, sizeof path, "%s/bench.json", opt_out);
    write_json(path);
    printf("results: %s/bench.csv, %s/bench.json; %.0f s in all\n", opt_out,
           opt_out, (double)(now_ns() - t0) / 1e9);
    return failures ? 1 : 0;
}
