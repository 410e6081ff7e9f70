/* psbench: throughput, latency and memory figures for psd, measured against
 * real psd processes it starts, each figure also given as a ratio to
 * baselines measured in the same run (memcpy, raw TCP over loopback) and,
 * with --pslite, to ps-lite measured on the same cells in the same run.
 * See tests/bench/README.md for what every figure and ratio means. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
static int opt_pairs = 1;         /* the side-by-side phase */
static const char *opt_pslite;    /* ps-lite's psl_bench, or NULL */
static int opt_pair_ms = 1000, opt_pair_warm_ms = 250, opt_rounds = 1;
static int opt_mem_sparse_dim_big = 16;   /* sparse dim at 10^7 rows */
static const char *opt_f_op, *opt_f_payload;
static int opt_f_inflight, opt_f_workers, opt_f_nodes;   /* 0: any */
static int ncpu = 1;
static int failures;              /* crashes, request errors: exit 1 */

#define MAX_WORKERS 8             /* [cluster] workers of the ini */
#define MAX_PROCS 64              /* worker processes of one run */
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

/* Placements, the index of every baseline array and a cell's `pinned`:
 * 0 unpinned, 1 every process of the measurement pinned to CPU 0, 2 (TCP
 * baselines and the split cells) the two ends on different CPUs. */
enum { UNPINNED, PINNED, SPLIT, NPLACE };
static const char *const place_name[NPLACE] = { "unpinned", "pinned",
                                                "split" };
/* Request sizes of the request/response baseline: the payloads of the
 * 1-in-flight side-by-side cells, so that the plot has a raw-TCP point
 * under each of theirs. */
static const size_t rr_bytes[] = { 4, 4096, 65536, 1u << 20, 16u << 20 };
#define NRR (sizeof rr_bytes / sizeof *rr_bytes)

