/* Recovery, snapshots and fsyncs of one node; see durable.h. */
#define _GNU_SOURCE             /* close_range */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "notify.h"
#include "preflight.h"
#include "journal.h"
#include "log.h"
#include "request.h"
#include "snapshot.h"


static double since_s(uint64_t t0)
{
    return (double)(uv_hrtime() - t0) / 1e9;
}

static uint64_t wall_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* See durable.h (also when dir ends with '/'). */
int psd_durable_make_dir(const char *dir, char *err, size_t errlen)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--)
        p[n - 1] = '\0';
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", p, strerror(errno));
            return -1;
        }
        *s = '/';
    }
    if (mkdir(p, 0700) && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", p, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the data folder --------------------------------------------------- */

static void lock_path(char *buf, size_t len, const char *dir, int index);

enum { FOLDER_OURS, FOLDER_GONE, FOLDER_REPLACED, FOLDER_UNKNOWN };

#define WATCH_MS 1000

/* Where the data folder stands against the lock this node holds: the
 * same lock file (ours), no lock file at its path (the folder, or the
 * file, was removed while psd ran), or another one (the folder was
 * replaced: a backup put back, a volume mounted anew, and maybe a second
 * psd started in it, which the lock let in). The lock is held on a
 * descriptor, and everything else is written by path: without this, a
 * node whose folder was replaced wrote its snapshot, and its journal's
 * next segments, into the new folder, over the second psd's (the ops
 * trial lost 3,661 pushes so). */
static int folder_state(const psd_durable *d)
{
    struct stat have, now;
    char lock[4200];
    lock_path(lock, sizeof lock, d->dir, d->node->index);
    if (fstat(d->lock_fd, &have))
        return FOLDER_UNKNOWN;
    if (stat(lock, &now) == 0)
        return now.st_dev == have.st_dev && now.st_ino == have.st_ino
                   ? FOLDER_OURS
                   : FOLDER_REPLACED;
    return errno == ENOENT ? FOLDER_GONE : FOLDER_UNKNOWN;
}

/* Takes the lock on fd, psd-nodeN.lock at path lock: the flock that
 * keeps a second psd out, and an OFD lock beside it with psd's pid in the
 * file, which tools can see without taking it (psd_durable_holder). */
static int take_lock(int fd, const char *lock, int index, char *err,
                     size_t errlen)
{
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;           /* the caller tells EWOULDBLOCK apart */
        snprintf(err, errlen, "%s: another psd is running as node %d with "
                 "this data folder (%s)", lock, index,
                 e == EWOULDBLOCK ? "it holds the lock" : strerror(e));
        errno = e;
        return -1;
    }
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    char pid[32];
    int pl = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (fcntl(fd, F_OFD_SETLK, &fl) || ftruncate(fd, 0) ||
        pwrite(fd, pid, (size_t)pl, 0) != pl)
        psd_warn("%s: %s: tools cannot tell that this psd runs", lock,
                 strerror(errno));
    return 0;
}

/* What the operator does after folder_ours refused: at a snapshot, make
 * a folder the node can lock, then psctl save; at the stop, nothing more
 * is written, and the node's files are where its folder went. */
static const char *folder_advice(int final, int st)
{
    if (final && st == FOLDER_GONE)
        return "if it was moved, this node's last snapshot and journal are "
               "there; if removed, what the node took since its last "
               "snapshot elsewhere is lost";
    if (final)
        return "this node's last snapshot and journal are in the folder it "
               "locked, wherever that is now";
    return st == FOLDER_REPLACED
               ? "move it aside and make the folder again: psctl save then "
                 "writes this node's snapshot there"
               : "mount the volume again; or, to write this node's snapshot "
                 "on the file system at that path now, psctl save";
}

/* Before anything is written into the folder by path (a snapshot, the
 * journal's next segment, the pruning of old ones): 0 when it is still
 * the folder this node locked, or its lock file is gone and the folder at
 * the path is on the file system the node's folder was on at start (made
 * again by the operator, or only the lock file removed), with a new lock
 * file this node now holds; -1, with why in err, when it is missing, on
 * another file system, or something else is at its path, which nothing
 * of this node's may overwrite. final: the stop's (its advice). */
static int folder_ours(psd_durable *d, int final, int asked, char *err,
                       size_t errlen)
{
    char lock[4200];
    int st = folder_state(d), e = errno;
    if (st == FOLDER_OURS)
        return 0;
    lock_path(lock, sizeof lock, d->dir, d->node->index);
    if (st == FOLDER_REPLACED) {
        long pid = psd_durable_holder(d->dir, d->node->index);
        char who[64] = "";
        if (pid > 0)
            snprintf(who, sizeof who, " (psd pid %ld runs in it)", pid);
        else if (pid == -1)      /* a backup put back, or a psd that failed
                                    to start there and left its lock */
            snprintf(who, sizeof who, " (no psd runs in it)");
        snprintf(err, errlen, "%s was replaced while psd ran%s: its "
                 "psd-node%d.lock is not the one this node took, and "
                 "nothing of this node is written over it (%s)", d->dir, who,
                 d->node->index, folder_advice(final, st));
        return -1;
    }
    if (st == FOLDER_UNKNOWN) {
        snprintf(err, errlen, "%s: %s", lock, strerror(e));
        return -1;
    }
    /* Not made here: a volume that is not mounted looks the same, and
     * the node's files would go to the disk beneath (the operator makes
     * it again, then psctl save). Nor taken when it is on another file
     * system than the folder was at start: where data_dir is the mount
     * point, the empty folder under it is there once the volume is
     * gone. (A folder against a folder: on overlayfs a file and its
     * folder may give different devices.) */
    struct stat dir;
    if (stat(d->dir, &dir)) {
        snprintf(err, errlen, "%s was removed while psd ran: nothing of "
                 "this node is written %s (%s)", d->dir,
                 final ? "there" : "until it is made again",
                 final ? folder_advice(final, st) : "mkdir it, then psctl "
                                                    "save");
        return -1;
    }
    if ((uint64_t)dir.st_dev != d->dir_dev && !asked) {
        snprintf(err, errlen, "%s is on another file system than the folder "
                 "this node locked at start (a volume no longer mounted "
                 "there?): nothing of this node is written there (%s)",
                 d->dir, folder_advice(final, st));
        return -1;
    }
    /* O_EXCL: a psd that made it meanwhile keeps it. */
    int fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", lock, strerror(errno));
        return -1;
    }
    if (take_lock(fd, lock, d->node->index, err, errlen)) {
        /* The file this node made and could not lock would read, at the
         * next try, as another's: it goes, unless another psd opened it
         * and holds it now (a second node started meanwhile). */
        if (errno != EWOULDBLOCK)
            unlink(lock);
        close(fd);
        return -1;
    }
    close(d->lock_fd);
    d->lock_fd = fd;
    d->folder_seen = FOLDER_OURS;
    d->dir_dev = (uint64_t)dir.st_dev;   /* psctl save took another one */
    psd_warn("%s was not there (the lock file, or its folder, was removed "
             "or moved while psd ran): this node locks it anew, and its "
             "next snapshot holds the whole node", lock);
    return 0;
}

/* The data folder opened, and checked to be the one whose lock this node
 * holds (the path may have changed since folder_ours): its descriptor,
 * which snapshots are written in, or -1 with why in err. */
