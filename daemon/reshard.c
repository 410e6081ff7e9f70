/* psd --reshard: a stopped cluster's model onto another node count; see
 * reshard.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "durable.h"
#include "journal.h"
#include "node.h"
#include "readdir.h"
#include "request.h"
#include "reshard.h"
#include "snapshot.h"
#include "sync.h"
#include "table.h"
#include "../proto/layout.h"

static const char *const cons_name[] = { "async", "bsp", "ssp" };

/* Node indices a file name may hold (a cluster has at most 4096 nodes). */
#define PSD_RESHARD_NODES_MAX 4096

/* Whether the new layout names the very nodes of the old one (their
 * count and addresses): clients would take the moved cluster for the one
 * they knew (the layout they compare is the same) and send again pushes
 * it applied, whose memory does not move. Nothing moves between such
 * layouts but folders. 1 with the reason in err. */
static int same_nodes(const psd_config *a, const char *ai,
                      const psd_config *b, const char *bi, char *err,
                      size_t errlen)
{
    if (!psd_config_same_nodes(a, b))
        return 0;
    snprintf(err, errlen, "%s names the same %d node%s at the "
             "same addresses as %s: nothing to move between them but the "
             "folders (copy each node's data_dir with its files: cp -a); "
             "moved this way, the nodes would forget the pushes they "
             "applied while their clients took them for the same cluster, "
             "and a push sent again would be applied twice", bi, b->nnodes,
             b->nnodes == 1 ? "" : "s", ai);
    return 1;
}

/* Whether the two layouts hold the same rows: the same shards, and the
 * same tables in the same order, alike in what decides where a row lives
 * and what it holds. 0, or -1 with the reason in err. */
static int same_model(const psd_config *a, const char *ai,
                      const psd_config *b, const char *bi, char *err,
                      size_t errlen)
{
    if (a->shards != b->shards) {
        snprintf(err, errlen, "%s has shards = %u and %s shards = %u: psd "
                 "--reshard moves whole shards between nodes, and a row's "
                 "shard depends on shards, which must stay", bi,
                 (unsigned)b->shards, ai, (unsigned)a->shards);
        return -1;
    }
    if (a->ntables != b->ntables) {
        snprintf(err, errlen, "%s has %d tables and %s %d: psd --reshard "
                 "moves the tables as they are (add or drop tables at a "
                 "restart, before or after)", bi, b->ntables, ai,
                 a->ntables);
        return -1;
    }
    for (int j = 0; j < a->ntables; j++) {
        const psd_table_conf *x = &a->tables[j], *y = &b->tables[j];
        const char *what = strcmp(x->name, y->name) ? "name"
                           : x->dense != y->dense ? "kind"
                           : x->dim != y->dim ? "dim"
                           : x->rows != y->rows ? "rows"
                           : x->upd.kind != y->upd.kind ? "updater"
                           : x->consistency != y->consistency ? "consistency"
                                                               : NULL;
        if (what) {
            snprintf(err, errlen, "%s:%d: table '%s' differs from %s:%d "
                     "('%s', %s %s, dim %u, %s) in its %s: psd --reshard "
                     "moves the tables as they are, in the same order",
                     bi, y->line, y->name, ai, x->line, x->name,
                     x->dense ? "dense" : "sparse", cons_name[x->consistency],
                     x->dim, psd_updater_name(x->upd.kind), what);
            return -1;
        }
    }
    return 0;
}

/* out_dir, when it exists, must be a folder holding no psd files:
 * snapshots of two layouts side by side would be mixed up at a start. It
 * is made only when the snapshots are written. */
