/* Helpers of the fuzz targets for psd's files; see disk.h. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "../../daemon/secret.h"
#include "fuzz.h"
#include "request_conf.h"
#include "../../daemon/dedup.h"
#include "../../daemon/sync.h"
#include "../../daemon/table.h"
#include "../../proto/layout.h"

#define MAX_DIRS 4

static struct {
    char tag[32];
    char path[128];
} dirs[MAX_DIRS];
static int ndirs;

static void remove_dirs(void)
{
    for (int i = 0; i < ndirs; i++) {
        fuzz_disk_clear(dirs[i].path);
        rmdir(dirs[i].path);
    }
    ndirs = 0;
}

/* Removes the folders in base that processes no longer running made: an
 * input that aborts (a finding, and every step of -minimize_crash) ends
 * its process without the atexit handler. */
static void remove_stale(const char *base)
{
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "psd-fuzz-", 9) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + 9, &end, 10);
        if (end == e->d_name + 9 || *end != '-' || pid <= 0 ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        snprintf(path, sizeof path, "%s/%s", base, e->d_name);
        fuzz_disk_clear(path);
        rmdir(path);
    }
    closedir(d);
}

const char *fuzz_disk_dir(const char *tag)
{
    for (int i = 0; i < ndirs; i++)
        if (strcmp(dirs[i].tag, tag) == 0)
            return dirs[i].path;
    FUZZ_CHECK(ndirs < MAX_DIRS, "more than %d folders", MAX_DIRS);
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
                               access("/dev/shm", W_OK) == 0
                           ? "/dev/shm" : "/tmp";
    if (ndirs == 0)
        remove_stale(base);
    char *p = dirs[ndirs].path;
    snprintf(p, sizeof dirs[ndirs].path, "%s/psd-fuzz-%ld-%s-XXXXXX", base,
             (long)getpid(), tag);
    FUZZ_CHECK(mkdtemp(p) != NULL, "mkdtemp %s: %s", p, strerror(errno));
    snprintf(dirs[ndirs].tag, sizeof dirs[ndirs].tag, "%s", tag);
    if (ndirs++ == 0)
        atexit(remove_dirs);
    return p;
}

void fuzz_disk_clear(const char *dir)
{
    DIR *d = opendir(dir);
    FUZZ_CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

void fuzz_disk_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f != NULL && (n == 0 || fwrite(p, 1, n, f) == n) &&
               fclose(f) == 0, "writing %s: %s", path, strerror(errno));
}

char *fuzz_disk_read(const char *path, size_t *n)
{
    long long size = fuzz_disk_size(path);
    FUZZ_CHECK(size >= 0, "%s: %s", path, strerror(errno));
    char *buf = malloc((size_t)size + 1);
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(buf != NULL && f != NULL &&
               fread(buf, 1, (size_t)size, f) == (size_t)size,
               "reading %s: %s", path, strerror(errno));
    fclose(f);
    *n = (size_t)size;
    return buf;
}

long long fuzz_disk_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

const psd_config *fuzz_disk_config(void)
{
    static psd_config tmpl;
    static int loaded;
    if (loaded)
        return &tmpl;
    /* Runs that repeat, and seeds that make_seeds writes the same each
     * time: psd's hashes of what clients choose under a fixed secret. */
    psd_secret_fix(FUZZ_SECRET);
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/request.ini", fuzz_disk_dir("conf"));
    fuzz_disk_write(path, FUZZ_REQ_INI, strlen(FUZZ_REQ_INI));
    int rc = psd_config_load(&tmpl, path, err, sizeof err);
    unlink(path);
    FUZZ_CHECK(rc == 0, "the fixed config does not load: %s", err);
    FUZZ_CHECK(tmpl.ntables == FUZZ_T_COUNT && tmpl.nnodes == FUZZ_REQ_NODES &&
               tmpl.shards == FUZZ_REQ_SHARDS &&
               tmpl.workers == FUZZ_REQ_WORKERS &&
               tmpl.max_frame == FUZZ_REQ_MAX_FRAME,
               "request_conf.h: the config and its constants differ");
    loaded = 1;
    return &tmpl;
}

