/* Framing and the msgpack guard: see frame.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <isa-l/crc.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

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

#define SCAN_PIECE (16 * 1024)

/* ---- non-finite floats ---------------------------------------------- */

/* A float32 is NaN or infinite exactly when its 8 exponent bits are all
 * set. The loops OR the comparisons together, with no early exit, so
 * they vectorise; a hit is rare. */
#define EXP_MASK 0x7f800000u

static int nonfinite_plain(const unsigned char *p, size_t nfloats)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < nfloats; i++) {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        acc |= (v & EXP_MASK) == EXP_MASK;
    }
    return acc != 0;
}

#ifdef HAVE_AVX2
__attribute__((target("avx2")))
static int nonfinite_avx2(const unsigned char *p, size_t n)
{
    const __m256i m = _mm256_set1_epi32((int)EXP_MASK);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(p + i));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 32));
        __m256i x2 = _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 64));
        __m256i x3 = _mm256_loadu_si256((const __m256i *)(const void *)(p + i + 96));
        a0 = _mm256_or_si256(a0, _mm256_cmpeq_epi32(_mm256_and_si256(x0, m), m));
        a1 = _mm256_or_si256(a1, _mm256_cmpeq_epi32(_mm256_and_si256(x1, m), m));
        a2 = _mm256_or_si256(a2, _mm256_cmpeq_epi32(_mm256_and_si256(x2, m), m));
        a3 = _mm256_or_si256(a3, _mm256_cmpeq_epi32(_mm256_and_si256(x3, m), m));
    }
    a0 = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
    return !_mm256_testz_si256(a0, a0) || nonfinite_plain(p + i, (n - i) / 4);
}

/* The same, 64 bytes a load. */

__attribute__((target("avx512f")))
static int nonfinite_avx512(const unsigned char *p, size_t n)
{
    const __m512i m = _mm512_set1_epi32((int)EXP_MASK);
    __mmask16 k = 0;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        __m512i x0 = _mm512_loadu_si512((const void *)(p + i));
        __m512i x1 = _mm512_loadu_si512((const void *)(p + i + 64));
        __m512i x2 = _mm512_loadu_si512((const void *)(p + i + 128));
        __m512i x3 = _mm512_loadu_si512((const void *)(p + i + 192));
        k |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(x0, m), m) |
             _mm512_cmpeq_epi32_mask(_mm512_and_si512(x1, m), m) |
             _mm512_cmpeq_epi32_mask(_mm512_and_si512(x2, m), m) |
             _mm512_cmpeq_epi32_mask(_mm512_and_si512(x3, m), m);
    }
    return k != 0 || nonfinite_plain(p + i, (n - i) / 4);
}
#endif

int psw_nonfinite(const void *p, size_t n)
{
#ifdef HAVE_AVX2
    if (n >= 256 && __builtin_cpu_supports("avx512f"))
        return nonfinite_avx512(p, n);
    if (n >= 128 && __builtin_cpu_supports("avx2"))
        return nonfinite_avx2(p, n);
#endif
    return nonfinite_plain(p, n / 4);
}

/* ---- reading -------------------------------------------------------- */

static void scan_reset(psw_scan *s, int on)
{
    memset(s, 0, sizeof *s);
    s->pending = 1;
    s->broken = !on;             /* off: every lookup reads the bytes */
}

void psw_reader_init(psw_reader *r, size_t max_frame)
{
    memset(r, 0, sizeof *r);
    r->max_frame = max_frame;
    scan_reset(&r->cur, 0);
    scan_reset(&r->last, 0);
}

void psw_reader_scan(psw_reader *r, int on)
{
    r->scan_on = on;
    if (r->len == r->off)        /* no frame begun: this one too */
        scan_reset(&r->cur, on);
}

void psw_reader_destroy(psw_reader *r)
{
    free(r->buf);
    free(r->sink);
    memset(r, 0, sizeof *r);
}

static uint32_t be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
           (uint32_t)u[2] << 8 | (uint32_t)u[3];
}

/* The capacity the buffer needs before the next read: room for a chunk,
 * growing toward the whole frame once its length is known (psw_reader_next
 * has refused oversized lengths already), at most doubling per read, so
 * that a frame that stops half-way holds about what it sent, not what it
 * announced. Consumed bytes do not count: space() drops them first. */
