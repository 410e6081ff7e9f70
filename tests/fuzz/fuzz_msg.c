/* libFuzzer target for the message codec (proto/msg.h): the input is one
 * frame body (a msgpack value). It goes through psw_frame_decode, then
 * every decoder runs on the value itself and on each message of the frame;
 * whatever a decoder accepts is packed again with its encoder
 * (psw_pack_request, psw_pack_reply, psw_pack_hello, psw_pack_hello_ok),
 * framed, read back and decoded, and must come back with the same fields. */
#include <string.h>

#include "decode.h"
#include "fuzz.h"
#include "../../proto/frame.h"
#include "../../proto/msg.h"
#include "../../proto/status.h"

static msgpack_zone zone;    /* the input's objects */
static msgpack_zone zone2;   /* the objects of a message packed again */
static psw_out out;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    msgpack_zone_init(&zone, 4096);
    msgpack_zone_init(&zone2, 4096);
    psw_out_init(&out);
    return 0;
}

/* The frame just closed in `out`, as a peer reads it: length, CRC, body,
 * exactly one message. *buf holds the bytes the message points into; the
 * caller frees it. */
static const msgpack_object *read_back(const char *what, char **buf)
{
    size_t len;
    FUZZ_CHECK(!out.oom, "%s: out of memory packing", what);
    char *b = fuzz_flatten(&out, &len);
    FUZZ_CHECK(b != NULL, "%s: out of memory flattening", what);
    FUZZ_CHECK(len == out.total && len >= PSW_FRAME_HDR + 1 + PSW_FRAME_CRC,
               "%s: %zu bytes written, psw_out says %zu", what, len,
               out.total);
    uint32_t flen = fuzz_be32(b);
    FUZZ_CHECK(flen == len - PSW_FRAME_HDR, "%s: frame length %u for %zu "
               "bytes", what, flen, len);
    size_t blen = flen - PSW_FRAME_CRC;
    uint32_t want = fuzz_be32(b + PSW_FRAME_HDR + blen);
    uint32_t got = psw_crc32c(0, b + PSW_FRAME_HDR, blen);
    FUZZ_CHECK(got == want, "%s: CRC %08x written, %08x computed", what, want,
               got);
    msgpack_object frame;
    FUZZ_CHECK(fuzz_decode_body(b + PSW_FRAME_HDR, blen, &zone2, &frame) == 0,
               "%s: the packed frame does not decode", what);
    const msgpack_object *msgs;
    char err[160] = "";
    int n = psw_frame_messages(&frame, PSW_MAX_MSGS, &msgs, err, sizeof err);
    FUZZ_CHECK(n == 1, "%s: packed frame holds %d messages (%s), want 1",
               what, n, err);
    *buf = b;
    return &msgs[0];
}