static int open_folder(psd_durable *d, char *err, size_t errlen)
{
    int dirfd = open(d->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        snprintf(err, errlen, "cannot open %.300s: %s", d->dir,
                 strerror(errno));
        return -1;
    }
    struct stat at_dir, held;
    char name[64];
    snprintf(name, sizeof name, "psd-node%d.lock", d->node->index);
    if (fstatat(dirfd, name, &at_dir, 0) || fstat(d->lock_fd, &held) ||
        at_dir.st_dev != held.st_dev || at_dir.st_ino != held.st_ino) {
        snprintf(err, errlen, "%.300s changed as the snapshot began (it is "
                 "not the folder of this node's lock now)", d->dir);
        close(dirfd);
        return -1;
    }
    return dirfd;
}

/* Whether the folder at the path is one this node must not keep
 * journaling beside: another one put in its place (replaced), or one on
 * another file system (its volume unmounted: the journal's segment is
 * on the volume that went, which no restart reads). Its name for the
 * refusal, or NULL. A folder moved away, with none at the path, keeps
 * its segment readable where it went: pushes go on. */
static const char *folder_foreign(const psd_durable *d)
{
    struct stat dir;
    int st = folder_state(d);
    if (st == FOLDER_REPLACED)
        return "the data folder was replaced while psd ran";
    if (st == FOLDER_GONE && stat(d->dir, &dir) == 0 &&
        (uint64_t)dir.st_dev != d->dir_dev)
        return "the data folder's volume is no longer mounted";
    return NULL;
}

/* A folder that is not ours: with the journal, pushes are refused until
 * a snapshot can be written (their records would go to a segment no
 * restart reads). */
static void folder_refused(psd_durable *d, const char *why)
{
    if (!d->node->journal)
        return;
    char text[200];
    snprintf(text, sizeof text, "%s: pushes are refused until this node's "
             "snapshot can be written (psd's log says why)", why);
    d->unbased = 1;
    psd_journal_hold(d->node->journal, text);
}

/* ---- fsync ------------------------------------------------------------- */

static void start_fsync(psd_durable *d);

static void fsync_work(uv_work_t *w)
{
    psd_durable *d = w->data;
    if (d->fsync_fd >= 0) {      /* else start_fsync did it */
        if (d->test_fsync_delay_ms)
            usleep((useconds_t)d->test_fsync_delay_ms * 1000);
        d->fsync_rc = fsync(d->fsync_fd) ? errno : 0;
    }
}

/* A journal fsync failed (why). After a failed fsync the kernel may have
 * dropped the pages it could not write and marked them clean: trying
 * again proves nothing. With fsync = always the promise cannot be kept,
 * so psd stops at once, without acknowledging what waited for the fsync;
 * a restart replays what is on disk, and clients resend the rest (exactly
 * once). everysec and no promise only that a crash of psd loses nothing,
 * which write() kept: logged and counted. */
static void fsync_failed(psd_durable *d, const char *why)
{
    d->node->stats.journal_errors++;
    if (d->fsync_mode == PSD_FSYNC_ALWAYS) {
        psd_error("journal: %s; exiting without acknowledging the pushes "
                  "it covered (fsync = always)", why);
        _exit(1);
    }
    psd_error("journal: %s (fsync = %s: pushes written so far survive a "
              "crash of psd, not of the host)", why,
              psd_fsync_name(d->fsync_mode));
}

/* The fsync covering fsync_lsn ended (fsync_rc): accounts for it and
 * lets the replies that waited for it go. */
static void fsync_finished(psd_durable *d)
{
    d->fsync_running = 0;
    double ms = (double)(uv_hrtime() - d->fsync_start_ns) / 1e6;
    d->st.fsyncs++;
    d->st.fsync_ms_last = ms;
    if (ms > d->st.fsync_ms_max)
        d->st.fsync_ms_max = ms;
    if (d->fsync_rc) {
        char why[128];
        snprintf(why, sizeof why, "fsync: %s", strerror(d->fsync_rc));
        fsync_failed(d, why);
        return;
    }
    if (d->fsync_mode == PSD_FSYNC_ALWAYS) {
        /* A rotation (a snapshot) may have moved it further meanwhile. */
        if (d->fsync_lsn > d->node->durable_lsn)
            d->node->durable_lsn = d->fsync_lsn;
        if (d->durable_moved)
            d->durable_moved(d->arg);
        /* Records written meanwhile form the next group. */
        if (psd_journal_written(d->node->journal) > d->fsync_lsn)
            start_fsync(d);
    }
}

static void fsync_done(uv_work_t *w, int status)
{
    psd_durable *d = w->data;
    (void)status;
    if (d->fsync_fd >= 0)
        close(d->fsync_fd);
    fsync_finished(d);
}

/* One fsync on the thread pool covering everything written so far: the
 * group commit (every record that arrived meanwhile shares it). */
static void start_fsync(psd_durable *d)
{
    psd_journal *j = d->node->journal;
    if (!j || d->fsync_running)
        return;
    d->fsync_running = 1;
    d->fsync_lsn = psd_journal_written(j);
    d->fsync_start_ns = uv_hrtime();
    d->fsync_fd = dup(psd_journal_fd(j));
    if (d->fsync_fd < 0) {
        /* No descriptor to spare (EMFILE under many connections): the
         * fsync runs here, on the loop, where the segment cannot be
         * closed under it. Skipping it would hold the replies waiting
         * for it until some later push started another. Its end is still
         * reported through the pool (the work does nothing), so that the
         * replies it frees go out from the loop, not from inside the
         * flush of the connection that called us. */
        psd_warn_rep("journal: dup: %s; fsync on the event loop",
                     strerror(errno));        /* at every push: collapsed */
        d->fsync_rc = fsync(psd_journal_fd(j)) ? errno : 0;
    }
    d->fsync_work.data = d;
    uv_queue_work(d->loop, &d->fsync_work, fsync_work, fsync_done);
}

static void check_size(psd_durable *d);

/* The node wrote journal records. */
static void on_written(void *arg)
{
    psd_durable *d = arg;
    check_size(d);
    if (d->fsync_mode == PSD_FSYNC_ALWAYS) {
        start_fsync(d);
        return;
    }
    /* everysec and no: a written record survives a crash of psd. */
    d->node->durable_lsn = psd_journal_written(d->node->journal);
}

static void on_everysec(uv_timer_t *t)
{
    psd_durable *d = t->data;
    if (d->node->journal && psd_journal_written(d->node->journal) >
                                d->fsync_lsn)
        start_fsync(d);
}

/* ---- removing covered segments ----------------------------------------- */

static void prune_work(uv_work_t *w)
{
    psd_durable *d = w->data;
    psd_journal_prune(d->dir, d->node->index, d->prune_below);
}

static void prune_start(psd_durable *d, uint64_t below);

static void prune_done(uv_work_t *w, int status)
{
    psd_durable *d = w->data;
    (void)status;
    d->prune_running = 0;
    if (d->prune_next > d->prune_below)
        prune_start(d, d->prune_next);
    d->prune_next = 0;
}

/* Removes the segments below `below`, which a snapshot written covers,
 * off the loop: one removal at a time, the latest asked for after it.
 * Only closed segments are below a snapshot's journal_seq, so the loop
 * never writes a file being removed. A stop waits for it (uv_run ends
 * when no work is left). */
static void prune_start(psd_durable *d, uint64_t below)
{
    if (folder_state(d) != FOLDER_OURS)
        return;                  /* not another folder's segments */
    /* Stopping (psd_durable_final after the loop ended): here, or the
     * work would outlive the loop. */
    if (d->stopping && !d->prune_running) {
        psd_journal_prune(d->dir, d->node->index, below);
        return;
    }
    if (d->prune_running) {
        if (below > d->prune_next)
            d->prune_next = below;
        return;
    }
    d->prune_running = 1;
    d->prune_below = below;
    d->prune_work.data = d;
    if (uv_queue_work(d->loop, &d->prune_work, prune_work, prune_done)) {
        d->prune_running = 0;
        psd_journal_prune(d->dir, d->node->index, below);
    }
}