static size_t reader_need(const psw_reader *r)
{
    size_t len = r->len - r->off, want = PSW_READ_CHUNK;
    if (len >= PSW_FRAME_HDR) {
        size_t frame = PSW_FRAME_HDR + (size_t)be32(r->buf + r->off) -
                       r->holes;
        if (frame > len) {
            size_t rest = frame - len;
            size_t step = len > PSW_READ_CHUNK ? len : PSW_READ_CHUNK;
            if (rest > want)
                want = rest < step ? rest : step;
        }
    }
    return len + want;
}

size_t psw_reader_grow(const psw_reader *r)
{
    size_t need = reader_need(r);
    return need > r->cap ? need - r->cap : 0;
}

void psw_reader_trim(psw_reader *r)
{
    if (r->off != r->len)
        return;
    free(r->buf);
    r->buf = NULL;
    r->off = r->len = r->cap = 0;
}

int psw_reader_space(psw_reader *r, char **p, size_t *n)
{
    if (r->hole_left) {
        r->in_hole = 1;
        if (!r->hole_discard) {
            *p = r->hole_dst;
            *n = r->hole_left;
            return 0;
        }
        if (!r->sink && !(r->sink = malloc(PSW_READ_CHUNK)))
            return -1;
        *p = r->sink;
        *n = r->hole_left < PSW_READ_CHUNK ? r->hole_left : PSW_READ_CHUNK;
        return 0;
    }
    r->in_hole = 0;
    size_t need = reader_need(r);
    /* Consumed bytes are dropped here, never while a frame view handed
     * out by psw_reader_next may still be in use. */
    if (r->off > 0) {
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->len -= r->off;
        r->off = 0;
    }
    if (r->cap < need) {
        char *nb = realloc(r->buf, need);
        if (!nb)
            return -1;
        r->buf = nb;
        r->cap = need;
    }
    *p = r->buf + r->len;
    *n = r->cap - r->len;
    return 0;
}

static uint64_t be_n(const uint8_t *p, int k)
{
    uint64_t v = 0;
    while (k--)
        v = v << 8 | *p++;
    return v;
}

/* What a msgpack value's first byte t says about it, for the guard and
 * the scan alike: the payload bytes (*len) and the elements (*items)
 * that follow, and the width of the big-endian length or count after t
 * (the return value, 0, 1, 2 or 4; mp_count adds what it says). -1 for
 * 0xc1, which msgpack never uses. */
static int mp_head(uint8_t t, uint64_t *len, uint64_t *items)
{
    *len = *items = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3)
        return 0;                        /* fixint, nil, bool */
    if (t <= 0x8f) {
        *items = 2u * (t & 0x0f);        /* fixmap */
        return 0;
    }
    if (t <= 0x9f) {
        *items = t & 0x0f;               /* fixarray */
        return 0;
    }
    if (t <= 0xbf) {
        *len = t & 0x1f;                 /* fixstr */
        return 0;
    }
    switch (t) {
    case 0xc4: case 0xd9: return 1;      /* bin 8, str 8 */
    case 0xc5: case 0xda: return 2;
    case 0xc6: case 0xdb: return 4;
    case 0xc7: *len = 1; return 1;       /* ext: a type byte too */
    case 0xc8: *len = 1; return 2;
    case 0xc9: *len = 1; return 4;
    case 0xca: case 0xce: case 0xd2: *len = 4; return 0;
    case 0xcb: case 0xcf: case 0xd3: *len = 8; return 0;
    case 0xcc: case 0xd0: *len = 1; return 0;
    case 0xcd: case 0xd1: *len = 2; return 0;
    case 0xd4: *len = 2; return 0;       /* fixext 1..16 */
    case 0xd5: *len = 3; return 0;
    case 0xd6: *len = 5; return 0;
    case 0xd7: *len = 9; return 0;
    case 0xd8: *len = 17; return 0;
    case 0xdc: case 0xde: return 2;      /* array 16, map 16 */
    case 0xdd: case 0xdf: return 4;
    default: return -1;
    }
}

/* Adds the length or count v read after t. */
static void mp_count(uint8_t t, uint64_t v, uint64_t *len, uint64_t *items)
{
    if (t == 0xdc || t == 0xdd)
        *items = v;
    else if (t == 0xde || t == 0xdf)
        *items = 2 * v;
    else
        *len += v;
}