static int same_bytes(const char *a, const char *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

/* Requests: every field psw_msg_decode sets must survive. */
static void round_trip_request(const psw_msg *m)
{
    char err[256] = "", *buf;
    psw_msg b;

    psw_out_reset(&out);
    psw_out_frame_begin(&out);
    psw_pack_request(&out, m);
    psw_out_frame_end(&out);
    const msgpack_object *o = read_back("request", &buf);
    FUZZ_CHECK(psw_msg_decode(o, &b, err, sizeof err) == 0,
               "op %d packed by psw_pack_request does not decode: %s", m->op,
               err);
    FUZZ_CHECK(b.op == m->op && b.ts == m->ts && b.part == m->part &&
               b.table == m->table && b.first == m->first &&
               b.count == m->count && b.value == m->value,
               "op %d: got op %d ts %llu part %u table %u first %llu count "
               "%llu value %llu, want op %d ts %llu part %u table %u first "
               "%llu count %llu value %llu", m->op, b.op,
               (unsigned long long)b.ts, b.part, b.table,
               (unsigned long long)b.first, (unsigned long long)b.count,
               (unsigned long long)b.value, m->op, (unsigned long long)m->ts,
               m->part, m->table, (unsigned long long)m->first,
               (unsigned long long)m->count, (unsigned long long)m->value);
    FUZZ_CHECK(b.nkeys == m->nkeys && same_bytes(b.keys, m->keys, 8 * b.nkeys),
               "op %d: got %zu keys, want %zu (or different bytes)", m->op,
               b.nkeys, m->nkeys);
    FUZZ_CHECK(b.vals_len == m->vals_len &&
               same_bytes(b.vals, m->vals, b.vals_len),
               "op %d: got %zu value bytes, want %zu (or different bytes)",
               m->op, b.vals_len, m->vals_len);
    free(buf);
}

/* Replies: psw_pack_reply takes a C string and cuts it to PSW_TEXT_MAX - 1
 * bytes, and packs no text when there is a payload. */
static void round_trip_reply(const psw_msg *m)
{
    char err[256] = "", *buf, *text = NULL;
    psw_msg b;

    if (m->text) {
        text = malloc(m->text_len + 1);
        FUZZ_CHECK(text != NULL, "out of memory for a text of %zu bytes",
                   m->text_len);
        if (m->text_len)
            memcpy(text, m->text, m->text_len);
        text[m->text_len] = '\0';
    }
    psw_out_reset(&out);
    psw_out_frame_begin(&out);
    char *p = psw_pack_reply(&out, m->ts, m->part, m->status, text,
                             m->vals_len, m->clock);
    if (m->vals_len) {
        FUZZ_CHECK(p != NULL, "psw_pack_reply gave no room for %zu bytes",
                   m->vals_len);
        memcpy(p, m->vals, m->vals_len);
    } else
        FUZZ_CHECK(p == NULL, "psw_pack_reply gave room for 0 bytes");
    psw_out_frame_end(&out);
    const msgpack_object *o = read_back("reply", &buf);
    FUZZ_CHECK(psw_msg_decode(o, &b, err, sizeof err) == 0,
               "a reply packed by psw_pack_reply does not decode: %s", err);
    FUZZ_CHECK(b.op == PSW_OP_REPLY && b.ts == m->ts && b.part == m->part &&
               b.status == m->status && b.clock == m->clock,
               "reply: got op %d ts %llu part %u status %d clock %llu, want "
               "ts %llu part %u status %d clock %llu", b.op,
               (unsigned long long)b.ts, b.part, b.status,
               (unsigned long long)b.clock, (unsigned long long)m->ts,
               m->part, m->status, (unsigned long long)m->clock);
    FUZZ_CHECK(b.vals_len == m->vals_len &&
               same_bytes(b.vals, m->vals, b.vals_len),
               "reply: got %zu payload bytes, want %zu (or different bytes)",
               b.vals_len, m->vals_len);
    size_t want = text && !m->vals_len ? strnlen(text, PSW_TEXT_MAX - 1) : 0;
    FUZZ_CHECK(b.text_len == want && same_bytes(b.text, text, want),
               "reply: got a text of %zu bytes, want %zu", b.text_len, want);
    if (!text || m->vals_len)
        FUZZ_CHECK(b.text == NULL, "reply: a text where nil was packed");
    free(text);
    free(buf);
}

static void round_trip_hello(const psw_hello *h)
{
    char err[256] = "", *buf;
    psw_hello b;

    psw_out_reset(&out);
    psw_out_frame_begin(&out);
    psw_pack_hello(&out, h);
    psw_out_frame_end(&out);
    const msgpack_object *o = read_back("hello", &buf);
    FUZZ_CHECK(psw_hello_decode(o, &b, err, sizeof err) == 0,
               "a HELLO packed by psw_pack_hello does not decode: %s", err);
    FUZZ_CHECK(b.version == h->version && b.client_id == h->client_id &&
               b.incarnation == h->incarnation && b.worker == h->worker,
               "HELLO: got version %u client %llu incarnation %llu worker "
               "%d, want %u %llu %llu %d", b.version,
               (unsigned long long)b.client_id,
               (unsigned long long)b.incarnation, (int)b.worker, h->version,
               (unsigned long long)h->client_id,
               (unsigned long long)h->incarnation, (int)h->worker);
    FUZZ_CHECK((b.nonce == NULL) == (h->nonce == NULL) &&
               b.nonce_len == h->nonce_len &&
               same_bytes(b.nonce, h->nonce, b.nonce_len),
               "HELLO: got a token of %zu bytes (%s), want %zu (%s)",
               b.nonce_len, b.nonce ? "BIN" : "nil", h->nonce_len,
               h->nonce ? "BIN" : "nil");
    free(buf);
}

static void round_trip_hello_ok(const psw_cluster *l)
{
    char err[256] = "", *buf;
    psw_cluster b;

    psw_out_reset(&out);
    psw_out_frame_begin(&out);
    psw_pack_hello_ok(&out, l);
    psw_out_frame_end(&out);
    const msgpack_object *o = read_back("hello_ok", &buf);
    int rc = psw_hello_ok_decode(o, &b, err, sizeof err);
    FUZZ_CHECK(rc == 0, "a HELLO_OK packed by psw_pack_hello_ok does not "
               "decode: %s", err);
    FUZZ_CHECK(b.status == l->status && strcmp(b.text, l->text) == 0 &&
               b.version == l->version && b.node_index == l->node_index &&
               b.epoch == l->epoch && b.max_frame == l->max_frame &&
               b.shards == l->shards && b.worker_clock == l->worker_clock &&
               b.worker_barrier == l->worker_barrier &&
               b.heartbeat_ms == l->heartbeat_ms &&
               b.peer_timeout_ms == l->peer_timeout_ms,
               "HELLO_OK: a header field changed (status %d/%d, text \"%s\"/"
               "\"%s\", node_index %d/%d, shards %u/%u)", b.status, l->status,
               b.text, l->text, b.node_index, l->node_index, b.shards,
               l->shards);
    FUZZ_CHECK(b.nnodes == l->nnodes && b.ntables == l->ntables,
               "HELLO_OK: got %d nodes %d tables, want %d and %d", b.nnodes,
               b.ntables, l->nnodes, l->ntables);
    for (int i = 0; i < b.nnodes; i++)
        FUZZ_CHECK(strcmp(b.nodes[i], l->nodes[i]) == 0,
                   "HELLO_OK: node %d is \"%s\", want \"%s\"", i, b.nodes[i],
                   l->nodes[i]);
    for (int i = 0; i < b.ntables; i++) {
        const psw_table_desc *x = &b.tables[i], *y = &l->tables[i];
        FUZZ_CHECK(x->id == y->id && strcmp(x->name, y->name) == 0 &&
                   x->dense == y->dense && x->dim == y->dim &&
                   x->rows == y->rows && x->consistency == y->consistency,
                   "HELLO_OK: table %d is %u \"%s\" dense %d dim %u rows %llu "
                   "cons %d, want %u \"%s\" %d %u %llu %d", i, x->id, x->name,
                   x->dense, x->dim, (unsigned long long)x->rows,
                   x->consistency, y->id, y->name, y->dense, y->dim,
                   (unsigned long long)y->rows, y->consistency);
    }
    psw_cluster_free(&b);
    free(buf);
}

/* Every decoder on one object, and a round trip of what they accept. */
static void one_message(const msgpack_object *o)
{
    psw_msg m;
    psw_hello h;
    psw_cluster l;
    int bits = fuzz_decode_message(o, &m, &h, &l);
    if (bits & FUZZ_DEC_MSG) {
        if (m.op == PSW_OP_REPLY)
            round_trip_reply(&m);
        else
            round_trip_request(&m);
    }
    if (bits & FUZZ_DEC_HELLO)
        round_trip_hello(&h);
    if (bits & FUZZ_DEC_HELLO_OK)
        round_trip_hello_ok(&l);
    psw_cluster_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[160];

    if (fuzz_decode_body((const char *)data, size, &zone, &obj) != 0)
        return 0;
    one_message(&obj);
    int n = psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, err, sizeof err);
    for (int i = 0; i < n; i++)
        one_message(&msgs[i]);
    return 0;
}
