/* The journal: records buffered, written, rotated and replayed; see
 * journal.h. A record is a u32 body length, a u32 CRC32C of the body, a
 * u32 CRC32C of those 8 bytes (so a damaged length is told from a record
 * cut short by a crash), then the body (little-endian, unpadded):
 *   push:  u8 1, u8 op, i16 status, u32 part, u64 client_id,
 *          u64 incarnation, u64 ts, u32 table, u64 first, u64 count,
 *          u64 keys, u32 value bytes, the keys (8 each), the values
 *   clock: u8 2, u8 0, u16 0, u32 workers waited for, u64 clock
 *   start: u8 3, u24 inits, u32 node, u64 layout shape (the first
 *          record of every segment; inits: psd_config_inits, 0 from a
 *          psd before it was written)
 *   params: u8 4, u8 0, u16 0, u32 table, f32 lr, beta1, beta2, epsilon,
 *          l1, l2, beta (after a reload changed them, and after the start
 *          record of every segment, one per table)
 *   worker: u8 5, u8 joined (1) or left (0), u16 0, u32 worker,
 *          u64 client_id, u64 clock, u64 barrier
 *   ack:   u8 6, u8 0, u16 0, u32 0, u64 client_id, u64 incarnation,
 *          u64 mark */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "journal.h"
#include "readdir.h"
#include "../proto/frame.h"

#define HDR 12                   /* record header: length and two CRCs */
#define PUSH_FIXED 64            /* a push body before its keys */
#define CLOCK_BODY 16
#define START_BODY 16
#define PARAMS_BODY 36
#define WORKER_BODY 80
#define WORKER_BODY_OLD 32       /* without the clients refused for good */
#define WORKER_BODY_040 72       /* psd 0.4.0's: without lost and unknown,
                                    read as an older psd's (sync.h) */
#define ACK_BODY 32
/* What an inits mismatch means: the rows a push record makes (a dense
 * table's at start, a sparse key's first push) start from the ini's init
 * and seed, and the records were made on top of other ones. */
#define INITS_HINT                                                          \
    ": a table's init or seed changed in the ini since (rows made now "     \
    "would start from the new values). Put back those of then (the log of " \
    "the run that wrote it names them at its start, with that mark; a "     \
    "table not named there starts from zeros), start psd and stop it (its " \
    "final snapshot holds every row), then change them"
/* The refusal of a push made on other inits, for the replay and the
 * check alike. */
static void other_inits(char *err, size_t errlen, const char *path,
                        uint64_t off, uint32_t made_on, uint32_t inits)
{
    snprintf(err, errlen, "%s: offset %llu: this push was journaled on rows "
             "made with other inits (mark %06x, this ini's %06x)%s", path,
             (unsigned long long)off, (unsigned)made_on, (unsigned)inits,
             INITS_HINT);
}

/* What a shape mismatch means, since the shape itself is only a hash. */
#define SHAPE_HINT                                                           \
    " (the shape covers the node count, shards and each table's name, "     \
    "kind, dim, rows, updater and consistency: one of them changed in the " \
    "ini since; restore it. Tables are matched by name only from a "        \
    "snapshot: to add, move or drop tables, start once with the old ini "   \
    "and stop it, which writes one)"

struct psd_journal {
    char dir[4096];
    int node;
    uint64_t shape;
    uint32_t inits;
    uint64_t seq;
    int fd;
    char *buf;                   /* records not yet written */
    size_t used, cap;
    uint64_t last, written;      /* LSNs */
    uint64_t bytes;              /* written to this segment */
    psd_updater_params *params;  /* per table, as last recorded */
    uint32_t nparams;            /* tables recorded: 0..nparams-1 */
    char hold[200];              /* why writes wait (psd_journal_hold) */
};

void psd_journal_path(char *buf, size_t len, const char *dir, int node,
                      uint64_t seq)
{
    snprintf(buf, len, "%s/psd-node%d.journal.%010llu", dir, node,
             (unsigned long long)seq);
}

static uint64_t start_record(psd_journal *j);
static uint64_t params_record(psd_journal *j, uint32_t table);

/* "DIR/psd-nodeN.journal.head": the newest segment this node made and
 * when (wall clock, ms), in decimal. Segments are found by listing the
 * folder, which cannot tell that the newest one is gone: the next start
 * makes a segment of that number again, and what it held was lost unsaid
 * (an operators' trial moved it aside). Written in place and not
 * fsync'd: a write lost in a crash names an older segment, which only
 * leaves a loss unsaid. */
static void head_path(char *buf, size_t len, const char *dir, int node)
{
    snprintf(buf, len, "%s/psd-node%d.journal.head", dir, node);
}

#define HEAD_BYTES 42            /* "%020llu %020llu\n" */