/* Follows the msgpack structure of a body of blen bytes, of which avail
 * are here, from where the walk stopped (see psw_scan in frame.h). Any
 * byte psw_guard would refuse makes the walk give up (broken): the frame
 * is then refused by the guard, or its payloads are read at lookup. */
static void scan_walk(psw_scan *s, const uint8_t *b, size_t avail,
                      size_t blen)
{
    while (!s->broken) {
        if (s->bin) {
            size_t take = avail - s->pos < s->bin ? avail - s->pos : s->bin;
            size_t upto = (s->pos + take - s->bin_at) & ~(size_t)3;
            if (upto > s->bin_done) {
                if (!s->bin_hit && psw_nonfinite(b + s->bin_at + s->bin_done,
                                                 upto - s->bin_done))
                    s->bin_hit = 1;
                s->bin_done = upto;
            }
            s->pos += take;
            s->bin -= take;
            if (s->bin)
                return;
            if (s->bin_hit) {
                if (s->nhits < PSW_SCAN_HITS)
                    s->hits[s->nhits++] = s->bin_at;
                else
                    s->overflow = 1;
            }
            continue;
        }
        if (s->skip) {
            size_t take = avail - s->pos < s->skip ? avail - s->pos : s->skip;
            s->pos += take;
            s->skip -= take;
            if (s->skip)
                return;
            continue;
        }
        if (!s->pending || s->pos >= avail)
            return;
        size_t i = s->pos;
        uint8_t t = b[i++];
        uint64_t len, items;
        int hdr = mp_head(t, &len, &items);
        if (hdr < 0) {
            s->broken = 1;
            return;
        }
        int isbin = t >= 0xc4 && t <= 0xc6;
        if (hdr) {
            if (avail - i < (size_t)hdr)
                return;              /* the header is not all here yet */
            mp_count(t, be_n(b + i, hdr), &len, &items);
            i += (size_t)hdr;
        }
        /* A field of a message (the frame is level 1, a message level 2)
         * at index 5 or later: values. */
        int values = isbin && s->depth == 2 &&
                     s->total[1] - s->left[1] >= 5;
        s->pending--;
        if (s->depth)
            s->left[s->depth - 1]--;
        s->pos = i;
        if (len > blen - i) {
            s->broken = 1;
            return;
        }
        if (values && len) {
            s->bin = (size_t)len;
            s->bin_at = i;
            s->bin_done = 0;
            s->bin_hit = 0;
        } else
            s->skip = (size_t)len;
        if (items) {
            if (items > blen - i || s->depth == PSW_SCAN_DEPTH) {
                s->broken = 1;
                return;
            }
            s->left[s->depth] = s->total[s->depth] = items;
            s->depth++;
            s->pending += items;
        }
        while (s->depth && s->left[s->depth - 1] == 0)
            s->depth--;
    }
}

/* Feeds the CRC with the body bytes of the frame at off that have
 * arrived, up to the end of its body (and the scan, when on). */
static void reader_crc(psw_reader *r)
{
    size_t have = r->len - r->off;
    if (have <= PSW_FRAME_HDR)
        return;
    uint32_t flen = be32(r->buf + r->off);
    if (flen < PSW_FRAME_CRC + 1 || flen - PSW_FRAME_CRC > r->max_frame)
        return;                      /* psw_reader_next refuses it */
    size_t body = flen - PSW_FRAME_CRC - r->holes;
    size_t avail = have - PSW_FRAME_HDR;
    size_t upto = avail < body ? avail : body;
    const char *b = r->buf + r->off + PSW_FRAME_HDR;
    /* A piece at a time, so that the scan reads what the CRC just read
     * while it is still in the first-level cache. */
    while (upto > r->crc_done) {
        size_t end = upto - r->crc_done > SCAN_PIECE ? r->crc_done + SCAN_PIECE
                                                     : upto;
        r->crc = crc_update(r->crc, b + r->crc_done, end - r->crc_done);
        r->crc_done = end;
        if (!r->cur.broken)
            scan_walk(&r->cur, (const uint8_t *)b, end, body);
    }
}

