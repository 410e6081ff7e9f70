/* Operator commands and the node's report; see admin.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "journal.h"
#include "updater.h"
#include "version.h"
#include "../proto/status.h"

/* ---- a growing text ------------------------------------------------- */

typedef struct tbuf {
    char *p;
    size_t len, cap;
    int oom;
} tbuf;

__attribute__((format(printf, 2, 3)))
static void put(tbuf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL,
                          b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

/* The length of the well-formed UTF-8 sequence at s (1 to 4), or 0 when
 * its bytes are not one (a Latin-1 file name, a cut sequence): JSON and
 * Prometheus text must be UTF-8, so such a byte goes out as U+FFFD. */
static int utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    int n = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2
          : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    /* The second byte's range excludes overlong forms and surrogates. */
    unsigned char lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    for (int i = 1; i < n; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    return n;
}

/* Puts the character at *s, or U+FFFD for a byte that starts none, and
 * moves *s past it. */
static void put_utf8(tbuf *b, const char **s)
{
    int n = utf8_len((const unsigned char *)*s);
    if (n)
        put(b, "%.*s", n, *s);
    else
        put(b, "\xef\xbf\xbd");
    *s += n ? n : 1;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_str(tbuf *b, const char *s)
{
    put(b, "\"");
    while (*s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(b, "\\%c", c);
        else if (c < 0x20)
            put(b, "\\u%04x", c);
        else {
            put_utf8(b, &s);
            continue;
        }
        s++;
    }
    put(b, "\"");
}

/* ---- the counters and their window ------------------------------------ */

/* Node counters first, then four per table, then the service time
 * histograms (lat_at); rates, and quantiles over the window, are
 * computed from them. */
enum { C_REQUESTS, C_FRAMES, C_ERRORS, C_PUSHES, C_PULLS, C_KEYS_PUSHED,
       C_KEYS_PULLED, C_DUPLICATES, C_BYTES_IN, C_BYTES_OUT, C_NODE };
enum { T_PUSHES, T_PULLS, T_KEYS_PUSHED, T_KEYS_PULLED, T_PER };

static size_t lat_at(const psd_admin *a)
{
    return C_NODE + (size_t)a->node->ntables * T_PER;
}

static void collect(const psd_admin *a, uint64_t *v)
{
    const psd_stats *s = &a->node->stats;
    v[C_REQUESTS] = s->requests;
    v[C_FRAMES] = s->frames;
    v[C_ERRORS] = s->request_errors;
    v[C_PUSHES] = s->pushes;
    v[C_PULLS] = s->pulls;
    v[C_KEYS_PUSHED] = s->keys_pushed;
    v[C_KEYS_PULLED] = s->keys_pulled;
    v[C_DUPLICATES] = s->duplicates;
    v[C_BYTES_IN] = s->bytes_in;
    v[C_BYTES_OUT] = s->bytes_out;
    for (int i = 0; i < a->node->ntables; i++) {
        const psd_table_stats *t = &a->node->tstats[i];
        uint64_t *w = v + C_NODE + (size_t)i * T_PER;
        w[T_PUSHES] = t->pushes;
        w[T_PULLS] = t->pulls;
        w[T_KEYS_PUSHED] = t->keys_pushed;
        w[T_KEYS_PULLED] = t->keys_pulled;
    }
    memcpy(v + lat_at(a), a->node->latency, sizeof a->node->latency);
}

static void on_tick(uv_timer_t *t)
{
    psd_admin *a = t->data;
    int slots = PSD_ADMIN_WINDOW + 1;
    a->head = (a->head + 1) % slots;
    collect(a, a->ring + (size_t)a->head * a->width);
    a->ring_ms[a->head] = uv_now(a->loop);
    if (a->filled < slots)
        a->filled++;
}

int psd_admin_init(psd_admin *a, uv_loop_t *loop, psd_node *n,
                   psd_conns *conns, psd_durable *dur)
{
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->node = n;
    a->conns = conns;
    a->dur = dur;
    a->start_ms = uv_now(loop);
    a->width = C_NODE + (size_t)n->ntables * T_PER +
               (size_t)PSD_LAT_KINDS * PSW_HIST_N;
    a->ring = calloc((PSD_ADMIN_WINDOW + 1) * a->width, sizeof *a->ring);
    if (!a->ring)
        return -1;
    a->head = -1;
    on_tick(&(uv_timer_t){ .data = a });    /* the first sample: now */
    uv_timer_init(loop, &a->tick);
    a->tick.data = a;
    uv_timer_start(&a->tick, on_tick, 1000, 1000);
    n->admin = psd_admin_command;
    n->admin_arg = a;
    return 0;
}

void psd_admin_stop(psd_admin *a)
{
    if (!a->ring)
        return;
    uv_close((uv_handle_t *)&a->tick, NULL);
    free(a->ring);
    a->ring = NULL;
    a->node->admin = NULL;
}

/* Per-second rates over the window: from the oldest sample kept to now. */
typedef struct rates {
    uint64_t *now;
    const uint64_t *base;
    double secs;
} rates;

static int rates_begin(const psd_admin *a, rates *r)
{
    r->now = malloc(a->width * sizeof *r->now);
    if (!r->now)
        return -1;
    collect(a, r->now);
    if (!a->ring) {
        /* Stopping (psd_admin_stop freed the window), while a metrics
         * request that was being read is answered: no rates. */
        r->base = r->now;
        r->secs = 0;
        return 0;
    }
    int slots = PSD_ADMIN_WINDOW + 1;
    int oldest = a->filled < slots ? 0 : (a->head + 1) % slots;
    r->base = a->ring + (size_t)oldest * a->width;
    r->secs = (double)(uv_now(a->loop) - a->ring_ms[oldest]) / 1000.0;
    return 0;
}

static double rate(const rates *r, size_t i)
{
    return r->secs > 0.05 ? (double)(r->now[i] - r->base[i]) / r->secs : 0;
}

/* The service times of kind k over the window, into h (PSW_HIST_N): the
 * node's own quantiles are over its whole life, which after a day says
 * little of the last seconds. */
static void window_hist(const psd_admin *a, const rates *r, int k,
                        uint64_t *h)
{
    size_t at = lat_at(a) + (size_t)k * PSW_HIST_N;
    for (size_t i = 0; i < PSW_HIST_N; i++)
        h[i] = r->now[at + i] - r->base[at + i];
}

/* Seconds since the newest good snapshot, or -1 when there is none. The
 * wall clock in ms, as durable.c stamps the snapshot: in whole seconds
 * it made a snapshot of this second look older than now, and so absent.
 * A clock stepped back gives 0, not -1. */
static double snapshot_age(const psd_durable_stats *d)
{
    if (!d->last_ok_ms)
        return -1;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t wall = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
    return wall > d->last_ok_ms ? (double)(wall - d->last_ok_ms) / 1e3 : 0;
}

/* How long the running snapshot has run (its journal fsync first, then
 * its writer); 0 when none runs. */
static double running_s(const psd_durable *dur)
{
    if (!dur->child && !dur->presync)
        return 0;
    double s = (double)(uv_hrtime() - (dur->child ? dur->child_start_ns
                                                  : dur->presync_start_ns)) /
               1e9;
    return s > 0.001 ? s : 0.001;    /* running: never reads as 0 */
}

uint64_t psd_rss_bytes(void)
{
    unsigned long long size, resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    int ok = fscanf(f, "%llu %llu", &size, &resident) == 2;
    fclose(f);
    return ok ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

static const char *const lat_names[PSD_LAT_KINDS] = { "push", "pull",
                                                      "pushpull",
                                                      "control" };
static const char *const worker_states[] = { "absent", "live", "gone",
                                             "left" };

static uint64_t hist_count(const uint64_t *h)
{
    uint64_t n = 0;
    for (size_t b = 0; b < PSW_HIST_N; b++)
        n += h[b];
    return n;
}

/* ---- stats (JSON) ----------------------------------------------------- */

/* The hyper-parameters p's updater reads: `"lr": 0.01, ...` (json) or
 * `lr 0.01, ...` (a label's text). %.7g: a float as the ini wrote it. */
static void put_params(tbuf *b, const psd_updater_params *p, int json)
{
    const char *pn[PSD_UPDATER_PARAMS_MAX];
    double pv[PSD_UPDATER_PARAMS_MAX];
    int np = psd_updater_params_list(p, pn, pv);
    for (int k = 0; k < np; k++)
        put(b, json ? "%s\"%s\": %.7g" : "%s%s %.7g", k ? ", " : "", pn[k],
            pv[k]);
}

/* A table's init as the ini writes it: `uniform -0.1 0.1`. */
static void put_init(tbuf *b, const psd_init_params *ip)
{
    char text[96];
    psd_init_format(text, sizeof text, ip);
    put(b, "%s", text);
}

/* `"service_us": {"push": {"count": N, "p50": ...}, ...}` of the
 * histograms hs, one per kind: the node's own, or those of the rates'
 * window. `head` opens the object. */
static void put_service_json(tbuf *b, const char *head,
                             const uint64_t (*hs)[PSW_HIST_N])
{
    put(b, "%s", head);
    for (int k = 0; k < PSD_LAT_KINDS; k++) {
        const uint64_t *h = hs[k];
        put(b, "%s\"%s\": {\"count\": %llu, \"p50\": %.1f, \"p90\": "
            "%.1f, \"p99\": %.1f, \"max\": %.1f}", k ? ", " : "",
            lat_names[k], (unsigned long long)hist_count(h),
            (double)psw_hist_quantile(h, 0.5) / 1e3,
            (double)psw_hist_quantile(h, 0.9) / 1e3,
            (double)psw_hist_quantile(h, 0.99) / 1e3,
            (double)psw_hist_max(h) / 1e3);
    }
    put(b, "},\n");
}

/* Lines `NAME{node="I",kind="K",quantile="Q"} seconds` of h, for the
 * quantiles Prometheus summaries give: NaN when h is empty, as their
 * clients write (0 would read "no time at all"). */
static void put_quantiles(tbuf *b, const char *name, int node, int k,
                          const uint64_t *h)
{
    static const double qs[] = { 0.5, 0.9, 0.99 };
    int none = hist_count(h) == 0;
    for (size_t q = 0; q < 3; q++) {
        put(b, "%s{node=\"%d\",kind=\"%s\",quantile=\"%g\"} ", name, node,
            lat_names[k], qs[q]);
        if (none)
            put(b, "NaN\n");
        else
            put(b, "%.9f\n", (double)psw_hist_quantile(h, qs[q]) / 1e9);
    }
}

/* Lines `NAME_bucket{node="I",kind="K",le="S"} count`, cumulative, for
 * le from 2^13 ns (8 us) to 2^34 ns (17 s) and +Inf, then _sum and
 * _count. A power of two is where one of h's octaves starts (hist.h), so
 * each bucket counts exactly the requests that took less than its le
 * (Prometheus' "at most": a request of exactly 2^e ns, counted in the
 * next bucket, is the only difference): no bucket of h straddles one.
 * Powers of two keep the lines few (23 a kind); histogram_quantile
 * interpolates within a doubling. */
static void put_buckets(tbuf *b, const char *name, int node, int k,
                        const uint64_t *h, uint64_t sum_ns)
{
    enum { LE_FIRST = 13, LE_LAST = 34 };
    _Static_assert((LE_LAST - 2) * PSW_HIST_SUB < PSW_HIST_N,
                   "a bucket past the histogram's last");
    uint64_t below = 0;
    size_t next = 0;
    for (int e = LE_FIRST; e <= LE_LAST; e++) {
        /* 2^e ns starts octave e - 2: h's bucket (e - 2) * SUB. */
        size_t end = (size_t)(e - 2) * PSW_HIST_SUB;
        for (; next < end; next++)
            below += h[next];
        /* 2^e ns in seconds, every digit: "%.9g" cut 2^30 ns to
         * 1.07374182, below the bucket's true bound. */
        uint64_t ns = UINT64_C(1) << e;
        char frac[16];
        int fl = snprintf(frac, sizeof frac, "%09llu",
                          (unsigned long long)(ns % 1000000000u));
        while (fl > 1 && frac[fl - 1] == '0')
            frac[--fl] = '\0';
        put(b, "%s_bucket{node=\"%d\",kind=\"%s\",le=\"%llu.%s\"} %llu\n",
            name, node, lat_names[k], (unsigned long long)(ns / 1000000000u),
            frac, (unsigned long long)below);
    }
    uint64_t all = hist_count(h);
    put(b, "%s_bucket{node=\"%d\",kind=\"%s\",le=\"+Inf\"} %llu\n", name,
        node, lat_names[k], (unsigned long long)all);
    put(b, "%s_sum{node=\"%d\",kind=\"%s\"} %.9f\n", name, node,
        lat_names[k], (double)sum_ns / 1e9);
    put(b, "%s_count{node=\"%d\",kind=\"%s\"} %llu\n", name, node,
        lat_names[k], (unsigned long long)all);
}

static void stats_json(psd_admin *a, const rates *r, tbuf *b)
{
    psd_node *n = a->node;
    const psd_stats *s = &n->stats;
    const psd_durable_stats *d = &a->dur->st;
    uint64_t now = uv_now(a->loop);
    uint64_t rows, bytes;
    psd_node_size(n, &rows, &bytes);
    put(b, "{\"node\": %d, \"nodes\": %d, \"address\": ", n->index,
        n->cfg.nnodes);
    put_json_str(b, n->cluster.nodes[n->index]);
    put(b, ", \"version\": \"" PSD_RELEASE "\", \"pid\": %ld, \"uptime_s\": "
        "%.1f, \"shards\": %u,\n",
        (long)getpid(), (double)(now - a->start_ms) / 1000.0, n->cfg.shards);
    put(b, " \"memory\": {\"rss_bytes\": %llu, \"table_bytes\": %llu, "
        "\"rows\": %llu},\n", (unsigned long long)psd_rss_bytes(),
        (unsigned long long)bytes, (unsigned long long)rows);
    put(b, " \"connections\": {\"open\": %d, \"accepted\": %llu, "
        "\"refused\": %llu, \"protocol_errors\": %llu, \"peers_lost\": "
        "%llu, \"evicted\": %llu, \"over_memory\": %llu, "
        "\"frame_timeouts\": %llu, \"auth_failures\": %llu, "
        "\"bytes_in\": %llu, \"bytes_out\": %llu},\n",
        a->conns->n, (unsigned long long)s->conns_accepted,
        (unsigned long long)s->conns_refused,
        (unsigned long long)s->proto_errors,
        (unsigned long long)s->peers_lost,
        (unsigned long long)s->conns_evicted,
        (unsigned long long)s->conns_over_memory,
        (unsigned long long)s->frames_timed_out,
        (unsigned long long)s->auth_failures,
        (unsigned long long)s->bytes_in, (unsigned long long)s->bytes_out);
    put(b, " \"requests\": {\"total\": %llu, \"frames\": %llu, \"errors\": "
        "%llu, \"duplicates\": %llu, \"pushes\": %llu, \"pulls\": %llu, "
        "\"keys_pushed\": %llu, \"keys_pulled\": %llu},\n",
        (unsigned long long)s->requests, (unsigned long long)s->frames,
        (unsigned long long)s->request_errors,
        (unsigned long long)s->duplicates, (unsigned long long)s->pushes,
        (unsigned long long)s->pulls, (unsigned long long)s->keys_pushed,
        (unsigned long long)s->keys_pulled);
    size_t dclients, dpushes, dbytes;
    psd_dedup_size(n->dedup, &dclients, &dpushes, &dbytes);
    put(b, " \"exactly_once\": {\"clients\": %zu, \"pushes\": %zu, "
        "\"bytes\": %zu, \"refused\": %llu, \"forgotten_early\": %llu, "
        "\"expired\": %llu},\n",
        dclients, dpushes, dbytes, (unsigned long long)s->unacked_refusals,
        (unsigned long long)s->clients_forgotten,
        (unsigned long long)s->clients_expired);
    put(b, " \"per_second\": {\"window_s\": %.1f, \"requests\": %.1f, "
        "\"pushes\": %.1f, \"pulls\": %.1f, \"keys_pushed\": %.1f, "
        "\"keys_pulled\": %.1f, \"errors\": %.1f, \"bytes_in\": %.1f, "
        "\"bytes_out\": %.1f},\n", r->secs,
        rate(r, C_REQUESTS), rate(r, C_PUSHES), rate(r, C_PULLS),
        rate(r, C_KEYS_PUSHED), rate(r, C_KEYS_PULLED), rate(r, C_ERRORS),
        rate(r, C_BYTES_IN), rate(r, C_BYTES_OUT));
    put_service_json(b, " \"service_us\": {",
                     (const uint64_t (*)[PSW_HIST_N])n->latency);
    /* The same over the rates' window (zeros for a kind without a
     * request in it). */
    char head[64];
    snprintf(head, sizeof head, " \"service_us_recent\": {\"window_s\": "
             "%.1f, ", r->secs);
    uint64_t recent[PSD_LAT_KINDS][PSW_HIST_N];
    for (int k = 0; k < PSD_LAT_KINDS; k++)
        window_hist(a, r, k, recent[k]);
    put_service_json(b, head, (const uint64_t (*)[PSW_HIST_N])recent);
    put(b, " \"tables\": [");
    for (int i = 0; i < n->ntables; i++) {
        const psd_table *t = n->tables[i];
        const psd_table_conf *tc = psd_table_conf_get(t);
        const psd_table_stats *ts = &n->tstats[i];
        size_t at = C_NODE + (size_t)i * T_PER;
        put(b, "%s\n  {\"name\": ", i ? "," : "");
        put_json_str(b, tc->name);
        put(b, ", \"kind\": \"%s\", \"dim\": %u, \"updater\": \"%s\", "
            "\"consistency\": \"%s\", \"rows\": %llu, \"bytes\": %llu, "
            "\"pushes\": %llu, \"pulls\": %llu, \"keys_pushed\": %llu, "
            "\"keys_pulled\": %llu, \"errors\": %llu, \"pushes_per_s\": %.1f, "
            "\"pulls_per_s\": %.1f, \"keys_pushed_per_s\": %.1f, "
            "\"keys_pulled_per_s\": %.1f",
            tc->dense ? "dense" : "sparse", tc->dim,
            psd_updater_name(tc->upd.kind),
            psd_consistency_name(tc->consistency),
            (unsigned long long)psd_table_rows(t),
            (unsigned long long)psd_table_bytes(t),
            (unsigned long long)ts->pushes, (unsigned long long)ts->pulls,
            (unsigned long long)ts->keys_pushed,
            (unsigned long long)ts->keys_pulled,
            (unsigned long long)ts->errors, rate(r, at + T_PUSHES),
            rate(r, at + T_PULLS), rate(r, at + T_KEYS_PUSHED),
            rate(r, at + T_KEYS_PULLED));
        /* The hyper-parameters in force (a reload may have changed them,
         * on some nodes and not others). */
        put(b, ", \"params\": {");
        put_params(b, &tc->upd, 1);
        /* The limits a reload changes too: a node that took a different
         * nonfinite or max_rows applies what the others refuse. */
        put(b, "}, \"nonfinite\": \"%s\", \"max_rows\": %llu, "
            "\"init\": \"", tc->allow_nonfinite ? "allow" : "reject",
            (unsigned long long)tc->max_rows);
        /* And what makes its new rows: nodes started with another init
         * or seed make other rows, which no client can tell. */
        put_init(b, &tc->init);
        put(b, "\", \"seed\": %llu}", (unsigned long long)tc->init.seed);
    }
    put(b, "],\n \"workers\": {\"expected\": %d, \"clock\": %llu, "
        "\"barrier\": %llu, \"list\": [", n->sync.nworkers,
        (unsigned long long)n->sync.clock, (unsigned long long)n->sync.barrier);
    for (int i = 0; i < n->sync.nworkers; i++) {
        const psd_worker *w = &n->sync.workers[i];
        put(b, "%s{\"worker\": %d, \"state\": \"%s\", \"clock\": %llu, "
            "\"barrier\": %llu, \"peer\": ", i ? ", " : "", i,
            worker_states[w->state], (unsigned long long)w->clock,
            (unsigned long long)w->barrier);
        put_json_str(b, w->peer);
        /* Live by a HELLO whose open has not completed (PROTOCOL.md,
         * section 10.1): not yet taken in for good. */
        put(b, ", \"pending\": %s}", w->pending ? "true" : "false");
    }
    put(b, "]},\n \"snapshot\": {\"dir\": ");
    put_json_str(b, a->dur->dir);
    put(b, ", \"interval_s\": %d, \"journal_mb\": %d, \"generation\": %llu, "
        "\"age_s\": %.1f, "
        "\"running\": %s, \"running_s\": %.3f, \"written\": %llu, "
        "\"failures\": %llu, "
        "\"last_bytes\": %llu, \"last_seconds\": %.3f, \"last_fork_ms\": %.3f,"
        " \"last_error\": ", n->cfg.snapshot_interval,
        n->cfg.snapshot_journal_mb,
        (unsigned long long)d->generation,
        snapshot_age(d),
        a->dur->child || a->dur->presync ? "true" : "false", running_s(a->dur),
        (unsigned long long)d->snapshots,
        (unsigned long long)d->snapshot_failures,
        (unsigned long long)d->last_bytes, d->last_seconds, d->last_pause_ms);
    put_json_str(b, d->last_error);
    put(b, ", \"recovery_seconds\": %.3f, \"replayed_records\": %llu},\n",
        d->recovery_seconds, (unsigned long long)d->journal_records);
    put(b, " \"journal\": {\"enabled\": %s, \"fsync\": \"%s\"",
        n->journal ? "true" : "false", psd_fsync_name(a->dur->fsync_mode));
    if (n->journal)
        put(b, ", \"segment\": %llu, \"segment_bytes\": %llu",
            (unsigned long long)psd_journal_seq(n->journal),
            (unsigned long long)psd_journal_bytes(n->journal));
    put(b, ", \"fsyncs\": %llu, \"fsync_ms_last\": %.3f, \"fsync_ms_max\": "
        "%.3f, \"write_errors\": %llu, \"error\": ",
        (unsigned long long)d->fsyncs, d->fsync_ms_last, d->fsync_ms_max,
        (unsigned long long)s->journal_errors);
    put_json_str(b, n->journal_error);
    const char *re = a->reload_error ? a->reload_error : "";
    put(b, "},\n \"reload\": {\"ok\": %s, \"error\": ",
        re[0] ? "false" : "true");
    put_json_str(b, re);
    put(b, ", \"applied\": %llu, \"refused\": %llu}}\n",
        (unsigned long long)s->reloads,
        (unsigned long long)s->reloads_refused);
}

/* ---- metrics (Prometheus text format 0.0.4) ------------------------------ */

static void metric_head(tbuf *b, const char *name, const char *type,
                        const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric(tbuf *b, const char *name, const char *type,
                   const char *help, int node, double v)
{
    metric_head(b, name, type, help);
    put(b, "%s{node=\"%d\"} %.15g\n", name, node, v);
}

/* The node's figures (node_lines) and those of its tables t0..t1-1: all
 * of them for /metrics and "metrics"; psctl asks "metrics node" and
 * "metrics tables A B" where the whole would pass an ADMIN answer's
 * PSW_ADMIN_REPLY_MAX (4096 tables of long names: 4.3 MB). */
static void metrics_text(psd_admin *a, tbuf *b, int node_lines, int t0,
                         int t1)
{
    psd_node *n = a->node;
    const psd_stats *s = &n->stats;
    const psd_durable_stats *d = &a->dur->st;
    int i = n->index;
    uint64_t rows, bytes;
    size_t dclients, dpushes, dbytes;
    psd_node_size(n, &rows, &bytes);
    psd_dedup_size(n->dedup, &dclients, &dpushes, &dbytes);
    if (node_lines) {
        metric(b, "psd_up", "gauge", "1 while the node serves.", i, 1);
        metric(b, "psd_uptime_seconds", "gauge", "Seconds since the node "
               "started.", i, (double)(uv_now(a->loop) - a->start_ms) / 1e3);
        metric(b, "psd_resident_memory_bytes", "gauge", "Resident set size.", i,
               (double)psd_rss_bytes());
        metric(b, "psd_connections", "gauge", "Open client connections.", i,
               a->conns->n);
        metric(b, "psd_connections_accepted_total", "counter", "Connections "
               "accepted.", i, (double)s->conns_accepted);
        metric(b, "psd_connections_refused_total", "counter", "Connections "
               "refused at max_connections, max_connections_per_addr or the room "
               "the open files limit leaves.", i,
               (double)s->conns_refused);
        metric(b, "psd_connections_evicted_total", "counter", "Idle "
               "connections closed to make room for a new one.", i,
               (double)s->conns_evicted);
        metric(b, "psd_connections_over_memory_total", "counter", "Connections "
               "closed at max_client_memory, or when memory for their "
               "buffers ran out.", i, (double)s->conns_over_memory);
        metric(b, "psd_protocol_errors_total", "counter", "Connections closed "
               "for a malformed frame, a frame past frame_timeout or no HELLO "
               "within hello_timeout.", i, (double)s->proto_errors);
        metric(b, "psd_frame_timeouts_total", "counter", "Connections closed "
               "for a frame still arriving after frame_timeout (also in "
               "psd_protocol_errors_total).", i, (double)s->frames_timed_out);
        metric(b, "psd_auth_failures_total", "counter", "Connections refused "
               "for failing authentication.", i, (double)s->auth_failures);
        metric(b, "psd_peers_lost_total", "counter", "Connections closed "
               "because the peer fell silent.", i, (double)s->peers_lost);
        metric(b, "psd_frames_total", "counter", "Request frames read.", i,
               (double)s->frames);
        metric(b, "psd_received_bytes_total", "counter", "Bytes read from "
               "client connections (psctl's too).", i, (double)s->bytes_in);
        metric(b, "psd_sent_bytes_total", "counter", "Bytes written to "
               "client connections (the kernel took them; psctl's too).", i,
               (double)s->bytes_out);
        metric(b, "psd_requests_total", "counter", "Requests executed.", i,
               (double)s->requests);
        metric(b, "psd_request_errors_total", "counter", "Requests answered "
               "with an error.", i, (double)s->request_errors);
        /* Which errors: a node refusing keys of another layout (ENOTOWNER)
         * or pushes at max_rows (EFULL) reads apart from bad requests. The
         * statuses seen so far, by their psclient.h names. */
        _Static_assert(PSW_EFULL == -(PSD_STATUSES - 1),
                       "a status /metrics cannot count");
        metric_head(b, "psd_request_errors_by_status_total", "counter",
                    "Requests answered with an error, by status (the PS_ codes "
                    "of psclient.h); statuses not seen yet are left out.");
        for (int k = 1; k < PSD_STATUSES; k++)
            if (s->errors_by[k])
                put(b, "psd_request_errors_by_status_total{node=\"%d\","
                    "status=\"%s\"} %llu\n", i, psw_status_name(-k),
                    (unsigned long long)s->errors_by[k]);
        metric(b, "psd_duplicate_pushes_total", "counter", "Retransmitted "
               "pushes recognised and not applied again.", i,
               (double)s->duplicates);
        metric(b, "psd_remembered_pushes", "gauge", "Applied pushes remembered "
               "so that a retransmission is not applied again.", i,
               (double)dpushes);
        metric(b, "psd_remembered_clients", "gauge", "Clients remembered for "
               "exactly-once: connected, or gone after pushing here (for "
               "client_ttl).", i, (double)dclients);
        metric(b, "psd_unacked_refusals_total", "counter", "Pushes refused at "
               "max_unacked_pushes or max_remembered_pushes.", i,
               (double)s->unacked_refusals);
        metric(b, "psd_clients_forgotten_early_total", "counter", "Clients "
               "without a connection forgotten before client_ttl to make room "
               "at max_remembered_pushes.", i, (double)s->clients_forgotten);
        metric(b, "psd_clients_expired_total", "counter", "Clients without a "
               "connection forgotten after client_ttl.", i,
               (double)s->clients_expired);
        metric_head(b, "psd_request_service_seconds", "summary", "Time spent "
                    "executing one request, by kind.");
        for (int k = 0; k < PSD_LAT_KINDS; k++) {
            const uint64_t *h = n->latency[k];
            put_quantiles(b, "psd_request_service_seconds", i, k, h);
            /* A summary has its _sum too: rate(_sum) / rate(_count) is the
             * mean, which quantiles cannot give. */
            put(b, "psd_request_service_seconds_sum{node=\"%d\",kind=\"%s\"} "
                "%.9f\n", i, lat_names[k], (double)n->latency_sum[k] / 1e9);
            put(b, "psd_request_service_seconds_count{node=\"%d\",kind=\"%s\"} "
                "%llu\n", i, lat_names[k], (unsigned long long)hist_count(h));
        }
        metric_head(b, "psd_request_service_hist_seconds", "histogram", "The "
                    "times of psd_request_service_seconds as a histogram, which "
                    "Prometheus can add up across nodes and over a window "
                    "(histogram_quantile); le = 2^k ns, each bucket exact.");
        for (int k = 0; k < PSD_LAT_KINDS; k++)
            put_buckets(b, "psd_request_service_hist_seconds", i, k,
                        n->latency[k], n->latency_sum[k]);
    }
    static const struct {
        const char *name, *type, *help;
    } tm[] = {
        { "psd_table_rows", "gauge", "Rows held on this node." },
        { "psd_table_bytes", "gauge", "Memory taken for the rows held "
          "(weights, optimizer state, index): a sparse shard's rows come "
          "in chunks of 4096 rows or about 256 KiB, whichever is less, "
          "taken whole, so a few rows show a chunk's size (a dim-1 table "
          "of sum, assign or sgd keeps its rows in its index)." },
        { "psd_table_pushes_total", "counter", "Requests that pushed rows." },
        { "psd_table_pulls_total", "counter", "Requests that pulled rows." },
        { "psd_table_keys_pushed_total", "counter", "Rows pushed." },
        { "psd_table_keys_pulled_total", "counter", "Rows pulled." },
        { "psd_table_errors_total", "counter", "Requests answered with an "
          "error." },
    };
    for (size_t m = 0; t0 < t1 && m < sizeof tm / sizeof tm[0]; m++) {
        metric_head(b, tm[m].name, tm[m].type, tm[m].help);
        for (int t = t0; t < t1; t++) {
            const psd_table_stats *ts = &n->tstats[t];
            uint64_t v[] = { psd_table_rows(n->tables[t]),
                             psd_table_bytes(n->tables[t]), ts->pushes,
                             ts->pulls, ts->keys_pushed, ts->keys_pulled,
                             ts->errors };
            /* Table names are [A-Za-z0-9_-]: no label escaping needed. */
            put(b, "%s{node=\"%d\",table=\"%s\"} %llu\n", tm[m].name, i,
                psd_table_conf_get(n->tables[t])->name,
                (unsigned long long)v[m]);
        }
    }
    if (!node_lines)
        return;
    metric(b, "psd_clock", "gauge", "Clocks finished by every worker "
           "waited for (bsp/ssp).", i, (double)n->sync.clock);
    metric_head(b, "psd_workers", "gauge", "Workers by state: live; gone: "
                "its connection lost, still waited for (worker_grace); left: "
                "closed, or its grace ran out, not waited for; absent: not "
                "joined in this job.");
    int count[PSD_W_LEFT + 1];
    int opening = psd_sync_count(&n->sync, count);
    for (int st = PSD_W_ABSENT; st <= PSD_W_LEFT; st++)
        put(b, "psd_workers{node=\"%d\",state=\"%s\"} %d\n", i,
            worker_states[st], count[st]);
    metric(b, "psd_workers_opening", "gauge", "Workers live by a HELLO "
           "whose open has not completed (protocol 4: taken in at their "
           "OPENED).", i, (double)opening);
    metric(b, "psd_snapshot_generation", "gauge", "Generation of the newest "
           "good snapshot (0: none).", i, (double)d->generation);
    metric(b, "psd_snapshot_age_seconds", "gauge", "Age of the newest good "
           "snapshot, or since a periodic tick found it current (nothing "
           "changed since; -1: none).", i,
           snapshot_age(d));
    metric(b, "psd_snapshot_running_seconds", "gauge", "How long the "
           "snapshot being written has been running (0: none is).", i,
           running_s(a->dur));
    metric(b, "psd_snapshots_total", "counter", "Snapshots written.", i,
           (double)d->snapshots);
    metric(b, "psd_snapshot_failures_total", "counter", "Snapshots that "
           "failed (the previous one was kept).", i,
           (double)d->snapshot_failures);
    metric(b, "psd_snapshot_last_duration_seconds", "gauge", "How long the "
           "last snapshot took to write.", i, d->last_seconds);
    metric(b, "psd_snapshot_last_fork_seconds", "gauge", "How long the "
           "loop stopped to fork the last snapshot's writer.", i,
           d->last_pause_ms / 1e3);
    metric(b, "psd_journal_bytes", "gauge", "Bytes in the journal's "
           "current segment.", i,
           n->journal ? (double)psd_journal_bytes(n->journal) : 0);
    metric(b, "psd_journal_fsyncs_total", "counter", "fsyncs of the "
           "journal.", i, (double)d->fsyncs);
    metric(b, "psd_journal_fsync_seconds_max", "gauge", "Longest journal "
           "fsync.", i, d->fsync_ms_max / 1e3);
    metric(b, "psd_journal_write_errors_total", "counter", "Failed journal "
           "writes and fsyncs (a failing write counts at every retry).", i, (double)s->journal_errors);
    metric(b, "psd_journal_failing", "gauge", "1 while the journal cannot "
           "be written (pushes are refused).", i, n->journal_error[0] != 0);
    metric(b, "psd_config_last_reload_successful", "gauge", "0 while the "
           "file of the last SIGHUP was refused and the previous "
           "configuration runs.", i,
           !(a->reload_error && a->reload_error[0]));
    /* A refused reload followed by a good one between two scrapes shows
     * here, not in the gauge above. */
    metric_head(b, "psd_config_reloads_total", "counter", "SIGHUPs, by "
                "whether the file was applied or refused.");
    put(b, "psd_config_reloads_total{node=\"%d\",result=\"applied\"} %llu\n"
        "psd_config_reloads_total{node=\"%d\",result=\"refused\"} %llu\n",
        i, (unsigned long long)s->reloads, i,
        (unsigned long long)s->reloads_refused);
}

/* A label value: backslash, quote and newline escaped. */
static void put_label(tbuf *b, const char *s)
{
    while (*s) {
        if (*s == '\\' || *s == '"')
            put(b, "\\%c", *s);
        else if (*s == '\n')
            put(b, "\\n");
        else {
            put_utf8(b, &s);
            continue;
        }
        s++;
    }
}

/* Facts as labels of gauges set to 1 (the Prometheus "info" idiom). */
static void info_text(psd_admin *a, tbuf *b, int node_lines, int t0,
                      int t1)
{
    psd_node *n = a->node;
    if (node_lines) {
        metric_head(b, "psd_node_info", "gauge", "The node's address, data "
                    "folder, durability settings and release.");
        put(b, "psd_node_info{node=\"%d\",nodes=\"%d\",address=\"", n->index,
            n->cfg.nnodes);
        put_label(b, n->cluster.nodes[n->index]);
        put(b, "\",data_dir=\"");
        put_label(b, a->dur->dir);
        put(b, "\",durability=\"%s\",fsync=\"%s\",version=\"" PSD_RELEASE "\"} 1\n",
            n->journal ? "log" : "snapshot", psd_fsync_name(a->dur->fsync_mode));
        metric_head(b, "psd_snapshot_last_error_info", "gauge", "Why the last "
                    "snapshot failed (empty after a success).");
        put(b, "psd_snapshot_last_error_info{node=\"%d\",error=\"", n->index);
        put_label(b, a->dur->st.last_error);
        put(b, "\"} 1\n");
        metric_head(b, "psd_journal_error_info", "gauge", "Why the journal "
                    "cannot be written (empty when it can).");
        put(b, "psd_journal_error_info{node=\"%d\",error=\"", n->index);
        put_label(b, n->journal_error);
        put(b, "\"} 1\n");
    }
    if (t0 < t1)
        metric_head(b, "psd_table_info", "gauge", "A table's updater, the "
                    "hyper-parameters in force on this node (after "
                    "reloads), its nonfinite policy and max_rows (0: no "
                    "limit), and the init and seed of its new rows.");
    for (int t = t0; t < t1; t++) {
        const psd_table_conf *tc = psd_table_conf_get(n->tables[t]);
        put(b, "psd_table_info{node=\"%d\",table=\"%s\",updater=\"%s\","
            "params=\"", n->index, tc->name, psd_updater_name(tc->upd.kind));
        put_params(b, &tc->upd, 0);
        put(b, "\",nonfinite=\"%s\",max_rows=\"%llu\",init=\"",
            tc->allow_nonfinite ? "allow" : "reject",
            (unsigned long long)tc->max_rows);
        put_init(b, &tc->init);
        put(b, "\",seed=\"%llu\"} 1\n", (unsigned long long)tc->init.seed);
    }
    if (!node_lines)
        return;
    metric_head(b, "psd_config_reload_error_info", "gauge", "Why the file "
                "of the last SIGHUP was refused (empty after one that "
                "took).");
    put(b, "psd_config_reload_error_info{node=\"%d\",error=\"", n->index);
    put_label(b, a->reload_error ? a->reload_error : "");
    put(b, "\"} 1\n");
}

/* Per-second rates over the window, in the same line format. */
static void rates_text(psd_admin *a, const rates *r, tbuf *b)
{
    psd_node *n = a->node;
    int i = n->index;
    static const struct {
        const char *name;
        int c;
    } nr[] = {
        { "psd_requests_per_second", C_REQUESTS },
        { "psd_frames_per_second", C_FRAMES },
        { "psd_request_errors_per_second", C_ERRORS },
        { "psd_pushes_per_second", C_PUSHES },
        { "psd_pulls_per_second", C_PULLS },
        { "psd_keys_pushed_per_second", C_KEYS_PUSHED },
        { "psd_keys_pulled_per_second", C_KEYS_PULLED },
        { "psd_duplicate_pushes_per_second", C_DUPLICATES },
        { "psd_received_bytes_per_second", C_BYTES_IN },
        { "psd_sent_bytes_per_second", C_BYTES_OUT },
    };
    put(b, "psd_rate_window_seconds{node=\"%d\"} %.3f\n", i, r->secs);
    for (size_t k = 0; k < sizeof nr / sizeof nr[0]; k++)
        put(b, "%s{node=\"%d\"} %.3f\n", nr[k].name, i, rate(r, nr[k].c));
    static const char *const tr[T_PER] = {
        "psd_table_pushes_per_second", "psd_table_pulls_per_second",
        "psd_table_keys_pushed_per_second", "psd_table_keys_pulled_per_second"
    };
    for (int t = 0; t < n->ntables; t++)
        for (int k = 0; k < T_PER; k++)
            put(b, "%s{node=\"%d\",table=\"%s\"} %.3f\n", tr[k], i,
                psd_table_conf_get(n->tables[t])->name,
                rate(r, C_NODE + (size_t)t * T_PER + (size_t)k));
    /* Service times over the window; NaN for a kind without a request in
     * it, as psd_request_service_seconds has. */
    for (int k = 0; k < PSD_LAT_KINDS; k++) {
        uint64_t h[PSW_HIST_N];
        window_hist(a, r, k, h);
        put_quantiles(b, "psd_request_service_recent_seconds", i, k, h);
    }
}

/* ---- commands --------------------------------------------------------- */

static int is(const char *cmd, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(cmd, word, len) == 0;
}

int psd_admin_command(void *arg, const char *cmd, size_t len, char **text,
                      size_t *textlen)
{
    psd_admin *a = arg;
    tbuf b = { 0 };
    int rc = PSW_OK;
    if (is(cmd, len, "ping"))
        put(&b, "pong from node %d\n", a->node->index);
    else if (is(cmd, len, "stats") || is(cmd, len, "rates")) {
        rates r = { 0 };
        if (rates_begin(a, &r))
            b.oom = 1;
        else if (cmd[0] == 's')
            stats_json(a, &r, &b);
        else
            rates_text(a, &r, &b);
        free(r.now);
    } else if (is(cmd, len, "metrics")) {
        /* Counters as they are: no window of rates (a copy of every
         * table's counters, per scrape, that it took and never read). */
        metrics_text(a, &b, 1, 0, a->node->ntables);
        info_text(a, &b, 1, 0, a->node->ntables);
    } else if (len > 8 && !memcmp(cmd, "metrics ", 8)) {
        /* The same lines in parts: "metrics node", the node's own;
         * "metrics tables A B", those of tables A..B-1 (B past the last
         * is the last). */
        char what[64];
        snprintf(what, sizeof what, "%.*s", (int)(len - 8), cmd + 8);
        unsigned long t0, t1;
        int end = 0, nt = a->node->ntables;
        if (!strcmp(what, "node")) {
            metrics_text(a, &b, 1, 0, 0);
            info_text(a, &b, 1, 0, 0);
        } else if (len - 8 < sizeof what &&
                   sscanf(what, "tables %lu %lu%n", &t0, &t1, &end) == 2 &&
                   !what[end] && t0 <= t1 && t0 <= (unsigned long)nt) {
            if (t1 > (unsigned long)nt)
                t1 = (unsigned long)nt;
            metrics_text(a, &b, 0, (int)t0, (int)t1);
            info_text(a, &b, 0, (int)t0, (int)t1);
        } else {
            put(&b, "metrics takes \"node\" or \"tables A B\" (tables "
                "A..B-1 of the %d)", nt);
            rc = PSW_EINVAL;
        }
    } else if (is(cmd, len, "save")) {
        /* Starts one unless one is running, or the newest one holds the
         * node as it is (the same image again, a whole model's worth of
         * disk, for each of a script's or a hostile client's repeated
         * saves); either way the caller learns which generation to wait
         * for in stats. */
        int running = a->dur->child != 0 || a->dur->presync;
        uint64_t failures = a->dur->st.snapshot_failures;
        if (!running && psd_durable_current(a->dur)) {
            put(&b, "{\"generation\": %llu, \"already_running\": false, "
                "\"current\": true}\n",
                (unsigned long long)a->dur->st.generation);
        } else {
            if (!running)
                psd_durable_save(a->dur);
            if (!a->dur->child && !a->dur->presync &&
                a->dur->st.snapshot_failures > failures) {
                put(&b, "snapshot not started: %s", a->dur->st.last_error);
                rc = PSW_ESERVER;
            } else
                put(&b, "{\"generation\": %llu, \"already_running\": %s, "
                    "\"current\": false}\n",
                    (unsigned long long)a->dur->child_gen,
                    running ? "true" : "false");
        }
    } else {
        /* Shown byte for byte, a NUL or a control byte escaped: "%.*s"
         * stopped at a NUL ("ping\0junk" read as "ping", unknown). */
        put(&b, "unknown command \"");
        for (size_t i = 0; i < len && i < 64; i++) {
            unsigned char ch = (unsigned char)cmd[i];
            if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
                put(&b, "%c", ch);
            else
                put(&b, "\\x%02x", ch);
        }
        put(&b, "%s\" (ping, stats, metrics, rates, save, end-job)",
            len > 64 ? "..." : "");
        rc = PSW_EINVAL;
    }
    if (b.oom) {
        free(b.p);
        *text = NULL;
        *textlen = 0;
        return PSW_ENOMEM;
    }
    *text = b.p;
    *textlen = b.len;
    return rc;
}
