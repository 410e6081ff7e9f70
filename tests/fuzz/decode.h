/* Runs every message decoder of proto/msg.h on fuzzed msgpack objects and
 * checks what each one hands back against the protocol (PROTOCOL.md):
 * views inside the frame, counts within their caps, and at most one
 * decoder accepting a message. Shared by fuzz_frame, fuzz_msg and
 * fuzz_request. */
#ifndef PSD_FUZZ_DECODE_H
#define PSD_FUZZ_DECODE_H

#include <msgpack.h>

#include "../../proto/msg.h"

enum {
    FUZZ_DEC_MSG = 1,        /* psw_msg_decode accepted it */
    FUZZ_DEC_HELLO = 2,      /* psw_hello_decode */
    FUZZ_DEC_HELLO_OK = 4    /* psw_hello_ok_decode */
};

/* Runs psw_msg_decode, psw_hello_decode and psw_hello_ok_decode on o and
 * checks each result. Returns the FUZZ_DEC_* bits of the decoders that
 * accepted o; their results are in *m, *h and *l (views into the frame;
 * the caller frees l with psw_cluster_free, which is safe either way). */
int fuzz_decode_message(const msgpack_object *o, psw_msg *m, psw_hello *h,
                        psw_cluster *l);

/* psw_hello_ok_decode must refuse a node address or table name whose STR
 * holds a NUL byte (kept as a C string it would be cut there; found by
 * fuzz_msg, tests/fuzz/regressions/fuzz_msg/hello_ok_nul_*). Returns 1
 * when HELLO_OK message o, decoded into l, had one. */
int fuzz_hello_ok_names_cut(const msgpack_object *o, const psw_cluster *l);

/* Checks a frame body that psw_frame_decode could decode: psw_frame_messages
 * (1..PSW_MAX_MSGS), then fuzz_decode_message on every message. Returns
 * the number of messages, or PSW_EPROTO when it is not a frame. */
int fuzz_decode_frame(const msgpack_object *frame);

/* Checks psw_frame_decode against psw_guard on one body: the guard
 * accepting exactly len bytes must mean a successful decode, anything else
 * a PSW_EPROTO with a reason. zone is cleared first. Returns 0 with *obj
 * set, or PSW_EPROTO. */
int fuzz_decode_body(const char *body, size_t len, msgpack_zone *zone,
                     msgpack_object *obj);

#endif