/* ---- snapshots --------------------------------------------------------- */

static void child_done(psd_durable *d, int ok, const char *text)
{
    double secs = since_s(d->child_start_ns);
    if (ok) {
        struct stat st;
        char name[64];
        /* In the folder it was written in (the one at the path may be
         * another now). */
        snprintf(name, sizeof name, "psd-node%d.snap", d->node->index);
        d->st.snapshots++;
        d->st.generation = d->child_gen;
        d->st.last_ok_ms = wall_ms();
        d->st.last_seconds = secs;
        d->st.last_bytes = fstatat(d->child_dir, name, &st, 0) == 0
                               ? (uint64_t)st.st_size : 0;
        d->st.last_error[0] = '\0';
        /* One whose folder fsync failed may not survive a power loss:
         * the next tick writes it again. */
        if (!text[0])
            d->saved_changes = d->child_changes;
        if (d->unbased && d->node->journal)
            psd_journal_hold(d->node->journal, NULL);
        d->unbased = 0;
        if (text[0])
            psd_warn("snapshot %llu: %s; the journal it covers is kept",
                     (unsigned long long)d->child_gen, text);
        else
            prune_start(d, d->child_seq);
        psd_info("snapshot %llu written: %.1f MiB in %.2f s (the loop paused "
                 "%.2f ms to fork)", (unsigned long long)d->child_gen,
                 (double)d->st.last_bytes / (1 << 20), secs,
                 d->st.last_pause_ms);
        if (folder_state(d) != FOLDER_OURS)
            psd_warn("snapshot %llu went to the folder this node locked, "
                     "which is no longer at %s (it was moved or replaced "
                     "while the snapshot was written)",
                     (unsigned long long)d->child_gen, d->dir);
    } else {
        d->st.snapshot_failures++;
        snprintf(d->st.last_error, sizeof d->st.last_error, "%s", text);
        psd_error("snapshot %llu failed, the previous one is kept: %s",
                  (unsigned long long)d->child_gen, text);
    }
    d->child = 0;
    d->node->writer_forked = 0;
    if (d->child_dir >= 0)
        close(d->child_dir);
    d->child_dir = -1;
}

static void on_sigchld(uv_signal_t *h, int sig)
{
    psd_durable *d = h->data;
    (void)sig;
    if (!d->child)
        return;
    int st;
    pid_t r = waitpid(d->child, &st, WNOHANG);
    if (r != d->child)
        return;
    char text[256] = "";
    ssize_t k = read(d->child_pipe, text, sizeof text - 1);
    text[k > 0 ? k : 0] = '\0';
    close(d->child_pipe);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok && !text[0])
        snprintf(text, sizeof text, "the writer %s %d%s",
                 WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                 WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                     ? " (under a memory limit, the kernel's OOM killer "
                       "takes the writer first: dmesg says)"
                     : "");
    if (!ok) {
        /* A writer killed (the OOM killer, say) leaves its unfinished
         * file, named for its pid: removed here, or each failure left up
         * to a model's size on disk until the next start. */
        char tmp[128];
        snprintf(tmp, sizeof tmp, "psd-node%d.snap.tmp.%ld", d->node->index,
                 (long)r);
        unlinkat(d->child_dir, tmp, 0);   /* in the folder it wrote in */
    }
    child_done(d, ok, text);
}

/* Moves the journal to a new segment for a snapshot to start from. When
 * the old segment had been removed from the folder (the data folder
 * deleted, then made again), the records held for it went to the new
 * one, whose effects the snapshot holds too: one more rotation puts that
 * segment, once written and fsync'd, below the snapshot's journal_seq, so
 * that a replay after it does not apply them twice. Until a snapshot is
 * written, the segments start after a snapshot that is missing, and a
 * restart would refuse them: the journal holds its writes, so pushes are
 * refused, as when it cannot be written. */
static int rotate(psd_durable *d, psd_journal *j, char *err, size_t errlen)
{
    psd_journal_hold(j, NULL);   /* the snapshot to come covers it all */
    int rc = psd_journal_rotate(j, err, errlen);
    if (rc == 1) {
        psd_warn("journal: segment %llu was removed from the folder; its "
                 "records went to segment %llu",
                 (unsigned long long)psd_journal_seq(j) - 1,
                 (unsigned long long)psd_journal_seq(j));
        d->unbased = 1;
        rc = psd_journal_rotate(j, err, errlen);
    }
    if (d->unbased)
        psd_journal_hold(j, "the data folder was removed: pushes are "
                         "refused until a snapshot of this node is written "
                         "(psctl save)");
    return rc;
}

static int past_size(const psd_durable *d);
static void on_size(uv_timer_t *t);
static void start_writer(psd_durable *d);
#define RETRY_MS 10000

/* A snapshot that could not start: counted and said, for psctl and
 * /metrics; the previous one is kept. */
static void not_started(psd_durable *d, const char *why)
{
    d->st.snapshot_failures++;
    snprintf(d->st.last_error, sizeof d->st.last_error, "%s", why);
    psd_error("snapshot not started: %s", why);
}

static void presync_work(uv_work_t *w)
{
    psd_durable *d = w->data;
    if (d->test_fsync_delay_ms)
        usleep((useconds_t)d->test_fsync_delay_ms * 1000);
    d->presync_rc = fsync(d->presync_fd) ? errno : 0;
}

static void presync_done(uv_work_t *w, int status)
{
    psd_durable *d = w->data;
    (void)status;
    close(d->presync_fd);
    d->presync = 0;
    if (d->presync_rc && !d->stopping) {
        /* Said here: the kernel reports a writeback error once per open
         * file, and the rotation's fsync, through the same one, would
         * then succeed. As the rotation's failure was handled. */
        char why[160];
        snprintf(why, sizeof why, "fsync of journal segment %llu: %s",
                 (unsigned long long)psd_journal_seq(d->node->journal),
                 strerror(d->presync_rc));
        fsync_failed(d, why);
        not_started(d, why);
        if (past_size(d))
            uv_timer_start(&d->soon, on_size, RETRY_MS, 0);
        return;
    }
    if (d->stopping)
        return;                  /* the final snapshot follows */
    start_writer(d);
    /* One for the journal's size that could not start is tried again,
     * as on_size does. */
    if (!d->child && past_size(d))
        uv_timer_start(&d->soon, on_size, RETRY_MS, 0);
}

/* Starts the fsync of the journal's segment on the thread pool, whose end
 * then starts the snapshot: the rotation fsyncs the segment on the loop
 * (section 3 of docs/durability.md), which with fsync = no held all it
 * had written since the last snapshot, and with everysec up to a second
 * of it; after this one only what came meanwhile. fsync = always has
 * nothing unsynced. Returns whether it started. */
static int presync_start(psd_durable *d, psd_journal *j)
{
    if (d->stopping || d->fsync_mode == PSD_FSYNC_ALWAYS)
        return 0;
    /* What is written so far (each flush of replies writes the records
     * before them): what is still buffered, the rotation writes. */
    d->presync_fd = dup(psd_journal_fd(j));
    if (d->presync_fd < 0)
        return 0;
    d->presync = 1;
    d->presync_rc = 0;
    d->presync_start_ns = uv_hrtime();
    d->child_gen = d->st.generation + 1;   /* what psctl save waits for */
    d->presync_work.data = d;
    if (uv_queue_work(d->loop, &d->presync_work, presync_work,
                      presync_done)) {
        close(d->presync_fd);
        d->presync = 0;
        return 0;
    }
    return 1;
}

void psd_durable_save(psd_durable *d)
{
    d->asked = 1;
    psd_durable_snapshot(d);
}

