/* The command layer: checks and executes requests, packs replies, holds
 * the ones that wait for a clock or a barrier. See request.h. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "request.h"
#include "secret.h"
#include "../proto/layout.h"
#include "../proto/status.h"

#define WAIT_LOG_MS 10000        /* how often to say who is waited for */

/* What a push applied but not journaled (out of memory) is answered, and
 * its retransmissions after it. */
#define UNJOURNALED "applied, but the journal ran out of memory: it may be " \
                    "lost in a crash"

/* A reply held until the node's clock (kind PSW_OP_CLOCK: ps_clock on a
 * bsp cluster, and ssp pulls) or barrier (PSW_OP_BARRIER) reaches need. */
typedef struct psd_held {
    struct psd_held *next;
    struct psd_held *same;       /* the session's others under its key in
                                    ss->held (held_key) */
    psd_session *ss;
    int kind;
    uint64_t need;
    psw_msg msg;                 /* a held pull's keys point at `keys` */
    char *keys;                  /* owned copy of the pulled keys */
    uint64_t bytes;              /* counted in ss->held_bytes */
} psd_held;

static void advance(psd_node *n, uint64_t now_ms);

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int lat_kind(int op)
{
    if (op == PSW_OP_PUSHPULL)
        return PSD_LAT_PUSHPULL;
    if (psw_op_has(op, PSW_OPF_PUSHES))
        return PSD_LAT_PUSH;
    if (psw_op_has(op, PSW_OPF_PULLS))
        return PSD_LAT_PULL;
    return PSD_LAT_CONTROL;      /* CLOCK, BARRIER, LEAVE */
}

static int has_bsp(const psd_node *n)
{
    for (int i = 0; i < n->ntables; i++)
        if (psd_table_conf_get(n->tables[i])->consistency == PSD_CONS_BSP)
            return 1;
    return 0;
}

static int has_ssp(const psd_node *n)
{
    for (int i = 0; i < n->ntables; i++)
        if (psd_table_conf_get(n->tables[i])->consistency == PSD_CONS_SSP)
            return 1;
    return 0;
}

/* ---- replies -------------------------------------------------------- */

/* The rows a message's reply carries, in bytes; 0 for one that pulls
 * nothing or names no table. Saturates instead of overflowing. */
static uint64_t rows_bytes(const psd_node *n, const psw_msg *m)
{
    if (m->op == PSW_OP_ADMIN)   /* text, not rows, but it counts alike */
        return PSW_ADMIN_REPLY_MAX;
    if (!psw_op_has(m->op, PSW_OPF_PULLS) || m->table >= (uint32_t)n->ntables)
        return 0;
    uint64_t rows = psw_op_has(m->op, PSW_OPF_RANGED) ? m->count : m->nkeys;
    uint64_t rowb = (uint64_t)psd_table_conf_get(n->tables[m->table])->dim * 4;
    return rows > UINT64_MAX / rowb ? UINT64_MAX : rows * rowb;
}

/* The frames replies go in and requests are cut to: max_frame, or less
 * for max_client_memory (psd_config_frame); HELLO_OK tells clients. */
static uint64_t frame_max(const psd_node *n)
{
    return n->cluster.max_frame;
}

/* Names that limit in a refusal: "max_frame (N bytes)", or what
 * max_client_memory makes of it. */
static const char *frame_limit(const psd_node *n, char *buf, size_t len)
{
    if (frame_max(n) < n->cfg.max_frame)
        snprintf(buf, len, "the frames max_client_memory (%llu bytes) "
                 "allows (%llu bytes)",
                 (unsigned long long)n->cfg.max_client_memory,
                 (unsigned long long)frame_max(n));
    else
        snprintf(buf, len, "max_frame (%llu bytes)",
                 (unsigned long long)frame_max(n));
    return buf;
}

/* What an ADMIN's answer counts before it is made: a longer one (admin())
 * goes in a frame of its own, counted once it is packed. Counted at its
 * 4 MiB cap, it was a reserve past a small max_client_memory, which
 * closed psctl (or a worker) before its command ran. */
#define ADMIN_RESERVE (64u << 10)

/* The most bytes m's reply adds to a frame. A pull larger than a frame is
 * answered with an error, so it counts as an error reply. */
static uint64_t reply_bound(const psd_node *n, const psw_msg *m)
{
    uint64_t rb = rows_bytes(n, m), one = psw_payload_max(frame_max(n));
    if (m->op == PSW_OP_ADMIN)
        rb = one < ADMIN_RESERVE ? one : ADMIN_RESERVE;
    else if (rb > one)
        rb = 0;
    return psw_reply_max(rb);
}

uint64_t psd_request_frame_bound(const psd_node *n, const psw_msg *m,
                                 int count)
{
    uint64_t b = 0;
    for (int i = 0; i < count; i++)
        if (!psw_op_has(m[i].op, PSW_OPF_SESSION))
            b += reply_bound(n, &m[i]) + PSW_REPLY_FRAME_COST;
    return b;
}

/* Makes room in ss->out for a reply of at most `bound` bytes: replies go
 * out in frames of at most max_frame, the limit clients read with. Opens
 * a frame when none is open; returns whether it did. */
static int reply_room(const psd_node *n, psd_session *ss, uint64_t bound)
{
    psw_out *o = ss->out;
    if (!psw_out_frame_open(o)) {
        psw_out_frame_begin(o);
        return 1;
    }
    if (o->frame_msgs > 0 && psw_out_frame_body(o) + bound > frame_max(n)) {
        psw_out_frame_end(o);
        psw_out_frame_begin(o);
    }
    return 0;
}

/* Packs an error reply and counts it. */
static void reply_error(psd_node *n, psd_session *ss, const psw_msg *m,
                        int status, const char *text)
{
    n->stats.request_errors++;
    if (status < 0 && status > -PSD_STATUSES)
        n->stats.errors_by[-status]++;
    if (psw_op_has(m->op, PSW_OPF_TABLE) && m->table < (uint32_t)n->ntables)
        n->tstats[m->table].errors++;
    /* A node short of memory is the operator's to hear of, not only the
     * client's: it refuses or applies in part until memory is freed. */
    if (status == PSW_ENOMEM) {
        int t = psw_op_has(m->op, PSW_OPF_TABLE) &&
                m->table < (uint32_t)n->ntables;
        psd_warn_rep("%s%s%srequest %llu from %s: %s", t ? "table '" : "",
                     t ? psd_table_conf_get(n->tables[m->table])->name : "",
                     t ? "': " : "", (unsigned long long)m->ts, ss->peer,
                     text);
    } else
        psd_debug("request %llu from %s: %s", (unsigned long long)m->ts,
                  ss->peer, text);
    psw_pack_reply(ss->out, m->ts, m->part, status, text, 0, 0);
}

/* Before rows of table i change: replies that still reference those
 * rows in place get copies of them first, so that each carries the rows
 * as they were when its pull ran (PROTOCOL.md §9). m is the push that
 * changes them, or NULL for a change of the whole table. The rows are
 * told span by span of contiguous memory. */
static void rows_change(psd_node *n, uint32_t i, const psw_msg *m)
{
    if (!n->detach || !n->row_refs[i])
        return;
    if (!m) {
        n->detach(n->detach_arg, (int)i, 0, UINTPTR_MAX);
        return;
    }
    const psd_table *t = n->tables[i];
    size_t rowb = (size_t)psd_table_conf_get(t)->dim * sizeof(float);
    int ranged = psw_op_has(m->op, PSW_OPF_RANGED);
    uint64_t run, total = ranged ? m->count : m->nkeys;
    uintptr_t lo = 0, hi = 0;
    for (uint64_t j = 0; j < total && n->row_refs[i];) {
        uint64_t k = ranged ? m->first + j : psw_key_at(m->keys, j);
        const float *w = psd_table_dense_run(t, k, total - j, &run);
        if (!w)
            return;                  /* sparse: never referenced */
        uint64_t rows = ranged ? run : 1;
        uintptr_t a = (uintptr_t)w, b = a + (size_t)rows * rowb;
        if (a != hi) {               /* not where the last span ended */
            if (hi)
                n->detach(n->detach_arg, (int)i, lo, hi);
            lo = a;
        }
        hi = b;
        j += rows;
    }
    if (hi && n->row_refs[i])
        n->detach(n->detach_arg, (int)i, lo, hi);
}

