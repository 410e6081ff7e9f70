/* Every message decoder on fuzzed objects, with the protocol's promises
 * checked on what they return; see decode.h. */
#include <string.h>

#include "decode.h"
#include "fuzz.h"
#include "../../proto/status.h"

/* A decoder's return: 0, or PSW_EPROTO with a reason in err. */
static void check_rc(const char *who, int rc, const char *err, size_t errlen)
{
    FUZZ_CHECK(rc == 0 || rc == PSW_EPROTO, "%s returned %d, want 0 or %d",
               who, rc, PSW_EPROTO);
    if (rc != 0)
        FUZZ_CHECK(err[0] != '\0' && strnlen(err, errlen) < errlen,
                   "%s failed without a reason", who);
}

/* What psw_msg_decode promises about a message it accepted. */
static void check_msg(const psw_msg *m)
{
    const psw_op_info *info = psw_op_get(m->op);
    FUZZ_CHECK(info != NULL, "decoded op %d has no row in the op table",
               m->op);
    FUZZ_CHECK(m->nkeys == 0 || m->keys != NULL, "%zu keys at NULL",
               m->nkeys);
    FUZZ_CHECK(m->vals_len == 0 || m->vals != NULL, "%zu value bytes at NULL",
               m->vals_len);
    FUZZ_CHECK(m->text_len == 0 || m->text != NULL, "%zu text bytes at NULL",
               m->text_len);
    if (m->nkeys)
        fuzz_touch(m->keys, 8 * m->nkeys);
    if (m->vals_len)
        fuzz_touch(m->vals, m->vals_len);
    if (m->text_len)
        fuzz_touch(m->text, m->text_len);
    if (m->op == PSW_OP_REPLY) {
        FUZZ_CHECK(m->status <= 0, "reply status %d, want <= 0", m->status);
        FUZZ_CHECK(m->nkeys == 0, "a reply with %zu keys", m->nkeys);
        return;
    }
    if (info->flags & PSW_OPF_ADMIN)
        FUZZ_CHECK(m->status == 0 && m->text != NULL &&
                   m->text_len < PSW_TEXT_MAX, "ADMIN with status %d or a "
                   "command of %zu bytes", m->status, m->text_len);
    else
        FUZZ_CHECK(m->status == 0 && m->text == NULL && m->text_len == 0,
                   "request op %d with status %d or a text of %zu bytes",
                   m->op, m->status, m->text_len);
    FUZZ_CHECK(m->vals_len % 4 == 0, "op %d: %zu value bytes, want a "
               "multiple of 4", m->op, m->vals_len);
    if (!(info->flags & PSW_OPF_PUSHES))
        FUZZ_CHECK(m->vals_len == 0, "op %d pushes nothing but has %zu "
                   "value bytes", m->op, m->vals_len);
    if (!(info->flags & PSW_OPF_TABLE) || (info->flags & PSW_OPF_RANGED))
        FUZZ_CHECK(m->nkeys == 0, "op %d takes no keys but has %zu", m->op,
                   m->nkeys);
    if (!(info->flags & PSW_OPF_RANGED))
        FUZZ_CHECK(m->first == 0 && m->count == 0, "op %d is not ranged but "
                   "has first %llu count %llu", m->op,
                   (unsigned long long)m->first, (unsigned long long)m->count);
    if (info->flags & PSW_OPF_SESSION)
        FUZZ_CHECK(m->ts == 0 && m->part == 0 && m->table == 0,
                   "session op %d with ts %llu part %u table %u", m->op,
                   (unsigned long long)m->ts, m->part, m->table);
}

static void check_hello(const psw_hello *h)
{
    FUZZ_CHECK(h->nonce_len <= PSW_TOKEN_MAX, "token of %zu bytes, cap %d",
               h->nonce_len, PSW_TOKEN_MAX);
    FUZZ_CHECK(h->nonce != NULL || h->nonce_len == 0,
               "token of %zu bytes at NULL", h->nonce_len);
    if (h->nonce_len)
        fuzz_touch(h->nonce, h->nonce_len);
}

/* A name copied out of the frame must end inside its array. */
static void check_name(const char *what, const char *s, size_t cap)
{
    FUZZ_CHECK(strnlen(s, cap) < cap, "%s is not terminated inside its %zu "
               "bytes", what, cap);
}

static void check_hello_ok(const psw_cluster *l)
{
    FUZZ_CHECK(l->status <= 0, "HELLO_OK status %d, want <= 0", l->status);
    check_name("HELLO_OK text", l->text, sizeof l->text);
    if (l->status != PSW_OK) {
        FUZZ_CHECK(l->nodes == NULL && l->tables == NULL && l->nnodes == 0 &&
                   l->ntables == 0, "a refusal came with %d nodes and %d "
                   "tables", l->nnodes, l->ntables);
        return;
    }
    FUZZ_CHECK(l->nnodes >= 1 && l->nnodes <= PSW_MAX_NODES && l->nodes,
               "%d nodes, want 1..%d", l->nnodes, PSW_MAX_NODES);
    FUZZ_CHECK(l->node_index >= 0 && l->node_index < l->nnodes,
               "node_index %d of %d nodes", l->node_index, l->nnodes);
    FUZZ_CHECK(l->shards >= 1 && l->shards <= 65535, "%u shards",
               (unsigned)l->shards);
    for (int i = 0; i < l->nnodes; i++)
        check_name("node address", l->nodes[i], PSW_ADDR_MAX);
    FUZZ_CHECK(l->ntables >= 0 && l->ntables <= PSW_MAX_TABLES && l->tables,
               "%d tables, want 0..%d", l->ntables, PSW_MAX_TABLES);
    for (int i = 0; i < l->ntables; i++) {
        const psw_table_desc *d = &l->tables[i];
        check_name("table name", d->name, sizeof d->name);
        FUZZ_CHECK(d->dim >= 1, "table %d: dim 0", i);
        FUZZ_CHECK(d->consistency >= PSW_CONS_ASYNC &&
                   d->consistency <= PSW_CONS_SSP, "table %d: consistency %d",
                   i, d->consistency);
        FUZZ_CHECK(d->dense == 0 || d->dense == 1, "table %d: dense %d", i,
                   d->dense);
        FUZZ_CHECK(!d->dense || d->rows >= 1, "table %d: dense with 0 rows",
                   i);
    }
}