void psd_durable_snapshot(psd_durable *d)
{
    if (d->child || d->presync)
        return;                  /* one at a time; its end reports */
    if (!d->node->journal || !presync_start(d, d->node->journal))
        start_writer(d);
}

/* In the forked writer: closes every descriptor from 3 up but a and b. */
static void close_all_but(int a, int b)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    if ((lo > 3 && close_range(3, (unsigned)lo - 1, 0)) ||
        (hi > lo + 1 && close_range((unsigned)lo + 1, (unsigned)hi - 1, 0)) ||
        close_range((unsigned)hi + 1, ~0u, 0)) {
        long max = sysconf(_SC_OPEN_MAX);   /* an old kernel */
        for (int fd = 3; fd < (max > 0 ? max : 65536); fd++)
            if (fd != a && fd != b)
                close(fd);
    }
}

/* What a snapshot of n takes at least: its rows' weights and a sparse
 * row's key, without updater state or headers. The room check's measure
 * for a first snapshot, which has no earlier size to go by, and for a
 * model that outgrew the last one. */
static uint64_t least_snapshot_bytes(const psd_node *n)
{
    uint64_t b = 0;
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *tc = psd_table_conf_get(n->tables[i]);
        b += psd_table_rows(n->tables[i]) *
             ((uint64_t)tc->dim * sizeof(float) + (tc->dense ? 0 : 8));
    }
    return b;
}

/* The snapshot itself: the journal's rotation, then the forked writer. */
static void start_writer(psd_durable *d)
{
    char err[1024];
    uint64_t seq = d->next_seq;
    psd_journal *j = d->node->journal;
    /* The writer works in this folder by its descriptor (dirfd): one put
     * at the path while it writes (a copy, a backup) must not get its
     * file (the rename by path put a half-copied image there, and save
     * said it was written). Opened before the rotation, whose new
     * segment is made by path. */
    int dirfd = -1, asked = d->asked;
    d->asked = 0;
    if (folder_ours(d, 0, asked, err, sizeof err) ||
        (dirfd = open_folder(d, err, sizeof err)) < 0) {
        /* (Removed, the journal refuses pushes by itself: its segment
         * has no link left.) */
        const char *foreign = folder_foreign(d);
        if (foreign)
            folder_refused(d, foreign);
        not_started(d, err);
        return;
    }
    /* Room for a file as large as the last snapshot (the image grows
     * with the rows; the old file goes only once the new one is whole),
     * or for the first one's rows at least. One that could not fit
     * filled the disk as it grew, and the journal on the same file
     * system could not be written meanwhile: pushes were refused until
     * the writer failed (a big-model trial). */
    struct statvfs vfs;
    uint64_t least = least_snapshot_bytes(d->node);
    /* The larger: a model that grew since the last snapshot (rows made
     * on first touch) needs more than that one took (a review). */
    int by_last = d->st.last_bytes >= least;
    uint64_t need = by_last ? d->st.last_bytes : least;
    if (need && fstatvfs(dirfd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        /* The node's own journal may be what filled it (a soak trial:
         * snapshot_journal_mb = 0 and 12 MB/s of pushes), and only a
         * snapshot cuts it back: said, with the setting that bounds it. */
        char jnote[300] = "";
        if (j && psd_journal_bytes(j) >= (uint64_t)1 << 20)
            snprintf(jnote, sizeof jnote, "; this node's journal holds "
                     "%.1f MiB of it since its last snapshot, which only a "
                     "snapshot cuts back (snapshot_journal_mb = %llu%s "
                     "starts one before the journal grows past it)",
                     (double)psd_journal_bytes(j) / (1 << 20),
                     (unsigned long long)d->node->cfg.snapshot_journal_mb,
                     d->node->cfg.snapshot_journal_mb ? "" : ", no bound: "
                     "a bound in MiB");
        snprintf(err, sizeof err, "%.300s has %.1f MiB free, and a "
                 "snapshot needs %s %.1f MiB there (%s): free space on "
                 "that file system%s", d->dir,
                 (double)vfs.f_bavail * vfs.f_frsize / (1 << 20),
                 by_last ? "about" : "at least", (double)need / (1 << 20),
                 by_last ? "the last one's size"
                         : "the weights of the rows it holds", jnote);
        close(dirfd);
        not_started(d, err);
        return;
    }
    /* The image covers the journal so far: later records go to a new
     * segment, which the snapshot says to replay from. */
    if (j) {
        int rc = rotate(d, j, err, sizeof err);
        if (rc == -2)
            fsync_failed(d, err);
        if (rc) {
            close(dirfd);
            not_started(d, err);
            return;
        }
        seq = psd_journal_seq(j);
        /* The rotation wrote what was buffered (records held while the
         * disk was full) and synced that segment: replies waiting for
         * those records may go. Nothing else would say so: the journal's
         * retry then finds nothing to write. */
        if (psd_journal_written(j) > d->node->durable_lsn) {
            d->node->durable_lsn = psd_journal_written(j);
            if (d->durable_moved)
                d->durable_moved(d->arg);
        }
    }
    int fds[2];
    if (pipe(fds)) {
        snprintf(err, sizeof err, "pipe: %s", strerror(errno));
        close(dirfd);
        not_started(d, err);
        return;
    }
    d->child_gen = d->st.generation + 1;
    d->child_seq = seq;
    d->child_changes = d->node->changes;
    d->child_start_ns = uv_hrtime();
    pid_t parent = getpid();
    pid_t pid = fork();
    int fork_errno = errno;
    if (pid == 0) {
        /* The child: a frozen image of the node. It touches no libuv
         * state and leaves with _exit. */
        /* Every inherited descriptor but the pipe goes: a writer that
         * outlives a killed psd must not hold its listening port (a
         * restart could not bind it) or its clients' sockets. */
        close_all_but(fds[1], dirfd);
        /* And it dies with psd: a writer that finished after a restart
         * would put an older image in place of the new psd's. Its
         * unfinished file is removed at the next start. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)     /* psd died before prctl */
            _exit(1);
        signal(SIGPIPE, SIG_IGN);
        /* Under a memory limit the pages the node writes meanwhile are
         * copied for the child: the kernel's OOM killer then takes the
         * writer, whose failure is logged and counted, rather than the
         * node (a memory trial: the serving psd was killed, without a
         * word). As Redis does for its background save. */
        int adj = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (adj >= 0) {
            ssize_t w = write(adj, "1000", 4);
            (void)w;
            close(adj);
        }
        int rc = psd_snapshot_write_at(d->node, dirfd, d->dir, d->child_gen,
                                       seq, NULL, err, sizeof err);
        if (rc) {
            ssize_t w = write(fds[1], err, strlen(err));
            (void)w;
        }
        if (rc == 0 && err[0]) {     /* written; the warning goes along */
            ssize_t w = write(fds[1], err, strlen(err));
            (void)w;
        }
        _exit(rc ? 1 : 0);
    }
    d->st.last_pause_ms = (double)(uv_hrtime() - d->child_start_ns) / 1e6;
    close(fds[1]);
    if (pid < 0) {
        snprintf(err, sizeof err, "fork: %s", strerror(fork_errno));
        close(fds[0]);
        close(dirfd);
        not_started(d, err);
        return;
    }
    d->child_dir = dirfd;        /* where a failed writer's file is */
    d->child = pid;
    /* Said at once (the ticks also set it): a stall right after the
     * fork is the pages pushes copy for the writer (psd_conns_tick). */
    d->node->writer_forked = 1;
    d->child_pipe = fds[0];
    psd_debug("snapshot %llu: writer %d started", (unsigned long long)d->child_gen,
              (int)pid);
}

/* A periodic tick on a node where nothing changed since the newest good
 * snapshot (one idle between jobs, or after training) would write the
 * same image again, a whole model's worth of disk every interval: the
 * snapshot on disk is current, and the tick says so instead (its age
 * starts over). After a failed snapshot, or with the journal waiting for
 * one (unbased), the tick takes one as before. */
int psd_durable_current(const psd_durable *d)
{
    char path[4200];
    struct stat st;
    psd_snapshot_path(path, sizeof path, d->dir, d->node->index);
    /* (The file is looked for: one an operator moved away is written
     * again; and in this node's folder: a snapshot at the path of a
     * folder put in its place is not this node's.) */
    return !d->child && !d->presync &&
           folder_state(d) == FOLDER_OURS &&
           d->saved_changes == d->node->changes &&
           !d->st.last_error[0] && !d->unbased && stat(path, &st) == 0;
}

static void on_interval(uv_timer_t *t)
{
    psd_durable *d = t->data;
    if (psd_durable_current(d)) {
        d->st.last_ok_ms = wall_ms();
        psd_debug("snapshot %llu is current (nothing changed since): the "
                  "periodic one is skipped",
                  (unsigned long long)d->st.generation);
        return;
    }
    psd_durable_snapshot(d);
}

/* Whether the journal segment being written has reached
 * snapshot_journal_mb (when set) and no writer runs: a snapshot is due. */
static int past_size(const psd_durable *d)
{
    const psd_journal *j = d->node->journal;
    uint64_t limit = (uint64_t)d->node->cfg.snapshot_journal_mb << 20;
    return j && limit && !d->child && psd_journal_bytes(j) >= limit;
}

/* A snapshot that could not even start leaves the journal in its segment
 * (the rotation failed: no descriptor, no room, an I/O error): it is
 * tried again in RETRY_MS, not at every write, while the segment is still
 * past the limit. */

static void on_size(uv_timer_t *t)
{
    psd_durable *d = t->data;
    psd_journal *j = d->node->journal;
    if (!past_size(d))
        return;
    uint64_t seq = psd_journal_seq(j);
    psd_info("journal segment %llu holds %.0f MiB (snapshot_journal_mb = "
             "%d): taking a snapshot", (unsigned long long)seq,
             (double)psd_journal_bytes(j) / (1 << 20),
             d->node->cfg.snapshot_journal_mb);
    psd_durable_snapshot(d);
    if (!d->child && !d->presync && psd_journal_seq(j) == seq)
        uv_timer_start(&d->soon, on_size, RETRY_MS, 0);
}

/* A journal segment that reached snapshot_journal_mb starts a snapshot,
 * which moves the journal to a new segment and, once written, deletes the
 * old ones: while snapshots succeed the journal cannot grow much past
 * that between two periodic ones (it could otherwise fill its disk, and
 * then no snapshot could start to cut it back, section 2 of
 * docs/durability.md), and a replay after a crash reads about that much
 * at most. From a timer, not from inside the write that noticed it (nor
 * before psd_durable_start is done: the timer is not set up yet); once
 * per segment: a writer that fails leaves a new segment, which starts
 * the next one when it is full in turn, and a snapshot that could not
 * start is retried by on_size. */
static void check_size(psd_durable *d)
{
    if (!d->started || !past_size(d) ||
        d->size_seq == psd_journal_seq(d->node->journal))
        return;
    d->size_seq = psd_journal_seq(d->node->journal);
    uv_timer_start(&d->soon, on_size, 0, 0);
}

/* Every WATCH_MS: a data folder removed, replaced or unreadable while
 * psd runs is seen within that, not at the next snapshot (minutes later,
 * or at the stop): a snapshot is tried at once, which says why it cannot
 * be written (replaced: pushes then wait with the journal), or, where
 * only the lock file went, locks the folder anew and is written there.
 * The folder put back is said, and its snapshot lets held pushes go.
 * Once per change of what is found: the periodic snapshots and psctl
 * save retry meanwhile. */
static void on_watch(uv_timer_t *t)
{
    psd_durable *d = t->data;
    if (d->child || d->presync || d->stopping)
        return;
    int st = folder_state(d), was = d->folder_seen;
    if (st == was)
        return;
    d->folder_seen = st;
    if (st != FOLDER_OURS) {
        psd_durable_snapshot(d);     /* says why it cannot be written */
        return;
    }
    /* The folder put back: pushes held for it go again once a snapshot
     * is written (as after psctl save). */
    psd_info("%s is this node's data folder again", d->dir);
    if (d->unbased || d->st.last_error[0])
        psd_durable_snapshot(d);     /* and its error goes */
}

static void arm_interval(psd_durable *d)
{
    int secs = d->node->cfg.snapshot_interval;
    if (secs > 0)
        uv_timer_start(&d->interval, on_interval, (uint64_t)secs * 1000,
                       (uint64_t)secs * 1000);
    else
        uv_timer_stop(&d->interval);
}

void psd_durable_reload(psd_durable *d)
{
    arm_interval(d);
}

/* ---- recovery --------------------------------------------------------- */

/* Removes the unfinished files of writers that died with an earlier psd
 * (psd-nodeN.snap.tmp.PID): under the lock, no writer of node's is
 * alive. And those of a psd --import or --reshard stopped while it wrote
 * (psd-nodeN.snap.staged.tmp.PID, 14-20 MB each in an operators' trial,
 * kept for good), whose process is gone: those do not take the lock. */
static void remove_stale_tmp(const char *dir, int node)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char prefix[64], staged[64];
    int plen = snprintf(prefix, sizeof prefix, "psd-node%d.snap.tmp", node);
    int slen = snprintf(staged, sizeof staged, "psd-node%d.snap.staged.tmp.",
                        node);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *who = "a snapshot writer that died";
        if (strncmp(e->d_name, staged, (size_t)slen) == 0) {
            char *end;
            long pid = strtol(e->d_name + slen, &end, 10);
            if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 ||
                errno != ESRCH)
                continue;        /* not ours, or its writer lives */
            who = "a psd --import or --reshard that was stopped";
        } else if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0)
            psd_info("removed %s, left by %s", path, who);
    }
    closedir(d);
}

