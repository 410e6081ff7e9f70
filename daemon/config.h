/* The daemon's configuration: the ini schema (docs/design.md section 5,
 * every setting annotated in conf/psd.ini) parsed into plain structs. One
 * table of settings in config.c drives parsing, defaults, --check and
 * reload; errors come back as "FILE:LINE: reason". */
#ifndef PSD_CONFIG_H
#define PSD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/addr.h"
#include "../proto/msg.h"

typedef enum {
    PSD_UPD_SUM, PSD_UPD_ASSIGN, PSD_UPD_SGD,
    PSD_UPD_ADAGRAD, PSD_UPD_ADAM, PSD_UPD_FTRL
} psd_updater_kind;

typedef enum {
    PSD_INIT_ZEROS, PSD_INIT_CONSTANT, PSD_INIT_UNIFORM, PSD_INIT_NORMAL
} psd_init_kind;

typedef enum { PSD_CONS_ASYNC, PSD_CONS_BSP, PSD_CONS_SSP } psd_consistency;
typedef enum { PSD_DUR_SNAPSHOT, PSD_DUR_LOG } psd_durability;
typedef enum { PSD_FSYNC_ALWAYS, PSD_FSYNC_EVERYSEC, PSD_FSYNC_NO } psd_fsync;
typedef enum {
    PSD_LOG_DEBUG, PSD_LOG_INFO, PSD_LOG_WARN, PSD_LOG_ERROR
} psd_log_level;

/* Hyper-parameters of a table's updater. Keys in the ini: lr, beta1,
 * beta2, epsilon, l1, l2, beta (FTRL's lr_power is not supported: it is
 * always -1/2); ftrl uses lr as alpha and `beta` as its beta. Defaults: lr 0.01, beta1 0.9,
 * beta2 0.999, epsilon 1e-8, l1 0, l2 0, beta 1. */
typedef struct psd_updater_params {
    psd_updater_kind kind;
    float lr;
    float beta1, beta2;
    float epsilon;
    float l1, l2;
    float beta;          /* ftrl's beta */
} psd_updater_params;

/* `init = zeros | constant V | uniform LO HI | normal MEAN STD`, `seed`.
 * constant: a = V; uniform: a = LO, b = HI; normal: a = MEAN, b = STD. */
typedef struct psd_init_params {
    psd_init_kind kind;
    float a, b;
    uint64_t seed;       /* default 0 */
} psd_init_params;

/* ip as the ini writes it (`uniform -0.1 0.1`, without the seed; each
 * number with the fewest digits that read back as it) into buf (len
 * bytes, NUL-terminated, cut if short); the length it needed. */
int psd_init_format(char *buf, size_t len, const psd_init_params *ip);

/* Table names travel in HELLO_OK, so the wire limit is the limit. */
#define PSD_NAME_MAX PSW_NAME_MAX

typedef struct psd_table_conf {
    char name[PSD_NAME_MAX];     /* from the section name [table.NAME] */
    int line;                    /* line of the section header */
    int dense;                   /* kind = dense | sparse (default sparse) */
    uint32_t dim;                /* floats per key, 1..65536, required */
    uint64_t rows;               /* dense only, required there, >= 1 */
    psd_updater_params upd;      /* updater default: sum */
    psd_init_params init;        /* default: zeros */
    psd_consistency consistency; /* default: async */
    int staleness;               /* ssp only; default 0 */
    int aggregate_mean;          /* aggregate = sum | mean; default sum */
    int allow_nonfinite;         /* nonfinite = reject | allow; default
                                    reject: a push holding NaN or +-Inf is
                                    refused */
    uint64_t max_rows;           /* sparse: rows one node may hold; a push
                                    that would create more is refused;
                                    0 (default): no limit */
    int consistency_line;        /* lines of those keys, 0 where the */
    int staleness_line;          /* section has none: a reload refused */
    int aggregate_line;          /* for one names it */
    int kind_line, dim_line, rows_line, updater_line;   /* likewise */
} psd_table_conf;

#define PSD_NOTE_MAX 1024

/* A node address as the nodes line gives it: a host name, or a numeric
 * IPv4 or IPv6 address (proto/addr.h, the grammar libpsclient reads
 * too). Names are resolved when psd starts (preflight.h). */
typedef psw_addr psd_node_addr;

