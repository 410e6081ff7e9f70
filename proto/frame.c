/* Framing and the msgpack guard: see frame.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/crc.h>

#include "frame.h"
#include "status.h"

uint32_t psw_crc32c(uint32_t crc, const void *p, size_t n)
{
    /* ISA-L keeps the register inverted between calls: invert around it
     * so that psw_crc32c(0, ...) is the standard CRC32C and calls chain. */
    return ~crc32_iscsi((unsigned char *)(uintptr_t)p, (int)n, ~crc);
}

/* Large inputs go through ISA-L in pieces its int length can hold. */
static uint32_t crc_update(uint32_t crc, const char *p, size_t n)
{
    while (n > 0) {
        size_t k = n > (1u << 30) ? (1u << 30) : n;
        crc = psw_crc32c(crc, p, k);
        p += k;
        n -= k;
    }
    return crc;
}

#define READ_CHUNK (64 * 1024)

/* ---- reading -------------------------------------------------------- */

void psw_reader_init(psw_reader *r, size_t max_frame)
{
    memset(r, 0, sizeof *r);
    r->max_frame = max_frame;
}

void psw_reader_destroy(psw_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

static uint32_t be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
           (uint32_t)u[2] << 8 | (uint32_t)u[3];
}

int psw_reader_space(psw_reader *r, char **p, size_t *n)
{
    /* Consumed bytes are dropped here, never while a frame view handed
     * out by psw_reader_next may still be in use. */
    if (r->off > 0) {
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->len -= r->off;
        r->off = 0;
    }
    size_t want = READ_CHUNK;
    if (r->len >= PSW_FRAME_HDR) {
        /* Size the buffer for the whole frame once its length is known
         * (psw_reader_next has refused oversized lengths already). */
        size_t frame = PSW_FRAME_HDR + (size_t)be32(r->buf);
        if (frame > r->len && frame - r->len > want)
            want = frame - r->len;
    }
    if (r->cap - r->len < want) {
        size_t cap = r->len + want;
        char *nb = realloc(r->buf, cap);
        if (!nb)
            return -1;
        r->buf = nb;
        r->cap = cap;
    }
    *p = r->buf + r->len;
    *n = r->cap - r->len;
    return 0;
}

/* Feeds the CRC with the body bytes of the frame at off that have
 * arrived, up to the end of its body. */
static void reader_crc(psw_reader *r)
{
    size_t have = r->len - r->off;
    if (have <= PSW_FRAME_HDR)
        return;
    uint32_t flen = be32(r->buf + r->off);
    if (flen < PSW_FRAME_CRC + 1 || flen - PSW_FRAME_CRC > r->max_frame)
        return;                      /* psw_reader_next refuses it */
    size_t body = flen - PSW_FRAME_CRC, avail = have - PSW_FRAME_HDR;
    size_t upto = avail < body ? avail : body;
    if (upto > r->crc_done) {
        r->crc = crc_update(r->crc, r->buf + r->off + PSW_FRAME_HDR +
                                        r->crc_done, upto - r->crc_done);
        r->crc_done = upto;
    }
}

void psw_reader_commit(psw_reader *r, size_t n)
{
    r->len += n;
    reader_crc(r);
}

int psw_reader_next(psw_reader *r, const char **body, size_t *len)
{
    size_t have = r->len - r->off;
    if (have < PSW_FRAME_HDR)
        return 0;
    uint32_t flen = be32(r->buf + r->off);
    if (flen < PSW_FRAME_CRC + 1) {
        snprintf(r->why, sizeof r->why, "frame of %u bytes: too short for "
                 "a body and its CRC", flen);
        return PSW_EPROTO;
    }
    if (flen - PSW_FRAME_CRC > r->max_frame) {
        snprintf(r->why, sizeof r->why, "frame body of %u bytes is larger "
                 "than max_frame (%zu bytes)", flen - PSW_FRAME_CRC,
                 r->max_frame);
        return PSW_ETOOBIG;
    }
    if (have - PSW_FRAME_HDR < flen)
        return 0;
    reader_crc(r);
    const char *b = r->buf + r->off + PSW_FRAME_HDR;
    size_t blen = flen - PSW_FRAME_CRC;
    uint32_t want = be32(b + blen);
    if (r->crc != want) {
        snprintf(r->why, sizeof r->why, "CRC32C mismatch on a frame of %zu "
                 "bytes (got %08x, computed %08x)", blen, want, r->crc);
        return PSW_EPROTO;
    }
    *body = b;
    *len = blen;
    r->off += PSW_FRAME_HDR + flen;
    r->crc = 0;
    r->crc_done = 0;
    return 1;
}

/* ---- the guard ------------------------------------------------------ */

