/* A node's tables, cluster description and reload rules; see node.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "node.h"
#include "updater.h"
#include "../proto/layout.h"
#include "../proto/status.h"

static void build_cluster(psd_node *n)
{
    psw_cluster *l = &n->cluster;
    l->status = PSW_OK;
    l->version = PSW_VERSION;
    l->node_index = n->index;
    l->max_frame = psd_config_frame(&n->cfg);
    l->shards = n->cfg.shards;
    l->heartbeat_ms = (uint32_t)n->cfg.heartbeat_ms;
    l->peer_timeout_ms = (uint32_t)n->cfg.peer_timeout_ms;
    for (int i = 0; i < l->nnodes; i++)
        psw_addr_format(&n->cfg.nodes[i], l->nodes[i], PSW_ADDR_MAX);
    for (int i = 0; i < l->ntables; i++) {
        const psd_table_conf *tc = &n->cfg.tables[i];
        psw_table_desc *d = &l->tables[i];
        d->id = (uint32_t)i;
        snprintf(d->name, sizeof d->name, "%s", tc->name);
        d->dense = tc->dense;
        d->dim = tc->dim;
        d->rows = tc->dense ? tc->rows : 0;
        /* The config's modes and the wire's are separate enums: the wire
         * values are fixed by the protocol, the config's by its words. */
        d->consistency = tc->consistency == PSD_CONS_BSP   ? PSW_CONS_BSP
                         : tc->consistency == PSD_CONS_SSP ? PSW_CONS_SSP
                                                           : PSW_CONS_ASYNC;
    }
}

#define MIX(h, v) ((h) = ((h) ^ (uint64_t)(v)) * 1099511628211ULL)
/* FNV-1a's offset basis with its last decimal digit left out: what psd
 * has always started from, so every snapshot, journal and epoch keeps its
 * shape (docs/durability.md gives it). Not to be "fixed". */
#define SHAPE_BASIS 1469598103934665603ULL

uint64_t psd_shape_begin(int nnodes, uint32_t shards)
{
    uint64_t h = SHAPE_BASIS;
    MIX(h, nnodes);
    MIX(h, shards);
    return h;
}

uint64_t psd_shape_table(uint64_t h, const char *name, int dense,
                         uint32_t dim, uint64_t rows, int updater,
                         int consistency)
{
    for (const char *p = name; *p; p++)
        MIX(h, (unsigned char)*p);
    MIX(h, dense);
    MIX(h, dim);
    MIX(h, rows);
    MIX(h, updater);
    MIX(h, consistency);
    return h;
}

uint64_t psd_shape_table_0_1(uint64_t h, const char *name, int dense,
                             uint32_t dim, uint64_t rows)
{
    for (const char *p = name; *p; p++)
        MIX(h, (unsigned char)*p);
    MIX(h, dense);
    MIX(h, dim);
    MIX(h, rows);
    return h;
}

uint64_t psd_config_shape_0_1(const psd_config *c)
{
    uint64_t h = psd_shape_begin(c->nnodes, c->shards);
    for (int i = 0; i < c->ntables; i++) {
        const psd_table_conf *t = &c->tables[i];
        h = psd_shape_table_0_1(h, t->name, t->dense, t->dim, t->rows);
    }
    return h;
}

uint64_t psd_config_shape(const psd_config *c)
{
    uint64_t h = psd_shape_begin(c->nnodes, c->shards);
    for (int i = 0; i < c->ntables; i++) {
        const psd_table_conf *t = &c->tables[i];
        h = psd_shape_table(h, t->name, t->dense, t->dim, t->rows,
                            (int)t->upd.kind, (int)t->consistency);
    }
    return h;
}