static int fresh_dir(const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    int found = 0, failed = 0;
    for (struct dirent *e; !found && (e = psd_readdir(d, &failed));) {
        if (strncmp(e->d_name, "psd-node", 8))
            continue;
        if (strstr(e->d_name, ".staged"))
            snprintf(err, errlen, "%s holds %s, left by a psd --reshard or "
                     "--import that was cut off before it finished: remove "
                     "%s/psd-node*.staged* and run it again", dir, e->d_name,
                     dir);
        else
            snprintf(err, errlen, "%s holds %s: give psd --reshard an empty "
                     "or new folder (a node's data_dir is not one: its files "
                     "are the old layout's)", dir, e->d_name);
        found = 1;
    }
    closedir(d);
    if (failed)
        snprintf(err, errlen, "listing %s: %s", dir, strerror(failed));
    return found || failed ? -1 : 0;
}

/* 1 + the largest journal segment number of any node in dir (1 when
 * there is none, or no folder), into *past: a new snapshot naming it,
 * put in that folder, replays no segment left there, by any layout. 0,
 * or -1 with err when the folder could not be listed whole (a segment
 * missed would be replayed). */
static int past_segments(const char *dir, uint64_t *past, char *err,
                         size_t errlen)
{
    uint64_t top = 0;
    *past = 1;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int failed = 0;
    for (struct dirent *e; (e = psd_readdir(d, &failed));) {
        /* psd-nodeN.journal.SEQ, digits only (sscanf would take a sign,
         * and -1 would wrap the count). */
        const char *j = strstr(e->d_name, ".journal.");
        if (strncmp(e->d_name, "psd-node", 8) || !j || !j[9])
            continue;
        uint64_t seq = 0;
        const char *c = j + 9;
        for (; *c >= '0' && *c <= '9' && seq < UINT64_MAX / 20; c++)
            seq = seq * 10 + (uint64_t)(*c - '0');
        if (!*c && seq > top)
            top = seq;
    }
    closedir(d);
    if (failed) {
        snprintf(err, errlen, "listing %s: %s", dir, strerror(failed));
        return -1;
    }
    *past = top + 1;
    return 0;
}

/* Loads node i of old_ini into n as a restart would, reading only: its
 * snapshot, then the journal after it. *gen: the snapshot's generation
 * (0: none); *next: the journal segment after the last. 0, or -1 with the
 * reason in err (n is destroyed by the caller either way). */
static int load_old(const char *ini, int i, psd_node *n, uint64_t *gen,
                    uint64_t *next, char *err, size_t errlen)
{
    psd_config cfg;
    if (psd_config_load(&cfg, ini, err, errlen))
        return -1;
    char dir[4096];
    psd_config_data_dir(&cfg, dir, sizeof dir);
    /* A running node goes on changing its rows after they are read. */
    long pid = psd_durable_holder(dir, i);
    if (pid == -2) {
        /* Not known not to run: read as running (it went ahead). */
        snprintf(err, errlen, "node %d: cannot tell whether a psd runs on "
                 "its data folder %s: psd-node%d.lock there cannot be read "
                 "(%s). Stop every node first, and let this user read the "
                 "lock file (or remove it, when no psd runs there)", i, dir,
                 i, strerror(errno));
        psd_config_destroy(&cfg);
        return -1;
    }
    if (pid >= 0) {
        char who[32] = "";
        if (pid > 0)
            snprintf(who, sizeof who, " (pid %ld)", pid);
        snprintf(err, errlen, "node %d: a psd%s runs on its data folder %s: "
                 "stop every node first (SIGTERM writes its final snapshot)",
                 i, who, dir);
        psd_config_destroy(&cfg);
        return -1;
    }
    if (psd_node_init(n, &cfg, i, 0, err, errlen))
        return -1;
    psd_snap_info si;
    int rc = psd_snapshot_load(n, dir, 0, &si, NULL, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 1 && psd_journal_first(dir, i) == 0) {
        snprintf(err, errlen, "node %d: no snapshot and no journal in %s: "
                 "nothing to move (with several hosts, gather every node's "
                 "psd-nodeN.* files into one folder and name it in a copy "
                 "of the ini's data_dir)", i, dir);
        return -1;
    }
    *gen = rc == 0 ? si.generation : 0;
    psd_replay_ctx ctx = { n, 0, NULL, 0, 0 };
    uint64_t records;
    int of_0_1;
    uint64_t shape = psd_durable_replay_shape(dir, i, &n->cfg,
                                              rc == 0 ? &si : NULL, &of_0_1);
    if (psd_journal_replay(dir, i, shape, n->inits,
                           rc == 0 ? si.journal_seq : 1,
                           (size_t)n->cfg.max_frame + 4096,
                           psd_request_replay, &ctx, next, &records, NULL, 0,
                           err, errlen))
        return -1;
    psd_request_replayed(n, 0);
    psd_journal_say_lost("--reshard", dir, i, rc == 0 ? si.journal_seq : 1,
                         rc == 0 ? si.created_ms : 0);
    fprintf(stderr, "psd --reshard: old node %d: ", i);
    if (rc == 0)
        fprintf(stderr, "snapshot %llu and ", (unsigned long long)*gen);
    fprintf(stderr, "%llu journal records from %s\n",
            (unsigned long long)records, dir);
    return 0;
}

