/* The Customer: request lifecycle from timestamp to completion; see
 * customer.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "bufpool.h"
#include "customer.h"
#include "../proto/frame.h"
#include "../proto/status.h"

/* The moment timeout_ms from now on the monotonic clock. */
static struct timespec deadline_after(int timeout_ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += timeout_ms / 1000;
    t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* A condition variable whose timed waits count on the monotonic clock,
 * so that a change of the wall clock neither cuts nor stretches them. */
static void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* Waits on cv (under cu->mu) until woken, or until end when timed.
 * Returns 0, or 1 when end has passed. */
static int cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
                           const struct timespec *end)
{
    if (!end) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    return pthread_cond_timedwait(cv, mu, end) == ETIMEDOUT;
}

void psc_customer_init(psc_customer *cu, size_t max_inflight_bytes,
                       psc_stats *stats)
{
    memset(cu, 0, sizeof *cu);
    pthread_mutex_init(&cu->mu, NULL);
    cond_init_monotonic(&cu->cv);
    for (int i = 0; i < PSC_WAIT_CVS; i++)
        cond_init_monotonic(&cu->wait_cv[i]);
    psw_map_init(&cu->reqs);
    cu->max_inflight_bytes = max_inflight_bytes;
    cu->low = 1;
    cu->stats = stats;
}

void psc_customer_destroy(psc_customer *cu)
{
    for (int i = 0; cu->fails && i < PSC_FAIL_RING; i++)
        free(cu->fails[i].text);
    free(cu->fails);
    psw_map_destroy(&cu->reqs);
    pthread_mutex_destroy(&cu->mu);
    pthread_cond_destroy(&cu->cv);
    for (int i = 0; i < PSC_WAIT_CVS; i++)
        pthread_cond_destroy(&cu->wait_cv[i]);
}

void psc_req_free(psc_req *r)
{
    if (!r)
        return;
    free(r->error);
    for (psc_part_more *m = r->more, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    if (r->pool)
        psc_bufpool_give(r->pool, r, r->cap);
    else
        free(r);
}

static void set_ts(psc_req *r, ps_ts ts)
{
    r->ts = ts;
    for (int i = 0; i < r->nparts; i++)
        r->parts[i].msg.ts = (uint64_t)ts;
}

/* A push holding a NaN or an infinity (r->whole) goes in two waves: first
 * the parts that hold such a value, then, once those were all applied,
 * the others. A node refuses a part holding one (nonfinite = reject), but
 * a part without one is applied wherever it goes: on another node, or on
 * the same node in an earlier frame (a push larger than max_frame per
 * node takes several). Held back until then, the finite parts are never
 * sent when a part is refused, so the push is refused whole at any size.
 * Only such pushes have their values read here again. Returns the parts
 * to queue now, linked in order; the held ones go to r->held. */
static psc_part *stage(psc_req *r)
{
    int nfirst = 0, nheld = 0;
    if (r->whole) {
        for (int i = 0; i < r->nparts; i++) {
            psc_part *p = &r->parts[i];
            p->first = psw_nonfinite(p->msg.vals, p->msg.vals_len);
            nfirst += p->first;
        }
        /* None at all (not expected: whole means one was seen), or every
         * part holds one: one wave. */
        nheld = nfirst ? r->nparts - nfirst : 0;
    }
    psc_part *now = NULL, **now_tail = &now, **held_tail = &r->held;
    for (int i = 0; i < r->nparts; i++) {
        psc_part *p = &r->parts[i];
        if (!nheld)
            p->first = 0;
        p->next = NULL;
        if (nheld && !p->first) {
            *held_tail = p;
            held_tail = &p->next;
        } else {
            *now_tail = p;
            now_tail = &p->next;
        }
    }
    r->first_pending = nheld ? nfirst : 0;
    return now;
}

/* Queues part p for the I/O thread; it holds back what follows when p is
 * the last part of a first wave (stage), so that the parts submitted
 * after it reach every node after the held ones: a pull issued behind a
 * push sees it, a clock follows it. Under cu->mu. */
static void enqueue(psc_customer *cu, psc_part *p)
{
    psc_req *r = p->req;
    int last_first = r->held && (!p->next || p->next->req != r);
    p->next = NULL;
    if (cu->sq_tail)
        cu->sq_tail->next = p;
    else
        cu->sq_head = p;
    cu->sq_tail = p;
    if (last_first)
        cu->holding = 1;
}

/* Copies src into dst (size bytes); a text too long keeps its start and
 * its end around " ... ": a failure's end says what matters most to the
 * caller ("it was applied in part"), and its start which request and
 * node. */
static void fit_text(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n < size) {
        memcpy(dst, src, n + 1);
        return;
    }
    static const char gap[] = " ... ";
    size_t room = size - 1 - (sizeof gap - 1), head = room / 2;
    size_t tail = room - head;
    memcpy(dst, src, head);
    memcpy(dst + head, gap, sizeof gap - 1);
    memcpy(dst + head + sizeof gap - 1, src + n - tail, tail);
    dst[size - 1] = '\0';
}

