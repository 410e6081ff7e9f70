/* psd --export: node snapshots to NumPy .npy files; see export.h. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "durable.h"
#include "export.h"
#include "journal.h"
#include "node.h"
#include "npy.h"
#include "readdir.h"
#include "request.h"
#include "snapshot.h"
#include "table.h"

/* Opens path for writing as the model's own files are (0600, not
 * followed through a symbolic link): an export is the whole model, and
 * umask 022 made it readable by every local user. NULL with "PATH:
 * reason" in err when it cannot. */
static FILE *open_private(const char *path, const char *mode, char *err,
                          size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
                            O_NOFOLLOW, 0600);
    FILE *f = fd < 0 ? NULL : fdopen(fd, mode);
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* Keys pulled, and rows written, this many at a time: the rows of a
 * table never need a second copy of the whole table in memory. */
#define BATCH 65536

/* SIGINT, SIGTERM or SIGHUP during the export (Ctrl-C, a stop): set by
 * the handler, looked at between batches, so that the export fails as on
 * any error and takes back what it wrote. It left a table and a half
 * that psd --import took for a model (an operators' trial). */
static volatile sig_atomic_t stop_sig;

static void on_stop(int sig)
{
    stop_sig = sig;
}

static int stopped(char *err, size_t errlen)
{
    if (!stop_sig)
        return 0;
    snprintf(err, errlen, "stopped by %s", strsignal(stop_sig));
    return 1;
}

/* Closes f, its bytes on the disk (an export said to be whole must
 * outlast a power cut: it wrote with no fsync at all, a reshard trial);
 * -1 with err naming path when anything written to it failed. */
static int finish(FILE *f, const char *path, int failed, char *err,
                  size_t errlen)
{
    failed |= ferror(f);
    int e = errno;
    if (!failed && (fflush(f) || fsync(fileno(f)))) {
        e = errno;
        failed = 1;
    }
    if (fclose(f) && !failed) {
        e = errno;
        failed = 1;
    }
    if (failed)
        snprintf(err, errlen, "%s: %s", path, strerror(e));
    return failed ? -1 : 0;
}

/* Writes node `node`'s rows of table t into dir: TABLE.nodeN.keys.npy and
 * TABLE.nodeN.npy. *count: the rows written; crc[0], crc[1]: the CRC-32
 * (zlib's) of the keys' and the rows' bytes (after each file's header),
 * which the manifest lists, so that psd --import and read_export know a
 * file damaged or replaced since. 0, or -1 with err. */
