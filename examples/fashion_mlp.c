/* fashion_mlp: a one-hidden-layer perceptron on Fashion-MNIST, trained by N
 * worker processes over psd in one of three modes (async, bsp, ssp). Each
 * step a worker pulls W1 and W2, computes the gradient of its share of the
 * step's examples and pushes it; the servers apply w -= lr * g (dense
 * tables with the sgd updater, initialised by the servers from a seed). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "idx.h"
#include "mlp.h"
#include "psclient.h"

#define SHUFFLE_SEED 0x5eedf00dULL
#define STRAGGLE_SEED 0x51077ULL
#define STRAGGLE_ODDS 4         /* a straggler sleeps on 1 step in 4 */

enum { MODE_ASYNC, MODE_BSP, MODE_SSP };
static const char *const mode_names[] = { "async", "bsp", "ssp" };

typedef struct options {
    const char *servers;    /* "host:port,..." or the cluster's ini file */
    const char *data;       /* folder with the four IDX files */
    int mode;               /* MODE_*: which tables, and whether to clock */
    int worker;             /* this worker's index, 0..workers-1 */
    int workers;
    int epochs;
    int batch;              /* examples per worker and step */
    int straggle_ms;        /* > 0: sleep this long on some steps */
    double decay;           /* the step size falls to 1 - decay */
    int single;             /* one process doing the work of all workers */
} options;

/* One process's training state. Every process shuffles the whole training
 * set the same way each epoch; step k covers the examples
 * order[k * step_rows .. + step_rows), and this process computes on
 * order[k * step_rows + first .. + count). So N workers with batch B and
 * one --single process with batch N * B see the same examples per step. */
typedef struct trainer {
    ps_client *c;
    int t1, t2;             /* table ids of W1 and W2 */
    int clock;              /* bsp or ssp: ps_clock after every step */
    int early_pull;         /* async or ssp: pull step k+1's weights before
                               step k's ps_clock and pushes complete */
    const idx_set *train;
    size_t *order;
    uint64_t rng;           /* the shuffle, identical in every process */
    uint64_t straggle_rng;
    int straggle_ms;
    double decay;
    size_t total_steps;         /* of the whole run, for the decay */
    size_t steps, straggled;    /* steps taken, and slept in */
    size_t step_rows, first, count;
    size_t hidden;
    /* Weights, and two sets of gradients: a push borrows its g* until it
     * completes, while the next step fills the other one. */
    float *w1, *w2, *g1[2], *g2[2];
    int gcur;
    ps_ts pull1, pull2;     /* the pull of the next weights, or 0 */
    ps_ts push1, push2;     /* the last step's pushes in flight, or 0 */
} trainer;

static void sleep_ms(int ms)
{
    struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&t, &t) < 0 && errno == EINTR)
        ;
}

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: fashion_mlp --servers SPEC --worker I --workers N\n"
        "                   --mode async|bsp|ssp [--epochs E] [--batch B]\n"
        "                   [--data DIR] [--straggle MS] [--decay F]\n"
        "       fashion_mlp --servers SPEC --single --workers N --mode M"
        " [...]\n"
        "  SPEC    host:port[,host:port...] or the cluster's ini file, whose\n"
        "          [cluster] workers must be N (1 with --single)\n"
        "  I, N    this is worker I of N; each step the N workers train on\n"
        "          N consecutive batches of one shuffle of the training set\n"
        "  M       tables W1_M and W2_M (dense: rows 785, dim H; rows H+1,\n"
        "          dim 10); bsp and ssp call ps_clock after every step\n"
        "  E, B    epochs (default 5) and examples per worker and step\n"
        "          (default 32)\n"
        "  DIR     Fashion-MNIST IDX files (default " DEFAULT_DATA ")\n"
        "  MS      simulate a slow worker: sleep MS ms on a random 1 step\n"
        "          in %d (fixed seed)\n"
        "  F       the servers' sgd rate is fixed, so the step size falls\n"
        "          here: gradients are pushed times 1 - F * step / steps,\n"
        "          from 1 to 1 - F at the end (default 0.9; 0: constant)\n"
        "  --single  one process does what N workers do, with batch N * B,\n"
        "          as worker 0 of a 1-worker cluster\n", STRAGGLE_ODDS);
}

