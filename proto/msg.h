/* Messages of the psd wire protocol (see PROTOCOL.md): encoding into a
 * psw_out and decoding from a msgpack object into views. Decoding never
 * copies key or float payloads: psw_msg points into the frame. */
#ifndef PSW_MSG_H
#define PSW_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <msgpack.h>

#include "addr.h"
#include "auth.h"
#include "frame.h"

/* The version this code speaks, and the oldest a server still accepts
 * (version 2 has no authentication: only a server without a token takes
 * it, and answers it exactly as version 2 did). Version 4 differs from 3
 * only for workers: a worker's HELLO of version 4 joins it pending, and
 * the node takes it in at the OPENED its client sends once every node
 * answered (PROTOCOL.md, section 10.1); a reader has nothing to gain from
 * it, so readers (psctl, a client with no worker id) send version 3,
 * which every node since release 0.3.0 speaks. */
#define PSW_VERSION 4
#define PSW_VERSION_MIN 2
#define PSW_VERSION_READER 3

/* Op codes. A new op needs: a row in psw_ops (msg.c: its fields and
 * properties), its fields in psw_pack_request / psw_msg_decode, a section
 * in PROTOCOL.md, its handling in daemon/request.c, and its slicing in
 * client/slice.c with a public call in client/client.c. */
enum psw_op {
    PSW_OP_HELLO = 1,
    PSW_OP_HELLO_OK = 2,
    PSW_OP_PING = 3,       /* either way, on an idle connection; no reply */
    PSW_OP_ACK = 4,        /* client: requests below `value` are complete */
    PSW_OP_CHALLENGE = 5,  /* server, before HELLO_OK when it has a token */
    PSW_OP_AUTH = 6,       /* client: its proof, answering CHALLENGE */
    PSW_OP_OPENED = 7,     /* client, version 4 worker: its open reached
                              every node; no reply */
    PSW_OP_PUSH = 10,
    PSW_OP_PULL = 11,
    PSW_OP_PUSHPULL = 12,
    PSW_OP_PUSH_RANGE = 13,
    PSW_OP_PULL_RANGE = 14,
    PSW_OP_CLOCK = 15,
    PSW_OP_BARRIER = 16,
    PSW_OP_LEAVE = 17,
    PSW_OP_REPLY = 20,
    PSW_OP_ADMIN = 30      /* an operator's command (psctl): its reply's
                              payload is text */
};

/* What an op does, for every module that must treat ops alike: the
 * client's slicer, the server's dispatcher and budget, the decoder. */
enum {
    PSW_OPF_PUSHES = 1,    /* carries rows to apply */
    PSW_OPF_PULLS = 2,     /* its reply carries rows */
    PSW_OPF_RANGED = 4,    /* first + count instead of a key list */
    PSW_OPF_TABLE = 8,     /* names a table */
    PSW_OPF_CONTROL = 16,  /* CLOCK, BARRIER, LEAVE: training-mode control */
    PSW_OPF_SESSION = 32,  /* PING, ACK, OPENED: about the connection, no
                              ts, no part, no reply */
    PSW_OPF_ADMIN = 64     /* ADMIN: a command STR, a text reply */
};

typedef struct psw_op_info {
    uint8_t fields;        /* exact field count of the message, op included */
    uint8_t flags;         /* PSW_OPF_* */
} psw_op_info;

/* The row of op in the op table, or NULL for an op that is not a request
 * or a reply (HELLO and HELLO_OK have their own functions). */
const psw_op_info *psw_op_get(int op);

static inline int psw_op_has(int op, int flag)
{
    const psw_op_info *i = psw_op_get(op);
    return i && (i->flags & flag);
}

/* Limits that keep a hostile or buggy peer from making us allocate. */
#define PSW_MAX_MSGS 65536       /* messages in one frame */
#define PSW_MAX_PARTS 65535      /* parts (messages) of one request: a
                                    node waives its push limits for no
                                    more of one request (PROTOCOL.md §6.4) */
#define PSW_MAX_NODES 4096
#define PSW_MAX_TABLES 4096
#define PSW_NAME_MAX 64
#define PSW_ADDR_MAX PSW_ADDR_TEXT_MAX  /* a node address in HELLO_OK */
#define PSW_TOKEN_MAX 256        /* HELLO field 5: a v2 token or a v3 nonce */
#define PSW_TEXT_MAX 512        /* error texts in replies, NUL excluded, are
                                   cut to PSW_TEXT_MAX - 1 bytes; also the
                                   longest ADMIN command */
#define PSW_ADMIN_REPLY_MAX (4u << 20)  /* the text an ADMIN reply may carry
                                   (in a frame of its own when longer
                                   than max_frame allows) */