static int export_table(psd_table *t, const char *dir, int node,
                        uint64_t *count, uint32_t crc[2], char *err,
                        size_t errlen)
{
    const psd_table_conf *tc = psd_table_conf_get(t);
    uint64_t n = psd_table_rows(t);
    size_t klen = (size_t)n * sizeof(uint64_t);
    uint64_t *keys = malloc(klen ? klen : 1);
    if (!keys || psd_table_keys(t, keys)) {
        free(keys);
        snprintf(err, errlen, "table '%s': out of memory listing its keys",
                 tc->name);
        return -1;
    }
    *count = n;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.node%d.keys.npy", dir, tc->name, node);
    FILE *f = open_private(path, "wb", err, errlen);
    if (!f) {
        free(keys);
        return -1;
    }
    int bad = psd_npy_header(f, "u8", n, 0) ||
              (klen && fwrite(keys, 1, klen, f) != klen);
    crc[0] = psd_npy_crc32(0, keys, klen);
    crc[1] = 0;
    if (finish(f, path, bad, err, errlen)) {
        free(keys);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.node%d.npy", dir, tc->name, node);
    size_t rowb = (size_t)tc->dim * sizeof(float);
    char *rows = malloc((n < BATCH ? (n ? n : 1) : BATCH) * rowb);
    if (!rows)
        snprintf(err, errlen, "%s: out of memory", path);
    f = rows ? open_private(path, "wb", err, errlen) : NULL;
    if (!f) {
        free(rows);
        free(keys);
        return -1;
    }
    bad = psd_npy_header(f, "f4", n, tc->dim);
    for (uint64_t i = 0; i < n && !bad; i += BATCH) {
        size_t m = (size_t)(n - i < BATCH ? n - i : BATCH);
        if (stop_sig) {
            bad = 1;
            break;
        }
        /* Every key is a row of this node: a pull creates nothing. */
        if (psd_table_pull(t, (const char *)(keys + i), m, rows)) {
            errno = ENOMEM;
            bad = 1;
        } else {
            bad = fwrite(rows, 1, m * rowb, f) != m * rowb;
            crc[1] = psd_npy_crc32(crc[1], rows, m * rowb);
        }
    }
    free(rows);
    free(keys);
    int rc = finish(f, path, bad, err, errlen);
    if (rc && stop_sig)
        (void)stopped(err, errlen);
    return rc;
}

/* s as a JSON string (the paths may hold any byte). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* What one node gave: its snapshot (if any), the journal records after
 * it, and the rows of each table (-1: the table is not in its snapshot, a
 * table the ini added since). */
typedef struct node_out {
    int has_snapshot;
    psd_snap_info si;
    char snap[4200];
    uint64_t records;            /* journal records replayed */
    int64_t *rows;               /* per table of the ini */
    uint64_t drop_used;          /* the --drop-table names its snapshot had
                                    (psd_snap_tables) */
    uint64_t *pending;           /* per table of the ini: rows of a bsp
                                    clock's sums not applied yet */
    uint32_t *crcs;              /* per table of the ini: its keys' and
                                    rows' CRC-32 (export_table) */
} node_out;

/* DIR/export.nodeN.json: node i's files, so that the exports of nodes
 * made one by one (-n, on several hosts) gather in one folder. */
static int write_manifest(const char *dir, const char *ini,
                          const psd_config *cfg, int i, const node_out *no,
                          char *err, size_t errlen)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/export.node%d.json", dir, i);
    FILE *f = open_private(path, "w", err, errlen);
    if (!f)
        return -1;
    /* As an absolute path: "conf/psd.ini" meant nothing once the
     * export was copied elsewhere (an upgrade trial). */
    char cwd[PATH_MAX], abs[PATH_MAX + 4400];
    if (ini[0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(abs, sizeof abs, "%s/%s", cwd, ini);
    else
        snprintf(abs, sizeof abs, "%s", ini);
    fprintf(f, "{\"format\": 1, \"ini\": ");
    json_str(f, abs);
    fprintf(f, ", \"nodes\": %d, \"shards\": %u, \"node\": %d,\n"
            " \"snapshot\": ", cfg->nnodes, cfg->shards, i);
    if (no->has_snapshot) {
        fprintf(f, "{\"file\": ");
        json_str(f, no->snap);
        fprintf(f, ", \"generation\": %llu, \"created_ms\": %llu}",
                (unsigned long long)no->si.generation,
                (unsigned long long)no->si.created_ms);
    } else
        fprintf(f, "null");
    fprintf(f, ", \"journal_records\": %llu,\n \"tables\": [",
            (unsigned long long)no->records);
    const char *sep = "";
    for (int j = 0; j < cfg->ntables; j++) {
        const psd_table_conf *tc = &cfg->tables[j];
        if (no->rows[j] < 0)
            continue;
        fprintf(f, "%s\n  {\"name\": ", sep);
        json_str(f, tc->name);
        fprintf(f, ", \"kind\": \"%s\", \"dim\": %u, \"rows\": %llu, "
                "\"updater\": \"%s\", \"keys\": \"%s.node%d.keys.npy\", "
                "\"values\": \"%s.node%d.npy\", \"count\": %lld, "
                "\"keys_crc32\": %lu, \"values_crc32\": %lu}",
                tc->dense ? "dense" : "sparse", tc->dim,
                (unsigned long long)(tc->dense ? tc->rows : 0),
                psd_updater_name(tc->upd.kind), tc->name, i, tc->name, i,
                (long long)no->rows[j], (unsigned long)no->crcs[2 * j],
                (unsigned long)no->crcs[2 * j + 1]);
        sep = ",";
    }
    fprintf(f, "]}\n");
    return finish(f, path, 0, err, errlen);
}

/* The node whose file name is, as an export names them (any node's):
 * export.nodeI.json, TABLE.nodeI.npy and TABLE.nodeI.keys.npy, and
 * export.nodeI.partial, which stands while the node's files are replaced
 * (psd --import and read_export refuse a folder that holds one); -1 for
 * any other name. */
static int node_of(const char *name)
{
    const char *at = NULL;
    for (const char *p = strstr(name, ".node"); p; p = strstr(p + 1, ".node"))
        at = p;
    if (!at || at == name || !isdigit((unsigned char)at[5]))
        return -1;
    char *end;
    errno = 0;
    long k = strtol(at + 5, &end, 10);
    if (errno || k > 65535)
        return -1;
    if (!strcmp(end, ".json") || !strcmp(end, ".partial"))
        return (size_t)(at - name) == 6 && !strncmp(name, "export", 6)
                   ? (int)k : -1;
    return !strcmp(end, ".npy") || !strcmp(end, ".keys.npy") ? (int)k : -1;
}

/* Whether name is one of the files an export writes for node i (any node
 * when i < 0). */
static int node_file(const char *name, int i)
{
    int k = node_of(name);
    return k >= 0 && (i < 0 || k == i);
}

static int is_mark(const char *name)
{
    size_t n = strlen(name);
    return n > 8 && !strcmp(name + n - 8, ".partial");
}

static void free_names(char **names, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(names[k]);
    free(names);
}

/* The names in folder dir but . and .., into *names (malloc'd, *n of
 * them; free_names). nofollow: a symbolic link there is refused, not
 * followed (a link put in a staging folder's place had the export empty
 * the folder it named: a review). A listing that fails part way (an
 * error of readdir's, not its end) fails: taken for the end, a node's
 * staged files were left unmoved, then removed with their folder, and
 * the export said it had written them (a review). 0, or -1 with err and
 * errno set. */
static int list_dir(const char *dir, int nofollow, char ***names, size_t *n,
                    char *err, size_t errlen)
{
    *names = NULL;
    *n = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC |
                           (nofollow ? O_NOFOLLOW : 0));
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "%s: %s", dir,
                 e == ELOOP || e == ENOTDIR
                     ? "not a folder (a symbolic link, or a file): remove it"
                     : strerror(e));
        errno = e;
        return -1;
    }
    size_t cap = 0;
    int e = 0;
    for (struct dirent *de; (de = psd_readdir(d, &e));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **g = realloc(*names, cap * sizeof *g);
            if (!g) {
                e = ENOMEM;
                break;
            }
            *names = g;
        }
        if (!((*names)[*n] = strdup(de->d_name))) {
            e = ENOMEM;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (e) {
        free_names(*names, *n);
        *names = NULL;
        *n = 0;
        snprintf(err, errlen, "listing %s: %s", dir, strerror(e));
        errno = e;
        return -1;
    }
    return 0;
}

