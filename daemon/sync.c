/* Worker membership, clocks and barriers of one node; see sync.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sync.h"
#include "../proto/status.h"

/* A worker may name a clock at most this far ahead of its last one: more
 * is a client bug, and would hold its own requests for ever. Not checked
 * while the node has 0 for the worker (a fresh node, or one that lost its
 * state: started empty, --skip-snapshot), which cannot tell the two apart:
 * one that lost its state learns each worker's count from its next CLOCK,
 * however long the job has run (refused, every ps_clock of a job past that
 * many clocks failed on it for good). A wrong first value then holds only
 * that worker's own requests (the others wait for the slowest), and the
 * jump is logged. MAX_CLOCK bounds every value, so that no count, nor a
 * count plus one, can wrap; a first value, on a node with no count, is
 * at most half of it (as psd_sync_end's), so that what a hostile client
 * gives leaves 2^61 more clocks. */
#define MAX_JUMP 1000000
#define MAX_CLOCK (UINT64_C(1) << 62)

static int waited_for(const psd_worker *w)
{
    return w->state != PSD_W_LEFT;
}

int psd_sync_init(psd_sync *y, int nworkers, uint64_t now_ms)
{
    memset(y, 0, sizeof *y);
    size_t n = nworkers > 0 ? (size_t)nworkers : 1;
    y->workers = calloc(n, sizeof *y->workers);
    y->prior = calloc(n, sizeof *y->prior);
    if (!y->workers || !y->prior) {
        free(y->workers);
        free(y->prior);
        memset(y, 0, sizeof *y);
        return -1;
    }
    y->nworkers = nworkers;
    y->wait[0] = y->wait[1] = (psd_wait){ now_ms, now_ms };
    y->now_ms = now_ms;
    return 0;
}

void psd_sync_destroy(psd_sync *y)
{
    free(y->workers);
    free(y->prior);
    memset(y, 0, sizeof *y);
}

/* After a LEAVE: when every worker has left by its own LEAVE (ps_close,
 * not a grace that ran out), all at one clock and one barrier count, the
 * job ran its course: every worker becomes absent again, so the next job
 * waits for all `workers` to join, as on a fresh node. Without this a
 * second job's first worker trained alone until the others came, and
 * ended clocks ahead of them (its last ps_barrier facing their ps_clock).
 * Workers that left at different counts (one ran out of data early, or
 * closed to reopen later), or one lost for good, leave a job that is not
 * known to be over: a worker joining goes on in it, as before, never
 * waiting for one that finished. Their clocks are kept; each starts at
 * the node's clock when it joins. Run live and in a replay (WORKER
 * records say which leaves were LEAVEs), so both end the same. 1 when
 * the job ended. */
static int job_over(psd_sync *y)
{
    for (int i = 0; i < y->nworkers; i++) {
        const psd_worker *w = &y->workers[i];
        if (w->state != PSD_W_LEFT || !w->closed ||
            w->clock != y->workers[0].clock ||
            w->barrier != y->workers[0].barrier)
            return 0;
    }
    for (int i = 0; i < y->nworkers; i++) {
        y->workers[i].state = PSD_W_ABSENT;
        y->workers[i].closed = 0;
        y->workers[i].unknown = 0;   /* a new job: no stale process */
    }
    return 1;
}

/* The client that lost its connection holding w is refused from now on
 * (psd_sync_join): a new process took the worker over, or (ended) its
 * job was ended. The oldest such client is forgotten. */
static void refuse_lost(psd_worker *w, int ended)
{
    memmove(w->replaced, w->replaced + 1,
            (PSD_REPLACED - 1) * sizeof *w->replaced);
    w->replaced[PSD_REPLACED - 1] = w->lost_id;
    w->ended_mask = (w->ended_mask >> 1) |
                    (ended ? 1u << (PSD_REPLACED - 1) : 0);
}

/* The lost client of a worker restored from disk (snapshot or journal):
 * its own client when it was connected (`live`: the restart lost it), so
 * that a new process's join refuses that client for good, as after a
 * lost connection (unless whom the node had replaced is unknown: join),
 * and end-job lets it go; else the one saved (`saved`: lost before, kept
 * past the grace; 0 when none). A lost client other than the worker's
 * own is damage. */
static int restored_lost(psd_worker *w, int live, uint64_t saved)
{
    if (saved && saved != w->client_id)
        return -1;
    w->lost_id = live ? w->client_id : saved;
    return 0;
}

/* 1 when an ended mask read from a snapshot marks more than the
 * replaced clients there are (bits past PSD_REPLACED, or on an empty
 * entry); the journal's reader checks its records alike. */
static int refused_unsound(const uint64_t *replaced, unsigned ended_mask)
{
    if (ended_mask >> PSD_REPLACED)
        return 1;
    for (int k = 0; k < PSD_REPLACED; k++)
        if ((ended_mask & (1u << k)) && !replaced[k])
            return 1;
    return 0;
}

/* A worker's join, loss and leave lines: the first SAY_BURST of each
 * SAY_WINDOW_MS are logged, the rest counted and summed up in one line
 * after the window (by the tick, or the worker's next line). A worker
 * whose process opened and closed in a loop wrote 400 lines in 0.5 s.
 * Per worker, not one collapsed kind for all: every worker's first
 * losses are seen, however many others were lost at once. */
#define SAY_BURST 4
#define SAY_WINDOW_MS 10000

