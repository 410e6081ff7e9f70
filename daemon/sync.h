/* Training modes on one node, as a pure state machine: which workers are
 * waited for, the clock and barrier each reached, and the node's clock
 * and barrier (the slowest waited-for worker's). No connections, replies
 * or timers: callers pass the time in and act on what the calls return
 * (request.c applies bsp sums and answers held requests; server.c runs
 * the tick). State is per worker, never per key. */
#ifndef PSD_SYNC_H
#define PSD_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "stream.h"

typedef enum {
    PSD_W_ABSENT,            /* not joined (since the start, or since the
                                last job ended: sync.c, job_over) */
    PSD_W_LIVE,              /* joined; its connection is up */
    PSD_W_GONE,              /* connection lost, waited for worker_grace */
    PSD_W_LEFT               /* left, or its grace ran out: not waited for */
} psd_wstate;

#define PSD_REPLACED 4          /* replaced clients remembered per worker */

typedef struct psd_worker {
    psd_wstate state;
    uint64_t clock;          /* ps_clock calls this worker finished */
    uint64_t barrier;        /* barriers it entered */
    const void *owner;       /* the session holding it while LIVE; compared,
                                never dereferenced */
    uint64_t client_id;
    uint64_t lost_id;        /* the client that lost its connection while
                                it held this worker, until it comes back
                                (0: none; a LEAVE is not a loss) */
    uint64_t replaced[PSD_REPLACED];  /* clients that new processes took
                                this worker over from after they were lost
                                (lost_id), newest last (0: none): refused
                                for good if they come back. Saved in
                                snapshots and WORKER records, so that a
                                restart does not let one back */
    unsigned ended_mask;     /* bit k: replaced[k] was let go by psctl
                                end-job, not replaced (for its error) */
    int unknown;             /* restored from files that did not hold
                                whom the node had replaced (snapshot
                                format 3, a psd before 0.4.0): a takeover
                                refuses no lost client, which may be the
                                replacement of a stale process that is
                                taking over, until the job ends (sync.c,
                                join; saved) */
    char peer[64];           /* where it is connected from, for errors */
    uint64_t gone_ms;        /* when its connection was lost (GONE) */
    uint64_t summed;         /* 1 + the node's clock when its pushes last
                                went into bsp sums (0: never) */
    int dirty;               /* joined or stopped being waited for since
                                the journal last heard (psd_sync_dirty) */
    int closed;              /* LEFT by its own LEAVE (ps_close), not by a
                                grace that ran out: the job may be over */
    uint64_t said_ms;        /* start of the window of its log lines */
    unsigned said;           /* join, loss and leave lines in it */
    unsigned unsaid;         /* those past the burst: counted, not logged */
    unsigned unsaid_lost;    /* of them, losses of its connection */
    int pending;             /* LIVE by a HELLO whose open is not known to
                                have completed (a version 4 worker before
                                its OPENED): lost before it, the worker is
                                as it was before that HELLO (prior) */
    uint64_t join_node;      /* pending: the node's clock at its HELLO, for
                                the join's lines said once it is confirmed
                                (sync.c, say_join; the rest they say comes
                                from prior) */
} psd_worker;

/* A wait the node reports ("waiting for"), of the clock or the barrier. */
typedef struct psd_wait {
    uint64_t since_ms;       /* since when requests wait: the last move, or
                                the last tick that found none held */
    uint64_t logged_ms;      /* when this wait was last reported */
} psd_wait;

typedef struct psd_sync {
    psd_worker *workers;     /* nworkers entries, owned */
    psd_worker *prior;       /* nworkers entries, owned: a pending worker's
                                state before its HELLO (workers[i].pending) */
    int nworkers;
    uint64_t clock;          /* clocks finished by every waited-for worker */
    uint64_t barrier;        /* barriers every such worker passed */
    psd_wait wait[2];        /* for the log: [0] the clock, [1] the barrier */
    int synchronous;         /* the node has bsp or ssp tables: workers'
                                clocks stay close (set by the owner) */
    uint64_t now_ms;         /* the latest time the node gave (advance,
                                lost, tick): for the rate of log lines */
    int legacy_leaves;       /* loaded from a snapshot older than `closed`
                                (format 1 or 2): a leave replayed after it
                                whose record does not say (an older
                                psd's) counts as a close (psd_sync_load) */
} psd_sync;