uint32_t psd_config_inits(const psd_config *c)
{
    uint64_t h = SHAPE_BASIS;
    for (int i = 0; i < c->ntables; i++) {
        const psd_table_conf *t = &c->tables[i];
        /* Only what makes a row's values: zeros is constant 0 (and -0 is
         * 0), a seed draws only for uniform and normal (of STD > 0). A
         * change that makes the same rows must not stop a node after a
         * crash. */
        psd_init_kind kind = t->init.kind;
        /* normal M 0 draws M every time: constant M. */
        if (kind == PSD_INIT_NORMAL && t->init.b == 0.0f)
            kind = PSD_INIT_CONSTANT;
        float fa = kind == PSD_INIT_ZEROS ? 0.0f : t->init.a + 0.0f;
        float fb = kind == PSD_INIT_UNIFORM || kind == PSD_INIT_NORMAL
                       ? t->init.b + 0.0f : 0.0f;
        int draws = kind == PSD_INIT_UNIFORM || kind == PSD_INIT_NORMAL;
        if (kind == PSD_INIT_ZEROS)
            kind = PSD_INIT_CONSTANT;
        uint32_t a, b;
        memcpy(&a, &fa, 4);
        memcpy(&b, &fb, 4);
        for (const char *p = t->name; *p; p++)
            MIX(h, (unsigned char)*p);
        MIX(h, kind);
        MIX(h, a);
        MIX(h, b);
        MIX(h, draws ? t->init.seed : 0);
    }
    uint32_t m = (uint32_t)(h ^ h >> 24 ^ h >> 48) & 0xffffff;
    return m ? m : 1;
}

/* The layout epoch identifies this shape of the cluster, where its
 * nodes are and how many workers a synchronous job has: clients compare
 * it across nodes so they never mix two layouts. A node started with
 * another `workers` than the others waited for a worker that never came
 * while the rest moved on: the job hung with no error. Mixed in only
 * above the default 1 (1 against 2 still differs), so that a cluster
 * with the default has an earlier release's epoch. */
static uint64_t layout_epoch(const psd_config *c)
{
    uint64_t h = psd_config_shape(c);
    for (int i = 0; i < c->nnodes; i++) {
        for (const char *p = c->nodes[i].host; *p; p++)
            MIX(h, (unsigned char)*p);
        MIX(h, c->nodes[i].port);
    }
    if (c->workers > 1)
        MIX(h, c->workers);
    /* The rest of what a synchronous table's nodes must agree on (no
     * reload changes them): an ssp table's staleness, a bsp table's
     * aggregate. Only for such tables, as workers. */
    for (int i = 0; i < c->ntables; i++) {
        const psd_table_conf *t = &c->tables[i];
        if (t->consistency == PSD_CONS_SSP)
            MIX(h, t->staleness + 1);
        else if (t->consistency == PSD_CONS_BSP)
            MIX(h, t->aggregate_mean + 1);
    }
    return h;
}

int psd_node_init(psd_node *n, psd_config *cfg, int index, uint64_t now_ms,
                  char *err, size_t errlen)
{
    memset(n, 0, sizeof *n);
    n->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    n->index = index;
    n->cluster.nnodes = n->cfg.nnodes;
    n->cluster.ntables = n->cfg.ntables;
    n->cluster.epoch = layout_epoch(&n->cfg);
    n->shape = psd_config_shape(&n->cfg);
    n->inits = psd_config_inits(&n->cfg);
    n->cluster.nodes = calloc((size_t)n->cfg.nnodes,
                              sizeof *n->cluster.nodes);
    n->cluster.tables = calloc((size_t)n->cfg.ntables + 1,
                               sizeof *n->cluster.tables);
    n->tables = calloc((size_t)n->cfg.ntables + 1, sizeof *n->tables);
    n->tstats = calloc((size_t)n->cfg.ntables + 1, sizeof *n->tstats);
    n->row_refs = calloc((size_t)n->cfg.ntables + 1, sizeof *n->row_refs);
    n->dedup = psd_dedup_new();
    if (!n->cluster.nodes || !n->cluster.tables || !n->tables || !n->tstats ||
        !n->row_refs || !n->dedup ||
        psd_sync_init(&n->sync, n->cfg.workers, now_ms)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < n->cfg.ntables; i++)
        n->sync.synchronous |= n->cfg.tables[i].consistency != PSD_CONS_ASYNC;
    build_cluster(n);
    for (int i = 0; i < n->cfg.ntables; i++) {
        /* A large dense table's rows take seconds to make (each from its
         * init, and before a snapshot is loaded over them), and nothing
         * was logged meanwhile: a starting node read as a hung one, and
         * psctl saw only "connection refused" (an operators' trial: 4 s
         * of silence for 100 M rows). */
        const psd_table_conf *tc = &n->cfg.tables[i];
        if (tc->dense) {
            uint64_t held = psw_dense_rows_on_node(tc->rows, n->cfg.shards,
                                                   n->cfg.nnodes, index);
            double mib = (double)held *
                         (double)psd_updater_row_bytes(tc->upd.kind, tc->dim) /
                         (1 << 20);
            if (mib >= 256)
                psd_info("table '%s': making its %llu rows here (%.0f MiB%s)",
                         tc->name, (unsigned long long)held, mib,
                         psd_updater_state_per_float(tc->upd.kind)
                             ? " with their optimizer state" : "");
        }
        n->tables[i] = psd_table_new(&n->cfg.tables[i], n->cfg.shards,
                                     n->cfg.nnodes, index, err, errlen);
        if (!n->tables[i])
            return -1;
        n->ntables = i + 1;
    }
    return 0;
}

