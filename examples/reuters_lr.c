/* reuters_lr: sparse logistic regression on Reuters-21578 "Grain" (is a
 * newswire story about grain?) over psd. Words hash into 2^20 keys of a
 * sparse table; each minibatch a worker pulls only the keys its documents
 * contain, computes the logistic-loss gradient for those keys and pushes
 * it back, and the servers apply it (ftrl or adagrad, see conf/reuters.ini).
 * A reader then pulls the test documents' keys and measures test AUC. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arff.h"
#include "common.h"
#include "psclient.h"

#define SHUFFLE_SEED 0x5eedf00dULL
#define TRAIN_FILE "ReutersGrain-train.arff"
#define TEST_FILE "ReutersGrain-test.arff"
#define MAX_BATCH 4096

typedef struct options {
    const char *servers;    /* "host:port,..." or the cluster's ini file */
    const char *data;       /* folder with the two ARFF files */
    const char *table;
    int worker;             /* >= 0: be only this worker, 0..workers-1 */
    int workers;
    int epochs;
    int batch;              /* documents per worker and step */
    int eval;               /* only evaluate the model on the servers */
    double target_auc;
} options;

/* The buffers of one step: the distinct keys of the step's documents and
 * their weights or gradients. A push borrows keys and grad until it
 * completes, so a worker keeps two and fills one while the other's push
 * is in flight. */
typedef struct step_buf {
    uint64_t *keys;
    float *grad;
} step_buf;

/* One worker's training state. */
typedef struct trainer {
    ps_client *c;
    int table;
    const arff_set *train;
    size_t *order;          /* the whole set, reshuffled every epoch */
    uint64_t rng;           /* the same seed in every worker */
    size_t lo, hi;          /* this worker's share: order[lo..hi) */
    size_t cap;             /* keys a step may touch, bias included */
    step_buf buf[2];
    float *w;               /* pulled weights, cap floats */
    int cur;                /* the buf the next step fills */
    ps_ts inflight;         /* the push still in flight, or 0 */
    size_t steps;
    size_t keys_pushed;     /* over all steps, for the report */
} trainer;

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: reuters_lr --servers SPEC --data DIR [--workers N]"
        " [--epochs E]\n"
        "                  [--batch B] [--table NAME] [--target-auc A]\n"
        "       reuters_lr --servers SPEC --data DIR --worker I --workers N"
        " [...]\n"
        "       reuters_lr --servers SPEC --data DIR --eval [--table NAME]"
        " [--target-auc A]\n"
        "  SPEC    host:port[,host:port...] or the cluster's ini file\n"
        "  DIR     holds " TRAIN_FILE " and " TEST_FILE "\n"
        "  N       fork N worker processes (default 4), wait for them, then\n"
        "          evaluate; with --worker I, be only worker I of N\n"
        "  E, B    epochs (default 10) and documents per worker and step\n"
        "          (default 16)\n"
        "  NAME    sparse table with dim 1 (default reuters)\n"
        "  A       the test AUC to reach (default 0.95); exit status 3 if\n"
        "          it is missed\n"
        "  --eval  only evaluate the weights on the servers\n");
}

