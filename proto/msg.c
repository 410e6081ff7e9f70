/* Encoding and decoding of psd protocol messages (see msg.h and
 * PROTOCOL.md). Decoders check every type and size they read; they never
 * allocate except for the layout in HELLO_OK, whose counts are capped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"
#include "status.h"

/* ---- the op table ---------------------------------------------------- */

#define T PSW_OPF_TABLE
static const psw_op_info ops[] = {
    [PSW_OP_PUSH] = { 6, T | PSW_OPF_PUSHES },
    [PSW_OP_PULL] = { 5, T | PSW_OPF_PULLS },
    [PSW_OP_PUSHPULL] = { 6, T | PSW_OPF_PUSHES | PSW_OPF_PULLS },
    [PSW_OP_PUSH_RANGE] = { 7, T | PSW_OPF_PUSHES | PSW_OPF_RANGED },
    [PSW_OP_PULL_RANGE] = { 6, T | PSW_OPF_PULLS | PSW_OPF_RANGED },
    [PSW_OP_CLOCK] = { 4, PSW_OPF_CONTROL },
    [PSW_OP_BARRIER] = { 4, PSW_OPF_CONTROL },
    [PSW_OP_LEAVE] = { 3, PSW_OPF_CONTROL },
    [PSW_OP_REPLY] = { 7, 0 },
    [PSW_OP_PING] = { 1, PSW_OPF_SESSION },
    [PSW_OP_ACK] = { 2, PSW_OPF_SESSION },
    [PSW_OP_OPENED] = { 1, PSW_OPF_SESSION },
    [PSW_OP_ADMIN] = { 4, PSW_OPF_ADMIN },
};
#undef T

const psw_op_info *psw_op_get(int op)
{
    if (op < 0 || (size_t)op >= sizeof ops / sizeof ops[0] ||
        ops[op].fields == 0)
        return NULL;
    return &ops[op];
}

/* ---- encoding ------------------------------------------------------- */

static void pk_check(psw_out *o, int rc)
{
    if (rc != 0)
        o->oom = 1;
}

static void pack_str(psw_out *o, const char *s)
{
    size_t n = strlen(s);
    pk_check(o, msgpack_pack_str_with_body(&o->pk, s, n));
}

void psw_pack_hello(psw_out *o, const psw_hello *h)
{
    o->frame_msgs++;
    msgpack_packer *pk = &o->pk;
    pk_check(o, msgpack_pack_array(pk, 6));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_HELLO));
    pk_check(o, msgpack_pack_uint32(pk, h->version));
    pk_check(o, msgpack_pack_uint64(pk, h->client_id));
    pk_check(o, msgpack_pack_uint64(pk, h->incarnation));
    pk_check(o, msgpack_pack_int32(pk, h->worker));
    if (h->nonce)
        psw_out_bin(o, h->nonce, h->nonce_len);
    else
        pk_check(o, msgpack_pack_nil(pk));
}

void psw_pack_challenge(psw_out *o, const psw_challenge *ch)
{
    o->frame_msgs++;
    msgpack_packer *pk = &o->pk;
    pk_check(o, msgpack_pack_array(pk, 3));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_CHALLENGE));
    psw_out_bin(o, (const char *)ch->nonce, PSW_NONCE_LEN);
    pk_check(o, msgpack_pack_int32(pk, ch->node_index));
}

void psw_pack_auth(psw_out *o, const psw_auth_msg *a)
{
    o->frame_msgs++;
    msgpack_packer *pk = &o->pk;
    pk_check(o, msgpack_pack_array(pk, 2));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_AUTH));
    if (a->proof)
        psw_out_bin(o, a->proof, a->proof_len);
    else
        pk_check(o, msgpack_pack_nil(pk));
}