/* The bytes of m's rows that a reply could reference in place: runs of
 * contiguous dense rows at least PSW_REF_MIN long. */
static size_t ref_bytes(const psd_table *t, const psw_msg *m, size_t rowb)
{
    uint64_t run, total = m->op == PSW_OP_PULL_RANGE ? m->count : m->nkeys;
    size_t bytes = 0;
    for (uint64_t i = 0; i < total;) {
        uint64_t j = 1;
        if (m->op == PSW_OP_PULL_RANGE) {
            if (!psd_table_dense_run(t, m->first + i, total - i, &run))
                return 0;
            j = run;
        } else {
            uint64_t k = psw_key_at(m->keys, i);
            if (!psd_table_dense_run(t, k, total - i, &run))
                return 0;
            while (j < run && psw_key_at(m->keys, i + j) == k + j)
                j++;
        }
        if (j * rowb >= PSW_REF_MIN)
            bytes += j * rowb;
        i += j;
    }
    return bytes;
}

/* Packs m's reply with its rows referenced in place where they lie in
 * runs of at least PSW_REF_MIN bytes (copied elsewhere); the pieces are
 * counted in n->row_refs until the writer lets go of them. */
static void reply_rows_ref(psd_node *n, psd_session *ss, const psw_msg *m,
                           size_t nbytes, size_t rowb, uint64_t clock)
{
    const psd_table *t = n->tables[m->table];
    psw_out *o = ss->out;
    uint32_t tag = m->table + 1;
    uint64_t run, total = m->op == PSW_OP_PULL_RANGE ? m->count : m->nkeys;
    psw_pack_reply_head(o, m->ts, m->part);
    psw_out_bin_begin(o, nbytes);
    for (uint64_t i = 0; i < total;) {
        uint64_t k = m->op == PSW_OP_PULL_RANGE ? m->first + i
                                                : psw_key_at(m->keys, i);
        const float *w = psd_table_dense_run(t, k, total - i, &run);
        uint64_t j = run;
        if (m->op != PSW_OP_PULL_RANGE)
            for (j = 1; j < run && psw_key_at(m->keys, i + j) == k + j;)
                j++;
        size_t segs = o->nsegs;
        psw_out_bin_piece(o, w, (size_t)j * rowb, tag);
        n->row_refs[m->table] += o->nsegs - segs;
        i += j;
    }
    psw_pack_reply_tail(o, clock);
}

/* Packs a reply carrying the rows m pulls, referenced in place (dense
 * rows, when the writer can copy them before a push changes them) or
 * copied from the table straight into the output buffer, or an error if
 * the rows cannot be produced. */
static void reply_rows(psd_node *n, psd_session *ss, const psw_msg *m)
{
    psd_table *t = n->tables[m->table];
    const psd_table_conf *tc = psd_table_conf_get(t);
    size_t nbytes = (size_t)rows_bytes(n, m);
    uint64_t clock = tc->consistency == PSD_CONS_ASYNC ? 0 : n->sync.clock;
    size_t rowb = (size_t)tc->dim * sizeof(float);
    if (n->detach && nbytes >= PSW_REF_MIN && ref_bytes(t, m, rowb) > 0) {
        reply_rows_ref(n, ss, m, nbytes, rowb, clock);
        return;
    }
    psw_mark mark = psw_out_mark(ss->out);
    int was_oom = ss->out->oom;
    char *p = psw_pack_reply(ss->out, m->ts, m->part, PSW_OK, NULL, nbytes,
                             clock);
    if (!p && ss->out->oom && !was_oom) {
        /* No room for this answer's rows (a node near its memory limit):
         * this pull is refused, not the connection closed, which left
         * the client to time out after its attempts. The buffer is as it
         * was at the mark; a short error fits it, or the connection goes
         * after all (oom set again). */
        psw_out_rewind(ss->out, mark);
        ss->out->oom = 0;
        char err[200];
        if (m->op == PSW_OP_PUSHPULL)
            snprintf(err, sizeof err, "out of memory for the %zu bytes of "
                     "this pushpull's answer: its push was applied, its "
                     "rows not read (pull them, a smaller pull may be)",
                     nbytes);
        else
            snprintf(err, sizeof err, "out of memory for the %zu bytes of "
                     "this pull's answer: not answered (a smaller pull may "
                     "be)", nbytes);
        reply_error(n, ss, m, PSW_ENOMEM, err);
        return;
    }
    if (!p)
        return;                  /* oom is flagged on ss->out */
    int rc = 0;
    if (m->op == PSW_OP_PULL_RANGE)
        psd_table_pull_range(t, m->first, m->count, p);
    else
        rc = psd_table_pull(t, m->keys, m->nkeys, p);
    if (rc) {
        psw_out_rewind(ss->out, mark);
        reply_error(n, ss, m, rc, "out of memory creating rows");
    }
}

/* Raises *lsn to the journal's last record so far: what waits for *lsn
 * (an answer, through ss->need_lsn, which conn.c holds until the record
 * is as durable as the node promises; a clock's or barrier's move) waits
 * for that record too. */
static void up_to_last_record(const psd_node *n, uint64_t *lsn)
{
    if (n->journal && psd_journal_last(n->journal) > *lsn)
        *lsn = psd_journal_last(n->journal);
}

/* Answers a request that was held, now that what it waited for happened
 * (status PSW_OK: a pull is carried out now) or failed. Inside
 * psd_request_frame for this session the reply joins the open frame;
 * otherwise it goes out in a frame of its own at once. */
static void answer(psd_node *n, psd_session *ss, const psw_msg *m, int status,
                   const char *text)
{
    /* A late answer follows the clock's move: with a journal, it must not
     * go out before that move is as durable as the node promises. */
    if (ss->need_lsn < n->clock_lsn)
        ss->need_lsn = n->clock_lsn;
    /* A barrier's answer, as late as the records of the barriers reached:
     * one the last worker's arrival releases went out before that
     * worker's record was as durable as its own answer (fsync = always),
     * and so did a barrier sent again on a new connection. */
    if (m->op == PSW_OP_BARRIER && ss->need_lsn < n->barrier_lsn)
        ss->need_lsn = n->barrier_lsn;
    int own = reply_room(n, ss, status == PSW_OK ? reply_bound(n, m)
                                                 : psw_reply_max(0));
    if (status != PSW_OK)
        reply_error(n, ss, m, status, text);
    else if (psw_op_has(m->op, PSW_OPF_PULLS))
        reply_rows(n, ss, m);
    else
        psw_pack_reply(ss->out, m->ts, m->part, PSW_OK, NULL, 0,
                       n->sync.clock);
    if (own) {
        psw_out_frame_end(ss->out);
        ss->answered(ss);
    }
}

/* ---- held replies --------------------------------------------------- */

/* The key of a held request in its session's map: (ts, part) mixed with
 * a secret drawn once per process, so that a client cannot choose pairs
 * that share a key (a plain fold let 30,000 barriers share one chain,
 * walked for each: seconds again). Entries that share one all the same
 * are chained (psd_held.same). */
static uint64_t held_key(uint64_t ts, uint32_t part)
{
    return psd_secret_mix(0, ts) ^ psd_secret_mix(1, part);
}

/* Keeps m until the node's clock (or barrier, by kind) reaches need. A
 * held pull keeps a copy of its keys; its pushes were applied already.
 * Returns 0 or PSW_ENOMEM. */
static int hold(psd_node *n, psd_session *ss, const psw_msg *m, int kind,
                uint64_t need)
{
    psd_held *h = calloc(1, sizeof *h);
    if (!h)
        return PSW_ENOMEM;
    h->ss = ss;
    h->kind = kind;
    h->need = need;
    h->bytes = sizeof *h + m->nkeys * 8 + reply_bound(n, m) +
               PSW_REPLY_FRAME_COST;
    h->msg = *m;
    h->msg.vals = NULL;
    h->msg.vals_len = 0;
    if (m->op == PSW_OP_PUSHPULL)
        h->msg.op = PSW_OP_PULL;
    if (m->nkeys) {
        h->keys = malloc(m->nkeys * 8);
        if (!h->keys) {
            free(h);
            return PSW_ENOMEM;
        }
        memcpy(h->keys, m->keys, m->nkeys * 8);
        h->msg.keys = h->keys;
    }
    uint64_t key = held_key(m->ts, m->part);
    h->same = psw_map_get(&ss->held, key);
    if (psw_map_put(&ss->held, key, h)) {
        free(h->keys);
        free(h);
        return PSW_ENOMEM;
    }
    ss->held_bytes += h->bytes;
    /* Appended at the end, so held replies go out in arrival order; the
     * tail is kept: a frame of thousands held walked the list for each. */
    if (!n->held)
        n->held_tail = &n->held;
    *n->held_tail = h;
    n->held_tail = &h->next;
    return 0;
}