typedef struct psd_config {
    /* [cluster] */
    psd_node_addr *nodes;        /* nnodes entries, owned: where clients
                                    reach each node */
    int nnodes;                  /* required, >= 1 */
    psd_node_addr *listen;       /* nlisten entries, owned: where each node
                                    binds, when that differs from nodes */
    int nlisten;                 /* 0 (bind the nodes addresses) or nnodes */
    uint32_t shards;             /* default 16, 1..65535 */
    int workers;                 /* default 1 */
    int worker_grace;            /* seconds a worker whose connection was
                                    lost is still waited for; default 30 */
    /* [server] */
    char data_dir[256];          /* default "/var/lib/psd" */
    int snapshot_interval;       /* seconds, default 300 */
    int snapshot_journal_mb;     /* a journal segment this large starts a
                                    snapshot; 0: never; default 2048 */
    psd_durability durability;   /* default snapshot */
    psd_fsync fsync;             /* default everysec */
    psd_node_addr *metrics;      /* nmetrics entries, owned: where each node
                                    serves /metrics over HTTP */
    int nmetrics;                /* 0 (no metrics) or nnodes */
    char auth_token[256];        /* default "": no authentication; else
                                    PSW_AUTH_TOKEN_MIN..MAX bytes */
    char auth_token_file[256];   /* or the token's file, read at start
                                    (preflight.h); default "" */
    uint64_t max_frame;          /* bytes; accepts K/M/G suffixes; default
                                    64M; refused below 1K or above 1G */
    psd_log_level log_level;     /* debug | info | warn | error */
    uint64_t max_output;         /* per-connection queued output before the
                                    connection stops being read; default 16M */
    int max_connections;         /* default 1024 */
    int max_connections_per_addr;/* open connections from one source
                                    address; default 256 */
    uint64_t max_client_memory;  /* bytes of every connection's buffers
                                    together; beyond it the largest user is
                                    disconnected; default 1G */
    int frame_timeout;           /* seconds a frame may take to arrive
                                    whole; default 30 */
    int idle_timeout;            /* seconds without a request after which a
                                    connection may be closed to make room
                                    for a new one; default 60 */
    int hello_timeout;           /* seconds a new connection has to send
                                    HELLO before it is closed; default 10 */
    int heartbeat_ms;            /* a PING goes out on a connection idle
                                    this long, both ways; default 1000 */
    int peer_timeout_ms;         /* a peer silent this long is dead and its
                                    connection closed; default 4000 */
    int client_ttl;              /* seconds a client with no connection is
                                    remembered for exactly-once retries;
                                    default 600 */
    uint64_t max_unacked_pushes; /* pushes of one client a node remembers
                                    (not yet below its ACK) before it
                                    refuses the client's next; default 1M */
    uint64_t max_remembered_pushes; /* the same over all clients; default
                                    2M */
    /* [table.NAME] sections in file order; owned */
    psd_table_conf *tables;
    int ntables;
    /* Things worth saying that do not stop psd, as "PATH:LINE: text"
     * (e.g. a setting that has no effect where it is); owned */
    char (*notes)[PSD_NOTE_MAX];
    int nnotes;
    /* Lines of the keys whose meaning is checked after parsing (address
     * resolution, the token file), for "PATH:LINE: reason"; 0: absent */
    int nodes_line, listen_line, auth_token_line, auth_token_file_line;
    int metrics_line;
    int data_dir_line;
    /* ... and of those a reload may not change, for its refusal */
    int shards_line, workers_line, durability_line, fsync_line;
    int max_frame_line, heartbeat_ms_line, peer_timeout_ms_line;
    int max_client_memory_line;  /* where it changes the frame size */
} psd_config;

/* The largest frame the node asks clients to keep to (HELLO_OK's
 * max_frame) and writes its replies in: max_frame, or less where
 * max_client_memory could not hold one such frame while it runs: its
 * receive buffer and a read past it, and a reply of up to its size,
 * counted at up to twice its bytes. Above that, every try of a large
 * request closed its connection at max_client_memory and the client
 * retried in vain. Frames up to max_frame are still accepted. */
uint64_t psd_config_frame(const psd_config *c);

/* The replies owed to one connection past which psd stops reading it:
 * max_output, or less on the same grounds, (max_client_memory - 128K)
 * / 3, so that one connection pipelining large pulls is paused before
 * its replies take it past max_client_memory (it was closed, and retried
 * its requests, under a budget of 1M and the default max_output, 16M). */
uint64_t psd_config_output(const psd_config *c);

/* " (quotes are kept ...)" when value is in quotes, which the ini keeps
 * as part of it (a quoted data_dir was "relative" with no word of
 * them), else "": for the message that refuses or notes it. */
const char *psd_config_quote_note(const char *value);

/* Parses the ini file at `path` into `c` (which the call initialises).
 * Returns 0, or -1 with "PATH:LINE: reason" (or "PATH: reason" when no
 * line applies) written to err. On failure `c` holds nothing to free. */
int psd_config_load(psd_config *c, const char *path, char *err, size_t errlen);

/* The ini file's word for a value (e.g. "adagrad", "bsp", "everysec"). */
const char *psd_updater_name(psd_updater_kind k);
const char *psd_consistency_name(psd_consistency c);
const char *psd_fsync_name(psd_fsync f);

/* The folder psd keeps its files in: data_dir, or, when data_dir is left
 * at its default and systemd set $STATE_DIRECTORY (StateDirectory=), the
 * first folder named there. */
void psd_config_data_dir(const psd_config *c, char *buf, size_t len);

/* Frees what psd_config_load allocated; safe on a zeroed struct. */
void psd_config_destroy(psd_config *c);

/* The i-th setting of the schema as "section key" (section: cluster,
 * server or table), or NULL past the last: for tests and docs that must
 * cover every setting. */
const char *psd_config_setting(int i, const char **sect);

#endif