/* Moves file `from` aside as FROM.skipped.T, or FROM.skipped.T.N when
 * an earlier --skip-snapshot in the same second took that name: rename()
 * would replace it, and files set aside are never to be lost. (The node's
 * lock keeps any other psd from naming files here meanwhile.) 0, or -1
 * with why. A file that is not there is no error. */
static int set_aside(const char *from, long t, char *err, size_t errlen)
{
    char to[4400];
    for (int k = 0; k < 1000; k++) {
        if (k)
            snprintf(to, sizeof to, "%s.skipped.%ld.%d", from, t, k);
        else
            snprintf(to, sizeof to, "%s.skipped.%ld", from, t);
        if (access(to, F_OK) == 0)
            continue;
        if (rename(from, to) == 0) {
            psd_warn("--skip-snapshot: %s moved to %s", from, to);
            return 0;
        }
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "--skip-snapshot: cannot move %s aside: %s",
                 from, strerror(errno));
        return -1;
    }
    snprintf(err, errlen, "--skip-snapshot: %s.skipped.%ld and 999 more "
             "names are taken", from, t);
    return -1;
}

/* Moves every file of node in dir aside, for --skip-snapshot, and makes
 * the moves durable: after a power cut the damaged files must not come
 * back under their own names. 0, or -1 with why: psd then does not start,
 * since replaying what could not be moved would not be what was asked. */