/* Whether the session holds this request already: a client sends a
 * request held past request_timeout_ms again (a lost frame would
 * otherwise hold it for sync_timeout_ms). The copy is dropped before it
 * is counted or checked: the one held is answered, once. Looked up in
 * the session's map: a scan of every held request for each message made
 * a frame of 32,000 held barriers stop the loop for seconds. */
static int held_already(const psd_session *ss, const psw_msg *m)
{
    if (!ss->held_bytes)
        return 0;
    for (const psd_held *x = psw_map_get(&ss->held, held_key(m->ts, m->part));
         x; x = x->same)
        if (x->msg.ts == m->ts && x->msg.part == m->part)
            return 1;
    return 0;
}

/* Takes h out of its session's map and count (not out of n->held). */
static void held_forget(psd_held *h)
{
    psd_session *ss = h->ss;
    uint64_t key = held_key(h->msg.ts, h->msg.part);
    psd_held *first = psw_map_get(&ss->held, key);
    if (first == h) {
        if (h->same)
            (void)psw_map_put(&ss->held, key, h->same);  /* replaces */
        else
            (void)psw_map_del(&ss->held, key);
    } else
        for (psd_held *x = first; x; x = x->same)
            if (x->same == h) {
                x->same = h->same;
                break;
            }
    ss->held_bytes -= h->bytes;
}

static void held_free(psd_held *h)
{
    free(h->keys);
    free(h);
}

/* Answers every held reply of `kind` whose condition now holds. */
static void release(psd_node *n, int kind, uint64_t reached)
{
    psd_held **pp = &n->held;
    while (*pp) {
        psd_held *h = *pp;
        if (h->kind == kind && h->need <= reached) {
            *pp = h->next;
            held_forget(h);
            answer(n, h->ss, &h->msg, PSW_OK, NULL);
            held_free(h);
        } else
            pp = &h->next;
    }
    n->held_tail = pp;
}

/* The node's clock moved past `before` (to n->sync.clock): journals the
 * move, on a cluster with bsp tables, and applies each bsp table's summed
 * pushes once, divided by `waited` for aggregate = mean. */
static void clock_moved(psd_node *n, uint64_t before, int waited)
{
    if (n->journal && has_bsp(n)) {
        uint64_t lsn = psd_journal_clock(n->journal, n->sync.clock,
                                         (uint32_t)waited);
        if (lsn)
            n->clock_lsn = lsn;
    }
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *tc = psd_table_conf_get(n->tables[i]);
        if (tc->consistency != PSD_CONS_BSP)
            continue;
        float scale = tc->aggregate_mean && waited > 0
                          ? 1.0f / (float)waited : 1.0f;
        rows_change(n, (uint32_t)i, NULL);
        if (psd_table_apply_accumulated(n->tables[i], scale))
            psd_error("table '%s': out of memory applying clock %llu",
                      tc->name, (unsigned long long)before);
    }
}

/* Moves the node's clock and barrier; a clock that moved applies each bsp
 * table's summed pushes once. Then answers what waited for them. */
static void advance(psd_node *n, uint64_t now_ms)
{
    uint64_t before = n->sync.clock, barrier = n->sync.barrier;
    if (psd_sync_advance(&n->sync, now_ms))
        clock_moved(n, before, psd_sync_divisor(&n->sync, before));
    /* Whatever moved the barrier (a worker arriving, leaving, lost or
     * past its grace) was journaled before this call: the answers it
     * releases wait for that record (answer()). */
    if (n->sync.barrier != barrier)
        up_to_last_record(n, &n->barrier_lsn);
    /* Only a count that moved releases anything (a request is held only
     * while the count it waits for is below its need): a walk over every
     * held reply for each CLOCK or BARRIER of a frame was quadratic. */
    if (n->sync.clock != before)
        release(n, PSW_OP_CLOCK, n->sync.clock);
    if (n->sync.barrier != barrier)
        release(n, PSW_OP_BARRIER, n->sync.barrier);
}

/* ---- control messages ----------------------------------------------- */

/* CLOCK, BARRIER and LEAVE: answered now or held. */
static void control(psd_node *n, psd_session *ss, const psw_msg *m,
                    uint64_t now_ms)
{
    /* A session whose worker was taken over by a reconnection of the same
     * client speaks as a reader from then on. */
    int32_t id = psd_sync_holds(&n->sync, ss->worker, ss) ? ss->worker : -1;
    char err[160];
    if (m->op == PSW_OP_LEAVE) {
        if (id >= 0 && psd_sync_leave(&n->sync, id, ss)) {
            ss->worker = -1;
            (void)psd_node_journal_workers(n);
            /* Its answer, as late as its record. */
            up_to_last_record(n, &ss->need_lsn);
            advance(n, now_ms);
        }
        answer(n, ss, m, PSW_OK, NULL);
        return;
    }
    if (id < 0) {
        answer(n, ss, m, PSW_EINVAL, m->op == PSW_OP_CLOCK
               ? "ps_clock from a client that is not a worker "
                 "(ps_options.worker = -1)"
               : "ps_barrier from a client that is not a worker "
                 "(ps_options.worker = -1)");
        return;
    }
    int barrier = m->op == PSW_OP_BARRIER;
    uint64_t was = n->sync.workers[id].clock;
    uint64_t was_b = n->sync.workers[id].barrier;
    if (psd_sync_reach(&n->sync, id, barrier, m->value, err, sizeof err)) {
        answer(n, ss, m, PSW_EINVAL, err);
        return;
    }
    /* An ssp table holds a worker's pulls by its own clock: a node back
     * from a crash that took it for one at an older clock would let it
     * read state older than the staleness allows. A WORKER record keeps
     * the clock (bsp clocks have CLOCK records), and the reply waits for
     * it as a push's does. So for a barrier, whose counts node 0 alone
     * keeps: back from a crash at the counts of its last snapshot, it
     * gave a new process for a lost worker a count barriers behind, whose
     * next ps_barrier, one the others had passed, returned at once while
     * they waited in theirs for good (a bsp trial). */
    if (n->journal &&
        ((n->sync.workers[id].clock > was && has_ssp(n)) ||
         n->sync.workers[id].barrier > was_b)) {
        n->sync.workers[id].dirty = 1;
        (void)psd_node_journal_workers(n);
        up_to_last_record(n, &ss->need_lsn);
    }
    advance(n, now_ms);
    uint64_t reached = barrier ? n->sync.barrier : n->sync.clock;
    /* Only bsp tables make ps_clock wait; ssp tables hold pulls instead. */
    if (m->value <= reached || (!barrier && !has_bsp(n)))
        answer(n, ss, m, PSW_OK, NULL);
    else if (hold(n, ss, m, m->op, m->value))
        answer(n, ss, m, PSW_ENOMEM, "out of memory");
}

/* ---- exactly-once --------------------------------------------------- */

/* The session's entry in the node's memory of applied pushes, attached on
 * first use; NULL when memory runs out. */
static psd_dclient *dedup_of(psd_node *n, psd_session *ss, uint64_t now_ms)
{
    if (!ss->dedup)
        ss->dedup = psd_dedup_attach(n->dedup, ss->client_id,
                                     ss->incarnation, now_ms);
    return ss->dedup;
}

/* Whether a new push (ts) of the client may be remembered: 0, or -1 with
 * why. Its memory is bounded per client and over all of them, since a
 * client that never ACKs (or one whose oldest request is stuck) would
 * otherwise grow it push by push; at the node's bound, clients that left
 * are forgotten early, longest gone first, as client_ttl would later. */