static void say_unsaid(psd_worker *w, int id, uint64_t now_ms)
{
    if (now_ms - w->said_ms < SAY_WINDOW_MS)
        return;
    /* A warning when losses are among them: at log_level = warn the
     * loss lines themselves are the ones seen. */
    if (w->unsaid)
        psd_log(w->unsaid_lost ? PSD_LOG_WARN : PSD_LOG_INFO,
                "worker %d: %u more joins, losses and leaves in %.0f s, "
                "not logged (%u of them losses; the last from %s)", id,
                w->unsaid, (double)(now_ms - w->said_ms) / 1000,
                w->unsaid_lost, w->peer);
    w->said_ms = now_ms;
    w->said = w->unsaid = w->unsaid_lost = 0;
}

/* Whether worker id's next line is logged (lost: a loss's). */
static int say(psd_sync *y, int id, int lost)
{
    psd_worker *w = &y->workers[id];
    say_unsaid(w, id, y->now_ms);
    if (w->said == 0)
        w->said_ms = y->now_ms;          /* the window starts with a line */
    if (w->said < SAY_BURST) {
        w->said++;
        return 1;
    }
    w->unsaid++;
    w->unsaid_lost += lost;
    return 0;
}

/* The lines of worker's join, from b, the worker before it, and node,
 * the node's clock then: "is back" (the same client after a lost
 * connection), "rejoined" (after it left), a new process taking over from
 * a lost one, and "starts at clock N, one past the node's" (a new process
 * after its predecessor's sums, as join() moves it). A pending join says
 * them once confirmed: an open that fails is not taken in, and its lines
 * read as a takeover that never happened (with advice to end the job),
 * repeated at every retry. */
static void say_join(psd_sync *y, int32_t worker, const psd_worker *b,
                     uint64_t node)
{
    const psd_worker *w = &y->workers[worker];
    int other = b->client_id != w->client_id;
    int anew = b->state == PSD_W_ABSENT || b->state == PSD_W_LEFT ||
               (b->state == PSD_W_GONE && other);
    uint64_t start = b->clock > node ? b->clock : node;
    /* Right when a process replaces one that died mid-step (so info, not
     * a warning); a new job's trainer, after a run that stopped half-way,
     * is one clock ahead of its peers, and the job waits for ever: the
     * line says what to do then. */
    if (anew && other && start < b->summed)
        psd_log_rep(PSD_LOG_INFO, "worker %d (from %s) starts at clock "
                    "%llu, one past the node's clock %llu: an earlier "
                    "process of it pushed in clock %llu and those pushes "
                    "stand. If this is a new job, run psctl end-job first",
                    (int)worker, w->peer, (unsigned long long)w->clock,
                    (unsigned long long)node, (unsigned long long)node);
    /* A worker of a new job, started without psctl end-job after a job
     * whose workers all left: nobody else is waited for, so it trains
     * alone, its clocks returning at once, until the others join (a
     * modes trial: 40 clocks of one worker, and not a word anywhere). */
    if (anew && node > 0 && y->nworkers > 1 &&
        (b->state == PSD_W_ABSENT || b->state == PSD_W_LEFT)) {
        int others = 0;          /* not waited for: LEFT, every one */
        for (int i = 0; i < y->nworkers; i++)
            others += i != worker && waited_for(&y->workers[i]);
        char them[48] = "job's other worker has";
        if (y->nworkers > 2)
            snprintf(them, sizeof them, "job's %d other workers have all",
                     y->nworkers - 1);
        if (!others && say(y, worker, 0))
            psd_warn("worker %d (from %s) joins at clock %llu, where the %s "
                     "left: nobody waits for them, so it trains alone until "
                     "they join. If this is a new job, run psctl end-job "
                     "first", (int)worker, w->peer, (unsigned long long)node,
                     them);
    }
    if (b->state == PSD_W_GONE && other) {
        if (say(y, worker, 0))
            psd_info("worker %d: a new process from %s takes over from the "
                     "one that lost its connection, at clock %llu (that "
                     "one's was %llu)", (int)worker, w->peer,
                     (unsigned long long)w->clock,
                     (unsigned long long)b->clock);
    } else if ((b->state == PSD_W_GONE || b->state == PSD_W_LEFT) &&
               say(y, worker, 0))
        psd_info("worker %d %s at clock %llu (from %s)", (int)worker,
                 b->state == PSD_W_GONE ? "is back" : "rejoined",
                 (unsigned long long)w->clock, w->peer);
}

