/* zcbench: whether MSG_ZEROCOPY would speed up psd's large sends on this
 * machine, measured on a raw TCP stream over loopback with nothing else in
 * the way: the best case for it (tests/bench/README.md, section 5c).
 *
 * A forked receiver reads 256 KiB at a time; the sender sends a 16 MiB
 * buffer over and over, in sends of 256 KiB (the size psd and the client
 * write in) and of 1 MiB, once plainly and once with
 * MSG_ZEROCOPY (reaping the completions from the error queue, and waiting
 * for all of them before it touches the buffer again, as psd would have
 * to before a row it sent by reference changes). Both ways alternate for
 * several rounds; it prints the median GB/s and sender CPU seconds per
 * GB of each, their ratio, and whether the kernel said it copied the
 * "zero-copy" sends after all (SO_EE_CODE_ZEROCOPY_COPIED: on loopback
 * and veth the data is delivered to a local socket, which takes a copy).
 *
 * Usage: zcbench [--ms N] [--rounds N]    (about 20 s with the defaults) */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/errqueue.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define BUF_BYTES (16u << 20)
#define READ_BYTES (256u << 10)
#define MAX_ROUNDS 9

static int opt_ms = 1500, opt_rounds = 3;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* What one cell-round measured. */
typedef struct result {
    double gbps, cpu_per_gb;
    long notices, copied;    /* completion notices; those saying "copied" */
} result;

/* Takes the completion notices queued on s; each covers the sends
 * numbered ee_info..ee_data. Returns how many sends they completed. */
static unsigned reap(int s, result *r)
{
    unsigned done = 0;
    for (;;) {
        char ctl[256];
        struct msghdr m = { .msg_control = ctl,
                            .msg_controllen = sizeof ctl };
        if (recvmsg(s, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
            return done;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c;
             c = CMSG_NXTHDR(&m, c)) {
            if (!(c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR))
                continue;
            struct sock_extended_err e;
            memcpy(&e, CMSG_DATA(c), sizeof e);
            if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            done += e.ee_data - e.ee_info + 1;
            r->notices++;
            r->copied += (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0;
        }
    }
}

/* Sends still owed a completion notice, after `done` more came. */
static unsigned settle(unsigned pending, unsigned done)
{
    return done > pending ? 0 : pending - done;
}

/* A connected pair over loopback: *tx for this process, the receiver
 * forked (reading until EOF) as *child. 0 or -1. */
static int pair(int *tx, pid_t *child)
{
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t alen = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) ||
        listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &alen)) {
        perror("zcbench: listen");
        return -1;
    }
    *child = fork();
    if (*child < 0) {
        perror("zcbench: fork");
        close(l);
        return -1;
    }
    if (*child == 0) {
        close(l);
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a))
            _exit(1);
        char *b = malloc(READ_BYTES);
        while (b && read(s, b, READ_BYTES) > 0)
            ;
        _exit(0);
    }
    *tx = accept(l, NULL, NULL);
    close(l);
    return *tx < 0 ? -1 : 0;
}

/* Sends buf over and over for opt_ms in sends of `chunk` bytes, with
 * MSG_ZEROCOPY when zc. 0, or -1 when the kernel refuses (said why). */
