/* Snapshots: one file per node holding everything the node serves from
 * memory (rows with their optimizer state, bsp sums of the current clock,
 * workers' clocks, the memory of applied pushes), so that a restart loses
 * nothing that was in it. Written to a temporary file, fsync'd, renamed
 * over the last one and the folder fsync'd: a crash at any moment leaves
 * the old snapshot or the new one, whole. Read back with every byte
 * checked: a snapshot that is truncated, corrupted, or taken under
 * another layout is refused, never half-loaded. The file format is in
 * docs/durability.md. No sockets, no event loop. */
#ifndef PSD_SNAPSHOT_H
#define PSD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"

/* The format psd writes. 2 added each worker's `summed` to the SYNC
 * section, 3 each worker's `closed`, 4 the clients refused for good as
 * each worker; formats 1 to 3 are still read. */
#define PSD_SNAPSHOT_VERSION 4
/* The first release that wrote it: older ones refuse it (psd --check and
 * the start say so of a snapshot of an older format). */
#define PSD_SNAPSHOT_SINCE "0.4.0"

typedef struct psd_snap_info {
    uint64_t generation;         /* counts this node's snapshots, from 1 */
    uint64_t journal_seq;        /* first journal segment not in it */
    uint64_t created_ms;         /* wall clock, ms since the epoch */
    uint64_t bytes;              /* file size */
    uint64_t shape;              /* the layout shape it was taken under */
    uint32_t ntables;            /* the tables it holds */
    uint32_t version;            /* its format, 1..PSD_SNAPSHOT_VERSION */
    int of_0_1;                  /* written by psd 0.1, under its shape of
                                    no updater nor consistency (node.h) */
} psd_snap_info;

/* A snapshot's tables against the config's. psd finds each of the
 * snapshot's tables in the config by name, so tables may be added and
 * the ini's sections reordered across a restart; a table the config no
 * longer has is let go only when named in drop (psd --drop-table). See
 * docs/durability.md, "Adding, removing and reordering tables". */
typedef struct psd_snap_tables {
    const char *const *drop;     /* in: names, not owned */
    int ndrop;                   /* at most 64 */
    uint64_t drop_used;          /* out: bit i set when drop[i] named a
                                    table of the snapshot */
    /* out: the snapshot's table i is the config's map[i], or -1 when it
     * was dropped; nmap entries. NULL when the tables are the config's,
     * in its order. malloc'd: the caller frees it. */
    int32_t *map;
    uint32_t nmap;
    int added, dropped;          /* out: tables new in the config, let go */
    char added_names[256];       /* out: 'a', 'b' (cut when long) */
    char dropped_names[256];
} psd_snap_tables;

/* "DIR/psd-nodeN.snap": node N's snapshot (several nodes may share a
 * folder). */
void psd_snapshot_path(char *buf, size_t len, const char *dir, int node);

/* fsync of folder dir, so that the renames in it survive a power cut.
 * 0, or -1 with errno set. */
int psd_fsync_dir(const char *dir);

/* Writes node n's state as snapshot `generation`, covering the journal up
 * to (not including) segment journal_seq. Returns 0, or -1 with the
 * reason in err; the previous snapshot is then untouched. On 0, err is
 * empty, or says the folder could not be fsync'd after the rename: the
 * new snapshot is in place, but only a power loss away from the previous
 * one, so the journal segments it covers must be kept. For tests, the
 * environment variable PSD_TEST_SNAPSHOT_PAUSE=STAGE:MS makes the writer
 * sleep MS ms at STAGE (written, fsynced or renamed), so a test can kill
 * it there. */
int psd_snapshot_write(const psd_node *n, const char *dir,
                       uint64_t generation, uint64_t journal_seq,
                       psd_snap_info *info, char *err, size_t errlen);

/* The same in the folder open as dirfd (whose path is dir, for
 * messages): the files are made, renamed and synced there even when
 * another folder is put at dir's path meanwhile (psd's forked writer). */
int psd_snapshot_write_at(const psd_node *n, int dirfd, const char *dir,
                          uint64_t generation, uint64_t journal_seq,
                          psd_snap_info *info, char *err, size_t errlen);

/* For tools that write several nodes all or none (psd --reshard, psd
 * --import): psd_snapshot_stage writes node n's snapshot as
 * dir/psd-nodeN.snap.staged (fsynced, folder too; -1 with err, and no
 * file, otherwise), which no start loads; once every node's is staged,
 * psd_snapshot_commit_all renames them into place. A tool cut off
 * while it stages leaves .staged files only; one cut off while it
 * renames, a .staged file beside which a start or --check of that node
 * refuses (psd_snapshot_load, psd_snapshot_check). */
void psd_snapshot_staged_path(char *buf, size_t len, const char *dir,
                              int node);
int psd_snapshot_stage(const psd_node *n, const char *dir,
                       uint64_t generation, uint64_t journal_seq,
                       psd_snap_info *info, char *err, size_t errlen);
/* Renames the staged snapshot of every node k with want[k] into place in
 * dir, with SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGPIPE held off, then
 * fsyncs dir. 0; -1 with err when a rename failed (then none is in
 * place, and the staged files are gone); -2 with err when only the
 * folder's fsync failed (all are in place). */
int psd_snapshot_commit_all(const char *dir, const unsigned char *want,
                            int nnodes, char *err, size_t errlen);

/* Loads node n's snapshot from dir into n, whose tables must be fresh
 * (psd_node_init). Returns 0 and fills *info; 1 when there is no
 * snapshot; -1 with "FILE: offset N: reason" in err when the file cannot
 * be trusted (then n must not be served). now_ms starts the grace of the
 * workers that were connected and the time to live of the clients.
 * tables NULL: the snapshot's tables must be the config's, in its order;
 * otherwise they are matched by name as psd_snap_tables says, and
 * tables->map is filled when they differ (a table the config adds keeps
 * the values psd_node_init gave it). */
int psd_snapshot_load(psd_node *n, const char *dir, uint64_t now_ms,
                      psd_snap_info *info, psd_snap_tables *tables,
                      char *err, size_t errlen);

/* For psd --check: whether node's snapshot in dir, if any, would load
 * under cfg. Its header is checked (node, node count, shards); when its
 * shape is cfg's, the rest is left to the start. Otherwise its tables
 * differ, and the whole file is read as psd_snapshot_load would, but
 * without building any table (psd_table_skip: their keys are not
 * checked), filling *tables the same way (NULL: refused). 0 when
 * it fits (*info: its journal_seq, the first journal segment it does not
 * cover, its shape, table count and size), 1 when there is none, -1 with
 * "FILE: offset N: reason" in err, 2 with the reason in err when this
 * user may not read it (psd may run as another user). */
int psd_snapshot_check(const char *dir, int node, const psd_config *cfg,
                       psd_snap_tables *tables, psd_snap_info *info,
                       char *err, size_t errlen);

#endif