void psd_node_destroy(psd_node *n)
{
    for (int i = 0; i < n->ntables; i++)
        psd_table_free(n->tables[i]);
    free(n->tables);
    n->tables = NULL;
    free(n->tstats);
    n->tstats = NULL;
    free(n->row_refs);
    n->row_refs = NULL;
    n->ntables = 0;
    psd_sync_destroy(&n->sync);
    psd_dedup_free(n->dedup);
    n->dedup = NULL;
    psw_cluster_free(&n->cluster);
    psd_config_destroy(&n->cfg);
}

/* Writes "PATH:LINE: " (or "PATH: " without a line) and the reason to
 * why; returns 1, for `return refuse(...)`. */
__attribute__((format(printf, 5, 6)))
static int refuse(char *why, size_t len, const char *path, int line,
                  const char *fmt, ...)
{
    int n = line > 0 ? snprintf(why, len, "%s:%d: ", path, line)
                     : snprintf(why, len, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < len)
        vsnprintf(why + n, len - (size_t)n, fmt, ap);
    va_end(ap);
    return 1;
}

int psd_config_same_nodes(const psd_config *a, const psd_config *b)
{
    if (a->nnodes != b->nnodes)
        return 0;
    for (int i = 0; i < a->nnodes; i++)
        if (strcmp(a->nodes[i].host, b->nodes[i].host) ||
            a->nodes[i].port != b->nodes[i].port)
            return 0;
    return 1;
}

/* A key's line in the file just read, else its table's section line
 * (the key was left out: its default). */
static int line_of(int key_line, const psd_table_conf *t)
{
    return key_line ? key_line : t->line;
}

/* What a reload may not change of one table, said at its section's line
 * of b (the file just read), or at the key's where it has one. */