/* Appends note to the request's error text (left as it is when memory
 * runs out: the status still says what happened). */
static void append_error(psc_req *r, const char *note)
{
    size_t old = r->error ? strlen(r->error) : 0, n = strlen(note);
    char *e = realloc(r->error, old + n + 1);
    if (!e)
        return;
    memcpy(e + old, note, n + 1);
    r->error = e;
}

/* Once the first wave of a push sent in two (stage) was answered: sends
 * the held parts when every part of it was applied; otherwise sends
 * none, and they count as answered (r->pending) with the first wave's
 * error. Then the parts that waited behind it go, up to the next such
 * push. On the I/O thread, without cu->mu. */
static void release_held(psc_req *r)
{
    psc_part *held = r->held;
    r->held = NULL;
    if (r->status != PS_OK) {
        for (psc_part *p = held; p; p = p->next)
            r->pending--;
        held = NULL;
        append_error(r, " (its parts holding no NaN or infinity were not "
                        "sent)");
    }
    psc_customer *cu = r->cu;
    pthread_mutex_lock(&cu->mu);
    int queued = held || cu->dq_head;
    for (psc_part *p = held, *n; p; p = n) {
        n = p->next;
        enqueue(cu, p);          /* r->held is NULL: holds nothing back */
    }
    cu->holding = 0;
    while (cu->dq_head && !cu->holding) {
        psc_part *p = cu->dq_head;
        cu->dq_head = p->next;
        enqueue(cu, p);
    }
    if (!cu->dq_head)
        cu->dq_tail = NULL;
    pthread_mutex_unlock(&cu->mu);
    if (queued && cu->wake)
        cu->wake(cu->wake_arg);
}