static int join(psd_sync *y, int32_t worker, uint64_t client_id,
                const void *owner, const char *peer, int pending, char *err,
                size_t errlen)
{
    if (worker < 0 || worker >= y->nworkers) {
        snprintf(err, errlen, "worker %d is out of range: the cluster has "
                 "workers = %d (ids 0..%d)", (int)worker, y->nworkers,
                 y->nworkers - 1);
        return PSW_EINVAL;
    }
    psd_worker *w = &y->workers[worker];
    /* The lost client back while a new process's takeover is pending:
     * busy, not refused for good (below), since the takeover is undone
     * if that open fails, and this client then takes its worker back.
     * Lost: it lost its connection here (lost_id), or the node restarted
     * under it (loaded GONE with its client_id; psd_sync_load). */
    const psd_worker *p = &y->prior[worker];
    if (w->pending && w->client_id != client_id &&
        (p->lost_id == client_id ||
         (p->state == PSD_W_GONE && p->client_id == client_id))) {
        /* It lives: its grace counts from this try, so that the takeover
         * undone finds it still waited for. It counted from the loss, and
         * a second process's opens, failing one after another while this
         * client was refused, outlasted it: the worker was let go the
         * moment the last one failed, and the clock ended without it. */
        if (p->state == PSD_W_GONE)
            y->prior[worker].gone_ms = y->now_ms;
        snprintf(err, errlen, "worker %d is being taken over by a new "
                 "process (connected from %s) whose open has not "
                 "completed", (int)worker, w->peer);
        return PSW_EBUSY;
    }
    /* A client that lost its connection and was replaced by a new process
     * (within worker_grace or after it) is still running somewhere (a
     * partition healed): were it let back, two processes would train as
     * one worker. */
    for (int k = 0; k < PSD_REPLACED; k++)
        if (w->replaced[k] && w->replaced[k] == client_id) {
            if (w->ended_mask & (1u << k))
                snprintf(err, errlen, "this client lost its connection as "
                         "worker %d, and its job was ended since (psctl "
                         "end-job): this client no longer acts as worker %d; "
                         "a new job opens new clients", (int)worker,
                         (int)worker);
            else
                snprintf(err, errlen, "worker %d was taken over by a new "
                         "process%s%s%s while this client's connection was "
                         "lost: this client no longer acts as worker %d",
                         (int)worker, w->peer[0] ? " (connected from " : "",
                         w->peer, w->peer[0] ? ")" : "", (int)worker);
            return PSW_EINVAL;
        }
    /* Busy, not invalid: the connection held may be a dead process's
     * that this node has not yet seen close (its host vanished: up to
     * peer_timeout_ms). ps_open retries a busy refusal within
     * connect_timeout_ms, so a replacement started at once gets in when
     * the node lets the old one go, and a second live process claiming
     * the id still fails, with this reason, once that time is up. */
    if (w->state == PSD_W_LIVE && w->client_id != client_id) {
        snprintf(err, errlen, "worker %d is already connected from %s",
                 (int)worker, w->peer);
        return PSW_EBUSY;
    }
    /* Joining anew: a first join, a rejoin after it left, or a new process
     * for a lost worker (another client_id: the one that lost its
     * connection is not coming back; only the same client reconnecting
     * takes the worker over as it was, its retransmissions recognised as
     * such). It starts at the node's clock when it is behind it (the
     * clocks it missed went on without it). A first join finds the node
     * at 0 (the node waits for this worker) except after a journal replay
     * moved it (CLOCK records, the worker joined after the snapshot) or
     * when a snapshot had fewer workers; at 0, its first clocks would be
     * answered at once and its pushes summed into a later clock. A worker
     * ahead of the node (ssp does not hold clocks) keeps its own: its
     * client goes on counting from there, and its pulls must wait by that
     * clock. */
    int anew = w->state == PSD_W_ABSENT || w->state == PSD_W_LEFT ||
               (w->state == PSD_W_GONE && w->client_id != client_id);
    /* The worker as it was: what its lines are said from, and what a
     * pending join goes back to (psd_sync_join_pending), unless it was
     * LIVE (this client's connection taken over: pending still if it
     * was, keeping what the first HELLO found; confirmed if not). */
    psd_worker before = *w;
    if (pending && w->state != PSD_W_LIVE) {
        y->prior[worker] = before;
        w->pending = 1;
        w->join_node = y->clock;
    } else if (!pending && w->pending) {
        /* A version 3 HELLO of the same client confirms it: the first
         * HELLO's lines are said now. */
        w->pending = 0;
        say_join(y, worker, &y->prior[worker], w->join_node);
    }
    if (anew) {
        if (w->clock < y->clock)
            w->clock = y->clock;
        if (w->barrier < y->barrier)
            w->barrier = y->barrier;
        /* Pushes made for this worker id before (by its predecessor, or
         * by an earlier ps_open of it that left) in the clock still in
         * progress are in that clock's sums, and a new process cannot know
         * which arrived: it starts at the next clock, so that its pushes
         * do not join them in one sum (which would weigh this worker more
         * than the others in that clock's apply). Not the same client
         * back after its grace ran out: those pushes are its own, of the
         * iteration it is in, and its next ps_clock ends that iteration;
         * moved on a clock, it would skip one (its client takes this
         * clock as its count) and give the next clock's sum nothing. */
        if (w->clock < w->summed && w->client_id != client_id)
            w->clock = w->summed;
    }
    /* Not while whom the node had replaced is unknown (an upgrade from a
     * psd that did not save it, until the job ends): the lost client may
     * be the replacement of a stale process that is taking over now, and
     * refused for good it would lock the job out (a trial: upgraded
     * mid-job, the replacement back, then a restart or a lost
     * connection). end-job still lets it go. */
    if (w->lost_id && w->lost_id != client_id && !w->unknown)
        refuse_lost(w, 0);
    w->lost_id = 0;              /* replaced, or back itself */
    w->dirty |= w->state != PSD_W_LIVE || w->client_id != client_id;
    w->state = PSD_W_LIVE;
    w->closed = 0;
    w->owner = owner;
    w->client_id = client_id;
    snprintf(w->peer, sizeof w->peer, "%s", peer);
    if (!w->pending)
        say_join(y, worker, &before, y->clock);
    return 0;
}

int psd_sync_join(psd_sync *y, int32_t worker, uint64_t client_id,
                  const void *owner, const char *peer, char *err,
                  size_t errlen)
{
    return join(y, worker, client_id, owner, peer, 0, err, errlen);
}

int psd_sync_join_pending(psd_sync *y, int32_t worker, uint64_t client_id,
                          const void *owner, const char *peer, char *err,
                          size_t errlen)
{
    return join(y, worker, client_id, owner, peer, 1, err, errlen);
}

int psd_sync_confirm(psd_sync *y, int32_t worker, const void *owner)
{
    if (!psd_sync_holds(y, worker, owner) || !y->workers[worker].pending)
        return 0;
    y->workers[worker].pending = 0;
    say_join(y, worker, &y->prior[worker], y->workers[worker].join_node);
    return 1;
}

/* job_over, with the line that tells the operator the next job waits
 * for every worker (after a LEAVE, and after an undone pending join that
 * was the last one the job waited on). */
