/* The journal (durability = log): every push a node applies, and every
 * move of its clock that applies bsp sums, appended to a log file as it
 * happens, so that a restart replays what came after the last snapshot.
 * Records are buffered while a batch of requests is handled and written
 * with one write() before the replies go out; how soon they are fsync'd
 * (fsync = always | everysec | no) is the server's business. A snapshot
 * starts a new segment, and the segments it covers are removed once it is
 * safely on disk. No sockets, no event loop; the format is in
 * docs/durability.md. */
#ifndef PSD_JOURNAL_H
#define PSD_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "../proto/msg.h"

typedef struct psd_journal psd_journal;

enum { PSD_J_PUSH = 1, PSD_J_CLOCK = 2, PSD_J_START = 3, PSD_J_PARAMS = 4,
       PSD_J_WORKER = 5, PSD_J_ACK = 6 };

/* A WORKER record's clients refused for good (sync.h, PSD_REPLACED). */
#define PSD_J_REPLACED 4

/* One record, as replay hands it over (views into a buffer valid during
 * the callback). */
typedef struct psd_jrecord {
    int type;                    /* PSD_J_PUSH, PSD_J_CLOCK, PSD_J_PARAMS,
                                    PSD_J_WORKER, PSD_J_ACK */
    uint64_t client_id, incarnation;   /* worker: its client_id */
    uint64_t mark;               /* ack: the client's ACK value; start:
                                    the inits mark (0: not written) */
    int status;                  /* push: what it was answered */
    psw_msg msg;                 /* push: op, ts, part, table, keys, vals,
                                    first, count */
    uint64_t clock;              /* clock: the node's new clock; worker:
                                    the worker's clock */
    uint64_t barrier;            /* worker: its barrier count */
    int32_t worker;              /* worker: its index */
    int joined;                  /* worker: 1 joined, 0 left */
    int closed;                  /* worker: left by its LEAVE (ps_close);
                                    -1: not known (a record of a psd that
                                    did not write it: a leave of either
                                    kind reads 0 there) */
    int has_replaced;            /* worker: the record carries the next
                                    four (a psd before them wrote 32-byte
                                    bodies) */
    uint64_t replaced[PSD_J_REPLACED];  /* worker: clients refused for good
                                    as it, oldest first (0: none) */
    unsigned ended_mask;         /* worker: bit k: replaced[k] was let go
                                    by psctl end-job */
    uint64_t lost_id;            /* worker: its client, lost and kept past
                                    its grace, which a takeover refuses
                                    for good; 0: none, or not known */
    int unknown;                 /* worker: whom the node had replaced was
                                    not known (sync.h, psd_worker) */
    uint32_t waited;             /* clock: the divisor of aggregate = mean
                                    then (psd_sync_divisor) */
    psd_updater_params params;   /* params: table msg.table's updater
                                    hyper-parameters (kind not set) */
} psd_jrecord;

/* "DIR/psd-nodeN.journal.SEQ" (SEQ in ten digits). */
void psd_journal_path(char *buf, size_t len, const char *dir, int node,
                      uint64_t seq);

/* Creates segment seq of node's journal in dir (a new segment starts
 * with a record naming the node, its layout shape, psd_node.shape, and
 * the inits its rows start from, psd_node.inits) and opens it for
 * appending. NULL with the reason in err. */
psd_journal *psd_journal_open(const char *dir, int node, uint64_t shape,
                              uint32_t inits, uint64_t seq, char *err,
                              size_t errlen);
/* Writes what is buffered, closes. NULL is a no-op. */
void psd_journal_close(psd_journal *j);

/* Buffers a record; returns its number (LSN: 1, 2, 3... for the life of
 * the process), which psd_journal_written then reaches. 0 when memory
 * runs out (the record is lost: the caller must not acknowledge it). */
uint64_t psd_journal_push(psd_journal *j, uint64_t client_id,
                          uint64_t incarnation, const psw_msg *m, int status);
uint64_t psd_journal_clock(psd_journal *j, uint64_t clock, uint32_t waited);

/* Client (client_id, incarnation) ACKed every request below `mark`, so
 * that a replay does not bring back the pushes below it. LSN, or 0 when
 * memory runs out. */
uint64_t psd_journal_ack(psd_journal *j, uint64_t client_id,
                         uint64_t incarnation, uint64_t mark);

/* Worker `worker` joined (joined 1) or stopped being waited for (0;
 * closed: by its own LEAVE), with its clock and barrier count, the
 * clients refused for good as it then (replaced, ended_mask: bit k for
 * replaced[k] let go by end-job), its lost client (lost_id: 0 or
 * client_id) and whether whom the node had replaced is unknown. LSN, or
 * 0 when memory runs out. */
uint64_t psd_journal_worker(psd_journal *j, int32_t worker, int joined,
                            int closed, uint64_t client_id, uint64_t clock,
                            uint64_t barrier,
                            const uint64_t replaced[PSD_J_REPLACED],
                            unsigned ended_mask, uint64_t lost_id,
                            int unknown);

/* From now on, table's updater uses the hyper-parameters p (lr, beta1,
 * beta2, epsilon, l1, l2, beta): a record says so when they differ from
 * what the journal last recorded for table, and every later segment
 * repeats them after its start record, so that replay, from whichever
 * segment, applies each push with the hyper-parameters it was applied
 * with, whatever a reload changed since. LSN as above (the last LSN when
 * nothing changed), 0 when memory runs out. */