/* An old node's training state: refused while bsp sums wait (pushes
 * acknowledged and not applied: psctl end-job applies them); else the
 * counts its job ended at, as end-job would end it, into *clock and
 * *barrier (the largest so far). */
static int job_state(psd_node *n, uint64_t *clock, uint64_t *barrier,
                     int *in_progress, char *err, size_t errlen)
{
    for (int t = 0; t < n->ntables; t++) {
        uint64_t p = psd_table_pending(n->tables[t]);
        if (p) {
            snprintf(err, errlen, "node %d: table '%s' holds the bsp sums "
                     "of %llu rows pushed in a clock no ps_clock ended: "
                     "start the nodes, run psctl end-job (it applies them), "
                     "stop them and reshard", n->index,
                     psd_table_conf_get(n->tables[t])->name,
                     (unsigned long long)p);
            return -1;
        }
    }
    psd_sync_ended e;
    if (psd_sync_end(&n->sync, 0, 0, &e, err, errlen))
        return -1;
    if (e.clock > *clock)
        *clock = e.clock;
    if (e.barrier > *barrier)
        *barrier = e.barrier;
    *in_progress |= e.in_progress;
    return 0;
}

/* Builds node j of new_ini from the old nodes' shards and writes its
 * snapshot into out_dir. */
static int write_new(const char *new_ini, int j, psd_node *old, int nold,
                     uint64_t clock, uint64_t barrier, uint64_t gen,
                     uint64_t seq, const char *out_dir, char *err,
                     size_t errlen)
{
    psd_config cfg;
    if (psd_config_load(&cfg, new_ini, err, errlen))
        return -1;
    psd_node n;
    int rc = psd_node_init(&n, &cfg, j, 0, err, errlen);
    uint64_t rows = 0;
    for (int t = 0; rc == 0 && t < n.ntables; t++) {
        for (uint32_t s = 0; rc == 0 && s < n.cfg.shards; s++)
            if (psw_node_of_shard(s, n.cfg.nnodes) == j)
                rc = psd_table_move_shard(n.tables[t],
                                          old[psw_node_of_shard(s, nold)]
                                              .tables[t], s, err, errlen);
        rows += psd_table_rows(n.tables[t]);
    }
    /* max_rows is per node: fewer nodes may hold more than it lets a
     * push create; the rows stay, and the operator should know. */
    for (int t = 0; rc == 0 && t < n.ntables; t++) {
        const psd_table_conf *tc = psd_table_conf_get(n.tables[t]);
        if (tc->max_rows && psd_table_rows(n.tables[t]) > tc->max_rows)
            fprintf(stderr, "psd --reshard: new node %d holds %llu rows of "
                    "table '%s', above its max_rows = %llu: pushes that "
                    "create rows there are refused until max_rows is "
                    "raised\n", j,
                    (unsigned long long)psd_table_rows(n.tables[t]),
                    tc->name, (unsigned long long)tc->max_rows);
    }
    psd_sync_ended e;
    psd_snap_info si;
    if (rc == 0)
        rc = psd_sync_end(&n.sync, clock, barrier, &e, err, errlen);
    if (rc == 0)
        rc = psd_snapshot_stage(&n, out_dir, gen, seq, &si, err, errlen);
    if (rc == 0) {
        char path[4200];
        psd_snapshot_path(path, sizeof path, out_dir, j);
        int mib = si.bytes >= 1 << 20;
        /* Staged: in place only once every node's is (it said "written
         * to", and a later node's failure left the folder empty: a
         * reshard trial). */
        fprintf(stderr, "psd --reshard: new node %d: %llu rows of %d "
                "table%s, snapshot %llu staged for %s (%.1f %s)\n", j,
                (unsigned long long)rows, n.ntables,
                n.ntables == 1 ? "" : "s", (unsigned long long)gen, path,
                (double)si.bytes / (mib ? 1 << 20 : 1 << 10),
                mib ? "MiB" : "KiB");
    }
    psd_node_destroy(&n);
    return rc ? -1 : 0;
}