ps_ts psc_customer_submit(psc_customer *cu, psc_req *r, ps_done_fn cb,
                          void *arg, int may_wait, char *err, size_t errlen)
{
    r->cb = cb;
    r->arg = arg;
    r->cu = cu;
    psc_part *now = stage(r);        /* reads values: outside the lock */
    pthread_mutex_lock(&cu->mu);
    /* Backpressure: wait while the bytes in flight exceed the limit. A
     * lone request always goes, and the I/O thread (callbacks) never
     * waits, since it is the one that would have to wake it. */
    if (may_wait && cu->inflight_bytes > 0 && !cu->closing &&
        cu->inflight_bytes + r->bytes > cu->max_inflight_bytes) {
        uint64_t t0 = uv_hrtime();
        cu->cv_waiters++;
        __atomic_add_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
        while (cu->inflight_bytes > 0 && !cu->closing &&
               cu->inflight_bytes + r->bytes > cu->max_inflight_bytes)
            pthread_cond_wait(&cu->cv, &cu->mu);
        __atomic_sub_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
        cu->cv_waiters--;
        psc_add_shared(&cu->stats->backpressure_ns, uv_hrtime() - t0);
    }
    /* Also once ps_close_now gives everything up (abandon_ts INT64_MAX):
     * a request a callback issues then would fail at once and run its
     * callback, which may issue it again (a retry on failure), and the
     * close never ended. Refused here, no callback runs. */
    if (cu->closing || cu->abandon_ts == INT64_MAX) {
        pthread_mutex_unlock(&cu->mu);
        psc_req_free(r);
        snprintf(err, errlen, cu->closing ? "the client is closing"
                 : "the client is closing (ps_close_now)");
        return PS_ECLOSED;
    }
    ps_ts ts = cu->last_ts + 1;
    set_ts(r, ts);
    r->submit_ns = uv_hrtime();
    if (!r->call_ns)
        r->call_ns = r->submit_ns;
    if (psw_map_put(&cu->reqs, (uint64_t)ts, r)) {
        pthread_mutex_unlock(&cu->mu);
        psc_req_free(r);
        snprintf(err, errlen, "out of memory");
        return PS_ENOMEM;
    }
    cu->last_ts = ts;
    cu->inflight_bytes += r->bytes;
    /* In the order the parts are queued, which each connection keeps: a
     * push queued before a CLOCK is in that clock on every node, one
     * after it in the next, whichever thread made them. */
    if (r->op == PSW_OP_CLOCK && r->nparts &&
        r->parts[0].msg.value > cu->clock_sent)
        cu->clock_sent = r->parts[0].msg.value;
    if (r->step)
        r->step = cu->clock_sent + 1;
    if (cu->holding) {
        /* Behind a push whose held parts have not gone yet. */
        if (cu->dq_tail)
            cu->dq_tail->next = now;
        else
            cu->dq_head = now;
        while (now && now->next)
            now = now->next;
        if (now)
            cu->dq_tail = now;
    } else
        for (psc_part *p = now, *n; p; p = n) {
            n = p->next;
            enqueue(cu, p);
        }
    pthread_mutex_unlock(&cu->mu);
    return ts;
}

psc_part *psc_customer_take(psc_customer *cu, int *closing, ps_ts *abandon)
{
    pthread_mutex_lock(&cu->mu);
    psc_part *p = cu->sq_head;
    cu->sq_head = cu->sq_tail = NULL;
    *closing = cu->closing;
    *abandon = cu->abandon_ts;
    pthread_mutex_unlock(&cu->mu);
    return p;
}

/* Counts a completed request: the only writer is the I/O thread. */
static void count(psc_customer *cu, const psc_req *r, uint64_t now_ns)
{
    int k = psc_stat_kind(r->op);
    if (k < 0)
        return;
    psc_opstat *o = &cu->stats->op[k];
    psc_add(&o->requests, 1);
    if (r->status != PS_OK)
        psc_add(&o->errors, 1);
    psc_add(&o->payload_sent, r->payload_out);
    psc_add(&o->payload_received, r->status == PS_OK ? r->payload_in : 0);
    psc_hist_add(o->hist, now_ns > r->call_ns ? now_ns - r->call_ns : 0);
}

/* A push that failed on one node after another applied its part was
 * applied in part: the caller must know. So must one whose first failure
 * was a part never sent ("this part was not applied") while another part
 * was sent and not answered: that text alone read as nothing applied,
 * and a push made again was applied twice where the other had landed. */