static int table_change(const psd_table_conf *x, const psd_table_conf *y,
                        const char *path, char *why, size_t len)
{
    if (strcmp(x->name, y->name))
        return refuse(why, len, path, y->line, "[table.%s] is where "
                      "[table.%s] was: tables were renamed or reordered",
                      y->name, x->name);
    /* Each said with its values at its key's line: "its kind, dim or
     * rows changed" at the section left the operator to find which (an
     * operators' trial). */
    if (x->dense != y->dense)
        return refuse(why, len, path, line_of(y->kind_line, y),
                      "[table.%s] kind changed (%s to %s)", y->name,
                      x->dense ? "dense" : "sparse",
                      y->dense ? "dense" : "sparse");
    if (x->dim != y->dim)
        return refuse(why, len, path, line_of(y->dim_line, y),
                      "[table.%s] dim changed (%u to %u)", y->name,
                      (unsigned)x->dim, (unsigned)y->dim);
    if (x->rows != y->rows)
        return refuse(why, len, path, line_of(y->rows_line, y),
                      "[table.%s] rows changed (%llu to %llu)", y->name,
                      (unsigned long long)x->rows,
                      (unsigned long long)y->rows);
    if (x->upd.kind != y->upd.kind)
        return refuse(why, len, path, line_of(y->updater_line, y),
                      "[table.%s] updater changed (%s to %s: its state "
                      "would not fit)", y->name, psd_updater_name(x->upd.kind),
                      psd_updater_name(y->upd.kind));
    if (x->init.kind != y->init.kind || x->init.a != y->init.a ||
        x->init.b != y->init.b || x->init.seed != y->init.seed)
        return refuse(why, len, path, y->line, "[table.%s]: its init or "
                      "seed changed (an initializer changed; it makes only "
                      "rows not made yet: after a restart the rows the "
                      "snapshot holds keep their values; to start the "
                      "table over, give it a new name)", y->name);
    /* Every node must hold one mode, bound and aggregate for a table
     * (the layout epoch holds them), and a reload reaches one node at a
     * time. staleness off ssp and aggregate off bsp do nothing, so a
     * change to them is no change. */
    if (x->consistency != y->consistency)
        return refuse(why, len, path, line_of(y->consistency_line, y),
                      "[table.%s] consistency changed (%s to %s)", y->name,
                      psd_consistency_name(x->consistency),
                      psd_consistency_name(y->consistency));
    if (y->consistency == PSD_CONS_SSP && x->staleness != y->staleness)
        return refuse(why, len, path, line_of(y->staleness_line, y),
                      "[table.%s] staleness changed (%d to %d)",
                      y->name, x->staleness, y->staleness);
    /* Each table keeps its own copy, which a reload does not update: a
     * node still summing (or averaging) must not say it reloaded. */
    if (y->consistency == PSD_CONS_BSP &&
        x->aggregate_mean != y->aggregate_mean)
        return refuse(why, len, path, line_of(y->aggregate_line, y),
                      "[table.%s] aggregate changed (%s to %s)",
                      y->name, x->aggregate_mean ? "mean" : "sum",
                      y->aggregate_mean ? "mean" : "sum");
    return 0;
}

/* Whether node `index`'s entry of an address list (listen,
 * metrics_listen: one per node, or none) is the same in a and b: the
 * other nodes' entries are theirs to bind. */
static int same_entry(const psd_node_addr *a, int na, const psd_node_addr *b,
                      int nb, int index)
{
    if (!na || !nb)
        return na == nb;
    return index < na && index < nb &&
           memcmp(&a[index], &b[index], sizeof *a) == 0;
}

/* p with repeated slashes made one and a trailing one dropped (the root
 * stays "/"), into out (at least as large as p). */
static void tidy_path(const char *p, char *out)
{
    size_t n = 0;
    for (; *p; p++)
        if (*p != '/' || n == 0 || out[n - 1] != '/')
            out[n++] = *p;
    if (n > 1 && out[n - 1] == '/')
        n--;
    out[n] = '\0';
}

/* Whether two configurations keep their files in one folder, as psd
 * finds it (psd_config_data_dir: $STATE_DIRECTORY in place of the default
 * data_dir): by its text ("/d/", "/d" and "//d" are one), else, when
 * both names reach a folder that exists, by that folder ("/d/../d", a
 * symbolic link to it). A relative one is taken from where psd runs. */
static int same_data_dir(const psd_config *a, const psd_config *b)
{
    char x[4096], y[4096], tx[4096], ty[4096];
    psd_config_data_dir(a, x, sizeof x);
    psd_config_data_dir(b, y, sizeof y);
    tidy_path(x, tx);
    tidy_path(y, ty);
    if (strcmp(tx, ty) == 0)
        return 1;
    /* Another name of the same folder ("/d/../d", a symlink) is the
     * same folder: refused as "changed", it read as a move. */
    struct stat sx, sy;
    return stat(tx, &sx) == 0 && stat(ty, &sy) == 0 &&
           S_ISDIR(sx.st_mode) && sx.st_dev == sy.st_dev &&
           sx.st_ino == sy.st_ino;
}

/* What a reload may not change: anything clients or stored rows depend
 * on. 1 with "PATH[:LINE]: what" in why (the line where the file keeps
 * it, when it does: a table's section, the key's line), else 0. index:
 * this node's. */