/* The size rule both sides budget frames with. A frame body is at most
 * max_frame bytes: an array header of PSW_BODY_OVERHEAD bytes, then the
 * messages. A message's fields other than its BIN payloads and its error
 * text take at most PSW_MSG_OVERHEAD bytes (the widest, PUSH_RANGE, takes
 * 48). So one message whose payloads total psw_payload_max(max_frame)
 * bytes fits a frame of max_frame. */
#define PSW_MSG_OVERHEAD 64
#define PSW_BODY_OVERHEAD 5

static inline uint64_t psw_payload_max(uint64_t max_frame)
{
    uint64_t fixed = PSW_BODY_OVERHEAD + PSW_MSG_OVERHEAD;
    return max_frame > fixed ? max_frame - fixed : 0;
}

/* The most bytes a reply carrying rows_bytes of rows adds to a frame:
 * either its rows or an error text, never both. */
static inline uint64_t psw_reply_max(uint64_t rows_bytes)
{
    return PSW_MSG_OVERHEAD +
           (rows_bytes > PSW_TEXT_MAX ? rows_bytes : PSW_TEXT_MAX);
}

/* A frame's length, array header and CRC: what a reply in a frame of its
 * own adds besides itself. psd counts each request's reply at
 * psw_reply_max + this before a frame runs (PROTOCOL.md §9), and the
 * reference client keeps a frame's sum within max_frame. */
#define PSW_REPLY_FRAME_COST (PSW_FRAME_HDR + PSW_BODY_OVERHEAD + PSW_FRAME_CRC)

/* One request or reply. Which fields are set depends on op. keys and
 * vals are views into the frame: unaligned, little-endian. */
typedef struct psw_msg {
    int op;
    uint64_t ts;           /* the client's request timestamp */
    uint32_t part;         /* piece of the request on this node */
    uint32_t table;
    const char *keys;      /* nkeys little-endian uint64 */
    size_t nkeys;
    const char *vals;      /* vals_len bytes of little-endian float32 */
    size_t vals_len;
    uint64_t first, count; /* range ops */
    uint64_t value;        /* CLOCK, BARRIER: the clock or barrier number
                              the worker reaches; ACK: every request of
                              the client with ts < value is complete */
    uint64_t clock;        /* replies: the table clock the rows reflect */
    int status;            /* replies: PSW_OK or a PSW_E* code */
    const char *text;      /* replies: error detail; ADMIN: the command;
                              text_len bytes, not NUL-terminated */
    size_t text_len;
} psw_msg;

typedef struct psw_hello {
    uint32_t version;
    uint64_t client_id;
    uint64_t incarnation;
    int32_t worker;        /* -1: not a worker */
    const char *nonce;     /* field 5: version 3, the client's nonce
                              (PSW_NONCE_LEN bytes); version 2, a token
                              nobody reads. A view; NULL: nil */
    size_t nonce_len;
} psw_hello;

/* The server's challenge (version 3, a server with a token). */
typedef struct psw_challenge {
    uint8_t nonce[PSW_NONCE_LEN];
    int32_t node_index;    /* the node answering: bound into both proofs */
} psw_challenge;

/* The client's answer to a challenge: its proof, or none (a client
 * without a token says so, and the server refuses it with EAUTH). */
typedef struct psw_auth_msg {
    const char *proof;     /* view, proof_len bytes; NULL: nil */
    size_t proof_len;
} psw_auth_msg;

/* HELLO_OK's field 14, the server's proof: version 2 has no such field. */
enum { PSW_PROOF_ABSENT, PSW_PROOF_NIL, PSW_PROOF_SET };

/* A table's consistency mode on the wire (HELLO_OK table entries). */
enum { PSW_CONS_ASYNC = 0, PSW_CONS_BSP = 1, PSW_CONS_SSP = 2 };

typedef struct psw_table_desc {
    uint32_t id;
    char name[PSW_NAME_MAX];
    int dense;
    uint32_t dim;
    uint64_t rows;         /* dense only */
    int consistency;       /* PSW_CONS_* */
} psw_table_desc;