static void *memdup(const void *p, size_t n)
{
    if (n == 0)
        return NULL;
    void *q = malloc(n);
    FUZZ_CHECK(q != NULL, "out of memory copying %zu bytes", n);
    memcpy(q, p, n);
    return q;
}

void fuzz_disk_node(psd_node *n, int index, uint64_t now_ms)
{
    const psd_config *s = fuzz_disk_config();
    psd_config d = *s;
    char err[256];
    d.nodes = memdup(s->nodes, (size_t)s->nnodes * sizeof *s->nodes);
    d.listen = memdup(s->listen, (size_t)s->nlisten * sizeof *s->listen);
    d.tables = memdup(s->tables, (size_t)s->ntables * sizeof *s->tables);
    d.notes = memdup(s->notes, (size_t)s->nnotes * sizeof *s->notes);
    FUZZ_CHECK(psd_node_init(n, &d, index, now_ms, err, sizeof err) == 0,
               "psd_node_init: %s", err);
}

/* A sink that keeps what it is given. */
typedef struct grow {
    char *p;
    size_t n, cap;
} grow;

static int grow_write(void *ctx, const void *p, size_t n)
{
    grow *g = ctx;
    if (g->cap - g->n < n) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap - g->n < n)
            cap *= 2;
        char *q = realloc(g->p, cap);
        FUZZ_CHECK(q != NULL, "out of memory for a digest");
        g->p = q;
        g->cap = cap;
    }
    memcpy(g->p + g->n, p, n);
    g->n += n;
    return 0;
}

static uint64_t u64_at(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The memory of applied pushes as saved (dedup.c: u64 clients; each u64
 * id, incarnation, mark, entries; each entry u64 ts, u32 part, i32
 * status), summed over clients and entries so that order does not
 * count. */
static uint64_t dedup_digest(const char *p, size_t n)
{
    FUZZ_CHECK(n >= 8, "a saved memory of %zu bytes", n);
    uint64_t clients = u64_at(p), sum = clients, at = 8;
    for (uint64_t c = 0; c < clients; c++) {
        FUZZ_CHECK(n - at >= 32, "the saved memory ends in client %llu",
                   (unsigned long long)c);
        uint64_t id = u64_at(p + at), inc = u64_at(p + at + 8),
                 low = u64_at(p + at + 16), k = u64_at(p + at + 24);
        at += 32;
        FUZZ_CHECK(k <= (n - at) / 16, "the saved memory ends in the "
                   "pushes of client %llu", (unsigned long long)c);
        uint64_t es = 0;
        for (uint64_t e = 0; e < k; e++, at += 16)
            es += psw_mix64(u64_at(p + at) ^ psw_mix64(u64_at(p + at + 8)));
        sum += psw_mix64(id ^ psw_mix64(inc ^ psw_mix64(low ^
                                                        psw_mix64(k + es))));
    }
    FUZZ_CHECK(at == n, "%zu bytes after the saved memory", n - (size_t)at);
    return sum;
}

uint64_t fuzz_disk_digest(const psd_node *n)
{
    grow g = { 0 };
    psd_sink o = { grow_write, &g };
    uint64_t h = 0;
    for (int i = 0; i < n->ntables; i++) {
        g.n = 0;
        FUZZ_CHECK(psd_table_save(n->tables[i], &o) == 0, "saving table %d",
                   i);
        h = psw_mix64(h ^ psw_crc32c((uint32_t)i, g.p, g.n) ^
                      ((uint64_t)g.n << 32));
    }
    g.n = 0;
    FUZZ_CHECK(psd_sync_save(&n->sync, &o) == 0, "saving the workers");
    h = psw_mix64(h ^ psw_crc32c(0, g.p, g.n) ^ ((uint64_t)g.n << 32));
    g.n = 0;
    FUZZ_CHECK(psd_dedup_save(n->dedup, &o) == 0, "saving the memory");
    h = psw_mix64(h ^ dedup_digest(g.p, g.n));
    free(g.p);
    return h;
}