static int run_cell(char *buf, size_t chunk, int zc, result *r)
{
    int s, one = 1;
    pid_t child;
    memset(r, 0, sizeof *r);
    if (pair(&s, &child))
        return -1;
    if (zc && setsockopt(s, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) {
        fprintf(stderr, "zcbench: SO_ZEROCOPY: %s\n", strerror(errno));
        close(s);
        waitpid(child, NULL, 0);
        return -1;
    }
    double t0 = now_s(), c0 = cpu_s();
    double sent = 0;
    unsigned pending = 0;
    while (now_s() - t0 < opt_ms / 1e3) {
        for (size_t off = 0; off < BUF_BYTES;) {
            size_t len = BUF_BYTES - off < chunk ? BUF_BYTES - off : chunk;
            ssize_t k = send(s, buf + off, len,
                             MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0));
            if (k < 0 && errno != ENOBUFS && errno != EAGAIN &&
                errno != EINTR) {
                perror("zcbench: send");
                close(s);
                waitpid(child, NULL, 0);
                return -1;
            }
            if (k < 0) {
                /* Out of optmem for notices: take some back first. */
                struct pollfd p = { s, 0, 0 };
                poll(&p, 1, 10);
            } else {
                off += (size_t)k;
                sent += (double)k;
                pending += zc;
            }
            if (zc)
                pending = settle(pending, reap(s, r));
        }
        /* The buffer is written again only once every send of it is
         * complete: what psd would owe a row it sent by reference. */
        double t_drain = now_s();
        while (zc && pending) {
            struct pollfd p = { s, 0, 0 };
            poll(&p, 1, 100);
            pending = settle(pending, reap(s, r));
            if (pending && now_s() - t_drain > 10) {
                fprintf(stderr, "zcbench: %u sends still not complete "
                        "after 10 s\n", pending);
                close(s);
                waitpid(child, NULL, 0);
                return -1;
            }
        }
    }
    double dt = now_s() - t0, dc = cpu_s() - c0;
    shutdown(s, SHUT_WR);
    close(s);
    waitpid(child, NULL, 0);
    r->gbps = sent / dt / 1e9;
    r->cpu_per_gb = dc / (sent / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            opt_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            opt_rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: zcbench [--ms N] [--rounds N]\n");
            return 2;
        }
    }
    if (opt_ms < 100 || opt_rounds < 1 || opt_rounds > MAX_ROUNDS) {
        fprintf(stderr, "zcbench: --ms is at least 100, --rounds 1..%d\n",
                MAX_ROUNDS);
        return 2;
    }
    char *buf = aligned_alloc(4096, BUF_BYTES);
    if (!buf)
        return 1;
    memset(buf, 1, BUF_BYTES);
    static const size_t chunks[] = { 256u << 10, 1u << 20 };
    printf("== MSG_ZEROCOPY against plain sends: loopback TCP stream, "
           "16 MiB buffer, %d rounds of %d ms, medians ==\n", opt_rounds,
           opt_ms);
    printf("%-10s %-10s %8s %12s %s\n", "send size", "way", "GB/s",
           "cpu s/GB", "kernel copied");
    for (size_t ci = 0; ci < sizeof chunks / sizeof *chunks; ci++) {
        double g[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS];
        long notices = 0, copied = 0;
        for (int r = 0; r < opt_rounds; r++)
            for (int zc = 0; zc < 2; zc++) {
                result res;
                if (run_cell(buf, chunks[ci], zc, &res)) {
                    /* A benchmark, not a test: say so and stop. */
                    printf("zcbench: %s sends cannot be measured here\n",
                           zc ? "MSG_ZEROCOPY" : "plain");
                    free(buf);
                    return 0;
                }
                g[zc][r] = res.gbps;
                cpu[zc][r] = res.cpu_per_gb;
                notices += res.notices;
                copied += res.copied;
            }
        double mg[2], mc[2];
        for (int zc = 0; zc < 2; zc++) {
            mg[zc] = median(g[zc], opt_rounds);
            mc[zc] = median(cpu[zc], opt_rounds);
        }
        printf("%-10s %-10s %8.2f %12.3f\n",
               chunks[ci] >> 20 ? "1 MiB" : "256 KiB", "plain", mg[0], mc[0]);
        printf("%-10s %-10s %8.2f %12.3f %ld of %ld notices\n",
               chunks[ci] >> 20 ? "1 MiB" : "256 KiB", "zerocopy", mg[1],
               mc[1], copied, notices);
        printf("%-10s zerocopy / plain: %.2fx GB/s, %.2fx sender cpu "
               "per GB\n", "", mg[1] / mg[0], mc[1] / mc[0]);
    }
    free(buf);
    return 0;
}