/* Parses a number in 0..1. Returns 0, or -1 after a message. */
static int parse_fraction(const char *name, const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0.0 && v <= 1.0)) {
        complain("%s: '%s' is not a number in 0..1", name, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_mode(const char *s, int *out)
{
    for (int m = 0; m < 3; m++) {
        if (strcmp(s, mode_names[m]) == 0) {
            *out = m;
            return 0;
        }
    }
    complain("--mode: '%s' is not async, bsp or ssp", s);
    return -1;
}

/* The options that take a value, as parse_args reads them: with nothing
 * after them they need one, and anything else there is unknown. */
static const char *const value_options[] = {
    "--servers", "--data", "--mode", "--worker", "--workers", "--epochs",
    "--batch", "--straggle", "--decay", NULL
};

/* Fills *o from argv. Returns 0, or -1 after a message. */
static int parse_args(int argc, char **argv, options *o)
{
    o->servers = NULL;
    o->data = DEFAULT_DATA;
    o->mode = -1;
    o->worker = -1;
    o->workers = -1;
    o->epochs = 5;
    o->batch = 32;
    o->straggle_ms = 0;
    o->decay = 0.9;
    o->single = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--single") == 0) {
            o->single = 1;
            continue;
        }
        if (i + 1 >= argc) {
            if (is_one_of(a, value_options))
                complain("%s needs a value (see --help)", a);
            else
                complain("unknown option '%s' (see --help)", a);
            return -1;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(a, "--servers") == 0)
            o->servers = v;
        else if (strcmp(a, "--data") == 0)
            o->data = v;
        else if (strcmp(a, "--mode") == 0)
            rc = parse_mode(v, &o->mode);
        else if (strcmp(a, "--worker") == 0)
            rc = parse_int(a, v, 0, INT_MAX - 1, &o->worker);
        else if (strcmp(a, "--workers") == 0)
            rc = parse_int(a, v, 1, 65535, &o->workers);
        else if (strcmp(a, "--epochs") == 0)
            rc = parse_int(a, v, 1, 1000000, &o->epochs);
        else if (strcmp(a, "--batch") == 0)
            rc = parse_int(a, v, 1, IDX_MAX_ITEMS, &o->batch);
        else if (strcmp(a, "--straggle") == 0)
            rc = parse_int(a, v, 0, 60000, &o->straggle_ms);
        else if (strcmp(a, "--decay") == 0)
            rc = parse_fraction(a, v, &o->decay);
        else {
            complain("unknown option '%s' (see --help)", a);
            return -1;
        }
        if (rc < 0)
            return -1;
    }

    if (!o->servers || o->mode < 0 || o->workers < 0) {
        complain("--servers, --mode and --workers are required (see --help)");
        return -1;
    }
    if (o->single) {
        if (o->worker > 0) {
            complain("--single runs as worker 0; drop --worker");
            return -1;
        }
        o->worker = 0;
        complain_as("fashion_mlp[single]");
        return 0;
    }
    if (o->worker < 0) {
        complain("--worker is required (see --help)");
        return -1;
    }
    if (o->worker >= o->workers) {
        complain("--worker %d is not in 0..%d", o->worker, o->workers - 1);
        return -1;
    }
    complain_as("fashion_mlp[%d]", o->worker);
    return 0;
}

/* ---- psd ---------------------------------------------------------------- */

/* Connects as worker o->worker and looks up W1_MODE and W2_MODE, whose
 * shapes give the hidden size. Returns 0 with tr->c, t1, t2 and hidden
 * set, or -1 after a message (tr->c may then be set and must be closed). */
