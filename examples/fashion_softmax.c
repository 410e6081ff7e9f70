/* fashion_softmax: softmax regression on Fashion-MNIST, trained over psd.
 * Each worker pulls the 785 x 10 weights, computes the gradient of a
 * minibatch from its own slice of the training set and pushes it; the
 * servers apply w -= lr * g (a dense table with the sgd updater). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "idx.h"
#include "psclient.h"
#include "softmax.h"

#define SHUFFLE_SEED 0x5eedf00dULL

typedef struct options {
    const char *servers;    /* "host:port,..." or the cluster's ini file */
    const char *data;       /* folder with the four IDX files */
    const char *table;
    int worker;             /* this worker's index, 0..workers-1 */
    int workers;
    int epochs;
    int batch;
    int eval;               /* only report the accuracy of the current model */
    int timeout_ms;         /* request_timeout_ms, 0: the library's */
} options;

/* One worker's training state. */
typedef struct trainer {
    ps_client *c;
    int table;
    const idx_set *train;
    size_t *order;          /* this worker's slice of train, reshuffled */
    size_t nslice;
    uint64_t rng;
    ps_ts inflight;         /* the push still in flight, or 0 */
    int cur;                /* the grad buffer the next step fills */
    float w[SOFTMAX_PARAMS];
    /* Two gradient buffers: a push borrows its buffer until it completes,
     * so the next step computes into the other one meanwhile. */
    float grad[2][SOFTMAX_PARAMS];
} trainer;

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: fashion_softmax --servers SPEC --worker I --workers N\n"
        "                       [--epochs E] [--batch B] [--data DIR]\n"
        "                       [--table NAME] [--timeout-ms T]\n"
        "       fashion_softmax --servers SPEC --eval [--data DIR]"
        " [--table NAME]\n"
        "  SPEC    host:port[,host:port...] or the cluster's ini file\n"
        "  I, N    this worker trains on slice I of N of the training set\n"
        "  E, B    epochs (default 3) and minibatch size (default 32)\n"
        "  DIR     Fashion-MNIST IDX files (default " DEFAULT_DATA ")\n"
        "  NAME    dense table, rows 785, dim 10 (default fashion)\n"
        "  T       per-attempt request timeout in ms; requests are sent\n"
        "          again for 30 s at least (default: the library's 10 s)\n"
        "  --eval  only print the test accuracy of the current weights\n");
}

/* The options that take a value, as parse_args reads them: with nothing
 * after them they need one, and anything else there is unknown. */
static const char *const value_options[] = {
    "--servers", "--data", "--table", "--worker", "--workers", "--epochs",
    "--batch", "--timeout-ms", NULL
};

/* Fills *o from argv. Returns 0, or -1 after a message. */
static int parse_args(int argc, char **argv, options *o)
{
    o->servers = NULL;
    o->data = DEFAULT_DATA;
    o->table = "fashion";
    o->worker = -1;
    o->workers = -1;
    o->epochs = 3;
    o->batch = 32;
    o->eval = 0;
    o->timeout_ms = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--eval") == 0) {
            o->eval = 1;
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
        else if (strcmp(a, "--table") == 0)
            o->table = v;
        else if (strcmp(a, "--worker") == 0)
            rc = parse_int(a, v, 0, INT_MAX - 1, &o->worker);
        else if (strcmp(a, "--workers") == 0)
            rc = parse_int(a, v, 1, INT_MAX, &o->workers);
        else if (strcmp(a, "--epochs") == 0)
            rc = parse_int(a, v, 1, 1000000, &o->epochs);
        else if (strcmp(a, "--batch") == 0)
            rc = parse_int(a, v, 1, IDX_MAX_ITEMS, &o->batch);
        else if (strcmp(a, "--timeout-ms") == 0)
            rc = parse_int(a, v, 10, 600000, &o->timeout_ms);
        else {
            complain("unknown option '%s' (see --help)", a);
            return -1;
        }
        if (rc < 0)
            return -1;
    }

    if (!o->servers) {
        complain("--servers is required (see --help)");
        return -1;
    }
    if (o->eval)
        return 0;
    if (o->worker < 0 || o->workers < 0) {
        complain("--worker and --workers are required (see --help)");
        return -1;
    }
    if (o->worker >= o->workers) {
        complain("--worker %d is not in 0..%d", o->worker, o->workers - 1);
        return -1;
    }
    complain_as("fashion_softmax[%d]", o->worker);
    return 0;
}