static int layout_change(const psd_config *a, const psd_config *b,
                         int index, const char *path, char *why, size_t len)
{
    if (!psd_config_same_nodes(a, b))
        return refuse(why, len, path, b->nodes_line, "nodes changed");
    if (a->shards != b->shards)
        return refuse(why, len, path, b->shards_line,
                      "shards changed (%u to %u)", a->shards, b->shards);
    if (a->ntables != b->ntables) {
        /* At the first table the file added, when it added one. */
        int line = 0;
        for (int i = 0; i < b->ntables && !line; i++) {
            int known = 0;
            for (int k = 0; k < a->ntables && !known; k++)
                known = !strcmp(a->tables[k].name, b->tables[i].name);
            if (!known)
                line = b->tables[i].line;
        }
        return refuse(why, len, path, line, "tables were added or removed "
                      "(%d to %d)", a->ntables, b->ntables);
    }
    for (int i = 0; i < a->ntables; i++)
        if (table_change(&a->tables[i], &b->tables[i], path, why, len))
            return 1;
    /* The workers' state is sized at start (and saved in snapshots): a
     * node that kept waiting for the old count must not say it reloaded. */
    if (a->workers != b->workers)
        return refuse(why, len, path, b->workers_line,
                      "workers changed (%d to %d)", a->workers, b->workers);
    /* Each part of the epoch was compared above; this stays true to it
     * should one be added there and not here. */
    if (layout_epoch(a) != layout_epoch(b))
        return refuse(why, len, path, 0, "nodes, shards or tables changed");
    /* Where this node binds: its listen entry, else its nodes entry
     * (the same in a and b, above). A listen line added that names the
     * address bound already changes nothing (it was refused). */
    const psd_node_addr *bind_a = NULL, *bind_b = NULL;
    if (index < a->nnodes) {
        bind_a = a->nlisten > index ? &a->listen[index] : &a->nodes[index];
        bind_b = b->nlisten > index ? &b->listen[index] : &b->nodes[index];
    }
    if (bind_a && memcmp(bind_a, bind_b, sizeof *bind_a)) {
        /* Both written out: a name and the address it resolves to are
         * two entries here, and "changed" alone read as a contradiction
         * of the start line's "bound at" (a review). */
        char was[PSW_ADDR_TEXT_MAX], now[PSW_ADDR_TEXT_MAX];
        psw_addr_format(bind_a, was, sizeof was);
        psw_addr_format(bind_b, now, sizeof now);
        return refuse(why, len, path, b->listen_line, "listen changed "
                      "(this node's address, as written: %s before, %s "
                      "now)", was, now);
    }
    if (strcmp(a->auth_token, b->auth_token) ||
        strcmp(a->auth_token_file, b->auth_token_file))
        return refuse(why, len, path, b->auth_token_line
                                          ? b->auth_token_line
                                          : b->auth_token_file_line,
                      "auth_token or auth_token_file changed");
    /* The data folder, the journal and its fsync are set up at start.
     * The folder as a path: "/d/", "/d" and "//d" are one. */
    if (!same_data_dir(a, b))
        return refuse(why, len, path, b->data_dir_line, "data_dir changed");
    if (a->durability != b->durability)
        return refuse(why, len, path, b->durability_line, "durability "
                      "changed");
    if (a->fsync != b->fsync)
        return refuse(why, len, path, b->fsync_line, "fsync changed");
    if (!same_entry(a->metrics, a->nmetrics, b->metrics, b->nmetrics,
                    index))
        return refuse(why, len, path, b->metrics_line, "metrics_listen "
                      "changed (this node's address)");
    /* Connected clients size their frames by the value they were told, and
     * pace their heartbeats by the interval. */
    if (a->max_frame != b->max_frame)
        return refuse(why, len, path, b->max_frame_line, "max_frame "
                      "changed");
    /* ... and so by the frame max_client_memory makes (config.h). */
    if (psd_config_frame(a) != psd_config_frame(b))
        return refuse(why, len, path, b->max_client_memory_line,
                      "max_client_memory %llu changes this node's frames "
                      "from at most %llu bytes to %llu (one frame and its "
                      "reply must fit it)",
                      (unsigned long long)b->max_client_memory,
                      (unsigned long long)psd_config_frame(a),
                      (unsigned long long)psd_config_frame(b));
    if (a->heartbeat_ms != b->heartbeat_ms)
        return refuse(why, len, path, b->heartbeat_ms_line, "heartbeat_ms "
                      "changed");
    if (a->peer_timeout_ms != b->peer_timeout_ms)
        return refuse(why, len, path, b->peer_timeout_ms_line,
                      "peer_timeout_ms changed");
    return 0;
}