static int parse_double(const char *name, const char *s, double lo, double hi,
                        double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        complain("%s: '%s' is not a number in %g..%g", name, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* The options that take a value, as parse_args reads them: with nothing
 * after them they need one, and anything else there is unknown. */
static const char *const value_options[] = {
    "--servers", "--data", "--table", "--worker", "--workers", "--epochs",
    "--batch", "--target-auc", NULL
};

/* Fills *o from argv. Returns 0, or -1 after a message. */
static int parse_args(int argc, char **argv, options *o)
{
    o->servers = NULL;
    o->data = NULL;
    o->table = "reuters";
    o->worker = -1;
    o->workers = 4;
    o->epochs = 10;
    o->batch = 16;
    o->eval = 0;
    o->target_auc = 0.95;

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
            rc = parse_int(a, v, 0, 63, &o->worker);
        else if (strcmp(a, "--workers") == 0)
            rc = parse_int(a, v, 1, 64, &o->workers);
        else if (strcmp(a, "--epochs") == 0)
            rc = parse_int(a, v, 1, 100000, &o->epochs);
        else if (strcmp(a, "--batch") == 0)
            rc = parse_int(a, v, 1, MAX_BATCH, &o->batch);
        else if (strcmp(a, "--target-auc") == 0)
            rc = parse_double(a, v, 0.0, 1.0, &o->target_auc);
        else {
            complain("unknown option '%s' (see --help)", a);
            return -1;
        }
        if (rc < 0)
            return -1;
    }

    if (!o->servers || !o->data) {
        complain("--servers and --data are required (see --help)");
        return -1;
    }
    if (o->eval && o->worker >= 0) {
        complain("--eval and --worker exclude each other");
        return -1;
    }
    if (o->worker >= o->workers) {
        complain("--worker %d is not in 0..%d", o->worker, o->workers - 1);
        return -1;
    }
    return 0;
}

/* ---- data --------------------------------------------------------------- */

/* Loads DIR/file into *s. Returns 0, or -1 after a message. */
static int load_set(const char *dir, const char *file, arff_set *s)
{
    char path[4096], err[512];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >=
        sizeof path) {
        complain("--data %s: path too long", dir);
        return -1;
    }
    if (arff_load(path, s, err, sizeof err) < 0) {
        complain("%s", err);
        return -1;
    }
    if (s->n == 0) {
        complain("%s: no documents", path);
        return -1;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts keys[0..n) and drops repeats. Returns how many remain. */
static size_t sort_unique(uint64_t *keys, size_t n)
{
    if (n < 2)
        return n;
    qsort(keys, n, sizeof *keys, cmp_u64);
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (keys[i] != keys[m - 1])
            keys[m++] = keys[i];
    return m;
}

/* Appends the keys of documents idx[0..n) of s, and the bias key, to keys
 * and makes them distinct and sorted. keys must have room for all of them.
 * Returns how many distinct keys there are. */
static size_t gather_keys(const arff_set *s, const size_t *idx, size_t n,
                          uint64_t *keys)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t d = idx[i], k = s->start[d + 1] - s->start[d];
        memcpy(keys + m, s->keys + s->start[d], k * sizeof *keys);
        m += k;
    }
    keys[m++] = ARFF_BIAS_KEY;
    return sort_unique(keys, m);
}

/* The position of key k in the sorted keys[0..n), which holds it. */
static size_t find_key(const uint64_t *keys, size_t n, uint64_t k)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys[mid] <= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* A document's words each weigh 1/sqrt(words), so that every document
 * vector (bias aside) has length 1 whatever its size. */
static double doc_scale(const arff_set *s, size_t d)
{
    size_t k = s->start[d + 1] - s->start[d];
    return k ? 1.0 / sqrt((double)k) : 0.0;
}

/* The model's margin w . x for document d of s, given the weights w of the
 * sorted keys[0..nkeys), which hold the document's keys and the bias. */
static double margin(const arff_set *s, size_t d, const uint64_t *keys,
                     size_t nkeys, const float *w)
{
    double sum = 0.0;
    for (size_t j = s->start[d]; j < s->start[d + 1]; j++)
        sum += w[find_key(keys, nkeys, s->keys[j])];
    return sum * doc_scale(s, d) +
           w[find_key(keys, nkeys, ARFF_BIAS_KEY)];
}

/* log(1 + e^x) without overflow. */
static double softplus(double x)
{
    return (x > 0 ? x : 0.0) + log1p(exp(-fabs(x)));
}

/* ---- psd ---------------------------------------------------------------- */

/* Connects as `worker` (-1: a reader) and looks up the table, checking that
 * it is sparse with dim 1. Returns 0 with *c and *table set, or -1 after a
 * message (*c may then be set and must be closed). */
static int open_table(const options *o, int worker, ps_client **c,
                      int *table)
{
    ps_options po;
    ps_options_init(&po);
    po.worker = worker;

    int rc = ps_open(c, o->servers, &po);
    if (rc < 0)
        return report_open_failure(o->servers, rc);
    ps_table_info info;
    rc = ps_table(*c, o->table, &info);
    if (rc < 0) {
        char what[128];
        snprintf(what, sizeof what, "table '%s'", o->table);
        return report_failure(*c, what, rc);
    }
    if (info.dense || info.dim != 1) {
        complain("table '%s' is %s with dim %u; want sparse with dim 1",
                 o->table, info.dense ? "dense" : "sparse",
                 (unsigned)info.dim);
        return -1;
    }
    *table = rc;
    return 0;
}