static uint64_t be_n(const uint8_t *p, int k)
{
    uint64_t v = 0;
    while (k--)
        v = v << 8 | *p++;
    return v;
}

long psw_guard(const uint8_t *p, size_t n, unsigned max_depth)
{
    size_t i = 0;
    uint64_t pending = 1, stack[32];
    unsigned depth = 0;

    if (max_depth > 32)
        max_depth = 32;                  /* msgpack-c's own nesting limit */
    while (pending) {
        if (i >= n)
            return 0;
        uint8_t b = p[i++];
        uint64_t len = 0, items = 0;
        int hdr = 0;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
            ;
        else if (b >= 0x80 && b <= 0x8f)
            items = 2u * (b & 0x0f);
        else if (b >= 0x90 && b <= 0x9f)
            items = b & 0x0f;
        else if (b >= 0xa0 && b <= 0xbf)
            len = b & 0x1f;
        else
            switch (b) {
            case 0xc4: case 0xd9: hdr = 1; break;
            case 0xc5: case 0xda: hdr = 2; break;
            case 0xc6: case 0xdb: hdr = 4; break;
            case 0xc7: hdr = 1; len = 1; break;
            case 0xc8: hdr = 2; len = 1; break;
            case 0xc9: hdr = 4; len = 1; break;
            case 0xca: len = 4; break;
            case 0xcb: len = 8; break;
            case 0xcc: case 0xd0: len = 1; break;
            case 0xcd: case 0xd1: len = 2; break;
            case 0xce: case 0xd2: len = 4; break;
            case 0xcf: case 0xd3: len = 8; break;
            case 0xd4: len = 2; break;
            case 0xd5: len = 3; break;
            case 0xd6: len = 5; break;
            case 0xd7: len = 9; break;
            case 0xd8: len = 17; break;
            case 0xdc: case 0xde: hdr = 2; break;
            case 0xdd: case 0xdf: hdr = 4; break;
            default: return -1;          /* 0xc1, never used */
            }
        if (hdr) {
            if (n - i < (size_t)hdr)
                return 0;
            uint64_t v = be_n(p + i, hdr);
            i += (size_t)hdr;
            if (b == 0xdc || b == 0xdd)
                items = v;
            else if (b == 0xde || b == 0xdf)
                items = 2 * v;
            else
                len += v;
        }
        if (len) {
            if (n - i < len)
                return 0;
            i += (size_t)len;
        }
        pending--;
        if (depth)
            stack[depth - 1]--;
        if (items) {
            /* Every element takes at least one byte: a count larger than
             * what is left can never be satisfied, so it is hostile. */
            if (items > n - i)
                return -1;
            if (++depth > max_depth)
                return -1;
            stack[depth - 1] = items;
            pending += items;
        }
        while (depth && stack[depth - 1] == 0)
            depth--;
    }
    return (long)i;
}

int psw_frame_decode(const char *body, size_t len, msgpack_zone *zone,
                     msgpack_object *obj, char *err, size_t errlen)
{
    long g = psw_guard((const uint8_t *)body, len, 8);
    if (g <= 0) {
        snprintf(err, errlen, "%s", g == 0 ? "truncated msgpack value"
                                 : "malformed or hostile msgpack value");
        return PSW_EPROTO;
    }
    if ((size_t)g != len) {
        snprintf(err, errlen, "%zu bytes after the msgpack value",
                 len - (size_t)g);
        return PSW_EPROTO;
    }
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack(body, len, &off, zone, obj);
    if (rc != MSGPACK_UNPACK_SUCCESS || off != len) {
        snprintf(err, errlen, "msgpack decode failed (%d)", (int)rc);
        return PSW_EPROTO;
    }
    return 0;
}

/* ---- writing -------------------------------------------------------- */

void psw_out_init(psw_out *o)
{
    memset(o, 0, sizeof *o);
    msgpack_sbuffer_init(&o->sb);
    msgpack_packer_init(&o->pk, &o->sb, msgpack_sbuffer_write);
    o->frame_start = SIZE_MAX;
}

void psw_out_destroy(psw_out *o)
{
    msgpack_sbuffer_destroy(&o->sb);
    free(o->segs);
    memset(o, 0, sizeof *o);
}

void psw_out_reset(psw_out *o)
{
    o->sb.size = 0;
    o->nsegs = 0;
    o->frame_start = SIZE_MAX;
    o->frame_ref = 0;
    o->frame_seg = 0;
    o->total = 0;
    o->oom = 0;
}

static void out_raw(psw_out *o, const void *p, size_t n)
{
    if (msgpack_sbuffer_write(&o->sb, p, n) != 0)
        o->oom = 1;
}