int psd_config_restart(const psd_config *a, const psd_config *b,
                       char *gone, size_t len)
{
    if (a->nnodes != b->nnodes || a->shards != b->shards)
        return PSD_RESTART_REFUSES;
    size_t at = 0;
    for (int i = 0; i < a->ntables; i++) {
        const psd_table_conf *x = &a->tables[i], *y = NULL;
        for (int j = 0; j < b->ntables && !y; j++)
            if (!strcmp(b->tables[j].name, x->name))
                y = &b->tables[j];
        if (!y) {
            if (at < len)
                at += (size_t)snprintf(gone + at, len - at, "%s%s",
                                       at ? ", " : "", x->name);
            continue;
        }
        if (x->dense != y->dense || x->dim != y->dim || x->rows != y->rows ||
            x->upd.kind != y->upd.kind || x->consistency != y->consistency)
            return PSD_RESTART_REFUSES;
    }
    return at ? PSD_RESTART_DROPS : PSD_RESTART_TAKES;
}

int psd_node_apply_params(psd_node *n)
{
    int rc = 0;
    for (int i = 0; i < n->ntables; i++) {
        /* Counted as a change only where a table's values change (the
         * struct has no padding): writing the same ones again at a
         * start, a reload or a journal retry made a snapshot loaded
         * whole look stale, and an idle node's stop wrote it again. */
        const psd_updater_params *was =
            &psd_table_conf_get(n->tables[i])->upd;
        if (memcmp(was, &n->cfg.tables[i].upd, sizeof *was))
            n->changes++;
        psd_table_set_params(n->tables[i], &n->cfg.tables[i].upd);
        if (n->journal &&
            !psd_journal_params(n->journal, (uint32_t)i,
                                &n->cfg.tables[i].upd)) {
            snprintf(n->journal_error, sizeof n->journal_error,
                     "out of memory buffering a record");
            rc = -1;
        }
    }
    return rc;
}

/* A WORKER record carries a worker's refused clients as they are. */
_Static_assert(PSD_J_REPLACED == PSD_REPLACED &&
               PSD_REPLACED <= 8, "a WORKER record's replaced clients, and "
               "its ended mask in one byte");

int psd_node_journal_workers(psd_node *n)
{
    if (!n->journal)
        return 0;
    int rc = 0;
    for (int i = psd_sync_dirty(&n->sync, 0); i >= 0;
         i = psd_sync_dirty(&n->sync, i + 1)) {
        psd_worker *w = &n->sync.workers[i];
        /* A worker absent since its LEAVE ended the job (sync.c,
         * job_over) is journaled as that LEAVE: the replay ends the job
         * the same way. */
        int joined = w->state == PSD_W_LIVE || w->state == PSD_W_GONE;
        int closed = w->closed || w->state == PSD_W_ABSENT;
        if (!psd_journal_worker(n->journal, i, joined, closed, w->client_id,
                                w->clock, w->barrier, w->replaced,
                                w->ended_mask, w->lost_id, w->unknown)) {
            w->dirty = 1;        /* asked again (psd_node_commit) */
            snprintf(n->journal_error, sizeof n->journal_error,
                     "out of memory buffering a record");
            rc = -1;
        }
    }
    return rc;
}

/* Says which hyper-parameters of a table a reload changes: "reloaded"
 * alone left the operator to do the arithmetic on pushed rows to see
 * whether a new lr took. The updater is the same (layout_change). */
static void log_param_changes(const psd_table_conf *was,
                              const psd_updater_params *now)
{
    const char *n0[PSD_UPDATER_PARAMS_MAX], *n1[PSD_UPDATER_PARAMS_MAX];
    double v0[PSD_UPDATER_PARAMS_MAX], v1[PSD_UPDATER_PARAMS_MAX];
    int k0 = psd_updater_params_list(&was->upd, n0, v0);
    int k1 = psd_updater_params_list(now, n1, v1);
    for (int k = 0; k < k0 && k < k1; k++)
        if (v0[k] != v1[k])
            psd_info("table '%s': %s %.7g -> %.7g", was->name, n0[k], v0[k],
                     v1[k]);
}

