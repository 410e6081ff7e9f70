/* psd --import: .npy files into a new cluster's first snapshots; see
 * import.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "durable.h"
#include "import.h"
#include "journal.h"
#include "node.h"
#include "npy.h"
#include "readdir.h"
#include "snapshot.h"
#include "table.h"
#include "../proto/layout.h"

/* Rows read at a time. */
#define BATCH 65536
/* The most of a manifest read: far past what psd --export writes. */
#define MANIFEST_MAX ((size_t)64 << 20)

/* One array of a table's rows: values, and keys unless a dense table's
 * whole rows in order. */
typedef struct source {
    int table;
    char vals[4200];
    char keys[4200];             /* "" for a dense table's rows in order */
    int has_crc[2];              /* its manifest lists CRC-32s for them */
    uint32_t crc[2];             /* of the keys' and the rows' bytes */
    char manifest[64];           /* which one (named when they differ) */
} source;

/* The files manifests list with their CRC-32 (psd 0.4.5 on): a file
 * damaged or replaced by another export's of as many rows was imported
 * without a word (a reshard trial). */
typedef struct listed {
    char name[256];
    char manifest[64];
    int has_crc;
    uint32_t crc;
} listed;

/* Every file the manifests list, with its CRC-32 where given. */
typedef struct listing {
    listed *v;
    size_t n, cap;
    int manifests;               /* the folder holds manifests */
} listing;

static int list_add(listing *ls, const char *name, const char *manifest,
                    int has_crc, uint32_t crc)
{
    if (ls->n == ls->cap) {
        size_t cap = ls->cap ? ls->cap * 2 : 16;
        listed *g = realloc(ls->v, cap * sizeof *g);
        if (!g)
            return -1;
        ls->v = g;
        ls->cap = cap;
    }
    listed *l = &ls->v[ls->n++];
    snprintf(l->name, sizeof l->name, "%s", name);
    snprintf(l->manifest, sizeof l->manifest, "%s", manifest);
    l->has_crc = has_crc;
    l->crc = crc;
    return 0;
}

/* Whether listing lists the file at path (its base name); its CRC-32,
 * where given, into *x's slot f. */
static int list_find(const listing *ls, const char *path, source *x, int f)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t k = 0; k < ls->n; k++)
        if (!strcmp(ls->v[k].name, base)) {
            x->has_crc[f] = ls->v[k].has_crc;
            x->crc[f] = ls->v[k].crc;
            snprintf(x->manifest, sizeof x->manifest, "%s",
                     ls->v[k].manifest);
            return 1;
        }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const source *)a)->vals, ((const source *)b)->vals);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static int table_index(const psd_config *cfg, const char *name, size_t len)
{
    for (int j = 0; j < cfg->ntables; j++)
        if (strlen(cfg->tables[j].name) == len &&
            !memcmp(cfg->tables[j].name, name, len))
            return j;
    return -1;
}

/* The arrays of src_dir for cfg's tables, sorted by name, into *out (*n
 * of them); files for no table of cfg are said and left. 0, or -1. */
