/* What one psd node serves: its configuration, the tables (only the shards
 * this node owns), the cluster description HELLO_OK hands to clients, the
 * training-mode state and the counters. Plain data with its set-up, reload
 * and tear-down; request.c gives it its meaning. No sockets here. */
#ifndef PSD_NODE_H
#define PSD_NODE_H

#include <stdint.h>

#include "config.h"
#include "dedup.h"
#include "journal.h"
#include "sync.h"
#include "table.h"
#include "../proto/hist.h"
#include "../proto/msg.h"

/* Error statuses a reply may carry: -1 .. -(PSD_STATUSES - 1). */
#define PSD_STATUSES 16

typedef struct psd_stats {
    uint64_t conns_accepted;
    uint64_t conns_refused;      /* over max_connections(_per_addr) */
    uint64_t conns_evicted;      /* idle, closed to make room */
    uint64_t conns_over_memory;  /* closed at max_client_memory */
    uint64_t frames_timed_out;   /* closed: a frame stopped half-way */
    uint64_t proto_errors;       /* connections closed for a bad frame */
    uint64_t peers_lost;         /* connections closed: peer silent */
    uint64_t frames;
    uint64_t bytes_in;           /* read from client connections */
    uint64_t bytes_out;          /* written to them: the kernel took it */
    uint64_t requests;
    uint64_t request_errors;     /* requests answered with an error */
    uint64_t errors_by[PSD_STATUSES]; /* of them, by status: [-status]
                                    (PSW_EINVAL = -1 .. PSW_EFULL = -15) */
    uint64_t duplicates;         /* retransmitted pushes not applied again */
    uint64_t unacked_refusals;   /* pushes refused at max_unacked_pushes or
                                    max_remembered_pushes */
    uint64_t clients_forgotten;  /* before client_ttl, to make room */
    uint64_t clients_expired;    /* at client_ttl */
    uint64_t pushes, pulls;      /* requests that carried rows in or out */
    uint64_t keys_pushed, keys_pulled;
    uint64_t journal_errors;     /* failed journal writes */
    uint64_t auth_failures;      /* connections refused with EAUTH */
    uint64_t reloads;            /* SIGHUPs whose file was applied */
    uint64_t reloads_refused;    /* ... whose file was refused */
} psd_stats;

/* Per table, on this node. */
typedef struct psd_table_stats {
    uint64_t pushes, pulls;      /* requests that carried its rows in, out */
    uint64_t keys_pushed, keys_pulled;
    uint64_t errors;             /* its requests answered with an error */
} psd_table_stats;

/* Kinds of request whose service time is kept: the time psd spends
 * executing one (checks, updater, copying rows into the reply), from the
 * moment its frame has been read whole. */
enum { PSD_LAT_PUSH, PSD_LAT_PULL, PSD_LAT_PUSHPULL, PSD_LAT_CONTROL,
       PSD_LAT_KINDS };

struct psd_held;                 /* request.c: a reply waiting for a clock */

typedef struct psd_node {
    psd_config cfg;              /* owned; a reload updates live fields */
    int index;                   /* which node of cfg.nodes this is */
    psd_table **tables;          /* cfg.ntables entries, owned */
    int ntables;
    psw_cluster cluster;         /* what HELLO_OK tells clients; owned */
    uint64_t shape;              /* hash of node count, shards and tables:
                                    what a snapshot or journal must match */
    uint32_t inits;              /* psd_config_inits: what a journal's
                                    records were made on top of */
    psd_sync sync;               /* workers, clocks, barriers */
    uint64_t tidy_requests;      /* stats.requests at the last tick */
    unsigned tidy_idle;          /* ticks since one saw a request */
    int writer_forked;           /* a forked snapshot writer runs (set at
                                    the fork and at its end, durable.c,
                                    and before each mode tick) */
    uint64_t changes;            /* counts what may change what a snapshot
                                    holds (pushes, clocks, barriers, leaves,
                                    joins, lost connections, expired
                                    graces, reloads): a periodic snapshot
                                    is skipped while it stands still */
    psd_dedup *dedup;            /* applied pushes per client */
    struct psd_held *held;       /* held replies, oldest first (request.c) */
    struct psd_held **held_tail; /* where the next one is linked (the last
                                    one's next, or &held) */
    psd_stats stats;
    psd_table_stats *tstats;     /* ntables entries, owned */
    uint64_t latency[PSD_LAT_KINDS][PSW_HIST_N];   /* ns histograms */
    uint64_t latency_sum[PSD_LAT_KINDS];           /* ns, exact */
    /* An operator's command (ADMIN op, psctl): the server answers it, with
     * a status (PSW_OK or a PSW_E*) and a malloc'd text (NUL-terminated:
     * an error's is sent as a string) the caller frees. NULL: ADMIN is
     * refused. */
    int (*admin)(void *arg, const char *cmd, size_t len, char **text,
                 size_t *textlen);
    void *admin_arg;
    /* The journal (durability = log), else NULL. Replies that depend on a
     * record wait until durable_lsn reaches it: the records written, or
     * fsync'd with fsync = always. */
    psd_journal *journal;
    uint64_t durable_lsn;
    uint64_t clock_lsn;          /* the last record of a clock move */
    uint64_t barrier_lsn;        /* the last record of a barrier move */
    void (*written)(void *arg);  /* called after records were written */
    void *written_arg;
    char journal_error[1024];    /* the last write failure, "" when fine */
    /* Replies reference dense rows in place (PROTOCOL.md §9): per table,
     * the pieces of replies not yet written that do (request.c counts
     * them up, the writer down), and the writer's hook that turns the
     * ones overlapping the bytes [lo, hi) of a table's rows into copies
     * before a push changes those rows. Without a hook, replies copy
     * rows. */
    uint64_t *row_refs;          /* ntables entries */
    void (*detach)(void *arg, int table, uintptr_t lo, uintptr_t hi);
    void *detach_arg;
} psd_node;