static int open_tables(const options *o, trainer *tr)
{
    ps_options po;
    ps_options_init(&po);
    /* Every mode joins as a worker: bsp and ssp tables count on it, and
     * ps_barrier lines up the start and the end of all modes alike. A
     * worker that never shows up fails the others within a minute. */
    po.worker = o->worker;
    po.sync_timeout_ms = 60000;

    int rc = ps_open(&tr->c, o->servers, &po);
    if (rc < 0)
        return report_open_failure(o->servers, rc);
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "W1_%s", mode_names[o->mode]);
    snprintf(n2, sizeof n2, "W2_%s", mode_names[o->mode]);
    uint32_t hidden, classes;
    if ((tr->t1 = find_table(tr->c, n1, MLP_W1_ROWS, 1, MLP_MAX_HIDDEN,
                             &hidden)) < 0 ||
        (tr->t2 = find_table(tr->c, n2, (uint64_t)hidden + 1, MLP_CLASSES,
                             MLP_CLASSES, &classes)) < 0)
        return -1;
    tr->hidden = hidden;
    return 0;
}

/* Waits for request ts, if it was issued. Returns 0; 1 after a message
 * when it failed for a transient reason (see wait_or_pause); -1 after a
 * message when it failed for good. */
static int finish(ps_client *c, const char *what, ps_ts ts)
{
    return wait_or_pause(c, ts, what);
}

/* Starts pulling both weight matrices into tr->w1 and tr->w2. Returns 0,
 * or -1 after a message. */
static int start_pull(trainer *tr)
{
    tr->pull1 = ps_pull_range(tr->c, tr->t1, 0, MLP_W1_ROWS, tr->w1, NULL,
                              NULL);
    tr->pull2 = ps_pull_range(tr->c, tr->t2, 0, tr->hidden + 1, tr->w2,
                              NULL, NULL);
    if (tr->pull1 < 0 || tr->pull2 < 0)
        return report_failure(tr->c, "pull",
                              (int)(tr->pull1 < 0 ? tr->pull1 : tr->pull2));
    return 0;
}

/* Waits for the pull started by start_pull. A node that did not answer
 * within the bounded time is a pause: the pull starts again, for up to
 * five minutes. Returns 0, or -1 after a message. */
static int finish_pull(trainer *tr)
{
    double t0 = now();
    for (;;) {
        int a = finish(tr->c, "pull W1", tr->pull1);
        int b = finish(tr->c, "pull W2", tr->pull2);
        tr->pull1 = tr->pull2 = 0;
        if (a < 0 || b < 0)
            return -1;
        if (a == 0 && b == 0)
            return 0;
        if (now() - t0 > 300.0) {
            complain("the cluster has not answered for 300 s: giving up");
            return -1;
        }
        if (start_pull(tr) < 0)
            return -1;
    }
}

/* Waits for the last step's pushes, if any. Returns 0, or -1 after a
 * message. */
static int finish_push(trainer *tr)
{
    if (tr->push1 == 0)
        return 0;
    /* A push lost to a transient failure is given up: the next ones
     * carry on (a gradient step fewer). */
    int a = finish(tr->c, "push W1", tr->push1);
    int b = finish(tr->c, "push W2", tr->push2);
    tr->push1 = tr->push2 = 0;
    return a < 0 || b < 0 ? -1 : 0;
}

/* Pulls the current weights and sets *acc to their accuracy on the test
 * set. Nothing may be in flight. Returns 0, or -1 after a message. */
static int evaluate(trainer *tr, const idx_set *test, double *acc)
{
    if (start_pull(tr) < 0 || finish_pull(tr) < 0)
        return -1;
    mlp_weights m = { tr->w1, tr->w2, tr->hidden };
    *acc = mlp_accuracy(&m, test->pixels, test->labels, test->n);
    return 0;
}

/* ---- training ----------------------------------------------------------- */

/* One step on the n examples idx: get the weights, compute, push both
 * gradients and, in bsp and ssp, close the step with ps_clock, which
 * counts the pushes issued before it even if they have not completed.
 *
 * bsp pulls after the previous ps_clock: that returned once every
 * worker's pushes were averaged and applied, so the pull sees exactly the
 * step's result. async and ssp need not wait for anyone, so unless this is
 * the epoch's last step they start the next step's pull right behind the
 * pushes (a connection keeps its order, so the pull sees them): the pull
 * travels while ps_clock makes its round trip. In ssp the server holds it
 * until the slowest worker is at most `staleness` clocks behind this
 * worker's clock before ps_clock, so the next step may compute on weights
 * one clock staler than a pull after ps_clock would allow. A push is
 * waited for only before the next one. Sets *loss to the batch's mean
 * loss. Returns 0, or -1 after a message. */