uint64_t psd_journal_params(psd_journal *j, uint32_t table,
                            const psd_updater_params *p);

/* Writes the buffered records to the segment with write(). 0, or -1 with
 * the reason in err (the records stay buffered, to try again). */
int psd_journal_write(psd_journal *j, char *err, size_t errlen);

/* The last LSN handed to write(); records up to it survive a crash of the
 * process, and an fsync of psd_journal_fd makes them survive the host. */
uint64_t psd_journal_written(const psd_journal *j);
/* The last LSN buffered. */
uint64_t psd_journal_last(const psd_journal *j);
int psd_journal_fd(const psd_journal *j);
uint64_t psd_journal_seq(const psd_journal *j);
uint64_t psd_journal_bytes(const psd_journal *j);   /* of this segment */

/* Makes psd_journal_write fail with `why` while anything is buffered
 * (NULL: writes go again), so that the node refuses pushes: see
 * daemon/durable.c, for a journal whose snapshot is missing. */
void psd_journal_hold(psd_journal *j, const char *why);

/* Writes what is buffered, then moves to a new segment (seq + 1), which
 * later records go to. The old segment is fsync'd first. 0, or -1 (a
 * write or the new segment failed) or -2 (the fsync failed: what the
 * segment holds may not be on disk) with the reason in err; then nothing
 * changed. 1 when the old segment had been removed from the folder: the
 * records buffered for it went to the new segment instead (unwritten),
 * so a snapshot that is to cover them must rotate once more. */
int psd_journal_rotate(psd_journal *j, char *err, size_t errlen);

/* The newest segment node made in dir, as its head file says (written
 * as each segment is made), when it is missing: made at or above `from`
 * (the snapshot's journal_seq, 1 without one) and after the snapshot was
 * (snap_ms: its creation, wall clock; 0 without one), what it held is
 * lost. 0 when it is there, or the head file is absent, unreadable, or
 * of another history: a head older than the snapshot (one --import or
 * --reshard wrote into a folder an older node had used) says nothing. */
uint64_t psd_journal_lost_head(const char *dir, int node, uint64_t from,
                               uint64_t snap_ms);

/* psd TOOL (--export, --reshard) says on stderr that node's newest
 * segment is missing (psd_journal_lost_head), when it is. */
void psd_journal_say_lost(const char *tool, const char *dir, int node,
                          uint64_t from, uint64_t snap_ms);

/* Removes node's segments numbered below `below` (a snapshot covers them). */
void psd_journal_prune(const char *dir, int node, uint64_t below);

/* The lowest segment number present, or 0 when there is none. */
uint64_t psd_journal_first(const char *dir, int node);

/* The shape to replay node's journal under when no snapshot comes first
 * (after one, the snapshot's): `shape`, or `shape_0_1` (node.h) when the
 * first segment begins under that one, a psd 0.1 journal. Sets *of_0_1
 * to say which. A segment that does not read leaves `shape`, and the
 * replay refuses what it must. */
uint64_t psd_journal_shape(const char *dir, int node, uint64_t shape,
                           uint64_t shape_0_1, int *of_0_1);

/* Whether segment seq of node is in dir. */
int psd_journal_has(const char *dir, int node, uint64_t seq);

/* Replays node's segments from `from` on, in order, calling apply for each
 * push, clock and params record (a segment written by another node or under
 * another layout shape is refused, and so are segments that start after
 * `from` with nothing before them, and a push in a segment whose rows
 * started from other inits than `inits`: 0 checks none, and a segment of
 * a psd before the mark was written is not checked). A torn record at the very end of the
 * last segment (a write cut by a crash: cut short, or zeros from a page
 * boundary to the end of the file) is cut off the file and ends the
 * replay, with a line saying so in cut (else cut is ""); a bad record
 * anywhere else is refused. cut NULL reads only: such a record (also the
 * one a live node is writing) ends the replay and the file is left as it
 * is (psd --export). Returns 0 with *next (the segment to open
 * next) and *records set, or -1 with "FILE: offset N: reason" in err (or
 * apply's own reason). max_body bounds a record. */
int psd_journal_replay(const char *dir, int node, uint64_t shape,
                       uint32_t inits, uint64_t from, size_t max_body,
                       int (*apply)(void *ctx, const psd_jrecord *r,
                                    char *err, size_t errlen),
                       void *ctx, uint64_t *next, uint64_t *records,
                       char *cut, size_t cutlen, char *err, size_t errlen);

/* For psd --check: whether a replay from segment `from` (the snapshot's
 * journal_seq, or 1 without one) would start: no segment missing between
 * the snapshot and the journal, and the start record of each segment
 * names node and layout shape, and no push follows one of other inits
 * (as psd_journal_replay, whose reader it shares, with the same
 * max_body; the records after it are checked when psd replays them). A
 * record is read whole, as the replay reads it. 0, or -1 with "FILE: ..." in err, or 2 with the reason
 * in err when this user may not list dir or read a segment (psd may run
 * as another user). */
int psd_journal_check(const char *dir, int node, uint64_t shape,
                      uint32_t inits, uint64_t from, size_t max_body,
                      char *err, size_t errlen);

#endif
