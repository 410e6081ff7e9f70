/* What psd checks before it starts, beyond the file's syntax (config.h):
 * the token file (present, private, a sound token), the data folder (no
 * part of its path is a file), the addresses (host names resolve; the
 * node's bind address is known) and protected mode (no token: every
 * address bound must be loopback). psd runs it at start and
 * `psd --check` prints what it finds, so --check passes exactly the
 * files psd would start with. */
#ifndef PSD_PREFLIGHT_H
#define PSD_PREFLIGHT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"

typedef struct psd_preflight {
    char token[256];             /* the token in force ("" for none):
                                    auth_token, or auth_token_file's */
    size_t token_len;
    struct sockaddr_storage bind; /* node's bind address, resolved */
    int bind_set;                /* bind holds it (psd_preflight_run with a
                                    node, whose address resolved) */
    char (*problems)[512];       /* "PATH:LINE: reason", owned */
    int nproblems;
    char (*notes)[512];          /* worth saying, not fatal; owned */
    int nnotes;
    int data_dir_bad;            /* a part of data_dir's path is a file:
                                    no snapshot can be there to check */
    int self;                    /* checked for this very process, about to
                                    start (psd_preflight_start) */
} psd_preflight;

/* Checks cfg (loaded from path) for node `node`, or for every node when
 * node is -1 (psd --check without -n). Fills *pf (which the call
 * initialises) and returns the number of problems: 0 means psd may start.
 * Resolving host names may block. Free with psd_preflight_destroy. */
int psd_preflight_run(psd_preflight *pf, const psd_config *cfg,
                      const char *path, int node);

/* The notes of a running node's settings (a reload's): the same but for
 * what a reload cannot change and that resolves names, which would
 * block the event loop: the nodes' addresses, and this host's memory and
 * shards for the tables. */
int psd_preflight_settings(psd_preflight *pf, const psd_config *cfg,
                           const char *path, int node);

/* The same for the psd process about to serve node `node` (0..nnodes-1):
 * what this user may not do is then certain, not a guess about a user
 * psd may run as. A data folder it may not write is a problem: psd would
 * take pushes it could never save (with durability = snapshot it started
 * and lost them all at its stop). */
int psd_preflight_start(psd_preflight *pf, const psd_config *cfg,
                        const char *path, int node);

/* Files psd keeps for its own beside its connections: the listener,
 * the journal and its next segment, a snapshot, a reload's ini, libuv's,
 * and the refusals under way (conn.c). /metrics' take PSD_METRICS_FDS
 * more. */
#define PSD_FD_RESERVE 64

/* The files psd keeps for its own under c: PSD_FD_RESERVE, and
 * PSD_METRICS_FDS with a metrics_listen. */
int psd_fd_reserve(const psd_config *c);

/* The connections the open files limit (RLIMIT_NOFILE) leaves room for,
 * after `reserve` of psd's own: with raise, psd's start and reloads, the
 * soft limit is first lifted toward want + reserve (at most to the hard
 * limit) and the room is under it; without, the room under the hard
 * limit (what a start could lift it to). INT_MAX without a limit, 0 when
 * the limit is at most the reserve. */
int psd_fd_room(int want, int reserve, int raise);

/* A TCP socket bound to sa as psd binds its listeners: SO_REUSEADDR, so
 * that a restart binds over the last run's TIME_WAIT, and for IPv6
 * IPV6_V6ONLY off, so that [::]:P takes IPv4 clients too whatever
 * net.ipv6.bindv6only says. The socket (close-on-exec), or -errno. */
int psd_bind_tcp(const struct sockaddr *sa);
/* Node i's bind address (listen's, else nodes') into *sa: 1 when it is
 * a loopback address (a node plain --check judges as one of this host),
 * else 0. */
int psd_preflight_loopback_bind(const psd_config *c, int i,
                                struct sockaddr_storage *sa);
/* sa's numeric address, without its port, into out. */
void psd_sa_text(const struct sockaddr_storage *sa, char *out, size_t cap);

/* What a bind's errno (positive) most likely means for a node's address,
 * " (...)" to follow the error, or "". */
const char *psd_bind_hint(int err);

/* Whether a snapshot file of `bytes` can load in the memory psd may use
 * here (MemTotal, or its cgroup's limit and its ancestors', the
 * smallest): every row it holds is in memory once it is loaded, so past
 * that limit the kernel kills psd while it loads, and a unit restarts it
 * into the same end. 1 when it fits or the limit is not known; else 0,
 * with the reason in why ("it holds ...", to follow a subject). */
int psd_snapshot_fits(uint64_t bytes, char *why, size_t whylen);

/* Wipes the token and frees the lists. */
void psd_preflight_destroy(psd_preflight *pf);

#endif