static int find_sources(const psd_config *cfg, const char *ini,
                        const char *dir, source **out, int *n, char *err,
                        size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    source *s = NULL;
    int cap = 0, k = 0, rc = 0, failed = 0;
    for (struct dirent *e; rc == 0 && (e = psd_readdir(d, &failed));) {
        const char *name = e->d_name;
        if (name[0] == '.' || !ends_with(name, ".npy"))
            continue;
        if (ends_with(name, ".keys.npy")) {
            /* Keys without their rows: said, not taken for nothing. */
            char vals[4200];
            struct stat st;
            snprintf(vals, sizeof vals, "%s/%.*s.npy", dir,
                     (int)(strlen(name) - 9), name);
            if (lstat(vals, &st))
                fprintf(stderr, "psd --import: %s/%s: no %s beside it: not "
                        "imported\n", dir, name, vals);
            continue;
        }
        /* Table names hold no dot: NAME.npy or NAME.SUFFIX.npy. */
        size_t len = strcspn(name, ".");
        int j = table_index(cfg, name, len);
        if (j < 0) {
            fprintf(stderr, "psd --import: %s/%s: %s has no table '%.*s': "
                    "not imported\n", dir, name, ini, (int)len, name);
            continue;
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 16;
            source *g = realloc(s, (size_t)cap * sizeof *s);
            if (!g) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            s = g;
        }
        source *x = &s[k++];
        memset(x->has_crc, 0, sizeof x->has_crc);
        x->table = j;
        snprintf(x->vals, sizeof x->vals, "%s/%s", dir, name);
        snprintf(x->keys, sizeof x->keys, "%s/%.*s.keys.npy", dir,
                 (int)(strlen(name) - 4), name);
        struct stat st;
        if (lstat(x->keys, &st) == 0 && stat(x->keys, &st)) {
            snprintf(err, errlen, "%s: %s", x->keys, strerror(errno));
            rc = -1;             /* a link to nothing: not "no keys" */
        } else if (lstat(x->keys, &st)) {
            x->keys[0] = '\0';
            if (!cfg->tables[j].dense) {
                snprintf(err, errlen, "%s: table '%s' is sparse: its keys "
                         "go in %.*s.keys.npy beside it (uint64 or int64, "
                         "one per row)", x->vals, cfg->tables[j].name,
                         (int)(strlen(name) - 4), name);
                rc = -1;
            }
        }
    }
    closedir(d);
    if (rc == 0 && failed) {
        snprintf(err, errlen, "listing %s: %s", dir, strerror(failed));
        rc = -1;
    }
    if (rc) {
        free(s);
        return -1;
    }
    if (k)
        qsort(s, (size_t)k, sizeof *s, by_name);
    *out = s;
    *n = k;
    return 0;
}

/* What importing one table into the nodes being built needs. */
typedef struct sink {
    const psd_config *cfg;
    const psd_table_conf *tc;
    int table;
    psd_node *nodes;             /* cfg->nnodes entries; built ones have
                                    tables */
    uint64_t *rows;              /* rows set, per node */
    unsigned char *seen;         /* dense: one bit per row (no row twice) */
} sink;

static int owner_of(const sink *k, uint64_t key)
{
    uint32_t s = k->tc->dense
                     ? psw_dense_shard_of(k->tc->rows, k->cfg->shards, key)
                     : psw_sparse_shard_of(k->cfg->shards, key);
    return psw_node_of_shard(s, k->cfg->nnodes);
}

/* Sets row i of an array (its key, its values) on the node owning it,
 * when that node is built. 0, or -1 with "PATH: reason" in err. */
static int put(sink *k, const source *x, uint64_t i, uint64_t key,
               const float *w, char *err, size_t errlen)
{
    const psd_table_conf *tc = k->tc;
    const char *path = x->keys[0] ? x->keys : x->vals;
    if (tc->dense && key >= tc->rows) {
        snprintf(err, errlen, "%s: row %llu: key %llu is past table '%s' "
                 "(rows = %llu)", path, (unsigned long long)i,
                 (unsigned long long)key, tc->name,
                 (unsigned long long)tc->rows);
        return -1;
    }
    int node = owner_of(k, key);
    psd_node *n = &k->nodes[node];
    /* Every row is checked, another host's (-n) too, so that the hosts
     * of one import agree (a sparse key given twice is found only on the
     * node that owns it). */
    if (!tc->allow_nonfinite)
        for (uint32_t d = 0; d < tc->dim; d++)
            if (!isfinite(w[d])) {
                snprintf(err, errlen, "%s: row %llu (key %llu) holds %g, and "
                         "table '%s' refuses values that are not finite "
                         "(nonfinite = reject)", x->vals,
                         (unsigned long long)i, (unsigned long long)key,
                         (double)w[d], tc->name);
                return -1;
            }
    int created = 1;
    if (tc->dense) {
        unsigned char bit = (unsigned char)(1u << (key & 7));
        created = !(k->seen[key >> 3] & bit);
        k->seen[key >> 3] |= bit;
    }
    if (created && n->tables &&
        psd_table_set_row(n->tables[k->table], key, w,
                          tc->dense ? &(int){ 0 } : &created))
        goto oom;
    if (!created) {
        snprintf(err, errlen, "%s: row %llu: key %llu of table '%s' is "
                 "given twice (here or in another file)", path,
                 (unsigned long long)i, (unsigned long long)key, tc->name);
        return -1;
    }
    k->rows[node]++;             /* another host's too (-n): max_rows */
    if (tc->max_rows && !tc->dense && k->rows[node] > tc->max_rows) {
        snprintf(err, errlen, "%s: table '%s' has max_rows = %llu, and node "
                 "%d would hold more", path, tc->name,
                 (unsigned long long)tc->max_rows, node);
        return -1;
    }
    return 0;
oom:
    snprintf(err, errlen, "table '%s': out of memory", tc->name);
    return -1;
}

