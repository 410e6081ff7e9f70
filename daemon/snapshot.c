/* Snapshot files: writing through a temporary file, reading with every
 * byte checked. See snapshot.h; the format is in docs/durability.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "snapshot.h"
#include "../proto/frame.h"

#define MAGIC "PSDSNAP\n"
#define HEADER_BYTES 64
#define BUF_BYTES (1 << 20)
#define SEQ_MAX ((uint64_t)1 << 48)  /* generations, journal segments */

enum { SEC_TABLE = 1, SEC_SYNC = 2, SEC_DEDUP = 3, SEC_END = 0xffff };

static const char *sec_name(uint32_t kind)
{
    switch (kind) {
    case SEC_TABLE: return "table";
    case SEC_SYNC: return "workers";
    case SEC_DEDUP: return "applied pushes";
    case SEC_END: return "end";
    default: return "unknown";
    }
}

void psd_snapshot_path(char *buf, size_t len, const char *dir, int node)
{
    snprintf(buf, len, "%s/psd-node%d.snap", dir, node);
}

/* ---- writing -------------------------------------------------------- */

typedef struct writer {
    int fd;
    char *buf;
    size_t used;
    uint64_t off;                /* bytes written so far, buffered ones too */
    uint32_t crc;                /* of the current section */
    int err;                     /* errno of the first failure */
} writer;

static int w_flush(writer *w)
{
    size_t at = 0;
    while (!w->err && at < w->used) {
        ssize_t k = write(w->fd, w->buf + at, w->used - at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            w->err = k < 0 ? errno : EIO;
        else
            at += (size_t)k;
    }
    w->used = 0;
    return w->err ? -1 : 0;
}

static int w_write(void *ctx, const void *p, size_t n)
{
    writer *w = ctx;
    const char *s = p;
    w->crc = psw_crc32c(w->crc, p, n);
    w->off += n;
    while (n > 0 && !w->err) {
        size_t k = BUF_BYTES - w->used < n ? BUF_BYTES - w->used : n;
        memcpy(w->buf + w->used, s, k);
        w->used += k;
        s += k;
        n -= k;
        if (w->used == BUF_BYTES)
            w_flush(w);
    }
    return w->err ? -1 : 0;
}

/* Opens a section: its kind and aux word count into its CRC. */
static uint64_t sec_begin(writer *w, psd_sink *o, uint32_t kind, uint32_t aux)
{
    w->crc = 0;
    psd_put(o, &kind, 4);
    psd_put(o, &aux, 4);
    return w->off;
}

/* Closes a section: its payload length and CRC, outside the CRC. */
static int sec_end(writer *w, psd_sink *o, uint64_t start)
{
    uint64_t len = w->off - start;
    uint32_t crc = w->crc;
    psd_put(o, &len, 8);
    psd_put(o, &crc, 4);
    return w->err ? -1 : 0;
}

/* The test knob: PSD_TEST_SNAPSHOT_PAUSE=STAGE:MS sleeps at STAGE. */
static void pause_at(const char *stage)
{
    const char *knob = getenv("PSD_TEST_SNAPSHOT_PAUSE");
    size_t n = strlen(stage);
    if (!knob || strncmp(knob, stage, n) != 0 || knob[n] != ':')
        return;
    long ms = atol(knob + n + 1);
    fprintf(stderr, "psd: test pause: snapshot writer %ld at %s for %ld ms\n",
            (long)getpid(), stage, ms);
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&t, &t) && errno == EINTR)
        ;
}

int psd_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int write_body(const psd_node *n, writer *w, psd_sink *o,
                      uint64_t generation, uint64_t journal_seq,
                      uint64_t created)
{
    unsigned char h[HEADER_BYTES] = { 0 };
    uint32_t u;
    memcpy(h, MAGIC, 8);
    u = PSD_SNAPSHOT_VERSION;
    memcpy(h + 8, &u, 4);
    u = (uint32_t)n->index;
    memcpy(h + 12, &u, 4);
    u = (uint32_t)n->cfg.nnodes;
    memcpy(h + 16, &u, 4);
    memcpy(h + 20, &n->cfg.shards, 4);
    memcpy(h + 24, &n->shape, 8);
    memcpy(h + 32, &generation, 8);
    memcpy(h + 40, &journal_seq, 8);
    memcpy(h + 48, &created, 8);
    u = (uint32_t)n->ntables;
    memcpy(h + 56, &u, 4);
    u = psw_crc32c(0, h, 60);
    memcpy(h + 60, &u, 4);
    psd_put(o, h, sizeof h);
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *tc = psd_table_conf_get(n->tables[i]);
        uint64_t start = sec_begin(w, o, SEC_TABLE, (uint32_t)i);
        uint8_t dense = (uint8_t)tc->dense;
        uint32_t upd = (uint32_t)tc->upd.kind, len = (uint32_t)strlen(tc->name);
        psd_put(o, &dense, 1);
        psd_put(o, &tc->dim, 4);
        psd_put(o, &tc->rows, 8);
        psd_put(o, &upd, 4);
        psd_put(o, &len, 4);
        psd_put(o, tc->name, len);
        if (psd_table_save(n->tables[i], o) || sec_end(w, o, start))
            return -1;
    }
    uint64_t start = sec_begin(w, o, SEC_SYNC, 0);
    if (psd_sync_save(&n->sync, o) || sec_end(w, o, start))
        return -1;
    start = sec_begin(w, o, SEC_DEDUP, 0);
    if (psd_dedup_save(n->dedup, o) || sec_end(w, o, start))
        return -1;
    start = sec_begin(w, o, SEC_END, 0);
    return sec_end(w, o, start) || w_flush(w);
}