static void note_partial(psc_req *r)
{
    if (r->status == PS_OK || !psw_op_has(r->op, PSW_OPF_PUSHES))
        return;
    int pushing = r->more_pushes;        /* parts cut again (io.c) */
    for (int i = 0; i < r->nparts; i++)
        pushing += psw_op_has(r->parts[i].msg.op, PSW_OPF_PUSHES);
    if (pushing && r->nok == pushing)
        /* A pushpull sent as pushes then pulls: one of its pulls failed. */
        append_error(r, " (every part of its push was applied: only the "
                        "pull of its rows failed)");
    else if (r->nok && r->nfail && r->maybe == r->nfail)
        /* Every part that failed may have landed too (no answer, or a
         * node that forgot whether it applied it): "in part" alone could
         * make a caller push the rest again where the whole had landed.
         * One that certainly did not land makes it "in part". */
        append_error(r, " (other parts of this push were applied, and "
                        "those that failed may have been: it was applied "
                        "in part, or whole)");
    else if (r->nok)
        append_error(r, " (other parts of this push were applied: it was "
                        "applied in part)");
    else if (r->nfail > 1) {
        /* Every part failed: the error names one node, and read alone it
         * could pass for the only part that did (a partition trial). */
        char more[160];
        if (!r->maybe)
            snprintf(more, sizeof more, " (all %d of its parts failed: none "
                     "was applied)", r->nfail);
        else if (r->maybe == r->nfail)
            snprintf(more, sizeof more, " (all %d of its parts failed, and "
                     "each may have been applied)", r->nfail);
        else
            snprintf(more, sizeof more, " (all %d of its parts failed; %d "
                     "of them may have been applied)", r->nfail, r->maybe);
        append_error(r, more);
    } else if (r->maybe && r->error &&
             !strstr(r->error, "may have been applied"))
        append_error(r, " (another part of this push may have been "
                        "applied: it may have been applied in part)");
}

uint64_t psc_customer_cb_held(const psc_customer *cu, uint64_t since_ns)
{
    uint64_t at = __atomic_load_n(&cu->cb_held_at, __ATOMIC_RELAXED);
    return at && at >= since_ns
               ? __atomic_load_n(&cu->cb_held_ns, __ATOMIC_RELAXED)
               : 0;
}

void psc_customer_complete(psc_customer *cu, psc_req *r)
{
    psc_customer_complete_at(cu, r, uv_hrtime());
}

void psc_customer_complete_at(psc_customer *cu, psc_req *r, uint64_t now_ns)
{
    note_partial(r);
    /* A nodes' sum holds its push: the worker pushed in that clock. */
    if (r->step && (r->nok || r->maybe) &&
        r->step > __atomic_load_n(&cu->pushed_step, __ATOMIC_RELAXED))
        __atomic_store_n(&cu->pushed_step, r->step, __ATOMIC_RELAXED);
    /* Callback first, so that when ps_wait returns the callback has run. */
    if (r->cb) {
        /* Timed from now_ns (the reply's read, or just now): one clock
         * read per callback, not two; what the I/O thread did between
         * counts too, and a hold is 100 ms or more. */
        r->cb(r->ts, r->status, r->arg);
        uint64_t t1 = uv_hrtime();
        if (t1 > now_ns && t1 - now_ns >= PSC_CB_HELD_NS) {
            __atomic_store_n(&cu->cb_held_ns, t1 - now_ns, __ATOMIC_RELAXED);
            __atomic_store_n(&cu->cb_held_at, t1, __ATOMIC_RELAXED);
        }
    }
    count(cu, r, now_ns);
    pthread_mutex_lock(&cu->mu);
    psw_map_del(&cu->reqs, (uint64_t)r->ts);
    /* Requests complete out of order. The mark is the oldest incomplete
     * one, so only its completion moves it: past every complete one, one
     * map lookup a step (amortized O(1) per request). */
    if (r->ts == cu->low) {
        ps_ts low = cu->low + 1;
        while (low <= cu->last_ts && !psw_map_get(&cu->reqs, (uint64_t)low))
            low++;
        __atomic_store_n(&cu->low, low, __ATOMIC_RELAXED);
    }
    cu->inflight_bytes -= r->bytes;
    if (r->status != PS_OK) {
        const char *why = r->error ? r->error : "";
        if (!cu->fails)
            cu->fails = calloc(PSC_FAIL_RING, sizeof *cu->fails);
        if (cu->fails) {
            psc_failure *f = &cu->fails[cu->nfails++ % PSC_FAIL_RING];
            if (f->ts > cu->fails_forgotten)
                cu->fails_forgotten = f->ts;  /* overwritten: forgotten */
            f->ts = r->ts;
            f->status = r->status;
            /* Most texts are short: each takes what it needs, not
             * PSC_TEXT_MAX times the ring. */
            char text[PSC_TEXT_MAX];
            fit_text(text, sizeof text, why);
            free(f->text);
            f->text = strdup(text);
        } else if (r->ts > cu->fails_forgotten) {
            /* Not recorded, so forgotten: ps_wait must not take it for a
             * success. */
            cu->fails_forgotten = r->ts;
        }
        if (cu->first_error == PS_OK) {
            /* Named once: the I/O thread's texts may name it already. */
            char *t = cu->first_error_text;
            int l = snprintf(t, sizeof cu->first_error_text,
                             "request %lld: ", (long long)r->ts);
            cu->first_error = r->status;
            /* The text names it ("request 2: ..." or "request 2 (no
             * attempts left): ..."): written over. */
            size_t k = (size_t)l - 2;
            if (!strncmp(why, t, k) && (why[k] == ':' || why[k] == ' '))
                l = 0;
            fit_text(t + l, sizeof cu->first_error_text - (size_t)l, why);
        }
    }
    /* Woken after mu is let go: a waiter on this CPU that ran at once
     * would find mu held, sleep on it and cost two more switches. */
    pthread_cond_t *wake = NULL;
    for (psc_waiter *w = cu->waiters; w && !wake; w = w->next)
        if (w->ts == r->ts)
            wake = &cu->wait_cv[r->ts % PSC_WAIT_CVS];
    int all = cu->cv_waiters > 0;
    pthread_mutex_unlock(&cu->mu);
    if (wake)
        pthread_cond_broadcast(wake);
    if (all)
        pthread_cond_broadcast(&cu->cv);
    psc_req_free(r);
}