/* Removes node i's files of an earlier export from dir, or every node's
 * for i < 0, but not the marks (swap_in's, which stand meanwhile). The
 * manifests go first: one that fails partway leaves no manifest naming
 * files that are gone. */
static int clear_node(const char *dir, int i, char *err, size_t errlen)
{
    char **names, path[4400];
    size_t n;
    if (list_dir(dir, 0, &names, &n, err, errlen))
        return -1;
    int rc = 0;
    /* Pass 0: manifests; 1: tables; marks stay. */
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (size_t k = 0; k < n && rc == 0; k++) {
            const char *name = names[k];
            size_t len = strlen(name);
            int manifest = len > 5 && !strcmp(name + len - 5, ".json");
            if (is_mark(name) || manifest != !pass || !node_file(name, i))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (unlink(path) && errno != ENOENT) {
                snprintf(err, errlen, "%s: %s", path, strerror(errno));
                rc = -1;
            }
        }
    free_names(names, n);
    return rc;
}

/* Node i's mark in dir: it stands from before anything of an earlier
 * export is removed until the node's new files and manifest are in
 * place (swap_in), so a kill at any moment between leaves the folder
 * refused (a kill while an earlier export was cleared left its tables
 * without a manifest: review). 0, or -1 with err. */
static void mark_path(char *buf, size_t len, const char *dir, int i)
{
    snprintf(buf, len, "%s/export.node%d.partial", dir, i);
}

static int mark(const char *dir, int i, char *err, size_t errlen)
{
    char path[4200];
    mark_path(path, sizeof path, dir, i);
    FILE *f = open_private(path, "w", err, errlen);
    if (!f)
        return -1;
    return finish(f, path, fprintf(f, "psd --export of node %d, pid %ld, "
                                   "not finished\n", i, (long)getpid()) < 0,
                  err, errlen);
}