/* Pulls the n keys into w and waits for them. Returns 0, or -1 after a
 * message. */
static int pull_keys(ps_client *c, int table, const uint64_t *keys, size_t n,
                     float *w)
{
    ps_ts ts = ps_pull(c, table, keys, n, w, NULL, NULL);
    if (ts < 0)
        return report_failure(c, "pull", (int)ts);
    int rc = ps_wait(c, ts);
    return rc == PS_OK ? 0 : report_failure(c, "pull", rc);
}

/* Waits for the push in flight, if any. Returns 0, or -1 after a message. */
static int finish_push(trainer *tr)
{
    if (tr->inflight == 0)
        return 0;
    int rc = ps_wait(tr->c, tr->inflight);
    tr->inflight = 0;
    return rc == PS_OK ? 0 : report_failure(tr->c, "push", rc);
}

/* ---- training ----------------------------------------------------------- */

/* One step on documents idx[0..n): gather their distinct keys, pull just
 * those weights, compute the gradient of the summed logistic loss for
 * those keys and push it. The previous step's push may still be in flight
 * meanwhile; it is waited for before this one is sent, so at most one is
 * outstanding. Adds the batch's loss (before its update) to *loss.
 * Returns 0, or -1 after a message. */
static int train_step(trainer *tr, const size_t *idx, size_t n, double *loss)
{
    const arff_set *s = tr->train;
    step_buf *b = &tr->buf[tr->cur];
    size_t nkeys = gather_keys(s, idx, n, b->keys);

    if (pull_keys(tr->c, tr->table, b->keys, nkeys, tr->w) < 0)
        return -1;

    memset(b->grad, 0, nkeys * sizeof *b->grad);
    size_t bias = find_key(b->keys, nkeys, ARFF_BIAS_KEY);
    for (size_t i = 0; i < n; i++) {
        size_t d = idx[i];
        double m = margin(s, d, b->keys, nkeys, tr->w);
        int y = s->labels[d];
        /* d loss / d margin = sigmoid(m) - y */
        double r = 1.0 / (1.0 + exp(-m)) - y;
        float rs = (float)(r * doc_scale(s, d));
        for (size_t j = s->start[d]; j < s->start[d + 1]; j++)
            b->grad[find_key(b->keys, nkeys, s->keys[j])] += rs;
        b->grad[bias] += (float)r;
        *loss += softplus(y ? -m : m);
    }

    if (finish_push(tr) < 0)
        return -1;
    ps_ts ts = ps_push(tr->c, tr->table, b->keys, nkeys, b->grad, NULL, NULL);
    if (ts < 0)
        return report_failure(tr->c, "push", (int)ts);
    tr->inflight = ts;
    tr->cur ^= 1;
    tr->steps++;
    tr->keys_pushed += nkeys;
    return 0;
}

/* Sets up tr for worker `worker` of `workers` on the set s. Returns 0, or
 * -1 after a message. */
static int trainer_init(trainer *tr, const arff_set *s, int worker,
                        int workers, size_t batch)
{
    memset(tr, 0, sizeof *tr);
    tr->train = s;
    tr->lo = (size_t)((uint64_t)worker * s->n / (uint64_t)workers);
    tr->hi = (size_t)((uint64_t)(worker + 1) * s->n / (uint64_t)workers);
    if (tr->hi == tr->lo) {
        complain("%d workers leave no documents for worker %d", workers,
                 worker);
        return -1;
    }
    size_t most = 0;
    for (size_t d = 0; d < s->n; d++)
        if (s->start[d + 1] - s->start[d] > most)
            most = s->start[d + 1] - s->start[d];
    tr->cap = batch * most + 1;

    tr->order = malloc(s->n * sizeof *tr->order);
    tr->w = malloc(tr->cap * sizeof *tr->w);
    for (int i = 0; i < 2; i++) {
        tr->buf[i].keys = malloc(tr->cap * sizeof *tr->buf[i].keys);
        tr->buf[i].grad = malloc(tr->cap * sizeof *tr->buf[i].grad);
    }
    if (!tr->order || !tr->w || !tr->buf[0].keys || !tr->buf[0].grad ||
        !tr->buf[1].keys || !tr->buf[1].grad) {
        complain("out of memory");
        return -1;
    }
    for (size_t i = 0; i < s->n; i++)
        tr->order[i] = i;
    tr->rng = SHUFFLE_SEED;
    return 0;
}