int psc_customer_wait(psc_customer *cu, ps_ts ts, int timeout_ms, char *err,
                      size_t errlen)
{
    pthread_mutex_lock(&cu->mu);
    if (ts <= 0 || ts > cu->last_ts) {
        pthread_mutex_unlock(&cu->mu);
        snprintf(err, errlen, "request %lld was never issued", (long long)ts);
        return PS_EINVAL;
    }
    if (psw_map_get(&cu->reqs, (uint64_t)ts)) {
        if (timeout_ms == 0) {
            pthread_mutex_unlock(&cu->mu);
            return PS_PENDING;
        }
        struct timespec end;
        if (timeout_ms > 0)
            end = deadline_after(timeout_ms);
        psc_waiter w = { cu->waiters, ts };
        cu->waiters = &w;
        __atomic_add_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
        int late = 0;
        while (psw_map_get(&cu->reqs, (uint64_t)ts) && !late)
            late = cond_wait_until(&cu->wait_cv[ts % PSC_WAIT_CVS], &cu->mu,
                                   timeout_ms > 0 ? &end : NULL);
        __atomic_sub_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
        psc_waiter **pp = &cu->waiters;
        while (*pp != &w)
            pp = &(*pp)->next;
        *pp = w.next;
        if (psw_map_get(&cu->reqs, (uint64_t)ts)) {
            pthread_mutex_unlock(&cu->mu);
            return PS_PENDING;
        }
    }
    int st = PS_OK;
    if (cu->nfails || cu->fails_forgotten) {
        uint64_t n = cu->nfails < PSC_FAIL_RING ? cu->nfails : PSC_FAIL_RING;
        for (uint64_t i = 0; cu->fails && i < n; i++) {
            const psc_failure *f =
                &cu->fails[(cu->nfails - 1 - i) % PSC_FAIL_RING];
            if (f->ts == ts) {
                st = f->status;
                snprintf(err, errlen, "%s", f->text ? f->text
                         : "its reason was lost: memory ran out");
                break;
            }
        }
        if (st == PS_OK && ts <= cu->fails_forgotten) {
            st = PS_EINVAL;
            snprintf(err, errlen, "the status of request %lld is no longer "
                     "known: more than %d requests failed after it, or "
                     "memory ran out recording a failure (use callbacks or "
                     "ps_wait_all)", (long long)ts, PSC_FAIL_RING);
        }
    }
    pthread_mutex_unlock(&cu->mu);
    return st;
}