void psw_pack_hello_ok(psw_out *o, const psw_cluster *l)
{
    o->frame_msgs++;
    msgpack_packer *pk = &o->pk;
    pk_check(o, msgpack_pack_array(pk, l->proof_state == PSW_PROOF_ABSENT
                                           ? 14 : 15));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_HELLO_OK));
    pk_check(o, msgpack_pack_int32(pk, l->status));
    pack_str(o, l->text);
    pk_check(o, msgpack_pack_uint32(pk, l->version));
    pk_check(o, msgpack_pack_int32(pk, l->node_index));
    pk_check(o, msgpack_pack_uint64(pk, l->epoch));
    pk_check(o, msgpack_pack_uint64(pk, l->max_frame));
    pk_check(o, msgpack_pack_uint32(pk, l->shards));
    pk_check(o, msgpack_pack_array(pk, (size_t)l->nnodes));
    for (int i = 0; i < l->nnodes; i++)
        pack_str(o, l->nodes[i]);
    pk_check(o, msgpack_pack_array(pk, (size_t)l->ntables));
    for (int i = 0; i < l->ntables; i++) {
        const psw_table_desc *t = &l->tables[i];
        pk_check(o, msgpack_pack_array(pk, 6));
        pk_check(o, msgpack_pack_uint32(pk, t->id));
        pack_str(o, t->name);
        pk_check(o, msgpack_pack_uint8(pk, (uint8_t)(t->dense != 0)));
        pk_check(o, msgpack_pack_uint32(pk, t->dim));
        pk_check(o, msgpack_pack_uint64(pk, t->rows));
        pk_check(o, msgpack_pack_uint8(pk, (uint8_t)t->consistency));
    }
    pk_check(o, msgpack_pack_uint64(pk, l->worker_clock));
    pk_check(o, msgpack_pack_uint64(pk, l->worker_barrier));
    pk_check(o, msgpack_pack_uint32(pk, l->heartbeat_ms));
    pk_check(o, msgpack_pack_uint32(pk, l->peer_timeout_ms));
    if (l->proof_state == PSW_PROOF_SET)
        psw_out_bin(o, (const char *)l->proof, PSW_PROOF_LEN);
    else if (l->proof_state == PSW_PROOF_NIL)
        pk_check(o, msgpack_pack_nil(pk));
}

void psw_pack_request(psw_out *o, const psw_msg *m)
{
    msgpack_packer *pk = &o->pk;
    const psw_op_info *info = psw_op_get(m->op);
    if (!info || m->op == PSW_OP_REPLY) {
        o->oom = 1;                    /* a caller bug: fail this frame */
        return;
    }
    o->frame_msgs++;
    pk_check(o, msgpack_pack_array(pk, info->fields));
    pk_check(o, msgpack_pack_uint8(pk, (uint8_t)m->op));
    if (info->flags & PSW_OPF_SESSION) {
        if (m->op == PSW_OP_ACK)
            pk_check(o, msgpack_pack_uint64(pk, m->value));
        return;
    }
    pk_check(o, msgpack_pack_uint64(pk, m->ts));
    pk_check(o, msgpack_pack_uint32(pk, m->part));
    if (info->flags & PSW_OPF_CONTROL) {
        if (m->op != PSW_OP_LEAVE)
            pk_check(o, msgpack_pack_uint64(pk, m->value));
        return;
    }
    if (info->flags & PSW_OPF_ADMIN) {
        pk_check(o, msgpack_pack_str_with_body(pk, m->text, m->text_len));
        return;
    }
    pk_check(o, msgpack_pack_uint32(pk, m->table));
    if (info->flags & PSW_OPF_RANGED) {
        pk_check(o, msgpack_pack_uint64(pk, m->first));
        pk_check(o, msgpack_pack_uint64(pk, m->count));
    } else
        psw_out_bin(o, m->keys, 8 * m->nkeys);
    if (info->flags & PSW_OPF_PUSHES)
        psw_out_bin(o, m->vals, m->vals_len);
}

char *psw_pack_reply(psw_out *o, uint64_t ts, uint32_t part, int status,
                     const char *text, size_t nbytes, uint64_t clock)
{
    msgpack_packer *pk = &o->pk;
    char *payload = NULL;
    o->frame_msgs++;
    pk_check(o, msgpack_pack_array(pk, ops[PSW_OP_REPLY].fields));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_REPLY));
    pk_check(o, msgpack_pack_uint64(pk, ts));
    pk_check(o, msgpack_pack_uint32(pk, part));
    pk_check(o, msgpack_pack_int32(pk, status));
    if (nbytes)
        payload = psw_out_bin_reserve(o, nbytes);
    else
        pk_check(o, msgpack_pack_nil(pk));
    /* The payload pointer stays valid: the text is packed after it is
     * reserved only when there is no payload (errors carry no rows). */
    if (text && !nbytes) {
        /* Cut long texts so a reply stays within psw_reply_max. */
        size_t n = strnlen(text, PSW_TEXT_MAX - 1);
        pk_check(o, msgpack_pack_str_with_body(pk, text, n));
    }
    else
        pk_check(o, msgpack_pack_nil(pk));
    pk_check(o, msgpack_pack_uint64(pk, clock));
    return payload;
}

