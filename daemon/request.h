/* What each request does: the command layer between a connection
 * (conn.c, which reads and writes bytes) and the node's tables and
 * training-mode state. It checks and executes decoded messages, packs
 * their replies into the session's output, and keeps the replies that
 * must wait for a clock or a barrier (held replies), answering them when
 * the clock moves. It never touches a socket: a late reply is packed into
 * the session's output and announced through session->answered. */
#ifndef PSD_REQUEST_H
#define PSD_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "../proto/frame.h"
#include "../proto/map.h"
#include "../proto/msg.h"

/* Pushes refused for a non-finite value a connection remembers, so that
 * their parts in later frames are refused too (PROTOCOL.md, check 9). */
#define PSD_BAD_TS 16

/* What the command layer knows of one connection. Owned by the
 * connection, which must call psd_request_closed before it goes away. */
typedef struct psd_session {
    uint64_t client_id;
    uint64_t incarnation;
    struct psd_dclient *dedup;   /* this client's applied pushes, attached
                                    at its first push or ACK */
    int32_t worker;              /* the worker id it joined as, or -1 */
    int joining;                 /* its join is pending (a version 4 HELLO)
                                    until its OPENED or first request: the
                                    worker's pending flag, copied here so
                                    that each request tests one field */
    const char *peer;            /* "host:port", for logs and errors */
    psw_out *out;                /* where replies are packed */
    uint64_t need_lsn;           /* the journal record its replies packed
                                    so far depend on: they may go out once
                                    node->durable_lsn reaches it */
    const psw_reader *rd;        /* the reader of the frame being handled,
                                    whose scan says whether pushed values
                                    are finite; NULL: they are read here */
    uint64_t held_bytes;         /* memory its held requests stand for:
                                    their copied keys and the bound of
                                    each one's reply (request.c keeps it) */
    psw_map held;                /* its held requests by (ts, part), to
                                    find one sent again; zeroed is empty */
    uint64_t bad_ts[PSD_BAD_TS]; /* the last pushes refused for a
                                    non-finite value, a ring: their other
                                    parts are refused too, in later frames */
    uint64_t nbad;               /* pushes refused so far (the ring holds
                                    the last PSD_BAD_TS of them) */
    /* Called after a held reply was packed into out outside of
     * psd_request_frame (the clock moved for another connection, or on
     * a tick): the connection should send it. */
    void (*answered)(struct psd_session *ss);
} psd_session;

/* A HELLO that decoded and speaks our version: a worker joins (0, or
 * PSW_EINVAL with the reason in why: out of range, or the id is taken),
 * and the client's memory of applied pushes counts the connection from
 * now_ms on. On success *reply is the cluster description to send,
 * telling a worker where this node has it; it shares the node's arrays
 * (do not free). */
int psd_request_hello(psd_node *n, psd_session *ss, const psw_hello *h,
                      uint64_t now_ms, psw_cluster *reply, char *why,
                      size_t whylen);

/* Executes the `count` decoded requests of one frame in order, packing
 * their replies into ss->out as frames of at most max_frame bytes (a
 * request that must wait is held and answered later). Refuses the whole
 * frame, executing nothing, when its replies would carry more than
 * max_frame bytes of rows: returns PSW_ETOOBIG with the reason in why
 * (the connection must be closed). Otherwise returns 0. */
int psd_request_frame(psd_node *n, psd_session *ss, const psw_msg *m,
                      int count, uint64_t now_ms, char *why, size_t whylen);

/* The most bytes the replies to the `count` decoded requests of one
 * frame can add to the session's output (each reply bounded by the size
 * rule, in a reply frame of its own at worst), held ones included: the
 * connection counts this against its output budget before it lets
 * psd_request_frame run them. */
uint64_t psd_request_frame_bound(const psd_node *n, const psw_msg *m,
                                 int count);

/* The session's connection is gone: its held replies are dropped and its
 * worker, if any, is waited for worker_grace more seconds. */
void psd_request_closed(psd_node *n, psd_session *ss, uint64_t now_ms);

/* Periodic work (about every 100 ms): workers whose grace ran out stop
 * being waited for, which may answer held replies; a node that waits long
 * says for whom; clients gone for client_ttl are forgotten. */
void psd_request_tick(psd_node *n, uint64_t now_ms);

/* What psd_request_replay needs: the node, and the time clients found in
 * the journal start their time to live from. When the snapshot was taken
 * under other tables, the journal after it was written under those too:
 * its table i is the node's map[i], or -1 for a table let go (its records
 * are skipped, and its pushes counted). */
typedef struct psd_replay_ctx {
    psd_node *node;
    uint64_t now_ms;
    const int32_t *map;          /* NULL: the node's own tables */
    uint32_t nmap;
    uint64_t skipped;            /* pushes to tables let go */
} psd_replay_ctx;

/* Applies one journal record during recovery (a psd_journal_replay
 * callback; ctx is a psd_replay_ctx): a push as it was applied then,
 * without a reply (remembered for exactly-once), or a move of the clock.
 * Returns 0, or -1 with the reason in err when the record does not fit
 * the node's tables. */
int psd_request_replay(void *ctx, const psd_jrecord *r, char *err,
                       size_t errlen);

/* After the replay: a node without bsp tables moves its clock to where
 * its workers' replayed clocks put it. Only bsp clocks have CLOCK records,
 * so its clock was the snapshot's while the WORKER records raised its
 * workers' clocks, and every pull its workers made would be held. */
void psd_request_replayed(psd_node *n, uint64_t now_ms);

/* Frees every held reply (at exit). */
void psd_request_drop_all(psd_node *n);

#endif