/* The same for a table's limits (max_rows, nonfinite), which a reload
 * applied without a word. */
static void log_limit_changes(const psd_table_conf *was,
                              const psd_table_conf *now)
{
    if (was->max_rows != now->max_rows)
        psd_info("table '%s': max_rows %llu -> %llu", was->name,
                 (unsigned long long)was->max_rows,
                 (unsigned long long)now->max_rows);
    if (was->allow_nonfinite != now->allow_nonfinite)
        psd_info("table '%s': nonfinite %s -> %s", was->name,
                 was->allow_nonfinite ? "allow" : "reject",
                 now->allow_nonfinite ? "allow" : "reject");
}

/* The server settings a reload applies as they are (besides log_level
 * and the tables' hyper-parameters and limits): one list, for the log
 * and for the copy. worker_grace is read at each loss and tick, so a
 * worker already lost gets the new grace, counted from its loss. */
#define RELOADED_SETTINGS(X)                                               \
    X(max_output) X(max_connections) X(max_connections_per_addr)          \
    X(max_client_memory) X(hello_timeout) X(frame_timeout)                \
    X(idle_timeout) X(snapshot_interval) X(snapshot_journal_mb)           \
    X(client_ttl) X(max_unacked_pushes) X(max_remembered_pushes)          \
    X(worker_grace)

/* Logs the entries of other nodes in an address list (listen,
 * metrics_listen) a reload changes: each node binds only its own, so they
 * are taken without a refusal, and were taken without a word. Without a
 * listen line a node binds its nodes entry (`nodes`: a's and b's, the
 * same here); without metrics_listen, none. That node's own reload
 * refuses the change to its entry: it binds it when it restarts. */
static void log_other_entries(const char *key, const psd_node_addr *a,
                              int na, const psd_node_addr *b, int nb,
                              const psd_node_addr *nodes, int index)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        /* What node i binds before and after (NULL: nothing). */
        const psd_node_addr *x = i < na ? &a[i] : nodes ? &nodes[i] : NULL,
                            *y = i < nb ? &b[i] : nodes ? &nodes[i] : NULL;
        if (i == index || (x && y && memcmp(x, y, sizeof *x) == 0))
            continue;
        char was[PSW_ADDR_TEXT_MAX + 32] = "none",
             now[PSW_ADDR_TEXT_MAX + 32] = "none";
        for (int k = 0; k < 2; k++) {
            const psd_node_addr *l = k ? b : a;
            char *out = k ? now : was;
            if (i < (k ? nb : na))
                psw_addr_format(&l[i], out, PSW_ADDR_TEXT_MAX);
            else if (nodes) {
                psw_addr_format(&nodes[i], out, PSW_ADDR_TEXT_MAX);
                strcat(out, " (its nodes entry)");
            }
        }
        psd_info("%s of node %d: %s -> %s (node %d binds it when it "
                 "restarts)", key, i, was, now, i);
    }
}

/* Logs each server setting a reload changes, as log_param_changes does
 * for tables: "reloaded" alone left an operator unable to tell whether a
 * new limit was in force. */
static void log_setting_changes(const psd_config *a, const psd_config *b,
                                int index)
{
    log_other_entries("listen", a->listen, a->nlisten, b->listen, b->nlisten,
                      a->nodes, index);
    log_other_entries("metrics_listen", a->metrics, a->nmetrics, b->metrics,
                      b->nmetrics, NULL, index);
    static const char *const levels[] = { "debug", "info", "warn", "error" };
    if (a->log_level != b->log_level)
        psd_info("log_level %s -> %s", levels[a->log_level],
                 levels[b->log_level]);
#define LOG_CHANGE(f)                                                      \
    if ((uint64_t)a->f != (uint64_t)b->f)                                  \
        psd_info("%s %llu -> %llu", #f, (unsigned long long)a->f,          \
                 (unsigned long long)b->f);
    RELOADED_SETTINGS(LOG_CHANGE)
#undef LOG_CHANGE
}