static void end_if_over(psd_sync *y, uint64_t clock)
{
    if (job_over(y) && y->nworkers > 1)
        psd_info("every worker left at clock %llu: the job is over, and the "
                 "next one starts when all %d workers have joined",
                 (unsigned long long)clock, y->nworkers);
}

/* A pending worker's connection was lost before its open completed: it
 * is put back as it was before its HELLO (psd_sync_join_pending), its
 * log lines' window excepted. */
static void unjoin(psd_sync *y, int32_t worker)
{
    psd_worker *w = &y->workers[worker], p = y->prior[worker];
    char peer[sizeof w->peer];
    memcpy(peer, w->peer, sizeof peer);
    p.said_ms = w->said_ms;
    p.said = w->said;
    p.unsaid = w->unsaid;
    p.unsaid_lost = w->unsaid_lost;
    p.pending = 0;
    *w = p;
    if (say(y, worker, 1))
        psd_info("worker %d (from %s) lost its connection before its open "
                 "completed (its client had not heard from every node): "
                 "not taken in, the worker is as it was before", (int)worker,
                 peer);
}

void psd_sync_serving(psd_sync *y, uint64_t now_ms)
{
    y->now_ms = now_ms;
    for (int i = 0; i < y->nworkers; i++)
        if (y->workers[i].state == PSD_W_GONE)
            y->workers[i].gone_ms = now_ms;
}

int psd_sync_holds(const psd_sync *y, int32_t worker, const void *owner)
{
    return worker >= 0 && worker < y->nworkers &&
           y->workers[worker].state == PSD_W_LIVE &&
           y->workers[worker].owner == owner;
}

void psd_sync_position(const psd_sync *y, int32_t worker, uint64_t *clock,
                       uint64_t *barrier)
{
    *clock = *barrier = 0;
    if (worker >= 0 && worker < y->nworkers) {
        *clock = y->workers[worker].clock;
        *barrier = y->workers[worker].barrier;
    }
}

int psd_sync_lost(psd_sync *y, int32_t worker, const void *owner,
                  uint64_t now_ms, int grace_s)
{
    if (!psd_sync_holds(y, worker, owner))
        return 0;
    psd_worker *w = &y->workers[worker];
    y->now_ms = now_ms;
    if (w->pending) {
        unjoin(y, worker);
        /* Back as left by its LEAVE, it may be the last worker of a job
         * that ran its course: the others' LEAVEs, while this one was
         * pending, could not end the job (a node the HELLO never reached
         * did, and this node's journal does in a replay). */
        if (w->state == PSD_W_LEFT && w->closed)
            end_if_over(y, w->clock);
        return 1;
    }
    w->owner = NULL;
    w->state = PSD_W_GONE;
    w->gone_ms = now_ms;
    w->lost_id = w->client_id;   /* kept past worker_grace: it may live */
    if (say(y, worker, 1))
        psd_warn("worker %d lost its connection (from %s); waiting up to %d "
                 "s for it", (int)worker, w->peer, grace_s);
    if (grace_s > 0)
        return 0;
    w->state = PSD_W_LEFT;
    w->closed = 0;
    w->dirty = 1;
    return 1;
}

int psd_sync_leave(psd_sync *y, int32_t worker, const void *owner)
{
    if (!psd_sync_holds(y, worker, owner))
        return 0;
    psd_worker *w = &y->workers[worker];
    w->state = PSD_W_LEFT;
    w->owner = NULL;
    w->dirty = 1;
    w->closed = 1;
    if (say(y, worker, 0))
        psd_info("worker %d left (from %s)", (int)worker, w->peer);
    end_if_over(y, w->clock);
    return 1;
}

int psd_sync_end(psd_sync *y, uint64_t clock, uint64_t barrier,
                 psd_sync_ended *e, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    /* The counts given are another node's (psctl lines the nodes up), so
     * near this node's own, unless it has none (it lost its state): a
     * count far beyond, from any token holder, would be kept for good and
     * copied to every node by the next end-job. Half of MAX_CLOCK leaves
     * a job that starts at 0 on a node that took one the room to go on. */
    uint64_t c = y->clock, b = y->barrier;   /* the node's largest */
    for (int i = 0; i < y->nworkers; i++) {
        if (y->workers[i].clock > c)
            c = y->workers[i].clock;
        if (y->workers[i].barrier > b)
            b = y->workers[i].barrier;
    }
    uint64_t own = c > b ? c : b, given = clock > barrier ? clock : barrier;
    if (given > MAX_CLOCK / 2 || (own && given > own + MAX_JUMP)) {
        snprintf(err, errlen, "clock or barrier count %llu is out of range: "
                 "this node's largest is %llu", (unsigned long long)given,
                 (unsigned long long)own);
        return PSW_EINVAL;
    }
    /* A connected worker is training: ending its job under it would move
     * its counts and let a second job's workers in beside it. */
    for (int i = 0; i < y->nworkers; i++) {
        const psd_worker *w = &y->workers[i];
        if (w->state == PSD_W_LIVE) {
            snprintf(err, errlen, "worker %d is connected (from %s, at "
                     "clock %llu%s): end-job ends a job whose workers have "
                     "all stopped; let it finish (ps_close) or stop its "
                     "process first", i, w->peer,
                     (unsigned long long)w->clock,
                     w->pending ? ", its open not yet completed" : "");
            return PSW_EBUSY;
        }
    }
    if (clock > c)
        c = clock;
    if (barrier > b)
        b = barrier;
    for (int i = 0; i < y->nworkers; i++) {
        const psd_worker *w = &y->workers[i];
        /* Pushed into the sums of the clock in progress (summed is at
         * most the node's clock + 1): acknowledged gradients, applied as
         * that clock's end would have, not dropped nor left to join the
         * next job's first sum. */
        if (w->summed > y->clock)
            e->pending = 1;
        if (w->state != PSD_W_ABSENT)
            e->in_progress = 1;
    }
    if (e->pending && c == y->clock)
        c = y->clock + 1;
    e->in_progress |= e->pending;
    e->from = y->clock;
    /* No worker is waited for any more: the sum of the clock in progress
     * is divided by those whose pushes it holds, as it would be once the
     * lost ones' grace ran out (not by a lost worker that pushed
     * nothing). */
    for (int i = 0; i < y->nworkers; i++)
        e->divisor += y->workers[i].summed > y->clock;
    e->moved = c > y->clock;
    e->clock = c;
    e->barrier = b;
    /* A second end-job, or one on a node with no job: every worker is
     * already absent at these counts (and journaled so, or marked to be).
     * Counted as a change, it made the next save write the whole model
     * again. */
    e->changed = e->in_progress || e->moved || b != y->barrier;
    for (int i = 0; i < y->nworkers; i++) {
        const psd_worker *w = &y->workers[i];
        if (w->lost_id || w->state != PSD_W_ABSENT || w->closed ||
            w->unknown || w->owner || w->clock != c || w->barrier != b)
            e->changed = 1;
    }
    for (int i = 0; i < y->nworkers && e->changed; i++) {
        psd_worker *w = &y->workers[i];
        /* A lost worker's process may still run (a partition): back, it
         * would join the next job as a worker of this one. */
        if (w->lost_id) {
            refuse_lost(w, 1);
            w->lost_id = 0;
            e->let_go++;
        }
        /* Every worker is journaled, even one absent at these counts
         * already: a replay ends the job only once each of them has a
         * LEAVE record (job_over), and one never joined has none. */
        w->dirty = 1;
        w->state = PSD_W_ABSENT;
        w->closed = 0;
        w->unknown = 0;              /* lost ones refused: a new job */
        w->owner = NULL;
        w->clock = c;
        w->barrier = b;
    }
    y->clock = c;
    y->barrier = b;
    return 0;
}

