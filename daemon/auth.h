/* The daemon's side of token authentication: the token, the throttle that
 * slows down failed attempts per source address (and per known client at
 * it), and the log of failures collapsed when they repeat. conn.c runs the handshake's messages;
 * proto/auth.h computes the proofs. No sockets here. */
#ifndef PSD_AUTH_H
#define PSD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/auth.h"

typedef struct psd_auth psd_auth;

/* Takes a copy of the token (len bytes; len 0: authentication off, and
 * every call below is cheap). NULL when memory runs out. */
psd_auth *psd_auth_new(const char *token, size_t len);
void psd_auth_free(psd_auth *a);

/* Whether clients must authenticate. */
int psd_auth_on(const psd_auth *a);

/* Whether token (len bytes) is the token a holds: 1 or 0. */
int psd_auth_same(const psd_auth *a, const char *token, size_t len);

/* Checks the client's proof over t: 0 when right, -1 otherwise. */
int psd_auth_check(const psd_auth *a, const psw_transcript *t,
                   const void *proof, size_t n);

/* The server's proof over t. */
void psd_auth_prove(const psd_auth *a, const psw_transcript *t,
                    uint8_t out[PSW_PROOF_LEN]);

/* The throttle. Attempts take turns in lanes: a client (its HELLO's
 * client id) that authenticated from an address before has a lane of its
 * own there; every other attempt from the address shares the address's
 * lane. A lane with recent failures gets one attempt checked per delay,
 * the delay doubling with each failure from 100 ms up to 2 s; 60 s
 * without a failure clears it, and so does a success in a known
 * client's lane, while a success of a client new at the address halves
 * the address's delay (one failure fewer). So guessing
 * from one address goes no faster than that however many connections it
 * opens, and a peer guessing there, which takes the address's turns, does
 * not keep its known clients out when they reconnect. The id is no
 * credential (it travels in clear): a wrong proof under a known id slows
 * that id's lane and counts in the address's, so naming known ids buys a
 * guesser one lane per id known there (at most 256), each as slow.
 * ip: numeric text, no port. Returns 0 when an attempt may be checked now
 * (the turn is taken), else the loop time (ms) to try again at. */
uint64_t psd_auth_admit(psd_auth *a, const char *ip, uint64_t client_id,
                        uint64_t now_ms);

/* An attempt from peer (ip:port) failed: one log line says why, except
 * that failures within 10 s of a logged one are counted and summed up in
 * one line ("... and N more like this in 10 s") when the window ends. A
 * guess (a wrong proof, checked in its admitted turn) counts in the
 * address's lane and in the client's own, if it has one; a malformed or
 * out-of-order handshake does not: it guesses nothing, never waited for
 * admission, and counted, it let anyone at the address keep the
 * address's real clients out for good. */
void psd_auth_failed(psd_auth *a, const char *ip, uint64_t client_id,
                     const char *peer, const char *why, int guess,
                     uint64_t now_ms);

/* An attempt from ip succeeded. A known client's lane is cleared (not
 * the address's: those failures may be another peer's); otherwise the
 * address's count of failures steps back one and the client is
 * remembered with one
 * connection (4096 pairs at most, 256 per address; when full, the client
 * whose connections are all closed and gone longest makes room, and none
 * does while every one is connected: the newcomer is then not
 * remembered). Returns 1 when the connection was counted, 0 when not:
 * then psd_auth_closed must not be called for it (it would count down
 * another connection of that client, remembered later). */
int psd_auth_succeeded(psd_auth *a, const char *ip, uint64_t client_id);

/* An authenticated connection of client_id from ip, counted by
 * psd_auth_succeeded, closed. */
void psd_auth_closed(psd_auth *a, const char *ip, uint64_t client_id,
                     uint64_t now_ms);

/* Periodic: writes the summary of a window that has ended. */
void psd_auth_tick(psd_auth *a, uint64_t now_ms);

/* Failures seen since start, for stats and tests. */
uint64_t psd_auth_failures(const psd_auth *a);

#endif