/* Files in dir of nodes that NEW does not have (node >= nnew: a shrink
 * leaves them in place): a later layout with that many nodes again would
 * load them, old rows and counts, beside its fresh snapshots. Said, once
 * per node. */
static void stale_nodes(const char *dir, int nnew, const char *new_ini)
{
    DIR *d = opendir(dir);
    unsigned char *said = calloc(PSD_RESHARD_NODES_MAX, 1);
    if (!d || !said) {
        if (d)
            closedir(d);
        free(said);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        /* What a start loads: psd-nodeK.snap and psd-nodeK.journal.SEQ
         * (not a .skipped or .tmp file, nor the lock), K written as psd
         * writes it. */
        const char *p = e->d_name + 8, *rest;
        if (strncmp(e->d_name, "psd-node", 8) || *p < '0' || *p > '9' ||
            (*p == '0' && p[1] != '.'))
            continue;
        long k = strtol(p, (char **)&rest, 10);
        if (*rest++ != '.' || k < nnew || k >= PSD_RESHARD_NODES_MAX)
            continue;
        if (strcmp(rest, "snap") &&
            (strncmp(rest, "journal.", 8) || !rest[8] ||
             strspn(rest + 8, "0123456789") != strlen(rest + 8)))
            continue;
        if (said[k])
            continue;
        said[k] = 1;
        fprintf(stderr, "psd --reshard: %s holds files of node %ld, which %s "
                "does not have: move %s/psd-node%ld.* aside, or a later "
                "layout of %ld or more nodes would load that node's old "
                "rows\n", dir, k, new_ini, dir, k, k + 1);
    }
    closedir(d);
    free(said);
}