static int room_for(psd_node *n, psd_dclient *dc, uint64_t ts,
                    uint64_t now_ms, char *why, size_t whylen)
{
    int rc;
    while ((rc = psd_dedup_room(n->dedup, dc, ts,
                                (size_t)n->cfg.max_unacked_pushes,
                                (size_t)n->cfg.max_remembered_pushes, why,
                                whylen)) > 0) {
        uint64_t id, inc, since;
        size_t count;
        if (!psd_dedup_forget_idlest(n->dedup, &id, &inc, &count, &since))
            return -1;
        n->stats.clients_forgotten++;
        psd_warn("forgot the %zu pushes of client %016llx.%llu, gone for "
                 "%llu s, before its client_ttl: this node remembers "
                 "max_remembered_pushes (%llu) pushes; a copy of one sent "
                 "now is refused as perhaps applied", count,
                 (unsigned long long)id,
                 (unsigned long long)inc,
                 (unsigned long long)((now_ms - since) / 1000),
                 (unsigned long long)n->cfg.max_remembered_pushes);
    }
    return rc;
}

/* A client's ACK goes to the journal when it has moved this many requests
 * past the one journaled before: one 44-byte record per 256 requests at
 * most, against pushes of 20 bytes or more each, and a replay brings back
 * at most this many requests' pushes of a client beyond its in-flight
 * ones (without it, every push since the snapshot: the memory, and the
 * count against max_remembered_pushes, of a whole snapshot interval). */
#define ACK_JOURNAL_EVERY 256

/* A worker whose join was pending (a version 4 HELLO) completed its open:
 * its OPENED came, or a request (which its client sends only once open).
 * From now on it is taken in for good and journaled. */
static void confirm_join(psd_node *n, psd_session *ss, uint64_t now_ms)
{
    ss->joining = 0;
    if (psd_sync_confirm(&n->sync, ss->worker, ss)) {
        n->changes++;
        /* Written now: an OPENED has no reply whose flush would write it
         * (a HELLO's record went out with its HELLO_OK), and a worker
         * lost after it must come back from a replay as lost, not as
         * never joined. */
        if (psd_node_journal_workers(n) == 0)
            (void)psd_node_commit(n);
        advance(n, now_ms);      /* its own position counts from now on */
    }
}

/* PING (liveness only: the connection noted the bytes), ACK and OPENED. */
static void session(psd_node *n, psd_session *ss, const psw_msg *m,
                    uint64_t now_ms)
{
    if (m->op == PSW_OP_OPENED) {
        /* Nothing pending (a reader's, a repeat): nothing to do. */
        if (ss->joining)
            confirm_join(n, ss, now_ms);
        return;
    }
    if (m->op == PSW_OP_ACK) {
        psd_dclient *dc = dedup_of(n, ss, now_ms);
        uint64_t mark = dc ? psd_dedup_ack(dc, m->value, ACK_JOURNAL_EVERY)
                           : 0;
        /* Lost for want of memory, it costs only memory after a replay;
         * the next one catches up. */
        if (mark && n->journal)
            (void)psd_journal_ack(n->journal, ss->client_id,
                                  ss->incarnation, mark);
    }
}

/* An operator's command refused: packed like reply_error, but not
 * counted, since ADMIN is not one of the clients' requests in the node's
 * figures (proto/PROTOCOL.md, ADMIN). */
static void admin_error(psd_session *ss, const psw_msg *m, int status,
                        const char *text)
{
    psd_debug("admin command from %s: %s", ss->peer, text);
    psw_pack_reply(ss->out, m->ts, m->part, status, text, 0, 0);
}

/* "end-job" or "end-job CLOCK BARRIER": ends the job in progress
 * (psd_sync_end), journaled as every worker's LEAVE at those counts (and
 * the clock's move, whose sums it applies), so that a replay ends it the
 * same way; the answer waits until that is durable. */
static void end_job(psd_node *n, psd_session *ss, const psw_msg *m)
{
    char args[PSW_TEXT_MAX], *end = NULL;
    size_t len = m->text_len - 7;
    memcpy(args, m->text + 7, len);
    args[len] = '\0';
    unsigned long long c = 0, b = 0;
    /* " CLOCK BARRIER", digits only, read to the command's end (a NUL
     * inside it would hide what follows). */
    int ok = len == 0;
    if (len && !memchr(args, '\0', len) && isdigit((unsigned char)args[1])) {
        errno = 0;
        c = strtoull(args + 1, &end, 10);
        if (*end == ' ' && isdigit((unsigned char)end[1])) {
            b = strtoull(end + 1, &end, 10);
            ok = !*end && !errno;
        }
    }
    if (!ok) {
        admin_error(ss, m, PSW_EINVAL, "end-job takes nothing, or the clock "
                    "and barrier counts to end at (\"end-job CLOCK "
                    "BARRIER\")");
        return;
    }
    psd_sync_ended e;
    char err[256];
    int rc = psd_sync_end(&n->sync, c, b, &e, err, sizeof err);
    if (rc) {
        psd_info("end-job from %s refused: %s", ss->peer, err);
        admin_error(ss, m, rc, err);
        return;
    }
    if (e.moved)
        clock_moved(n, e.from, e.divisor);
    if (e.changed)
        n->changes++;
    (void)psd_node_journal_workers(n);
    up_to_last_record(n, &ss->need_lsn);
    /* What waited for the counts it moved goes now, as after any move (a
     * CLOCK or an ssp pull a session sent before its LEAVE: it is no
     * worker now, so end-job was not refused for it), once the move is
     * as durable as a clock's: its WORKER records, just journaled, hold
     * the barrier. */
    up_to_last_record(n, &n->clock_lsn);
    release(n, PSW_OP_CLOCK, n->sync.clock);
    release(n, PSW_OP_BARRIER, n->sync.barrier);
    if (e.in_progress)
        psd_info("end-job from %s: the job is over at clock %llu, barrier "
                 "%llu%s%s%s; the next one starts when all %d workers have "
                 "joined", ss->peer, (unsigned long long)e.clock,
                 (unsigned long long)e.barrier,
                 e.pending ? " (the pushes of the clock in progress, which "
                             "no ps_clock ended, applied as its end)" : "",
                 e.let_go ? "; the processes of lost workers are refused "
                            "if they come back" : "",
                 e.moved && !e.pending ? " (the node's clock moved up to "
                                         "the workers')" : "",
                 n->sync.nworkers);
    else if (e.moved || e.barrier > b)
        psd_info("end-job from %s: no job in progress; clock and barrier "
                 "now %llu and %llu", ss->peer, (unsigned long long)e.clock,
                 (unsigned long long)e.barrier);
    char text[200];
    int tl = snprintf(text, sizeof text, "{\"ended\": %s, \"clock\": %llu, "
                      "\"barrier\": %llu, \"applied_sums\": %s, "
                      "\"let_go\": %d}\n", e.in_progress ? "true" : "false",
                      (unsigned long long)e.clock,
                      (unsigned long long)e.barrier,
                      e.pending ? "true" : "false", e.let_go);
    char *p = psw_pack_reply(ss->out, m->ts, m->part, PSW_OK, NULL,
                             (size_t)tl, 0);
    if (p)
        memcpy(p, text, (size_t)tl);
}

/* An operator's command: the server's hook answers it with text, sent as
 * the reply's payload, up to PSW_ADMIN_REPLY_MAX whatever max_frame: a
 * node with a small max_frame (16K) and one table refused psctl stats,
 * and psctl save, which reads them first, never asked for its snapshot.
 * An answer longer than the open frame has room for goes in a frame of
 * its own, which psctl reads (up to 64 MiB). end-job, which changes the
 * training state, is the node's own. */