/* Frees what trainer_init allocated. Nothing may be in flight. */
static void trainer_destroy(trainer *tr)
{
    free(tr->order);
    free(tr->w);
    for (int i = 0; i < 2; i++) {
        free(tr->buf[i].keys);
        free(tr->buf[i].grad);
    }
}

/* Worker `worker` of o->workers: trains for o->epochs epochs. Every worker
 * shuffles the whole training set the same way each epoch and takes its
 * own contiguous share of that order, so the shares are disjoint and
 * together cover the set once per epoch. Returns 0, or -1 after a
 * message. */
static int run_worker(const options *o, int worker, const arff_set *train)
{
    trainer tr;
    ps_client *c = NULL;
    int rc = -1;
    double first_loss = 0.0, loss = 0.0, t0 = now();

    complain_as("reuters_lr[%d]", worker);
    if (trainer_init(&tr, train, worker, o->workers, (size_t)o->batch) < 0 ||
        open_table(o, worker, &c, &tr.table) < 0)
        goto done;
    tr.c = c;

    size_t n = tr.hi - tr.lo, batch = (size_t)o->batch;
    for (int e = 1; e <= o->epochs; e++) {
        shuffle(tr.order, train->n, &tr.rng);
        loss = 0.0;
        for (size_t i = 0; i < n; i += batch) {
            size_t k = n - i < batch ? n - i : batch;
            if (train_step(&tr, tr.order + tr.lo + i, k, &loss) < 0)
                goto done;
        }
        loss /= (double)n;
        if (e == 1)
            first_loss = loss;
    }
    if (finish_push(&tr) < 0)
        goto done;
    char losses[80];
    if (o->epochs > 1)
        snprintf(losses, sizeof losses, "%.4f in epoch 1, %.4f in epoch %d",
                 first_loss, loss, o->epochs);
    else
        snprintf(losses, sizeof losses, "%.4f", loss);
    printf("worker %d: %zu documents x %d epoch%s in %zu steps, %.0f keys "
           "per push on average; train loss %s (%.2f s)\n", worker, n,
           o->epochs, o->epochs == 1 ? "" : "s", tr.steps,
           (double)tr.keys_pushed / (double)tr.steps, losses, now() - t0);
    rc = 0;
done:
    /* ps_close waits for a push still borrowing tr.buf. */
    ps_close(c);
    trainer_destroy(&tr);
    return rc;
}

/* The workers run_workers forked, for pass_on. */
static pid_t pids[64];
static volatile sig_atomic_t npids;

/* The signals that stop the parent: it passes each on to its workers,
 * which would otherwise train on with nobody waiting for them (until the
 * nodes stop and their requests time out), then dies of it itself. */
static const int stop_signals[] = { SIGTERM, SIGINT, SIGHUP };
#define NSTOP (sizeof stop_signals / sizeof stop_signals[0])

static void pass_on(int sig)
{
    for (sig_atomic_t i = 0; i < npids; i++)
        kill(pids[i], sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Forks o->workers workers on train and waits for all of them. Returns 0
 * if every one exited 0, or -1 after a message. A stop signal is passed
 * on to the workers (see pass_on); one ignored when we started (SIGINT
 * in a background job of sh) stays ignored, in the workers too. */
static int run_workers(const options *o, const arff_set *train)
{
    int started = 0, failed = 0;
    struct sigaction old[NSTOP], sa;
    sigset_t stops, prev;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = pass_on;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&stops);
    for (size_t k = 0; k < NSTOP; k++) {
        sigaddset(&stops, stop_signals[k]);
        sigaddset(&sa.sa_mask, stop_signals[k]);
    }
    for (size_t k = 0; k < NSTOP; k++) {
        sigaction(stop_signals[k], NULL, &old[k]);
        if (old[k].sa_handler != SIG_IGN)
            sigaction(stop_signals[k], &sa, NULL);
    }

    /* Nothing buffered may be printed twice, once by each child. */
    fflush(NULL);
    for (; started < o->workers; started++) {
        /* Blocked until the new pid is in pids, so no worker misses a
         * signal that arrives meanwhile. */
        sigprocmask(SIG_BLOCK, &stops, &prev);
        pid_t p = fork();
        if (p == 0) {
            for (size_t k = 0; k < NSTOP; k++)
                sigaction(stop_signals[k], &old[k], NULL);
            sigprocmask(SIG_SETMASK, &prev, NULL);
            int rc = run_worker(o, started, train);
            fflush(NULL);
            _exit(rc == 0 ? 0 : 1);
        }
        if (p > 0) {
            pids[started] = p;
            npids = started + 1;
        }
        int fork_errno = errno;
        sigprocmask(SIG_SETMASK, &prev, NULL);
        if (p < 0) {
            complain("fork: %s", strerror(fork_errno));
            failed = 1;
            break;
        }
    }
    int lost = 0;
    for (int i = 0; i < started && !lost; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0) {
            if (errno != EINTR) {
                complain("waitpid: %s", strerror(errno));
                lost = failed = 1;
                break;
            }
        }
        if (lost)
            break;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            if (WIFSIGNALED(st))
                complain("worker %d was killed by signal %d", i,
                         WTERMSIG(st));
            else
                complain("worker %d failed with status %d", i,
                         WEXITSTATUS(st));
            failed = 1;
        }
    }
    /* The workers are reaped: their pids may be reused. */
    for (size_t k = 0; k < NSTOP; k++)
        sigaction(stop_signals[k], &old[k], NULL);
    npids = 0;
    return failed ? -1 : 0;
}