void psw_pack_reply_head(psw_out *o, uint64_t ts, uint32_t part)
{
    msgpack_packer *pk = &o->pk;
    o->frame_msgs++;
    pk_check(o, msgpack_pack_array(pk, ops[PSW_OP_REPLY].fields));
    pk_check(o, msgpack_pack_uint8(pk, PSW_OP_REPLY));
    pk_check(o, msgpack_pack_uint64(pk, ts));
    pk_check(o, msgpack_pack_uint32(pk, part));
    pk_check(o, msgpack_pack_int32(pk, PSW_OK));
}

void psw_pack_reply_tail(psw_out *o, uint64_t clock)
{
    pk_check(o, msgpack_pack_nil(&o->pk));
    pk_check(o, msgpack_pack_uint64(&o->pk, clock));
}

/* ---- decoding ------------------------------------------------------- */

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); \
                       return PSW_EPROTO; } while (0)

static int get_u64(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *v = o->via.u64;
    return 0;
}

static int get_u32(const msgpack_object *o, uint32_t *v)
{
    uint64_t x;
    if (get_u64(o, &x) || x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

static int get_i32(const msgpack_object *o, int32_t *v)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX)
        *v = (int32_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
             o->via.i64 >= INT32_MIN)
        *v = (int32_t)o->via.i64;
    else
        return -1;
    return 0;
}

static int get_bin(const msgpack_object *o, const char **p, size_t *n)
{
    if (o->type != MSGPACK_OBJECT_BIN)
        return -1;
    *p = o->via.bin.ptr;
    *n = o->via.bin.size;
    return 0;
}

/* Copies a STR into a fixed buffer; refuses empty or overlong strings,
 * and strings holding a byte that no node address or table name has:
 * a NUL (as a C string they would be cut there: "\0mb" would pass as the
 * empty name), a space, a control byte or one above 0x7e (an escape
 * sequence would act on the terminal that prints the layout), a quote
 * or a backslash (psctl writes them into JSON). */
static int get_name(const msgpack_object *o, char *dst, size_t cap)
{
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
        o->via.str.size >= cap)
        return -1;
    for (uint32_t i = 0; i < o->via.str.size; i++) {
        unsigned char ch = (unsigned char)o->via.str.ptr[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
            return -1;
    }
    memcpy(dst, o->via.str.ptr, o->via.str.size);
    dst[o->via.str.size] = '\0';
    return 0;
}

int psw_frame_messages(const msgpack_object *frame, uint32_t max,
                       const msgpack_object **msgs, char *err, size_t errlen)
{
    if (frame->type != MSGPACK_OBJECT_ARRAY)
        FAIL("frame is not an array of messages");
    uint32_t n = frame->via.array.size;
    if (n == 0 || n > max)
        FAIL("frame holds %u messages (1..%u allowed)", n, max);
    *msgs = frame->via.array.ptr;
    return (int)n;
}

/* The first element of a message array: its op. */
static int msg_op(const msgpack_object *o, uint32_t min_len, char *err,
                  size_t errlen, uint32_t *op)
{
    if (o->type != MSGPACK_OBJECT_ARRAY)
        FAIL("message is not an array");
    if (o->via.array.size < 1)
        FAIL("message is an empty array (no op)");
    if (get_u32(&o->via.array.ptr[0], op))
        FAIL("message op is not an unsigned integer");
    if (o->via.array.size < min_len)
        FAIL("message op %u has %u fields", *op, o->via.array.size);
    return 0;
}