static int train_step(trainer *tr, const size_t *idx, size_t n, int last,
                      double *loss)
{
    if (tr->pull1 == 0 && start_pull(tr) < 0)
        return -1;
    if (finish_pull(tr) < 0)
        return -1;
    tr->steps++;
    if (tr->straggle_ms > 0 &&
        next_random(&tr->straggle_rng) % STRAGGLE_ODDS == 0) {
        sleep_ms(tr->straggle_ms);
        tr->straggled++;
    }

    mlp_weights m = { tr->w1, tr->w2, tr->hidden };
    float *g1 = tr->g1[tr->gcur], *g2 = tr->g2[tr->gcur];
    *loss = mlp_grad(&m, tr->train->pixels, tr->train->labels, idx, n, g1,
                     g2);
    /* Decay the step size: late steps then refine the model rather than
     * scatter it, and the final accuracy varies less from run to run. */
    float scale = (float)(1.0 - tr->decay * (double)(tr->steps - 1) /
                                (double)tr->total_steps);
    for (size_t i = 0; i < mlp_w1_size(tr->hidden); i++)
        g1[i] *= scale;
    for (size_t i = 0; i < mlp_w2_size(tr->hidden); i++)
        g2[i] *= scale;

    if (finish_push(tr) < 0)
        return -1;
    tr->push1 = ps_push_range(tr->c, tr->t1, 0, MLP_W1_ROWS, g1, NULL, NULL);
    tr->push2 = ps_push_range(tr->c, tr->t2, 0, tr->hidden + 1, g2, NULL,
                              NULL);
    tr->gcur ^= 1;
    if (tr->push1 < 0 || tr->push2 < 0)
        return report_failure(tr->c, "push",
                              (int)(tr->push1 < 0 ? tr->push1 : tr->push2));
    if (tr->early_pull && !last && start_pull(tr) < 0)
        return -1;
    int rc = tr->clock ? ps_clock(tr->c) : PS_OK;
    if (rc != PS_OK)
        return report_failure(tr->c, "ps_clock", rc);
    return tr->early_pull ? 0 : finish_push(tr);
}

/* One epoch: a fresh shuffle, then every full step (the fewer than
 * step_rows examples left over wait for another shuffle). Sets *loss to
 * the mean loss of this process's batches. Returns 0, or -1 after a
 * message. */
static int train_epoch(trainer *tr, double *loss)
{
    size_t steps = tr->train->n / tr->step_rows;
    double sum = 0.0;

    shuffle(tr->order, tr->train->n, &tr->rng);
    for (size_t k = 0; k < steps; k++) {
        double l;
        if (train_step(tr, tr->order + k * tr->step_rows + tr->first,
                       tr->count, k + 1 == steps, &l) < 0)
            return -1;
        sum += l;
    }
    if (finish_push(tr) < 0)
        return -1;
    *loss = sum / (double)steps;
    return 0;
}

/* Allocates tr's buffers and sets its share of each step. Returns 0, or -1
 * after a message. */
static int trainer_init(trainer *tr, const options *o, const idx_set *train)
{
    tr->step_rows = (size_t)o->workers * (size_t)o->batch;
    tr->first = o->single ? 0 : (size_t)o->worker * (size_t)o->batch;
    tr->count = o->single ? tr->step_rows : (size_t)o->batch;
    if (tr->step_rows > train->n) {
        complain("%d workers x batch %d exceed the %zu training images",
                 o->workers, o->batch, train->n);
        return -1;
    }
    tr->train = train;
    tr->clock = o->mode != MODE_ASYNC;
    tr->early_pull = o->mode != MODE_BSP;
    tr->rng = SHUFFLE_SEED;
    tr->straggle_rng = STRAGGLE_SEED + (uint64_t)o->worker;
    tr->straggle_ms = o->straggle_ms;
    tr->decay = o->decay;
    tr->total_steps = (size_t)o->epochs * (train->n / tr->step_rows);

    size_t n1 = mlp_w1_size(tr->hidden), n2 = mlp_w2_size(tr->hidden);
    int ok = (tr->order = malloc(train->n * sizeof *tr->order)) != NULL;
    ok &= (tr->w1 = malloc(n1 * sizeof *tr->w1)) != NULL;
    ok &= (tr->w2 = malloc(n2 * sizeof *tr->w2)) != NULL;
    for (int i = 0; i < 2; i++) {
        ok &= (tr->g1[i] = malloc(n1 * sizeof *tr->g1[i])) != NULL;
        ok &= (tr->g2[i] = malloc(n2 * sizeof *tr->g2[i])) != NULL;
    }
    if (!ok) {
        complain("out of memory");
        return -1;
    }
    for (size_t i = 0; i < train->n; i++)
        tr->order[i] = i;
    return 0;
}