/* The cluster layout a server sends in HELLO_OK. */
typedef struct psw_cluster {
    int status;            /* PSW_OK, or why the HELLO was refused */
    char text[PSW_TEXT_MAX];
    uint32_t version;
    int node_index;        /* which node answered */
    uint64_t epoch;        /* layout epoch */
    uint64_t max_frame;
    uint32_t shards;
    int nnodes;
    char (*nodes)[PSW_ADDR_MAX];   /* "host:port", owned */
    int ntables;
    psw_table_desc *tables;        /* owned */
    uint64_t worker_clock;         /* the connecting worker's clock and */
    uint64_t worker_barrier;       /* barrier count on this node (else 0) */
    uint32_t heartbeat_ms;         /* send a PING after this long idle */
    uint32_t peer_timeout_ms;      /* a peer silent this long is dead */
    int proof_state;               /* PSW_PROOF_*: 14 fields when ABSENT */
    uint8_t proof[PSW_PROOF_LEN];  /* the server's proof when SET */
} psw_cluster;

void psw_cluster_free(psw_cluster *l);

/* The first difference between layout a and a node's layout b that
 * HELLO_OK shows (node count, shards, node addresses, each table's name,
 * kind, dim, rows and consistency), as "B's against A's" into out; ""
 * when they agree in all that (their epochs may still differ: it also
 * holds [cluster] workers and a bsp or ssp table's aggregate or
 * staleness). */
void psw_cluster_diff(const psw_cluster *a, const psw_cluster *b, char *out,
                      size_t len);

/* ---- encoding (each packs one message into the open frame) ----------- */
void psw_pack_hello(psw_out *o, const psw_hello *h);
/* HELLO_OK with 14 fields (version 2) or 15 (proof_state says which). */
void psw_pack_hello_ok(psw_out *o, const psw_cluster *l);
void psw_pack_challenge(psw_out *o, const psw_challenge *ch);
void psw_pack_auth(psw_out *o, const psw_auth_msg *a);
/* Requests: keys and vals are referenced or copied per psw_out_bin. */
void psw_pack_request(psw_out *o, const psw_msg *m);
/* A reply with `nbytes` of payload: returns where to write the payload
 * (NULL when nbytes is 0 or memory ran out; check o->oom). The pointer is
 * valid until the next call on o; text may be NULL. clock: for pulls of
 * bsp/ssp tables, the clock the rows reflect; else 0. */
char *psw_pack_reply(psw_out *o, uint64_t ts, uint32_t part, int status,
                     const char *text, size_t nbytes, uint64_t clock);
/* The same reply (status PSW_OK) in two halves, for a payload the caller
 * packs in between as one BIN (psw_out_bin_begin and pieces): head packs
 * the fields before the payload, tail those after it. */
void psw_pack_reply_head(psw_out *o, uint64_t ts, uint32_t part);
void psw_pack_reply_tail(psw_out *o, uint64_t clock);

/* ---- decoding ------------------------------------------------------- */

/* Checks that a frame body is an array of 1..max messages and returns
 * their count, or PSW_EPROTO with a reason. */
int psw_frame_messages(const msgpack_object *frame, uint32_t max,
                       const msgpack_object **msgs, char *err, size_t errlen);

/* Decodes a request or reply message. Returns 0 or PSW_EPROTO. */
int psw_msg_decode(const msgpack_object *o, psw_msg *m, char *err,
                   size_t errlen);
int psw_hello_decode(const msgpack_object *o, psw_hello *h, char *err,
                     size_t errlen);
/* A CHALLENGE: its nonce must be PSW_NONCE_LEN bytes. */
int psw_challenge_decode(const msgpack_object *o, psw_challenge *ch,
                         char *err, size_t errlen);
/* An AUTH: a proof BIN (at most PSW_TOKEN_MAX bytes) or nil. */
int psw_auth_decode(const msgpack_object *o, psw_auth_msg *a, char *err,
                    size_t errlen);
/* Replaces, in the n bytes at s, each control character with '?': C0
 * (below 0x20; '\n' kept when keep_newlines), DEL, and C1 written as UTF-8
 * (0xC2 0x80..0x9F, two '?'), since a peer's text ends up in logs,
 * ps_last_error and terminals, where an escape sequence it sent must not
 * act. Other UTF-8 is kept. */
void psw_text_clean(char *s, size_t n, int keep_newlines);
/* Accepts 14 fields (version 2) or 15 (version 3: the server's proof,
 * BIN of PSW_PROOF_LEN bytes or nil). The refusal text comes cleaned
 * (psw_text_clean).
 * Allocates l->nodes and l->tables; free with psw_cluster_free. */
int psw_hello_ok_decode(const msgpack_object *o, psw_cluster *l, char *err,
                        size_t errlen);

/* Little-endian loads from unaligned wire bytes. */
static inline uint64_t psw_key_at(const char *keys, size_t i)
{
    uint64_t k;
    memcpy(&k, keys + 8 * i, 8);
    return k;
}

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "psd assumes a little-endian host (keys and floats travel little-endian)"
#endif

#endif
