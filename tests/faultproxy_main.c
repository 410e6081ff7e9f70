/* faultproxy: the fault-injection proxy of tests/faultproxy.h as a
 * command for scripts. It prints "listening on 127.0.0.1:PORT" once
 * ready, runs until SIGTERM or SIGINT, then prints its counters. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "faultproxy.h"

static const char usage[] =
    "usage: faultproxy --to HOST:PORT [--listen PORT] [--seed N]\n"
    "       [--drop P] [--dup P] [--reorder P] [--corrupt P]\n"
    "       [--delay MS] [--jitter MS] [--skip-frames N]\n"
    "       [--dir up|down|both]\n"
    "Probabilities P are per frame, 0..1; the faults apply to --dir\n"
    "(default both). Without --seed the seed comes from the clock; it is\n"
    "printed on stderr either way.\n";

/* Prints "faultproxy: " what arg, then the usage, and exits with 2. */
static void die(const char *what, const char *arg)
{
    fprintf(stderr, "faultproxy: %s%s\n%s", what, arg, usage);
    exit(2);
}

static double prob(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0 && v <= 1))
        die("not a probability in 0..1: ", s);
    return v;
}

static unsigned long long number(const char *s, unsigned long long max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        die("not a number in range: ", s);
    return v;
}

static void print_dir(const char *name, const fp_dir_counts *d)
{
    printf("%s: frames %llu forwarded %llu dropped %llu duplicated %llu "
           "reordered %llu corrupted %llu blackholed %llu bytes in %llu "
           "out %llu passthrough %llu\n",
           name, (unsigned long long)d->frames,
           (unsigned long long)d->forwarded, (unsigned long long)d->dropped,
           (unsigned long long)d->duplicated,
           (unsigned long long)d->reordered,
           (unsigned long long)d->corrupted,
           (unsigned long long)d->blackholed,
           (unsigned long long)d->bytes_in, (unsigned long long)d->bytes_out,
           (unsigned long long)d->passthrough);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "to", required_argument, NULL, 't' },
        { "listen", required_argument, NULL, 'l' },
        { "seed", required_argument, NULL, 's' },
        { "drop", required_argument, NULL, 'd' },
        { "dup", required_argument, NULL, 'u' },
        { "reorder", required_argument, NULL, 'r' },
        { "corrupt", required_argument, NULL, 'c' },
        { "delay", required_argument, NULL, 'D' },
        { "jitter", required_argument, NULL, 'J' },
        { "skip-frames", required_argument, NULL, 'k' },
        { "dir", required_argument, NULL, 'x' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    fp_faults f;
    memset(&f, 0, sizeof f);
    char host[256] = "";
    int port = 0, listen_port = 0, dir = FP_BOTH, seeded = 0;
    unsigned long long seed = 0;
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't': {
            const char *colon = strrchr(optarg, ':');
            if (!colon || colon == optarg ||
                (size_t)(colon - optarg) >= sizeof host)
                die("--to wants HOST:PORT, got ", optarg);
            memcpy(host, optarg, (size_t)(colon - optarg));
            host[colon - optarg] = '\0';
            port = (int)number(colon + 1, 65535);
            break;
        }
        case 'l': listen_port = (int)number(optarg, 65535); break;
        case 's': seed = number(optarg, ~0ULL); seeded = 1; break;
        case 'd': f.drop = prob(optarg); break;
        case 'u': f.dup = prob(optarg); break;
        case 'r': f.reorder = prob(optarg); break;
        case 'c': f.corrupt = prob(optarg); break;
        case 'D': f.delay_ms = (unsigned)number(optarg, 3600000); break;
        case 'J': f.jitter_ms = (unsigned)number(optarg, 3600000); break;
        case 'k': f.skip_frames = (unsigned)number(optarg, ~0U); break;
        case 'x':
            if (!strcmp(optarg, "up"))
                dir = FP_UP;
            else if (!strcmp(optarg, "down"))
                dir = FP_DOWN;
            else if (!strcmp(optarg, "both"))
                dir = FP_BOTH;
            else
                die("--dir wants up, down or both, got ", optarg);
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc)
        die("unexpected argument ", argv[optind]);
    if (!port)
        die("--to HOST:PORT is required", "");
    if (!seeded)
        seed = (unsigned long long)time(NULL) ^
               ((unsigned long long)getpid() << 32);

    /* Blocked before the proxy's thread starts, so it inherits the mask
     * and sigwait below is the only place the signals arrive. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    char err[256];
    fp_proxy *p = fp_start_at(listen_port, host, port, seed, err, sizeof err);
    if (!p) {
        fprintf(stderr, "faultproxy: %s\n", err);
        return 1;
    }
    fp_set(p, dir, &f);
    fprintf(stderr, "faultproxy: seed %llu, to %s:%d\n", seed, host, port);
    printf("listening on 127.0.0.1:%d\n", fp_port(p));
    fflush(stdout);

    int sig;
    sigwait(&set, &sig);
    fp_counts n;
    fp_stats(p, &n);
    fp_stop(p);
    printf("connections: accepted %llu refused %llu reset %llu\n",
           (unsigned long long)n.accepted, (unsigned long long)n.refused,
           (unsigned long long)n.reset);
    print_dir("up", &n.dir[FP_UP]);
    print_dir("down", &n.dir[FP_DOWN]);
    return 0;
}