static int move_aside(const char *dir, int node, char *err, size_t errlen)
{
    char from[4200];
    long t = (long)time(NULL);
    psd_snapshot_path(from, sizeof from, dir, node);
    if (set_aside(from, t, err, errlen))
        return -1;
    /* A staged snapshot a cut-off --reshard or --import left: a start
     * refuses beside it, and --skip-snapshot means start empty. */
    psd_snapshot_staged_path(from, sizeof from, dir, node);
    if (set_aside(from, t, err, errlen))
        return -1;
    /* The head too: it names a segment of the history set aside. */
    snprintf(from, sizeof from, "%s/psd-node%d.journal.head", dir, node);
    if (set_aside(from, t, err, errlen))
        return -1;
    uint64_t s, prev = 0;
    while ((s = psd_journal_first(dir, node)) != 0) {
        psd_journal_path(from, sizeof from, dir, node, s);
        if (s == prev) {         /* listed, yet gone when moved */
            snprintf(err, errlen, "--skip-snapshot: cannot move %s aside",
                     from);
            return -1;
        }
        if (set_aside(from, t, err, errlen))
            return -1;
        prev = s;
    }
    if (psd_fsync_dir(dir)) {
        snprintf(err, errlen, "--skip-snapshot: fsync of %s: %s", dir,
                 strerror(errno));
        return -1;
    }
    return 0;
}

/* Says how a snapshot taken under other tables met the config's. */
static void log_new_tables(const psd_node *n, const psd_snap_tables *tm)
{
    psd_warn("the snapshot was taken under other tables: its %u tables are "
             "matched to the config's %d by name%s%s%s%s%s",
             tm->nmap, n->ntables,
             tm->added ? "; new, starting from their init: " : "",
             tm->added_names,
             tm->dropped ? "; dropped (--drop-table): " : "",
             tm->dropped_names,
             tm->added || tm->dropped ? "" : " (only their order changed)");
}

/* A snapshot written by this process (not a forked writer): at start
 * for new tables, at stop for the final one. It covers the segments below
 * seq, which it removes unless the folder's fsync failed (then err says
 * so and the call still returns 0, as psd_snapshot_write does). 0, or -1
 * with err when no snapshot was written. Logged as "WHAT G OF written". */
static int write_here(psd_durable *d, uint64_t seq, const char *what,
                      const char *of, char *err, size_t errlen)
{
    uint64_t t0 = uv_hrtime();
    psd_snap_info si;
    /* In the folder checked, by its descriptor, as the forked writer: a
     * stop writes a whole model, and a folder moved to the path meanwhile
     * (a copy) must not get it. */
    int dirfd = open_folder(d, err, errlen);
    if (dirfd < 0)
        return -1;
    int rc = psd_snapshot_write_at(d->node, dirfd, d->dir,
                                   d->st.generation + 1, seq, &si, err,
                                   errlen);
    close(dirfd);
    if (rc)
        return -1;
    d->st.generation = si.generation;
    d->st.snapshots++;
    d->st.last_ok_ms = si.created_ms;
    d->st.last_seconds = since_s(t0);
    d->st.last_bytes = si.bytes;
    if (!err[0]) {
        d->saved_changes = d->node->changes;
        if (folder_state(d) == FOLDER_OURS)
            psd_journal_prune(d->dir, d->node->index, seq);
    }
    psd_info("%s %llu%s written: %.1f MiB in %.2f s", what,
             (unsigned long long)si.generation, of,
             (double)si.bytes / (1 << 20), since_s(t0));
    return 0;
}

/* After a start that met other tables: a snapshot of the node as it now
 * is, covering every segment up to (not including) next, so that the
 * files left are all of the new tables. 0, or -1 with the reason in err
 * (a start that cannot write it must not serve: its journal would follow
 * segments of the old tables). */
uint64_t psd_durable_replay_shape(const char *dir, int node,
                                  const psd_config *cfg,
                                  const psd_snap_info *si, int *of_0_1)
{
    if (si) {
        *of_0_1 = si->of_0_1;
        return si->shape;
    }
    return psd_journal_shape(dir, node, psd_config_shape(cfg),
                             psd_config_shape_0_1(cfg), of_0_1);
}

static int rebase(psd_durable *d, uint64_t next, char *err, size_t errlen)
{
    char why[1024];
    /* New tables, or a psd 0.1 file's shape (psd_durable_start). */
    const char *of = d->retabled == 2 ? " of this release"
                                      : " of the new tables";
    psd_notify("STATUS=node %d: writing a snapshot%s", d->node->index, of);
    if (write_here(d, next, "snapshot", of, why, sizeof why)) {
        snprintf(err, errlen, "a snapshot%s: %s (the files %s are kept; psd "
                 "reads them again at the next start)", of, why,
                 d->retabled == 2 ? "psd 0.1 wrote" : "of the old ones");
        return -1;
    }
    if (why[0]) {
        /* In place, but a power loss could take the rename back: psd does
         * not go on to write segments after it. */
        snprintf(err, errlen, "a snapshot%s was written, but %s (the next "
                 "start reads it, and the segments it covers are kept)", of,
                 why);
        return -1;
    }
    return 0;
}

static void lock_path(char *buf, size_t len, const char *dir, int index)
{
    snprintf(buf, len, "%s/psd-node%d.lock", dir, index);
}

