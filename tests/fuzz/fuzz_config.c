/* libFuzzer target for the config reader (daemon/config.c over
 * daemon/inifile.c and inih): the input is an ini file. psd_config_load
 * must never crash, leak or loop; an error must read "PATH:LINE: reason"
 * with a line of the file, or "PATH: reason"; and a file it accepts must
 * hold only what config.h and conf/psd.ini allow. The file is a memfd
 * (no disk, nothing left behind), named by its /proc/self/fd path. */
#define _GNU_SOURCE              /* memfd_create */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "../../daemon/config.h"

static int fd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fd = memfd_create("psd-fuzz-config", 0);
    FUZZ_CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return 0;
}

/* Replaces the file's contents with the input. */
static void write_file(const uint8_t *data, size_t size)
{
    FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate: %s", strerror(errno));
    size_t at = 0;
    while (at < size) {
        ssize_t k = pwrite(fd, data + at, size - at, (off_t)at);
        FUZZ_CHECK(k > 0, "pwrite: %s", strerror(errno));
        at += (size_t)k;
    }
}

/* Lines the reader can name: every '\n' ends one, and so does the end of
 * a last line without one. */
static long count_lines(const uint8_t *data, size_t size)
{
    long n = 0;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n + (size > 0 && data[size - 1] != '\n');
}

/* "PATH:LINE: reason" (LINE a line of the file) or "PATH: reason". */
static void check_where(const char *what, const char *s, long lines)
{
    size_t plen = strlen(path);
    FUZZ_CHECK(strncmp(s, path, plen) == 0 && s[plen] == ':',
               "%s does not start with \"%s:\": \"%s\"", what, path, s);
    const char *p = s + plen + 1;
    if (*p != ' ') {
        char *end;
        long line = strtol(p, &end, 10);
        FUZZ_CHECK(isdigit((unsigned char)*p) && end[0] == ':' &&
                   end[1] == ' ', "%s: no line number after the path: "
                   "\"%s\"", what, s);
        FUZZ_CHECK(line >= 1 && line <= lines, "%s names line %ld of a "
                   "file of %ld lines: \"%s\"", what, line, lines, s);
        p = end + 1;
    }
    FUZZ_CHECK(p[0] == ' ' && p[1] != '\0' && p[1] != ' ',
               "%s has no reason after the place: \"%s\"", what, s);
}