/* *dst (nd entries, owned) becomes a copy of src's ns; kept as it was
 * when memory runs out (the next reload logs the change again). */
static void copy_entries(psd_node_addr **dst, int *nd,
                         const psd_node_addr *src, int ns)
{
    psd_node_addr *c = NULL;
    if (ns > 0) {
        c = malloc((size_t)ns * sizeof *c);
        if (!c)
            return;
        memcpy(c, src, (size_t)ns * sizeof *c);
    }
    free(*dst);
    *dst = c;
    *nd = ns;
}

int psd_node_reload(psd_node *n, const psd_config *nc, const char *path,
                    char *why, size_t len)
{
    if (layout_change(&n->cfg, nc, n->index, path, why, len))
        return -1;
    log_setting_changes(&n->cfg, nc, n->index);
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *t = &nc->tables[i];
        log_param_changes(&n->cfg.tables[i], &t->upd);
        log_limit_changes(&n->cfg.tables[i], t);
        psd_table_set_limits(n->tables[i], t->max_rows, t->allow_nonfinite);
        n->cfg.tables[i].upd = t->upd;
        n->cfg.tables[i].max_rows = t->max_rows;
        n->cfg.tables[i].allow_nonfinite = t->allow_nonfinite;
    }
    n->cfg.log_level = nc->log_level;
    /* The other nodes' entries (this node's is the same: layout_change),
     * so that the next reload compares with the file as it is now. */
    copy_entries(&n->cfg.listen, &n->cfg.nlisten, nc->listen, nc->nlisten);
    copy_entries(&n->cfg.metrics, &n->cfg.nmetrics, nc->metrics,
                 nc->nmetrics);
    n->cfg.listen_line = nc->listen_line;
    n->cfg.metrics_line = nc->metrics_line;
#define COPY(f) n->cfg.f = nc->f;
    RELOADED_SETTINGS(COPY)
#undef COPY
    /* Journaled in order with the pushes: a replay applies those before
     * the reload with the old values and those after with the new. */
    (void)psd_node_apply_params(n);
    psd_node_warn_full(n);
    return 0;
}

void psd_node_warn_full(const psd_node *n)
{
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *t = &n->cfg.tables[i];
        uint64_t rows = psd_table_rows(n->tables[i]);
        if (t->max_rows && rows > t->max_rows)
            psd_warn("table '%s': this node holds %llu rows, above its "
                     "max_rows = %llu: pushes that would create rows here "
                     "are refused (PS_EFULL) until max_rows is raised",
                     t->name, (unsigned long long)rows,
                     (unsigned long long)t->max_rows);
    }
}

int psd_node_commit(psd_node *n)
{
    psd_journal *j = n->journal;
    if (!j)
        return 0;
    /* A hyper-parameter or worker record memory refused is asked for
     * again before the error can clear (it must precede the pushes that
     * follow). */
    if (n->journal_error[0] &&
        (psd_node_apply_params(n) | psd_node_journal_workers(n)))
        return -1;
    if (psd_journal_last(j) == psd_journal_written(j)) {
        /* Nothing waits to be written: a failure to buffer a record
         * (memory) is over once buffering works again. */
        if (n->journal_error[0]) {
            psd_info("journal: writing again");
            n->journal_error[0] = '\0';
        }
        return 0;
    }
    char err[1024];
    if (psd_journal_write(j, err, sizeof err)) {
        n->stats.journal_errors++;
        if (!n->journal_error[0])
            psd_error("journal: %s; pushes are refused until it works "
                      "again", err);
        snprintf(n->journal_error, sizeof n->journal_error, "%s", err);
        return -1;
    }
    if (n->journal_error[0])
        psd_info("journal: writing again");
    n->journal_error[0] = '\0';
    if (n->written)
        n->written(n->written_arg);
    return 0;
}

void psd_node_size(const psd_node *n, uint64_t *rows, uint64_t *bytes)
{
    *rows = *bytes = 0;
    for (int i = 0; i < n->ntables; i++) {
        *rows += psd_table_rows(n->tables[i]);
        *bytes += psd_table_bytes(n->tables[i]);
    }
}