void psd_snapshot_staged_path(char *buf, size_t len, const char *dir,
                              int node)
{
    snprintf(buf, len, "%s/psd-node%d.snap.staged", dir, node);
}

/* Writes n's snapshot under path, dir/NAME (through a .tmp file, fsynced,
 * renamed into place, then the folder fsynced). With dirfd (not
 * AT_FDCWD), the files are made and renamed in that open folder, by
 * NAME, whatever is at dir's path by then; path names them in
 * messages. */
static int write_to(const psd_node *n, int dirfd, const char *dir,
                    const char *path, uint64_t generation,
                    uint64_t journal_seq, psd_snap_info *info, char *err,
                    size_t errlen)
{
    char tmp[4300];
    /* Named for the writer: a writer that outlived its psd can never
     * rename a newer psd's unfinished file, or the reverse. */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    size_t skip = dirfd == AT_FDCWD ? 0 : strlen(dir) + 1;
    const char *at_tmp = tmp + skip, *at_path = path + skip;
    unlinkat(dirfd, at_tmp, 0);  /* a leftover of a writer that died */
    writer w = { .fd = openat(dirfd, at_tmp,
                              O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                              0600) };
    if (w.fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    /* Memory short (the tables took it: a limit on the address space, a
     * full machine) must not cost the snapshot that keeps them, above all
     * the final one: the buffer then comes from psd's image, where it was
     * counted at start. One writer at a time uses it (a forked writer has
     * its own copy). */
    static char spare[BUF_BYTES];
    w.buf = malloc(BUF_BYTES);
    int own = w.buf != NULL;
    if (!own)
        w.buf = spare;
    psd_sink o = { w_write, &w };
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t created = (uint64_t)now.tv_sec * 1000 +
                       (uint64_t)now.tv_nsec / 1000000;
    const char *what = "write";
    int rc = w.err ? -1 : write_body(n, &w, &o, generation, journal_seq,
                                     created);
    if (rc == 0) {
        pause_at("written");
        what = "fsync";
        if (fsync(w.fd))
            w.err = errno, rc = -1;
    }
    if (close(w.fd) && rc == 0)
        w.err = errno, rc = -1;
    if (own)
        free(w.buf);
    if (rc == 0) {
        pause_at("fsynced");
        what = "rename";
        if (renameat(dirfd, at_tmp, dirfd, at_path))
            w.err = errno, rc = -1;
    }
    if (rc) {
        /* Short of an errno, the body's writing failed for memory (a
         * table's rows buffered, a sort): said so, not as a disk's EIO,
         * which sent an operator to a healthy disk. */
        snprintf(err, errlen, "%s %s: %s", what, tmp,
                 w.err ? strerror(w.err) : "out of memory");
        unlinkat(dirfd, at_tmp, 0);
        return -1;
    }
    pause_at("renamed");
    /* The new file is in place either way; without the folder's fsync
     * a power loss may bring the previous one back, so the caller keeps
     * the journal it covers (err says why). Asked once: after a failed
     * fsync the kernel may mark the pages clean, and a second one passed
     * what the first had failed (a reshard trial, one EIO injected). */
    if (errlen)
        err[0] = '\0';
    if (dirfd == AT_FDCWD ? psd_fsync_dir(dir) : fsync(dirfd))
        snprintf(err, errlen, "fsync of folder %s: %s", dir, strerror(errno));
    if (info)
        *info = (psd_snap_info){ generation, journal_seq, created, w.off,
                                 n->shape, (uint32_t)n->ntables,
                                 PSD_SNAPSHOT_VERSION, 0 };
    return 0;
}

int psd_snapshot_write(const psd_node *n, const char *dir,
                       uint64_t generation, uint64_t journal_seq,
                       psd_snap_info *info, char *err, size_t errlen)
{
    return psd_snapshot_write_at(n, AT_FDCWD, dir, generation, journal_seq,
                                 info, err, errlen);
}

int psd_snapshot_write_at(const psd_node *n, int dirfd, const char *dir,
                          uint64_t generation, uint64_t journal_seq,
                          psd_snap_info *info, char *err, size_t errlen)
{
    char path[4200];
    psd_snapshot_path(path, sizeof path, dir, n->index);
    return write_to(n, dirfd, dir, path, generation, journal_seq, info, err,
                    errlen);
}

int psd_snapshot_stage(const psd_node *n, const char *dir,
                       uint64_t generation, uint64_t journal_seq,
                       psd_snap_info *info, char *err, size_t errlen)
{
    char path[4200];
    psd_snapshot_staged_path(path, sizeof path, dir, n->index);
    if (write_to(n, AT_FDCWD, dir, path, generation, journal_seq, info, err,
                 errlen) < 0)
        return -1;
    if (errlen && err[0]) {      /* the folder's fsync failed */
        unlink(path);
        return -1;
    }
    return 0;
}

/* Renames node's staged snapshot in dir into place. */
static int commit_staged(const char *dir, int node, char *err, size_t errlen)
{
    char from[4200], to[4200];
    psd_snapshot_staged_path(from, sizeof from, dir, node);
    psd_snapshot_path(to, sizeof to, dir, node);
    if (rename(from, to)) {
        snprintf(err, errlen, "rename %s: %s", from, strerror(errno));
        return -1;
    }
    return 0;
}

int psd_snapshot_commit_all(const char *dir, const unsigned char *want,
                            int nnodes, char *err, size_t errlen)
{
    /* A signal that ends the process between two renames would leave
     * some nodes' snapshots in place: held off until all are (SIGKILL
     * cannot be; a start then finds the .staged file left). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGQUIT);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int done = 0, rc = 0;
    for (; done < nnodes; done++)
        if (want[done] &&
            commit_staged(dir, done, err, errlen)) {
            rc = -1;
            break;
        }
    if (rc) {
        /* None, then: the renamed ones go, with every staged one. */
        for (int k = 0; k < nnodes; k++) {
            char path[4200];
            if (!want[k])
                continue;
            if (k < done) {
                psd_snapshot_path(path, sizeof path, dir, k);
                unlink(path);
            }
            psd_snapshot_staged_path(path, sizeof path, dir, k);
            unlink(path);
        }
    } else if (psd_fsync_dir(dir)) {  /* once: psd_snapshot_write_at */
        snprintf(err, errlen, "every snapshot is in place in %s, but the "
                 "folder's fsync failed (%s): a power loss may take them "
                 "back", dir, strerror(errno));
        rc = -2;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* ---- reading -------------------------------------------------------- */

typedef struct reader {
    int fd;
    char *buf;
    size_t pos, len;
    uint64_t off;                /* file offset of the next byte read */
    uint32_t crc;
    int eof, err;
} reader;

static int r_read(void *ctx, void *p, size_t n)
{
    reader *r = ctx;
    char *d = p;
    while (n > 0) {
        if (r->pos == r->len) {
            ssize_t k = read(r->fd, r->buf, BUF_BYTES);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                if (k < 0)
                    r->err = errno;
                else
                    r->eof = 1;
                return -1;
            }
            r->pos = 0;
            r->len = (size_t)k;
        }
        size_t k = r->len - r->pos < n ? r->len - r->pos : n;
        memcpy(d, r->buf + r->pos, k);
        r->crc = psw_crc32c(r->crc, d, k);
        r->pos += k;
        r->off += k;
        d += k;
        n -= k;
    }
    return 0;
}

/* A place in the file to read from again (r_rewind): the snapshot is a
 * regular file, so the next read after the rewind seeks there. */
typedef struct r_place {
    uint64_t off;
    uint32_t crc;
} r_place;

static r_place r_mark(const reader *r)
{
    return (r_place){ r->off, r->crc };
}

static int r_rewind(reader *r, r_place p)
{
    if (lseek(r->fd, (off_t)p.off, SEEK_SET) < 0)
        return -1;
    r->pos = r->len = 0;
    r->off = p.off;
    r->crc = p.crc;
    r->eof = r->err = 0;
    return 0;
}

/* Whether the section that began at `start` ends here: its length field
 * comes next and says so (read, then put back). */
static int section_ends_here(reader *r, uint64_t start)
{
    r_place here = r_mark(r);
    uint64_t len;
    int ends = r_read(r, &len, 8) == 0 && len == r->off - 8 - start;
    return r_rewind(r, here) == 0 && ends;
}

/* The fixed header's fields. */
typedef struct header {
    uint32_t version, node, nnodes, shards, ntables;
    uint64_t shape;
    psd_snap_info si;
} header;

/* Reads the fixed header from r and checks its magic, CRC and version.
 * 0, or -1 with the reason in why. */
static int read_header(reader *r, header *hd, char *why, size_t whylen)
{
    unsigned char h[HEADER_BYTES];
    uint32_t u, crc;
    if (r_read(r, h, sizeof h)) {
        snprintf(why, whylen, "truncated header (%llu bytes)",
                 (unsigned long long)r->off);
        return -1;
    }
    memcpy(&crc, h + 60, 4);
    memcpy(&u, h + 8, 4);
    if (memcmp(h, MAGIC, 8))
        snprintf(why, whylen, "not a psd snapshot (bad magic)");
    else if (psw_crc32c(0, h, 60) != crc)
        snprintf(why, whylen, "header CRC mismatch");
    else if (u < 1 || u > PSD_SNAPSHOT_VERSION)
        snprintf(why, whylen, "format version %u, this psd reads 1..%d%s", u,
                 PSD_SNAPSHOT_VERSION, u > PSD_SNAPSHOT_VERSION
                     ? " (a newer psd wrote it: run that one, or go back to "
                       "the copy of data_dir or the export kept from before "
                       "the upgrade; --skip-snapshot would start without "
                       "the model)" : "");
    else {
        memset(hd, 0, sizeof *hd);
        hd->version = u;
        memcpy(&hd->node, h + 12, 4);
        memcpy(&hd->nnodes, h + 16, 4);
        memcpy(&hd->shards, h + 20, 4);
        memcpy(&hd->shape, h + 24, 8);
        memcpy(&hd->si.generation, h + 32, 8);
        memcpy(&hd->si.journal_seq, h + 40, 8);
        memcpy(&hd->si.created_ms, h + 48, 8);
        memcpy(&hd->ntables, h + 56, 4);
        /* Both count up by one per snapshot or journal rotation: a value
         * near 2^64 is damage that a CRC made right let through, and the
         * journal_seq would make the start delete every segment below it
         * and wrap the next segment's number. */
        if (hd->si.generation > SEQ_MAX || hd->si.journal_seq > SEQ_MAX) {
            snprintf(why, whylen, "generation %llu or journal_seq %llu is "
                     "out of range (at most %llu)",
                     (unsigned long long)hd->si.generation,
                     (unsigned long long)hd->si.journal_seq,
                     (unsigned long long)SEQ_MAX);
            return -1;
        }
        return 0;
    }
    return -1;
}

/* A snapshot lists at most this many tables: more is damage. */
#define TABLES_MAX 65536
/* Dropped tables whose consistency the shape check tries each mode of. */
#define DROPPED_CHECKED_MAX 10

/* Whether the header's node, node count and shards are node's under cfg
 * (and, strict, its table count). 0, or -1 with the reason in why. */
static int header_fits(const header *hd, int node, const psd_config *cfg,
                       int strict, char *why, size_t whylen)
{
    if (hd->node != (uint32_t)node) {
        snprintf(why, whylen, "taken by node %u, this is node %d", hd->node,
                 node);
        return -1;
    }
    if (strict && hd->nnodes == (uint32_t)cfg->nnodes &&
        hd->shards == cfg->shards && hd->ntables != (uint32_t)cfg->ntables) {
        /* Only psd --reshard reads strictly: its own advice ("psd
         * --reshard onto another node count") sent the operator back to
         * the command that failed. */
        snprintf(why, whylen, "holds %u tables, the config %d: psd "
                 "--reshard moves the tables as they are; to add or remove "
                 "one, start the nodes once with the new tables "
                 "(--drop-table for one removed), stop them, then reshard",
                 hd->ntables, cfg->ntables);
        return -1;
    }
    if (hd->nnodes != (uint32_t)cfg->nnodes || hd->shards != cfg->shards ||
        (strict && hd->ntables != (uint32_t)cfg->ntables)) {
        snprintf(why, whylen, "taken under another layout (%u nodes, %u "
                 "shards, %u tables; the config has %d nodes, %u shards, %d "
                 "tables): a snapshot only fits the node count and shards "
                 "that wrote it (to keep the model: psd --reshard onto "
                 "another node count, psd --export then psd --import onto "
                 "other shards)", hd->nnodes, hd->shards, hd->ntables,
                 cfg->nnodes, cfg->shards, cfg->ntables);
        return -1;
    }
    if (hd->ntables > TABLES_MAX) {
        snprintf(why, whylen, "%u tables: more than a snapshot holds (%d)",
                 hd->ntables, TABLES_MAX);
        return -1;
    }
    return 0;
}

/* What reading a snapshot's sections loads into: node n (psd starting),
 * or, with n NULL (psd --check), throwaway tables, one at a time. */
typedef struct target {
    psd_node *n;
    const psd_config *cfg;
    int index;
    uint64_t now_ms;
    psd_snap_tables *tm;         /* NULL: the config's tables, in order */
    int of_0_1;                  /* out: a file of psd 0.1 (shape_of_0_1) */
} target;

/* A table section's own header. */
typedef struct snap_table {
    char name[PSD_NAME_MAX];
    uint8_t dense;
    uint32_t dim, upd;
    uint64_t rows;
} snap_table;

static int conf_index(const psd_config *cfg, const char *name)
{
    for (int i = 0; i < cfg->ntables; i++)
        if (!strcmp(cfg->tables[i].name, name))
            return i;
    return -1;
}

/* Whether name is one of --drop-table's, marking it used (each time it
 * is given: a name given twice is not "nothing dropped" the second). */
static int is_dropped(psd_snap_tables *tm, const char *name)
{
    int found = 0;
    for (int i = 0; i < tm->ndrop && i < 64; i++)
        if (!strcmp(tm->drop[i], name)) {
            tm->drop_used |= (uint64_t)1 << i;
            found = 1;
        }
    return found;
}

/* Whether the shape the snapshot was taken under is that of its own
 * tables, taking each kept table's consistency mode from the config: the
 * section headers hold everything the shape covers but the mode. A
 * dropped table's mode is unknown, so each is tried. */
static int shape_fits(uint64_t want, uint64_t h, const snap_table *st,
                      const int32_t *map, uint32_t i, uint32_t nt,
                      const psd_config *cfg)
{
    for (; i < nt; i++) {
        const snap_table *t = &st[i];
        if (map[i] < 0) {
            for (int mode = PSD_CONS_ASYNC; mode <= PSD_CONS_SSP; mode++)
                if (shape_fits(want, psd_shape_table(h, t->name, t->dense,
                                                     t->dim, t->rows,
                                                     (int)t->upd, mode),
                               st, map, i + 1, nt, cfg))
                    return 1;
            return 0;
        }
        h = psd_shape_table(h, t->name, t->dense, t->dim, t->rows,
                            (int)t->upd,
                            (int)cfg->tables[map[i]].consistency);
    }
    return h == want;
}

/* The shape as psd 0.1 hashed it (node.h), of the snapshot's own
 * tables; files of the next commit on are of format 1 too, under the
 * shape of today. */
static uint64_t shape_of_0_1(const header *hd, const snap_table *st,
                             uint32_t nt)
{
    uint64_t h = psd_shape_begin((int)hd->nnodes, hd->shards);
    for (uint32_t i = 0; i < nt; i++)
        h = psd_shape_table_0_1(h, st[i].name, st[i].dense, st[i].dim,
                                st[i].rows);
    return h;
}

/* Appends 'name' to list (", " between), cut when it is full. */
static void add_name(char *list, size_t cap, const char *name)
{
    size_t used = strlen(list);
    snprintf(list + used, cap - used, "%s'%s'", used ? ", " : "", name);
}

#define BAD(...) do { snprintf(why, whylen, __VA_ARGS__); \
                      goto bad; } while (0)