int psd_reshard(const char *old_ini, const char *new_ini,
                const char *out_dir)
{
    char err[8192];
    psd_config a, b;
    if (psd_config_load(&a, old_ini, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (psd_config_load(&b, new_ini, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        psd_config_destroy(&a);
        return 1;
    }
    /* What psd --check would note of the new file (shards fewer than
     * its nodes leave some with nothing, which the layout written here
     * then has), said before the work, as psd would at their start. */
    for (int i = 0; i < b.nnotes; i++)
        fprintf(stderr, "psd --reshard: note: %s\n", b.notes[i]);
    int nold = a.nnodes, nnew = b.nnodes, status = 1, loaded = 0;
    int in_progress = 0;
    uint64_t gen = 0, seq = 1, clock = 0, barrier = 0;
    psd_node *old = NULL;
    if (same_model(&a, old_ini, &b, new_ini, err, sizeof err) ||
        same_nodes(&a, old_ini, &b, new_ini, err, sizeof err) ||
        fresh_dir(out_dir, err, sizeof err))
        goto out;
    old = calloc((size_t)nold, sizeof *old);
    if (!old) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    while (loaded < nold) {
        uint64_t g = 0, next = 1;
        psd_node *n = &old[loaded++];   /* destroyed below, even if it
                                           fails here */
        if (load_old(old_ini, loaded - 1, n, &g, &next, err, sizeof err) ||
            job_state(n, &clock, &barrier, &in_progress, err, sizeof err))
            goto out;
        if (g > gen)
            gen = g;
        if (next > seq)
            seq = next;
    }
    if (in_progress)
        fprintf(stderr, "psd --reshard: the training job was not over (its "
                "workers stopped at different counts): it ends here, at "
                "clock %llu, barrier %llu, as psctl end-job ends one\n",
                (unsigned long long)clock, (unsigned long long)barrier);
    /* Above every old generation and every segment in the two layouts'
     * folders: a new snapshot put in either replays none of the segments
     * left there (the old layout's, or an earlier job's of any node). */
    char dir[4096];
    uint64_t past;
    psd_config_data_dir(&a, dir, sizeof dir);
    if (past_segments(dir, &past, err, sizeof err))
        goto out;
    if (past > seq)
        seq = past;
    psd_config_data_dir(&b, dir, sizeof dir);
    if (past_segments(dir, &past, err, sizeof err))
        goto out;
    if (past > seq)
        seq = past;
    if (psd_durable_make_dir(out_dir, err, sizeof err))
        goto out;
    /* All or none, even if cut off (a kill, a closed pipe): every node
     * staged (psd-nodeK.snap.staged, loaded by no start) before any is
     * renamed into place. */
    int staged = 0;
    while (staged < nnew &&
           write_new(new_ini, staged, old, nold, clock, barrier, gen + 1,
                     seq, out_dir, err, sizeof err) == 0)
        staged++;
    unsigned char *want = calloc(nnew > 0 ? (size_t)nnew : 1, 1);
    for (int k = 0; want && k < nnew; k++)
        want[k] = 1;
    /* commit_all clears up after itself; before it, this does. */
    int tried = staged == nnew && want;
    int rc = tried ? psd_snapshot_commit_all(out_dir, want, nnew, err,
                                             sizeof err)
                   : -1;
    if (!want)
        snprintf(err, sizeof err, "out of memory");
    free(want);
    if (!tried) {
        /* A rerun would find this folder taken: nothing is left. */
        for (int k = 0; k <= staged && k < nnew; k++) {
            char path[4200];
            psd_snapshot_staged_path(path, sizeof path, out_dir, k);
            unlink(path);
        }
    }
    if (rc)
        goto out;
    psd_config_data_dir(&a, dir, sizeof dir);
    stale_nodes(dir, nnew, new_ini);
    char ndir[4096];
    psd_config_data_dir(&b, ndir, sizeof ndir);
    if (strcmp(ndir, dir))
        stale_nodes(ndir, nnew, new_ini);
    char files[64];
    if (nnew == 1)
        snprintf(files, sizeof files, "psd-node0.snap");
    else
        snprintf(files, sizeof files, "each of psd-node0.snap .. "
                 "psd-node%d.snap", nnew - 1);
    fprintf(stderr, "psd --reshard: %d node%s of %s written to %s as %d "
            "node%s of %s; put %s in that node's data_dir (a node started "
            "without its own starts from init) and start the nodes with "
            "%s\n", nold, nold == 1 ? "" : "s", old_ini, out_dir, nnew,
            nnew == 1 ? "" : "s", new_ini, files, new_ini);
    status = 0;
out:
    if (status)
        fprintf(stderr, "psd --reshard: %s\n", err);
    for (int i = 0; i < loaded; i++)
        psd_node_destroy(&old[i]);
    free(old);
    psd_config_destroy(&a);
    psd_config_destroy(&b);
    return status;
}