/* What psd_sync_tick is told is held: requests that wait on the clock (a
 * CLOCK on a bsp cluster, an ssp pull) or on the barrier (a BARRIER). */
#define PSD_HOLD_CLOCK 1
#define PSD_HOLD_BARRIER 2

/* 0, or -1 when memory runs out. */
int psd_sync_init(psd_sync *y, int nworkers, uint64_t now_ms);
void psd_sync_destroy(psd_sync *y);

/* A HELLO from worker id `worker` (>= 0), held by `owner` from then on.
 * Returns 0, or an error with the reason: PSW_EINVAL (out of range, or
 * client_id is the one a new process took the worker over from) or
 * PSW_EBUSY (the id is held by another client's live connection). The same client_id reconnecting takes the
 * worker over from its old session, clock and all. A worker joining anew
 * (first, after it left, or another client_id for a lost one: a new
 * process) behind the node's clock and barrier starts at them, and after
 * the clock its pushes last went into bsp sums for: those pushes stay in
 * the sums, so the new process must not push that iteration again. Its
 * clock may move: call psd_sync_advance then. */
int psd_sync_join(psd_sync *y, int32_t worker, uint64_t client_id,
                  const void *owner, const char *peer, char *err,
                  size_t errlen);

/* The same for a HELLO that joins pending (protocol version 4): the
 * worker is LIVE, but until psd_sync_confirm its client may yet fail its
 * open (another node did not answer in time), and a node cannot tell
 * that from a crash. So, until confirmed: a loss of its connection puts
 * the worker back as it was before the HELLO (psd_sync_lost), as on a
 * node the HELLO never reached, where a failed open's worker would
 * otherwise be waited for while this node let it go after worker_grace
 * and ended clocks without it; it is not journaled (psd_sync_dirty),
 * and a snapshot saves it as it was; and it never lets the node's clock
 * and barrier move further than its state before would (its join may
 * have moved it past them; being live it may hold them meanwhile), nor
 * counts in a mean's divisor other than as before. A
 * HELLO of the same client on another connection keeps it pending; one
 * that does not join pending confirms it. */
int psd_sync_join_pending(psd_sync *y, int32_t worker, uint64_t client_id,
                          const void *owner, const char *peer, char *err,
                          size_t errlen);

/* The worker `owner` holds completed its open (OPENED, or its first
 * request): taken in for good, journaled from now on. Returns 1 when it
 * was pending (then journal the workers: psd_sync_dirty has it). */
int psd_sync_confirm(psd_sync *y, int32_t worker, const void *owner);

/* Whether `owner` holds `worker` now (a session whose worker was taken
 * over by a reconnection of the same client does not). */
int psd_sync_holds(const psd_sync *y, int32_t worker, const void *owner);

/* The clock and barrier count the node has for `worker` (0, 0 for -1). */
void psd_sync_position(const psd_sync *y, int32_t worker, uint64_t *clock,
                       uint64_t *barrier);

/* owner's connection was lost: its worker is waited for grace_s more
 * seconds (GONE), or not at all when grace_s is 0; a pending one
 * (psd_sync_join_pending) is put back as it was before its HELLO.
 * Returns 1 when that changed who is waited for (then call
 * psd_sync_advance and journal the workers). */
int psd_sync_lost(psd_sync *y, int32_t worker, const void *owner,
                  uint64_t now_ms, int grace_s);

/* LEAVE: the worker is no longer waited for. Returns 1 when owner held
 * it (then call psd_sync_advance). */
int psd_sync_leave(psd_sync *y, int32_t worker, const void *owner);

/* A CLOCK (barrier 0) or BARRIER (barrier 1) naming the value the worker
 * reaches: a repeat after a lost connection counts once. Returns 0, or
 * PSW_EINVAL with the reason (0, or more than a million ahead). */