/* Reads every section after the header into g. 0, or -1 with the reason
 * in why and the offset of the failing part in *at. */
static int read_sections(reader *r, const header *hd, target *g,
                         uint64_t *at, char *why, size_t whylen)
{
    const psd_config *cfg = g->cfg;
    psd_source in = { r_read, r };
    uint32_t nt = hd->ntables;
    snap_table *st = calloc(nt ? nt : 1, sizeof *st);
    int32_t *map = malloc((nt ? nt : 1) * sizeof *map);
    char *seen = calloc((size_t)cfg->ntables + 1, 1);
    psd_sync ysync, *sync = g->n ? &g->n->sync : &ysync;
    psd_dedup *dedup = g->n ? g->n->dedup : psd_dedup_new();
    int ysync_ok = g->n || psd_sync_init(&ysync, cfg->workers, g->now_ms) == 0;
    int rc = -1;
    if (!st || !map || !seen || !dedup || !ysync_ok)
        BAD("out of memory");
    uint32_t crc;
    uint32_t tables_seen = 0;
    int sync_seen = 0, dedup_seen = 0, dropped = 0;
    /* Written under this very layout (the header, whose CRC checked,
     * says so): a table header that differs from the config's table is
     * damage, which its section's CRC tells only once the section is read
     * whole. Told here, it was taken for a changed config ("not in the
     * config: --drop-table ...", "its updater changed"). */
    int written_here = hd->shape == psd_config_shape(cfg) &&
                       nt == (uint32_t)cfg->ntables;
    if (g->tm) {
        g->tm->added_names[0] = g->tm->dropped_names[0] = '\0';
        g->tm->drop_used = 0;
    }
    for (;;) {
        *at = r->off;
        r->crc = 0;
        uint32_t kind, aux;
        if (r_read(r, &kind, 4) || r_read(r, &aux, 4))
            BAD("truncated: a section header is missing (no end marker)");
        uint64_t start = r->off;
        char inner[300] = "";
        int lrc = 0;
        if (kind == SEC_TABLE) {
            if (aux != tables_seen || aux >= nt)
                BAD("table section %u out of order", aux);
            snap_table *t = &st[aux];
            uint32_t len;
            if (r_read(r, &t->dense, 1) || r_read(r, &t->dim, 4) ||
                r_read(r, &t->rows, 8) || r_read(r, &t->upd, 4) ||
                r_read(r, &len, 4) || len >= sizeof t->name ||
                r_read(r, t->name, len))
                BAD("table %u: truncated or bad table header", aux);
            t->name[len] = '\0';
            if (written_here) {
                const psd_table_conf *w = &cfg->tables[aux];
                if (strcmp(t->name, w->name) || t->dense != (w->dense != 0) ||
                    t->dim != w->dim || t->rows != w->rows ||
                    t->upd != (uint32_t)w->upd.kind)
                    BAD("table %u: its header is damaged: the snapshot was "
                        "written under this very layout (shape %016llx), "
                        "where table %u is '%s', and the header says '%.*s' "
                        "(%s, dim %u, rows %llu, updater %u)", aux,
                        (unsigned long long)hd->shape, aux, w->name, 64,
                        t->name, t->dense ? "dense" : "sparse", t->dim,
                        (unsigned long long)t->rows, t->upd);
            }
            int j = g->tm ? conf_index(cfg, t->name) : (int)aux;
            const psd_table_conf *tc = j >= 0 ? &cfg->tables[j] : NULL;
            if (!g->tm && (strcmp(t->name, tc->name) ||
                           t->dense != (tc->dense != 0) ||
                           t->dim != tc->dim || t->rows != tc->rows))
                BAD("table %u is '%s' (%s, dim %u, rows %llu) in the "
                    "snapshot, '%s' (%s, dim %u, rows %llu) in the config "
                    "(--reshard takes tables in the snapshot's order: give "
                    "the sections that order, or start once in the new)",
                    aux, t->name, t->dense ? "dense" : "sparse", t->dim,
                    (unsigned long long)t->rows, tc->name,
                    tc->dense ? "dense" : "sparse", tc->dim,
                    (unsigned long long)tc->rows);
            if (tc && seen[j])
                BAD("table '%s' is in the snapshot twice", t->name);
            if (tc && (t->dense != (tc->dense != 0) || t->dim != tc->dim ||
                       t->rows != tc->rows))
                BAD("table '%s' is %s, dim %u, rows %llu in the snapshot "
                    "and %s, dim %u, rows %llu in the config: its rows do "
                    "not fit (put its kind, dim and rows back; a table under "
                    "a new name starts fresh, and --drop-table lets the old "
                    "one go)", t->name, t->dense ? "dense" : "sparse",
                    t->dim, (unsigned long long)t->rows,
                    tc->dense ? "dense" : "sparse", tc->dim,
                    (unsigned long long)tc->rows);
            if (!tc && !is_dropped(g->tm, t->name))
                BAD("table '%s' (%s, dim %u) is in the snapshot but not in "
                    "the config: put its section back, or start psd with "
                    "--drop-table %s to let its rows go", t->name,
                    t->dense ? "dense" : "sparse", t->dim, t->name);
            if (!tc) {
                for (uint32_t k = 0; k < aux; k++)
                    if (map[k] < 0 && !strcmp(st[k].name, t->name))
                        BAD("table '%s' is in the snapshot twice", t->name);
                if (++dropped > DROPPED_CHECKED_MAX)
                    BAD("more than %d tables dropped at once: psd checks at "
                        "most %d in one start", DROPPED_CHECKED_MAX,
                        DROPPED_CHECKED_MAX);
                add_name(g->tm->dropped_names,
                         sizeof g->tm->dropped_names, t->name);
            }
            if (tc && t->upd != (uint32_t)tc->upd.kind)
                BAD("table '%s': its updater changed since the snapshot, so "
                    "its optimizer state does not fit (to keep the weights "
                    "under another updater: psd --export with the old "
                    "ini, then psd --import into the new one)", tc->name);
            /* A dropped table's header is the file's word alone: it
             * must be one the config could have described, or the sizes
             * read past below could overflow. */
            if (!tc && (!t->name[0] || t->upd > PSD_UPD_FTRL || t->dim < 1 ||
                        t->dim > 65536 ||
                        (t->dense ? t->rows < 1 ||
                                        t->rows > UINT64_MAX / t->dim /
                                                      sizeof(float) ||
                                        t->rows > UINT64_MAX / hd->shards
                                  : t->rows != 0)))
                BAD("table '%s': updater %u, dim %u, rows %llu: not a table "
                    "psd writes", t->name, t->upd, t->dim,
                    (unsigned long long)t->rows);
            map[aux] = j;
            if (tc)
                seen[j] = 1;
            if (g->n && tc) {
                lrc = psd_table_load(g->n->tables[j], &in, inner,
                                     sizeof inner);
            } else {
                /* Not built: a dropped table (taken as bsp, so saved
                 * sums are read past too), or any under --check. */
                psd_table_conf c;
                if (tc)
                    c = *tc;
                else {
                    memset(&c, 0, sizeof c);
                    c.dense = t->dense;
                    c.dim = t->dim;
                    c.rows = t->rows;
                    c.upd.kind = (psd_updater_kind)t->upd;
                    c.consistency = PSD_CONS_BSP;
                }
                lrc = psd_table_skip(&c, hd->shards, (int)hd->nnodes,
                                     g->index, &in, inner, sizeof inner);
            }
            tables_seen++;
        } else if (kind == SEC_SYNC && !sync_seen++) {
            r_place at_sync = r_mark(r);
            lrc = psd_sync_load(sync, &in, (int)hd->version, g->now_ms, inner,
                                sizeof inner);
            /* psd 0.4.0 wrote format 4 with 70 bytes a worker; the layout
             * grew (79) before 0.4.1 under the same number, and its
             * folders were refused as damaged. Its section is read again
             * so when this psd's layout does not end where the section
             * does. */
            char v040[256];
            if (hd->version == 4 && (lrc || !section_ends_here(r, start))) {
                if (r_rewind(r, at_sync) == 0 &&
                    psd_sync_load_v040(sync, &in, g->now_ms, v040,
                                       sizeof v040) == 0 &&
                    section_ends_here(r, start))
                    lrc = 0;
                else if (r_rewind(r, at_sync) == 0)   /* said as ours */
                    lrc = psd_sync_load(sync, &in, 4, g->now_ms, inner,
                                        sizeof inner);
            }
        } else if (kind == SEC_DEDUP && !dedup_seen++) {
            lrc = psd_dedup_load(dedup, &in, g->now_ms, inner, sizeof inner);
        } else if (kind != SEC_END) {
            BAD("unexpected section %u", kind);
        }
        if (lrc && !r->eof && strstr(inner, "out of memory"))
            /* Not damage: loading takes more than the rows (a shard's
             * slots grow as its keys come), and a node that ran near its
             * limit may not start again under it. Said so, or the
             * operator reached for --skip-snapshot, which starts from the
             * initial values. */
            BAD("%s section: %s while loading it (the file is not damaged: "
                "give psd more memory, a higher ulimit -v or LimitAS= in a "
                "unit; loading needs more than the rows took while the node "
                "ran, which psd --check does not weigh)", sec_name(kind),
                inner);
        if (lrc)
            BAD("%s section: %s", sec_name(kind),
                r->eof ? "truncated" : inner);
        uint64_t consumed = r->off - start, len;
        uint32_t want = r->crc;
        if (r_read(r, &len, 8) || r_read(r, &crc, 4))
            BAD("%s section: truncated before its checksum", sec_name(kind));
        if (len != consumed)
            BAD("%s section: %llu bytes read, its length says %llu",
                sec_name(kind), (unsigned long long)consumed,
                (unsigned long long)len);
        if (crc != want)
            BAD("%s section: CRC mismatch (stored %08x, computed %08x)",
                sec_name(kind), crc, want);
        if (kind == SEC_END)
            break;
    }
    if (tables_seen != nt || !sync_seen || !dedup_seen)
        BAD("sections missing before the end marker");
    *at = 24;
    int same = nt == (uint32_t)cfg->ntables;
    for (uint32_t i = 0; i < nt; i++)
        same &= map[i] == (int32_t)i;
    /* The header's counts and every table section fit: of what the shape
     * covers, only a table's consistency mode is left. psd 0.1 hashed
     * neither it nor the updater (the sections hold the updater, checked
     * above): its files take each table's mode from the config
     * (docs/durability.md section 5). */
    uint64_t shape = psd_config_shape(cfg);
    int of_0_1 = hd->version == 1 && hd->shape == shape_of_0_1(hd, st, nt);
    g->of_0_1 = of_0_1;
    if (same && hd->shape != shape && !of_0_1)
        BAD("taken under another layout (shape %016llx, the config's is "
            "%016llx): every table's name, kind, dim, rows and updater "
            "match, so a table's consistency mode changed since (restore "
            "it, or start with --skip-snapshot to set this node's files "
            "aside)", (unsigned long long)hd->shape,
            (unsigned long long)shape);
    if (!same && !of_0_1 &&
        !shape_fits(hd->shape, psd_shape_begin(cfg->nnodes, cfg->shards), st,
                    map, 0, nt, cfg))
        BAD("taken under other tables (shape %016llx): each table the "
            "config keeps matches by name, kind, dim, rows and updater, so "
            "one's consistency mode changed since (restore it, or start "
            "with --skip-snapshot to set this node's files aside)",
            (unsigned long long)hd->shape);
    if (g->tm) {
        g->tm->added = cfg->ntables - (int)(nt - (uint32_t)dropped);
        for (int j = 0; j < cfg->ntables; j++)
            if (!seen[j])
                add_name(g->tm->added_names, sizeof g->tm->added_names,
                         cfg->tables[j].name);
        g->tm->dropped = dropped;
        if (!same) {
            g->tm->map = map;
            g->tm->nmap = nt;
            map = NULL;
        }
    }
    rc = 0;
bad:
    free(st);
    free(map);
    free(seen);
    if (!g->n) {
        if (ysync_ok)
            psd_sync_destroy(&ysync);
        psd_dedup_free(dedup);
    }
    return rc;
}