void psw_out_frame_begin(psw_out *o)
{
    /* Length and array32 header, both filled in by psw_out_frame_end:
     * messages are counted as they are packed, so a frame can be closed
     * early when the next message would not fit. */
    static const char hdr[PSW_FRAME_HDR + 5] = { 0, 0, 0, 0, (char)0xdd };
    o->frame_start = o->sb.size;
    o->frame_ref = 0;
    o->frame_seg = o->nsegs;
    o->frame_msgs = 0;
    out_raw(o, hdr, sizeof hdr);
}

size_t psw_out_frame_body(const psw_out *o)
{
    if (o->frame_start == SIZE_MAX)
        return 0;
    return o->sb.size - o->frame_start - PSW_FRAME_HDR + o->frame_ref;
}

static void put_be32(unsigned char *h, size_t v)
{
    h[0] = (unsigned char)(v >> 24);
    h[1] = (unsigned char)(v >> 16);
    h[2] = (unsigned char)(v >> 8);
    h[3] = (unsigned char)v;
}

size_t psw_out_frame_end(psw_out *o)
{
    if (o->oom || o->frame_start == SIZE_MAX)
        return 0;
    if (o->frame_msgs == 0) {
        /* Nothing was packed (every request was held): no empty frame. */
        o->sb.size = o->frame_start;
        o->nsegs = o->frame_seg;
        o->frame_start = SIZE_MAX;
        return 0;
    }
    size_t body = psw_out_frame_body(o);
    unsigned char *h = (unsigned char *)o->sb.data + o->frame_start;
    put_be32(h, body + PSW_FRAME_CRC);
    put_be32(h + PSW_FRAME_HDR + 1, o->frame_msgs);
    /* The body in order: packed bytes interleaved with the references. */
    uint32_t crc = 0;
    size_t at = o->frame_start + PSW_FRAME_HDR;
    for (size_t i = o->frame_seg; i < o->nsegs; i++) {
        crc = crc_update(crc, o->sb.data + at, o->segs[i].at - at);
        crc = crc_update(crc, o->segs[i].ptr, o->segs[i].len);
        at = o->segs[i].at;
    }
    crc = crc_update(crc, o->sb.data + at, o->sb.size - at);
    unsigned char tail[PSW_FRAME_CRC];
    put_be32(tail, crc);
    out_raw(o, tail, sizeof tail);
    o->frame_start = SIZE_MAX;
    o->total = o->sb.size;
    for (size_t i = 0; i < o->nsegs; i++)
        o->total += o->segs[i].len;
    return body;
}

void psw_out_bin(psw_out *o, const void *p, size_t len)
{
    if (msgpack_pack_bin(&o->pk, len) != 0) {
        o->oom = 1;
        return;
    }
    if (len < PSW_REF_MIN) {
        if (len)
            out_raw(o, p, len);
        return;
    }
    if (o->nsegs == o->segcap) {
        size_t cap = o->segcap ? 2 * o->segcap : 8;
        psw_seg *ns = realloc(o->segs, cap * sizeof *ns);
        if (!ns) {
            o->oom = 1;
            return;
        }
        o->segs = ns;
        o->segcap = cap;
    }
    o->segs[o->nsegs++] = (psw_seg){ o->sb.size, p, len };
    o->frame_ref += len;
}

char *psw_out_bin_reserve(psw_out *o, size_t len)
{
    if (msgpack_pack_bin(&o->pk, len) != 0) {
        o->oom = 1;
        return NULL;
    }
    /* Room for the payload plus the few small fields packed after it, so
     * packing those does not move the buffer under the caller's pointer. */
    size_t need = len + PSW_RESERVE_SLACK;
    if (o->sb.alloc - o->sb.size < need) {
        size_t cap = o->sb.alloc ? o->sb.alloc : 8192;
        while (cap - o->sb.size < need)
            cap *= 2;
        char *nd = realloc(o->sb.data, cap);
        if (!nd) {
            o->oom = 1;
            return NULL;
        }
        o->sb.data = nd;
        o->sb.alloc = cap;
    }
    char *p = o->sb.data + o->sb.size;
    o->sb.size += len;
    return p;
}

size_t psw_out_iovcnt(const psw_out *o)
{
    return 2 * o->nsegs + 1;
}

void psw_out_iov(const psw_out *o, struct iovec *iov)
{
    size_t at = 0, k = 0;
    for (size_t i = 0; i < o->nsegs; i++) {
        iov[k++] = (struct iovec){ o->sb.data + at, o->segs[i].at - at };
        iov[k++] = (struct iovec){ (void *)(uintptr_t)o->segs[i].ptr,
                                   o->segs[i].len };
        at = o->segs[i].at;
    }
    iov[k++] = (struct iovec){ o->sb.data + at, o->sb.size - at };
}