int psw_msg_decode(const msgpack_object *o, psw_msg *m, char *err,
                   size_t errlen)
{
    uint32_t op;
    if (msg_op(o, 1, err, errlen, &op))
        return PSW_EPROTO;
    memset(m, 0, sizeof *m);
    m->op = (int)op;
    const msgpack_object *f = o->via.array.ptr;
    uint32_t nf = o->via.array.size, want;
    const psw_op_info *info = psw_op_get((int)op);
    if (!info)
        FAIL("unknown op %u", op);
    want = info->fields;
    if (nf != want)
        FAIL("op %u needs %u fields, got %u", op, want, nf);
    if (info->flags & PSW_OPF_SESSION) {
        if (op == PSW_OP_ACK && get_u64(&f[1], &m->value))
            FAIL("ACK: bad value");
        return 0;
    }
    if (get_u64(&f[1], &m->ts) || get_u32(&f[2], &m->part))
        FAIL("op %u: bad timestamp or part", op);
    if (op == PSW_OP_REPLY) {
        int32_t st;
        if (get_i32(&f[3], &st) || st > 0)
            FAIL("reply: bad status");
        m->status = st;
        if (f[4].type != MSGPACK_OBJECT_NIL &&
            get_bin(&f[4], &m->vals, &m->vals_len))
            FAIL("reply: payload is not BIN");
        if (f[5].type == MSGPACK_OBJECT_STR) {
            m->text = f[5].via.str.ptr;
            m->text_len = f[5].via.str.size;
        } else if (f[5].type != MSGPACK_OBJECT_NIL)
            FAIL("reply: text is not STR");
        if (get_u64(&f[6], &m->clock))
            FAIL("reply: bad clock");
        return 0;
    }
    if (info->flags & PSW_OPF_CONTROL) {
        if (op != PSW_OP_LEAVE && get_u64(&f[3], &m->value))
            FAIL("op %u: bad clock or barrier number", op);
        return 0;
    }
    if (info->flags & PSW_OPF_ADMIN) {
        if (f[3].type != MSGPACK_OBJECT_STR ||
            f[3].via.str.size >= PSW_TEXT_MAX)
            FAIL("ADMIN: the command is not a STR of at most %d bytes",
                 PSW_TEXT_MAX - 1);
        /* msgpack-c leaves an empty STR without a pointer: an empty
         * command is "" (unknown to the server), never NULL. */
        m->text = f[3].via.str.size ? f[3].via.str.ptr : "";
        m->text_len = f[3].via.str.size;
        return 0;
    }
    if (get_u32(&f[3], &m->table))
        FAIL("op %u: bad table id", op);
    int pushes = info->flags & PSW_OPF_PUSHES;
    if (info->flags & PSW_OPF_RANGED) {
        if (get_u64(&f[4], &m->first) || get_u64(&f[5], &m->count))
            FAIL("op %u: bad range", op);
        if (pushes && get_bin(&f[6], &m->vals, &m->vals_len))
            FAIL("op %u: values are not BIN", op);
    } else {
        size_t klen;
        if (get_bin(&f[4], &m->keys, &klen) || klen % 8)
            FAIL("op %u: keys are not a BIN of uint64", op);
        m->nkeys = klen / 8;
        if (pushes && get_bin(&f[5], &m->vals, &m->vals_len))
            FAIL("op %u: values are not BIN", op);
    }
    if (m->vals_len % 4)
        FAIL("op %u: values are not a BIN of float32", op);
    return 0;
}

int psw_hello_decode(const msgpack_object *o, psw_hello *h, char *err,
                     size_t errlen)
{
    uint32_t op;
    if (msg_op(o, 1, err, errlen, &op))
        return PSW_EPROTO;
    if (op != PSW_OP_HELLO)
        FAIL("expected HELLO, got op %u", op);
    if (o->via.array.size != 6)
        FAIL("HELLO needs 6 fields, got %u", o->via.array.size);
    const msgpack_object *f = o->via.array.ptr;
    memset(h, 0, sizeof *h);
    if (get_u32(&f[1], &h->version) || get_u64(&f[2], &h->client_id) ||
        get_u64(&f[3], &h->incarnation) || get_i32(&f[4], &h->worker))
        FAIL("HELLO: bad field");
    if (f[5].type != MSGPACK_OBJECT_NIL) {
        if (get_bin(&f[5], &h->nonce, &h->nonce_len) ||
            h->nonce_len > PSW_TOKEN_MAX)
            FAIL("HELLO: bad nonce or token");
    }
    return 0;
}