int psd_sync_reach(psd_sync *y, int32_t worker, int barrier, uint64_t value,
                   char *err, size_t errlen)
{
    psd_worker *w = &y->workers[worker];
    uint64_t *mine = barrier ? &w->barrier : &w->clock;
    /* From 0, bounded by the other workers' counts when some has one and
     * they stay close (barriers always; clocks with bsp or ssp tables, an
     * async job's workers may be any distance apart): a first value far
     * past all of them is a bug, not a lost state (a CLOCK of 2^62 to a
     * fresh node was taken, and every later one refused: the worker was
     * stuck for good, restarts included). */
    uint64_t base = *mine;
    for (int i = 0; !*mine && (barrier || y->synchronous) && i < y->nworkers;
         i++) {
        uint64_t v = barrier ? y->workers[i].barrier : y->workers[i].clock;
        if (v > base)
            base = v;
    }
    uint64_t most = base ? base + MAX_JUMP : MAX_CLOCK / 2;
    if (most > MAX_CLOCK)
        most = MAX_CLOCK;
    if (value == 0 || value > most) {
        snprintf(err, errlen, "%s %llu is out of range: %s%llu (%s)",
                 barrier ? "barrier" : "clock", (unsigned long long)value,
                 value == 0 ? "counts start at 1; at most " : "at most ",
                 (unsigned long long)most,
                 *mine ? "1000000 past this worker's count on this node"
                 : base ? "1000000 past the largest count of this node's "
                          "workers"
                        : "2^61, with no count of this worker on this node");
        return PSW_EINVAL;
    }
    /* The client counts one more each call, from the largest count the
     * nodes gave it: a node further behind missed calls, because it was
     * down when they were made, or because it came back from an older
     * snapshot (durability = snapshot and a crash), its rows then missing
     * those iterations' pushes. It catches up and the job goes on; the
     * operator should know. A skip of one is not said: nodes may differ
     * by one without missing anything (a new process for a lost worker
     * starts after that worker's sums, and only nodes that got its last
     * pushes have those; a join while the nodes' clocks move). */
    if (value > *mine + 2)
        psd_warn_rep("worker %d's %s %llu skips %llu past this node's count "
                 "for it (%llu): this node missed those calls (it was "
                 "unreachable, or restarted from an older snapshot: its rows "
                 "lack their pushes)", (int)worker,
                 barrier ? "barrier" : "clock", (unsigned long long)value,
                 (unsigned long long)(value - *mine - 1),
                 (unsigned long long)*mine);
    if (value > *mine)
        *mine = value;
    return 0;
}

/* The smallest clock (or barrier count) among workers still waited for;
 * when nobody is, the largest seen, so nothing waits on an empty set. */
static uint64_t slowest_of(const psd_sync *y, int barrier, int as_before,
                           int *pending)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < y->nworkers; i++) {
        const psd_worker *w = &y->workers[i];
        *pending |= w->pending;
        if (as_before && w->pending)
            w = &y->prior[i];
        uint64_t v = barrier ? w->barrier : w->clock;
        if (v > hi)
            hi = v;
        if (waited_for(w) && v < lo)
            lo = v;
    }
    return lo == UINT64_MAX ? hi : lo;
}

/* The lower of the counts with pending workers as they are (connected:
 * they may hold the node) and as they were before their HELLO: a join
 * that may yet be undone never moves the node further than the node
 * would have gone without it (a new process starts past its
 * predecessor's sums: alone, it would end that clock). */
static uint64_t slowest(const psd_sync *y, int barrier)
{
    int pending = 0;
    uint64_t now = slowest_of(y, barrier, 0, &pending);
    if (!pending)
        return now;
    uint64_t before = slowest_of(y, barrier, 1, &pending);
    return before < now ? before : now;
}