/* ---- psd ---------------------------------------------------------------- */

/* Connects and looks up the table, checking it has the model's shape.
 * Returns 0 with *c and *table set, or -1 after a message (*c may then be
 * set and must be closed). */
static int open_table(const options *o, ps_client **c, int *table)
{
    ps_options po;
    ps_options_init(&po);
    /* Async tables need no worker id, and a non-worker is never waited
     * for, should the table be switched to bsp or ssp. */
    po.worker = -1;
    if (o->timeout_ms > 0) {
        /* Short attempts (over a lossy network), resent for 30 s at least. */
        po.request_timeout_ms = o->timeout_ms;
        po.max_retries = (30000 + o->timeout_ms - 1) / o->timeout_ms;
        po.connect_timeout_ms = 30000;
    }

    int rc = ps_open(c, o->servers, &po);
    if (rc < 0)
        return report_open_failure(o->servers, rc);
    uint32_t dim;
    *table = find_table(*c, o->table, SOFTMAX_ROWS, SOFTMAX_CLASSES,
                        SOFTMAX_CLASSES, &dim);
    return *table < 0 ? -1 : 0;
}

/* Pulls the whole weight matrix into w and waits for it. A node that does
 * not answer within the request's bounded time is a pause: the pull is
 * tried again, for up to PATIENCE_S. Returns 0, or -1 after a message. */
#define PATIENCE_S 300.0
static int pull_weights(ps_client *c, int table, float *w)
{
    double t0 = now();
    for (;;) {
        ps_ts ts = ps_pull_range(c, table, 0, SOFTMAX_ROWS, w, NULL, NULL);
        int rc = wait_or_pause(c, ts, "pull");
        if (rc <= 0)
            return rc;
        if (now() - t0 > PATIENCE_S) {
            complain("the cluster has not answered for %.0f s: giving up",
                     PATIENCE_S);
            return -1;
        }
    }
}

/* Waits for the push in flight, if any. A push that failed for a
 * transient reason is given up (it may have been applied in part; the
 * next ones carry on). Returns 0, or -1 after a message. */
static int finish_push(trainer *tr)
{
    if (tr->inflight == 0)
        return 0;
    int rc = wait_or_pause(tr->c, tr->inflight, "push");
    tr->inflight = 0;
    return rc < 0 ? -1 : 0;
}

/* Pulls the current weights into w and sets *acc to their accuracy on the
 * test set. Returns 0, or -1 after a message. */
static int evaluate(ps_client *c, int table, float *w, const idx_set *test,
                    double *acc)
{
    if (pull_weights(c, table, w) < 0)
        return -1;
    *acc = softmax_accuracy(w, test->pixels, test->labels, test->n);
    return 0;
}

/* ---- training ----------------------------------------------------------- */

/* One asynchronous SGD step on the n examples idx: pull the weights, compute
 * the gradient, then push it. The previous step's push may still be in
 * flight during the pull and the compute; it is waited for only before the
 * next push, so at most one push is outstanding. Sets *loss to the batch's
 * mean loss. Returns 0, or -1 after a message. */
static int train_step(trainer *tr, const size_t *idx, size_t n, double *loss)
{
    if (pull_weights(tr->c, tr->table, tr->w) < 0)
        return -1;

    float *g = tr->grad[tr->cur];
    *loss = softmax_grad(tr->w, tr->train->pixels, tr->train->labels, idx, n,
                         g);

    if (finish_push(tr) < 0)
        return -1;
    ps_ts ts = ps_push_range(tr->c, tr->table, 0, SOFTMAX_ROWS, g, NULL, NULL);
    if (ts < 0)
        return report_failure(tr->c, "push", (int)ts);
    tr->inflight = ts;
    tr->cur ^= 1;
    return 0;
}

/* One pass over this worker's slice in a fresh order. Waits for the last
 * push, so the epoch's updates are all applied when it returns. Sets *loss
 * to the mean training loss (each batch measured before its own update).
 * Returns 0, or -1 after a message. */