int psw_challenge_decode(const msgpack_object *o, psw_challenge *ch,
                         char *err, size_t errlen)
{
    uint32_t op;
    const char *nonce;
    size_t n;
    if (msg_op(o, 1, err, errlen, &op))
        return PSW_EPROTO;
    if (op != PSW_OP_CHALLENGE || o->via.array.size != 3)
        FAIL("expected CHALLENGE with 3 fields");
    const msgpack_object *f = o->via.array.ptr;
    if (get_bin(&f[1], &nonce, &n) || n != PSW_NONCE_LEN ||
        get_i32(&f[2], &ch->node_index))
        FAIL("CHALLENGE: bad nonce or node index");
    memcpy(ch->nonce, nonce, PSW_NONCE_LEN);
    return 0;
}

int psw_auth_decode(const msgpack_object *o, psw_auth_msg *a, char *err,
                    size_t errlen)
{
    uint32_t op;
    if (msg_op(o, 1, err, errlen, &op))
        return PSW_EPROTO;
    if (op != PSW_OP_AUTH || o->via.array.size != 2)
        FAIL("expected AUTH with 2 fields, got op %u", op);
    const msgpack_object *f = o->via.array.ptr;
    memset(a, 0, sizeof *a);
    if (f[1].type != MSGPACK_OBJECT_NIL &&
        (get_bin(&f[1], &a->proof, &a->proof_len) ||
         a->proof_len > PSW_TOKEN_MAX))
        FAIL("AUTH: bad proof");
    return 0;
}

void psw_cluster_free(psw_cluster *l)
{
    free(l->nodes);
    free(l->tables);
    l->nodes = NULL;
    l->tables = NULL;
    l->nnodes = l->ntables = 0;
}

void psw_cluster_diff(const psw_cluster *a, const psw_cluster *b, char *out,
                      size_t len)
{
    static const char *const cons[] = { "async", "bsp", "ssp" };
#define CONS(x) ((x) >= 0 && (x) <= 2 ? cons[(x)] : "?")
    out[0] = '\0';
    if (a->nnodes != b->nnodes) {
        snprintf(out, len, "%d node%s against %d", b->nnodes,
                 b->nnodes == 1 ? "" : "s", a->nnodes);
        return;
    }
    if (a->shards != b->shards) {
        snprintf(out, len, "%u shards against %u", b->shards, a->shards);
        return;
    }
    for (int i = 0; i < a->nnodes; i++)
        if (strcmp(a->nodes[i], b->nodes[i])) {
            snprintf(out, len, "node %d at %s against %s", i, b->nodes[i],
                     a->nodes[i]);
            return;
        }
    if (a->ntables != b->ntables) {
        snprintf(out, len, "%d table%s against %d", b->ntables,
                 b->ntables == 1 ? "" : "s", a->ntables);
        return;
    }
    for (int t = 0; t < a->ntables; t++) {
        const psw_table_desc *x = &a->tables[t], *y = &b->tables[t];
        if (strcmp(x->name, y->name))
            snprintf(out, len, "table %d '%s' against '%s'", t, y->name,
                     x->name);
        else if (x->dense != y->dense)
            snprintf(out, len, "table '%s' %s against %s", y->name,
                     y->dense ? "dense" : "sparse",
                     x->dense ? "dense" : "sparse");
        else if (x->dim != y->dim)
            snprintf(out, len, "table '%s' of dim %u against %u", y->name,
                     y->dim, x->dim);
        else if (x->dense && x->rows != y->rows)
            snprintf(out, len, "table '%s' of %llu rows against %llu",
                     y->name, (unsigned long long)y->rows,
                     (unsigned long long)x->rows);
        else if (x->consistency != y->consistency)
            snprintf(out, len, "table '%s' %s against %s", y->name,
                     CONS(y->consistency), CONS(x->consistency));
        else
            continue;
        return;
    }
#undef CONS
}

void psw_text_clean(char *s, size_t n, int keep_newlines)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f) {
            s[i] = s[i + 1] = '?';
            i++;
        } else if ((b < 0x20 && !(keep_newlines && b == '\n')) || b == 0x7f)
            s[i] = '?';
    }
}