/* The count worker i holds the node at: its own, or for a pending worker
 * the lower of its own and the one it had before its HELLO, when it was
 * waited for then (for the "waiting for" line). */
static uint64_t held_at(const psd_sync *y, int i, int barrier)
{
    const psd_worker *w = &y->workers[i], *p = &y->prior[i];
    uint64_t v = barrier ? w->barrier : w->clock;
    uint64_t pv = barrier ? p->barrier : p->clock;
    return w->pending && waited_for(p) && pv < v ? pv : v;
}

int psd_sync_advance(psd_sync *y, uint64_t now_ms)
{
    int moved = 0;
    y->now_ms = now_ms;
    uint64_t target = slowest(y, 0);
    if (target > y->clock) {
        psd_debug("clock %llu -> %llu", (unsigned long long)y->clock,
                  (unsigned long long)target);
        /* Nobody waited for, and not because the job ran its course: the
         * node moves to the largest clock a worker reached before it was
         * let go (cut off from this node for longer than worker_grace),
         * alone, while nodes that still have its workers wait; said, on
         * a node with bsp or ssp tables, as the clocks it ends hold only
         * the pushes that came. */
        int let_go = 0;
        for (int i = 0; i < y->nworkers; i++)
            let_go |= y->workers[i].state == PSD_W_LEFT &&
                      !y->workers[i].closed;
        if (let_go && y->synchronous && psd_sync_waited(y) == 0)
            psd_warn("clock %llu -> %llu with no worker waited for (each "
                     "left, or was let go after worker_grace): the sums of "
                     "those clocks hold only the pushes that came, and "
                     "nodes that still have the workers may wait for them",
                     (unsigned long long)y->clock,
                     (unsigned long long)target);
        y->clock = target;
        y->wait[0] = (psd_wait){ now_ms, now_ms };
        moved = 1;
    }
    uint64_t b = slowest(y, 1);
    if (b > y->barrier) {
        y->barrier = b;
        y->wait[1] = (psd_wait){ now_ms, now_ms };
    }
    return moved;
}

int psd_sync_waited(const psd_sync *y)
{
    int n = 0;
    for (int i = 0; i < y->nworkers; i++)
        n += waited_for(&y->workers[i]);
    return n;
}

int psd_sync_count(const psd_sync *y, int count[PSD_W_LEFT + 1])
{
    int opening = 0;
    memset(count, 0, (PSD_W_LEFT + 1) * sizeof *count);
    for (int i = 0; i < y->nworkers; i++) {
        count[y->workers[i].state]++;
        opening += y->workers[i].pending;
    }
    return opening;
}

void psd_sync_summed(psd_sync *y, int32_t worker)
{
    if (worker >= 0 && worker < y->nworkers)
        y->workers[worker].summed = y->clock + 1;
}

void psd_sync_summed_by(psd_sync *y, uint64_t client_id)
{
    for (int i = 0; i < y->nworkers; i++)
        if (y->workers[i].state != PSD_W_ABSENT &&
            y->workers[i].client_id == client_id)
            y->workers[i].summed = y->clock + 1;
}

int psd_sync_divisor(const psd_sync *y, uint64_t from)
{
    int n = 0;
    for (int i = 0; i < y->nworkers; i++) {
        /* A pending worker counts as it did before its HELLO. */
        const psd_worker *w = y->workers[i].pending ? &y->prior[i]
                                                    : &y->workers[i];
        n += waited_for(w) || w->summed > from;
    }
    return n;
}

int psd_sync_dirty(psd_sync *y, int from)
{
    for (int i = from < 0 ? 0 : from; i < y->nworkers; i++)
        if (y->workers[i].dirty && !y->workers[i].pending) {
            y->workers[i].dirty = 0;
            return i;
        }
    return -1;
}

int psd_sync_replay(psd_sync *y, int32_t worker, int joined, int closed,
                    uint64_t client_id, uint64_t clock, uint64_t barrier,
                    const uint64_t *replaced, unsigned ended_mask,
                    uint64_t lost_id, int unknown, uint64_t now_ms)
{
    if (worker < 0 || worker >= y->nworkers)
        return -1;
    psd_worker *w = &y->workers[worker];
    w->state = joined ? PSD_W_GONE : PSD_W_LEFT;
    w->closed = !joined && (closed > 0 || (closed < 0 && y->legacy_leaves));
    w->owner = NULL;
    w->gone_ms = now_ms;
    w->client_id = client_id;
    /* A record that does not carry them (an older psd's) leaves the
     * worker's replaced clients unknown: no lost client is refused for
     * good by a takeover (psd_sync_load, format 3), and its lost client
     * is derived as from such a snapshot. A join's record is of a worker
     * then connected (or lost since, by its client). */
    w->unknown = !replaced || unknown;
    if (replaced) {
        memcpy(w->replaced, replaced, sizeof w->replaced);
        w->ended_mask = ended_mask;
    }
    if (restored_lost(w, joined || (!replaced && !w->closed),
                      replaced ? lost_id : 0))
        w->lost_id = 0;
    if (clock > w->clock)
        w->clock = clock;
    if (barrier > w->barrier)
        w->barrier = barrier;
    /* The node's barrier too: a bsp replay does not advance (its CLOCK
     * records move the clock), and the workers now absent all stand at
     * this barrier, as the node did. */
    if (w->closed && job_over(y) && w->barrier > y->barrier)
        y->barrier = w->barrier;
    return 0;
}

int psd_sync_pull_ready(const psd_sync *y, int32_t worker, int staleness,
                        uint64_t *need)
{
    if (worker < 0 || worker >= y->nworkers)
        return 1;                    /* readers never wait */
    uint64_t mine = y->workers[worker].clock, s = (uint64_t)staleness;
    if (mine <= s || y->clock >= mine - s)
        return 1;
    *need = mine - s;
    return 0;
}