static void trainer_destroy(trainer *tr)
{
    free(tr->order);
    free(tr->w1);
    free(tr->w2);
    for (int i = 0; i < 2; i++) {
        free(tr->g1[i]);
        free(tr->g2[i]);
    }
}

/* Trains for o->epochs epochs. Barriers line all workers up before the
 * first step and after the last, so the wall time is the job's and the
 * final accuracy includes every worker's updates. Worker 0 tests the
 * shared model after each epoch. Returns 0, or -1 after a message. */
static int run_training(const options *o, trainer *tr, const idx_set *test)
{
    double acc = 0.0, t0;
    int rc;

    if ((rc = ps_barrier(tr->c)) != PS_OK) {
        if (rc == PS_ETIMEDOUT)
            complain("are all %d workers running, and is the cluster's "
                     "[cluster] workers = %d?", o->single ? 1 : o->workers,
                     o->single ? 1 : o->workers);
        return report_failure(tr->c, "ps_barrier (start)", rc);
    }
    t0 = now();
    if (o->worker == 0)
        printf("mode %s, %d worker%s, batch %d per worker, hidden %zu, "
               "%zu steps per epoch%s\n", mode_names[o->mode],
               o->single ? 1 : o->workers, o->single ? "" : "s",
               (int)tr->count, tr->hidden, tr->train->n / tr->step_rows,
               o->single ? " (single process)" : "");

    for (int e = 1; e <= o->epochs; e++) {
        double loss;
        if (train_epoch(tr, &loss) < 0)
            return -1;
        if (e == o->epochs && (rc = ps_barrier(tr->c)) != PS_OK)
            return report_failure(tr->c, "ps_barrier (end)", rc);
        char label[64];
        snprintf(label, sizeof label, "worker %d epoch %d: ", o->worker, e);
        print_stats(tr->c, label);
        if (o->worker != 0) {
            printf("worker %d epoch %d: train loss %.4f, wall %.1f s\n",
                   o->worker, e, loss, now() - t0);
            continue;
        }
        if (evaluate(tr, test, &acc) < 0)
            return -1;
        printf("epoch %d: test accuracy %.4f, wall %.1f s, train loss %.4f\n",
               e, acc, now() - t0, loss);
    }
    if (tr->straggle_ms > 0)
        printf("worker %d slept %.1f s in %zu of %zu steps\n", o->worker,
               (double)tr->straggled * tr->straggle_ms / 1000.0,
               tr->straggled, tr->steps);
    if (o->worker == 0) {
        printf("final test accuracy: %.4f\n", acc);
        printf("total wall time: %.1f s\n", now() - t0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    idx_set train = { 0, NULL, NULL }, test = { 0, NULL, NULL };
    trainer tr;
    int rc = 1;

    memset(&tr, 0, sizeof tr);
    complain_as("fashion_mlp");
    /* Line-buffered even into a file or a pipe: each epoch shows up as
     * soon as it ends. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    if ((o.worker == 0 && load_split(o.data, "t10k", &test) < 0) ||
        load_split(o.data, "train", &train) < 0)
        goto done;
    if (open_tables(&o, &tr) < 0 || trainer_init(&tr, &o, &train) < 0 ||
        run_training(&o, &tr, &test) < 0)
        goto done;
    rc = 0;

done:
    /* ps_close waits for any request still borrowing tr's buffers, so it
     * must run before they are freed; then it leaves, and nobody waits for
     * this worker any more. */
    ps_close(tr.c);
    trainer_destroy(&tr);
    idx_destroy(&train);
    idx_destroy(&test);
    return rc;
}