void psw_reader_commit(psw_reader *r, size_t n)
{
    if (r->in_hole) {
        /* Hole bytes come in body order: nothing is buffered meanwhile. */
        r->in_hole = 0;
        r->crc = crc_update(r->crc, r->hole_discard ? r->sink : r->hole_dst,
                            n);
        if (!r->hole_discard)
            r->hole_dst += n;
        r->hole_left -= n;
        if (!r->hole_left) {
            r->hole_dst = NULL;
            r->hole_discard = 0;
        }
        return;
    }
    r->len += n;
    reader_crc(r);
}

int psw_reader_divert(psw_reader *r, size_t at, size_t hdr, char *dst,
                      size_t len)
{
    size_t have = r->len - r->off;
    if (r->hole_left || have < PSW_FRAME_HDR || at < hdr || len == 0)
        return -1;
    uint32_t flen = be32(r->buf + r->off);
    if (flen < PSW_FRAME_CRC + 1 || flen - PSW_FRAME_CRC > r->max_frame)
        return -1;
    size_t body = flen - PSW_FRAME_CRC - r->holes;
    size_t stored = have - PSW_FRAME_HDR;
    if (stored >= body || at > stored || len > body - at ||
        stored - at >= len)
        return -1;
    reader_crc(r);                   /* every buffered byte, header too */
    char *b = r->buf + r->off + PSW_FRAME_HDR;
    size_t moved = stored - at;
    memcpy(dst, b + at, moved);
    memset(b + at - hdr + 1, 0, hdr - 1);   /* an empty BIN, same size */
    r->len -= moved;
    r->crc_done = at;
    r->holes += len;
    r->hole_dst = dst + moved;
    r->hole_left = len - moved;
    r->hole_discard = 0;
    r->cur.broken = 1;               /* the scan cannot follow a hole */
    return 0;
}

void psw_reader_undivert(psw_reader *r)
{
    if (r->hole_left)
        r->hole_discard = 1;
}

size_t psw_reader_cut(const psw_reader *r)
{
    if (r->hole_left)            /* the frame at off comes into a hole */
        return r->len - r->off + r->holes - r->hole_left;
    size_t at = r->off, holes = r->holes;    /* the frame at off's */
    while (r->len - at >= PSW_FRAME_HDR) {
        size_t flen = be32(r->buf + at), have = r->len - at + holes;
        if (have < PSW_FRAME_HDR + flen)
            break;
        at += PSW_FRAME_HDR + flen - holes;
        holes = 0;
    }
    return r->len - at + holes;
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
    if (have - PSW_FRAME_HDR < flen - r->holes || r->hole_left)
        return 0;
    reader_crc(r);
    const char *b = r->buf + r->off + PSW_FRAME_HDR;
    size_t blen = flen - PSW_FRAME_CRC - r->holes;
    uint32_t want = be32(b + blen);
    if (r->crc != want) {
        snprintf(r->why, sizeof r->why, "CRC32C mismatch on a frame of %zu "
                 "bytes (got %08x, computed %08x)", blen, want, r->crc);
        return PSW_EPROTO;
    }
    *body = b;
    *len = blen;
    r->last = r->cur;
    /* A walk that did not end with the body lost its way: unknown. */
    if (r->last.pending || r->last.bin || r->last.skip ||
        r->last.pos != blen)
        r->last.broken = 1;
    r->last_body = b;
    r->last_len = flen - r->holes;
    r->last_crc = r->crc;
    scan_reset(&r->cur, r->scan_on);
    r->off += PSW_FRAME_HDR + flen - r->holes;
    r->holes = 0;
    r->crc = 0;
    r->crc_done = 0;
    return 1;
}

int psw_reader_text(const psw_reader *r, char *out, size_t cap)
{
    const unsigned char *p = (const unsigned char *)r->buf + r->off;
    size_t n = r->len - r->off, k = 0;
    while (k < n && k + 1 < cap && p[k] >= 0x20 && p[k] < 0x7f)
        k++;
    if (k < 4)
        return 0;
    memcpy(out, p, k);
    out[k] = '\0';
    return 1;
}

void psw_reader_unread(psw_reader *r)
{
    r->off -= PSW_FRAME_HDR + r->last_len;
    r->crc = r->last_crc;
    r->crc_done = r->last_len - PSW_FRAME_CRC;
    r->cur = r->last;
}