#undef BAD

/* No snapshot, but a staged one: psd --reshard or --import was cut off
 * before this node's took its name (others' may have theirs). Starting
 * from init would serve an empty model beside nodes with theirs. 1 (and
 * err) then, else 0. */
static int staged_left(const char *dir, int node, char *err, size_t errlen)
{
    char staged[4200];
    struct stat st;
    psd_snapshot_staged_path(staged, sizeof staged, dir, node);
    if (stat(staged, &st))
        return 0;
    /* What the files say: every staged snapshot is written and synced
     * before the first takes its name, so one left where other nodes
     * hold theirs finishes the run by a rename; removing it alone (the
     * old advice) let --check pass a half model (an operators' trial). */
    snprintf(err, errlen, "%s: no snapshot of node %d beside it: a psd "
             "--reshard or --import was cut off before its snapshots took "
             "their names. If every node has its psd-nodeN.snap from that "
             "run or such a .staged file, it was cut off between its "
             "renames, and every .staged file is whole: renaming each to "
             "psd-nodeN.snap finishes it. Else run it again into a fresh "
             "folder (removing every node's psd-node*.staged files, and "
             "the snapshots that run renamed). Removing this file alone "
             "starts this node from init beside nodes that hold the model",
             staged, node);
    return 1;
}