static void write_head(const char *dir, int node, uint64_t seq)
{
    char path[4200], text[HEAD_BYTES + 1];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t ms = (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
    head_path(path, sizeof path, dir, node);
    int len = snprintf(text, sizeof text, "%020llu %020llu\n",
                       (unsigned long long)seq, (unsigned long long)ms);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;                  /* the journal goes on; a loss unsaid */
    (void)!pwrite(fd, text, (size_t)len, 0);
    close(fd);
}

/* The 20 digits at p, or UINT64_MAX when they are not. */
static uint64_t digits20(const char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (p[i] < '0' || p[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return UINT64_MAX;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    return v;
}

/* What node's head file in dir says: the newest segment made (*seq) and
 * when (*ms, wall clock). 0, or -1 when it is absent or unreadable. */
static int read_head(const char *dir, int node, uint64_t *seq, uint64_t *ms)
{
    char path[4200], text[HEAD_BYTES + 8];
    head_path(path, sizeof path, dir, node);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    if (n != HEAD_BYTES || text[20] != ' ' || text[41] != '\n')
        return -1;
    *seq = digits20(text);
    *ms = digits20(text + 21);
    return *seq == UINT64_MAX || *ms == UINT64_MAX ? -1 : 0;
}

uint64_t psd_journal_lost_head(const char *dir, int node, uint64_t from,
                               uint64_t snap_ms)
{
    uint64_t seq, ms;
    if (read_head(dir, node, &seq, &ms) || seq < from ||
        ms <= snap_ms || psd_journal_has(dir, node, seq))
        return 0;
    return seq;
}

void psd_journal_say_lost(const char *tool, const char *dir, int node,
                          uint64_t from, uint64_t snap_ms)
{
    uint64_t head = psd_journal_lost_head(dir, node, from, snap_ms);
    if (!head)
        return;
    char path[4200];
    psd_journal_path(path, sizeof path, dir, node, head);
    fprintf(stderr, "psd %s: node %d: %s is missing, the newest segment it "
            "made (psd-node%d.journal.head says so): the pushes it "
            "acknowledged in it are not here\n", tool, node, path, node);
}

static int open_segment(psd_journal *j, uint64_t seq, char *err,
                        size_t errlen)
{
    char path[4200];
    psd_journal_path(path, sizeof path, j->dir, j->node, seq);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    j->bytes = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    j->fd = fd;
    j->seq = seq;
    if (j->bytes == 0) {
        /* The new file's name must survive a crash of the host too, or
         * the records acknowledged in it go with it: a folder that cannot
         * be opened (no descriptor left) or synced fails the segment, as
         * its own file would (the empty file is taken again next time).
         * EINVAL: a file system that syncs no folders. */
        int dfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || (fsync(dfd) && errno != EINVAL)) {
            int e = errno;
            snprintf(err, errlen, "cannot make %s's name durable: %s of %s: "
                     "%s", path, dfd < 0 ? "open" : "fsync", j->dir,
                     strerror(e));
            if (dfd >= 0)
                close(dfd);
            close(fd);
            return -1;
        }
        close(dfd);
        /* Then the head names it: never a segment whose name could be
         * lost (psd_journal_lost_head). */
        write_head(j->dir, j->node, seq);
        /* A new segment says which node and layout its records belong
         * to. */
        int ok = start_record(j) != 0;
        for (uint32_t t = 0; ok && t < j->nparams; t++)
            ok = params_record(j, t) != 0;
        if (!ok) {
            snprintf(err, errlen, "out of memory");
            close(fd);
            return -1;
        }
    }
    return 0;
}

psd_journal *psd_journal_open(const char *dir, int node, uint64_t shape,
                              uint32_t inits, uint64_t seq, char *err,
                              size_t errlen)
{
    psd_journal *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    j->node = node;
    j->shape = shape;
    j->inits = inits & 0xffffff;
    if (open_segment(j, seq, err, errlen)) {
        free(j);
        return NULL;
    }
    return j;
}

void psd_journal_close(psd_journal *j)
{
    if (!j)
        return;
    char err[64];
    psd_journal_write(j, err, sizeof err);
    close(j->fd);
    free(j->buf);
    free(j->params);
    free(j);
}

/* Room for n more bytes in the buffer; NULL when memory runs out. */
static char *reserve(psd_journal *j, size_t n)
{
    if (j->cap - j->used < n) {
        size_t cap = j->cap ? j->cap : 1 << 16;
        while (cap - j->used < n)
            cap *= 2;
        char *b = realloc(j->buf, cap);
        if (!b)
            return NULL;
        j->buf = b;
        j->cap = cap;
    }
    char *p = j->buf + j->used;
    j->used += n;
    return p;
}

/* Fills in a record's length and CRC once its body is in place. */
static uint64_t seal(psd_journal *j, char *rec, size_t body)
{
    uint32_t len = (uint32_t)body, crc = psw_crc32c(0, rec + HDR, body);
    memcpy(rec, &len, 4);
    memcpy(rec + 4, &crc, 4);
    crc = psw_crc32c(0, rec, 8);
    memcpy(rec + 8, &crc, 4);
    return ++j->last;
}

uint64_t psd_journal_push(psd_journal *j, uint64_t client_id,
                          uint64_t incarnation, const psw_msg *m, int status)
{
    size_t kb = 8 * m->nkeys, body = PUSH_FIXED + kb + m->vals_len;
    char *rec = reserve(j, HDR + body);
    if (!rec)
        return 0;
    char *b = rec + HDR;
    uint8_t type = PSD_J_PUSH, op = (uint8_t)m->op;
    int16_t st = (int16_t)status;
    uint64_t nkeys = m->nkeys;
    uint32_t vlen = (uint32_t)m->vals_len;
    memcpy(b, &type, 1);
    memcpy(b + 1, &op, 1);
    memcpy(b + 2, &st, 2);
    memcpy(b + 4, &m->part, 4);
    memcpy(b + 8, &client_id, 8);
    memcpy(b + 16, &incarnation, 8);
    memcpy(b + 24, &m->ts, 8);
    memcpy(b + 32, &m->table, 4);
    memcpy(b + 36, &m->first, 8);
    memcpy(b + 44, &m->count, 8);
    memcpy(b + 52, &nkeys, 8);
    memcpy(b + 60, &vlen, 4);       /* a value BIN is at most max_frame */
    if (kb)
        memcpy(b + PUSH_FIXED, m->keys, kb);
    if (m->vals_len)
        memcpy(b + PUSH_FIXED + kb, m->vals, m->vals_len);
    return seal(j, rec, body);
}

/* Room for a fixed-size record of `body` bytes: its body, zeroed, with
 * its type in the first byte; NULL when memory runs out. End it with
 * end_fixed. Every record but PUSH has a fixed size. */
static char *begin_fixed(psd_journal *j, int type, size_t body)
{
    char *rec = reserve(j, HDR + body);
    if (!rec)
        return NULL;
    memset(rec + HDR, 0, body);
    rec[HDR] = (char)type;
    return rec + HDR;
}

static uint64_t end_fixed(psd_journal *j, char *b, size_t body)
{
    return seal(j, b - HDR, body);
}

static uint64_t start_record(psd_journal *j)
{
    char *b = begin_fixed(j, PSD_J_START, START_BODY);
    if (!b)
        return 0;
    uint32_t node = (uint32_t)j->node;
    b[1] = (char)(j->inits & 0xff);
    b[2] = (char)(j->inits >> 8 & 0xff);
    b[3] = (char)(j->inits >> 16 & 0xff);
    memcpy(b + 4, &node, 4);
    memcpy(b + 8, &j->shape, 8);
    return end_fixed(j, b, START_BODY);
}

uint64_t psd_journal_clock(psd_journal *j, uint64_t clock, uint32_t waited)
{
    char *b = begin_fixed(j, PSD_J_CLOCK, CLOCK_BODY);
    if (!b)
        return 0;
    memcpy(b + 4, &waited, 4);
    memcpy(b + 8, &clock, 8);
    return end_fixed(j, b, CLOCK_BODY);
}

uint64_t psd_journal_ack(psd_journal *j, uint64_t client_id,
                         uint64_t incarnation, uint64_t mark)
{
    char *b = begin_fixed(j, PSD_J_ACK, ACK_BODY);
    if (!b)
        return 0;
    memcpy(b + 8, &client_id, 8);
    memcpy(b + 16, &incarnation, 8);
    memcpy(b + 24, &mark, 8);
    return end_fixed(j, b, ACK_BODY);
}

uint64_t psd_journal_worker(psd_journal *j, int32_t worker, int joined,
                            int closed, uint64_t client_id, uint64_t clock,
                            uint64_t barrier,
                            const uint64_t replaced[PSD_J_REPLACED],
                            unsigned ended_mask, uint64_t lost_id,
                            int unknown)
{
    char *b = begin_fixed(j, PSD_J_WORKER, WORKER_BODY);
    if (!b)
        return 0;
    b[1] = (char)(joined != 0);
    /* In what was padding: a psd that predates it reads it as a leave.
     * Byte 3 says byte 2 is written: a record of a psd before it (which
     * wrote 0 there whether the leave was a close or not) reads as "not
     * known" (psd_sync_replay). */
    b[2] = (char)(!joined && closed);
    b[3] = 1;
    memcpy(b + 4, &worker, 4);
    memcpy(b + 8, &client_id, 8);
    memcpy(b + 16, &clock, 8);
    memcpy(b + 24, &barrier, 8);
    memcpy(b + 32, replaced, 8 * PSD_J_REPLACED);
    b[32 + 8 * PSD_J_REPLACED] = (char)ended_mask;
    b[33 + 8 * PSD_J_REPLACED] = (char)(unknown != 0);
    memcpy(b + 72, &lost_id, 8);
    return end_fixed(j, b, WORKER_BODY);
}

/* The seven hyper-parameters, in the record's order. */
static void params_floats(const psd_updater_params *p, float f[7])
{
    f[0] = p->lr;
    f[1] = p->beta1;
    f[2] = p->beta2;
    f[3] = p->epsilon;
    f[4] = p->l1;
    f[5] = p->l2;
    f[6] = p->beta;
}

static uint64_t params_record(psd_journal *j, uint32_t table)
{
    char *b = begin_fixed(j, PSD_J_PARAMS, PARAMS_BODY);
    if (!b)
        return 0;
    float f[7];
    params_floats(&j->params[table], f);
    memcpy(b + 4, &table, 4);
    memcpy(b + 8, f, sizeof f);
    return end_fixed(j, b, PARAMS_BODY);
}

uint64_t psd_journal_params(psd_journal *j, uint32_t table,
                            const psd_updater_params *p)
{
    if (table >= j->nparams) {
        psd_updater_params *np = realloc(j->params,
                                         (table + 1) * sizeof *np);
        if (!np)
            return 0;
        /* Tables not recorded yet get a record when they are. */
        for (uint32_t t = j->nparams; t <= table; t++)
            memset(&np[t], 0xff, sizeof np[t]);
        j->params = np;
        j->nparams = table + 1;
    }
    float was[7], now[7];
    params_floats(&j->params[table], was);
    params_floats(p, now);
    if (memcmp(was, now, sizeof now) == 0)
        return j->last;
    psd_updater_params keep = j->params[table];
    j->params[table] = *p;
    uint64_t lsn = params_record(j, table);
    if (!lsn)
        j->params[table] = keep;    /* recorded next time it is asked */
    return lsn;
}

int psd_journal_write(psd_journal *j, char *err, size_t errlen)
{
    size_t at = 0;
    /* A segment removed from the folder (the folder deleted under a
     * running psd) still takes writes, into a file that no restart will
     * find: records written there would be acknowledged and then lost.
     * It counts as a segment that cannot be written. */
    struct stat st;
    if (j->used && fstat(j->fd, &st) == 0 && st.st_nlink == 0) {
        snprintf(err, errlen, "journal segment %llu was removed from %s "
                 "(is the data folder gone?)", (unsigned long long)j->seq,
                 j->dir);
        return -1;
    }
    if (j->used && j->hold[0]) {
        snprintf(err, errlen, "%s", j->hold);
        return -1;
    }
    while (at < j->used) {
        ssize_t k = write(j->fd, j->buf + at, j->used - at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            /* Whatever part went out is cut off again, so that the file
             * ends with a whole record and the next try appends all of
             * the buffer after it: a half record in the middle of a
             * segment would make replay refuse the journal. */
            int e = k < 0 ? errno : ENOSPC;
            if (at && ftruncate(j->fd, (off_t)j->bytes))
                e = errno;
            /* Where, and what to do: "segment 1: No space left on
             * device" named neither (an observability trial). */
            char path[4200];
            psd_journal_path(path, sizeof path, j->dir, j->node, j->seq);
            snprintf(err, errlen, "write to %s: %s%s", path, strerror(e),
                     e == ENOSPC || e == EDQUOT
                         ? " (free space on that file system, or raise the "
                           "quota: writes are tried again every 100 ms)"
                         : "");
            return -1;
        }
        at += (size_t)k;
    }
    j->bytes += at;
    j->used = 0;
    j->written = j->last;
    return 0;
}

void psd_journal_hold(psd_journal *j, const char *why)
{
    snprintf(j->hold, sizeof j->hold, "%s", why ? why : "");
}

uint64_t psd_journal_written(const psd_journal *j)
{
    return j->written;
}

uint64_t psd_journal_last(const psd_journal *j)
{
    return j->last;
}

int psd_journal_fd(const psd_journal *j)
{
    return j->fd;
}

uint64_t psd_journal_seq(const psd_journal *j)
{
    return j->seq;
}

uint64_t psd_journal_bytes(const psd_journal *j)
{
    return j->bytes;
}

int psd_journal_rotate(psd_journal *j, char *err, size_t errlen)
{
    /* A segment removed from the folder (psd_journal_write) cannot take
     * the records buffered for it: they go to the new segment instead,
     * after its START and PARAMS records. */
    struct stat st;
    int gone = j->used && fstat(j->fd, &st) == 0 && st.st_nlink == 0;
    if (!gone && psd_journal_write(j, err, errlen))
        return -1;
    int old = j->fd;
    uint64_t bytes = j->bytes, seq = j->seq;
    /* The old segment reaches the disk before the new one exists: a crash
     * may then leave a torn record only in the newest segment, where
     * replay expects one. */
    if (!gone && fsync(old)) {
        snprintf(err, errlen, "fsync of journal segment %llu: %s",
                 (unsigned long long)j->seq, strerror(errno));
        return -2;
    }
    char *held = j->buf;
    size_t nheld = j->used, heldcap = j->cap;
    if (gone) {
        j->buf = NULL;
        j->used = j->cap = 0;
    }
    int rc = open_segment(j, seq + 1, err, errlen);
    char *to = rc == 0 && gone ? reserve(j, nheld) : NULL;
    if (rc == 0 && gone && !to) {
        snprintf(err, errlen, "out of memory");
        close(j->fd);
        rc = -1;
    }
    if (rc) {
        if (gone) {
            free(j->buf);
            j->buf = held;
            j->used = nheld;
            j->cap = heldcap;
        }
        j->fd = old;
        j->bytes = bytes;
        j->seq = seq;
        return -1;
    }
    if (gone) {
        memcpy(to, held, nheld);
        free(held);
    }
    close(old);
    return gone;
}

static void fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* Calls fn(seq) for every segment of node in dir, in no order. 0, or an
 * errno when the folder could not be listed (whole): the caller must not
 * take that for a folder without segments. */
static int each_segment(const char *dir, int node,
                        void (*fn)(const char *dir, int node, uint64_t seq,
                                   void *arg),
                        void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno ? errno : EIO;
    char prefix[64];
    int plen = snprintf(prefix, sizeof prefix, "psd-node%d.journal.", node);
    int rc = 0;                  /* readdir's end and its failure differ */
    for (struct dirent *e; (e = psd_readdir(d, &rc));) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        const char *num = e->d_name + plen;
        char *end;
        unsigned long long seq = strtoull(num, &end, 10);
        if (end != num && *end == '\0')
            fn(dir, node, seq, arg);
    }
    closedir(d);
    return rc;
}

static void prune_one(const char *dir, int node, uint64_t seq, void *arg)
{
    if (seq < *(const uint64_t *)arg) {
        char path[4200];
        psd_journal_path(path, sizeof path, dir, node, seq);
        unlink(path);
    }
}

void psd_journal_prune(const char *dir, int node, uint64_t below)
{
    each_segment(dir, node, prune_one, &below);
}

typedef struct span {
    uint64_t lo, hi;
} span;

static void note_seq(const char *dir, int node, uint64_t seq, void *arg)
{
    (void)dir;
    (void)node;
    span *s = arg;
    if (seq < s->lo)
        s->lo = seq;
    if (seq > s->hi)
        s->hi = seq;
}

int psd_journal_has(const char *dir, int node, uint64_t seq)
{
    char path[4200];
    struct stat st;
    psd_journal_path(path, sizeof path, dir, node, seq);
    return stat(path, &st) == 0;
}

uint64_t psd_journal_first(const char *dir, int node)
{
    span s = { UINT64_MAX, 0 };
    each_segment(dir, node, note_seq, &s);
    return s.lo == UINT64_MAX ? 0 : s.lo;
}

/* Decodes a record body into r (views into body). 0 or -1 (malformed). */
static int decode(const char *b, size_t len, psd_jrecord *r)
{
    memset(r, 0, sizeof *r);
    if (len < 1)
        return -1;
    r->type = (unsigned char)b[0];
    if (r->type == PSD_J_START) {
        uint32_t node;
        if (len != START_BODY)
            return -1;
        memcpy(&node, b + 4, 4);
        r->waited = node;
        memcpy(&r->clock, b + 8, 8);        /* the shape */
        r->mark = (uint64_t)(unsigned char)b[1] |
                  (uint64_t)(unsigned char)b[2] << 8 |
                  (uint64_t)(unsigned char)b[3] << 16;   /* the inits */
        return 0;
    }
    if (r->type == PSD_J_ACK) {
        if (len != ACK_BODY)
            return -1;
        memcpy(&r->client_id, b + 8, 8);
        memcpy(&r->incarnation, b + 16, 8);
        memcpy(&r->mark, b + 24, 8);
        return 0;
    }
    if (r->type == PSD_J_WORKER) {
        if ((len != WORKER_BODY && len != WORKER_BODY_OLD &&
             len != WORKER_BODY_040) ||
            (unsigned char)b[1] > 1 || (unsigned char)b[3] > 1)
            return -1;
        r->has_replaced = len == WORKER_BODY;
        r->ended_mask = 0;
        r->lost_id = 0;
        r->unknown = 1;          /* before 0.4.0, or 0.4.0's 72 bytes: not said */
        memset(r->replaced, 0, sizeof r->replaced);
        memcpy(&r->client_id, b + 8, 8);
        if (r->has_replaced) {
            memcpy(r->replaced, b + 32, sizeof r->replaced);
            r->ended_mask = (unsigned char)b[32 + sizeof r->replaced];
            r->unknown = (unsigned char)b[33 + sizeof r->replaced];
            memcpy(&r->lost_id, b + 72, 8);
            if (r->unknown > 1)
                return -1;
            /* Lost: the worker's own client, or none. */
            if (r->lost_id && r->lost_id != r->client_id)
                return -1;
            /* A client let go by end-job is one of those refused. */
            if (r->ended_mask >> PSD_J_REPLACED)
                return -1;
            for (int k = 0; k < PSD_J_REPLACED; k++)
                if ((r->ended_mask & (1u << k)) && !r->replaced[k])
                    return -1;
        }
        r->joined = b[1];
        /* Byte 2 set is a close whoever wrote it (psd wrote it so from
         * the day byte 2 was written, before byte 3 was). */
        r->closed = b[3] || b[2] ? !b[1] && b[2] != 0 : -1;
        memcpy(&r->worker, b + 4, 4);
        memcpy(&r->clock, b + 16, 8);
        memcpy(&r->barrier, b + 24, 8);
        return 0;
    }
    if (r->type == PSD_J_PARAMS) {
        float f[7];
        if (len != PARAMS_BODY)
            return -1;
        memcpy(&r->msg.table, b + 4, 4);
        memcpy(f, b + 8, sizeof f);
        r->params.lr = f[0];
        r->params.beta1 = f[1];
        r->params.beta2 = f[2];
        r->params.epsilon = f[3];
        r->params.l1 = f[4];
        r->params.l2 = f[5];
        r->params.beta = f[6];
        return 0;
    }
    if (r->type == PSD_J_CLOCK) {
        if (len != CLOCK_BODY)
            return -1;
        memcpy(&r->waited, b + 4, 4);
        memcpy(&r->clock, b + 8, 8);
        return 0;
    }
    if (r->type != PSD_J_PUSH || len < PUSH_FIXED)
        return -1;
    int16_t st;
    uint64_t nkeys;
    uint32_t vlen;
    r->msg.op = (unsigned char)b[1];
    memcpy(&st, b + 2, 2);
    r->status = st;
    memcpy(&r->msg.part, b + 4, 4);
    memcpy(&r->client_id, b + 8, 8);
    memcpy(&r->incarnation, b + 16, 8);
    memcpy(&r->msg.ts, b + 24, 8);
    memcpy(&r->msg.table, b + 32, 4);
    memcpy(&r->msg.first, b + 36, 8);
    memcpy(&r->msg.count, b + 44, 8);
    memcpy(&nkeys, b + 52, 8);
    memcpy(&vlen, b + 60, 4);
    if (!psw_op_has(r->msg.op, PSW_OPF_PUSHES) ||
        nkeys > (len - PUSH_FIXED) / 8 ||
        PUSH_FIXED + 8 * nkeys + vlen != len)
        return -1;
    r->msg.nkeys = (size_t)nkeys;
    r->msg.keys = nkeys ? b + PUSH_FIXED : NULL;
    r->msg.vals_len = vlen;
    r->msg.vals = vlen ? b + PUSH_FIXED + 8 * nkeys : NULL;
    return 0;
}

/* Reads exactly n bytes; returns how many it got: short at the end of
 * the file, or when reading failed, which sets *e to the errno (a read
 * error must not pass for the end of a segment, or for a torn tail that
 * replay cuts off with every record after it). */
static size_t read_full(int fd, void *p, size_t n, int *e)
{
    size_t at = 0;
    while (at < n) {
        ssize_t k = read(fd, (char *)p + at, n - at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            *e = errno;
        if (k <= 0)
            break;
        at += (size_t)k;
    }
    return at;
}

/* One segment's records in order: what the replay reads and what psd
 * --check walks, so that the check meets the records the replay meets
 * and stops where it stops. */
typedef struct jreader {
    int fd;
    uint64_t off;                /* the record jread read last */
    uint64_t next;               /* the one after it */
    size_t max_body;             /* a longer record is not read */
    char *body;                  /* its body, owned by the reader */
    size_t bcap;
} jreader;

/* Why a record did not read (jread returned -1). */
typedef struct jbad {
    const char *why;
    int torn;                    /* cut short by the end of the file */
    int header_ok;               /* its header checks: len is its own */
    int whole;                   /* its CRCs check but it does not decode */
    int oom;                     /* no memory for its body */
    int e;                       /* the errno of a failed read */
    uint32_t len;                /* with header_ok */
    uint32_t too_long;           /* a whole header's length past max_body */
} jbad;

/* Reads fd's records from its start on (rd->body is kept). */
static void jread_start(jreader *rd, int fd)
{
    rd->fd = fd;
    rd->off = rd->next = 0;
}

/* Reads the record after the last one: 1 with *r decoded (its keys and
 * values point into rd->body until the next call), 0 at the end of the
 * segment, -1 with *b saying why it did not read. rd->off is its
 * offset either way. */
static int jread(jreader *rd, psd_jrecord *r, jbad *b)
{
    unsigned char h[HDR];
    *b = (jbad){ 0 };
    rd->off = rd->next;
    size_t got = read_full(rd->fd, h, HDR, &b->e);
    if (got == 0 && !b->e)
        return 0;
    uint32_t len = 0, crc = 0, hcrc = 0;
    if (got == HDR) {
        memcpy(&len, h, 4);
        memcpy(&crc, h + 4, 4);
        memcpy(&hcrc, h + 8, 4);
    }
    /* torn: what a crash in the middle of write() leaves, only ever at
     * the very end of the last segment */
    if (b->e)
        b->why = "read error";
    else if (got < HDR)
        b->why = "truncated record header", b->torn = 1;
    else if (psw_crc32c(0, h, 8) != hcrc)
        b->why = "record header CRC mismatch";
    else if (len > rd->max_body)
        b->why = "record longer than a frame allows", b->too_long = len;
    else {
        b->header_ok = 1;
        b->len = len;
        if (len > rd->bcap) {
            char *nb = realloc(rd->body, len);
            if (!nb) {
                b->why = "out of memory";
                b->oom = 1;
                return -1;
            }
            rd->body = nb;
            rd->bcap = len;
        }
        if (read_full(rd->fd, rd->body, len, &b->e) < len)
            b->why = b->e ? "read error" : "truncated record",
            b->torn = !b->e;
        else if (psw_crc32c(0, rd->body, len) != crc)
            b->why = "record CRC mismatch";
        else if (decode(rd->body, len, r))
            b->why = "malformed record", b->whole = 1;
    }
    if (b->why)
        return -1;
    rd->next = rd->off + HDR + len;
    return 1;
}

/* Where a crash can leave zeros: a filesystem may put a file's new size on
 * disk before the data written into it (ext4 mounted with data=writeback,
 * a disk whose write cache lies), and block by block, so an append cut by
 * a power loss can end in zeros from a block boundary on: a page's (4096
 * bytes), or the file system's block where that is smaller (ext4 of 1 KiB
 * blocks, which mkfs picks under 512 MiB: a tail zero from a 1 KiB
 * boundary was refused there, and psd did not start until it was cut by
 * hand). */
#define TAIL_PAGE 4096

static uint64_t tail_block(int fd)
{
    struct statfs fs;
    if (fstatfs(fd, &fs) == 0 && fs.f_bsize >= 512 &&
        fs.f_bsize < TAIL_PAGE && (fs.f_bsize & (fs.f_bsize - 1)) == 0)
        return (uint64_t)fs.f_bsize;
    return TAIL_PAGE;
}

/* Whether the bad record at off, in the newest segment, is such a tail:
 * every byte from off, or from a block boundary (tail_block) before end
 * (where the record would end; off + HDR when its header is not to be
 * trusted), to the end of the file is zero, and there is at least one.
 * The run of zeros may start before that boundary, since what was written
 * before it can end in zero bytes (a key's high bytes, a value of 0).
 * Data that made it to disk and then went bad (a flipped bit) is not
 * zeros to the end, so it is still refused, unless the record's own data
 * is zeros from a block on: no reader can tell that from a torn write
 * (docs/durability.md §6 says so). Reads from off on; sets *e when
 * reading fails. */
static int unwritten_tail(int fd, uint64_t off, uint64_t end, int *e)
{
    if (lseek(fd, (off_t)off, SEEK_SET) < 0) {
        *e = errno;
        return 0;
    }
    uint64_t at = off, zero_from = off;  /* the trailing run of zeros */
    char buf[TAIL_PAGE];
    for (;;) {
        size_t got = read_full(fd, buf, sizeof buf, e);
        if (*e)
            return 0;
        for (size_t i = 0; i < got; i++)
            if (buf[i])
                zero_from = at + i + 1;
        at += got;
        if (got < sizeof buf)
            break;
    }
    if (zero_from == at)
        return 0;                /* no zeros at the end, or nothing there */
    if (zero_from == off)
        return 1;
    /* The first block boundary the zeros cover from: inside the record,
     * and before the end of the file. */
    uint64_t blk = tail_block(fd);
    uint64_t page = (zero_from + blk - 1) / blk * blk;
    return page < end && page < at;
}

/* Which segments of node in dir a replay from segment `from` reads
 * (*s). 1 when there are some, 0 when none, -1 with the reason in err
 * (*lerr: the errno when the folder could not be listed). */
static int replay_span(const char *dir, int node, uint64_t from, span *s,
                       int *lerr, char *err, size_t errlen)
{
    *s = (span){ UINT64_MAX, 0 };
    *lerr = each_segment(dir, node, note_seq, s);
    if (*lerr) {
        /* Segments that are there but unseen would be neither replayed
         * nor kept: the next segment would be written over them and the
         * next snapshot would prune them. */
        snprintf(err, errlen, "%s: cannot list the journal's segments: %s",
                 dir, strerror(*lerr));
        return -1;
    }
    if (s->lo == UINT64_MAX || s->hi < from)
        return 0;                /* nothing after the snapshot */
    if (s->lo > from) {
        /* Segment 1 is the first a node ever writes, and later ones
         * start after a snapshot: without that snapshot, the records
         * before them are lost, and replaying the rest would serve a
         * model with a hole in its history. */
        char path[4200];
        psd_journal_path(path, sizeof path, dir, node, s->lo);
        snprintf(err, errlen, "%s: the journal starts at segment %llu, but "
                 "the snapshot that covers segments %llu..%llu is missing "
                 "(restore it, or start with --skip-snapshot to move all "
                 "of this node's files aside)", path,
                 (unsigned long long)s->lo, (unsigned long long)from,
                 (unsigned long long)s->lo - 1);
        return -1;
    }
    return 1;
}

uint64_t psd_journal_shape(const char *dir, int node, uint64_t shape,
                           uint64_t shape_0_1, int *of_0_1)
{
    *of_0_1 = 0;
    uint64_t seq = psd_journal_first(dir, node);
    if (!seq)
        return shape;
    char path[4200];
    psd_journal_path(path, sizeof path, dir, node, seq);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return shape;
    jreader rd = { .max_body = 4096 };
    psd_jrecord r;
    jbad bad;
    jread_start(&rd, fd);
    if (jread(&rd, &r, &bad) == 1 && r.type == PSD_J_START &&
        r.waited == (uint32_t)node && r.clock != shape &&
        r.clock == shape_0_1)
        *of_0_1 = 1;
    free(rd.body);
    close(fd);
    return *of_0_1 ? shape_0_1 : shape;
}

int psd_journal_replay(const char *dir, int node, uint64_t shape,
                       uint32_t inits, uint64_t from, size_t max_body,
                       int (*apply)(void *ctx, const psd_jrecord *r,
                                    char *err, size_t errlen),
                       void *ctx, uint64_t *next, uint64_t *records,
                       char *cut, size_t cutlen, char *err, size_t errlen)
{
    span s;
    *records = 0;
    if (cutlen)
        cut[0] = '\0';
    *next = from;
    int lerr = 0, rc = replay_span(dir, node, from, &s, &lerr, err, errlen);
    if (rc <= 0)
        return rc;
    jreader rd = { .max_body = max_body };
    rc = 0;
    for (uint64_t seq = from; seq <= s.hi && rc == 0; seq++) {
        char path[4200];
        psd_journal_path(path, sizeof path, dir, node, seq);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) {
            snprintf(err, errlen, "%s: missing (segments %llu..%llu are "
                     "there): %s", path, (unsigned long long)from,
                     (unsigned long long)s.hi, strerror(errno));
            rc = -1;
            break;
        }
        if (fd < 0) {
            /* There, but not for this user (or out of files): "missing"
             * sent an operator looking for a file that is in place. */
            snprintf(err, errlen, "%s: cannot open it: %s (psd replays "
                     "segments %llu..%llu)", path, strerror(errno),
                     (unsigned long long)from, (unsigned long long)s.hi);
            rc = -1;
            break;
        }
        uint32_t made_on = 0;    /* the segment's inits mark, 0: unknown */
        jread_start(&rd, fd);
        for (;;) {
            psd_jrecord r;
            jbad bad;
            int got = jread(&rd, &r, &bad);
            if (got == 0)
                break;           /* the end of this segment */
            uint64_t off = rd.off;
            if (bad.oom) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            const char *why = bad.why;
            int torn = bad.torn, e = bad.e;
            if (why) {
                /* A crash can cut only the last record of the last
                 * segment, or leave it zeros from a page on: cut it off.
                 * Anything else is damage. */
                uint64_t end = off + HDR + (bad.header_ok ? bad.len : 0);
                if (!torn && !bad.whole && !e && seq == s.hi &&
                    unwritten_tail(fd, off, end, &e))
                    torn = 2;
                if (torn && seq == s.hi && !cut)
                    break;       /* read only: the file is not ours */
                if (torn && seq == s.hi && truncate(path, (off_t)off) == 0) {
                    fsync_path(path);
                    if (cutlen)
                        snprintf(cut, cutlen, "%s: offset %llu: %s: cut "
                                 "off there, the end of a write that a "
                                 "crash left unfinished", path,
                                 (unsigned long long)off,
                                 torn == 2 ? "zeros to the end of the file"
                                           : why);
                    break;
                }
                /* The unfinished end of the last write, which psd could
                 * not cut (the file is not its user's to write): not
                 * damage, and "truncated record" alone sent the operator
                 * to cut the file by hand. */
                if (torn && seq == s.hi) {
                    int te = errno;
                    snprintf(err, errlen, "%s: offset %llu: %s: the end of "
                             "a write that a crash left unfinished, which "
                             "psd could not cut off: %s%s", path,
                             (unsigned long long)off,
                             torn == 2 ? "zeros to the end of the file" : why,
                             strerror(te),
                             te == EACCES ? " (give psd's user write access "
                                            "to the file)" : "");
                    rc = -1;
                    break;
                }
                /* Most likely a node whose max_frame was lowered after
                 * a crash (its journal holds pushes of the larger one): a
                 * trial's start failed with this line alone. */
                char big[300] = "";
                if (bad.too_long)
                    snprintf(big, sizeof big, " (%u bytes: written under a "
                             "larger [server] max_frame; start the node with "
                             "max_frame = %llu or more, and lower it after a "
                             "clean stop, whose final snapshot leaves no "
                             "journal to replay)", bad.too_long,
                             (unsigned long long)(bad.too_long > 4096
                                                      ? bad.too_long - 4096
                                                      : 1));
                snprintf(err, errlen, "%s: offset %llu: %s%s%s%s", path,
                         (unsigned long long)off, why, big, e ? ": " : "",
                         e ? strerror(e) : "");
                rc = -1;
                break;
            }
            char inner[300];
            if (r.type == PSD_J_START) {
                if (r.waited != (uint32_t)node || r.clock != shape) {
                    snprintf(err, errlen, "%s: offset %llu: written by node "
                             "%u under layout shape %016llx; this is node %d, "
                             "shape %016llx%s", path, (unsigned long long)off,
                             r.waited, (unsigned long long)r.clock, node,
                             (unsigned long long)shape, SHAPE_HINT);
                    rc = -1;
                    break;
                }
                made_on = (uint32_t)r.mark;
                continue;
            }
            /* Only a push makes rows: a segment of other inits without
             * one (a clean stop's last) replays as well under any. */
            if (r.type == PSD_J_PUSH && inits && made_on &&
                made_on != inits) {
                other_inits(err, errlen, path, off, made_on, inits);
                rc = -1;
                break;
            }
            if (apply(ctx, &r, inner, sizeof inner)) {
                snprintf(err, errlen, "%s: offset %llu: %s", path,
                         (unsigned long long)off, inner);
                rc = -1;
                break;
            }
            /* Counted: what changed rows or clocks, as the log says. */
            *records += r.type == PSD_J_PUSH || r.type == PSD_J_CLOCK;
        }
        close(fd);
        /* What was replayed must be on disk before new records follow it
         * (after a crash of the host, the page cache held it). */
        if (rc == 0 && cut)
            fsync_path(path);
        *next = seq + 1;
    }
    free(rd.body);
    return rc;
}

/* What psd_journal_check needs while it walks the segments. */
typedef struct check_ctx {
    uint64_t shape;
    uint32_t inits;
    char *err;
    size_t errlen;
    uint64_t from;               /* segments before it are not replayed */
    jreader rd;
    int bad;
    int unreadable;              /* a segment this user may not read */
} check_ctx;

/* Reads the start record of segment seq: a whole one that names another
 * node or shape makes k bad, and so does one of other inits followed by a
 * push (INITS_HINT), met as the replay would meet it: up to the first
 * record that does not read (the replay cuts it or refuses it, for its
 * own reason). A later START sets the mark, as in the replay. Anything
 * else is left to the replay. */
static void check_one(const char *dir, int node, uint64_t seq, void *arg)
{
    check_ctx *k = arg;
    if (k->bad || seq < k->from)
        return;
    char path[4200];
    psd_journal_path(path, sizeof path, dir, node, seq);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(k->err, k->errlen, "%s: cannot open: %s", path,
                 strerror(errno));
        if (errno == EACCES || errno == EPERM)
            k->unreadable = 1;
        else
            k->bad = 1;
        return;
    }
    psd_jrecord r;
    jbad bad;
    jread_start(&k->rd, fd);
    if (jread(&k->rd, &r, &bad) == 1 && r.type == PSD_J_START) {
        uint32_t mark = (uint32_t)r.mark;
        if (r.waited != (uint32_t)node || r.clock != k->shape) {
            snprintf(k->err, k->errlen, "%s: offset 0: written by node %u "
                     "under layout shape %016llx; this is node %d, shape "
                     "%016llx%s", path, r.waited,
                     (unsigned long long)r.clock, node,
                     (unsigned long long)k->shape, SHAPE_HINT);
            k->bad = 1;
        }
        /* Only a segment begun on other inits is read on (psd writes
         * one START per segment): a --check before every start must not
         * read the whole journal. */
        int walk = k->inits && mark && mark != k->inits;
        while (walk && !k->bad && jread(&k->rd, &r, &bad) == 1) {
            if (r.type == PSD_J_START)
                mark = (uint32_t)r.mark;
            else if (r.type == PSD_J_PUSH && mark && mark != k->inits) {
                other_inits(k->err, k->errlen, path, k->rd.off, mark,
                            k->inits);
                k->bad = 1;
            }
        }
    }
    close(fd);
}