/* Reads one array into the nodes being built. */
static int import_source(sink *k, const source *x, char *err, size_t errlen)
{
    const psd_table_conf *tc = k->tc;
    psd_npy v, ks = { 0 };
    if (psd_npy_open(&v, x->vals, err, errlen))
        return -1;
    int rc = -1;
    float *w = NULL;
    uint64_t *keys = NULL;
    if (v.kind != 'f' || (v.dim ? v.dim : 1) != tc->dim) {
        char shape[64];
        if (v.dim)
            snprintf(shape, sizeof shape, "(%llu, %u)",
                     (unsigned long long)v.n, v.dim);
        else
            snprintf(shape, sizeof shape, "(%llu,)", (unsigned long long)v.n);
        snprintf(err, errlen, "%s: table '%s' has rows of %u float32 values; "
                 "this array is %s with shape %s", x->vals, tc->name,
                 tc->dim, v.kind == 'f' ? "float32" : "of integers", shape);
        goto out;
    }
    if (x->keys[0]) {
        if (psd_npy_open(&ks, x->keys, err, errlen))
            goto out;
        if (ks.kind == 'f' || ks.dim || ks.n != v.n) {
            snprintf(err, errlen, "%.2000s: keys are a 1-D array of %llu "
                     "uint64 or int64, one per row of %.2000s", x->keys,
                     (unsigned long long)v.n, x->vals);
            goto out;
        }
    } else if (v.n != tc->rows) {
        snprintf(err, errlen, "%s: %llu rows, and table '%s' has %llu: an "
                 "array without keys holds every row of a dense table, in "
                 "order (give the row numbers in a .keys.npy beside it for "
                 "some of them)", x->vals, (unsigned long long)v.n, tc->name,
                 (unsigned long long)tc->rows);
        goto out;
    }
    /* At most 64 MiB of rows at a time, and no more than the file has. */
    size_t batch = (size_t)(64u << 20) / ((size_t)tc->dim * sizeof *w);
    if (batch > BATCH)
        batch = BATCH;
    if (batch > v.n)
        batch = (size_t)v.n;
    if (batch == 0)
        batch = 1;
    w = malloc(batch * tc->dim * sizeof *w);
    keys = malloc(batch * sizeof *keys);
    if (!w || !keys) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    uint32_t crc[2] = { 0, 0 };          /* keys', rows' */
    for (uint64_t at = 0; at < v.n;) {
        long m = psd_npy_read(&v, w, batch);
        long mk = x->keys[0] ? psd_npy_read(&ks, keys, (size_t)(m > 0 ? m
                                                                      : 0))
                             : m;
        if (m <= 0 || mk != m) {
            snprintf(err, errlen, "%s: %s", mk != m ? x->keys : x->vals,
                     m == 0 ? "it ended early" : strerror(errno));
            goto out;
        }
        crc[1] = psd_npy_crc32(crc[1], w, (size_t)m * tc->dim * sizeof *w);
        if (x->keys[0])
            crc[0] = psd_npy_crc32(crc[0], keys, (size_t)m * sizeof *keys);
        for (long r = 0; r < m; r++) {
            uint64_t key = x->keys[0] ? keys[r] : at + (uint64_t)r;
            if (ks.kind == 'i' && (int64_t)key < 0) {
                snprintf(err, errlen, "%s: row %llu: key %lld is negative "
                         "(keys of 2^63 and more go as uint64: "
                         "ids.view(np.uint64))",
                         x->keys, (unsigned long long)(at + (uint64_t)r),
                         (long long)(int64_t)key);
                goto out;
            }
            if (put(k, x, at + (uint64_t)r, key,
                    w + (size_t)r * tc->dim, err, errlen))
                goto out;
        }
        at += (uint64_t)m;
    }
    for (int f = 0; f < 2; f++)
        if (x->has_crc[f] && crc[f] != x->crc[f]) {
            snprintf(err, errlen, "%s: its %s are not those %s lists (their "
                     "CRC-32 is %08x, listed %08x): the file was damaged, or "
                     "replaced by another export's, since it was exported. "
                     "Copy that node's export whole again",
                     f ? x->vals : x->keys, f ? "rows" : "keys", x->manifest,
                     (unsigned)crc[f], (unsigned)x->crc[f]);
            goto out;
        }
    rc = 0;
out:
    free(w);
    free(keys);
    psd_npy_close(&v);
    psd_npy_close(&ks);
    return rc;
}