long psd_durable_holder(const char *dir, int index)
{
    char lock[4200];
    lock_path(lock, sizeof lock, dir, index);
    int fd = open(lock, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? -1 : -2;
    /* Only looked at: taking the lock, even for a moment, could make a
     * psd starting then give up ("another psd is running"). psd holds an
     * OFD lock beside its flock (psd_durable_lock), which F_OFD_GETLK
     * reports without taking it, on any file system and from any PID
     * namespace (/proc/locks may show neither). */
    struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
    if (fcntl(fd, F_OFD_GETLK, &fl)) {
        close(fd);
        return -2;
    }
    int held = fl.l_type != F_UNLCK;
    /* The holder wrote its pid into the file (psd_durable_lock): a pid
     * found by inode in /proc/locks could be another file system's. */
    char buf[32] = "";
    ssize_t n = held ? pread(fd, buf, sizeof buf - 1, 0) : 0;
    close(fd);
    if (!held)
        return -1;
    buf[n > 0 ? n : 0] = '\0';
    long pid = strtol(buf, NULL, 10);
    return pid > 0 ? pid : 0;
}

int psd_durable_lock(psd_durable *d, uv_loop_t *loop, psd_node *n,
                     void (*durable_moved)(void *), void *arg, char *err,
                     size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->loop = loop;
    d->node = n;
    d->saved_changes = UINT64_MAX;
    d->fsync_mode = n->cfg.fsync;
    d->log = n->cfg.durability == PSD_DUR_LOG;
    d->durable_moved = durable_moved;
    d->arg = arg;
    d->child_pipe = -1;
    d->child_dir = -1;
    psd_config_data_dir(&n->cfg, d->dir, sizeof d->dir);
    /* For tests: a disk whose fsync stalls (on the pool's thread). */
    const char *knob = getenv("PSD_TEST_FSYNC_DELAY_MS");
    d->test_fsync_delay_ms = knob ? atoi(knob) : 0;
    /* One psd per node and folder: a second one started by mistake must
     * not recover (cut a torn tail, start a segment) under the first. */
    char lock[4200];
    lock_path(lock, sizeof lock, d->dir, n->index);
    d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (d->lock_fd < 0) {
        snprintf(err, errlen, "%s: %s", lock, strerror(errno));
        return -1;
    }
    if (take_lock(d->lock_fd, lock, n->index, err, errlen)) {
        close(d->lock_fd);
        d->lock_fd = -1;
        return -1;
    }
    struct stat dir;
    d->dir_dev = stat(d->dir, &dir) == 0 ? (uint64_t)dir.st_dev : 0;
    remove_stale_tmp(d->dir, n->index);
    return 0;
}

int psd_durable_start(psd_durable *d, const psd_start_opts *opts, char *err,
                      size_t errlen)
{
    psd_node *n = d->node;
    uv_loop_t *loop = d->loop;
    /* --skip-snapshot: nothing is read, and the files are moved aside by
     * psd_durable_open, once psd is sure to serve. */
    d->skip = opts->skip_snapshot;
    uint64_t t0 = uv_hrtime();
    psd_notify("STATUS=node %d: loading its snapshot from %s", n->index,
               d->dir);
    /* Said before, too: a large model takes seconds to load, and an
     * operator outside systemd saw nothing until it had (a big-model
     * trial: 6 s for 2.4 GiB). */
    char snap_path[4200];
    struct stat snap_st;
    psd_snapshot_path(snap_path, sizeof snap_path, d->dir, n->index);
    int have_snap = !d->skip && stat(snap_path, &snap_st) == 0;
    char why[600];
    /* Not with --drop-table: the tables dropped are read past, not
     * loaded, and their share of the file is not known here (a review:
     * a 64 MiB snapshot whose 63 MiB table was dropped loaded in 4 MB). */
    if (have_snap && opts->ndrop == 0 &&
        !psd_snapshot_fits((uint64_t)snap_st.st_size, why, sizeof why)) {
        /* Said before the load, not after the kill: the log's last line
         * was "loading snapshot" (a memory trial). */
        snprintf(err, errlen, "node %d's snapshot %s cannot load here: %s "
                 "(a table the ini no longer has is not loaded with "
                 "--drop-table NAME; --skip-snapshot would start the node "
                 "empty, its files set aside)", n->index, snap_path, why);
        return -1;
    }
    if (have_snap && snap_st.st_size >= (off_t)64 << 20)
        psd_info("loading snapshot %s (%.1f MiB)", snap_path,
                 (double)snap_st.st_size / (1 << 20));
    psd_snap_info si = { 0 };
    psd_snap_tables tm = { .drop = opts->drop, .ndrop = opts->ndrop };
    int rc = d->skip ? 1 : psd_snapshot_load(n, d->dir, uv_now(loop), &si,
                                             &tm, err, errlen);
    if (rc < 0)
        return -1;
    int rc_snap = rc;
    if (rc == 0) {
        d->st.generation = si.generation;
        d->st.last_ok_ms = si.created_ms;
        d->st.last_bytes = si.bytes;
        psd_info("loaded snapshot %llu of %s (%.1f MiB) in %.2f s",
                 (unsigned long long)si.generation, d->dir,
                 (double)si.bytes / (1 << 20), since_s(t0));
        /* After an upgrade: an older psd refuses this node's next
         * snapshot (and may refuse its journal's newer records sooner:
         * docs/durability.md), which is the time to know it. */
        if (si.version < PSD_SNAPSHOT_VERSION)
            psd_info("that snapshot is of format %u, an older psd's: this "
                     "node's next one is of format %d, which a psd before "
                     PSD_SNAPSHOT_SINCE " refuses, as it does the journal's "
                     "records of workers this psd writes from now on, even "
                     "before that snapshot (keep a copy of %s if you may go "
                     "back)",
                     si.version, PSD_SNAPSHOT_VERSION, d->dir);
    } else if (d->skip)
        psd_info("--skip-snapshot: starting from the initial values; the "
                 "files in %s are set aside once this node listens", d->dir);
    else if (!psd_journal_first(d->dir, n->index))
        psd_info("no snapshot in %s: starting from the initial values",
                 d->dir);
    else
        /* The replay says whether it may (a journal from segment 1), or
         * refuses: "starting from the initial values" then said the
         * opposite of what happened. */
        psd_info("no snapshot in %s: replaying the journal onto the "
                 "initial values", d->dir);
    if (tm.map)
        log_new_tables(n, &tm);
    /* The files of psd 0.1, whose shape covered no updater nor
     * consistency mode (node.h): a snapshot of this release is written
     * before this one's journal goes on. */
    int of_0_1;
    uint64_t jshape = psd_durable_replay_shape(d->dir, n->index, &n->cfg,
                                               rc == 0 ? &si : NULL, &of_0_1);
    if (of_0_1 && !d->skip)
        psd_warn("the %s in %s was %s by psd 0.1, which kept no table's "
                 "updater nor consistency mode: each one's is taken from the "
                 "ini; a snapshot of this release is written before the "
                 "journal goes on", rc == 0 ? "snapshot" : "journal", d->dir,
                 rc == 0 ? "written" : "begun");
    /* A name that matched nothing is most likely a typo'd one: the table
     * meant, if the snapshot holds it, refuses the start by itself. */
    for (int i = 0; i < opts->ndrop; i++)
        if (!(tm.drop_used >> i & 1))
            psd_warn("--drop-table %s: %s: nothing dropped for it",
                     opts->drop[i], rc == 0 ? "the snapshot holds no table "
                     "of that name" : d->skip ? "--skip-snapshot reads no "
                     "snapshot" : "there is no snapshot");
    /* Segments before the snapshot's are covered by it (a crash may have
     * come between its rename and their removal). */
    if (rc == 0)
        psd_journal_prune(d->dir, n->index, si.journal_seq);
    uint64_t next = si.journal_seq ? si.journal_seq : 1, records = 0;
    uint64_t from = next, t1 = uv_hrtime();
    /* Said only where there is one (durability = snapshot keeps none,
     * unless an earlier run with a journal left segments). */
    if (!d->skip && psd_journal_first(d->dir, n->index)) {
        psd_notify("STATUS=node %d: replaying its journal from segment %llu",
                   n->index, (unsigned long long)next);
        psd_info("replaying the journal from segment %llu",
                 (unsigned long long)next);
    }
    /* The segments after a snapshot were written under its tables. */
    psd_replay_ctx ctx = { n, uv_now(loop), tm.map, tm.nmap, 0 };
    char cut[4400];
    cut[0] = '\0';
    int unknown_before = psd_sync_unknown(&n->sync);
    rc = d->skip ? 0
                 : psd_journal_replay(d->dir, n->index, jshape,
                                      tm.map ? 0 : n->inits, next,
                                      (size_t)n->cfg.max_frame + 4096,
                                      psd_request_replay, &ctx, &next,
                                      &records, cut, sizeof cut, err,
                                      errlen);
    int retabled = tm.map ? 1 : of_0_1 && !d->skip ? 2 : 0;
    free(tm.map);
    if (rc)
        return -1;
    if (cut[0])
        psd_warn("journal: %s", cut);
    /* Records of an older psd (a journal with no snapshot, or none of
     * its job's) made workers unknown that the load did not say. */
    if (!unknown_before)
        psd_sync_say_unknown(&n->sync);
    /* A snapshot written under durability = log names the segment its
     * rotation made (and fsync'd into the folder) before the image was
     * taken, always 2 or more, so that segment is there unless someone
     * took it: the pushes acknowledged since then are gone, and nothing
     * else would say so (a replay of no segment at all is an empty one).
     * Snapshots written by psd --reshard, and under durability = snapshot
     * in a folder that had held a journal, name a segment that was never
     * made: after those this is said once, harmlessly (psd --import's, and
     * those of a folder that never held a journal, name segment 1: never
     * said). The head file cannot tell such a snapshot from a real loss:
     * it is written as each segment is made, but best effort, and a data
     * folder restored with an older one names an older segment (passed
     * over on its word, a loss went unsaid: a review). A start whose
     * tables changed writes its snapshot just before the journal makes
     * that segment: a crash in between says it too. */
    int said = 0;
    if (rc_snap == 0 && !d->skip && n->cfg.durability == PSD_DUR_LOG &&
        si.journal_seq >= 2 &&
        !psd_journal_has(d->dir, n->index, si.journal_seq)) {
        said = 1;
        char path[4200];
        psd_journal_path(path, sizeof path, d->dir, n->index,
                         si.journal_seq);
        psd_warn("journal: %s is missing, the segment snapshot %llu says "
                 "the pushes after it are in: if this node ran with "
                 "durability = log when that snapshot was written, the "
                 "pushes it acknowledged since are lost (a file removed, a "
                 "data folder restored without its journal); on the first "
                 "start on a snapshot psd --reshard wrote, or after a "
                 "switch from durability = snapshot, this is expected",
                 path, (unsigned long long)si.generation);
    }
    /* The newest segment this node made is gone, and every one the
     * replay read came before it: the listing alone cannot tell (the
     * next segment made takes its number), so the head says which was
     * made last (psd_journal_lost_head). */
    uint64_t head = said || d->skip
                        ? 0
                        : psd_journal_lost_head(d->dir, n->index, from,
                                                rc_snap == 0 ? si.created_ms
                                                             : 0);
    if (head) {
        char path[4200];
        psd_journal_path(path, sizeof path, d->dir, n->index, head);
        psd_warn("journal: %s is missing, the newest segment this node "
                 "made (psd-node%d.journal.head says so): the pushes it "
                 "acknowledged%s are lost (a file removed, a data folder "
                 "restored without its last segment)", path, n->index,
                 next > from      ? " after the segments replayed"
                 : rc_snap == 0   ? " since the snapshot"
                                  : "");
    }
    if (ctx.skipped)
        psd_info("journal: %llu pushes to dropped tables skipped",
                 (unsigned long long)ctx.skipped);
    psd_request_replayed(n, ctx.now_ms);
    d->st.journal_records = records;
    /* The replay left each table with the hyper-parameters of the last
     * reload it met; from now on the ini's hold. */
    psd_node_apply_params(n);
    /* Without a journal of its own (durability = snapshot), a snapshot
     * covers every segment replayed here: it says so by naming the next
     * one, and the old ones are removed after it. */
    d->next_seq = next;
    if (records)
        psd_info("replayed %llu journal records in %.2f s",
                 (unsigned long long)records, since_s(t1));
    /* Who the node waits for now, from the snapshot and the journal's
     * WORKER records (which the count above leaves out): until a client
     * reconnects, the log said nothing of them. */
    int k[PSD_W_LEFT + 1];
    (void)psd_sync_count(&n->sync, k);
    if (k[PSD_W_GONE] || k[PSD_W_LEFT])
        psd_info("workers as loaded: clock %llu; %d lost (each waited for "
                 "worker_grace, %d s, from now), %d left, %d not joined",
                 (unsigned long long)n->sync.clock, k[PSD_W_GONE],
                 n->cfg.worker_grace, k[PSD_W_LEFT], k[PSD_W_ABSENT]);
    d->st.recovery_seconds = since_s(t0);
    d->retabled = retabled;
    /* A snapshot loaded whole, with no record replayed onto it and its
     * tables as the ini has them, is the node as it now is: a stop or a
     * periodic tick with nothing changed since wrote it again, a whole
     * model's write at every restart (an operators' trial: 763 MiB at
     * each stop of an idle node). Not past a few segments after it: each
     * start under durability = log makes one (its start records only),
     * and idle restarts piled them up with nothing to prune them, psctl
     * save finding the snapshot current (a review). */
    if (rc_snap == 0 && !records && !retabled && next - from < 4)
        d->saved_changes = n->changes;
    return 0;
}

int psd_durable_open(psd_durable *d, char *err, size_t errlen)
{
    psd_node *n = d->node;
    uv_loop_t *loop = d->loop;
    uint64_t next = d->next_seq;
    /* Files under the old tables must not meet records under the new:
     * a snapshot of the new tables covers them all before the journal
     * goes on. Until it is written the old files stay whole, so a crash
     * here starts over from them. */
    if (d->retabled && rebase(d, next, err, errlen))
        return -1;
    d->retabled = 0;
    if (d->skip && move_aside(d->dir, n->index, err, errlen))
        return -1;
    d->skip = 0;
    if (d->log) {
        n->journal = psd_journal_open(d->dir, n->index, n->shape, n->inits,
                                      next, err, errlen);
        if (!n->journal)
            return -1;
        n->written = on_written;
        n->written_arg = d;
        /* The start record of the new segment goes to disk now, with the
         * hyper-parameters the pushes to come are applied with (the ini's,
         * which the start applied already: no change). */
        if (psd_node_apply_params(n) || psd_node_commit(n)) {
            snprintf(err, errlen, "cannot write the journal in %s: %s",
                     d->dir, n->journal_error);
            return -1;
        }
        d->fsync_lsn = psd_journal_written(n->journal);
        n->durable_lsn = d->fsync_lsn;
    }
    uv_timer_init(loop, &d->everysec);
    d->everysec.data = d;
    if (d->log && d->fsync_mode == PSD_FSYNC_EVERYSEC)
        uv_timer_start(&d->everysec, on_everysec, 1000, 1000);
    uv_timer_init(loop, &d->interval);
    d->interval.data = d;
    arm_interval(d);
    uv_timer_init(loop, &d->soon);
    d->soon.data = d;
    uv_timer_init(loop, &d->watch);
    d->watch.data = d;
    uv_timer_start(&d->watch, on_watch, WATCH_MS, WATCH_MS);
    uv_signal_init(loop, &d->sigchld);
    d->sigchld.data = d;
    uv_signal_start(&d->sigchld, on_sigchld, SIGCHLD);
    d->started = 1;
    return 0;
}

int psd_durable_final(psd_durable *d, char *err, size_t errlen)
{
    if (!d->started)
        return 0;
    if (d->child) {
        /* Its result counts: the final snapshot comes after it. */
        int st;
        waitpid(d->child, &st, 0);
        char text[256] = "";
        ssize_t k = read(d->child_pipe, text, sizeof text - 1);
        text[k > 0 ? k : 0] = '\0';
        close(d->child_pipe);
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        child_done(d, ok, ok || text[0] ? text : "the writer died");
    }
    if (psd_durable_current(d)) {
        /* Nothing changed since the newest good snapshot (an idle node,
         * or one stopped as its periodic writer finished): writing the
         * same image again would only make the stop take as long as a
         * whole model's write. */
        psd_info("final snapshot not needed: snapshot %llu is current "
                 "(nothing changed since)",
                 (unsigned long long)d->st.generation);
        return 0;
    }
    psd_node *n = d->node;
    uint64_t seq = d->next_seq;
    if (folder_ours(d, 1, 0, err, errlen))
        return -2;
    if (n->journal) {
        int rc = rotate(d, n->journal, err, errlen);
        if (rc == -2)
            fsync_failed(d, err);
        if (rc)
            return -1;
        seq = psd_journal_seq(n->journal);
    }
    if (write_here(d, seq, "final snapshot", "", err, errlen))
        return -1;
    if (d->unbased)
        psd_journal_hold(n->journal, NULL);
    d->unbased = 0;
    if (err[0])
        psd_warn("final snapshot: %s; the journal it covers is kept", err);
    return 0;
}

void psd_durable_stop(psd_durable *d)
{
    if (!d->started)
        return;
    d->stopping = 1;
    uv_close((uv_handle_t *)&d->everysec, NULL);
    uv_close((uv_handle_t *)&d->interval, NULL);
    uv_close((uv_handle_t *)&d->soon, NULL);
    uv_close((uv_handle_t *)&d->watch, NULL);
    uv_close((uv_handle_t *)&d->sigchld, NULL);
}