/* What decides where each row lives, how big it is and what a logged push
 * means: node count, shards, and each table's name, kind, dim, rows,
 * updater kind and consistency mode, hashed (not addresses: a node may
 * move and keep its data). Snapshots and journal segments carry it. */
uint64_t psd_config_shape(const psd_config *c);

/* Each table's name, init and seed, hashed to 24 bits, never 0: the
 * values a row starts from, which a journal's records were made on top
 * of (journal.h, psd_journal_open). Only what changes those values
 * counts (zeros is constant 0; a seed only for uniform and normal). Not
 * part of the shape: a restart with another init keeps the rows a
 * snapshot holds. */
uint32_t psd_config_inits(const psd_config *c);

/* Whether a and b name the same nodes: their count, and each one's host
 * (as written) and port, in order. */
int psd_config_same_nodes(const psd_config *a, const psd_config *b);

/* The shape in steps, for a snapshot that lists its tables (snapshot.c
 * checks one taken under other tables): begin, then each table in order.
 * psd_config_shape(c) is these over c's tables. */
uint64_t psd_shape_begin(int nnodes, uint32_t shards);
uint64_t psd_shape_table(uint64_t h, const char *name, int dense,
                         uint32_t dim, uint64_t rows, int updater,
                         int consistency);

/* The shape as psd 0.1 hashed it, whose snapshots (format 1) and journal
 * segments carry it: no updater nor consistency mode (the next commit,
 * 5b1274d, added both). Loaded with each table's mode from the config;
 * see docs/durability.md section 5. */
uint64_t psd_shape_table_0_1(uint64_t h, const char *name, int dense,
                             uint32_t dim, uint64_t rows);
uint64_t psd_config_shape_0_1(const psd_config *c);

/* What a restart would make of config b where a node runs a (a layout a
 * reload refused): the snapshot's tables are found by name
 * (snapshot.h), so a restart takes tables added or moved
 * (PSD_RESTART_TAKES), and tables removed only with --drop-table
 * (PSD_RESTART_DROPS, their names in gone); a new node count or shards,
 * or a kept table's kind, dim, rows, updater or consistency, it refuses
 * too (PSD_RESTART_REFUSES). */
enum { PSD_RESTART_TAKES, PSD_RESTART_DROPS, PSD_RESTART_REFUSES };
int psd_config_restart(const psd_config *a, const psd_config *b, char *gone,
                       size_t len);

/* Takes ownership of *cfg (left zeroed) and builds node `index`'s tables.
 * Returns 0, or -1 with a reason in err; psd_node_destroy either way. */
int psd_node_init(psd_node *n, psd_config *cfg, int index, uint64_t now_ms,
                  char *err, size_t errlen);
void psd_node_destroy(psd_node *n);

/* Applies what may change while clients are connected from nc (a freshly
 * loaded file, still owned by the caller): updater hyper-parameters, a
 * table's max_rows and nonfinite, log level, max_output,
 * max_connections(_per_addr), max_client_memory, hello_timeout,
 * frame_timeout, idle_timeout, client_ttl, max_unacked_pushes,
 * max_remembered_pushes, snapshot_interval, worker_grace. Returns 0, or
 * -1 with why the file at `path` cannot be applied live (layout, updater
 * kinds, initializers, modes or aggregate, workers, max_frame or the
 * token changed) as "PATH:LINE: reason" (or "PATH: reason" where the
 * file keeps no line) in why, in which case nothing changed. */
int psd_node_reload(psd_node *n, const psd_config *nc, const char *path,
                    char *why, size_t len);

/* Gives every table the updater hyper-parameters of n->cfg (a replay may
 * have left older ones), counting a change in n->changes only where
 * they differ, and, with a journal, records them there (only what
 * changed). 0, or -1 when the journal ran out of memory for the
 * record: journal_error is then set, and pushes are refused, since a
 * replay would apply them with the wrong hyper-parameters. */
int psd_node_apply_params(psd_node *n);

/* Journals the workers that joined or stopped being waited for since the
 * last call (psd_sync_dirty), so that a replay after a crash knows those
 * that joined after the snapshot (waited for then only until their grace
 * runs out) and those that left (not waited for). 0, or -1 as above. */
int psd_node_journal_workers(psd_node *n);

/* Writes the journal records buffered while requests were handled (one
 * write() for the batch) and tells the written hook; a failure is logged
 * once and kept in journal_error until a write succeeds. Cheap when
 * nothing is buffered. Returns 0 or -1. */
int psd_node_commit(psd_node *n);

/* Rows and bytes of every table on this node. */
void psd_node_size(const psd_node *n, uint64_t *rows, uint64_t *bytes);

/* Warns of each table holding more rows on this node than its max_rows
 * (a restart or a reload lowered it, or a reshard onto fewer nodes): the
 * rows stay, and pushes that would create rows are refused. */
void psd_node_warn_full(const psd_node *n);

#endif