/* Manifest path's text, NUL-terminated, into *out (malloc'd; at most
 * max bytes are read, far past what psd writes), or NULL with err. Only
 * a regular file, opened without waiting: a FIFO put there hung the
 * import in open(). */
static char *read_manifest(const char *path, size_t max, char *err,
                           size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t k = 0;
    while (buf && (k = read(fd, buf + n, cap - 1 - n)) > 0) {
        n += (size_t)k;
        if (n == cap - 1) {
            if (cap >= max)
                break;
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
    }
    int e = errno;
    close(fd);
    if (!buf || k < 0) {
        snprintf(err, errlen, "%s: %s", path, buf ? strerror(e)
                                                  : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static const char *json_ws(const char *q, const char *end)
{
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
        q++;
    return q;
}

/* Where the value of member "field" begins in text [p, end): past the
 * name, the colon and any white space JSON allows around it (an export
 * rewritten by a JSON tool may be compact); NULL when absent. */
static const char *json_member(const char *p, const char *end,
                               const char *field)
{
    char pat[32];
    int pl = snprintf(pat, sizeof pat, "\"%s\"", field);
    for (const char *q = p; q + pl <= end; q++)
        if (!memcmp(q, pat, (size_t)pl)) {
            const char *v = json_ws(q + pl, end);
            if (v < end && *v == ':')
                return json_ws(v + 1, end);
        }
    return NULL;
}

/* The string value of member "field" in text [p, end), into out (at most
 * len - 1 bytes, and 0 then), or 0 when absent or not a plain string. */
static size_t field_str(const char *p, const char *end, const char *field,
                        char *out, size_t len)
{
    const char *q = json_member(p, end, field);
    if (!q || q >= end || *q != '"')
        return 0;
    q++;
    const char *e = memchr(q, '"', (size_t)(end - q));
    size_t l = e ? (size_t)(e - q) : 0;
    if (!e || l == 0 || l >= len || memchr(q, '\\', l))
        return 0;
    memcpy(out, q, l);
    out[l] = '\0';
    return l;
}

/* Whether manifest text buf ends as psd --export ends one, "]}" with
 * any white space around and between (a JSON tool may rewrite it): a
 * manifest cut short by a copy that stopped lists only the tables before
 * the cut, and the import took the rest of that node's rows from their
 * init without a word (a reshard trial). */
static int manifest_whole(const char *buf)
{
    const char *e = buf + strlen(buf);
    while (e > buf && strchr(" \t\r\n", e[-1]))
        e--;
    if (e == buf || e[-1] != '}')
        return 0;
    e--;
    while (e > buf && strchr(" \t\r\n", e[-1]))
        e--;
    return e > buf && e[-1] == ']';
}

/* The first problem with what manifest text buf (the file `name` in
 * dir) lists for the tables of cfg, in problem (empty when none): a file
 * it names that dir
 * does not hold, or that is not the file that node exported (its rows
 * not the "count" listed), or a name that is not a file of dir. Each
 * would start that node's rows from their init without a word (a copy
 * that left a file out, a file replaced), or read a file from anywhere.
 * Every listed file is an object's "values" (and "keys") with its
 * "count", in a flat object: a table of export.nodeK.json, a node's
 * "files" entry of an older export.json. Tables cfg does not have are not
 * imported (find_sources says so), so their files may well be gone. */
static void check_listed(const psd_config *cfg, const char *dir,
                         const char *buf, const char *name, char *problem,
                         size_t len, listing *ls)
{
    problem[0] = '\0';
    const char *aside = strcmp(name, "export.json")
                            ? "the export.node*.json files" : name;
    const char *all = buf + strlen(buf);
    for (const char *p = buf; !problem[0] && (p = strstr(p, "\"values\""));) {
        /* The object around it: no braces inside psd's. */
        const char *lb = p, *rb = strchr(p, '}');
        while (lb > buf && *lb != '{')
            lb--;
        p += 8;
        if (!rb)
            rb = all;
        const char *colon = json_ws(p, rb);
        if (colon >= rb || *colon != ':')
            continue;            /* a string "values", not a member */
        char vals[256] = "", keys[256] = "";
        size_t vl = field_str(lb, rb, "values", vals, sizeof vals);
        size_t kl = field_str(lb, rb, "keys", keys, sizeof keys);
        /* Never a path, nor escaped: psd --export names its own files,
         * whatever the table (a file from anywhere is no part of an
         * export). */
        const char *files[2] = { vals, keys };
        if (!vl)
            snprintf(problem, len, "%s/%s lists a file whose name is "
                     "empty, escaped or too long: not a manifest psd "
                     "--export wrote", dir, name);
        for (int f = 0; f < 2 && !problem[0]; f++)
            if (strchr(files[f], '/') || files[f][0] == '.')
                snprintf(problem, len, "%s/%s lists \"%s\", which is not a "
                         "file name of %s (psd --export names its own "
                         "files)", dir, name, files[f], dir);
        size_t dot = strcspn(vals, ".");
        if (problem[0] || table_index(cfg, vals, dot) < 0)
            continue;
        const char *c = json_member(lb, rb, "count");
        char *cend = NULL;
        unsigned long long count = 0;
        if (c && c < rb && *c >= '0' && *c <= '9') {
            errno = 0;
            count = strtoull(c, &cend, 10);
            if (errno)
                cend = NULL;
        }
        if (!kl || !cend) {
            snprintf(problem, len, "%s/%s lists %s without its keys file or "
                     "row count: not a manifest psd --export wrote", dir,
                     name, vals);
            break;
        }
        for (int f = 0; f < 2 && !problem[0]; f++) {
            const char *fn = files[f];
            char file[4500];
            snprintf(file, sizeof file, "%s/%s", dir, fn);
            if (access(file, F_OK)) {
                snprintf(problem, len, "%s/%s lists %s, which %s does not "
                         "hold: its rows would start from init. Copy that "
                         "node's export whole, or, to import only the rows "
                         "present, move %s aside", dir, name, fn, dir, aside);
                break;
            }
            /* Its CRC-32, which import_source checks as it reads; one
             * that is not a number turned the check off (a review). */
            const char *field = f ? "keys_crc32" : "values_crc32";
            const char *cv = json_member(lb, rb, field);
            char *ce = NULL;
            unsigned long crc = 0;
            if (cv && cv < rb && *cv >= '0' && *cv <= '9') {
                errno = 0;
                crc = strtoul(cv, &ce, 10);
                if (errno || crc > 0xffffffffUL)
                    ce = NULL;
            }
            if (cv && !ce) {
                snprintf(problem, len, "%s/%s lists %s with a %s that is "
                         "not a CRC-32: not a manifest psd --export wrote",
                         dir, name, fn, field);
                break;
            }
            if (list_add(ls, fn, name, ce != NULL, (uint32_t)crc)) {
                snprintf(problem, len, "out of memory");
                break;
            }
            /* Its shape and the rest: import_source, which reads it. */
            psd_npy a;
            char why[600];
            if (psd_npy_open(&a, file, why, sizeof why))
                continue;
            uint64_t n = a.n;
            psd_npy_close(&a);
            if (n != count) {
                snprintf(problem, len, "%s holds %llu rows, and %s/%s lists "
                         "it with %llu: not the file that node exported. "
                         "Copy that node's export whole, or, to import only "
                         "the rows present, move %s aside", file,
                         (unsigned long long)n, dir, name, count, aside);
                break;
            }
        }
    }
}

/* An export's manifests (export.nodeK.json) in dir name the node count
 * it was made of: one whose other nodes' files are missing would start
 * their rows from init without a word (psd --export -n K writes one
 * node; the others come from their hosts). -1 with err then, else 0
 * (also when dir holds no manifest: arrays of one's own). */
static int whole_export(const psd_config *cfg, const char *dir,
                        listing *ls, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;                /* find_sources says why */
    int nodes = -1, have = 0, other = 0, partial = -1;
    char gone[6000] = "";
    unsigned char *seen = calloc(65536, 1);
    int failed = 0;
    for (struct dirent *e; seen && (e = psd_readdir(d, &failed));) {
        int k, end = 0;
        /* psd --export's mark of a node whose files it is writing: one
         * killed there left a table and a half, taken for a model. */
        if (sscanf(e->d_name, "export.node%d.partial%n", &k, &end) == 1 &&
            !e->d_name[end] && k >= 0)
            partial = k;
        end = 0;
        /* As psd names them: "export.node01.json" or a node past 65535
         * is no manifest, as for read_export (they disagreed: a review). */
        char canon[64];
        if (sscanf(e->d_name, "export.node%d.json%n", &k, &end) != 1 ||
            e->d_name[end] || k < 0 || k > 65535 ||
            (snprintf(canon, sizeof canon, "export.node%d.json", k),
             strcmp(canon, e->d_name)))
            continue;
        char path[4400], why[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *buf = read_manifest(path, MANIFEST_MAX, why, sizeof why);
        const char *p = buf ? json_member(buf, buf + strlen(buf), "nodes")
                            : NULL;
        int m = p ? atoi(p) : 0;
        if (m < 1 || m > 65536 || k >= m || (nodes >= 0 && m != nodes)) {
            free(buf);
            other = 1;
            continue;
        }
        nodes = m;
        have += !seen[k];
        seen[k] = 1;
        ls->manifests = 1;
        if (!gone[0] && !manifest_whole(buf))
            snprintf(gone, sizeof gone, "%s is cut short (it does not end "
                     "as psd --export ends a manifest, with \"]}\"): the "
                     "files of the tables it no longer lists would be left "
                     "out. Copy node %d's export whole again", path, k);
        if (!gone[0])
            check_listed(cfg, dir, buf, e->d_name, gone, sizeof gone, ls);
        free(buf);
    }
    closedir(d);
    if (failed) {
        snprintf(err, errlen, "listing %s: %s", dir, strerror(failed));
        free(seen);
        return -1;
    }
    /* An export of an older psd (one export.json listing every
     * node's files) is checked alike: a node's files left out of a copy
     * started its rows from init. */
    if (seen && !gone[0] && nodes < 0) {
        char path[4400];
        snprintf(path, sizeof path, "%s/export.json", dir);
        if (access(path, F_OK) == 0) {
            char *buf = read_manifest(path, MANIFEST_MAX, gone, sizeof gone);
            ls->manifests = 1;
            if (buf)
                check_listed(cfg, dir, buf, "export.json", gone,
                             sizeof gone, ls);
            free(buf);
        }
    }
    int rc = 0;
    if (!seen) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    } else if (partial >= 0) {
        snprintf(err, errlen, "%s holds export.node%d.partial: psd --export "
                 "of node %d did not finish replacing that node's files "
                 "(killed, or failed, while it put them in place), so they "
                 "are not whole. Run psd --export into this folder again: "
                 "it replaces them", dir, partial, partial);
        rc = -1;
    } else if (other) {
        snprintf(err, errlen, "%s holds export manifests (export.nodeK.json) "
                 "of clusters of different node counts, or unreadable: "
                 "gather one export's files only", dir);
        rc = -1;
    } else if (nodes > 0 && have < nodes) {
        int missing = 0;
        while (seen[missing])
            missing++;
        snprintf(err, errlen, "%s holds the export of %d of its %d nodes "
                 "(no export.node%d.json, among others): the rows of the "
                 "nodes missing would start from init. Put every node's "
                 "export there (psd --export DIR -c INI -n K on the host of "
                 "node K), or, to import only the rows present, move the "
                 "export.node*.json files aside", dir, have, nodes, missing);
        rc = -1;
    } else if (gone[0]) {
        snprintf(err, errlen, "%s", gone);
        rc = -1;
    }
    free(seen);
    return rc;
}

/* Node i's data folder must hold none of its files, and no psd. */
static int fresh_node(const psd_config *cfg, int i, char *dir, size_t len,
                      char *err, size_t errlen)
{
    psd_config_data_dir(cfg, dir, len);
    char snap[4200];
    psd_snapshot_path(snap, sizeof snap, dir, i);
    struct stat st;
    long pid = psd_durable_holder(dir, i);
    if (pid == -2) {
        snprintf(err, errlen, "node %d: cannot tell whether a psd runs on "
                 "%s: psd-node%d.lock there cannot be read (%s). Stop the "
                 "node first, and let this user read the lock file (or "
                 "remove it, when no psd runs there)", i, dir, i,
                 strerror(errno));
        return -1;
    }
    if (pid >= 0 || stat(snap, &st) == 0 || psd_journal_first(dir, i)) {
        snprintf(err, errlen, "node %d: %s holds %s: psd --import starts a "
                 "model and never replaces one (move node %d's psd-node%d.* "
                 "files aside, as psd --skip-snapshot does, or name another "
                 "data_dir)", i, dir,
                 pid >= 0 ? "a running psd" : "its snapshot or journal", i,
                 i);
        return -1;
    }
    return 0;
}

int psd_import(const char *ini, int only, const char *src_dir)
{
    char err[8192], dir[4096];
    psd_config cfg;
    if (psd_config_load(&cfg, ini, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int nn = cfg.nnodes, nsrc = 0, status = 1;
    source *src = NULL;
    listing listed_crcs = { 0 };
    psd_node *nodes = calloc((size_t)nn, sizeof *nodes);
    uint64_t *rows = calloc((size_t)nn * (size_t)(cfg.ntables + 1),
                            sizeof *rows);
    unsigned char *seen = NULL;
    if (!nodes || !rows) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    if (only >= nn) {
        snprintf(err, sizeof err, "%s: node %d does not exist (the file "
                 "lists %d node%s)", ini, only, nn, nn == 1 ? "" : "s");
        goto out;
    }
    if (whole_export(&cfg, src_dir, &listed_crcs, err, sizeof err) ||
        find_sources(&cfg, ini, src_dir, &src, &nsrc, err, sizeof err))
        goto out;
    /* Beside manifests, a file none lists is another export's, or one
     * an earlier export left (a whole export killed while it removed the
     * files of nodes beyond its count, then -n exports of each node:
     * their rows were added to the model, a review). */
    for (int s = 0; s < nsrc; s++) {
        int named = list_find(&listed_crcs, src[s].vals, &src[s], 1);
        if (src[s].keys[0])
            named &= list_find(&listed_crcs, src[s].keys, &src[s], 0);
        if (listed_crcs.manifests && !named) {
            snprintf(err, sizeof err, "%s: no manifest there "
                     "(export.node*.json) lists it, or its keys file: a "
                     "file of another export, or left from an earlier one. "
                     "Move it aside (psd --import takes every .npy file of "
                     "a folder without manifests)", src[s].vals);
            goto out;
        }
    }
    if (nsrc == 0) {
        snprintf(err, sizeof err, "%s holds no .npy file of a table of %s",
                 src_dir, ini);
        goto out;
    }
    for (int i = 0; i < nn; i++) {
        if (only >= 0 && i != only)
            continue;
        psd_config c;
        if (fresh_node(&cfg, i, dir, sizeof dir, err, sizeof err) ||
            psd_config_load(&c, ini, err, sizeof err) ||
            psd_node_init(&nodes[i], &c, i, 0, err, sizeof err))
            goto out;
    }
    for (int j = 0; j < cfg.ntables; j++) {
        const psd_table_conf *tc = &cfg.tables[j];
        int files = 0;
        free(seen);
        seen = tc->dense ? calloc((size_t)(tc->rows / 8 + 1), 1) : NULL;
        if (tc->dense && !seen) {
            snprintf(err, sizeof err, "out of memory");
            goto out;
        }
        sink k = { &cfg, tc, j, nodes, rows + (size_t)j * (size_t)nn, seen };
        for (int s = 0; s < nsrc; s++)
            if (src[s].table == j) {
                if (import_source(&k, &src[s], err, sizeof err))
                    goto out;
                files++;
            }
        if (!files)
            fprintf(stderr, "psd --import: table '%s': no %s/%s*.npy: its "
                    "rows start from its init\n", tc->name, src_dir,
                    tc->name);
    }
    /* Written only once every row of every node was taken, into folders
     * still free (a psd may have started meanwhile); all or none, even
     * if cut off: each staged (psd-nodeK.snap.staged, loaded by no
     * start) before any is renamed into place. */
    int staged = 0;
    for (; staged < nn; staged++) {
        psd_snap_info si;
        if (nodes[staged].tables &&
            (fresh_node(&cfg, staged, dir, sizeof dir, err, sizeof err) ||
             psd_durable_make_dir(dir, err, sizeof err) ||
             psd_snapshot_stage(&nodes[staged], dir, 1, 1, &si, err,
                                sizeof err)))
            break;
    }
    /* The folders checked again just before the renames: staging a big
     * model takes a while, and a psd started meanwhile must not have its
     * snapshot replaced under it. */
    unsigned char *want = calloc(nn > 0 ? (size_t)nn : 1, 1);
    int rc = staged < nn || !want ? -1 : 0;
    if (!want)
        snprintf(err, sizeof err, "out of memory");
    for (int i = 0; rc == 0 && i < nn; i++)
        if (nodes[i].tables) {
            want[i] = 1;
            if (fresh_node(&cfg, i, dir, sizeof dir, err, sizeof err))
                rc = -1;
        }
    psd_config_data_dir(&cfg, dir, sizeof dir);
    if (rc == 0)
        rc = psd_snapshot_commit_all(dir, want, nn, err, sizeof err);
    else
        for (int k = 0; k < nn && k <= staged; k++) {
            char snap[4200];
            if (!nodes[k].tables)
                continue;
            psd_snapshot_staged_path(snap, sizeof snap, dir, k);
            unlink(snap);
        }
    free(want);
    if (rc)
        goto out;
    for (int i = 0; i < nn; i++) {
        if (!nodes[i].tables)
            continue;
        psd_config_data_dir(&cfg, dir, sizeof dir);
        fprintf(stderr, "psd --import: node %d:", i);
        for (int j = 0; j < cfg.ntables; j++)
        {
            uint64_t r = rows[(size_t)j * (size_t)nn + (size_t)i];
            fprintf(stderr, "%s %llu row%s of '%s'", j ? "," : "",
                    (unsigned long long)r, r == 1 ? "" : "s",
                    cfg.tables[j].name);
        }
        char snap[4200];
        psd_snapshot_path(snap, sizeof snap, dir, i);
        fprintf(stderr, "; snapshot 1 written to %s\n", snap);
    }
    status = 0;
out:
    if (status)
        fprintf(stderr, "psd --import: %s\n", err);
    for (int i = 0; nodes && i < nn; i++)
        if (nodes[i].tables)
            psd_node_destroy(&nodes[i]);
    free(nodes);
    free(rows);
    free(seen);
    free(src);
    free(listed_crcs.v);
    psd_config_destroy(&cfg);
    return status;
}
