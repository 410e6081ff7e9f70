/* The daemon's side of token authentication: the token, the throttle that
 * slows down failed attempts per source address, and the log of failures
 * collapsed when they repeat. conn.c runs the handshake's messages;
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

/* The throttle. An address (ip: numeric text, no port) with recent
 * failures gets one attempt checked per delay, the delay doubling with
 * each failure from 100 ms up to 2 s, so guessing from one address goes
 * no faster than that however many connections it opens; 60 s without a
 * failure, or a success, clears it. Returns 0 when an attempt from ip may
 * be checked now (the slot is taken), else the loop time (ms) to try
 * again at. */
uint64_t psd_auth_admit(psd_auth *a, const char *ip, uint64_t now_ms);

/* An attempt from peer (ip:port) failed: one log line says why, except
 * that failures within 10 s of a logged one are counted and summed up in
 * one line ("... and N more like this in 10 s") when the window ends. A
 * guess (a wrong proof, checked in its admitted turn) counts for ip's
 * throttle; a malformed or out-of-order handshake does not: it guesses
 * nothing, never waited for admission, and counted, it let anyone at
 * the address keep the address's real clients out for good. */
void psd_auth_failed(psd_auth *a, const char *ip, const char *peer,
                     const char *why, int guess, uint64_t now_ms);

/* An attempt from ip succeeded: its failures are forgotten. */
void psd_auth_succeeded(psd_auth *a, const char *ip);

/* Periodic: writes the summary of a window that has ended. */
void psd_auth_tick(psd_auth *a, uint64_t now_ms);

/* Failures seen since start, for stats and tests. */
uint64_t psd_auth_failures(const psd_auth *a);

#endif