static int train_epoch(trainer *tr, size_t batch, double *loss)
{
    double sum = 0.0;

    shuffle(tr->order, tr->nslice, &tr->rng);
    for (size_t i = 0; i < tr->nslice; i += batch) {
        size_t n = tr->nslice - i < batch ? tr->nslice - i : batch;
        double l;
        if (train_step(tr, tr->order + i, n, &l) < 0)
            return -1;
        sum += l * (double)n;
    }
    if (finish_push(tr) < 0)
        return -1;
    *loss = sum / (double)tr->nslice;
    return 0;
}

/* Sets up tr for worker `worker` of `workers`: its contiguous slice of the
 * training set and its own shuffle seed. Returns 0, or -1 after a message. */
static int trainer_init(trainer *tr, const idx_set *train, int worker,
                        int workers)
{
    size_t lo = (size_t)((uint64_t)worker * train->n / (uint64_t)workers);
    size_t hi = (size_t)((uint64_t)(worker + 1) * train->n /
                         (uint64_t)workers);

    if (hi == lo) {
        complain("%d workers leave no training images for worker %d",
                 workers, worker);
        return -1;
    }
    tr->order = malloc((hi - lo) * sizeof *tr->order);
    if (!tr->order) {
        complain("out of memory");
        return -1;
    }
    for (size_t i = lo; i < hi; i++)
        tr->order[i - lo] = i;
    tr->nslice = hi - lo;
    tr->train = train;
    tr->rng = SHUFFLE_SEED + (uint64_t)worker;
    tr->inflight = 0;
    tr->cur = 0;
    return 0;
}

/* Trains for o->epochs epochs and reports progress; worker 0 also tests
 * the shared model after each epoch. Returns 0, or -1 after a message. */
static int run_training(const options *o, trainer *tr, const idx_set *test)
{
    double acc = 0.0;

    for (int e = 1; e <= o->epochs; e++) {
        double t0 = now(), loss;
        if (train_epoch(tr, (size_t)o->batch, &loss) < 0)
            return -1;
        char label[64];
        snprintf(label, sizeof label, "worker %d epoch %d: ", o->worker, e);
        if (o->worker != 0) {
            printf("worker %d epoch %d: train loss %.4f (%.1f s)\n",
                   o->worker, e, loss, now() - t0);
            print_stats(tr->c, label);
            continue;
        }
        print_stats(tr->c, label);
        if (evaluate(tr->c, tr->table, tr->w, test, &acc) < 0)
            return -1;
        printf("worker 0 epoch %d: train loss %.4f, test accuracy %.4f "
               "(%.1f s)\n", e, loss, acc, now() - t0);
    }
    if (o->worker == 0)
        printf("final test accuracy: %.4f\n", acc);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    idx_set train = { 0, NULL, NULL }, test = { 0, NULL, NULL };
    ps_client *c = NULL;
    trainer *tr = NULL;
    int table = -1, rc = 1;

    complain_as("fashion_softmax");
    /* Line-buffered even into a pipe: run_fashion.sh shows progress live. */
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (parse_args(argc, argv, &o) < 0)
        return 2;
    int need_test = o.eval || o.worker == 0;
    if ((need_test && load_split(o.data, "t10k", &test) < 0) ||
        (!o.eval && load_split(o.data, "train", &train) < 0))
        goto done;
    if (open_table(&o, &c, &table) < 0)
        goto done;

    if (o.eval) {
        double acc;
        float *w = malloc(SOFTMAX_PARAMS * sizeof *w);
        if (!w) {
            complain("out of memory");
            goto done;
        }
        if (evaluate(c, table, w, &test, &acc) == 0) {
            printf("test accuracy: %.4f\n", acc);
            rc = 0;
        }
        free(w);
        goto done;
    }

    tr = calloc(1, sizeof *tr);
    if (!tr) {
        complain("out of memory");
        goto done;
    }
    tr->c = c;
    tr->table = table;
    if (trainer_init(tr, &train, o.worker, o.workers) < 0 ||
        run_training(&o, tr, &test) < 0)
        goto done;
    rc = 0;

done:
    /* ps_close waits for any push still borrowing tr->grad, so it must run
     * before tr is freed. */
    ps_close(c);
    if (tr)
        free(tr->order);
    free(tr);
    idx_destroy(&train);
    idx_destroy(&test);
    return rc;
}
