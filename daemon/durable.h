/* Durability of one node on its event loop: recovery at start (the last
 * snapshot, then the journal after it), snapshots taken without stopping
 * service (a forked child writes the copy-on-write image while the loop
 * keeps serving), the final snapshot at stop, and the journal's fsyncs
 * (fsync = always: on the thread pool after every write, replies waiting;
 * everysec: once a second; no: never). What is kept where, and the
 * promises, are in docs/durability.md. */
#ifndef PSD_DURABLE_H
#define PSD_DURABLE_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "node.h"
#include "snapshot.h"

typedef struct psd_durable_stats {
    uint64_t snapshots;          /* written since start */
    uint64_t snapshot_failures;
    uint64_t generation;         /* of the newest good snapshot, 0: none */
    uint64_t last_ok_ms;         /* wall clock of the newest good one, or
                                    of the last periodic tick that found
                                    nothing changed since (it is current) */
    uint64_t last_bytes;
    double last_seconds;         /* how long its writing took */
    double last_pause_ms;        /* how long the loop stopped for fork() */
    char last_error[1024];       /* of the last failure, "" after success */
    uint64_t fsyncs;
    double fsync_ms_last, fsync_ms_max;
    uint64_t journal_records;    /* replayed at start */
    double recovery_seconds;
} psd_durable_stats;

typedef struct psd_durable {
    uv_loop_t *loop;
    psd_node *node;
    char dir[4096];              /* the node's data folder */
    psd_fsync fsync_mode;
    int log;                     /* durability = log */
    /* fsync on the thread pool */
    uv_work_t fsync_work;
    int fsync_running;
    int fsync_fd;                /* a dup of the journal's, owned by the
                                    work while it runs */
    int fsync_rc;
    uint64_t fsync_lsn;          /* what the running fsync covers */
    uint64_t fsync_start_ns;
    uv_timer_t everysec;
    /* segments a snapshot covers, removed on the thread pool: unlinking
     * a large file took a quarter second per 180 MB on the loop */
    uv_work_t prune_work;
    int prune_running;
    uint64_t prune_below;        /* what the running removal goes below */
    uint64_t prune_next;         /* asked meanwhile: the next one's, or 0 */
    /* the journal's fsync before a snapshot's rotation, on the pool: the
     * rotation's own fsync, on the loop, then has little left to do */
    uv_work_t presync_work;
    int presync;                 /* one runs: the snapshot waits for it */
    int presync_fd;              /* a dup of the segment's, the work's */
    int presync_rc;              /* its fsync's errno, 0: none */
    uint64_t presync_start_ns;
    int stopping;                /* psd_durable_stop was called: no work is
                                    queued from then on (the loop ends) */
    /* snapshots */
    uv_timer_t interval;
    uv_timer_t watch;            /* is the data folder still ours? */
    int folder_seen;             /* what the watch found last: FOLDER_* */
    uv_timer_t soon;             /* a snapshot for the journal's size */
    uint64_t size_seq;           /* the segment that last started one */
    uv_signal_t sigchld;
    pid_t child;                 /* the writer running, or 0 */
    int child_pipe;              /* its error text */
    int child_dir;               /* the folder it writes in, opened before
                                    the fork, or -1 */
    uint64_t child_gen, child_seq;
    uint64_t child_changes;      /* the node's changes when it forked */
    uint64_t saved_changes;      /* ... when the newest good snapshot
                                    forked (UINT64_MAX: none since start,
                                    which may have replayed a journal) */
    uint64_t next_seq;           /* the journal segment after the replayed
                                    ones */
    uint64_t child_start_ns;
    int unbased;                 /* the journal starts after a snapshot
                                    that is missing (the data folder was
                                    removed): pushes wait for a new one */
    void (*durable_moved)(void *arg);   /* replies may go out */
    void *arg;
    psd_durable_stats st;
    int started;                 /* psd_durable_open succeeded */
    int retabled;                /* loaded under other tables (1) or from
                                    a psd 0.1 file (2): the open writes a
                                    snapshot of this release's first */
    int skip;                    /* --skip-snapshot: the open moves the
                                    files aside */
    int lock_fd;                 /* flock'd psd-nodeN.lock, for life */
    uint64_t dir_dev;            /* the data folder's file system at start */
    int asked;                   /* the next writer is psctl save's */
    int test_fsync_delay_ms;     /* $PSD_TEST_FSYNC_DELAY_MS: each journal
                                    fsync sleeps this long first (tests) */
} psd_durable;