/* Logs whom the node waits for on its clock (barrier 0) or barrier, once
 * requests have waited on it wait_log_ms more; `holding`: which kinds of
 * request are held now (PSD_HOLD_*; none of this kind: the wait starts
 * over). */
static void report(psd_sync *y, int barrier, int holding, uint64_t now_ms,
                   uint64_t wait_log_ms)
{
    psd_wait *wt = &y->wait[barrier];
    /* A wait starts when a request is held, not at the last move: workers
     * that compute longer than wait_log_ms between clocks keep nobody
     * waiting until the first of them clocks. */
    if (!(holding & (barrier ? PSD_HOLD_BARRIER : PSD_HOLD_CLOCK))) {
        *wt = (psd_wait){ now_ms, now_ms };
        return;
    }
    if (now_ms - wt->logged_ms < wait_log_ms)
        return;
    /* A held request with nobody moving: say whom we wait for, so a job
     * never hangs silently. A barrier waits for those that have not
     * entered it, whatever their clocks. A worker held back on one side
     * may be waiting on the other: in a barrier that is not complete
     * (the clock waits for it), or at a later clock (the barrier does). */
    uint64_t reached = barrier ? y->barrier : y->clock;
    char who[256] = "";
    size_t at = 0;
    int listed = 0, crossed = 0;
    for (int i = 0; i < y->nworkers && at < sizeof who - 64; i++) {
        const psd_worker *w = &y->workers[i];
        if (!waited_for(w) || held_at(y, i, barrier) > reached)
            continue;
        char st[48];
        int across = w->state == PSD_W_LIVE &&
                     (barrier ? w->clock > y->clock : w->barrier > y->barrier);
        if (across)
            snprintf(st, sizeof st, "%s %llu", barrier ? "at clock"
                                                       : "in barrier",
                     (unsigned long long)(barrier ? w->clock : w->barrier));
        else
            snprintf(st, sizeof st, "%s",
                     w->state == PSD_W_ABSENT ? "not joined"
                     : w->state == PSD_W_GONE ? "connection lost"
                     : w->pending             ? "its open not completed"
                                              : "not in it yet");
        listed++;
        crossed += across;
        at += (size_t)snprintf(who + at, sizeof who - at, "%s%d (%s)",
                               at ? ", " : "", i, st);
    }
    /* Every one of them waits on the other side, where requests are held
     * too: each side waits for the other, and only the clients'
     * sync_timeout_ms ends it. */
    int stuck = listed && crossed == listed &&
                (holding & (barrier ? PSD_HOLD_CLOCK : PSD_HOLD_BARRIER));
    /* Named as the workers count it (psctl --json stats: a worker in
     * ps_barrier for the 4th time is "barrier": 4): the one waited for,
     * past the count every worker reached. The log named that count. */
    psd_warn("%s %llu: waiting %llu s for workers %s%s",
             barrier ? "barrier" : "clock", (unsigned long long)reached + 1,
             (unsigned long long)(now_ms - wt->since_ms) / 1000, who,
             stuck ? ": workers in ps_barrier and workers held at a clock "
                     "(in ps_clock, or in a pull of a bsp or ssp table that "
                     "waits for it) wait for each other (their calls do not "
                     "match: one worker ran more steps than another); "
                     "nothing moves until the clients' sync_timeout_ms" : "");
    wt->logged_ms = now_ms;
}

int psd_sync_tick(psd_sync *y, uint64_t now_ms, int grace_s, int holding,
                  uint64_t wait_log_ms)
{
    uint64_t grace = (uint64_t)grace_s * 1000;
    int changed = 0;
    y->now_ms = now_ms;
    for (int i = 0; i < y->nworkers; i++) {
        psd_worker *w = &y->workers[i];
        if (w->unsaid)
            say_unsaid(w, i, now_ms);
        if (w->state == PSD_W_GONE && now_ms - w->gone_ms >= grace) {
            w->state = PSD_W_LEFT;
            w->closed = 0;
            w->dirty = 1;
            changed = 1;
            psd_warn("worker %d did not come back within %d s: no longer "
                     "waited for", i, grace_s);
        }
    }
    report(y, 0, holding, now_ms, wait_log_ms);
    report(y, 1, holding, now_ms, wait_log_ms);
    return changed;
}

/* On the stream: u64 clock, u64 barrier, u32 workers, then per worker
 * u32 state, u64 clock, u64 barrier, u64 client_id, u64 summed (not in
 * snapshots of format 1), u8 closed (not in formats 1 and 2), then
 * PSD_REPLACED u64 replaced, u8 ended_mask, u64 lost_id and u8 unknown
 * (not in formats 1 to 3). */
int psd_sync_save(const psd_sync *y, psd_sink *out)
{
    uint32_t n = (uint32_t)y->nworkers;
    if (psd_put(out, &y->clock, 8) || psd_put(out, &y->barrier, 8) ||
        psd_put(out, &n, 4))
        return -1;
    for (int i = 0; i < y->nworkers; i++) {
        /* A pending worker as it was before its HELLO: a node restarted
         * from this snapshot has not taken it in. */
        const psd_worker *w = y->workers[i].pending ? &y->prior[i]
                                                    : &y->workers[i];
        uint32_t st = (uint32_t)w->state;
        if (psd_put(out, &st, 4) || psd_put(out, &w->clock, 8) ||
            psd_put(out, &w->barrier, 8) || psd_put(out, &w->client_id, 8) ||
            psd_put(out, &w->summed, 8))
            return -1;
        uint8_t closed = (uint8_t)(w->state == PSD_W_LEFT && w->closed);
        uint8_t ended = (uint8_t)w->ended_mask, unknown = (uint8_t)w->unknown;
        if (psd_put(out, &closed, 1) ||
            psd_put(out, w->replaced, sizeof w->replaced) ||
            psd_put(out, &ended, 1) || psd_put(out, &w->lost_id, 8) ||
            psd_put(out, &unknown, 1))
            return -1;
    }
    return 0;
}