int psw_reader_nonfinite(const psw_reader *r, const char *p, size_t len)
{
    const psw_scan *s = &r->last;
    size_t blen = r->last_len - PSW_FRAME_CRC;
    if (len < 4)
        return 0;
    if (s->broken || s->overflow || !r->last_body || p < r->last_body ||
        (size_t)(p - r->last_body) > blen ||
        len > blen - (size_t)(p - r->last_body))
        return psw_nonfinite(p, len);
    size_t at = (size_t)(p - r->last_body);
    uint32_t lo = 0, hi = s->nhits;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (s->hits[mid] < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nhits && s->hits[lo] == at;
}

/* ---- the guard ------------------------------------------------------ */

long psw_guard(const uint8_t *p, size_t n, unsigned max_depth)
{
    size_t i = 0;
    uint64_t pending = 1, stack[32], all = 0;
    unsigned depth = 0;

    if (max_depth > 32)
        max_depth = 32;                  /* msgpack-c's own nesting limit */
    while (pending) {
        if (i >= n)
            return 0;
        uint8_t b = p[i++];
        uint64_t len, items;
        int hdr = mp_head(b, &len, &items);
        if (hdr < 0)
            return -1;                   /* 0xc1, never used */
        if (hdr) {
            if (n - i < (size_t)hdr)
                return 0;
            mp_count(b, be_n(p + i, hdr), &len, &items);
            i += (size_t)hdr;
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
            all += items;
            if (all > PSW_MAX_ITEMS)
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

static void free_owned(psw_out *o)
{
    for (size_t i = 0; i < o->nsegs; i++)
        if (o->segs[i].tag == PSW_TAG_OWNED)
            free((void *)(uintptr_t)o->segs[i].ptr);
    o->owned = 0;
}

void psw_out_destroy(psw_out *o)
{
    free_owned(o);
    msgpack_sbuffer_destroy(&o->sb);
    free(o->segs);
    memset(o, 0, sizeof *o);
}

void psw_out_reset(psw_out *o)
{
    free_owned(o);
    o->sb.size = 0;
    o->nsegs = 0;
    o->frame_start = SIZE_MAX;
    o->frame_ref = 0;
    o->frame_seg = 0;
    o->total = 0;
    o->oom = 0;
}

void psw_out_shrink(psw_out *o)
{
    size_t keep = 2 * o->sb.size > 8192 ? 2 * o->sb.size : 8192;
    if (o->frame_start != SIZE_MAX || o->sb.alloc <= keep)
        return;
    char *nd = realloc(o->sb.data, keep);
    if (!nd)
        return;                  /* it keeps what it had */
    o->sb.data = nd;
    o->sb.alloc = keep;
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
    if (o->frame_start == SIZE_MAX)
        return 0;
    if (o->oom) {
        o->frame_start = SIZE_MAX;   /* closed: the buffer is given up */
        return 0;
    }
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

void psw_out_bin_begin(psw_out *o, size_t len)
{
    if (msgpack_pack_bin(&o->pk, len) != 0)
        o->oom = 1;
}

void psw_out_bin_piece(psw_out *o, const void *p, size_t len, uint32_t tag)
{
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
    o->segs[o->nsegs++] = (psw_seg){ o->sb.size, p, len, tag };
    o->frame_ref += len;
}

void psw_out_bin(psw_out *o, const void *p, size_t len)
{
    if (msgpack_pack_bin(&o->pk, len) != 0) {
        o->oom = 1;
        return;
    }
    psw_out_bin_piece(o, p, len, 0);
}

void *psw_out_seg_own(psw_out *o, size_t i)
{
    psw_seg *g = &o->segs[i];
    void *copy = malloc(g->len);
    if (!copy)
        return NULL;
    memcpy(copy, g->ptr, g->len);
    g->ptr = copy;
    g->tag = PSW_TAG_OWNED;
    o->owned += g->len;
    return copy;
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

size_t psw_iov_skip(struct iovec *iov, size_t done)
{
    size_t k = 0;
    while (done >= iov[k].iov_len)
        done -= iov[k++].iov_len;
    iov[k].iov_base = (char *)iov[k].iov_base + done;
    iov[k].iov_len -= done;
    return k;
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
