/* `make soak`: rounds of random faults against a 2-node cluster behind
 * fault proxies, under ASan and UBSan, each round checked with the
 * counter oracle (tests/oracle.h). Not part of `make test`: it runs as
 * long as it is told. Prints one line per round and a summary; exits 1 if
 * any round broke an invariant.
 * Usage: soak [--rounds N] [--seed S] [--pushes P] */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "faultproxy.h"
#include "oracle.h"

/* The journal with fsync = always: a node killed and restarted keeps
 * every push it acknowledged, so every round is checked exactly. */
#define SERVER "[server]\nheartbeat_ms = 100\npeer_timeout_ms = 400\n" \
               "durability = log\nfsync = always\n"
#define TABLES "[table." ORACLE_TABLE "]\ndim = 1\n"

typedef enum {
    F_DROP, F_DUP, F_REORDER, F_CORRUPT, F_DELAY, F_BLACKHOLE, F_CUT,
    F_STOP, F_KILL, F_NKINDS
} fault_kind;

static const char *const names[F_NKINDS] = {
    "drop 10-30%", "duplicate 30%", "reorder 30%", "corrupt 5%",
    "delay 20+-15 ms", "blackhole 0.5 s", "cut mid-frame", "SIGSTOP 0.5 s",
    "kill -9 and restart"
};

static uint64_t rng;

static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void sleep_ms(int ms)
{
    struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

typedef struct round_ctx {
    test_cluster *c;
    fp_proxy **p;
    fault_kind kind;
    int node;
} round_ctx;

/* The fault of the round, applied while the clients run. Called on the
 * main thread: a restarted psd dies with the thread that forked it. */
static void inject(round_ctx *r)
{
    fp_faults f = { .skip_frames = 1 };
    sleep_ms(50);
    switch (r->kind) {
    case F_DROP: f.drop = 0.1 + (double)(next() % 21) / 100.0; break;
    case F_DUP: f.dup = 0.3; break;
    case F_REORDER: f.reorder = 0.3; break;
    case F_CORRUPT: f.corrupt = 0.05; break;
    case F_DELAY: f.delay_ms = 20; f.jitter_ms = 15; break;
    case F_BLACKHOLE: f.blackhole = 1; break;
    case F_CUT: f.cut_after = 1 + next() % 20000; break;
    case F_STOP:
        kill(r->c->pid[r->node], SIGSTOP);
        sleep_ms(500);
        kill(r->c->pid[r->node], SIGCONT);
        return;
    case F_KILL:
        cluster_kill(r->c, r->node, SIGKILL);
        sleep_ms(200);
        if (cluster_restart(r->c, r->node))
            printf("node %d did not restart\n", r->node);
        return;
    default: break;
    }
    fp_set(r->p[r->node], FP_BOTH, &f);
    if (r->kind == F_BLACKHOLE) {
        sleep_ms(500);
        fp_set(r->p[r->node], FP_BOTH, &(fp_faults){ 0 });
    }
}

typedef struct clients {
    const char *spec;
    ps_options opt;
    int pushes, acked, failed;
} clients;

static void *run_clients(void *arg)
{
    clients *k = arg;
    oracle_run_many(k->spec, &k->opt, 3, k->pushes, 8, &k->acked,
                    &k->failed);
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = 20, pushes = 200;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--pushes"))
            pushes = atoi(argv[i + 1]);
    }
    rng = seed;
    printf("soak: %d rounds, seed %llu (--seed replays it)\n", rounds,
           (unsigned long long)seed);
    int bad = 0, kinds[F_NKINDS] = { 0 };
    long total_acked = 0, total_failed = 0;
    for (int r = 0; r < rounds; r++) {
        test_cluster c;
        fp_proxy *p[2];
        char err[160], direct[96];
        if (cluster_start_opts(&c, 2, 4, 1, "workers = 1\n", SERVER TABLES)) {
            printf("round %d: the cluster did not start\n", r);
            return 1;
        }
        for (int i = 0; i < 2; i++)
            p[i] = fp_start_at(c.pub[i], "127.0.0.1", c.port[i], next(), err,
                               sizeof err);
        snprintf(direct, sizeof direct, "127.0.0.1:%d,127.0.0.1:%d",
                 c.port[0], c.port[1]);
        round_ctx ctx = { &c, p, (fault_kind)(next() % F_NKINDS),
                          (int)(next() % 2) };
        kinds[ctx.kind]++;
        ps_options o;
        ps_options_init(&o);
        o.request_timeout_ms = 200;
        o.max_retries = 50;
        o.connect_timeout_ms = 5000;
        clients k = { c.spec, o, pushes, 0, 0 };
        pthread_t th;
        pthread_create(&th, NULL, run_clients, &k);
        inject(&ctx);
        pthread_join(th, NULL);
        int acked = k.acked, failed = k.failed;
        for (int i = 0; i < 2; i++)
            fp_set(p[i], FP_BOTH, &(fp_faults){ 0 });
        char why[200] = "";
        int ok = failed == 0 &&
                 oracle_check(direct, acked, acked, why, sizeof why) == 0;
        printf("round %3d: %-20s on node %d: %d acknowledged, %d failed: "
               "%s%s\n", r, names[ctx.kind], ctx.node, acked, failed,
               ok ? "ok" : "BROKEN ", why);
        fflush(stdout);
        bad += !ok;
        total_acked += acked;
        total_failed += failed;
        for (int i = 0; i < 2; i++)
            fp_stop(p[i]);
        if (cluster_stop(&c)) {
            printf("round %d: a node did not stop cleanly\n", r);
            bad++;
        }
    }
    printf("soak: %d rounds, %d broken; %ld pushes acknowledged, %ld failed;"
           " faults:", rounds, bad, total_acked, total_failed);
    for (int k = 0; k < F_NKINDS; k++)
        if (kinds[k])
            printf(" %s x%d,", names[k], kinds[k]);
    printf("\n");
    return bad ? 1 : 0;
}
