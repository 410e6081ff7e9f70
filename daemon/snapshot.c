/* Snapshot files: writing through a temporary file, reading with every
 * byte checked. See snapshot.h; the format is in docs/durability.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int psd_snapshot_write(const psd_node *n, const char *dir,
                       uint64_t generation, uint64_t journal_seq,
                       psd_snap_info *info, char *err, size_t errlen)
{
    char path[4200], tmp[4300];
    psd_snapshot_path(path, sizeof path, dir, n->index);
    /* Named for the writer: a writer that outlived its psd can never
     * rename a newer psd's unfinished file, or the reverse. */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    unlink(tmp);                 /* a leftover of a writer that died */
    writer w = { .fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                            0600) };
    if (w.fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    w.buf = malloc(BUF_BYTES);
    if (!w.buf)
        w.err = ENOMEM;
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
    free(w.buf);
    if (rc == 0) {
        pause_at("fsynced");
        what = "rename";
        if (rename(tmp, path))
            w.err = errno, rc = -1;
    }
    if (rc) {
        snprintf(err, errlen, "%s %s: %s", what, tmp,
                 strerror(w.err ? w.err : EIO));
        unlink(tmp);
        return -1;
    }
    pause_at("renamed");
    /* The new file is in place either way; without the folder's fsync
     * a power loss may bring the previous one back, so the caller keeps
     * the journal it covers (err says why). */
    if (errlen)
        err[0] = '\0';
    if (psd_fsync_dir(dir) && psd_fsync_dir(dir))
        snprintf(err, errlen, "fsync of folder %s: %s", dir, strerror(errno));
    if (info)
        *info = (psd_snap_info){ generation, journal_seq, created, w.off };
    return 0;
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
        snprintf(why, whylen, "format version %u, this psd reads 1..%d", u,
                 PSD_SNAPSHOT_VERSION);
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

/* Whether the header's node and layout are node's under cfg. 0, or -1
 * with the reason in why. */
static int header_fits(const header *hd, int node, const psd_config *cfg,
                       char *why, size_t whylen)
{
    if (hd->node != (uint32_t)node) {
        snprintf(why, whylen, "taken by node %u, this is node %d", hd->node,
                 node);
        return -1;
    }
    if (hd->nnodes != (uint32_t)cfg->nnodes || hd->shards != cfg->shards ||
        hd->ntables != (uint32_t)cfg->ntables) {
        snprintf(why, whylen, "taken under another layout (%u nodes, %u "
                 "shards, %u tables; the config has %d nodes, %u shards, %d "
                 "tables): a snapshot only fits the layout that wrote it",
                 hd->nnodes, hd->shards, hd->ntables, cfg->nnodes,
                 cfg->shards, cfg->ntables);
        return -1;
    }
    return 0;
}

int psd_snapshot_check(const char *dir, int node, const psd_config *cfg,
                       uint64_t *journal_seq, char *err, size_t errlen)
{
    *journal_seq = 0;
    char path[4200], why[400];
    psd_snapshot_path(path, sizeof path, dir, node);
    reader r = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    if (r.fd < 0) {
        if (errno == ENOENT)
            return 1;
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
             header_fits(&hd, node, cfg, why, sizeof why) == 0) {
        at = 24;
        if (hd.shape != psd_config_shape(cfg))
            snprintf(why, sizeof why, "taken under another layout: its "
                     "tables differ from the config's (a name, kind, dim, "
                     "rows, updater or consistency changed)");
        else {
            *journal_seq = hd.si.journal_seq;
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

#define BAD(...) do { snprintf(why, sizeof why, __VA_ARGS__); \
                      goto bad; } while (0)

int psd_snapshot_load(psd_node *n, const char *dir, uint64_t now_ms,
                      psd_snap_info *info, char *err, size_t errlen)
{
    char path[4200], why[400];
    psd_snapshot_path(path, sizeof path, dir, n->index);
    reader r = { .fd = open(path, O_RDONLY | O_CLOEXEC) };
    uint64_t at = 0;             /* where the failing part starts */
    if (r.fd < 0) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    r.buf = malloc(BUF_BYTES);
    psd_source in = { r_read, &r };
    if (!r.buf)
        BAD("out of memory");
    header hd;
    /* The shape hash covers the tables too; when only they differ, their
     * sections below say how. */
    if (read_header(&r, &hd, why, sizeof why) ||
        header_fits(&hd, n->index, &n->cfg, why, sizeof why))
        goto bad;
    psd_snap_info si = hd.si;
    uint64_t shape = hd.shape;
    uint32_t crc;
    int tables_seen = 0, sync_seen = 0, dedup_seen = 0;
    for (;;) {
        at = r.off;
        r.crc = 0;
        uint32_t kind, aux;
        if (r_read(&r, &kind, 4) || r_read(&r, &aux, 4))
            BAD("truncated: a section header is missing (no end marker)");
        uint64_t start = r.off;
        char inner[300] = "";
        int rc = 0;
        if (kind == SEC_TABLE) {
            if ((int)aux != tables_seen || aux >= (uint32_t)n->ntables)
                BAD("table section %u out of order", aux);
            const psd_table_conf *tc = psd_table_conf_get(n->tables[aux]);
            uint8_t dense;
            uint32_t dim, upd, len;
            uint64_t rows;
            char name[PSD_NAME_MAX];
            if (r_read(&r, &dense, 1) || r_read(&r, &dim, 4) ||
                r_read(&r, &rows, 8) || r_read(&r, &upd, 4) ||
                r_read(&r, &len, 4) || len >= sizeof name ||
                r_read(&r, name, len))
                BAD("table %u: truncated or bad table header", aux);
            name[len] = '\0';
            if (strcmp(name, tc->name) || dense != (tc->dense != 0) ||
                dim != tc->dim || rows != tc->rows)
                BAD("table %u is '%s' (%s, dim %u, rows %llu) in the "
                    "snapshot, '%s' (%s, dim %u, rows %llu) in the config",
                    aux, name, dense ? "dense" : "sparse", dim,
                    (unsigned long long)rows, tc->name,
                    tc->dense ? "dense" : "sparse", tc->dim,
                    (unsigned long long)tc->rows);
            if (upd != (uint32_t)tc->upd.kind)
                BAD("table '%s': its updater changed since the snapshot, so "
                    "its optimizer state does not fit", tc->name);
            rc = psd_table_load(n->tables[aux], &in, inner, sizeof inner);
            tables_seen++;
        } else if (kind == SEC_SYNC && !sync_seen++) {
            rc = psd_sync_load(&n->sync, &in, hd.version >= 2, now_ms, inner,
                               sizeof inner);
        } else if (kind == SEC_DEDUP && !dedup_seen++) {
            rc = psd_dedup_load(n->dedup, &in, now_ms, inner, sizeof inner);
        } else if (kind != SEC_END) {
            BAD("unexpected section %u", kind);
        }
        if (rc)
            BAD("%s section: %s", sec_name(kind),
                r.eof ? "truncated" : inner);
        uint64_t consumed = r.off - start, len;
        uint32_t want = r.crc;
        if (r_read(&r, &len, 8) || r_read(&r, &crc, 4))
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
    if (tables_seen != n->ntables || !sync_seen || !dedup_seen)
        BAD("sections missing before the end marker");
    at = 24;
    /* The header's counts and every table section fit: of what the shape
     * covers, only a table's consistency mode is left (or a file written
     * before the shape covered it, docs/durability.md section 5). */
    if (shape != n->shape)
        BAD("taken under another layout (shape %016llx, the config's is "
            "%016llx): every table's name, kind, dim, rows and updater "
            "match, so a table's consistency mode changed since (restore "
            "it, or start with --skip-snapshot to set this node's files "
            "aside)", (unsigned long long)shape,
            (unsigned long long)n->shape);
    char extra;
    at = r.off;
    if (r_read(&r, &extra, 1) == 0)
        BAD("bytes after the end marker");
    si.bytes = r.off;
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
    return -1;
}
