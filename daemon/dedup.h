/* Exactly-once pushes: what each client's pushes did on this node, so a
 * push retransmitted after a timeout or a reconnection is answered
 * without being applied again. A client is (client_id, incarnation) from
 * its HELLO; a push is (ts, part). Each client tells the node, with ACK,
 * that every request below some ts is complete and will never be sent
 * again; what lies below that mark is forgotten, and a push below it is
 * known to be a stale duplicate. So a client's state is proportional to
 * what it has in flight, however many requests it ever made. A client
 * with no connection left is forgotten after a time to live. */
#ifndef PSD_DEDUP_H
#define PSD_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "stream.h"

typedef struct psd_dedup psd_dedup;      /* every client of this node */
typedef struct psd_dclient psd_dclient;  /* one client */

psd_dedup *psd_dedup_new(void);
void psd_dedup_free(psd_dedup *d);

/* The state of a client, created when absent (NULL only when memory runs
 * out). Each connection that uses it attaches once and detaches when it
 * closes: a client with no connection attached starts to age, or, when it
 * never sent this node a push (psd_dedup_pushed, psd_dedup_record) and was
 * not loaded from a snapshot, is forgotten at once; c must not be used
 * after its last detach. */
psd_dclient *psd_dedup_attach(psd_dedup *d, uint64_t client_id,
                              uint64_t incarnation, uint64_t now_ms);
void psd_dedup_detach(psd_dedup *d, psd_dclient *c, uint64_t now_ms);

/* Whether push (ts, part) was applied already: 1 with its status in
 * *status (PSW_OK for a push below the client's mark), 0 when it is new,
 * 2 when that is not known: the node dropped what it remembered of the
 * client's pushes below psd_dedup_forgot(c) before the client had
 * acknowledged them (client_ttl, or room at max_remembered_pushes). Such
 * a client is kept as a tombstone (the last 16384) that says so. */
int psd_dedup_seen(const psd_dclient *c, uint64_t ts, uint32_t part,
                   int *status);
uint64_t psd_dedup_forgot(const psd_dclient *c);

/* Client c sent a valid push of ts (applied, or refused at a limit): it
 * is remembered past its last connection, with its mark, for client_ttl,
 * and its ACKs may now mark that push complete. */
void psd_dedup_pushed(psd_dclient *c, uint64_t ts);

/* Records that push (ts, part) was applied, with its status (a push that
 * failed part-way still changed rows, so it counts). 0, or -1 when memory
 * runs out (the push is then not protected against a retry until its
 * client is forgotten: its tombstone then covers it). */
int psd_dedup_record(psd_dclient *c, uint64_t ts, uint32_t part, int status);

/* ACK: every request of the client below ts `upto` is complete. The
 * mark moves no higher than just above the highest push of the client
 * this node has seen (psd_dedup_pushed, psd_dedup_record): a later push
 * is never taken for a stale copy, whatever value an ACK carried.
 * Returns the mark to journal, or 0: a mark is journaled once it has
 * moved at least `every` requests past the last one journaled (a replay
 * then brings back at most that many requests' pushes beyond what the
 * client had in flight, where without it every push since the
 * snapshot). */
uint64_t psd_dedup_ack(psd_dclient *c, uint64_t upto, uint64_t every);

/* A mark this node took before (from its snapshot or journal), set as it
 * is. */
void psd_dedup_mark(psd_dclient *c, uint64_t upto);

/* Whether the node may take a new push (ts) of client c, against two
 * limits on what it remembers: per_client pushes of one client not yet
 * below its mark, total of all clients. 0: yes. -1: no, c is at
 * per_client. 1: no, the node is at total; forgetting a client that has
 * no connection (psd_dedup_forget_idlest) makes room. why says which.
 * A push with the ts of c's latest record is taken past the limits, so
 * that they refuse whole requests, not the rest of one: for up to
 * PSW_MAX_PARTS records of that ts in a row, and while d holds fewer
 * than total + PSW_MAX_PARTS (a room all clients share, so that one
 * client's endless parts of one ts do not grow the memory without
 * bound; past it the rest of a request is refused). A push of a ts
 * refused before (psd_dedup_refused) is refused (-1) whatever the room. */
int psd_dedup_room(const psd_dedup *d, const psd_dclient *c, uint64_t ts,
                   size_t per_client, size_t total, char *why, size_t whylen);

/* Notes that a push of ts was refused at the limits (psd_dedup_room
 * said no): the parts of it that follow, and copies, are refused too, so
 * that a request is refused whole on this node, until a push of another
 * ts (psd_dedup_pushed, called for every push) ends that. */
void psd_dedup_refused(psd_dclient *c, uint64_t ts);

/* Forgets the client that has had no connection for longest among those
 * that hold pushes, as client_ttl would later (a tombstone is kept, see
 * psd_dedup_seen): 1 with what it was, or 0 when every such client is
 * connected. */
int psd_dedup_forget_idlest(psd_dedup *d, uint64_t *client_id,
                            uint64_t *incarnation, size_t *pushes,
                            uint64_t *idle_since);

/* Forgets clients that have had no connection for ttl_ms. Returns how
 * many; *unacked_clients and *unacked get how many of them held pushes
 * they never acknowledged, and how many such pushes (those clients are
 * kept as tombstones: a copy of one is refused, see psd_dedup_seen). */
size_t psd_dedup_expire(psd_dedup *d, uint64_t now_ms, uint64_t ttl_ms,
                        size_t *unacked_clients, size_t *unacked);

/* Writes every client's mark and remembered pushes (live ones only), so
 * that a restarted node still refuses to apply a push twice. 0 or -1. */
int psd_dedup_save(const psd_dedup *d, psd_sink *out);

/* Reads what psd_dedup_save wrote into d (empty): the clients come back
 * without connections, so they expire client_ttl after now_ms unless
 * they reconnect. 0, or -1 with the reason in err. */
int psd_dedup_load(psd_dedup *d, psd_source *in, uint64_t now_ms, char *err,
                   size_t errlen);

/* For stats and tests: clients known (not the tombstones), pushes
 * remembered (those above their client's mark, or a few more, see
 * dedup.c), bytes used (the tombstones' too). */
void psd_dedup_size(const psd_dedup *d, size_t *clients, size_t *entries,
                    size_t *bytes);

#endif