static int valid_name(const char *s)
{
    size_t n = strnlen(s, PSD_NAME_MAX);
    if (n < 1 || n >= PSD_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

/* Every address well formed; nodes all differ (a name compared as psd
 * does, case-insensitively). hosts, for listen and metrics_listen, is
 * the nodes list: a bind address may repeat only for nodes on different
 * hosts (told apart by their nodes host as written), as config.c's
 * bind_repeats and README's two-host example allow; for nodes it is
 * NULL. */
static void check_nodes(const char *what, const psd_node_addr *a, int n,
                        const psd_node_addr *hosts)
{
    FUZZ_CHECK(n >= 1 && n <= PSW_MAX_NODES && a != NULL, "%d %s", n, what);
    for (int i = 0; i < n; i++) {
        size_t hl = strnlen(a[i].host, sizeof a[i].host);
        FUZZ_CHECK(hl >= 1 && hl < sizeof a[i].host, "%s %d: host of %zu "
                   "bytes", what, i, hl);
        FUZZ_CHECK(a[i].port >= 1 && a[i].port <= 65535, "%s %d: port %d",
                   what, i, a[i].port);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(a[j].port != a[i].port ||
                       strcasecmp(a[j].host, a[i].host) != 0 ||
                       (hosts && strcasecmp(hosts[j].host,
                                            hosts[i].host) != 0),
                       "%s %d and %d are both %s:%d%s", what, j, i,
                       a[i].host, a[i].port,
                       hosts ? ", for nodes on one host" : "");
    }
}

#define IN(v, lo, hi) ((v) >= (lo) && (v) <= (hi))

static void check_table(const psd_table_conf *t, uint32_t shards, long lines)
{
    FUZZ_CHECK(valid_name(t->name), "table name \"%.*s\"", PSD_NAME_MAX,
               t->name);
    FUZZ_CHECK(IN(t->line, 1, lines), "table %s at line %d of %ld", t->name,
               t->line, lines);
    FUZZ_CHECK(IN(t->dim, 1u, 65536u), "table %s: dim %u", t->name, t->dim);
    if (t->dense) {
        FUZZ_CHECK(t->dense == 1 && t->rows >= 1, "table %s: dense %d rows "
                   "%llu", t->name, t->dense, (unsigned long long)t->rows);
        FUZZ_CHECK(t->rows <= UINT64_MAX / t->dim / sizeof(float) &&
                   t->rows <= UINT64_MAX / shards, "table %s: %llu rows of "
                   "dim %u over %u shards overflow", t->name,
                   (unsigned long long)t->rows, t->dim, shards);
    } else
        FUZZ_CHECK(t->rows == 0, "sparse table %s with %llu rows", t->name,
                   (unsigned long long)t->rows);
    const psd_updater_params *u = &t->upd;
    FUZZ_CHECK(IN((int)u->kind, PSD_UPD_SUM, PSD_UPD_FTRL) &&
               isfinite(u->lr) && u->lr > 0 && isfinite(u->epsilon) &&
               u->epsilon > 0 && u->beta1 >= 0 && u->beta1 < 1 &&
               u->beta2 >= 0 && u->beta2 < 1 && isfinite(u->l1) &&
               u->l1 >= 0 && isfinite(u->l2) && u->l2 >= 0 &&
               isfinite(u->beta) && u->beta >= 0,
               "table %s: updater %d lr %g eps %g beta1 %g beta2 %g l1 %g l2 "
               "%g beta %g", t->name, (int)u->kind, (double)u->lr,
               (double)u->epsilon, (double)u->beta1, (double)u->beta2,
               (double)u->l1, (double)u->l2, (double)u->beta);
    const psd_init_params *in = &t->init;
    FUZZ_CHECK(IN((int)in->kind, PSD_INIT_ZEROS, PSD_INIT_NORMAL) &&
               isfinite(in->a) && isfinite(in->b) &&
               (in->kind != PSD_INIT_UNIFORM || in->a < in->b) &&
               (in->kind != PSD_INIT_NORMAL || in->b >= 0),
               "table %s: init %d a %g b %g", t->name, (int)in->kind,
               (double)in->a, (double)in->b);
    FUZZ_CHECK(IN((int)t->consistency, PSD_CONS_ASYNC, PSD_CONS_SSP) &&
               IN(t->staleness, 0, 65535) &&
               (t->aggregate_mean == 0 || t->aggregate_mean == 1),
               "table %s: consistency %d staleness %d aggregate %d", t->name,
               (int)t->consistency, t->staleness, t->aggregate_mean);
}

/* What config.h and conf/psd.ini promise about a file that loaded. */
static void check_config(const psd_config *c, long lines)
{
    check_nodes("nodes", c->nodes, c->nnodes, NULL);
    FUZZ_CHECK(c->nlisten == 0 || c->nlisten == c->nnodes, "%d listen "
               "addresses for %d nodes", c->nlisten, c->nnodes);
    if (c->nlisten)
        check_nodes("listen", c->listen, c->nlisten, c->nodes);
    else
        FUZZ_CHECK(c->listen == NULL, "listen array with 0 entries");
    FUZZ_CHECK(c->nmetrics == 0 || c->nmetrics == c->nnodes, "%d "
               "metrics_listen addresses for %d nodes", c->nmetrics,
               c->nnodes);
    if (c->nmetrics)
        check_nodes("metrics_listen", c->metrics, c->nmetrics, c->nodes);
    else
        FUZZ_CHECK(c->metrics == NULL, "metrics array with 0 entries");
    FUZZ_CHECK(IN(c->shards, 1u, 65535u) && IN(c->workers, 1, 65535) &&
               IN(c->worker_grace, 0, 86400), "shards %u workers %d "
               "worker_grace %d", c->shards, c->workers, c->worker_grace);
    size_t dl = strnlen(c->data_dir, sizeof c->data_dir);
    size_t tl = strnlen(c->auth_token, sizeof c->auth_token);
    FUZZ_CHECK(dl >= 1 && dl < sizeof c->data_dir && tl < sizeof c->auth_token,
               "data_dir of %zu bytes, auth_token of %zu", dl, tl);
    FUZZ_CHECK(IN(c->snapshot_interval, 0, 31536000) &&
               IN((int)c->durability, PSD_DUR_SNAPSHOT, PSD_DUR_LOG) &&
               IN((int)c->fsync, PSD_FSYNC_ALWAYS, PSD_FSYNC_NO) &&
               IN((int)c->log_level, PSD_LOG_DEBUG, PSD_LOG_ERROR),
               "snapshot_interval %d durability %d fsync %d log_level %d",
               c->snapshot_interval, (int)c->durability, (int)c->fsync,
               (int)c->log_level);
    FUZZ_CHECK(IN(c->max_frame, 1024ull, 1ull << 30) &&
               IN(c->max_output, 1024ull, 1ull << 40), "max_frame %llu "
               "max_output %llu", (unsigned long long)c->max_frame,
               (unsigned long long)c->max_output);
    FUZZ_CHECK(IN(c->max_connections, 1, 1048576) &&
               IN(c->hello_timeout, 1, 3600) &&
               IN(c->heartbeat_ms, 10, 600000) &&
               IN(c->peer_timeout_ms, 50, 3600000) &&
               c->peer_timeout_ms >= 2 * c->heartbeat_ms &&
               IN(c->client_ttl, 1, 604800), "max_connections %d "
               "hello_timeout %d heartbeat_ms %d peer_timeout_ms %d "
               "client_ttl %d", c->max_connections, c->hello_timeout,
               c->heartbeat_ms, c->peer_timeout_ms, c->client_ttl);
    FUZZ_CHECK(c->ntables >= 0 && (c->ntables == 0) == (c->tables == NULL),
               "%d tables at %p", c->ntables, (void *)c->tables);
    for (int i = 0; i < c->ntables; i++) {
        check_table(&c->tables[i], c->shards, lines);
        for (int j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(c->tables[i].name, c->tables[j].name) != 0,
                       "two tables named %s", c->tables[i].name);
    }
    FUZZ_CHECK(c->nnotes >= 0 && (c->nnotes == 0) == (c->notes == NULL),
               "%d notes at %p", c->nnotes, (void *)c->notes);
    for (int i = 0; i < c->nnotes; i++) {
        FUZZ_CHECK(strnlen(c->notes[i], PSD_NOTE_MAX) < PSD_NOTE_MAX,
                   "note %d is not terminated", i);
        check_where("a note", c->notes[i], lines);
    }
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *u = p;
    for (size_t i = 0; i < n; i++)
        if (u[i])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    psd_config c;
    char err[512];

    write_file(data, size);
    long lines = count_lines(data, size);
    memset(err, 0x55, sizeof err);
    int rc = psd_config_load(&c, path, err, sizeof err);
    if (rc == 0) {
        check_config(&c, lines);
        psd_config_destroy(&c);
    } else {
        FUZZ_CHECK(rc == -1, "psd_config_load returned %d", rc);
        FUZZ_CHECK(strnlen(err, sizeof err) < sizeof err,
                   "the error is not terminated");
        check_where("the error", err, lines);
    }
    /* Destroyed, or failed: nothing is left to free. */
    FUZZ_CHECK(all_zero(&c, sizeof c), "psd_config_load (%d) left the "
               "config holding something", rc);
    return 0;
}