int psw_hello_ok_decode(const msgpack_object *o, psw_cluster *l, char *err,
                        size_t errlen)
{
    uint32_t op, u;
    int32_t st, idx;
    memset(l, 0, sizeof *l);
    if (msg_op(o, 1, err, errlen, &op))
        return PSW_EPROTO;
    if (op != PSW_OP_HELLO_OK ||
        (o->via.array.size != 14 && o->via.array.size != 15))
        FAIL("expected HELLO_OK with 14 or 15 fields");
    const msgpack_object *f = o->via.array.ptr;
    if (get_i32(&f[1], &st) || st > 0 || f[2].type != MSGPACK_OBJECT_STR)
        FAIL("HELLO_OK: bad status");
    l->status = st;
    size_t tl = f[2].via.str.size < PSW_TEXT_MAX ? f[2].via.str.size
                                                 : PSW_TEXT_MAX - 1;
    if (tl)                              /* an empty STR has no pointer */
        memcpy(l->text, f[2].via.str.ptr, tl);
    l->text[tl] = '\0';
    psw_text_clean(l->text, tl, 0);
    if (get_u32(&f[3], &l->version) || get_i32(&f[4], &idx) ||
        get_u64(&f[5], &l->epoch) || get_u64(&f[6], &l->max_frame) ||
        get_u32(&f[7], &l->shards) || get_u64(&f[10], &l->worker_clock) ||
        get_u64(&f[11], &l->worker_barrier) ||
        get_u32(&f[12], &l->heartbeat_ms) ||
        get_u32(&f[13], &l->peer_timeout_ms))
        FAIL("HELLO_OK: bad header field");
    l->node_index = idx;
    l->proof_state = PSW_PROOF_ABSENT;
    if (o->via.array.size == 15) {
        const char *proof;
        size_t n;
        l->proof_state = PSW_PROOF_NIL;
        if (f[14].type != MSGPACK_OBJECT_NIL) {
            if (get_bin(&f[14], &proof, &n) || n != PSW_PROOF_LEN)
                FAIL("HELLO_OK: bad proof");
            memcpy(l->proof, proof, PSW_PROOF_LEN);
            l->proof_state = PSW_PROOF_SET;
        }
    }
    if (st != PSW_OK)
        return 0;                        /* refused: no layout follows */
    if (f[8].type != MSGPACK_OBJECT_ARRAY || f[9].type != MSGPACK_OBJECT_ARRAY)
        FAIL("HELLO_OK: nodes or tables is not an array");
    u = f[8].via.array.size;
    if (u == 0 || u > PSW_MAX_NODES || l->shards == 0 || l->shards > 65535)
        FAIL("HELLO_OK: %u nodes, %u shards", u, l->shards);
    if (idx < 0 || (uint32_t)idx >= u)
        FAIL("HELLO_OK: node index %d of %u", idx, u);
    l->nodes = calloc(u, sizeof *l->nodes);
    if (!l->nodes)
        FAIL("out of memory");
    l->nnodes = (int)u;
    for (uint32_t i = 0; i < u; i++)
        if (get_name(&f[8].via.array.ptr[i], l->nodes[i], PSW_ADDR_MAX)) {
            psw_cluster_free(l);
            FAIL("HELLO_OK: bad node address %u", i);
        }
    u = f[9].via.array.size;
    if (u > PSW_MAX_TABLES) {
        psw_cluster_free(l);
        FAIL("HELLO_OK: %u tables", u);
    }
    l->tables = calloc(u ? u : 1, sizeof *l->tables);
    if (!l->tables) {
        psw_cluster_free(l);
        FAIL("out of memory");
    }
    l->ntables = (int)u;
    for (uint32_t i = 0; i < u; i++) {
        const msgpack_object *t = &f[9].via.array.ptr[i];
        psw_table_desc *d = &l->tables[i];
        uint32_t dense, cons;
        if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 6 ||
            get_u32(&t->via.array.ptr[0], &d->id) ||
            get_name(&t->via.array.ptr[1], d->name, sizeof d->name) ||
            get_u32(&t->via.array.ptr[2], &dense) ||
            get_u32(&t->via.array.ptr[3], &d->dim) ||
            get_u64(&t->via.array.ptr[4], &d->rows) ||
            get_u32(&t->via.array.ptr[5], &cons) || d->dim == 0 ||
            cons > PSW_CONS_SSP || (dense && d->rows == 0) ||
            d->id != i) {   /* in id order (PROTOCOL.md): ids index tables */
            psw_cluster_free(l);
            FAIL("HELLO_OK: bad table %u", i);
        }
        d->dense = dense != 0;
        d->consistency = (int)cons;
    }
    return 0;
}