int fuzz_hello_ok_names_cut(const msgpack_object *o, const psw_cluster *l)
{
    if (l->status != PSW_OK)
        return 0;
    /* The decoder accepted o, so these are arrays and STRs. */
    const msgpack_object *f = o->via.array.ptr;
    for (int i = 0; i < l->nnodes; i++)
        if (strlen(l->nodes[i]) != f[8].via.array.ptr[i].via.str.size)
            return 1;
    for (int i = 0; i < l->ntables; i++)
        if (strlen(l->tables[i].name) !=
            f[9].via.array.ptr[i].via.array.ptr[1].via.str.size)
            return 1;
    return 0;
}

int fuzz_decode_message(const msgpack_object *o, psw_msg *m, psw_hello *h,
                        psw_cluster *l)
{
    char err[256];
    int bits = 0, rc;

    err[0] = '\0';
    rc = psw_msg_decode(o, m, err, sizeof err);
    check_rc("psw_msg_decode", rc, err, sizeof err);
    if (rc == 0) {
        check_msg(m);
        bits |= FUZZ_DEC_MSG;
    }
    err[0] = '\0';
    rc = psw_hello_decode(o, h, err, sizeof err);
    check_rc("psw_hello_decode", rc, err, sizeof err);
    if (rc == 0) {
        check_hello(h);
        bits |= FUZZ_DEC_HELLO;
    }
    err[0] = '\0';
    rc = psw_hello_ok_decode(o, l, err, sizeof err);
    check_rc("psw_hello_ok_decode", rc, err, sizeof err);
    if (rc == 0) {
        check_hello_ok(l);
        FUZZ_CHECK(!fuzz_hello_ok_names_cut(o, l), "psw_hello_ok_decode "
                   "accepted a node address or table name holding a NUL "
                   "byte");
        bits |= FUZZ_DEC_HELLO_OK;
    } else
        /* A failed decode leaves nothing to free. */
        FUZZ_CHECK(l->nodes == NULL && l->tables == NULL,
                   "psw_hello_ok_decode failed (%s) but left nodes %p "
                   "tables %p", err, (void *)l->nodes, (void *)l->tables);
    /* The handshake's own messages. */
    psw_challenge ch;
    psw_auth_msg am;
    int hs = 0;
    err[0] = '\0';
    rc = psw_challenge_decode(o, &ch, err, sizeof err);
    check_rc("psw_challenge_decode", rc, err, sizeof err);
    hs += rc == 0;
    err[0] = '\0';
    rc = psw_auth_decode(o, &am, err, sizeof err);
    check_rc("psw_auth_decode", rc, err, sizeof err);
    if (rc == 0) {
        hs++;
        FUZZ_CHECK(am.proof_len <= PSW_TOKEN_MAX &&
                   (am.proof != NULL || am.proof_len == 0),
                   "AUTH: a proof of %zu bytes at %p", am.proof_len,
                   (const void *)am.proof);
        if (am.proof_len)
            fuzz_touch(am.proof, am.proof_len);
    }
    /* Ops are distinct, so no message means two things. */
    FUZZ_CHECK((bits == 0 || bits == FUZZ_DEC_MSG || bits == FUZZ_DEC_HELLO ||
                bits == FUZZ_DEC_HELLO_OK) && hs <= 1 && !(hs && bits),
               "decoders accepting one message: bits %d, handshake %d",
               bits, hs);
    return bits;
}

int fuzz_decode_frame(const msgpack_object *frame)
{
    const msgpack_object *msgs;
    char err[256];
    psw_msg m;
    psw_hello h;
    psw_cluster l;

    err[0] = '\0';
    int n = psw_frame_messages(frame, PSW_MAX_MSGS, &msgs, err, sizeof err);
    if (n < 0) {
        check_rc("psw_frame_messages", n, err, sizeof err);
        return n;
    }
    FUZZ_CHECK(n >= 1 && n <= PSW_MAX_MSGS && frame->type ==
               MSGPACK_OBJECT_ARRAY && (uint32_t)n == frame->via.array.size,
               "psw_frame_messages returned %d for a frame of type %d", n,
               (int)frame->type);
    for (int i = 0; i < n; i++) {
        fuzz_decode_message(&msgs[i], &m, &h, &l);
        psw_cluster_free(&l);
    }
    return n;
}

int fuzz_decode_body(const char *body, size_t len, msgpack_zone *zone,
                     msgpack_object *obj)
{
    char err[160];

    msgpack_zone_clear(zone);
    err[0] = '\0';
    long g = psw_guard((const uint8_t *)body, len, 8);
    int rc = psw_frame_decode(body, len, zone, obj, err, sizeof err);
    if (g > 0 && (size_t)g == len)
        FUZZ_CHECK(rc == 0, "psw_guard accepted all %zu bytes but "
                   "psw_frame_decode said: %s", len, err);
    else
        FUZZ_CHECK(rc == PSW_EPROTO, "psw_guard gave %ld for %zu bytes but "
                   "psw_frame_decode returned %d", g, len, rc);
    check_rc("psw_frame_decode", rc, err, sizeof err);
    return rc;
}