/* ---- evaluation --------------------------------------------------------- */

typedef struct scored { double score; int label; } scored;

static int cmp_score(const void *a, const void *b)
{
    double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x > y) - (x < y);
}

/* The area under the ROC curve of sc[0..n) (sorted here), i.e. the chance
 * that a random positive scores above a random negative, ties counting
 * half: the Mann-Whitney U statistic with mid-ranks. Returns NAN when
 * either class is absent. */
static double auc(scored *sc, size_t n)
{
    size_t pos = 0;
    double rank_sum = 0.0;

    qsort(sc, n, sizeof *sc, cmp_score);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && sc[j].score == sc[i].score)
            j++;
        double mid = (double)(i + 1 + j) / 2.0;  /* ranks i+1..j */
        for (size_t k = i; k < j; k++)
            if (sc[k].label) {
                rank_sum += mid;
                pos++;
            }
        i = j;
    }
    size_t neg = n - pos;
    if (pos == 0 || neg == 0)
        return NAN;
    return (rank_sum - (double)pos * (double)(pos + 1) / 2.0) /
           ((double)pos * (double)neg);
}

/* The distinct keys of every document of a and of b (may be NULL), bias
 * included. Returns how many, or 0 after a message. psd has no call that
 * counts a table's rows, but on fresh nodes the table holds exactly the
 * keys that were pushed or pulled, and those are known here. */
static size_t count_keys(const arff_set *a, const arff_set *b)
{
    size_t na = a->start[a->n], nb = b ? b->start[b->n] : 0;
    uint64_t *keys = malloc((na + nb + 1) * sizeof *keys);
    if (!keys) {
        complain("out of memory");
        return 0;
    }
    memcpy(keys, a->keys, na * sizeof *keys);
    if (nb)
        memcpy(keys + na, b->keys, nb * sizeof *keys);
    keys[na + nb] = ARFF_BIAS_KEY;
    size_t m = sort_unique(keys, na + nb + 1);
    free(keys);
    return m;
}

/* Reads the model off the servers as a reader (worker -1): pulls the
 * weights of the test documents' keys in one request and prints test AUC,
 * accuracy and the majority baseline. With train (may be NULL) it also
 * counts the keys the table holds. Sets *auc_out. Returns 0, or -1 after
 * a message. */