int psd_sync_reach(psd_sync *y, int32_t worker, int barrier, uint64_t value,
                   char *err, size_t errlen);

/* Moves the node's clock and barrier up to the slowest waited-for
 * worker's (when nobody is waited for, the largest seen). Returns 1 when
 * the clock moved: the bsp sums of the clocks just finished must be
 * applied, once. */
int psd_sync_advance(psd_sync *y, uint64_t now_ms);

/* What psd_sync_end did. */
typedef struct psd_sync_ended {
    uint64_t from;           /* the node's clock before */
    uint64_t clock, barrier; /* where the job ended: the node's counts and
                                every worker's now */
    int moved;               /* the node's clock moved past `from`: the bsp
                                sums of the clocks after it must be applied
                                once, with divisor */
    int divisor;             /* for aggregate = mean: the workers whose
                                pushes the sums of the clock in progress
                                hold (none is waited for any more) */
    int pending;             /* workers had pushed into the sums of the
                                clock in progress, which no ps_clock ended */
    int in_progress;         /* 0: every worker was absent at these counts
                                already (a job that ran its course, or a
                                second end-job): only counts may have risen */
    int let_go;              /* processes of lost workers (in their grace,
                                or let go when it ran out) refused from now
                                on, as replaced ones are */
    int changed;             /* 0: nothing moved (every worker was absent
                                at these counts and journaled so): nothing
                                to journal or snapshot */
} psd_sync_ended;

/* psctl end-job: ends the job in progress as if every worker had called
 * ps_close at one clock and one barrier count, so that the next job
 * waits for all workers to join and starts where this one ended. The
 * counts are the largest of the workers', the node's, and `clock` and
 * `barrier` (psctl's, to line the nodes up with each other; 0: none); a
 * clock in progress that holds pushes in the bsp sums counts as
 * finished (the caller applies them, as a clock's end would have). A
 * lost worker's process, should it come back, is refused: its job is
 * over. Every worker is marked for the journal (psd_sync_dirty), unless
 * nothing changed (e->changed 0: a second end-job). Refused
 * with PSW_EBUSY while a worker is connected (err says which), with
 * PSW_EINVAL for counts given above 2^61 or more than a million past
 * this node's largest (when it has one). */
int psd_sync_end(psd_sync *y, uint64_t clock, uint64_t barrier,
                 psd_sync_ended *e, char *err, size_t errlen);

/* Workers waited for now. */
int psd_sync_waited(const psd_sync *y);

/* count[s]: the workers in state s (psd_wstate). Returns how many of
 * them are pending (live, their open not completed). */
int psd_sync_count(const psd_sync *y, int count[PSD_W_LEFT + 1]);

/* worker (-1: none) pushed to a bsp table: its push is in the sums of the
 * clock in progress. */
void psd_sync_summed(psd_sync *y, int32_t worker);

/* The same for a push replayed from the journal, which names its client,
 * not its connection: the worker that client_id is (none for a reader). */
void psd_sync_summed_by(psd_sync *y, uint64_t client_id);

/* The divisor of `aggregate = mean` for the sums of the clocks after
 * `from` (the node's clock before it moved): the workers waited for, and
 * those whose pushes the sums hold although they are no longer waited
 * for (a worker that pushed, then left or was lost before its clock: its
 * gradient is in the sum, so it counts in the mean). */
int psd_sync_divisor(const psd_sync *y, uint64_t from);

/* For a pull of an ssp table with this staleness from `worker`: 1 when
 * it may be answered now; else 0 and *need is the node clock it waits
 * for. Readers (worker < 0) never wait. */
int psd_sync_pull_ready(const psd_sync *y, int32_t worker, int staleness,
                        uint64_t *need);

/* Writes the node's clock and barrier and every worker's state, clock,
 * barrier, client id, `summed` (who has pushes in the bsp sums, which
 * the snapshot holds: the divisor of aggregate = mean needs it),
 * `closed` (a job whose last workers close after a restart still ends)
 * and the clients refused for good (`replaced`, `ended_mask`).
 * 0 or -1. */
int psd_sync_save(const psd_sync *y, psd_sink *out);