typedef struct baselines {
    double memcpy_gbps[2];
    double stream_gbps[NPLACE];
    double rtt_p50_us[NPLACE], rtt_p99_us[NPLACE];
    double rr_gbps[NRR], rr_p50_us[NRR];   /* unpinned */
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

/* TCP ping-pong (TCP_NODELAY both ends) for opt_ms: the client sends
 * `req` bytes, the other end answers with 64 once it has them all, one
 * exchange at a time. With req = 64 this is the 64 B round trip; larger,
 * it is what a 1-in-flight push of that size costs on a bare socket.
 * Sets out->p50 and p99 (us) and out->value (GB/s of request bytes). */
static void tcp_pingpong(int place, size_t req, base_shm *out)
{
    int port, lfd = listen_loopback(&port);
    pid_t echo = fork_child();
    if (echo == 0) {
        if (end_cpu(place, 1) >= 0)
            pin_tid(0, end_cpu(place, 1));
        int fd = accept(lfd, NULL, NULL);
        char *m = malloc(req > 64 ? req : 64);
        if (fd < 0 || !m)
            _exit(1);
        nodelay(fd);
        while (!read_full(fd, m, req))
            if (write_full(fd, m, 64))
                break;
        _exit(0);
    }
    pid_t cl = fork_child();
    if (cl == 0) {
        if (end_cpu(place, 0) >= 0)
            pin_tid(0, end_cpu(place, 0));
        int fd = connect_loopback(port);
        char *m = malloc(req > 64 ? req : 64);
        size_t cap = 1u << 20, n = 0;
        uint32_t *s = malloc(cap * sizeof *s);
        if (fd < 0 || !s || !m)
            _exit(1);
        nodelay(fd);
        memset(m, 'p', req > 64 ? req : 64);
        /* Warm-up: 200 exchanges, or 80 ms for the large ones. */
        uint64_t w0 = now_ns();
        for (int i = 0; i < 200 && now_ns() - w0 < 80000000u; i++)
            if (write_full(fd, m, req) || read_full(fd, m, 64))
                _exit(1);
        uint64_t t0 = now_ns(), t = t0;
        while (t - t0 < (uint64_t)opt_ms * 1000000u && n < cap) {
            uint64_t a = now_ns();
            if (write_full(fd, m, req) || read_full(fd, m, 64))
                _exit(1);
            t = now_ns();
            s[n++] = (uint32_t)(t - a);
        }
        qsort(s, n, sizeof *s, cmp_u32);
        out->p50 = pct(s, n, 0.5) / 1e3;
        out->p99 = pct(s, n, 0.99) / 1e3;
        out->value = (double)n * (double)req / (double)(t - t0);
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
            tcp_pingpong(p, 64, sh);
            p50[r] = sh->p50;
            p99[r] = sh->p99;
        }
        base.stream_gbps[p] = median3(gb);
        base.rtt_p50_us[p] = median3(p50);
        base.rtt_p99_us[p] = median3(p99);
    }
    for (size_t i = 0; i < NRR; i++) {
        double gb[BASE_RUNS], p50[BASE_RUNS];
        for (int r = 0; r < BASE_RUNS; r++) {
            memset(sh, 0, sizeof *sh);
            tcp_pingpong(UNPINNED, rr_bytes[i], sh);
            gb[r] = sh->value;
            p50[r] = sh->p50;
        }
        base.rr_gbps[i] = median3(gb);
        base.rr_p50_us[i] = median3(p50);
    }
    printf("memcpy %.2f GB/s unpinned, %.2f GB/s pinned\n",
           base.memcpy_gbps[0], base.memcpy_gbps[1]);
    for (int p = 0; p < NPLACE; p++)
        printf("%-9s TCP stream %5.2f GB/s   64 B ping-pong RTT p50 %6.1f us"
               "  p99 %6.1f us\n", place_name[p], base.stream_gbps[p],
               base.rtt_p50_us[p], base.rtt_p99_us[p]);
    printf("(pinned: both ends on CPU 0; split: one end on each of CPU 0 and "
           "1)\n");
    printf("TCP request/response, 1 in flight, unpinned (N bytes, 64 B back):"
           "\n");
    for (size_t i = 0; i < NRR; i++)
        printf("  %8zu B  %7.3f GB/s  p50 %8.1f us\n", rr_bytes[i],
               base.rr_gbps[i], base.rr_p50_us[i]);
    printf("\n");
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
static int bench_start_shards(test_cluster *c, int nodes, int shards,
                              const char *tables)
{
    char workers[32], *extra;
    snprintf(workers, sizeof workers, "workers = %d\n", MAX_WORKERS);
    if (asprintf(&extra, "[server]\nlog_level = warn\n%s\n\n%s",
                 opt_server_conf, tables) < 0)
        return -1;
    memset(c, 0, sizeof *c);   /* on_signal may look at it from now on */
    live = c;
    int r = cluster_start_ex(c, nodes, shards, workers, extra);
    free(extra);
    if (r)
        live = NULL;
    return r;
}

static int bench_start(test_cluster *c, int nodes, const char *tables)
{
    return bench_start_shards(c, nodes, 16, tables);
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
    int ms, warm_ms;         /* measured time and warm-up */
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
    wres w[MAX_PROCS];
    uint32_t samples[MAX_PROCS][MAX_SAMPLES];     /* latency, ns; pages
                                                     are touched as used */
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

/* Keeps one latency (ns) in samples, which holds *n of MAX_SAMPLES:
 * clamped to what a uint32_t holds (4.3 s), dropped when full. */
static void sample_put(uint32_t *samples, size_t *n, uint64_t lat)
{
    if (*n < MAX_SAMPLES)
        samples[(*n)++] = lat > UINT32_MAX ? UINT32_MAX : (uint32_t)lat;
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
            sample_put(samples, &res->nsamples, t - x->t_issue[slot]);
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
        pin_tid(0, c->pinned == 2 && ncpu > 1 ? 1 : 0);   /* 2: the other CPU */
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
    /* A pull makes no sparse row (a key never pushed reads its initial
     * row, computed afresh): a pull cell run alone (--op pull) measured
     * misses of an empty table, faster than pulls of rows (65,536 keys,
     * 2 nodes, 64 in flight: 85-98 against 69 M keys/s).
     * Its keys are pushed once first, as the matrix's push cells do. */
    if (!T->dense && c->op == OP_PULL)
        for (int j = 0; j < x.npool; j++)
            if (ps_wait(x.cl, ps_push(x.cl, x.table, x.keys + (size_t)j * x.n,
                                      x.n, x.vals, NULL, NULL)))
                return 6;
    /* The warm-up fills the window twice at least, not only for warm_ms:
     * 64 requests of 65,536 keys take longer than 80 ms to issue, and
     * the measured phase then made the client's first copies of the
     * rest (thousands of page faults in its first 150 ms: 64 in flight
     * measured slower than 1 in a 300 ms cell, faster in a 1 s one). */
    long warm_reqs = 2L * c->window > x.npool ? 2L * c->window : x.npool;
    run_phase(&x, now_ns() + (uint64_t)c->warm_ms * 1000000u, warm_reqs,
              NULL, NULL);
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
    pid_t pid[MAX_PROCS];
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
    shm->t_end = shm->t_go + (uint64_t)c->ms * 1000000u;
    atomic_store(&shm->go, 1);
    size_t n = 0;
    for (int w = 0; w < c->workers; w++) {
        int st = pid[w] > 0 ? reap_within(pid[w], c->ms + 30000) : 1;
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
    c->secs = (double)c->ms / 1e3;
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
    printf("%-10s %-8s %4s %2s %2s %-5s %10s %8s %9s %9s %9s %6s %7s %7s "
           "%9s\n", "op", "payload", "infl", "wk", "nd", "pin", "req/s",
           "GB/s", "Mkeys/s", "p50 us", "p99 us", "xTCP", "xRTTpin",
           "xRTTunp", "client p50");
}

static void print_cell(const cell *c)
{
    static const char *const pin_col[NPLACE] = { "no", "yes", "split" };
    printf("%-10s %-8s %4d %2d %2d %-5s %10.0f %8.3f %9.2f %9.1f %9.1f "
           "%6.2f %7.1f %7.2f %9.1f%s\n",
           op_name[c->op], loads[c->load].label, c->window, c->workers,
           c->nodes, pin_col[c->pinned], c->reqs, c->gbps, c->mkeys,
           c->p50, c->p99, x_stream(c), c->p50 / base.rtt_p50_us[PINNED],
           c->p50 / base.rtt_p50_us[UNPINNED], c->client_p50,
           c->failed ? "  FAILED" : c->errors ? "  ERRORS" : "");
    fflush(stdout);
}

/* Whether the filters (--op, --payload, ...) keep this cell. */
static int wanted(int l, op_kind op, int window, int workers, int nodes)
{
    return !((opt_f_op && strcmp(opt_f_op, op_name[op])) ||
             (opt_f_payload && strcmp(opt_f_payload, loads[l].label)) ||
             (opt_f_inflight && opt_f_inflight != window) ||
             (opt_f_workers && opt_f_workers != workers) ||
             (opt_f_nodes && opt_f_nodes != nodes));
}

static void add_cell(int l, op_kind op, int window, int workers, int nodes,
                     int pinned)
{
    if (ncells == MAX_CELLS || !wanted(l, op, window, workers, nodes))
        return;
    cell *c = &cells[ncells++];
    memset(c, 0, sizeof *c);
    c->load = l;
    c->op = op;
    c->window = window;
    c->workers = workers;
    c->nodes = nodes;
    c->pinned = pinned;
    c->ms = opt_ms;
    c->warm_ms = opt_warm_ms;
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

/* The memory run_cell needs, once. */
static void cells_alloc(void)
{
    if (shm)
        return;
    shm = shared_alloc(sizeof *shm);
    merged = malloc((size_t)MAX_PROCS * MAX_SAMPLES * sizeof *merged);
    if (!merged)
        exit(1);
}

static void run_matrix(void)
{
    int first = ncells;      /* cells[] before it: an earlier phase's */
    build_matrix();
    printf("== matrix: %d cells, %d ms each after a %d ms warm-up ==\n",
           ncells - first, opt_ms, opt_warm_ms);
    printf("skipped: \n");
    for (size_t i = 0; i < sizeof skipped_text / sizeof *skipped_text; i++)
        printf("  - %s\n", skipped_text[i]);
    cells_alloc();
    for (int nodes = 1; nodes <= 2; nodes++) {
        test_cluster cl;
        if (bench_start(&cl, nodes, bench_tables)) {
            failures++;
            continue;
        }
        printf("\n-- %d node%s --\n", nodes, nodes > 1 ? "s" : "");
        print_cell_header();
        for (int i = first; i < ncells; i++) {
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

/* ---- split placement (issue 12, item 4) ---------------------------- */

static int opt_split = 1;
static int split_phase;      /* the split cells ran, or had too few CPUs */

/* p50 of a cell over the 64 B ping-pong RTT p50 of a placement; NAN
 * without the baselines. */
static double x_rtt(const cell *c, int place)
{
    return base.rtt_p50_us[place] > 0 ? c->p50 / base.rtt_p50_us[place] : NAN;
}

/* The ends on different cores, the shape of two hosts: every thread of
 * psd on CPU 0 and the worker process on CPU 1 (worker_main pins itself
 * before ps_open, so the client's I/O thread inherits CPU 1); 4 B and
 * 4 KiB push and pull, 1 in flight, 1 worker, 1 node, one fresh cluster.
 * The cells are `pinned` 2 (SPLIT) in the files. Target (issue 12 item
 * 4): 4 KiB p50 <= 1.5x the split 64 B ping-pong RTT. */
static void run_split(void)
{
    uint64_t t0 = now_ns();
    int first = ncells;
    for (int l = L_4B; l <= L_4K; l++)
        for (int op = OP_PUSH; op <= OP_PULL; op++)
            add_cell(l, (op_kind)op, 1, 1, 1, SPLIT);
    if (ncells == first)
        return;              /* the filters left none */
    split_phase = 1;
    printf("== split placement (issue 12 item 4): psd on CPU 0, the worker "
           "on CPU 1, 1 node, 1 worker,\n   1 in flight, %d ms each after a "
           "%d ms warm-up ==\n", opt_ms, opt_warm_ms);
    /* Both CPUs must be there and allowed: try them on psbench itself. */
    int ok = ncpu > 1 && !pin_tid(0, 1) && !pin_tid(0, 0);
    pin_tid(0, -1);
    if (!ok) {
        printf("skipped: %s\n\n", ncpu > 1 ? "cannot pin to CPUs 0 and 1"
                                           : "only 1 CPU");
        ncells = first;
        return;
    }
    cells_alloc();
    test_cluster cl;
    if (bench_start(&cl, 1, bench_tables)) {
        failures++;
        ncells = first;
        return;
    }
    printf("%-6s %-8s %10s %9s %9s %9s %9s %10s\n", "op", "payload", "req/s",
           "p50 us", "p99 us", "xRTTsplit", "xRTTunp", "client p50");
    for (int i = first; i < ncells; i++) {
        cell *c = &cells[i];
        run_cell(c, &cl);
        printf("%-6s %-8s %10.0f %9.1f %9.1f %9.2f %9.2f %10.1f%s\n",
               op_name[c->op], loads[c->load].label, c->reqs, c->p50, c->p99,
               x_rtt(c, SPLIT), x_rtt(c, UNPINNED), c->client_p50,
               c->failed ? "  FAILED" : c->errors ? "  ERRORS" : "");
        fflush(stdout);
        if ((c->failed || c->errors) &&
            (bench_stop(&cl) || bench_start(&cl, 1, bench_tables))) {
            failures++;
            return;
        }
    }
    if (bench_stop(&cl))
        failures++;
    if (base.rtt_p50_us[SPLIT] > 0)
        printf("64 B ping-pong RTT p50 (baselines): split %.1f us, unpinned "
               "%.1f us\n", base.rtt_p50_us[SPLIT],
               base.rtt_p50_us[UNPINNED]);
    else
        printf("no baselines in this run: no ratios to the RTT\n");
    printf("phase: %.1f s\n\n", (double)(now_ns() - t0) / 1e9);
}

/* ---- fairness and scale (issue 12, items 5 and 6) ------------------ */

static int opt_fairness, opt_scale;
static int opt_fair_heavy_window = 2;    /* 16 MiB pushes in flight */
static int opt_fair_split;               /* psd on CPU 0, clients on 1 */

/* Runs one worker process per cell of cs (worker w runs cs[w], with its
 * own ps_client), starts them together for ms milliseconds and waits for
 * them. Worker w's latencies stay in shm->samples[w] (sorted), its counts
 * in shm->w[w]. Returns the number of workers that failed. */
static int run_group(cell *const cs[], int nw, const test_cluster *cl, int ms)
{
    pid_t pid[MAX_PROCS];
    int bad = 0;
    memset(shm, 0, offsetof(bench_shm, samples));
    for (int w = 0; w < nw; w++) {
        pid[w] = fork_child();
        if (pid[w] == 0)
            _exit(worker_main(cs[w], w, cl->spec));
        if (pid[w] < 0) {
            perror("psbench: fork");
            exit(1);
        }
    }
    uint64_t deadline = now_ns() + 60000000000ull;
    while (atomic_load(&shm->ready) < nw) {
        for (int w = 0; w < nw; w++)
            if (pid[w] > 0 &&
                waitpid(pid[w], &shm->w[w].status, WNOHANG) == pid[w]) {
                fprintf(stderr, "psbench: worker %d ended before the start "
                        "(status %d)\n", w, shm->w[w].status);
                pid[w] = -1;
                bad++;
            }
        if (bad || now_ns() > deadline)
            break;
        sleep_us(500);
    }
    shm->t_go = now_ns();
    shm->t_end = shm->t_go + (uint64_t)ms * 1000000u;
    atomic_store(&shm->go, 1);
    for (int w = 0; w < nw; w++) {
        int st = pid[w] > 0 ? reap_within(pid[w], ms + 60000) : 1;
        if (st && pid[w] > 0) {
            fprintf(stderr, "psbench: worker %d (%s %s) failed (%d)\n", w,
                    op_name[cs[w]->op], loads[cs[w]->load].label, st);
            bad++;
        }
        qsort(shm->samples[w], shm->w[w].nsamples, sizeof(uint32_t),
              cmp_u32);
    }
    if (bad)
        failures++;
    return bad;
}

/* Fairness: a light client's 4 KiB pulls (1 in flight) alone, then while
 * another client streams 16 MiB pushes (opt_fair_heavy_window in
 * flight), on one node; p50/p99/max of the light client in each run and
 * the heavy client's rate. Target (issue 12 item 5): p99 <= 5 ms with the
 * heavy client. */
static void run_fairness(void)
{
    test_cluster cl;
    cells_alloc();
    printf("\n== fairness: a light client's 4 KiB pull_range, 1 in flight, "
           "alone and while another client streams 16 MiB push_range (%d in "
           "flight), 1 node, %d ms each ==\n", opt_fair_heavy_window, opt_ms);
    if (bench_start(&cl, 1, bench_tables)) {
        failures++;
        return;
    }
    cell light = { .load = L_4K, .op = OP_PULL_RANGE, .window = 1,
                   .workers = 1, .nodes = 1, .ms = opt_ms,
                   .warm_ms = opt_warm_ms };
    cell heavy = { .load = L_16M, .op = OP_PUSH_RANGE,
                   .window = opt_fair_heavy_window, .workers = 1, .nodes = 1,
                   .ms = opt_ms, .warm_ms = opt_warm_ms };
    if (opt_fair_split) {
        pin_process(cl.pid[0], 0);
        light.pinned = heavy.pinned = 2;
        printf("psd pinned to CPU 0, both clients to CPU 1\n");
    }
    printf("%-22s %8s %9s %9s %9s %10s\n", "run", "light n", "p50 us",
           "p99 us", "max us", "heavy GB/s");
    double p99_heavy = NAN;
    for (int run = 0; run < 2; run++) {
        cell *cs[2] = { &light, &heavy };
        run_group(cs, run + 1, &cl, opt_ms);
        const uint32_t *s = shm->samples[0];
        size_t n = shm->w[0].nsamples;
        double gbps = run ? (double)shm->w[1].count * 16.0 * 1048576.0 /
                                (opt_ms / 1e3) / 1e9 : NAN;
        printf("%-22s %8zu %9.1f %9.1f %9.1f %10.2f\n",
               run ? "with 16 MiB pushes" : "alone", n,
               pct(s, n, 0.5) / 1e3, pct(s, n, 0.99) / 1e3,
               n ? s[n - 1] / 1e3 : NAN, gbps);
        if (run)
            p99_heavy = pct(s, n, 0.99) / 1e3;
        fflush(stdout);
    }
    printf("target (issue 12 item 5): light p99 <= 5000 us with the heavy "
           "client: %s (%.0f us)\n", p99_heavy <= 5000 ? "PASS" : "MISS",
           p99_heavy);
    if (bench_stop(&cl))
        failures++;
}

/* Growth: one node, a sparse table of dim 1 (sum) in one shard, filled
 * by pushes of GROWTH_KEYS new keys (1 in flight) up to opt_growth rows
 * while another client pulls one key (4 B, 1 in flight): the slowest push
 * against the median one, and the light client's p99 and max. A shard
 * whose slots doubled all at once stopped the node for seconds at tens
 * of millions of rows, every client waiting. */
#define GROWTH_KEYS 65536
static uint64_t opt_growth;

/* One client of the growth run: the filler (heavy: pushes of
 * GROWTH_KEYS new keys up to opt_growth rows; samples in shm->samples[0])
 * or the light client (1-key pulls until shm->go; samples[1]). */
static int growth_client(const char *spec, int heavy)
{
    ps_client *c;
    if (ps_open(&c, spec, NULL))
        return 2;
    int t = ps_table(c, "g", NULL), w = !heavy;
    size_t nkeys = heavy ? GROWTH_KEYS : 1;
    uint64_t *keys = malloc(nkeys * sizeof *keys);
    float *vals = malloc(nkeys * sizeof *vals);
    if (t < 0 || !keys || !vals)
        return 3;
    for (size_t i = 0; i < nkeys; i++)
        vals[i] = 1.0f;
    keys[0] = psw_mix64(1);
    int bad = 0;
    size_t n = 0;
    for (uint64_t first = 0; !bad && (heavy ? first < opt_growth
                                            : !atomic_load(&shm->go));
         first += nkeys) {
        for (size_t i = 0; heavy && i < nkeys; i++)
            keys[i] = psw_mix64(first + i + 1);
        uint64_t t0 = now_ns();
        ps_ts ts = heavy ? ps_push(c, t, keys, nkeys, vals, NULL, NULL)
                         : ps_pull(c, t, keys, 1, vals, NULL, NULL);
        if (ts < 0 || ps_wait(c, ts))
            bad = 1;
        sample_put(shm->samples[w], &n, now_ns() - t0);
    }
    shm->w[w].nsamples = n;
    if (bad)
        fprintf(stderr, "psbench: growth %s: %s\n",
                heavy ? "fill" : "light client", ps_last_error(c));
    ps_close(c);
    free(keys);
    free(vals);
    return bad ? 4 : 0;
}

static void run_growth(void)
{
    test_cluster cl;
    cells_alloc();
    printf("\n== growth: a sparse table of dim 1 (sum) in 1 shard on 1 node "
           "filled to %llu rows by pushes of %d new keys (1 in flight), "
           "while another client pulls 1 key (1 in flight) ==\n",
           (unsigned long long)opt_growth, GROWTH_KEYS);
    if (bench_start_shards(&cl, 1, 1, "[table.g]\nkind = sparse\ndim = 1\n"
                           "updater = sum\n")) {
        failures++;
        return;
    }
    cl.stop_ms = 300000;         /* its final snapshot: every row */
    memset(shm, 0, offsetof(bench_shm, samples));
    uint64_t t0 = now_ns();
    pid_t light = fork_child();
    if (light == 0)
        _exit(growth_client(cl.spec, 0));
    pid_t fill = fork_child();
    if (fill == 0)
        _exit(growth_client(cl.spec, 1));
    int st = reap_within(fill, 900000);
    atomic_store(&shm->go, 1);
    st |= reap_within(light, 60000);
    double secs = (double)(now_ns() - t0) / 1e9;
    if (st)
        failures++;
    for (int w = 0; w < 2; w++)
        qsort(shm->samples[w], shm->w[w].nsamples, sizeof(uint32_t),
              cmp_u32);
    const uint32_t *p = shm->samples[0], *l = shm->samples[1];
    size_t np = shm->w[0].nsamples, nl = shm->w[1].nsamples;
    double med = pct(p, np, 0.5) / 1e6, worst = np ? p[np - 1] / 1e6 : NAN;
    printf("%-34s %10s %10s %10s\n", "", "p50 ms", "p99 ms", "max ms");
    printf("%-34s %10.2f %10.2f %10.2f\n", "push of 65,536 new keys", med,
           pct(p, np, 0.99) / 1e6, worst);
    printf("%-34s %10.3f %10.3f %10.2f\n", "light client's 1-key pull",
           pct(l, nl, 0.5) / 1e6, pct(l, nl, 0.99) / 1e6,
           nl ? l[nl - 1] / 1e6 : NAN);
    printf("%zu pushes, %zu light pulls, %.1f s; slowest push / median "
           "push: %.1fx\n", np, nl, secs, worst / med);
    if (bench_stop(&cl))
        failures++;
}

/* Scale: aggregate 4 KiB pulls (8 in flight each) of 4 and of 64 worker
 * processes on 2 nodes, then the RSS psd pays for 1,000 idle client
 * connections. Targets (issue 12 item 6): 64 >= 0.9x 4; < 100 MB. */
static int idle_main(const char *spec, int n, int fd)
{
    ps_client **cs = calloc((size_t)n, sizeof *cs);
    int opened = 0;
    for (int i = 0; i < n && cs; i++) {
        if (ps_open(&cs[i], spec, NULL))
            break;
        opened++;
    }
    char b = opened == n ? 'y' : 'n';
    if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1)
        b = 0;
    for (int i = 0; i < opened; i++)
        ps_close(cs[i]);
    return opened == n ? 0 : 1;
}

static void run_scale(void)
{
    test_cluster cl;
    cells_alloc();
    printf("\n== scale: 4 KiB pull_range, 8 in flight per worker process, 2 "
           "nodes, %d ms each ==\n", opt_ms);
    if (bench_start(&cl, 2, bench_tables)) {
        failures++;
        return;
    }
    static cell wc;
    wc = (cell){ .load = L_4K, .op = OP_PULL_RANGE, .window = 8,
                 .workers = 1, .nodes = 2, .ms = opt_ms,
                 .warm_ms = opt_warm_ms };
    cell *cs[MAX_PROCS];
    for (int w = 0; w < MAX_PROCS; w++)
        cs[w] = &wc;
    static const int nws[] = { 4, 64, 4, 64 };
    double rate[2] = { 0, 0 };
    printf("%-9s %12s %9s %9s\n", "workers", "req/s", "p50 us", "p99 us");
    for (size_t r = 0; r < sizeof nws / sizeof *nws; r++) {
        int nw = nws[r];
        run_group(cs, nw, &cl, opt_ms);
        long count = 0;
        size_t n = 0;
        for (int w = 0; w < nw; w++) {
            count += shm->w[w].count;
            memcpy(merged + n, shm->samples[w],
                   shm->w[w].nsamples * sizeof *merged);
            n += shm->w[w].nsamples;
        }
        qsort(merged, n, sizeof *merged, cmp_u32);
        double rps = (double)count / (opt_ms / 1e3);
        rate[nw == 64] += rps / 2;
        printf("%-9d %12.0f %9.1f %9.1f\n", nw, rps, pct(merged, n, 0.5) / 1e3,
               pct(merged, n, 0.99) / 1e3);
        fflush(stdout);
    }
    double x = rate[1] / rate[0];
    printf("64 workers / 4 workers (means of 2 runs each): %.2fx; target "
           ">= 0.9x: %s\n", x, x >= 0.9 ? "PASS" : "MISS");
    if (bench_stop(&cl))
        failures++;

    /* Idle connections: 1,000 ps_clients (one process, one connection
     * each to the one node, all from 127.0.0.1: the per-address limit is
     * raised for this), then psd's RSS against before. */
    const char *conf = opt_server_conf;
    char *more = NULL;
    if (asprintf(&more, "%s\nmax_connections = 1100\n"
                 "max_connections_per_addr = 1100\n", conf) < 0) {
        failures++;
        return;
    }
    opt_server_conf = more;
    int bad = bench_start(&cl, 1, bench_tables);
    opt_server_conf = conf;
    free(more);
    if (bad) {
        failures++;
        return;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
        failures++;
        bench_stop(&cl);
        return;
    }
    sleep_us(100000);
    long before = rss_kib(cl.pid[0]);
    pid_t pid = fork_child();
    if (pid == 0) {
        close(sv[0]);
        _exit(idle_main(cl.spec, 1000, sv[1]));
    }
    close(sv[1]);
    char b = 0;
    if (read(sv[0], &b, 1) != 1 || b != 'y')
        fprintf(stderr, "psbench: the 1,000 idle connections did not all "
                "open\n");
    sleep_us(300000);
    long after = rss_kib(cl.pid[0]);
    if (write(sv[0], "x", 1) != 1)
        b = 0;
    close(sv[0]);
    if (reap_within(pid, 60000))
        failures++;
    double mb = (double)(after - before) * 1024 / 1e6;
    printf("1,000 idle connections: psd RSS %.1f MB before, %.1f MB with "
           "them: %.1f MB (%.1f KB each); target < 100 MB: %s\n",
           before * 1024 / 1e6, after * 1024 / 1e6, mb, mb, mb < 100 ?
           "PASS" : "MISS");
    if (bench_stop(&cl))
        failures++;
}

/* ---- side by side with ps-lite -------------------------------------- */

/* ps-lite is measured by psl_bench, the benchmark of an optional folder
 * outside the repository that run_bench.sh builds (tests/bench/README.md):
 * one process runs `psl_bench --cell ID --op OP --ms N --warm-ms N` and
 * prints "cell op inflight req_s GBps Mkeys_s p50_us p99_us". Each pair
 * below is one psl_bench cell and the psd cell of the same payload and
 * depth; `psl_bench --list` tells which cells it has and their shapes. */
typedef struct pairdef {
    const char *id;         /* psl_bench's cell id */
    int load, window;
    int nops;               /* push, pull and, when 3, pushpull */
} pairdef;

static const pairdef pairdefs[] = {
    { "a", L_4B, 64, 3 },
    { "b", L_4K, 1, 2 },
    { "c", L_4K, 8, 3 },
    { "d", L_16M, 1, 3 },
    { "e", L_S1, 1, 2 },
    /* Not in psl_bench itself: run_bench.sh adds them to the copy it
     * builds, for the plot's payload sizes. */
    { "f", L_4B, 1, 3 },
    { "g", L_64K, 1, 3 },
    { "h", L_1M, 1, 3 },
};

enum { F_REQS, F_GBPS, F_MKEYS, F_P50, F_P99, NFIGS };
static const char *const fig_name[NFIGS] = { "req/s", "GB/s", "Mkeys/s",
                                             "p50 us", "p99 us" };
static const char *const fig_key[NFIGS] = { "req_per_s", "gb_per_s",
                                            "mkeys_per_s", "p50_us",
                                            "p99_us" };
#define MAX_ROUNDS 9
#define MAX_PAIRS 32

typedef struct pair {
    const pairdef *d;
    op_kind op;
    int psl_ok;              /* psl_bench has this cell, same shape */
    cell proto;              /* psd's cell (1 node, 1 worker, unpinned) */
    /* Per round: req/s, GB/s, Mkeys/s, p50, p99; NAN when it failed. */
    double psd[MAX_ROUNDS][NFIGS], psl[MAX_ROUNDS][NFIGS];
} pair;

static pair pairs[MAX_PAIRS];
static int npairs;
static int have_pslite;          /* psl_bench answered --list */
static double pair_secs;         /* wall time of the phase */
static double pair_load[2];      /* 1-minute load average, start and end */

/* The 1-minute load average: other jobs on a shared machine show here. */
static double load_1min(void)
{
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = NAN;
        fclose(f);
    }
    return l;
}

/* Runs argv with stdout captured into buf (NUL-terminated, truncated to
 * cap) and stderr appended to OUT/pslite-stderr.txt; gives up after
 * timeout_ms. Returns the exit status as reap_within does. */
static int run_capture(const char *const argv[], char *buf, size_t cap,
                       int timeout_ms)
{
    int fds[2];
    buf[0] = 0;
    if (pipe(fds)) {
        perror("psbench: pipe");
        return -1;
    }
    char errpath[600];
    snprintf(errpath, sizeof errpath, "%s/pslite-stderr.txt", opt_out);
    pid_t pid = fork_child();
    if (pid == 0) {
        int e = open(errpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fds[1], 1);
        if (e >= 0)
            dup2(e, 2);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], (char *const *)argv);
        perror(argv[0]);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    /* The pipe closes when psl_bench and the processes it started (which
     * share its stdout) are gone; its own deadline kills them. */
    size_t n = 0;
    char sink[256];          /* what does not fit in buf is read and dropped */
    for (;;) {
        int room = n + 1 < cap;
        ssize_t k = read(fds[0], room ? buf + n : sink,
                         room ? cap - n - 1 : sizeof sink);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        if (room)
            n += (size_t)k;
    }
    buf[n] = 0;
    close(fds[0]);
    return reap_within(pid, timeout_ms);
}

/* Reads `psl_bench --list` ("id op inflight label keys=N width=W" per
 * line) and marks the pairs whose cell exists with the payload and depth
 * of their psd cell. Returns the number marked. */
static int psl_list(void)
{
    const char *argv[] = { opt_pslite, "--list", NULL };
    static char out[8192];
    if (run_capture(argv, out, sizeof out, 30000)) {
        fprintf(stderr, "psbench: %s --list failed; psd alone\n", opt_pslite);
        return 0;
    }
    int marked = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char id[32], op[32], label[32];
        int inflight;
        size_t keys, width;
        if (sscanf(line, "%31s %31s %d %31s keys=%zu width=%zu", id, op,
                   &inflight, label, &keys, &width) != 6)
            continue;
        for (int i = 0; i < npairs; i++) {
            pair *p = &pairs[i];
            const load *l = &loads[p->d->load];
            int dense = tables[l->tab].dense;
            if (strcmp(id, p->d->id) || strcmp(op, op_name[p->op]) ||
                inflight != p->d->window)
                continue;
            /* Same bytes of floats per request; a sparse psd cell also
             * needs the same keys (psl_bench's dense-like cells send one
             * wide key where psd sends rows). */
            if (keys * width * sizeof(float) != payload_bytes(&p->proto) ||
                (!dense && keys != l->nkeys)) {
                fprintf(stderr, "psbench: psl_bench cell %s %s has another "
                        "shape (%zu keys x %zu) than psd's %s; not compared\n",
                        id, op, keys, width, l->label);
                continue;
            }
            if (!p->psl_ok)
                marked++;
            p->psl_ok = 1;
        }
    }
    return marked;
}

/* One psl_bench run for one cell and op: fresh scheduler, server and
 * worker processes. Fills f with its figures, NAN when it failed. */
static void psl_run(const pair *p, double f[NFIGS])
{
    for (int k = 0; k < NFIGS; k++)
        f[k] = NAN;
    char ms[16], warm[16], tmo[16], out[4096];
    int tmo_s = 30 + 2 * (opt_pair_ms + opt_pair_warm_ms) / 1000;
    snprintf(ms, sizeof ms, "%d", opt_pair_ms);
    snprintf(warm, sizeof warm, "%d", opt_pair_warm_ms);
    snprintf(tmo, sizeof tmo, "%d", tmo_s);
    const char *argv[] = { opt_pslite, "--cell", p->d->id, "--op",
                           op_name[p->op], "--ms", ms, "--warm-ms", warm,
                           "--timeout-s", tmo, NULL };
    int st = run_capture(argv, out, sizeof out, (tmo_s + 10) * 1000);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char id[32], op[32];
        int inflight;
        double v[NFIGS];
        if (sscanf(line, "%31s %31s %d %lf %lf %lf %lf %lf", id, op,
                   &inflight, &v[F_REQS], &v[F_GBPS], &v[F_MKEYS], &v[F_P50],
                   &v[F_P99]) == 8 && !strcmp(id, p->d->id) &&
            !strcmp(op, op_name[p->op]) && inflight == p->d->window)
            memcpy(f, v, sizeof v);
    }
    if (st || isnan(f[F_REQS])) {
        fprintf(stderr, "psbench: psl_bench cell %s %s failed (status %d; "
                "its stderr is in %s/pslite-stderr.txt)\n", p->d->id,
                op_name[p->op], st, opt_out);
        for (int k = 0; k < NFIGS; k++)
            f[k] = NAN;
    }
}

/* psd's figures of a cell that ran, NAN when it failed. */
static void cell_figs(const cell *c, double f[NFIGS])
{
    int ok = c->ran && !c->failed && !c->errors;
    f[F_REQS] = ok ? c->reqs : NAN;
    f[F_GBPS] = ok ? c->gbps : NAN;
    f[F_MKEYS] = ok ? c->mkeys : NAN;
    f[F_P50] = ok ? c->p50 : NAN;
    f[F_P99] = ok ? c->p99 : NAN;
}

/* The figures a pair shows: GB/s from 64 KiB up, M keys/s for the
 * 65,536-key cell, latency and req/s at 1 in flight, req/s otherwise.
 * Returns how many it wrote to figs. */
static int pair_figs(const pair *p, int figs[3])
{
    int l = p->d->load;
    if (l == L_64K || l == L_1M || l == L_16M) {
        figs[0] = F_GBPS;
        return 1;
    }
    if (l == L_S1) {
        figs[0] = F_MKEYS;
        return 1;
    }
    if (p->d->window == 1) {
        figs[0] = F_P50;
        figs[1] = F_P99;
        figs[2] = F_REQS;
        return 3;
    }
    figs[0] = F_REQS;
    return 1;
}

/* Prints one figure in a 13-wide column, with the figure's precision. */
static void print_fig(double v, int fig)
{
    if (isnan(v))
        printf(" %12s", "n/a");
    else if (fig == F_GBPS)
        printf(" %12.3f", v);
    else if (fig == F_MKEYS)
        printf(" %12.2f", v);
    else if (fig == F_REQS)
        printf(" %12.0f", v);
    else
        printf(" %12.1f", v);
}

/* For every pair, psd's cell and psl_bench's, one after the other (which
 * goes first alternates from pair to pair and round to round), for
 * opt_rounds rounds. psd runs in one 1-node cluster started for the phase,
 * fresh after a failed cell; each ps-lite run starts its own processes. */
static void run_pairs(void)
{
    uint64_t t0 = now_ns();
    pair_load[0] = load_1min();
    for (size_t i = 0; i < sizeof pairdefs / sizeof *pairdefs; i++)
        for (int op = 0; op < pairdefs[i].nops && npairs < MAX_PAIRS; op++) {
            if (!wanted(pairdefs[i].load, (op_kind)op, pairdefs[i].window, 1,
                        1))
                continue;
            pair *p = &pairs[npairs++];
            memset(p, 0, sizeof *p);
            p->d = &pairdefs[i];
            p->op = (op_kind)op;
            cell *c = &p->proto;
            c->load = p->d->load;
            c->op = p->op;
            c->window = p->d->window;
            c->workers = c->nodes = 1;
            c->ms = opt_pair_ms;
            c->warm_ms = opt_pair_warm_ms;
        }
    if (opt_pslite) {
        int n = psl_list();
        have_pslite = n > 0;
        if (n < npairs)
            fprintf(stderr, "psbench: psl_bench has %d of the %d cells; the "
                    "others are psd alone\n", n, npairs);
    }
    printf("== side by side: psd and ps-lite, the same cells alternately, "
           "%d round%s of %d ms after %d ms warm-up ==\n", opt_rounds,
           opt_rounds > 1 ? "s" : "", opt_pair_ms, opt_pair_warm_ms);
    if (have_pslite)
        printf("ps-lite: %s\n", opt_pslite);
    else
        printf("ps-lite: not measured (%s); psd alone\n",
               opt_pslite ? "psl_bench did not list its cells"
                          : "no --pslite");
    cells_alloc();
    test_cluster cl;
    if (bench_start(&cl, 1, bench_tables)) {
        failures++;
        return;
    }
    for (int r = 0; r < opt_rounds; r++) {
        printf("round %d: cell payload op infl, then psd and ps-lite\n", r + 1);
        for (int i = 0; i < npairs; i++) {
            pair *p = &pairs[i];
            int figs[3];
            pair_figs(p, figs);
            for (int k = 0; k < NFIGS; k++)
                p->psl[r][k] = NAN;
            for (int turn = 0; turn < 2; turn++) {
                if (((i + r + turn) & 1) == 0) {
                    cell c = p->proto;
                    run_cell(&c, &cl);
                    cell_figs(&c, p->psd[r]);
                    if (c.failed || c.errors) {
                        if (bench_stop(&cl) ||
                            bench_start(&cl, 1, bench_tables)) {
                            failures++;
                            return;
                        }
                    }
                } else if (have_pslite && p->psl_ok) {
                    psl_run(p, p->psl[r]);
                }
            }
            printf("  %-2s %-8s %-8s %3d  psd", p->d->id,
                   loads[p->d->load].label, op_name[p->op], p->d->window);
            print_fig(p->psd[r][figs[0]], figs[0]);
            printf("  ps-lite");
            print_fig(p->psl[r][figs[0]], figs[0]);
            printf("  %s\n", fig_name[figs[0]]);
            fflush(stdout);
        }
    }
    if (bench_stop(&cl))
        failures++;
    pair_secs = (double)(now_ns() - t0) / 1e9;
    pair_load[1] = load_1min();
    printf("\n");
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
    /* rest_ms > 0: rss_rest is read that long after rss_after, once a
     * sparse table's doubling slots have been let go (readied ones after
     * 10 s idle, old ones as the ticks move them). */
    int rest_ms;
    long rss_rest;
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
    /* At SIGTERM the node writes every row in its final snapshot: 4.9 GB
     * of a 10^8-key table took longer than cluster_stop's 10 s here. */
    cl.stop_ms = 300000;
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
    if (m->rest_ms > 0 && !st) {
        /* Then until it stops falling: 3 s alike (old slots are let go a
         * shard at a time, every second or two), at most a minute. */
        sleep_us((unsigned)m->rest_ms * 1000u);
        m->rss_rest = rss_kib(cl.pid[0]);
        for (int i = 0, same = 0; i < 60 && same < 3; i++) {
            sleep_us(1000000);
            long r = rss_kib(cl.pid[0]);
            same = r == m->rss_rest ? same + 1 : 0;
            m->rss_rest = r;
        }
        if (m->rss_rest < 0) {   /* psd is gone */
            fprintf(stderr, "psbench: psd ended while the table rested\n");
            m->failed = 1;
            failures++;
        }
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

/* Memory per key of a sparse table of dim 8 (sum) filled with 10^6 ..
 * 10^max_exp keys, against its raw floats (issue 12 item 6: <= 2x). */
static int opt_sparse_curve;      /* largest power of ten; 0: not run */
/* --sparse-keys: more sizes, measured after the powers of ten (a size
 * just past a growth of the table's slots is its worst case). */
static uint64_t opt_sparse_keys[8];
static int opt_nsparse_keys;

static void run_sparse_curve(void)
{
    test_cluster cl;
    long empty = -1;
    if (!bench_start(&cl, 1, "[table.m]\nkind = dense\nrows = 1\ndim = 16\n")) {
        sleep_us(50000);
        empty = rss_kib(cl.pid[0]);
        bench_stop(&cl);
    }
    printf("\n== sparse table, dim 8, sum: psd RSS per key after pushing "
           "every key (1 node) ==\n");
    printf("%12s %10s %9s %9s %8s %6s %10s %9s %8s\n", "keys", "total MiB",
           "B/key", "raw B/key", "xfloats", "secs", "rest MiB", "B/key",
           "xfloats");
    int npow = opt_sparse_curve >= 6 ? opt_sparse_curve - 5 : 0;
    for (int e = 0; e < npow + opt_nsparse_keys; e++) {
        memrow m = { .dense = 0, .updater = "sum", .dim = 8, .rows = 1,
                     .rest_ms = 11000 };
        if (e < npow)
            for (int i = 0; i < e + 6; i++)
                m.rows *= 10;
        else
            m.rows = opt_sparse_keys[e - npow];
        mem_one(&m, empty);
        double rest = (double)(m.rss_rest - m.rss_empty) * 1024.0;
        printf("%12llu %10.1f %9.1f %9.1f %8.2f %6.1f %10.1f %9.1f %8.2f%s\n",
               (unsigned long long)m.rows, mem_bytes(&m) / 1048576.0,
               mem_bytes(&m) / (double)m.rows, mem_raw(&m) / (double)m.rows,
               mem_bytes(&m) / mem_raw(&m), m.secs, rest / 1048576.0,
               rest / (double)m.rows, rest / mem_raw(&m),
               m.failed ? "  FAILED" : "");
        fflush(stdout);
    }
    printf("total: right after the fill; rest: at rest (11 s later, then "
           "3 s unchanged), when the\nslot arrays a doubling holds (readied "
           "before it, old after it) have been let go; secs: the cell's "
           "time, start,\nfill, rest and stop.\ntarget (issue 12 "
           "item 6): <= 2.00 xfloats at 10^8 keys (at rest)\n");
}

/* ---- targets and summary -------------------------------------------- */

typedef struct target {
    char what[80];
    char figure[64];
    char goal[40];
    double value, limit;
    int higher_better, have;
    int issue;               /* 3 or 12 */
    int row;                 /* issue 12: one side-by-side row's goal */
} target;

#define MAX_TARGETS 160
static target targets[MAX_TARGETS];
static int ntargets;

static target *add_target(int issue, const char *what, double value,
                          double limit, int higher_better)
{
    static target spare;     /* full: overwritten, never reported */
    target *t = ntargets < MAX_TARGETS ? &targets[ntargets++] : &spare;
    memset(t, 0, sizeof *t);
    snprintf(t->what, sizeof t->what, "%s", what);
    t->value = value;
    t->limit = limit;
    t->higher_better = higher_better;
    t->have = !isnan(value);
    t->issue = issue;
    return t;
}

static int pass(const target *t)
{
    return t->have && (t->higher_better ? t->value >= t->limit
                                        : t->value <= t->limit);
}

static const char *verdict(const target *t)
{
    return !t->have ? "n/a" : pass(t) ? "PASS" : "MISS";
}

/* Issue 3's targets: psd's matrix against the wire and absolute goals. */
static void targets_build(void)
{
    for (int op = OP_PUSH; op <= OP_PULL_RANGE; op++) {
        cell *c = find(L_16M, (op_kind)op, 1, 1, 1, 0);
        double lim = op == OP_PUSHPULL ? 0.5 : 0.9;
        char w[80];
        snprintf(w, sizeof w, "16 MiB %s, 1 in flight", op_name[op]);
        target *t = add_target(3, w, c ? x_stream(c) : NAN, lim, 1);
        snprintf(t->figure, sizeof t->figure, "%.3f GB/s = %.2fx TCP",
                 c ? c->gbps : NAN, t->value);
        snprintf(t->goal, sizeof t->goal, ">= %.1fx TCP stream", lim);
    }
    for (int op = OP_PUSH; op <= OP_PULL_RANGE; op++) {
        if (op == OP_PUSHPULL)
            continue;
        for (int pin = 1; pin >= 0; pin--) {
            cell *c = find(L_4K, (op_kind)op, 1, 1, 1, pin);
            double lim = pin ? 3.0 : 1.5;
            char w[80];
            snprintf(w, sizeof w, "4 KiB %s, 1 in flight, %s", op_name[op],
                     pin ? "pinned" : "unpinned");
            target *t = add_target(3, w, c ? c->p50 / base.rtt_p50_us[pin]
                                           : NAN, lim, 0);
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
        target *t = add_target(3, w, c ? c->reqs : NAN, 150000, 1);
        snprintf(t->figure, sizeof t->figure, "%.0f req/s", t->value);
        snprintf(t->goal, sizeof t->goal, ">= 150000 req/s");
    }
    {
        cell *c = find(L_S8, OP_PULL, 64, 1, 1, 0);
        target *t = add_target(3, "sparse pull 1000 keys x dim 8, 64 in flight",
                               c ? c->mkeys : NAN, 20, 1);
        snprintf(t->figure, sizeof t->figure, "%.1f M keys/s", t->value);
        snprintf(t->goal, sizeof t->goal, ">= 20 M keys/s");
    }
    for (int k = 1; k <= 64; k += 63) {
        cell *c = find(L_S1, OP_PULL, k, 1, 1, 0);
        char w[80];
        snprintf(w, sizeof w, "sparse pull 65536 keys x dim 1, %d in flight", k);
        target *t = add_target(3, w, c ? c->mkeys : NAN, 60, 1);
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
        target *t = add_target(3, w, m->failed ? NAN
                                               : mem_bytes(m) / mem_need(m),
                               lim, 0);
        snprintf(t->figure, sizeof t->figure, "%.1f B/row = %.2fx needed",
                 mem_bytes(m) / (double)m->rows, t->value);
        snprintf(t->goal, sizeof t->goal, "<= %.2fx needed", lim);
    }
}

/* One row of the side-by-side table: one figure of one pair, the median
 * over the rounds (lo and hi: the range). */
typedef struct sbs_row {
    const pair *p;
    int fig;
    double psl, psd, psl_lo, psl_hi, psd_lo, psd_hi;
    double psl_gbps, psd_gbps;   /* the cell's GB/s, whatever fig is */
    double goal;                 /* psd / ps-lite */
    int higher;                  /* rate: higher is better */
    target *t;                   /* its psd / ps-lite target */
} sbs_row;

static sbs_row rows[MAX_PAIRS * 3];
static int nrows;

static int is_latency(int fig)
{
    return fig == F_P50 || fig == F_P99;
}

/* The median of figure fig over the rounds that have it; NAN if none. */
static double rounds_median(const double v[MAX_ROUNDS][NFIGS], int fig,
                            double *lo, double *hi)
{
    double x[MAX_ROUNDS];
    int n = 0;
    for (int r = 0; r < opt_rounds; r++)
        if (!isnan(v[r][fig]))
            x[n++] = v[r][fig];
    *lo = *hi = NAN;
    if (!n)
        return NAN;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    *lo = x[0];
    *hi = x[n - 1];
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* A row's figure against the wire, all unpinned like the cells: GB/s and
 * M keys/s rows as GB/s of floats / TCP stream; req/s rows as req/s / the
 * 64 B ping-pong's round trips per second (1e6 / RTT p50); latencies as
 * the figure / RTT p50. */
static double x_wire(const sbs_row *w, int psd)
{
    double v = psd ? w->psd : w->psl;
    if (is_latency(w->fig))
        return v / base.rtt_p50_us[UNPINNED];
    if (w->fig == F_REQS)
        return v * base.rtt_p50_us[UNPINNED] / 1e6;
    return (psd ? w->psd_gbps : w->psl_gbps) / base.stream_gbps[UNPINNED];
}

/* The baseline x_wire divides by, for the CSV. */
static const char *wire_name(int fig, double *value)
{
    if (is_latency(fig)) {
        *value = base.rtt_p50_us[UNPINNED];
        return "rtt_p50_us";
    }
    if (fig == F_REQS) {
        *value = 1e6 / base.rtt_p50_us[UNPINNED];
        return "pingpong_req_per_s";
    }
    *value = base.stream_gbps[UNPINNED];
    return "tcp_stream_gb_per_s";
}

/* The rows and issue 12's targets: every row psd / ps-lite >= 1.3 (rates)
 * or <= 0.77 (latencies), but >= 4 for 65,536 keys x 1; 16 MiB also
 * >= 0.9x the TCP stream (pushpull 0.5x) and 65,536 keys x 1 also >= 40 M
 * keys/s. */
static void rows_build(void)
{
    for (int i = 0; i < npairs; i++) {
        const pair *p = &pairs[i];
        int figs[3], nf = pair_figs(p, figs);
        for (int k = 0; k < nf; k++) {
            sbs_row *w = &rows[nrows++];
            double lo, hi;
            memset(w, 0, sizeof *w);
            w->p = p;
            w->fig = figs[k];
            w->psl = rounds_median(p->psl, w->fig, &w->psl_lo, &w->psl_hi);
            w->psd = rounds_median(p->psd, w->fig, &w->psd_lo, &w->psd_hi);
            w->psl_gbps = rounds_median(p->psl, F_GBPS, &lo, &hi);
            w->psd_gbps = rounds_median(p->psd, F_GBPS, &lo, &hi);
            w->higher = !is_latency(w->fig);
            w->goal = p->d->load == L_S1 ? 4.0 : w->higher ? 1.3 : 0.77;
            const char *pl = loads[p->d->load].label;
            const char *op = op_name[p->op];
            char what[80];
            if (p->d->load == L_16M) {
                double lim = p->op == OP_PUSHPULL ? 0.5 : 0.9;
                snprintf(what, sizeof what, "16 MiB %s, 1 in flight", op);
                target *t = add_target(12, what, x_wire(w, 1), lim, 1);
                snprintf(t->figure, sizeof t->figure, "%.3f GB/s = %.2fx TCP",
                         w->psd, t->value);
                snprintf(t->goal, sizeof t->goal, ">= %.2fx TCP stream", lim);
            }
            if (p->d->load == L_S1) {
                snprintf(what, sizeof what, "65536 keys x 1 %s, 1 in flight",
                         op);
                target *t = add_target(12, what, w->psd, 40, 1);
                snprintf(t->figure, sizeof t->figure, "%.2f M keys/s", w->psd);
                snprintf(t->goal, sizeof t->goal, ">= 40 M keys/s");
            }
            snprintf(what, sizeof what, "%s %s %s, %d in flight, %s",
                     p->d->id, pl, op, p->d->window, fig_name[w->fig]);
            double ratio = w->psd / w->psl;
            w->t = add_target(12, what, have_pslite ? ratio : NAN, w->goal,
                              w->higher);
            /* Issue 12 names these; the other rows share one line. */
            w->t->row = !(p->d->load == L_16M || p->d->load == L_S1 ||
                          (p->d->load == L_4K && p->d->window == 1 &&
                           w->fig == F_P50));
            snprintf(w->t->figure, sizeof w->t->figure, "%.2fx ps-lite",
                     ratio);
            snprintf(w->t->goal, sizeof w->t->goal, "%s %.2fx ps-lite",
                     w->higher ? ">=" : "<=", w->goal);
        }
    }
}

/* Issue 12 item 3: 64 requests of 65,536 keys x 1 float in flight must
 * not be slower per key than 1 in flight, on one node and on two (the
 * matrix's cells, 1 worker, unpinned). */
static void inflight_targets(void)
{
    for (int nodes = 1; nodes <= 2; nodes++)
        for (int op = OP_PUSH; op <= OP_PULL; op++) {
            cell *one = find(L_S1, (op_kind)op, 1, 1, nodes, 0);
            cell *many = find(L_S1, (op_kind)op, 64, 1, nodes, 0);
            int ok = one && many && !one->failed && !many->failed &&
                     !one->errors && !many->errors;
            char w[80];
            snprintf(w, sizeof w, "65536 keys x 1 %s, %d node%s, 64 / 1 in "
                     "flight", op_name[op], nodes, nodes > 1 ? "s" : "");
            target *t = add_target(12, w, ok ? many->mkeys / one->mkeys : NAN,
                                   1.0, 1);
            snprintf(t->figure, sizeof t->figure, "%.2f / %.2f M keys/s = "
                     "%.2fx", ok ? many->mkeys : NAN, ok ? one->mkeys : NAN,
                     t->value);
            snprintf(t->goal, sizeof t->goal, ">= 1.00x per key");
        }
}

/* Issue 12 item 4: the split cells' 4 KiB p50 against the split 64 B RTT
 * (the unpinned ratio in the figure, for reference). */
static void split_targets(void)
{
    if (!split_phase)
        return;
    for (int op = OP_PUSH; op <= OP_PULL; op++) {
        cell *c = find(L_4K, (op_kind)op, 1, 1, 1, SPLIT);
        int ok = c && !c->failed && !c->errors;
        char w[80];
        snprintf(w, sizeof w, "4 KiB %s, 1 in flight, split", op_name[op]);
        target *t = add_target(12, w, ok ? x_rtt(c, SPLIT) : NAN, 1.5, 0);
        snprintf(t->figure, sizeof t->figure, "p50 %.1f us = %.2fx split RTT "
                 "(%.2fx unpinned)", ok ? c->p50 : NAN, t->value,
                 ok ? x_rtt(c, UNPINNED) : NAN);
        snprintf(t->goal, sizeof t->goal, "<= 1.5x split RTT");
    }
}

/* Prints a ratio in a 9-wide column, small ones in exponent form. */
static void print_x(double v)
{
    if (isnan(v) || isinf(v))
        printf(" %8s", "n/a");
    else if (v >= 0.01)
        printf(" %7.2fx", v);
    else
        printf(" %7.1ex", v);
}

/* The side-by-side table, from rows_build's rows. */
static void print_side_by_side(void)
{
    printf("\n== psd and ps-lite side by side (1 node, 1 worker, unpinned; "
           "%s of %d round%s) ==\n", opt_rounds > 1 ? "median" : "figures",
           opt_rounds, opt_rounds > 1 ? "s" : "");
    if (!have_pslite)
        printf("ps-lite not measured in this run: psd alone\n");
    printf("%-2s %-8s %-8s %4s %-8s %12s %12s %8s %-14s %8s %8s\n", "id",
           "payload", "op", "infl", "figure", "ps-lite", "psd", "psd/psl",
           "goal", "psl/wire", "psd/wire");
    for (int i = 0; i < nrows; i++) {
        const sbs_row *w = &rows[i];
        const pair *p = w->p;
        char goal[32];
        snprintf(goal, sizeof goal, "%s%.2f %s", w->higher ? ">=" : "<=",
                 w->goal, verdict(w->t));
        printf("%-2s %-8s %-8s %4d %-8s", p->d->id, loads[p->d->load].label,
               op_name[p->op], p->d->window, fig_name[w->fig]);
        print_fig(w->psl, w->fig);
        print_fig(w->psd, w->fig);
        print_x(w->psd / w->psl);
        printf(" %-14s", goal);
        print_x(x_wire(w, 0));
        print_x(x_wire(w, 1));
        printf("\n");
    }
    printf("wire (raw TCP on loopback, unpinned, measured at the start of this"
           " run): GB/s and Mkeys/s\nas GB/s of floats / TCP stream (%.2f "
           "GB/s); req/s / 64 B ping-pong round trips per second\n(%.0f/s); "
           "latencies"
           " / ping-pong RTT p50 (%.1f us).\n", base.stream_gbps[UNPINNED],
           1e6 / base.rtt_p50_us[UNPINNED], base.rtt_p50_us[UNPINNED]);
    printf("load average (1 min) %.2f when the phase started, %.2f when it "
           "ended, on %d CPUs\n(psbench's own processes count in it too).\n",
           pair_load[0], pair_load[1], ncpu);
    if (opt_rounds > 1) {
        printf("range over the rounds (min-max), ps-lite | psd:\n");
        for (int i = 0; i < nrows; i++) {
            const sbs_row *w = &rows[i];
            printf("  %-2s %-8s %-8s %-8s", w->p->d->id,
                   loads[w->p->d->load].label, op_name[w->p->op],
                   fig_name[w->fig]);
            print_fig(w->psl_lo, w->fig);
            print_fig(w->psl_hi, w->fig);
            printf(" |");
            print_fig(w->psd_lo, w->fig);
            print_fig(w->psd_hi, w->fig);
            printf("\n");
        }
    }
}

/* One issue's targets with PASS or MISS; for issue 12, the table rows'
 * own goals as one line plus a line per miss. */
static void print_targets(int issue)
{
    int met = 0, have = 0, rows_met = 0, rows_have = 0, nrow = 0, fw = 31;
    for (int i = 0; i < ntargets; i++)
        if (targets[i].issue == issue && !targets[i].row &&
            (int)strlen(targets[i].figure) > fw)
            fw = (int)strlen(targets[i].figure);
    for (int i = 0; i < ntargets; i++) {
        target *t = &targets[i];
        if (t->issue != issue)
            continue;
        have += t->have;
        met += pass(t);
        if (t->row) {
            nrow++;
            rows_have += t->have;
            rows_met += pass(t);
            continue;
        }
        printf("%-45s %-*s %-21s %s\n", t->what, fw, t->figure, t->goal,
               verdict(t));
    }
    if (nrow) {
        printf("%-45s %d of %d rows PASS", "the other rows of the table",
               rows_met, rows_have);
        if (rows_have < nrow)
            printf(" (%d n/a)", nrow - rows_have);
        printf("  (>= 1.30x ps-lite for rates, <= 0.77x for latencies)\n");
        for (int i = 0; i < ntargets; i++) {
            target *t = &targets[i];
            if (t->issue == issue && t->row && t->have && !pass(t))
                printf("  MISS %-40s %s\n", t->what, t->figure);
        }
    }
    printf("issue %d targets met: %d of %d\n", issue, met, have);
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
    if (opt_matrix || opt_memory) {
        printf("\n== issue 3 targets (informational: a miss never fails the "
               "build) ==\n");
        print_targets(3);
    }
    if (npairs)
        print_side_by_side();
    if (npairs || split_phase || opt_matrix) {
        printf("\n== issue 12 targets: ratios to ps-lite and to the wire from "
               "this run (informational) ==\n");
        print_targets(12);
    }
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
    for (size_t i = 0; i < NRR && opt_baselines; i++) {
        fprintf(f, "baseline,tcp_rr,,,%zu,,1,,,0,", rr_bytes[i]);
        cnum(f, base.rr_gbps[i] * 1e9 / (double)rr_bytes[i], 1);
        cnum(f, base.rr_gbps[i], 4);
        fputc(',', f);
        cnum(f, base.rr_p50_us[i], 2);
        fprintf(f, ",,,,,,,,,,,,,,\n");
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
        fprintf(f, "}, ");
    }
    fprintf(f, "\"tcp_rr_unpinned\": [");
    for (size_t i = 0; i < NRR; i++) {
        fprintf(f, "%s{\"request_bytes\": %zu, ", i ? ", " : "", rr_bytes[i]);
        jnum(f, "gb_per_s", base.rr_gbps[i], ", ");
        jnum(f, "p50_us", base.rr_p50_us[i], "}");
    }
    fprintf(f, "]},\n  \"skipped\": [");
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
                "\"pinned\": %d, \"requests\": %ld, \"errors\": %ld, ",
                first ? "" : ",\n", op_name[c->op], loads[c->load].label,
                tables[loads[c->load].tab].name, payload_bytes(c),
                loads[c->load].nkeys, c->window, c->workers, c->nodes,
                c->pinned, c->count, c->errors);
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
        fprintf(f, "%s    {\"issue\": %d, \"what\": \"%s\", \"figure\": \"%s\", "
                "\"goal\": \"%s\", ", i ? ",\n" : "", t->issue, t->what,
                t->figure, t->goal);
        jnum(f, "value", t->have ? t->value : NAN, ", ");
        jnum(f, "limit", t->limit, ", ");
        fprintf(f, "\"verdict\": \"%s\"}",
                !t->have ? "n/a" : pass(t) ? "PASS" : "MISS");
    }
    fprintf(f, "\n  ],\n  \"failures\": %d\n}\n", failures);
    fclose(f);
}

/* BUILD/side_by_side.csv: one line per row of the side-by-side table.
 * The columns are listed in tests/bench/README.md. */
static void write_sbs_csv(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        failures++;
        return;
    }
    fprintf(f, "cell,payload,payload_bytes,op,inflight,figure,pslite,psd,"
            "psd_over_pslite,goal_vs_pslite,verdict,wire_name,wire_value,"
            "pslite_x_wire,psd_x_wire,pslite_gb_per_s,psd_gb_per_s,rounds,"
            "pslite_min,pslite_max,psd_min,psd_max\n");
    for (int i = 0; i < nrows; i++) {
        const sbs_row *w = &rows[i];
        const pair *p = w->p;
        fprintf(f, "%s,%s,%zu,%s,%d,%s", p->d->id, loads[p->d->load].label,
                payload_bytes(&p->proto), op_name[p->op], p->d->window,
                fig_key[w->fig]);
        cnum(f, w->psl, 4);
        cnum(f, w->psd, 4);
        cnum(f, w->psd / w->psl, 4);
        double wv;
        const char *wn = wire_name(w->fig, &wv);
        fprintf(f, ",%s%.2f,%s,%s", w->higher ? ">=" : "<=", w->goal,
                verdict(w->t), wn);
        cnum(f, wv, 4);
        cnum(f, x_wire(w, 0), 6);
        cnum(f, x_wire(w, 1), 6);
        cnum(f, w->psl_gbps, 6);
        cnum(f, w->psd_gbps, 6);
        fprintf(f, ",%d", opt_rounds);
        cnum(f, w->psl_lo, 4);
        cnum(f, w->psl_hi, 4);
        cnum(f, w->psd_lo, 4);
        cnum(f, w->psd_hi, 4);
        fputc('\n', f);
    }
    fclose(f);
}

/* BUILD/side_by_side.json: the same rows and issue 12's targets. */
static void write_sbs_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        failures++;
        return;
    }
    fprintf(f, "{\n  \"cpus\": %d, \"rounds\": %d, \"cell_ms\": %d, "
            "\"warmup_ms\": %d, \"pslite_measured\": %s,\n  ", ncpu,
            opt_rounds, opt_pair_ms, opt_pair_warm_ms,
            have_pslite ? "true" : "false");
    jnum(f, "load_1min_start", pair_load[0], ", ");
    jnum(f, "load_1min_end", pair_load[1], ",\n  ");
    jnum(f, "tcp_stream_gb_per_s", base.stream_gbps[UNPINNED], ", ");
    jnum(f, "rtt_p50_us", base.rtt_p50_us[UNPINNED], ",\n");
    fprintf(f, "  \"rows\": [\n");
    for (int i = 0; i < nrows; i++) {
        const sbs_row *w = &rows[i];
        const pair *p = w->p;
        fprintf(f, "%s    {\"cell\": \"%s\", \"payload\": \"%s\", "
                "\"payload_bytes\": %zu, \"op\": \"%s\", \"inflight\": %d, "
                "\"figure\": \"%s\", ", i ? ",\n" : "", p->d->id,
                loads[p->d->load].label, payload_bytes(&p->proto),
                op_name[p->op], p->d->window, fig_key[w->fig]);
        jnum(f, "pslite", w->psl, ", ");
        jnum(f, "psd", w->psd, ", ");
        jnum(f, "psd_over_pslite", w->psd / w->psl, ", ");
        jnum(f, "goal_vs_pslite", w->goal, ", ");
        fprintf(f, "\"verdict\": \"%s\", ", verdict(w->t));
        jnum(f, "pslite_x_wire", x_wire(w, 0), ", ");
        jnum(f, "psd_x_wire", x_wire(w, 1), ", ");
        jnum(f, "pslite_gb_per_s", w->psl_gbps, ", ");
        jnum(f, "psd_gb_per_s", w->psd_gbps, "}");
    }
    fprintf(f, "\n  ],\n  \"targets\": [\n");
    int first = 1;
    for (int i = 0; i < ntargets; i++) {
        const target *t = &targets[i];
        if (t->issue != 12)
            continue;
        fprintf(f, "%s    {\"what\": \"%s\", \"figure\": \"%s\", "
                "\"goal\": \"%s\", ", first ? "" : ",\n", t->what,
                t->figure, t->goal);
        jnum(f, "value", t->have ? t->value : NAN, ", ");
        jnum(f, "limit", t->limit, ", ");
        fprintf(f, "\"verdict\": \"%s\"}", verdict(t));
        first = 0;
    }
    fprintf(f, "\n  ]\n}\n");
    fclose(f);
}

/* ---- main ----------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: psbench [--psd PATH] [--out DIR] [--ms N] [--warm-ms N]\n"
            "               [--timeout-ms N]\n"
            "               [--no-baselines] [--no-split] [--no-matrix]\n"
            "               [--no-memory]\n"
            "               [--sparse-dim-1e7 D] [--op OP] [--payload LABEL]\n"
            "               [--inflight N] [--workers N] [--nodes N]\n"
            "               [--pslite PATH] [--no-side-by-side] [--rounds N]\n"
            "               [--pair-ms N] [--pair-warm-ms N]\n"
            "               [--fairness [--fair-heavy-inflight N] [--fair-split]]\n"
            "               [--scale] [--growth ROWS]\n"
            "               [--sparse-curve MAXEXP] [--sparse-keys N]\n"
            "The filters (--op ... --nodes) keep only the matching cells.\n"
            "--pslite PATH: ps-lite's psl_bench, measured on the same cells\n"
            "as psd, alternately (tests/bench/run_bench.sh builds it).\n"
            "The split phase (after the baselines; --no-split skips it): 4 B\n"
            "and 4 KiB push/pull, 1 in flight, psd on CPU 0 and the worker on\n"
            "CPU 1 (issue 12 item 4).\n"
            "--server-conf TEXT adds lines to the [server] section of every\n"
            "generated ini (for example \"max_output = 1G\").\n"
            "--fairness: a light client's 4 KiB pull p50/p99 alone and while\n"
            "another client streams 16 MiB pushes (issue 12 item 5);\n"
            "--fair-split pins psd to CPU 0 and both clients to CPU 1.\n"
            "--scale: 4 vs 64 worker processes, 4 KiB pulls, 8 in flight, 2\n"
            "nodes; psd's RSS for 1,000 idle connections (item 6).\n"
            "--growth ROWS: pushes of 65,536 new keys into one sparse shard\n"
            "up to ROWS rows, beside a light client's 1-key pulls: the\n"
            "slowest push and pull, where the shard's slots double.\n"
            "--sparse-curve E: RSS per key of a sparse dim-8 table of 10^6\n"
            "... 10^E keys against its raw floats (item 6); --sparse-keys N\n"
            "measures N keys too (up to 8 times).\n"
            "Add --no-baselines --no-split --no-matrix --no-memory\n"
            "--no-side-by-side to run only those.\n"
            "Starts psd processes itself; writes DIR/bench.csv, "
            "DIR/bench.json,\nDIR/side_by_side.csv and "
            "DIR/side_by_side.json.\n");
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
        else if (!strcmp(a, "--fairness"))
            opt_fairness = 1;
        else if (!strcmp(a, "--fair-heavy-inflight") && i + 1 < argc)
            opt_fair_heavy_window = atoi(argv[++i]);
        else if (!strcmp(a, "--sparse-curve") && i + 1 < argc)
            opt_sparse_curve = atoi(argv[++i]);
        else if (!strcmp(a, "--sparse-keys") && i + 1 < argc &&
                 opt_nsparse_keys < 8)
            opt_sparse_keys[opt_nsparse_keys++] =
                strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--fair-split"))
            opt_fair_split = 1;
        else if (!strcmp(a, "--scale"))
            opt_scale = 1;
        else if (!strcmp(a, "--growth") && i + 1 < argc)
            opt_growth = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--no-baselines"))
            opt_baselines = 0;
        else if (!strcmp(a, "--server-conf") && i + 1 < argc)
            opt_server_conf = argv[++i];
        else if (!strcmp(a, "--no-split"))
            opt_split = 0;
        else if (!strcmp(a, "--no-matrix"))
            opt_matrix = 0;
        else if (!strcmp(a, "--no-memory"))
            opt_memory = 0;
        else if (!strcmp(a, "--no-side-by-side"))
            opt_pairs = 0;
        else if (!strcmp(a, "--pslite") && i + 1 < argc)
            opt_pslite = argv[++i];
        else if (!strcmp(a, "--rounds") && i + 1 < argc)
            opt_rounds = atoi(argv[++i]);
        else if (!strcmp(a, "--pair-ms") && i + 1 < argc)
            opt_pair_ms = atoi(argv[++i]);
        else if (!strcmp(a, "--pair-warm-ms") && i + 1 < argc)
            opt_pair_warm_ms = atoi(argv[++i]);
        else {
            usage();
            return 2;
        }
    }
    if (opt_ms < 10 || opt_warm_ms < 0 || opt_mem_sparse_dim_big < 1 ||
        opt_pair_ms < 10 || opt_pair_warm_ms < 0 || opt_rounds < 1 ||
        opt_rounds > MAX_ROUNDS) {
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
    /* The results go to --out: made here (one level), so that a run is
     * not lost to a folder that does not exist yet. */
    if (mkdir(opt_out, 0777) && errno != EEXIST) {
        fprintf(stderr, "psbench: --out %s: %s\n", opt_out, strerror(errno));
        return 1;
    }
    if (access(opt_psd, X_OK)) {
        fprintf(stderr, "psbench: %s: %s\n", opt_psd, strerror(errno));
        return 1;
    }
    if (opt_pslite && access(opt_pslite, X_OK)) {
        fprintf(stderr, "psbench: %s: %s\n", opt_pslite, strerror(errno));
        return 1;
    }
    setenv("PSD_BIN", opt_psd, 1);   /* the psd tests/cluster.c starts */
    uint64_t t0 = now_ns();
    printf("psbench: %d CPUs, psd %s\n\n", ncpu, opt_psd);
    if (opt_baselines)
        measure_baselines();
    if (opt_split)
        run_split();
    if (opt_pairs)
        run_pairs();
    if (opt_matrix)
        run_matrix();
    if (opt_memory)
        run_memory();
    if (opt_fairness)
        run_fairness();
    if (opt_scale)
        run_scale();
    if (opt_growth)
        run_growth();
    if (opt_sparse_curve >= 6 || opt_nsparse_keys)
        run_sparse_curve();
    targets_build();
    rows_build();
    inflight_targets();
    split_targets();
    print_summary();
    char path[512];
    snprintf(path, sizeof path, "%s/bench.csv", opt_out);
    write_csv(path);
    snprintf(path, sizeof path, "%s/bench.json", opt_out);
    write_json(path);
    printf("results: %s/bench.csv, %s/bench.json", opt_out, opt_out);
    if (npairs) {
        snprintf(path, sizeof path, "%s/side_by_side.csv", opt_out);
        write_sbs_csv(path);
        snprintf(path, sizeof path, "%s/side_by_side.json", opt_out);
        write_sbs_json(path);
        printf(", %s/side_by_side.csv, %s/side_by_side.json", opt_out,
               opt_out);
    }
    printf("; %.0f s in all", (double)(now_ns() - t0) / 1e9);
    if (npairs)
        printf(" (side by side %.0f s)", pair_secs);
    printf("\n");
    return failures ? 1 : 0;
}