/* Blocks on cv while more() holds for cu (and upto), until end when
 * end is not NULL. Returns 0, or 1 when it gave up at end. */
static int wait_cv(psc_customer *cu, int (*more)(const psc_customer *, ps_ts),
                   ps_ts upto, const struct timespec *end)
{
    int late = 0;
    cu->cv_waiters++;
    __atomic_add_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
    while (more(cu, upto) && !late)
        late = cond_wait_until(&cu->cv, &cu->mu, end);
    __atomic_sub_fetch(&cu->sleepers, 1, __ATOMIC_RELAXED);
    cu->cv_waiters--;
    return late && more(cu, upto);
}

/* A request issued up to upto is incomplete: low is the oldest one. */
static int older_in_flight(const psc_customer *cu, ps_ts upto)
{
    return cu->low <= upto;
}

static int any_in_flight(const psc_customer *cu, ps_ts upto)
{
    (void)upto;
    return cu->reqs.n > 0;
}

int psc_customer_wait_all(psc_customer *cu, int timeout_ms, char *err,
                          size_t errlen)
{
    pthread_mutex_lock(&cu->mu);
    /* Only the requests issued so far: waiting for none in flight at all
     * would never end while another thread keeps one in flight. */
    struct timespec end;
    if (timeout_ms > 0)
        end = deadline_after(timeout_ms);
    if (timeout_ms == 0 ? older_in_flight(cu, cu->last_ts)
                        : wait_cv(cu, older_in_flight, cu->last_ts,
                                  timeout_ms > 0 ? &end : NULL)) {
        pthread_mutex_unlock(&cu->mu);
        return PS_PENDING;       /* the first error stays for the next call */
    }
    int st = cu->first_error;
    if (st != PS_OK)
        snprintf(err, errlen, "%s", cu->first_error_text);
    cu->first_error = PS_OK;
    pthread_mutex_unlock(&cu->mu);
    return st;
}

void psc_customer_drain(psc_customer *cu)
{
    pthread_mutex_lock(&cu->mu);
    wait_cv(cu, any_in_flight, 0, NULL);
    pthread_mutex_unlock(&cu->mu);
}

void psc_customer_abandon(psc_customer *cu, int later)
{
    pthread_mutex_lock(&cu->mu);
    cu->abandon_ts = later ? INT64_MAX : cu->last_ts;
    pthread_mutex_unlock(&cu->mu);
    if (cu->wake)
        cu->wake(cu->wake_arg);
}

void psc_customer_close(psc_customer *cu)
{
    pthread_mutex_lock(&cu->mu);
    cu->closing = 1;
    pthread_cond_broadcast(&cu->cv);
    pthread_mutex_unlock(&cu->mu);
}

/* ---- settling parts -------------------------------------------------- */

static int settle(psc_part *p, int status, const char *why, size_t whylen)
{
    psc_req *r = p->req;
    /* The pull parts of a pushpull sent as pushes then pulls apply
     * nothing: what they answer says nothing of the push. */
    if (psw_op_has(p->msg.op, PSW_OPF_PUSHES)) {
        if (status == PS_OK)
            r->nok++;
        else
            r->nfail++;
    }
    if (status != PS_OK && r->status == PS_OK) {
        r->status = status;
        free(r->error);
        r->error = malloc(whylen + 1);
        if (r->error) {
            memcpy(r->error, why, whylen);
            r->error[whylen] = '\0';
            psw_text_clean(r->error, whylen, 0);   /* a node's text, maybe */
        }
    }
    if (p->first && --r->first_pending == 0 && r->held)
        release_held(r);
    return --r->pending == 0;
}