/* Reads what psd_sync_save wrote into y (fresh): workers that were live
 * come back as lost at now_ms (their grace starts: they reconnect or stop
 * being waited for), and a new process that takes one over refuses its
 * client for good, as after a loss. A cluster whose `workers` changed
 * keeps the first workers that fit. format is the snapshot's: 1 was
 * written before `summed` was saved (then no worker counts as having
 * pushed into the sums), 2 before `closed`, 3 before the clients refused
 * for good (then none is, and a takeover refuses nobody until the job
 * ends: the client it takes over from may be the replacement of a stale
 * process that is back). The psd that wrote formats 1 and 2 did not
 * tell a close from a grace that ran out: it took a job for over when
 * every worker had left at one clock and barrier count. So does this
 * load, for such a snapshot and for the leaves of that psd replayed after
 * it (legacy_leaves; this psd's own records say which kind each leave
 * was); else the first job after an upgrade would go on without the
 * workers the older psd would have waited for.
 * 0, or -1 with the reason in err. */
int psd_sync_load(psd_sync *y, psd_source *in, int format,
                  uint64_t now_ms, char *err, size_t errlen);

/* The same for a snapshot of format 4 as psd 0.4.0 wrote it (a release
 * before the layout grew, under the same format number: 70 bytes a
 * worker, without lost and unknown), read as format 3: the jobs in
 * progress keep their workers, and whom they had replaced is taken as
 * unknown until the job ends. snapshot.c tries it when the worker
 * section does not read as this psd's format 4. */
int psd_sync_load_v040(psd_sync *y, psd_source *in, uint64_t now_ms,
                       char *err, size_t errlen);

/* How many workers' replaced clients are unknown (a job in progress run
 * under a psd before 0.4.1), and the warning that says so (the load
 * gives it; a start whose journal replay made some unknown, with none in
 * its snapshot, gives it after the replay). */
int psd_sync_unknown(const psd_sync *y);
void psd_sync_say_unknown(const psd_sync *y);

/* The next worker from `from` on that joined or stopped being waited for
 * since the last call returned it (its flag is then cleared), or -1: what
 * the journal must record so that a replay knows who joined and who left
 * after the snapshot. */
int psd_sync_dirty(psd_sync *y, int from);

/* The node starts serving (it listens): the workers loaded or replayed
 * as lost are waited for worker_grace from now_ms, as the log says. Their
 * grace counted from before the load, which a long load and replay could
 * outlast, letting every one go at the first tick before its client could
 * reconnect. */
void psd_sync_serving(psd_sync *y, uint64_t now_ms);

/* Replays a worker's journaled join (joined 1: waited for, lost at now_ms
 * so that its grace starts, with the clock and barrier it had) or leave
 * (joined 0; closed 1: by its LEAVE, which may end the job as it did live;
 * -1: not known, a record of an older psd, taken for a close after a
 * snapshot of format 1 or 2 (legacy_leaves) and else for a lost worker).
 * replaced (PSD_REPLACED entries), ended_mask, lost_id (of a leave:
 * the client lost, kept past its grace; 0: none, or not known) and
 * unknown (whom the node had replaced was not known: psd_worker): the
 * clients refused for good then, and the one a takeover would refuse,
 * as the record has them; replaced NULL for a record of a psd that did
 * not write them (none is refused, as after a format 3 snapshot).
 * -1 when worker is out of range. */
int psd_sync_replay(psd_sync *y, int32_t worker, int joined, int closed,
                    uint64_t client_id, uint64_t clock, uint64_t barrier,
                    const uint64_t *replaced, unsigned ended_mask,
                    uint64_t lost_id, int unknown, uint64_t now_ms);

/* Periodic work: workers whose grace ran out stop being waited for
 * (returns 1 then: call psd_sync_advance); and while `holding` (PSD_HOLD_*
 * bits: someone waits on the clock, the barrier), every wait_log_ms of
 * such a wait without the clock (barrier) moving, logs whom the node
 * waits for and how long it has waited. */
int psd_sync_tick(psd_sync *y, uint64_t now_ms, int grace_s, int holding,
                  uint64_t wait_log_ms);

#endif