static int unmark(const char *dir, int i, char *err, size_t errlen)
{
    char path[4200];
    mark_path(path, sizeof path, dir, i);
    if (unlink(path) && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Makes dir (0700, as data_dir), or takes it as it is. */
static int make_out(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (mkdir(dir, 0700) == 0)
        return 0;
    if (errno == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    snprintf(err, errlen, "%s: %s", dir,
             errno == EEXIST ? "not a folder" : strerror(errno));
    return -1;
}

/* ---- staging ------------------------------------------------------------
 * Each node's files are written into its own staging folder in the
 * export's, DIR/.export.nodeI.staging (hidden: no reader takes it for
 * tables), and put in place of the node's earlier files only once every
 * node asked for is whole (swap_in). An export that failed part way (a
 * full disk, a signal) removed the earlier export of the nodes it was
 * writing, the only copy of a nightly model (a reshard trial); now it
 * leaves it as it was. One staging folder per node: the exports of
 * several hosts (-n K) may share one folder. */

static void stage_path(char *buf, size_t len, const char *dir, int i)
{
    snprintf(buf, len, "%s/.export.node%d.staging", dir, i);
}

/* Node k of a staging folder's name, or -1. */
static int stage_of(const char *name)
{
    int k, end = 0;
    return sscanf(name, ".export.node%d.staging%n", &k, &end) == 1 &&
                   !name[end] && k >= 0
               ? k : -1;
}

/* Removes staging folder stage and psd's files in it (never following a
 * link: see list_dir); one that is not there is no error. 0, or -1 with
 * err. */
static int drop_stage(const char *stage, char *err, size_t errlen)
{
    char **names, path[4400];
    size_t n;
    if (list_dir(stage, 1, &names, &n, err, errlen))
        return errno == ENOENT ? 0 : -1;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (!node_file(names[k], -1))
            continue;            /* not psd's: rmdir says so */
        snprintf(path, sizeof path, "%s/%s", stage, names[k]);
        if (unlink(path) && errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    free_names(names, n);
    if (rc == 0 && rmdir(stage) && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s%s", stage, strerror(errno),
                 errno == ENOTEMPTY ? " (it holds files psd did not write "
                                      "there: move them, then remove it)"
                                    : "");
        rc = -1;
    }
    return rc;
}

/* Node i's staging folder in dir, made empty (one a killed export left
 * goes first), into stage. 0, or -1 with err. */
static int make_stage(const char *dir, int i, char *stage, size_t len,
                      char *err, size_t errlen)
{
    stage_path(stage, len, dir, i);
    if (drop_stage(stage, err, errlen))
        return -1;
    if (mkdir(stage, 0700)) {
        snprintf(err, errlen, "%s: %s", stage, strerror(errno));
        return -1;
    }
    return 0;
}

/* Moves node i's staged files from stage into dir, its manifest last (a
 * kill between leaves no manifest naming files not there), and removes
 * stage. 0, or -1 with err. */
static int move_in(const char *stage, const char *dir, int i, char *err,
                   size_t errlen)
{
    char manifest[64];
    snprintf(manifest, sizeof manifest, "export.node%d.json", i);
    char **names;
    size_t n;
    if (list_dir(stage, 1, &names, &n, err, errlen))
        return -1;
    int rc = 0, has_manifest = 0;
    for (size_t k = 0; k < n; k++)
        has_manifest |= !strcmp(names[k], manifest);
    if (!has_manifest) {
        snprintf(err, errlen, "%s holds no %s: node %d's staged files are "
                 "not whole", stage, manifest, i);
        rc = -1;
    }
    char from[4400], to[4400];
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (size_t k = 0; k < n && rc == 0; k++) {
            if (!node_file(names[k], i) ||
                (strcmp(names[k], manifest) == 0) != pass)
                continue;
            snprintf(from, sizeof from, "%s/%s", stage, names[k]);
            snprintf(to, sizeof to, "%s/%s", dir, names[k]);
            if (rename(from, to)) {
                snprintf(err, errlen, "moving %s to %s: %s", from, to,
                         strerror(errno));
                rc = -1;
            }
        }
    free_names(names, n);
    if (rc == 0)
        rc = drop_stage(stage, err, errlen);
    return rc;
}

/* For a whole export of nnodes: the marks and staging folders an earlier
 * export of more nodes, killed part way, left beyond nnodes go. 0, or -1
 * with err. */
static int sweep_beyond(const char *dir, int nnodes, char *err,
                        size_t errlen)
{
    char **names, path[4400];
    size_t n;
    if (list_dir(dir, 0, &names, &n, err, errlen))
        return -1;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        int mark_file = is_mark(names[k]);
        int node = mark_file ? node_of(names[k]) : stage_of(names[k]);
        if (node < nnodes)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        if (!mark_file)
            rc = drop_stage(path, err, errlen);
        else if (unlink(path) && errno != ENOENT) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    free_names(names, n);
    return rc;
}

/* How far swap_in got. */
enum { SWAP_NONE, SWAP_BEGUN, SWAP_PLACED, SWAP_DONE };

/* Puts the staged files of the nodes in staged[] (of nnodes; only >= 0:
 * that one) in place of their earlier files in dir: the marks first, so
 * that a kill while the earlier files go and the new ones come leaves the
 * folder refused; then every earlier file of those nodes; then the new
 * files, the folder fsync'd, and the marks go. A whole export (only < 0)
 * replaces every node's files: also those of nodes beyond nnodes (an
 * earlier export of more nodes left its last nodes' files, and the
 * folder read as clusters of two node counts; tables dropped since must
 * not linger either), which are marked too (a whole export killed while
 * it removed them, followed by -n exports of each node, lifted every
 * mark, and psd --import took in the rows of the files left: a review),
 * and removes the marks and staging folders left beyond nnodes. 0, or -1
 * with err; *how says how far it got (from SWAP_BEGUN until SWAP_DONE the
 * marks stand). */
static int swap_in(const char *dir, int only, int nnodes,
                   const unsigned char *staged, int *how, char *err,
                   size_t errlen)
{
    char stage[4200];
    *how = SWAP_NONE;
    /* The nodes to mark: those staged, and for a whole export those
     * beyond nnodes with files here. made: the marks this call makes,
     * taken back if it fails before anything earlier goes (a full disk
     * refused the second node's mark, and the first one's left the
     * earlier export refused); one an earlier export left stands. */
    char **names;
    size_t n;
    if (list_dir(dir, 0, &names, &n, err, errlen))
        return -1;
    int top = nnodes;
    for (size_t k = 0; only < 0 && k < n; k++)
        if (node_of(names[k]) >= top && !is_mark(names[k]))
            top = node_of(names[k]) + 1;
    unsigned char *want = calloc((size_t)top, 1),
                  *made = calloc((size_t)top, 1);
    int rc = want && made ? 0 : -1;
    if (rc)
        snprintf(err, errlen, "out of memory");
    for (int i = 0; want && i < nnodes; i++)
        want[i] = staged[i];
    for (size_t k = 0; want && k < n; k++)
        if (node_of(names[k]) >= nnodes && !is_mark(names[k]) && only < 0)
            want[node_of(names[k])] = 1;
    free_names(names, n);
    for (int i = 0; i < top && rc == 0; i++) {
        if (!want[i])
            continue;
        mark_path(stage, sizeof stage, dir, i);
        struct stat st;
        made[i] = lstat(stage, &st) != 0;   /* a link stays: not ours */
        rc = mark(dir, i, err, errlen);
    }
    if (rc == 0 && psd_fsync_dir(dir)) {
        snprintf(err, errlen, "%s: fsync: %s", dir, strerror(errno));
        rc = -1;
    }
    if (rc) {
        char ignored[64];
        for (int i = 0; made && i < top; i++)
            if (made[i])
                (void)unmark(dir, i, ignored, sizeof ignored);
        free(want);
        free(made);
        return -1;
    }
    free(made);
    *how = SWAP_BEGUN;
    rc = clear_node(dir, only, err, errlen);
    for (int i = 0; i < nnodes && rc == 0; i++) {
        if (!staged[i])
            continue;
        stage_path(stage, sizeof stage, dir, i);
        rc = move_in(stage, dir, i, err, errlen);
    }
    if (rc == 0)
        *how = SWAP_PLACED;
    if (rc == 0 && psd_fsync_dir(dir)) {
        snprintf(err, errlen, "%s: fsync: %s", dir, strerror(errno));
        rc = -1;
    }
    for (int i = 0; i < top && rc == 0; i++)
        if (want[i])
            rc = unmark(dir, i, err, errlen);
    free(want);
    if (rc)
        return -1;
    *how = SWAP_DONE;
    /* The export is whole and readable by then: what cannot go is said,
     * not failed (a leftover it could not remove made every export there
     * fail: a review). */
    if (only < 0 && sweep_beyond(dir, nnodes, err, errlen))
        fprintf(stderr, "psd --export: the export is whole, but what an "
                "earlier one left beyond node %d stays: %s\n", nnodes - 1,
                err);
    return 0;
}

/* Whether the file at path is another one than *was (a live node wrote a
 * new snapshot meanwhile); *was is updated. */
static int changed(const char *path, struct stat *was)
{
    struct stat now;
    if (stat(path, &now))
        memset(&now, 0, sizeof now);
    int moved = now.st_ino != was->st_ino || now.st_size != was->st_size ||
                now.st_mtim.tv_sec != was->st_mtim.tv_sec ||
                now.st_mtim.tv_nsec != was->st_mtim.tv_nsec;
    *was = now;
    return moved;
}

/* Loads node i as a restart would, reading only: its snapshot, then the
 * journal after it (the records a live node has written so far), and
 * writes its tables and manifest into out_dir, its staging folder (see
 * swap_in). 1 when it has neither; 2 when its
 * reading failed while a live node wrote a new snapshot (which removes
 * the journal segments the old one needs): to be tried again. */
static int export_node(const char *ini, int i, const char *const *drop,
                       int ndrop, const char *out_dir, node_out *o,
                       int ntables, char *err, size_t errlen)
{
    psd_config cfg;
    if (psd_config_load(&cfg, ini, err, errlen))
        return -1;
    char dir[4096];
    psd_config_data_dir(&cfg, dir, sizeof dir);
    psd_snapshot_path(o->snap, sizeof o->snap, dir, i);
    struct stat was;
    (void)changed(o->snap, &was);
    psd_node n;
    if (psd_node_init(&n, &cfg, i, 0, err, errlen)) {
        psd_node_destroy(&n);
        return -1;
    }
    if (n.cfg.ntables != ntables) {
        snprintf(err, errlen, "%s changed during the export", ini);
        psd_node_destroy(&n);
        return -1;
    }
    psd_snap_tables tm = { .drop = drop, .ndrop = ndrop };
    int rc = psd_snapshot_load(&n, dir, 0, &o->si, &tm, err, errlen);
    o->has_snapshot = rc == 0;
    o->drop_used = tm.drop_used;
    if (rc == 1 && psd_journal_first(dir, i) == 0) {
        psd_node_destroy(&n);
        return 1;
    }
    if (rc < 0) {
        free(tm.map);
        psd_node_destroy(&n);
        return changed(o->snap, &was) ? 2 : -1;
    }
    /* The segments after a snapshot were written under its tables. */
    uint64_t next;
    int of_0_1;
    psd_replay_ctx ctx = { &n, 0, tm.map, tm.nmap, 0 };
    rc = psd_journal_replay(dir, i,
                            psd_durable_replay_shape(
                                dir, i, &n.cfg,
                                o->has_snapshot ? &o->si : NULL, &of_0_1),
                            tm.map ? 0 : n.inits,
                            o->has_snapshot ? o->si.journal_seq : 1,
                            (size_t)n.cfg.max_frame + 4096,
                            psd_request_replay, &ctx, &next, &o->records,
                            NULL, 0, err, errlen);
    if (rc == 0) {
        psd_request_replayed(&n, 0);
        psd_journal_say_lost("--export", dir, i,
                             o->has_snapshot ? o->si.journal_seq : 1,
                             o->has_snapshot ? o->si.created_ms : 0);
    } else if (changed(o->snap, &was)) {
        free(tm.map);
        psd_node_destroy(&n);
        return 2;
    }
    /* A table the ini added since the snapshot holds only its init: not
     * exported. */
    for (int j = 0; j < ntables; j++)
        o->rows[j] = tm.map ? -1 : 0;
    for (uint32_t k = 0; tm.map && k < tm.nmap; k++)
        if (tm.map[k] >= 0 && tm.map[k] < ntables)
            o->rows[tm.map[k]] = 0;
    free(tm.map);
    /* Stopped while the node was read: its earlier files stay (a -n
     * export's are whole; review). */
    if (rc == 0 && stopped(err, errlen))
        rc = -1;
    for (int j = 0; j < ntables && rc == 0; j++) {
        uint64_t count = 0;
        if (o->rows[j] < 0)
            continue;
        rc = stopped(err, errlen) ||
             export_table(n.tables[j], out_dir, i, &count, o->crcs + 2 * j,
                          err, errlen);
        o->rows[j] = (int64_t)count;
        o->pending[j] = psd_table_pending(n.tables[j]);
    }
    if (rc == 0)
        rc = stopped(err, errlen) ||
             write_manifest(out_dir, ini, &n.cfg, i, o, err, errlen);
    psd_node_destroy(&n);
    return rc ? -1 : 0;
}

int psd_export(const char *ini, int only, const char *const *drop,
               int ndrop, const char *out_dir)
{
    char err[16384] = "";
    psd_config cfg;
    if (psd_config_load(&cfg, ini, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (only >= cfg.nnodes) {
        fprintf(stderr, "%s: node %d does not exist (the file lists %d "
                "node%s)\n", ini, only, cfg.nnodes, cfg.nnodes == 1 ? "" : "s");
        psd_config_destroy(&cfg);
        return 1;
    }
    /* Caught, so that the export takes back what it wrote (below); one
     * ignored when psd started (nohup) stays ignored. */
    static const int stops[] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction was[3];
    for (int k = 0; k < 3; k++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop;
        /* A second one ends it at once (the staging folders are hidden,
         * and taken away by the next export). */
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        if (sigaction(stops[k], NULL, &was[k]) == 0 &&
            was[k].sa_handler != SIG_IGN)
            (void)sigaction(stops[k], &sa, NULL);
    }
    node_out *no = calloc(1, sizeof *no);
    int64_t *rows = calloc((size_t)cfg.ntables + 1, sizeof *rows);
    uint64_t *pending = calloc((size_t)cfg.ntables + 1, sizeof *pending);
    uint32_t *crcs = calloc(2 * ((size_t)cfg.ntables + 1), sizeof *crcs);
    /* The nodes whose staging folder this run made. */
    unsigned char *staged = calloc((size_t)cfg.nnodes, 1);
    int status = !no || !rows || !pending || !crcs || !staged, exported = 0;
    if (status)
        fprintf(stderr, "psd --export: out of memory\n");
    struct stat st;
    int existed = stat(out_dir, &st) == 0;
    if (!status && make_out(out_dir, err, sizeof err)) {
        fprintf(stderr, "psd --export: %s\n", err);
        status = 1;
    }
    char stage[4200];
    for (int i = 0; i < cfg.nnodes && !status; i++) {
        if (only >= 0 && i != only)
            continue;
        if (stopped(err, sizeof err) ||
            make_stage(out_dir, i, stage, sizeof stage, err, sizeof err)) {
            fprintf(stderr, "psd --export: %s\n", err);
            status = 1;
            break;
        }
        staged[i] = 1;
        int rc = 2;
        for (int tries = 0; rc == 2 && tries < 5 && !stop_sig; tries++) {
            memset(no, 0, sizeof *no);
            memset(pending, 0, ((size_t)cfg.ntables + 1) * sizeof *pending);
            no->rows = rows;
            no->pending = pending;
            no->crcs = crcs;
            rc = export_node(ini, i, drop, ndrop, stage, no, cfg.ntables,
                             err, sizeof err);
            if (rc == 2)
                fprintf(stderr, "psd --export: node %d wrote a new snapshot "
                        "while it was read: reading it again\n", i);
        }
        if (rc == 2 && stop_sig)
            (void)stopped(err, sizeof err);   /* not tried again */
        if (rc == 2)
            rc = -1;             /* err says what failed the last time */
        if (rc) {
            /* Every node, or the export would hold part of each table:
             * a node without files has nothing to give. */
            if (rc == 1)
                fprintf(stderr, "psd --export: node %d: no snapshot and no "
                        "journal in its data_dir (%s)%s\n", i, no->snap,
                        exported || only >= 0 ? ""
                        : "; psctl save writes a snapshot of a live node");
            else
                fprintf(stderr, "psd --export: node %d: %s\n", i, err);
            status = 1;
            break;
        }
        exported++;
        /* README says so too; here the rows it leaves out are counted. */
        for (int j = 0; j < cfg.ntables; j++)
            if (pending[j])
                fprintf(stderr, "psd --export: node %d: table '%s' (bsp) "
                        "holds the sums of %llu row%s of a clock not ended: "
                        "not in the export (psctl end-job on the running "
                        "nodes applies them once the job's workers are gone; "
                        "export after it)\n", i, cfg.tables[j].name,
                        (unsigned long long)pending[j],
                        pending[j] == 1 ? "" : "s");
        for (int j = 0; j < cfg.ntables; j++)
            if (rows[j] < 0)
                fprintf(stderr, "psd --export: node %d: table '%s' is in %s "
                        "but not in its snapshot (added since): not "
                        "exported\n", i, cfg.tables[j].name, ini);
        for (int k = 0; no->has_snapshot && k < ndrop; k++)
            if (!(no->drop_used >> k & 1))
                fprintf(stderr, "psd --export: node %d: --drop-table %s: its "
                        "snapshot holds no table of that name: nothing "
                        "dropped for it\n", i, drop[k]);
        if (no->has_snapshot)
            fprintf(stderr, "psd --export: node %d: snapshot %llu of %s and "
                    "%llu journal records after it\n", i,
                    (unsigned long long)no->si.generation, no->snap,
                    (unsigned long long)no->records);
        else
            fprintf(stderr, "psd --export: node %d: no snapshot; %llu "
                    "journal records\n", i, (unsigned long long)no->records);
        /* Beside a live node without a journal the export is as old as
         * its snapshot, however much it trained since. */
        char dir[4096];
        psd_config_data_dir(&cfg, dir, sizeof dir);
        long pid = cfg.durability == PSD_DUR_SNAPSHOT && no->has_snapshot
                       ? psd_durable_holder(dir, i) : -1;
        if (pid >= 0) {
            char who[32] = "";
            if (pid > 0)
                snprintf(who, sizeof who, " (pid %ld)", pid);
            uint64_t now = (uint64_t)time(NULL) * 1000;
            fprintf(stderr, "psd --export: node %d: a psd%s runs on this "
                    "data folder with durability = snapshot: the export "
                    "holds snapshot %llu, written %.0f s ago, not what the "
                    "node took since (psctl save first writes what it holds "
                    "now)\n", i, who,
                    (unsigned long long)no->si.generation,
                    now > no->si.created_ms
                        ? (double)(now - no->si.created_ms) / 1000 : 0.0);
        }
    }
    /* A signal before the swap takes the export back, as any failure;
     * once the swap has begun it is finished (it is short). */
    if (!status && stopped(err, sizeof err)) {
        fprintf(stderr, "psd --export: %s\n", err);
        status = 1;
    }
    int how = SWAP_NONE;
    if (!status && swap_in(out_dir, only, cfg.nnodes, staged, &how, err,
                           sizeof err)) {
        fprintf(stderr, "psd --export: %s\n", err);
        if (how == SWAP_PLACED)
            fprintf(stderr, "psd --export: %s: the new files are in place, "
                    "but not yet sure to be on the disk: export.nodeN.partial "
                    "stands until an export into it finishes\n", out_dir);
        else if (how == SWAP_BEGUN)
            /* The new files not yet moved stay staged: the only whole
             * copy of what was exported (they went with the failure, and
             * the folder held marks alone: a review). */
            fprintf(stderr, "psd --export: %s: the earlier files of %s are "
                    "partly removed, and the new ones not all in place (the "
                    "rest are in its .export.nodeN.staging folders): "
                    "export.nodeN.partial stands until an export into it "
                    "finishes\n", out_dir,
                    only < 0 ? "every node" : "that node");
        status = 1;
    }
    if (!status) {
        fprintf(stderr, "psd --export: %d of %d node%s written to %s "
                "(export.nodeN.json lists each node's files)\n", exported,
                cfg.nnodes, cfg.nnodes == 1 ? "" : "s", out_dir);
    } else if (staged && how == SWAP_NONE) {
        /* What this run wrote goes, and the earlier export stays as it
         * was; the folder goes when this run made it and nothing else is
         * in it. Once the swap has begun, what is staged stays (the next
         * export removes it). */
        int bad = 0;
        for (int i = 0; i < cfg.nnodes; i++) {
            if (!staged[i])
                continue;
            stage_path(stage, sizeof stage, out_dir, i);
            if (drop_stage(stage, err, sizeof err) && !bad) {
                fprintf(stderr, "psd --export: removing what it wrote: %s\n",
                        err);
                bad = 1;
            }
        }
        if (!existed)
            (void)rmdir(out_dir);
        else if (!bad)
            fprintf(stderr, "psd --export: %s is as it was before this "
                    "export\n", out_dir);
    }
    free(staged);
    free(rows);
    free(pending);
    free(crcs);
    free(no);
    psd_config_destroy(&cfg);
    for (int k = 0; k < 3; k++)
        (void)sigaction(stops[k], &was[k], NULL);
    if (stop_sig && !status)
        /* Too late to stop anything: the swap finishes what it begins. */
        fprintf(stderr, "psd --export: %s came too late to stop the "
                "export: it is whole, and kept\n", strsignal(stop_sig));
    else if (stop_sig) {
        /* Its status says so, as an export the signal had killed. */
        fprintf(stderr, "psd --export: stopped by %s%s\n",
                strsignal(stop_sig),
                how == SWAP_NONE ? ": what it wrote is removed" : "");
        signal(stop_sig, SIG_DFL);
        raise(stop_sig);
    }
    return status;
}
