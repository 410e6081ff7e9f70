/* Worker membership, clocks and barriers of one node; see sync.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sync.h"
#include "../proto/status.h"

#define TICK_MS 100
#define WAIT_LOG_MS 10000        /* how often to say who is waited for */

static uint64_t now_ms(const psd_server *s)
{
    return uv_now(s->loop);
}

static int waited_for(const psd_worker *w)
{
    return w->state != W_LEFT;
}

/* The smallest clock (or barrier count) among workers still waited for;
 * when nobody is, the largest seen, so nothing waits on an empty set. */
static uint64_t slowest(const psd_server *s, int barrier)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < s->nworkers; i++) {
        const psd_worker *w = &s->workers[i];
        uint64_t v = barrier ? w->barrier : w->clock;
        if (v > hi)
            hi = v;
        if (waited_for(w) && v < lo)
            lo = v;
    }
    return lo == UINT64_MAX ? hi : lo;
}

static int waiters_of_kind(int op, int kind)
{
    int pull = op == PSW_OP_PULL || op == PSW_OP_PULL_RANGE;
    return kind == PSW_OP_CLOCK ? op == PSW_OP_CLOCK || pull : op == kind;
}

/* Answers every held request whose condition now holds. */
static void release(psd_server *s, int kind, uint64_t reached)
{
    psd_waiter **pp = &s->waiters;
    while (*pp) {
        psd_waiter *w = *pp;
        if (waiters_of_kind(w->msg.op, kind) && w->need <= reached) {
            *pp = w->next;
            psd_conn_release(w->conn, &w->msg, PSW_OK, NULL);
            free(w->keys);
            free(w);
        } else
            pp = &w->next;
    }
}

/* Moves the node's clock to the slowest waited-for worker's, applying
 * each finished clock's summed pushes to the bsp tables once. */
static void advance(psd_server *s)
{
    uint64_t target = slowest(s, 0);
    if (target > s->global) {
        for (int i = 0; i < s->ntables; i++) {
            const psd_table_conf *tc = psd_table_conf_get(s->tables[i]);
            if (tc->consistency != PSD_CONS_BSP)
                continue;
            int n = 0;
            for (int k = 0; k < s->nworkers; k++)
                n += waited_for(&s->workers[k]);
            float scale = tc->aggregate_mean && n > 0 ? 1.0f / (float)n : 1.0f;
            if (psd_table_apply_accumulated(s->tables[i], scale))
                psd_error("table '%s': out of memory applying clock %llu",
                          tc->name, (unsigned long long)s->global);
        }
        psd_debug("clock %llu -> %llu", (unsigned long long)s->global,
                  (unsigned long long)target);
        s->global = target;
        s->moved_ms = now_ms(s);
    }
    release(s, PSW_OP_CLOCK, s->global);
    uint64_t b = slowest(s, 1);
    if (b > s->barrier)
        s->barrier = b;
    release(s, PSW_OP_BARRIER, s->barrier);
}

static void on_tick(uv_timer_t *t)
{
    psd_server *s = t->data;
    uint64_t now = now_ms(s), grace = (uint64_t)s->cfg.worker_grace * 1000;
    int changed = 0;
    for (int i = 0; i < s->nworkers; i++) {
        psd_worker *w = &s->workers[i];
        if (w->state == W_GONE && now - w->gone_ms >= grace) {
            w->state = W_LEFT;
            changed = 1;
            psd_warn("worker %d did not come back within %d s: no longer "
                     "waited for", i, s->cfg.worker_grace);
        }
    }
    if (changed)
        advance(s);
    /* A held request with nobody moving: say whom we wait for, so a job
     * never hangs silently. */
    if (s->waiters && now - s->moved_ms >= WAIT_LOG_MS) {
        char who[256] = "";
        size_t at = 0;
        for (int i = 0; i < s->nworkers && at < sizeof who - 48; i++) {
            const psd_worker *w = &s->workers[i];
            if (!waited_for(w) || w->clock > s->global)
                continue;
            at += (size_t)snprintf(who + at, sizeof who - at, "%s%d (%s)",
                                   at ? ", " : "", i,
                                   w->state == W_ABSENT ? "never connected"
                                   : w->state == W_GONE ? "connection lost"
                                                        : "at this clock");
        }
        psd_warn("clock %llu: waiting %llu s for workers %s",
                 (unsigned long long)s->global,
                 (unsigned long long)(now - s->moved_ms) / 1000, who);
        s->moved_ms = now;
    }
}

int psd_sync_init(psd_server *s)
{
    s->nworkers = s->cfg.workers;
    s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
    if (!s->workers)
        return -1;
    uv_timer_init(s->loop, &s->sync_timer);
    s->sync_timer.data = s;
    uv_timer_start(&s->sync_timer, on_tick, TICK_MS, TICK_MS);
    s->moved_ms = now_ms(s);
    return 0;
}

void psd_sync_stop(psd_server *s)
{
    if (s->workers)
        uv_close((uv_handle_t *)&s->sync_timer, NULL);
}

void psd_sync_destroy(psd_server *s)
{
    while (s->waiters) {
        psd_waiter *w = s->waiters;
        s->waiters = w->next;
        free(w->keys);
        free(w);
    }
    free(s->workers);
    s->workers = NULL;
}