int psc_part_fail(psc_part *p, int status, const char *why)
{
    return settle(p, status, why, strlen(why));
}

int psc_part_reply(psc_part *p, const psw_msg *m, const char *node)
{
    if (m->status < PS_EFULL) {
        /* A code this client does not know (a newer psd): PS_EPROTO, so
         * that callers switching on PS_E* codes meet no stranger, with
         * the code and the node's reason in the text. */
        char why[600];
        int l = snprintf(why, sizeof why, "node %d answered status %d, "
                         "which this client does not know: %.*s", p->node,
                         (int)m->status,
                         m->text ? (int)(m->text_len < 400 ? m->text_len
                                                           : 400)
                                 : 0,
                         m->text ? m->text : "");
        return settle(p, PS_EPROTO, why, (size_t)l);
    }
    if (m->status != PSW_OK && (!m->text || m->text_len == 0)) {
        /* A node that gave no reason: ps_last_error still says what. */
        char why[128];
        int l = snprintf(why, sizeof why, "node %d answered \"%s\" without "
                         "a reason", p->node, psw_strerror(m->status));
        return settle(p, m->status, why, (size_t)l);
    }
    if (m->status != PSW_OK) {
        /* A node that forgot whether it applied a push (a tombstone of
         * its client, PROTOCOL.md check 10a) answers PS_ESERVER and says
         * so: that part may have been applied. */
        static const char forgot[] = PSW_FORGOT_TEXT;
        int push = psw_op_has(p->msg.op, PSW_OPF_PUSHES);
        const char *copy = "";
        if (push && m->status == PSW_ESERVER &&
            m->text_len >= sizeof forgot - 1 &&
            !memcmp(m->text, forgot, sizeof forgot - 1))
            p->req->maybe++;
        else if (push && p->sends > 1 && m->status != PSW_ENONFINITE) {
            /* This answers the copy last sent; an earlier one may have
             * been applied by the node after this refusal (a trial: a
             * refusal at the limits read as "not applied", and the rows
             * were there). A NaN's refusal is the part's own: every copy
             * gets it. */
            p->req->maybe++;
            copy = " (an earlier copy of this part was sent too, and may "
                   "have been applied)";
        }
        /* Of several nodes, a refusal says which ("this node" named
         * none). */
        char why[PSW_TEXT_MAX + 420], who[300] = "";
        if (node)
            snprintf(who, sizeof who, "node %d (%s): ", p->node, node);
        int l = snprintf(why, sizeof why, "%s%.*s%s", who,
                         (int)(m->text_len < PSW_TEXT_MAX ? m->text_len
                                                          : PSW_TEXT_MAX),
                         m->text, copy);
        return settle(p, m->status, why,
                      l < (int)sizeof why ? (size_t)l : sizeof why - 1);
    }
    if (!p->out || p->direct)      /* direct: the rows are in out */
        return settle(p, PS_OK, NULL, 0);
    size_t rowb = (size_t)p->req->dim * sizeof(float);
    size_t rows = p->msg.op == PSW_OP_PULL_RANGE ? (size_t)p->msg.count
                                                 : p->msg.nkeys;
    if (m->vals_len != rows * rowb) {
        char why[128];
        int l = snprintf(why, sizeof why, "server sent %zu bytes of rows, "
                         "expected %zu", m->vals_len, rows * rowb);
        return settle(p, PS_EPROTO, why, (size_t)l);
    }
    if (!p->pos)
        memcpy(p->out, m->vals, m->vals_len);
    else
        for (size_t i = 0; i < rows; i++)
            memcpy(p->out + (size_t)p->pos[i] * p->req->dim,
                   m->vals + i * rowb, rowb);
    return settle(p, PS_OK, NULL, 0);
}
