/* psd --export: node snapshots to NumPy .npy files; see export.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "export.h"
#include "node.h"
#include "snapshot.h"
#include "stream.h"
#include "table.h"

/* Keys pulled, and rows written, this many at a time: the rows of a
 * table never need a second copy of the whole table in memory. */
#define BATCH 65536

typedef struct membuf {
    char *p;
    size_t len, cap;
} membuf;

static int mem_put(void *ctx, const void *p, size_t n)
{
    membuf *m = ctx;
    if (n > m->cap - m->len) {
        size_t cap = m->cap ? m->cap : 4096;
        while (n > cap - m->len)
            cap *= 2;
        char *q = realloc(m->p, cap);
        if (!q)
            return -1;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->len, p, n);
    m->len += n;
    return 0;
}

/* The .npy format 1.0 (numpy.lib.format): the magic "\x93NUMPY", version
 * 1.0, the header's length (u16, little-endian), then the header, a
 * Python dict literal padded with spaces and a newline so that the data
 * start at a multiple of 64 bytes; the data follow in C order. type is
 * "u8" or "f4", given the host's byte order; dim 0 makes a 1-D array. */
static int npy_header(FILE *f, const char *type, uint64_t n, uint32_t dim)
{
    const uint16_t one = 1;
    char order = *(const char *)&one ? '<' : '>';
    char dict[200], shape[64];
    if (dim)
        snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)n,
                 dim);
    else
        snprintf(shape, sizeof shape, "(%llu,)", (unsigned long long)n);
    int len = snprintf(dict, sizeof dict, "{'descr': '%c%s', "
                       "'fortran_order': False, 'shape': %s, }", order, type,
                       shape);
    size_t used = 10 + (size_t)len + 1, pad = (64 - used % 64) % 64;
    size_t hl = (size_t)len + pad + 1;
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              (unsigned char)(hl & 0xff),
                              (unsigned char)(hl >> 8) };
    if (fwrite(pre, 1, sizeof pre, f) != sizeof pre ||
        fwrite(dict, 1, (size_t)len, f) != (size_t)len)
        return -1;
    for (size_t i = 0; i < pad; i++)
        if (fputc(' ', f) == EOF)
            return -1;
    return fputc('\n', f) == EOF ? -1 : 0;
}

/* Closes f; -1 with err naming path when anything written to it failed. */
static int finish(FILE *f, const char *path, int failed, char *err,
                  size_t errlen)
{
    failed |= ferror(f);
    int e = errno;
    if (fclose(f) && !failed) {
        e = errno;
        failed = 1;
    }
    if (failed)
        snprintf(err, errlen, "%s: %s", path, strerror(e));
    return failed ? -1 : 0;
}

/* Writes node `node`'s rows of table t into dir: TABLE.nodeN.keys.npy and
 * TABLE.nodeN.npy. *count: the rows written. 0, or -1 with err. */
static int export_table(psd_table *t, const char *dir, int node,
                        uint64_t *count, char *err, size_t errlen)
{
    const psd_table_conf *tc = psd_table_conf_get(t);
    membuf keys = { 0 };
    psd_sink ks = { mem_put, &keys };
    if (psd_table_keys(t, &ks)) {
        free(keys.p);
        snprintf(err, errlen, "table '%s': out of memory listing its keys",
                 tc->name);
        return -1;
    }
    uint64_t n = keys.len / sizeof(uint64_t);
    *count = n;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.node%d.keys.npy", dir, tc->name, node);
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        free(keys.p);
        return -1;
    }
    int bad = npy_header(f, "u8", n, 0) ||
              (keys.len && fwrite(keys.p, 1, keys.len, f) != keys.len);
    if (finish(f, path, bad, err, errlen)) {
        free(keys.p);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.node%d.npy", dir, tc->name, node);
    size_t rowb = (size_t)tc->dim * sizeof(float);
    char *rows = malloc((n < BATCH ? (n ? n : 1) : BATCH) * rowb);
    f = rows ? fopen(path, "wb") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path,
                 rows ? strerror(errno) : "out of memory");
        free(rows);
        free(keys.p);
        return -1;
    }
    bad = npy_header(f, "f4", n, tc->dim);
    for (uint64_t i = 0; i < n && !bad; i += BATCH) {
        size_t m = (size_t)(n - i < BATCH ? n - i : BATCH);
        /* Every key is a row of this node: a pull creates nothing. */
        if (psd_table_pull(t, keys.p + i * sizeof(uint64_t), m, rows)) {
            errno = ENOMEM;
            bad = 1;
        } else
            bad = fwrite(rows, 1, m * rowb, f) != m * rowb;
    }
    free(rows);
    free(keys.p);
    return finish(f, path, bad, err, errlen);
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

/* What one node gave: its snapshot, and the rows of each table (-1: the
 * table is not in its snapshot, a table the ini added since). */
typedef struct node_out {
    int exported;
    psd_snap_info si;
    char snap[4200];
    int64_t *rows;               /* per table of the ini */
} node_out;