int psd_snapshot_check(const char *dir, int node, const psd_config *cfg,
                       psd_snap_tables *tables, psd_snap_info *info,
                       char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    char path[4200], why[400];
    psd_snapshot_path(path, sizeof path, dir, node);
    reader r = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    if (r.fd < 0) {
        if (errno == ENOENT)
            return staged_left(dir, node, err, errlen) ? -1 : 1;
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return e == EACCES || e == EPERM ? 2 : -1;
    }
    header hd;
    int rc = -1;
    uint64_t at = 0;
    r.buf = malloc(BUF_BYTES);
    if (!r.buf)
        snprintf(why, sizeof why, "out of memory");
    else if (read_header(&r, &hd, why, sizeof why) == 0 &&
             header_fits(&hd, node, cfg, tables == NULL, why,
                         sizeof why) == 0) {
        /* The same shape: the tables are the config's, and the rest is
         * read when psd starts. Another: read every section, as psd
         * would, to tell whether its tables fit the config's. */
        target g = { NULL, cfg, node, 0, tables, 0 };
        if (hd.shape == psd_config_shape(cfg) ||
            read_sections(&r, &hd, &g, &at, why, sizeof why) == 0) {
            *info = hd.si;
            info->shape = hd.shape;
            info->ntables = hd.ntables;
            info->version = hd.version;
            info->of_0_1 = g.of_0_1;
            struct stat st;
            if (fstat(r.fd, &st) == 0)
                info->bytes = (uint64_t)st.st_size;
            rc = 0;
        }
    }
    if (rc)
        snprintf(err, errlen, "%s: offset %llu: %s%s%s", path,
                 (unsigned long long)at, why, r.err ? ": " : "",
                 r.err ? strerror(r.err) : "");
    close(r.fd);
    free(r.buf);
    return rc;
}