int psd_sync_join(psd_server *s, psd_conn *c, int32_t worker,
                  uint64_t client_id, char *err, size_t errlen)
{
    if (worker >= s->nworkers) {
        snprintf(err, errlen, "worker %d is out of range: the cluster has "
                 "workers = %d (ids 0..%d)", (int)worker, s->nworkers,
                 s->nworkers - 1);
        return PSW_EINVAL;
    }
    psd_worker *w = &s->workers[worker];
    if (w->state == W_LIVE && w->client_id != client_id) {
        snprintf(err, errlen, "worker %d is already connected from %s",
                 (int)worker, psd_conn_peer(w->conn));
        return PSW_EINVAL;
    }
    if (w->state == W_LIVE)              /* the same client reconnected */
        psd_conn_set_worker(w->conn, -1);
    if (w->state == W_LEFT) {
        /* Rejoining: it starts at the node's clock, not at its old one. */
        w->clock = s->global;
        w->barrier = s->barrier;
    }
    if (w->state != W_ABSENT && w->state != W_LIVE)
        psd_info("worker %d %s", (int)worker,
                 w->state == W_GONE ? "is back" : "rejoined");
    w->state = W_LIVE;
    w->conn = c;
    w->client_id = client_id;
    psd_conn_set_worker(c, worker);
    return 0;
}

void psd_sync_conn_closed(psd_server *s, psd_conn *c)
{
    psd_waiter **pp = &s->waiters;
    while (*pp) {
        psd_waiter *w = *pp;
        if (w->conn == c) {
            *pp = w->next;
            free(w->keys);
            free(w);
        } else
            pp = &w->next;
    }
    int32_t id = psd_conn_worker(c);
    if (id < 0 || s->workers[id].conn != c)
        return;
    psd_worker *w = &s->workers[id];
    w->conn = NULL;
    w->state = W_GONE;
    w->gone_ms = now_ms(s);
    psd_warn("worker %d lost its connection; waiting up to %d s for it",
             (int)id, s->cfg.worker_grace);
    if (s->cfg.worker_grace == 0) {
        w->state = W_LEFT;
        advance(s);
    }
}

static int has_bsp(const psd_server *s)
{
    for (int i = 0; i < s->ntables; i++)
        if (psd_table_conf_get(s->tables[i])->consistency == PSD_CONS_BSP)
            return 1;
    return 0;
}

static int hold(psd_server *s, psd_conn *c, const psw_msg *m, uint64_t need)
{
    psd_waiter *w = calloc(1, sizeof *w);
    if (!w)
        return PSW_ENOMEM;
    w->conn = c;
    w->need = need;
    w->msg = *m;
    w->msg.vals = NULL;              /* pushes were applied already */
    w->msg.vals_len = 0;
    if (m->op == PSW_OP_PUSHPULL)
        w->msg.op = PSW_OP_PULL;
    if (m->nkeys) {
        w->keys = malloc(m->nkeys * 8);
        if (!w->keys) {
            free(w);
            return PSW_ENOMEM;
        }
        memcpy(w->keys, m->keys, m->nkeys * 8);
        w->msg.keys = w->keys;
    }
    /* Appended at the end, so held replies go out in arrival order. */
    psd_waiter **pp = &s->waiters;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
    return 0;
}

void psd_sync_message(psd_server *s, psd_conn *c, const psw_msg *m)
{
    int32_t id = psd_conn_worker(c);
    if (m->op == PSW_OP_LEAVE) {
        if (id >= 0) {
            s->workers[id].state = W_LEFT;
            s->workers[id].conn = NULL;
            psd_conn_set_worker(c, -1);
            psd_info("worker %d left", (int)id);
            advance(s);
        }
        psd_conn_release(c, m, PSW_OK, NULL);
        return;
    }
    if (id < 0) {
        psd_conn_release(c, m, PSW_EINVAL, m->op == PSW_OP_CLOCK
                         ? "ps_clock from a client that is not a worker "
                           "(ps_options.worker = -1)"
                         : "ps_barrier from a client that is not a worker "
                           "(ps_options.worker = -1)");
        return;
    }
    /* The message names the clock (or barrier) the worker reaches, not
     * a step: a ps_clock repeated after a lost connection counts once,
     * and a node that missed one catches up instead of lagging forever. */
    psd_worker *w = &s->workers[id];
    uint64_t *mine = m->op == PSW_OP_CLOCK ? &w->clock : &w->barrier;
    uint64_t need = m->first;
    if (need == 0 || need > *mine + 1000000) {
        psd_conn_release(c, m, PSW_EINVAL, "clock or barrier number out of "
                         "range");
        return;
    }
    if (need > *mine)
        *mine = need;
    advance(s);
    uint64_t reached = m->op == PSW_OP_CLOCK ? s->global : s->barrier;
    /* Only bsp tables make ps_clock wait; ssp tables hold pulls instead. */
    if (need <= reached || (m->op == PSW_OP_CLOCK && !has_bsp(s)))
        psd_conn_release(c, m, PSW_OK, NULL);
    else if (hold(s, c, m, need))
        psd_conn_release(c, m, PSW_ENOMEM, "out of memory");
}

void psd_sync_position(const psd_server *s, int32_t worker, uint64_t *clock,
                       uint64_t *barrier)
{
    *clock = *barrier = 0;
    if (worker >= 0 && worker < s->nworkers) {
        *clock = s->workers[worker].clock;
        *barrier = s->workers[worker].barrier;
    }
}

int psd_sync_pull_ready(const psd_server *s, const psd_conn *c,
                        const psd_table_conf *tc)
{
    int32_t id = psd_conn_worker(c);
    if (tc->consistency != PSD_CONS_SSP || id < 0)
        return 1;                    /* readers never wait */
    uint64_t mine = s->workers[id].clock;
    return mine <= (uint64_t)tc->staleness ||
           s->global >= mine - (uint64_t)tc->staleness;
}

int psd_sync_hold(psd_server *s, psd_conn *c, const psw_msg *m)
{
    const psd_table_conf *tc = psd_table_conf_get(s->tables[m->table]);
    uint64_t mine = s->workers[psd_conn_worker(c)].clock;
    return hold(s, c, m, mine - (uint64_t)tc->staleness);
}