static int evaluate(const options *o, const arff_set *test,
                    const arff_set *train, double *auc_out)
{
    ps_client *c = NULL;
    uint64_t *keys = malloc((test->start[test->n] + 1) * sizeof *keys);
    scored *sc = malloc((test->n ? test->n : 1) * sizeof *sc);
    float *w = NULL;
    int table, rc = -1;

    complain_as("reuters_lr[eval]");
    if (!keys || !sc) {
        complain("out of memory");
        goto done;
    }
    memcpy(keys, test->keys, test->start[test->n] * sizeof *keys);
    keys[test->start[test->n]] = ARFF_BIAS_KEY;
    size_t nkeys = sort_unique(keys, test->start[test->n] + 1);
    w = malloc(nkeys * sizeof *w);
    if (!w) {
        complain("out of memory");
        goto done;
    }
    if (open_table(o, -1, &c, &table) < 0 ||
        pull_keys(c, table, keys, nkeys, w) < 0)
        goto done;

    size_t right = 0, nonzero = 0;
    for (size_t d = 0; d < test->n; d++) {
        double m = margin(test, d, keys, nkeys, w);
        sc[d].score = m;
        sc[d].label = test->labels[d];
        right += (m >= 0.0) == (test->labels[d] == 1);
    }
    for (size_t i = 0; i < nkeys; i++)
        nonzero += w[i] != 0.0f;

    size_t n = test->n, pos = test->npos;
    double acc = (double)right / (double)n;
    double base = (double)(pos > n - pos ? pos : n - pos) / (double)n;
    *auc_out = auc(sc, n);
    printf("test set: %zu documents, %zu about grain; pulled %zu keys, "
           "%zu with a non-zero weight\n", n, pos, nkeys, nonzero);
    printf("test AUC: %.4f\n", *auc_out);
    printf("test accuracy: %.4f (threshold 0.5)\n", acc);
    printf("majority baseline: %.4f (always \"%s\"); accuracy is %s it\n",
           base, pos > n - pos ? "grain" : "not grain",
           acc > base ? "above" : "NOT above");
    if (train) {
        size_t pushed = count_keys(train, NULL);
        size_t seen = pushed ? count_keys(train, test) : 0;
        /* With --eval nothing was pushed by this run: the table holds
         * what the runs that trained it pushed. */
        if (seen && !o->eval)
            printf("keys in the table: %zu of the %llu possible, the ones "
                   "of the training set (bias included), pushed by the "
                   "workers\n"
                   "  %zu more only in the test set were pulled: they read "
                   "their initial row (0) and take no room\n", pushed,
                   (unsigned long long)ARFF_KEY_SPACE + 1, seen - pushed);
        else if (seen)
            printf("keys of the training set: %zu of the %llu possible "
                   "(bias included), the ones a run that trained on it "
                   "pushed\n"
                   "  %zu more only in the test set were pulled: where no "
                   "run pushed them they read their initial row (0) and "
                   "take no room\n", pushed,
                   (unsigned long long)ARFF_KEY_SPACE + 1, seen - pushed);
    }
    rc = 0;
done:
    ps_close(c);
    free(keys);
    free(sc);
    free(w);
    return rc;
}

/* Prints whether the AUC met the target. Returns 0 if it did, else 3. */
static int verdict(double a, double target)
{
    int met = a >= target;     /* false for NAN */
    printf("target test AUC >= %g: %s (%.4f)\n", target,
           met ? "met" : "MISSED", a);
    return met ? 0 : 3;
}

int main(int argc, char **argv)
{
    options o;
    arff_set train, test;
    int rc = 1;

    memset(&train, 0, sizeof train);
    memset(&test, 0, sizeof test);
    complain_as("reuters_lr");
    /* Line-buffered even into a pipe: run_sparse.sh shows progress live. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(argc, argv, &o) < 0)
        return 2;

    double t0 = now();
    if (load_set(o.data, TRAIN_FILE, &train) < 0 ||
        (o.worker < 0 && load_set(o.data, TEST_FILE, &test) < 0))
        goto done;

    if (o.worker >= 0) {
        rc = run_worker(&o, o.worker, &train) == 0 ? 0 : 1;
        goto done;
    }

    double a;
    if (o.eval) {
        if (evaluate(&o, &test, &train, &a) == 0)
            rc = verdict(a, o.target_auc);
        goto done;
    }

    double t1 = now();
    printf("loaded %zu training documents (%zu about grain) and %zu test "
           "documents in %.2f s\n", train.n, train.npos, test.n, t1 - t0);
    printf("training: %d workers, %d epochs, %d documents per worker and "
           "step\n", o.workers, o.epochs, o.batch);
    if (run_workers(&o, &train) < 0)
        goto done;
    double t2 = now();
    if (evaluate(&o, &test, &train, &a) < 0)
        goto done;
    double t3 = now();
    printf("wall time: %.2f s (training %.2f s, evaluation %.2f s)\n",
           t3 - t1, t2 - t1, t3 - t2);
    rc = verdict(a, o.target_auc);
done:
    arff_destroy(&train);
    arff_destroy(&test);
    return rc;
}