int psd_snapshot_load(psd_node *n, const char *dir, uint64_t now_ms,
                      psd_snap_info *info, psd_snap_tables *tables,
                      char *err, size_t errlen)
{
    char path[4200], why[400];
    psd_snapshot_path(path, sizeof path, dir, n->index);
    reader r = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    uint64_t at = 0;             /* where the failing part starts */
    if (r.fd < 0) {
        if (errno == ENOENT)
            return staged_left(dir, n->index, err, errlen) ? -1 : 1;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    r.buf = malloc(BUF_BYTES);
    header hd;
    target g = { n, &n->cfg, n->index, now_ms, tables, 0 };
    if (!r.buf) {
        snprintf(why, sizeof why, "out of memory");
        goto bad;
    }
    /* The shape hash covers the tables too; when only they differ, their
     * sections say how. */
    if (read_header(&r, &hd, why, sizeof why) ||
        header_fits(&hd, n->index, &n->cfg, tables == NULL, why, sizeof why) ||
        read_sections(&r, &hd, &g, &at, why, sizeof why))
        goto bad;
    char extra;
    at = r.off;
    if (r_read(&r, &extra, 1) == 0) {
        snprintf(why, sizeof why, "bytes after the end marker");
        goto bad;
    }
    psd_snap_info si = hd.si;
    si.bytes = r.off;
    si.shape = hd.shape;
    si.ntables = hd.ntables;
    si.version = hd.version;
    si.of_0_1 = g.of_0_1;
    close(r.fd);
    free(r.buf);
    if (info)
        *info = si;
    return 0;
bad:
    snprintf(err, errlen, "%s: offset %llu: %s%s%s", path,
             (unsigned long long)at, why, r.err ? ": " : "",
             r.err ? strerror(r.err) : "");
    close(r.fd);
    free(r.buf);
    if (tables) {
        free(tables->map);
        tables->map = NULL;
        tables->nmap = 0;
    }
    return -1;
}