/* v040: format 4 as psd 0.4.0 wrote it, before it saved lost and
 * unknown (70 bytes a worker, not 79): read as format 3, its replaced
 * clients set aside (that psd derived the lost client at each load, so
 * its saved clients cannot be trusted to go with what it lost). */
static int sync_load(psd_sync *y, psd_source *in, int format, int v040,
                     uint64_t now_ms, char *err, size_t errlen)
{
    uint32_t n;
    if (psd_get(in, &y->clock, 8) || psd_get(in, &y->barrier, 8) ||
        psd_get(in, &n, 4)) {
        snprintf(err, errlen, "truncated");
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t st;
        uint8_t closed = 0, ended = 0, unknown = 0;
        uint64_t lost = 0;
        psd_worker w = { 0 };
        if (psd_get(in, &st, 4) || psd_get(in, &w.clock, 8) ||
            psd_get(in, &w.barrier, 8) || psd_get(in, &w.client_id, 8) ||
            (format >= 2 && psd_get(in, &w.summed, 8)) ||
            (format >= 3 && psd_get(in, &closed, 1)) ||
            (format >= 4 && (psd_get(in, w.replaced, sizeof w.replaced) ||
                             psd_get(in, &ended, 1) ||
                             (!v040 && (psd_get(in, &lost, 8) ||
                                        psd_get(in, &unknown, 1)))))) {
            snprintf(err, errlen, "truncated in worker %u", i);
            return -1;
        }
        if (refused_unsound(w.replaced, ended) || unknown > 1) {
            snprintf(err, errlen, "worker %u has ended mask 0x%x over its "
                     "replaced clients, or unknown = %u", i,
                     (unsigned)ended, (unsigned)unknown);
            return -1;
        }
        if (v040) {
            memset(w.replaced, 0, sizeof w.replaced);
            ended = 0;
        }
        w.ended_mask = ended;
        /* Format 3 and older held nobody refused: unknown, for a worker
         * of a job in progress. */
        w.unknown = format < 4 || v040 ? st != PSD_W_ABSENT : unknown;
        if (st > PSD_W_LEFT) {
            snprintf(err, errlen, "worker %u has state %u", i, st);
            return -1;
        }
        if (closed > 1 || (closed && st != PSD_W_LEFT)) {
            snprintf(err, errlen, "worker %u has closed = %u in state %u", i,
                     closed, st);
            return -1;
        }
        /* Format 1 and 2: every leave counts as a close (the older
         * psd's rule, psd_sync_load's comment in sync.h). */
        w.closed = closed || (format < 3 && st == PSD_W_LEFT);
        if (i >= (uint32_t)y->nworkers)
            continue;
        w.state = (psd_wstate)st;
        /* Lost as saved, or by the restart. Format 3 and older saved no
         * lost client: every worker of the job that was not closed had
         * lost its client, or lost it now (unknown keeps a takeover from
         * refusing it: join; end-job lets it go). */
        int live = w.state == PSD_W_LIVE ||
                   ((format < 4 || v040) &&
                    (w.state == PSD_W_GONE ||
                     (w.state == PSD_W_LEFT && !w.closed)));
        if (restored_lost(&w, live, lost)) {
            snprintf(err, errlen, "worker %u has lost client %llu, not its "
                     "own %llu", i, (unsigned long long)lost,
                     (unsigned long long)w.client_id);
            return -1;
        }
        if (w.state == PSD_W_LIVE || w.state == PSD_W_GONE) {
            w.state = PSD_W_GONE;
            w.gone_ms = now_ms;
        }
        y->workers[i] = w;
    }
    y->legacy_leaves = format < 3;
    int over = y->legacy_leaves && job_over(y);
    /* Said at once: the window the upgrade opened is in no other line,
     * and an operator may still end the job now (docs/durability.md,
     * section 2). A job over has none (job_over cleared it). */
    psd_sync_say_unknown(y);
    if (over && y->nworkers > 1)
        psd_info("the snapshot (format %d, an older psd's) has every worker "
                 "left at clock %llu: that job is over, and the next one "
                 "starts when all %d workers have joined", format,
                 (unsigned long long)y->workers[0].clock, y->nworkers);
    y->wait[0] = y->wait[1] = (psd_wait){ now_ms, now_ms };
    return 0;
}

int psd_sync_unknown(const psd_sync *y)
{
    int unknown = 0;
    for (int i = 0; i < y->nworkers; i++)
        unknown += y->workers[i].unknown;
    return unknown;
}

void psd_sync_say_unknown(const psd_sync *y)
{
    int unknown = psd_sync_unknown(y);
    if (unknown)
        psd_warn("whom this node had replaced is not known (the job in "
                 "progress ran under a psd before 0.4.1): until that job "
                 "ends (%d of its workers loaded), a process taking a worker "
                 "over refuses none that it replaces, and a replaced process "
                 "back from a partition is let in; stop such processes, or "
                 "end the job (psctl end-job) once its workers have stopped",
                 unknown);
}

int psd_sync_load(psd_sync *y, psd_source *in, int format,
                  uint64_t now_ms, char *err, size_t errlen)
{
    return sync_load(y, in, format, 0, now_ms, err, errlen);
}

int psd_sync_load_v040(psd_sync *y, psd_source *in, uint64_t now_ms,
                       char *err, size_t errlen)
{
    return sync_load(y, in, 4, 1, now_ms, err, errlen);
}