/* How psd was told to start from its files (its command line). */
typedef struct psd_start_opts {
    int skip_snapshot;           /* move the node's files aside */
    const char *const *drop;     /* --drop-table names, not owned */
    int ndrop;
} psd_start_opts;

/* Takes node n's data folder (data_dir, or $STATE_DIRECTORY when systemd
 * set it and data_dir was left at its default), which the caller made
 * (psd_durable_make_dir, naming data_dir's line when it cannot): locks
 * psd-nodeN.lock in it, so that a second psd started as the same
 * node with the same folder stops here, and removes a dead writer's
 * temporary snapshot file. Returns 0, or -1 with the reason in err (psd
 * must not start). durable_moved(arg) is called when replies that waited
 * for an fsync may go out. */
int psd_durable_lock(psd_durable *d, uv_loop_t *loop, psd_node *n,
                     void (*durable_moved)(void *), void *arg, char *err,
                     size_t errlen);

/* mkdir -p dir, its last component 0700 (psd's data folder, and psd
 * --import's). 0, or -1 with "cannot create PATH: reason" in err. */
int psd_durable_make_dir(const char *dir, char *err, size_t errlen);

/* Whether a psd holds node `index`'s lock in data folder dir (it runs):
 * its pid, as it wrote it into the lock file (0 when it did not), -1
 * when none does, or -2 when it cannot be told (the lock file cannot be
 * opened, another user's; the file system has no OFD locks). Never takes
 * the lock. */
long psd_durable_holder(const char *dir, int index);

/* The shape node's journal segments in dir replay under: with a snapshot
 * read (si), its own (this config's, but for a psd 0.1 file's: node.h);
 * without one (si NULL), the config's, or its psd 0.1 shape when the
 * first segment begins under that. *of_0_1 says whether the files are
 * psd 0.1's. */
uint64_t psd_durable_replay_shape(const char *dir, int node,
                                  const psd_config *cfg,
                                  const psd_snap_info *si, int *of_0_1);

/* After psd_durable_lock: recovers the node from the folder. With
 * skip_snapshot, nothing is read: the node starts from its initial values,
 * and psd_durable_open moves the snapshot and journal files aside (renamed
 * *.skipped.T). A snapshot taken under other tables is matched by name
 * (psd_snap_tables; the tables in opts->drop may be gone) and its journal
 * replayed onto them. Nothing else is written yet (but a cut torn journal
 * tail and the removal of segments a snapshot covers): psd_durable_open
 * does that once psd listens, so a start that fails before serving leaves
 * the files as they were. Returns 0, or -1 with the reason in err (psd
 * must not start). */
int psd_durable_start(psd_durable *d, const psd_start_opts *opts, char *err,
                      size_t errlen);

/* After psd_durable_start, once psd will serve: writes a snapshot of the
 * new tables when the snapshot was of other ones, opens the journal when
 * durability = log (a new segment, its start record on disk) and starts
 * the snapshot and fsync timers. Returns 0, or -1 with the reason in err
 * (psd must not start). */
int psd_durable_open(psd_durable *d, char *err, size_t errlen);

/* Starts a snapshot now (periodic, or asked for): the journal moves to a
 * new segment and a forked child writes the image. When one is already
 * running, nothing new starts. The outcome shows in d->st when the child
 * ends (generation, or snapshot_failures and last_error); d->child_gen
 * is the generation being written while d->child is set. */
void psd_durable_snapshot(psd_durable *d);

/* The same, asked for by the operator (psctl save): its writer also
 * takes a data folder made on another file system than the node's was
 * at start, which an automatic one leaves alone (an unmounted volume's
 * empty mount point looks the same). */
void psd_durable_save(psd_durable *d);

/* Whether the newest good snapshot is the node as it stands: none is
 * being written, nothing changed since it was (node->changes), it is
 * still in the data folder, the last one did not fail and the journal
 * waits for none. Then a periodic snapshot is skipped, and `psctl save`
 * is answered with its generation instead of writing the same image. */
int psd_durable_current(const psd_durable *d);

/* At stop, once every connection is closed: waits for a running child,
 * then writes the final snapshot in this process and removes the journal
 * it covers. 0, or -1 with the reason in err (the old files are kept),
 * or -2 when the data folder was removed or replaced while psd ran
 * (nothing is written, and the old files are not there). */
int psd_durable_final(psd_durable *d, char *err, size_t errlen);

/* Closes the timers and signal handles (the loop ends after). */
void psd_durable_stop(psd_durable *d);

/* Applies a reload's snapshot_interval. */
void psd_durable_reload(psd_durable *d);

#endif