static void admin(psd_node *n, psd_session *ss, const psw_msg *m)
{
    char *text = NULL;
    size_t len = 0;
    if (m->text_len >= 7 && !memcmp(m->text, "end-job", 7) &&
        (m->text_len == 7 || m->text[7] == ' ')) {
        end_job(n, ss, m);
        return;
    }
    if (!n->admin) {
        admin_error(ss, m, PSW_EINVAL, "this node takes no commands");
        return;
    }
    int rc = n->admin(n->admin_arg, m->text, m->text_len, &text, &len);
    uint64_t room = PSW_ADMIN_REPLY_MAX;
    if (rc == PSW_OK && len > room) {
        free(text);
        text = NULL;
        rc = PSW_ETOOBIG;
        char why[160];
        snprintf(why, sizeof why, "the answer (%zu bytes) is longer than an "
                 "ADMIN reply may be (%llu bytes)", len,
                 (unsigned long long)room);
        admin_error(ss, m, rc, why);
        return;
    }
    if (rc != PSW_OK) {
        admin_error(ss, m, rc, text ? text : "failed");
        free(text);
        return;
    }
    psw_out *o = ss->out;
    if (o->frame_msgs > 0 &&
        psw_out_frame_body(o) + psw_reply_max(len) > frame_max(n)) {
        psw_out_frame_end(o);
        psw_out_frame_begin(o);
    }
    char *p = psw_pack_reply(o, m->ts, m->part, PSW_OK, NULL, len, 0);
    if (p)
        memcpy(p, text, len);
    free(text);
}

/* ---- data requests -------------------------------------------------- */

/* Whether push m's values hold a NaN or an infinity: from the reader's
 * scan when the frame came from a connection, else by reading them. */
static int values_nonfinite(const psd_session *ss, const psw_msg *m)
{
    if (m->vals_len < 4)
        return 0;
    return ss->rd ? psw_reader_nonfinite(ss->rd, m->vals, m->vals_len)
                  : psw_nonfinite(m->vals, m->vals_len);
}