int psd_journal_check(const char *dir, int node, uint64_t shape,
                      uint32_t inits, uint64_t from, size_t max_body,
                      char *err, size_t errlen)
{
    span s;
    int lerr = 0;
    int rc = replay_span(dir, node, from, &s, &lerr, err, errlen);
    if (rc < 0)
        return lerr == EACCES || lerr == EPERM ? 2 : lerr == ENOENT ? 0 : -1;
    /* A segment missing between the snapshot's and the newest stops the
     * replay (psd_journal_replay), so it stops the check too: --check
     * said OK, and the start then failed. */
    for (uint64_t seq = from; rc > 0 && seq <= s.hi; seq++) {
        char path[4200];
        struct stat st;
        psd_journal_path(path, sizeof path, dir, node, seq);
        if (stat(path, &st) && errno == ENOENT) {
            snprintf(err, errlen, "%s: missing (segments %llu..%llu are "
                     "there): %s", path, (unsigned long long)from,
                     (unsigned long long)s.hi, strerror(errno));
            return -1;
        }
    }
    check_ctx k = { shape, inits, err, errlen, from,
                    { .max_body = max_body }, 0, 0 };
    each_segment(dir, node, check_one, &k);
    free(k.rd.body);
    return k.bad ? -1 : k.unreadable ? 2 : 0;
}