static int write_manifest(const char *dir, const char *ini,
                          const psd_config *cfg, const node_out *no,
                          char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/export.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"format\": 1, \"ini\": ");
    json_str(f, ini);
    fprintf(f, ", \"nodes\": %d, \"shards\": %u,\n \"snapshots\": [",
            cfg->nnodes, cfg->shards);
    const char *sep = "";
    for (int i = 0; i < cfg->nnodes; i++) {
        if (!no[i].exported)
            continue;
        fprintf(f, "%s\n  {\"node\": %d, \"file\": ", sep, i);
        json_str(f, no[i].snap);
        fprintf(f, ", \"generation\": %llu, \"created_ms\": %llu}",
                (unsigned long long)no[i].si.generation,
                (unsigned long long)no[i].si.created_ms);
        sep = ",";
    }
    fprintf(f, "],\n \"tables\": [");
    const char *tsep = "";
    for (int j = 0; j < cfg->ntables; j++) {
        const psd_table_conf *tc = &cfg->tables[j];
        /* A table the ini added since the snapshots holds no row of
         * training: left out, not listed with no files. */
        int held = 0;
        for (int i = 0; i < cfg->nnodes; i++)
            held |= no[i].exported && no[i].rows[j] >= 0;
        if (!held) {
            fprintf(stderr, "psd --export: table '%s' is in %s but in no "
                    "snapshot (added since): not exported\n", tc->name, ini);
            continue;
        }
        fprintf(f, "%s\n  {\"name\": ", tsep);
        tsep = ",";
        json_str(f, tc->name);
        fprintf(f, ", \"kind\": \"%s\", \"dim\": %u, \"rows\": %llu, "
                "\"updater\": \"%s\", \"files\": [",
                tc->dense ? "dense" : "sparse", tc->dim,
                (unsigned long long)(tc->dense ? tc->rows : 0),
                psd_updater_name(tc->upd.kind));
        sep = "";
        for (int i = 0; i < cfg->nnodes; i++) {
            if (!no[i].exported || no[i].rows[j] < 0)
                continue;
            fprintf(f, "%s{\"node\": %d, \"keys\": \"%s.node%d.keys.npy\", "
                    "\"values\": \"%s.node%d.npy\", \"count\": %lld}", sep, i,
                    tc->name, i, tc->name, i, (long long)no[i].rows[j]);
            sep = ", ";
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    return finish(f, path, 0, err, errlen);
}

/* Loads node i's snapshot and writes its tables. 1 when it has none. */
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
    struct stat st;
    if (stat(o->snap, &st)) {
        psd_config_destroy(&cfg);
        return 1;
    }
    psd_node n;
    if (psd_node_init(&n, &cfg, i, 0, err, errlen)) {
        psd_node_destroy(&n);
        return -1;
    }
    psd_snap_tables tm = { .drop = drop, .ndrop = ndrop };
    int rc = psd_snapshot_load(&n, dir, 0, &o->si, &tm, err, errlen);
    if (rc) {
        if (rc == 1)
            snprintf(err, errlen, "%s: no snapshot", o->snap);
        free(tm.map);
        psd_node_destroy(&n);
        return -1;
    }
    /* A table the ini added since the snapshot holds only its init: not
     * exported. */
    for (int j = 0; j < ntables; j++)
        o->rows[j] = tm.map ? -1 : 0;
    for (uint32_t k = 0; tm.map && k < tm.nmap; k++)
        if (tm.map[k] >= 0 && tm.map[k] < ntables)
            o->rows[tm.map[k]] = 0;
    free(tm.map);
    for (int j = 0; j < ntables && rc == 0; j++) {
        uint64_t count = 0;
        if (o->rows[j] < 0)
            continue;
        rc = export_table(n.tables[j], out_dir, i, &count, err, errlen);
        o->rows[j] = (int64_t)count;
    }
    psd_node_destroy(&n);
    o->exported = rc == 0;
    return rc;
}

int psd_export(const char *ini, int only, const char *const *drop,
               int ndrop, const char *out_dir)
{
    char err[8192];
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
    struct stat st;
    if (mkdir(out_dir, 0755) && (errno != EEXIST || stat(out_dir, &st) ||
                                 !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "psd --export: %s: %s\n", out_dir,
                errno == EEXIST ? "not a folder" : strerror(errno));
        psd_config_destroy(&cfg);
        return 1;
    }
    node_out *no = calloc((size_t)cfg.nnodes, sizeof *no);
    int64_t *rows = calloc((size_t)cfg.nnodes * (size_t)cfg.ntables + 1,
                           sizeof *rows);
    int status = !no || !rows, exported = 0;
    if (status)
        fprintf(stderr, "psd --export: out of memory\n");
    for (int i = 0; i < cfg.nnodes && !status; i++) {
        if (only >= 0 && i != only)
            continue;
        no[i].rows = rows + (size_t)i * (size_t)cfg.ntables;
        int rc = export_node(ini, i, drop, ndrop, out_dir, &no[i],
                             cfg.ntables, err, sizeof err);
        if (rc == 1 && only < 0) {
            fprintf(stderr, "psd --export: node %d: no snapshot (%s); its "
                    "rows are not in the export\n", i, no[i].snap);
            continue;
        }
        if (rc) {
            fprintf(stderr, "psd --export: node %d: %s\n", i,
                    rc == 1 ? "no snapshot (psctl save writes one)" : err);
            status = 1;
            break;
        }
        exported++;
        fprintf(stderr, "psd --export: node %d: snapshot %llu of %s\n", i,
                (unsigned long long)no[i].si.generation, no[i].snap);
    }
    if (!status && !exported) {
        fprintf(stderr, "psd --export: no node has a snapshot in its "
                "data_dir (psctl save writes one)\n");
        status = 1;
    }
    if (!status && write_manifest(out_dir, ini, &cfg, no, err, sizeof err)) {
        fprintf(stderr, "psd --export: %s\n", err);
        status = 1;
    }
    if (!status)
        fprintf(stderr, "psd --export: %d of %d node%s written to %s "
                "(export.json lists the files)\n", exported, cfg.nnodes,
                cfg.nnodes == 1 ? "" : "s", out_dir);
    free(rows);
    free(no);
    psd_config_destroy(&cfg);
    return status;
}