/* Describes the first non-finite value of push m (there is one). */
static void describe_nonfinite(const psd_node *n, const psw_msg *m,
                               char *err, size_t errlen)
{
    const psd_table_conf *tc = psd_table_conf_get(n->tables[m->table]);
    size_t nf = m->vals_len / 4, i = 0;
    float v = 0;
    for (; i < nf; i++) {
        memcpy(&v, m->vals + 4 * i, 4);
        if (!isfinite(v))
            break;
    }
    size_t row = i / tc->dim;
    char where[64];
    if (psw_op_has(m->op, PSW_OPF_RANGED))
        snprintf(where, sizeof where, "row %llu",
                 (unsigned long long)(m->first + row));
    else if (row < m->nkeys)
        snprintf(where, sizeof where, "key %llu",
                 (unsigned long long)psw_key_at(m->keys, row));
    else
        snprintf(where, sizeof where, "row %zu", row);
    snprintf(err, errlen, "value %zu of %s is %s; table '%s' refuses "
             "non-finite values (nonfinite = reject): nothing of this push "
             "was applied here", i % tc->dim, where,
             isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf", tc->name);
}

/* The timestamps of a frame's pushes refused for non-finite values. */
typedef struct badset {
    const uint64_t *ts;
    int n;
} badset;

/* Whether the connection's memory of refused pushes holds ts. */
static int remembered_bad(const psd_session *ss, uint64_t ts)
{
    uint64_t k = ss->nbad < PSD_BAD_TS ? ss->nbad : PSD_BAD_TS;
    for (uint64_t i = 0; i < k; i++)
        if (ss->bad_ts[i] == ts)
            return 1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Whether push ts is refused in this frame: bad->ts is sorted and holds
 * every such push, also those remembered from earlier frames. */
static int is_bad(const badset *bad, uint64_t ts)
{
    return bad->n && bsearch(&ts, bad->ts, (size_t)bad->n, sizeof ts,
                             cmp_u64) != NULL;
}

static void dispatch(psd_node *n, psd_session *ss, const psw_msg *m,
                     uint64_t now_ms, const badset *bad)
{
    char err[512];
    int owner = -1, rc;

    if (psw_op_has(m->op, PSW_OPF_SESSION)) {
        session(n, ss, m, now_ms);
        return;
    }
    /* An operator's command is not counted with the clients' requests. */
    if (m->op == PSW_OP_ADMIN) {
        admin(n, ss, m);
        return;
    }
    /* A request comes only from a client whose open completed: a client
     * that sends no OPENED is taken in at its first request. */
    if (ss->joining)
        confirm_join(n, ss, now_ms);
    if (held_already(ss, m))
        return;
    n->stats.requests++;
    if (psw_op_has(m->op, PSW_OPF_CONTROL)) {
        control(n, ss, m, now_ms);
        return;
    }
    if (m->table >= (uint32_t)n->ntables) {
        snprintf(err, sizeof err, "no table with id %u (%d tables)", m->table,
                 n->ntables);
        reply_error(n, ss, m, PSW_ENOTABLE, err);
        return;
    }
    psd_table *t = n->tables[m->table];
    const psd_table_conf *tc = psd_table_conf_get(t);
    size_t rowb = (size_t)tc->dim * sizeof(float);
    int ranged = psw_op_has(m->op, PSW_OPF_RANGED);
    int pushes = psw_op_has(m->op, PSW_OPF_PUSHES);
    int pulls = psw_op_has(m->op, PSW_OPF_PULLS);
    uint64_t nrows = ranged ? m->count : m->nkeys;

    /* Exactly-once needs a timestamp the client never reuses, and the
     * memory of applied pushes keys on ts >= 1. */
    if (pushes && m->ts == 0) {
        reply_error(n, ss, m, PSW_EINVAL, "a push needs a timestamp >= 1 "
                    "(ts 0 could not be told from a retransmission)");
        return;
    }
    if (pushes && nrows > SIZE_MAX / rowb) {
        /* Their size would wrap round: said as it is. */
        snprintf(err, sizeof err, "%llu rows of table '%s' (dim %u) are more "
                 "than any push can carry, got %zu bytes of values",
                 (unsigned long long)nrows, tc->name, tc->dim, m->vals_len);
        reply_error(n, ss, m, PSW_EINVAL, err);
        return;
    }
    if (pushes && m->vals_len != nrows * rowb) {
        snprintf(err, sizeof err, "%llu rows of table '%s' need %llu bytes of "
                 "values, got %zu", (unsigned long long)nrows, tc->name,
                 (unsigned long long)(nrows * rowb), m->vals_len);
        reply_error(n, ss, m, PSW_EINVAL, err);
        return;
    }
    /* A reply frame must fit the limit the client reads with. */
    if (pulls && rows_bytes(n, m) > psw_payload_max(frame_max(n))) {
        char lim[160];
        snprintf(err, sizeof err, "pulling %llu rows of table '%s' exceeds "
                 "%s", (unsigned long long)nrows, tc->name,
                 frame_limit(n, lim, sizeof lim));
        reply_error(n, ss, m, PSW_ETOOBIG, err);
        return;
    }
    rc = ranged ? psd_table_check_range(t, m->first, m->count, &owner, err,
                                        sizeof err)
                : psd_table_check_keys(t, m->keys, m->nkeys, &owner, err,
                                       sizeof err);
    if (rc == PSW_ENOTOWNER) {
        size_t l = strlen(err);
        snprintf(err + l, sizeof err - l, " (%s), not by this node %d",
                 n->cluster.nodes[owner], n->index);
    }
    if (rc) {
        reply_error(n, ss, m, rc, err);
        return;
    }
    /* A bsp table's pushes are one clock's gradients of the workers,
     * applied once all of them clocked: a reader's push would be added to
     * them unasked (and not counted by aggregate = mean). */
    if (pushes && tc->consistency == PSD_CONS_BSP &&
        !psd_sync_holds(&n->sync, ss->worker, ss)) {
        snprintf(err, sizeof err, "table '%s' is bsp: its pushes are the "
                 "workers' gradients of a clock, and this connection holds "
                 "no worker id (ps_options.worker = -1, or its worker was "
                 "taken over by a new connection); push from a worker, or "
                 "set a table's starting values with its init", tc->name);
        reply_error(n, ss, m, PSW_EINVAL, err);
        return;
    }
    /* A NaN or an infinity would spoil the rows for good (and an
     * optimizer's state with them): the whole push is refused, every part
     * of it that reaches this node from this frame on. */
    if (pushes && !tc->allow_nonfinite && is_bad(bad, m->ts)) {
        if (values_nonfinite(ss, m))
            describe_nonfinite(n, m, err, sizeof err);
        else
            snprintf(err, sizeof err, "another part of push %llu holds a "
                     "NaN or infinite value; table '%s' refuses them "
                     "(nonfinite = reject): this part was not applied",
                     (unsigned long long)m->ts, tc->name);
        reply_error(n, ss, m, PSW_ENONFINITE, err);
        return;
    }
    /* A push seen before (a retransmission) is answered as it was the
     * first time, without applying it again; a pushpull still pulls. */
    psd_dclient *dc = pushes ? dedup_of(n, ss, now_ms) : NULL;
    if (dc)                      /* remembered past its close from now */
        psd_dedup_pushed(dc, m->ts);
    int seen_status, seen = dc ? psd_dedup_seen(dc, m->ts, m->part,
                                                &seen_status) : 0;
    if (seen == 2) {
        /* A copy of a push whose record this node dropped, with its
         * client gone, before the client acknowledged it: applied or
         * not, nobody knows now. Applied again it would count twice;
         * refused, the client says it may have been applied. */
        n->stats.duplicates++;
        snprintf(err, sizeof err, PSW_FORGOT_TEXT " push %llu: it dropped its record of this client's pushes "
                 "below %llu, which the client had not acknowledged, while "
                 "the client was gone (client_ttl %u s, or room at "
                 "max_remembered_pushes): it may have been applied; it was "
                 "not applied again", (unsigned long long)m->ts,
                 (unsigned long long)psd_dedup_forgot(dc),
                 (unsigned)n->cfg.client_ttl);
        reply_error(n, ss, m, PSW_ESERVER, err);
        return;
    }
    if (seen == 1) {
        n->stats.duplicates++;
        /* Its first copy may still wait for its record to be durable (on
         * a connection since lost): this answer waits as long, for every
         * record so far, the first copy's among them. */
        up_to_last_record(n, &ss->need_lsn);
        if (seen_status != PSW_OK) {
            snprintf(err, sizeof err, "%s (this retransmission was not "
                     "applied again)", seen_status == PSW_ESERVER
                                           ? UNJOURNALED
                                           : "out of memory creating rows");
            reply_error(n, ss, m, seen_status, err);
            return;
        }
        pushes = 0;
    }
    /* A node whose journal cannot be written takes no new push: it could
     * not keep the promise of durability = log. A retransmission was
     * taken above: its first copy was applied, and its answer waits for
     * that record as the first copy's does (refused, a caller would push
     * the gradient again). */
    if (pushes && n->journal_error[0]) {
        snprintf(err, sizeof err, "this node cannot write its journal (%.380s)"
                 ": pushes are refused until it can (this push was not "
                 "applied)", n->journal_error);
        reply_error(n, ss, m, PSW_ESERVER, err);
        return;
    }
    if (dc && pushes && room_for(n, dc, m->ts, now_ms, err, sizeof err)) {
        psd_dedup_refused(dc, m->ts);
        n->stats.unacked_refusals++;
        reply_error(n, ss, m, PSW_EBUSY, err);
        return;
    }
    /* A sparse table with max_rows takes no push that would grow it past
     * that; pulls never grow a table. */
    if (pushes && !ranged &&
        (rc = psd_table_check_growth(t, m->keys, m->nkeys, err,
                                     sizeof err))) {
        /* The trainer hears it; the operator, who raises max_rows, reads
         * the log (collapsed: every push of a full table is refused). */
        if (rc == PSW_EFULL)
            psd_warn_rep("a push refused (PS_EFULL): %s", err);
        reply_error(n, ss, m, rc, err);
        return;
    }
    if (pushes) {
        size_t applied = (size_t)nrows;  /* keys applied (a sparse push) */
        if (tc->consistency == PSD_CONS_BSP) {
            /* Summed now, applied once when the clock ends. A range's
             * side table has its rows: it fails (out of memory for that
             * table) before it sums any. */
            rc = ranged ? psd_table_accumulate_range(t, m->first, m->count,
                                                     m->vals)
                        : psd_table_accumulate_some(t, m->keys, m->nkeys,
                                                    m->vals, &applied);
            if (rc && ranged)
                applied = 0;
            /* Counted in the clock's mean only with something summed. */
            if (psd_sync_holds(&n->sync, ss->worker, ss) && (!rc || applied))
                psd_sync_summed(&n->sync, ss->worker);
        }
        else {
            rows_change(n, m->table, m);
            if (ranged)
                psd_table_push_range(t, m->first, m->count, m->vals);
            else {
                int careful = psd_table_careful(t);
                rc = psd_table_push_some(t, m->keys, m->nkeys, m->vals,
                                         &applied);
                if (rc && !careful)
                    psd_warn("table '%s': out of memory creating rows (%zu "
                             "of a push's %llu keys applied); its pushes "
                             "now make their rows before they update any, "
                             "and one that cannot is refused whole: give "
                             "psd more memory, or set max_rows", tc->name,
                             applied, (unsigned long long)m->nkeys);
            }
        }
        /* Refused whole (a careful table, psd_table_push_some): nothing
         * to journal or remember, as for any refusal; journaled, each
         * refused push of a node out of memory filled the disk. */
        if (rc && applied == 0) {
            snprintf(err, sizeof err, "out of memory creating rows: none "
                     "of the %llu keys of this push's part on this node was "
                     "applied", (unsigned long long)nrows);
            reply_error(n, ss, m, PSW_ENOMEM, err);
            return;
        }
        /* Applied in part (the table's first time out of memory): the
         * record holds the keys applied, which a replay applies again,
         * not the whole push. */
        psw_msg part = *m;
        if (rc && !ranged && applied < m->nkeys) {
            part.nkeys = applied;
            part.vals_len = applied * (size_t)tc->dim * sizeof(float);
        }
        /* Journaled before it is remembered: a push whose record could
         * not be buffered is remembered with that error, so that a
         * retransmission is not acknowledged as durable. */
        uint64_t lsn = n->journal
                           ? psd_journal_push(n->journal, ss->client_id,
                                              ss->incarnation, &part,
                                              rc ? PSW_ENOMEM : 0)
                           : 0;
        int unjournaled = n->journal && !lsn;
        if (dc && psd_dedup_record(dc, m->ts, m->part,
                                   unjournaled ? PSW_ESERVER
                                   : rc ? PSW_ENOMEM : 0))
            psd_warn("out of memory remembering push %llu.%u of %s: a "
                     "retransmission of it would be applied again",
                     (unsigned long long)m->ts, m->part, ss->peer);
        if (unjournaled) {
            /* Counted and said as any failed journal write (it was in
             * neither: psd_journal_failing read 0 while acknowledged
             * pushes had no record). */
            n->stats.journal_errors++;
            if (!n->journal_error[0])
                psd_log_rep(PSD_LOG_ERROR, "journal: out of memory "
                            "buffering a push's record: it is applied but "
                            "may be lost in a crash, and pushes are refused "
                            "until a record can be buffered again");
            snprintf(n->journal_error, sizeof n->journal_error,
                     "out of memory buffering a record");
            reply_error(n, ss, m, PSW_ESERVER, UNJOURNALED);
            return;
        }
        if (lsn)
            ss->need_lsn = lsn;
        n->stats.pushes++;
        n->stats.keys_pushed += nrows;
        n->tstats[m->table].pushes++;
        n->tstats[m->table].keys_pushed += nrows;
        if (rc) {
            if (applied < nrows)
                snprintf(err, sizeof err, "out of memory creating rows: the "
                         "first %zu of the %llu keys of this push's part on "
                         "this node were applied, the others not (pushed "
                         "again, those would be applied twice)", applied,
                         (unsigned long long)nrows);
            else
                snprintf(err, sizeof err, "out of memory creating rows");
            reply_error(n, ss, m, PSW_ENOMEM, err);
            return;
        }
    }
    if (!pulls || nrows == 0) {
        psw_pack_reply(ss->out, m->ts, m->part, PSW_OK, NULL, 0, 0);
        return;
    }
    n->stats.pulls++;
    n->stats.keys_pulled += nrows;
    n->tstats[m->table].pulls++;
    n->tstats[m->table].keys_pulled += nrows;
    uint64_t need;
    int32_t id = psd_sync_holds(&n->sync, ss->worker, ss) ? ss->worker : -1;
    if (tc->consistency == PSD_CONS_SSP &&
        !psd_sync_pull_ready(&n->sync, id, tc->staleness, &need)) {
        if (hold(n, ss, m, PSW_OP_CLOCK, need))
            reply_error(n, ss, m, PSW_ENOMEM, "out of memory holding a pull");
        return;                  /* answered when the slow worker catches up */
    }
    reply_rows(n, ss, m);
}

/* ---- entry points --------------------------------------------------- */

int psd_request_hello(psd_node *n, psd_session *ss, const psw_hello *h,
                      uint64_t now_ms, psw_cluster *reply, char *why,
                      size_t whylen)
{
    if (h->worker >= 0) {
        n->changes++;            /* a worker joins (not psctl, a reader) */
        /* Version 4: pending until the client says its open completed
         * on every node (OPENED), so that an open that fails part way
         * leaves this node as it leaves those the HELLO never reached. */
        int pending = h->version >= 4;
        int rc = pending ? psd_sync_join_pending(&n->sync, h->worker,
                                                 h->client_id, ss, ss->peer,
                                                 why, whylen)
                         : psd_sync_join(&n->sync, h->worker, h->client_id,
                                         ss, ss->peer, why, whylen);
        if (rc)
            return rc;
        ss->worker = h->worker;
        ss->joining = pending && n->sync.workers[h->worker].pending;
        (void)psd_node_journal_workers(n);
        /* A new process for a lost worker may start a clock further on:
         * if that one was the slowest, the node's clock moves now. */
        advance(n, now_ms);
    }
    ss->client_id = h->client_id;
    ss->incarnation = h->incarnation;
    /* Attached now, not at its first push or ACK: a client back after a
     * restart (its memory loaded from disk) counts as connected before
     * it sends anything, so max_remembered_pushes cannot forget it as
     * gone in between, and its retransmissions are recognised. Memory
     * running out only delays this to the first push, as before. */
    (void)dedup_of(n, ss, now_ms);
    *reply = n->cluster;
    /* A worker learns where this node has it, so its next ps_clock names
     * the right clock after a rejoin or a lost connection. */
    psd_sync_position(&n->sync, h->worker, &reply->worker_clock,
                      &reply->worker_barrier);
    return 0;
}

int psd_request_frame(psd_node *n, psd_session *ss, const psw_msg *m,
                      int count, uint64_t now_ms, char *why, size_t whylen)
{
    /* The rows one frame asks for may not exceed max_frame: otherwise a
     * single small frame of range pulls could make psd build gigabytes of
     * replies before backpressure gets a say. Clients budget their frames
     * the same way. */
    uint64_t total = 0, one_max = psw_payload_max(frame_max(n));
    for (int i = 0; i < count; i++) {
        uint64_t rb = rows_bytes(n, &m[i]);
        if (rb <= one_max)       /* larger: answered with PSW_ETOOBIG */
            total += rb;
    }
    if (total > frame_max(n)) {
        char lim[160];
        snprintf(why, whylen, "the replies to one frame would carry %llu "
                 "bytes of rows, past %s", (unsigned long long)total,
                 frame_limit(n, lim, sizeof lim));
        return PSW_ETOOBIG;
    }
    /* The pushes refused in this frame, found before anything of it
     * runs, so that no part of such a push is applied: those holding a NaN
     * or an infinity, and those the connection remembers refusing. All
     * are looked up in the memory as it was before the frame; only then
     * does it take the frame's own: a frame's many refusals would push
     * out a remembered push whose parts in this frame are still to be
     * refused (a trial's thousand NaN pushes in flight had some applied).
     * Sorted once, for lookups in O(log n) per message: a frame holds up
     * to PSW_MAX_MSGS. */
    uint64_t one_bad, *bad_ts = &one_bad;
    badset bad = { bad_ts, 0 };
    for (int i = 0; i < count; i++) {
        const psw_msg *x = &m[i];
        if (!psw_op_has(x->op, PSW_OPF_PUSHES) ||
            x->table >= (uint32_t)n->ntables ||
            psd_table_conf_get(n->tables[x->table])->allow_nonfinite ||
            (!remembered_bad(ss, x->ts) && !values_nonfinite(ss, x)))
            continue;
        if (bad.n == 1 && bad_ts == &one_bad) {
            bad_ts = malloc((size_t)count * sizeof *bad_ts);
            if (!bad_ts) {
                snprintf(why, whylen, "out of memory checking a frame");
                return PSW_ENOMEM;
            }
            bad_ts[0] = one_bad;
        }
        bad_ts[bad.n++] = x->ts;
    }
    bad.ts = bad_ts;
    if (bad.n > 1)
        qsort(bad_ts, (size_t)bad.n, sizeof *bad_ts, cmp_u64);
    for (int i = 0; i < bad.n; i++)
        if ((i == 0 || bad_ts[i] != bad_ts[i - 1]) &&
            !remembered_bad(ss, bad_ts[i]))
            ss->bad_ts[ss->nbad++ % PSD_BAD_TS] = bad_ts[i];
    psw_out_frame_begin(ss->out);
    /* One clock read per request: each one's service time runs from the
     * previous read (the frame's start, or the end of the request before). */
    uint64_t t = now_ns();
    for (int i = 0; i < count; i++) {
        /* One look at the op table per request. */
        const psw_op_info *oi = psw_op_get(m[i].op);
        int flags = oi ? oi->flags : 0, session = flags & PSW_OPF_SESSION;
        /* Pulls, PINGs and operators' commands change nothing saved. Nor
         * does an ACK that matters: it lets the node forget pushes it
         * remembers, and a snapshot without it only remembers more (the
         * client never sends an acknowledged request again); counting
         * it would count every pull, which moves the client's mark. */
        if (flags & (PSW_OPF_PUSHES | PSW_OPF_CONTROL))
            n->changes++;
        if (!session)
            reply_room(n, ss, reply_bound(n, &m[i]));
        uint64_t ran = n->stats.requests;
        dispatch(n, ss, &m[i], now_ms, &bad);
        uint64_t end = now_ns();
        /* Requests run only, as counted in requests: not a session's
         * messages, an operator's command, nor the copy of a held request
         * a client sent again (it is dropped, and its microsecond pulled
         * the quantiles of control requests down). */
        if (n->stats.requests != ran) {
            int k = lat_kind(m[i].op);
            n->latency[k][psw_hist_bucket(end - t)]++;
            n->latency_sum[k] += end - t;
        }
        t = end;
    }
    psw_out_frame_end(ss->out);
    if (bad_ts != &one_bad)
        free(bad_ts);
    return 0;
}

void psd_request_closed(psd_node *n, psd_session *ss, uint64_t now_ms)
{
    /* A worker is lost. A reader's or psctl's close changes only when
     * the node last heard from a client (dedup), which a snapshot
     * without it only remembers as sooner. */
    if (ss->worker >= 0)
        n->changes++;
    psd_held **pp = &n->held;
    while (ss->held_bytes && *pp) {
        psd_held *h = *pp;
        if (h->ss == ss) {
            *pp = h->next;
            held_forget(h);
            held_free(h);
        } else
            pp = &h->next;
    }
    if (!*pp)
        n->held_tail = pp;
    psw_map_destroy(&ss->held);
    if (ss->dedup)
        psd_dedup_detach(n->dedup, ss->dedup, now_ms);
    ss->dedup = NULL;
    if (psd_sync_lost(&n->sync, ss->worker, ss, now_ms,
                      n->cfg.worker_grace)) {
        (void)psd_node_journal_workers(n);
        advance(n, now_ms);
    }
}

/* What held requests wait on (PSD_HOLD_* bits), for the "waiting for"
 * log: a barrier waits for other workers than a clock does. */
static int holding(const psd_node *n)
{
    int h = 0;
    for (const psd_held *x = n->held;
         x && h != (PSD_HOLD_CLOCK | PSD_HOLD_BARRIER); x = x->next)
        h |= x->kind == PSW_OP_BARRIER ? PSD_HOLD_BARRIER : PSD_HOLD_CLOCK;
    return h;
}

/* Old hash slots moved per tick (every 100 ms), over all tables: a
 * random write each, 3-4 ms of work in a large shard, so that a sparse
 * shard that stopped growing drops its old slots (and its lookups their
 * second probe) while the loop stays free to serve (rows created move 16
 * each, faster). After a second without a request, 8 times as many a
 * tick (25-30 ms): 10^8 slots of a table at rest in about 40 s, where
 * they held a few hundred MB for minutes; a trainer pausing between
 * steps for less than that is not slowed by it. */
#define TIDY_SLOTS_PER_TICK ((size_t)1 << 15)
#define TIDY_IDLE_TICKS 10

void psd_request_tick(psd_node *n, uint64_t now_ms)
{
    size_t tidy = TIDY_SLOTS_PER_TICK;
    if (n->stats.requests != n->tidy_requests) {
        n->tidy_requests = n->stats.requests;
        n->tidy_idle = 0;
    } else if (++n->tidy_idle >= TIDY_IDLE_TICKS)
        tidy *= 8;
    /* While a forked writer runs, every page written is copied for it:
     * the ticks leave the slots be (pushes still move some). */
    if (n->writer_forked)
        tidy = 0;
    /* Every table, the budget spent or not: each counts its idle ticks
     * (a readied slot array is let go after some). */
    for (int i = 0; i < n->ntables; i++)
        tidy -= psd_table_tidy(n->tables[i], tidy);
    if (psd_sync_tick(&n->sync, now_ms, n->cfg.worker_grace, holding(n),
                      WAIT_LOG_MS)) {
        n->changes++;            /* a worker's grace ran out */
        (void)psd_node_journal_workers(n);
        advance(n, now_ms);
    }
    size_t uclients, unacked;
    n->stats.clients_expired +=
        psd_dedup_expire(n->dedup, now_ms, (uint64_t)n->cfg.client_ttl * 1000,
                         &uclients, &unacked);
    /* A client gone for client_ttl with pushes it never heard answered
     * may still send them (a partition longer than its own bound cannot
     * last that long with the defaults, but client_ttl may be set
     * shorter): the operator hears of it. A copy is refused while the
     * client's tombstone lasts (dedup.h). */
    if (uclients)
        psd_warn_rep("forgot %zu clients gone for client_ttl (%u s) with "
                     "%zu pushes they had not acknowledged: a copy of one "
                     "sent now is refused as perhaps applied (while the "
                     "node keeps the client's tombstone: the last 16384 "
                     "such clients, until it restarts)", uclients,
                     (unsigned)n->cfg.client_ttl, unacked);
}

void psd_request_replayed(psd_node *n, uint64_t now_ms)
{
    /* A bsp node's clock came back with its CLOCK records, which also
     * applied the sums: moving it here would leave the sums of the clock
     * it skipped to be applied with the next one's. */
    if (!has_bsp(n))
        (void)psd_sync_advance(&n->sync, now_ms);
}

int psd_request_replay(void *ctx, const psd_jrecord *r, char *err,
                       size_t errlen)
{
    psd_replay_ctx *rc_ = ctx;
    psd_node *n = rc_->node;
    if (r->type == PSD_J_ACK) {
        psd_dclient *dc = psd_dedup_attach(n->dedup, r->client_id,
                                           r->incarnation, rc_->now_ms);
        if (!dc) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        psd_dedup_mark(dc, r->mark);
        psd_dedup_detach(n->dedup, dc, rc_->now_ms);
        return 0;
    }
    if (r->type == PSD_J_WORKER) {
        /* A worker beyond a `workers` lowered since is dropped, as a
         * snapshot's are. */
        (void)psd_sync_replay(&n->sync, r->worker, r->joined, r->closed,
                              r->client_id, r->clock, r->barrier,
                              r->has_replaced ? r->replaced : NULL,
                              r->ended_mask, r->lost_id, r->unknown,
                              rc_->now_ms);
        return 0;
    }
    if (r->type == PSD_J_CLOCK) {
        /* The clock moved because every worker waited for had reached it:
         * none of those is behind it (the snapshot may hold older clocks).
         * A worker that had left keeps the clock it left at, as it does
         * live: whether a job ran its course depends on it. */
        if (r->clock > n->sync.clock)
            n->sync.clock = r->clock;
        for (int i = 0; i < n->sync.nworkers; i++) {
            psd_worker *w = &n->sync.workers[i];
            if ((w->state == PSD_W_GONE || w->state == PSD_W_LIVE) &&
                w->clock < r->clock)
                w->clock = r->clock;
        }
        for (int i = 0; i < n->ntables; i++) {
            const psd_table_conf *tc = psd_table_conf_get(n->tables[i]);
            if (tc->consistency != PSD_CONS_BSP)
                continue;
            float scale = tc->aggregate_mean && r->waited > 0
                              ? 1.0f / (float)r->waited : 1.0f;
            if (psd_table_apply_accumulated(n->tables[i], scale)) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
        }
        return 0;
    }
    const psw_msg *m = &r->msg;
    uint32_t table = m->table, have = rc_->map ? rc_->nmap
                                               : (uint32_t)n->ntables;
    if (table >= have) {
        snprintf(err, errlen, "a %s table %u; the %s has %u tables",
                 r->type == PSD_J_PARAMS ? "reload of" : "push to", table,
                 rc_->map ? "snapshot" : "config", have);
        return -1;
    }
    if (rc_->map) {
        if (rc_->map[table] < 0) {
            rc_->skipped += r->type == PSD_J_PUSH;
            return 0;
        }
        table = (uint32_t)rc_->map[table];
    }
    if (r->type == PSD_J_PARAMS) {
        /* The pushes that follow were applied with these; the ini's own
         * come back when the replay ends (psd_node_apply_params). */
        psd_updater_params p = r->params;
        p.kind = n->cfg.tables[table].upd.kind;
        psd_table_set_params(n->tables[table], &p);
        return 0;
    }
    psd_table *t = n->tables[table];
    const psd_table_conf *tc = psd_table_conf_get(t);
    int ranged = psw_op_has(m->op, PSW_OPF_RANGED), owner;
    uint64_t nrows = ranged ? m->count : m->nkeys;
    if (nrows > SIZE_MAX / (tc->dim * sizeof(float)) ||
        m->vals_len != nrows * tc->dim * sizeof(float)) {
        snprintf(err, errlen, "a push of %llu rows of table '%s' with %zu "
                 "bytes of values (dim %u)", (unsigned long long)nrows,
                 tc->name, m->vals_len, tc->dim);
        return -1;
    }
    if (ranged ? psd_table_check_range(t, m->first, m->count, &owner, err,
                                       errlen)
               : psd_table_check_keys(t, m->keys, m->nkeys, &owner, err,
                                      errlen))
        return -1;
    psd_dclient *dc = psd_dedup_attach(n->dedup, r->client_id,
                                       r->incarnation, rc_->now_ms);
    if (!dc) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* psd journals a push once, after its check against this memory; a
     * record of one already applied is a copy that psd did not write (a
     * block of the file written twice): applied again, the replay gave
     * that push twice. Skipped, as the live node skips a retransmission. */
    int seen_status;
    if (psd_dedup_seen(dc, m->ts, m->part, &seen_status) == 1) {
        psd_dedup_detach(n->dedup, dc, rc_->now_ms);
        psd_warn("journal: a record of push %llu (part %u) of client "
                 "%016llx, applied already, is there again: skipped",
                 (unsigned long long)m->ts, (unsigned)m->part,
                 (unsigned long long)r->client_id);
        return 0;
    }
    if (psd_dedup_record(dc, m->ts, m->part, r->status)) {
        psd_dedup_detach(n->dedup, dc, rc_->now_ms);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    psd_dedup_detach(n->dedup, dc, rc_->now_ms);
    int rc;
    if (tc->consistency == PSD_CONS_BSP) {
        rc = ranged ? psd_table_accumulate_range(t, m->first, m->count,
                                                 m->vals)
                    : psd_table_accumulate(t, m->keys, m->nkeys, m->vals);
        /* Its worker counts in the mean of this clock even if it left
         * before the crash (its WORKER records came first: a client joins
         * before it pushes). */
        psd_sync_summed_by(&n->sync, r->client_id);
    } else if (ranged) {
        psd_table_push_range(t, m->first, m->count, m->vals);
        rc = 0;
    } else
        rc = psd_table_push(t, m->keys, m->nkeys, m->vals);
    if (rc) {
        snprintf(err, errlen, "out of memory replaying a push");
        return -1;
    }
    return 0;
}

void psd_request_drop_all(psd_node *n)
{
    while (n->held) {
        psd_held *h = n->held;
        n->held = h->next;
        held_forget(h);
        held_free(h);
    }
    n->held_tail = &n->held;
}
