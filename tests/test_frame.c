/* Unit tests of the wire layer: frame cutting under every split of the
 * stream, the msgpack guard against hostile counts, message round trips
 * and decoding errors. No sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../proto/addr.h"
#include "../proto/auth.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"

#include "expect.h"

/* Flattens a psw_out into one buffer, as writev would send it. */
static char *flatten(const psw_out *o, size_t *len)
{
    size_t cnt = psw_out_iovcnt(o);
    struct iovec *iov = calloc(cnt, sizeof *iov);
    psw_out_iov(o, iov);
    size_t total = 0;
    for (size_t i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    char *buf = malloc(total ? total : 1), *p = buf;
    for (size_t i = 0; i < cnt; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    free(iov);
    assert_int_equal(total, o->total);
    *len = total;
    return buf;
}

/* A stream of frames: pushes with growing payloads (some referenced). */
static char *sample_stream(size_t *len, int nframes, float *vals, size_t nvals,
                           uint64_t *keys)
{
    psw_out o;
    psw_out_init(&o);
    for (int f = 0; f < nframes; f++) {
        psw_out_frame_begin(&o);
        for (int m = 0; m < 2; m++) {
            size_t n = (size_t)(f * 400 + m + 1) % nvals;
            if (n == 0)
                n = 1;
            psw_msg msg = { .op = PSW_OP_PUSH, .ts = (uint64_t)f + 1,
                            .part = (uint32_t)m, .table = 3,
                            .keys = (const char *)keys, .nkeys = n,
                            .vals = (const char *)vals,
                            .vals_len = n * sizeof(float) };
            psw_pack_request(&o, &msg);
        }
        psw_out_frame_end(&o);
    }
    assert_false(o.oom);
    char *s = flatten(&o, len);
    psw_out_destroy(&o);
    return s;
}

/* Feeds `data` to a reader in pieces cut at the given split points and
 * checks that the frames come out whole and in order. */
static int feed_and_count(const char *data, size_t len, const size_t *cuts,
                          int ncuts, const char *whole_first, size_t first_len)
{
    psw_reader r;
    psw_reader_init(&r, 1 << 20);
    size_t at = 0;
    int frames = 0;
    for (int i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        while (at < end) {
            char *p;
            size_t n;
            assert_int_equal(psw_reader_space(&r, &p, &n), 0);
            size_t k = end - at < n ? end - at : n;
            memcpy(p, data + at, k);
            psw_reader_commit(&r, k);
            at += k;
            const char *body;
            size_t blen;
            int rc;
            while ((rc = psw_reader_next(&r, &body, &blen)) == 1) {
                if (frames == 0) {
                    assert_int_equal(blen, first_len);
                    assert_memory_equal(body, whole_first, blen);
                }
                frames++;
            }
            assert_int_equal(rc, 0);
        }
    }
    assert_int_equal(psw_reader_pending(&r), 0);
    psw_reader_destroy(&r);
    return frames;
}

static void reader_yields_same_frames_for_every_split_point(void **state)
{
    (void)state;
    uint64_t keys[2048];
    float vals[2048];
    for (int i = 0; i < 2048; i++) {
        keys[i] = (uint64_t)i * 7919;
        vals[i] = (float)i * 0.5f;
    }
    size_t len;
    char *s = sample_stream(&len, 4, vals, 2048, keys);
    /* The length counts the body and its 4-byte CRC. */
    size_t first = ((size_t)(unsigned char)s[0] << 24 |
                    (size_t)(unsigned char)s[1] << 16 |
                    (size_t)(unsigned char)s[2] << 8 | (unsigned char)s[3]) -
                   PSW_FRAME_CRC;
    for (size_t cut = 0; cut <= len; cut++) {
        int frames = feed_and_count(s, len, &cut, 1, s + 4, first);
        if (frames != 4)
            fail_msg("split at %zu: got %d frames, want 4", cut, frames);
    }
    free(s);
}

static void reader_yields_same_frames_byte_by_byte(void **state)
{
    (void)state;
    uint64_t keys[64];
    float vals[64];
    for (int i = 0; i < 64; i++) {
        keys[i] = (uint64_t)i;
        vals[i] = (float)i;
    }
    size_t len;
    char *s = sample_stream(&len, 5, vals, 64, keys);
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i;
    size_t first = ((size_t)(unsigned char)s[2] << 8 |
                    (unsigned char)s[3]) - PSW_FRAME_CRC;
    assert_int_equal(feed_and_count(s, len, cuts, (int)len, s + 4, first), 5);
    free(cuts);
    free(s);
}

static int reader_verdict(const unsigned char *bytes, size_t n, size_t max)
{
    psw_reader r;
    psw_reader_init(&r, max);
    char *p;
    size_t cap;
    assert_int_equal(psw_reader_space(&r, &p, &cap), 0);
    memcpy(p, bytes, n);
    psw_reader_commit(&r, n);
    const char *body;
    size_t blen;
    int rc = psw_reader_next(&r, &body, &blen);
    psw_reader_destroy(&r);
    return rc;
}

/* ---- non-finite values -------------------------------------------- */

static void put_float_bits(char *p, size_t i, uint32_t bits)
{
    memcpy(p + 4 * i, &bits, 4);
}

/* Every NaN and infinity pattern is found at every position and
 * alignment, whatever the length (the vector body and the scalar tail);
 * finite extremes are not; bytes after the last whole float are not
 * read as a float. */
static void nonfinite_finds_nan_and_inf_anywhere(void **state)
{
    (void)state;
    static const uint32_t bad[] = { 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                    0xffffffffu, 0x7f800001u };
    static const uint32_t good[] = { 0x7f7fffffu, 0xff7fffffu, 0x00000001u,
                                     0x80000000u, 0x3f800000u, 0x007fffffu };
    char *buf = malloc(4 * 300 + 8);
    for (size_t align = 0; align < 4; align++) {
        char *p = buf + align;
        for (size_t n = 1; n <= 300; n += n < 40 ? 1 : 37) {
            for (size_t i = 0; i < n; i++)
                put_float_bits(p, i, good[i % 6]);
            EXPECT_INT(psw_nonfinite(p, 4 * n), 0, "%zu finite floats", n);
            put_float_bits(p, n, 0x7f800000u);   /* just past the end */
            EXPECT_INT(psw_nonfinite(p, 4 * n + 3), 0,
                       "%zu finite floats and 3 more bytes", n);
            for (size_t i = 0; i < n; i += n > 50 ? 13 : 1) {
                uint32_t was;
                memcpy(&was, p + 4 * i, 4);
                put_float_bits(p, i, bad[i % 5]);
                EXPECT_INT(psw_nonfinite(p, 4 * n), 1, "pattern %08x at %zu "
                           "of %zu (alignment %zu)", bad[i % 5], i, n, align);
                put_float_bits(p, i, was);
            }
        }
    }
    free(buf);
}

/* A frame with the payloads the scan looks at: keys that read as NaN when
 * taken as floats (never values), values with an infinity in a large
 * referenced payload, finite values. */
static char *scan_frame(size_t *len, const uint64_t *keys, const float *big,
                        const float *small)
{
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_msg m1 = { .op = PSW_OP_PUSH, .ts = 1, .part = 0, .table = 1,
                   .keys = (const char *)keys, .nkeys = 4,
                   .vals = (const char *)small, .vals_len = 4 * sizeof(float) };
    psw_msg m2 = { .op = PSW_OP_PUSH_RANGE, .ts = 2, .part = 0, .table = 0,
                   .first = 0, .count = 3000,
                   .vals = (const char *)big, .vals_len = 3000 * 4 };
    psw_msg m3 = { .op = PSW_OP_PULL, .ts = 3, .part = 0, .table = 1,
                   .keys = (const char *)keys, .nkeys = 4 };
    psw_msg m4 = { .op = PSW_OP_PUSHPULL, .ts = 4, .part = 1, .table = 1,
                   .keys = (const char *)keys, .nkeys = 4,
                   .vals = (const char *)small, .vals_len = 4 * sizeof(float) };
    psw_pack_request(&o, &m1);
    psw_pack_request(&o, &m2);
    psw_pack_request(&o, &m3);
    psw_pack_request(&o, &m4);
    psw_out_frame_end(&o);
    char *f = flatten(&o, len);
    psw_out_destroy(&o);
    return f;
}

/* The reader's scan, fed the frame in every kind of cut, finds the
 * infinity in the range push's values and nothing in the others (the
 * keys, which hold NaN patterns, are not values); a lookup agrees with
 * reading the bytes. */
static void reader_scan_finds_nonfinite_values_whatever_the_cut(void **state)
{
    (void)state;
    uint64_t keys[4] = { 0x7fc000007f800000ull, 1, 0xffffffffffffffffull,
                         2 };
    static float big[3000];
    float small[4] = { 1, -2, 3.5f, 0 };
    for (int i = 0; i < 3000; i++)
        big[i] = (float)i;
    uint32_t inf = 0xff800000u;
    memcpy(&big[2999], &inf, 4);
    size_t len;
    char *f = scan_frame(&len, keys, big, small);
    size_t steps[] = { 1, 3, 7, 4096, 100000 };
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        psw_reader r;
        psw_reader_init(&r, 1 << 20);
        psw_reader_scan(&r, 1);
        const char *body = NULL;
        size_t blen = 0, at = 0;
        int rc = 0;
        while (at < len && rc == 0) {
            char *p;
            size_t n;
            assert_int_equal(psw_reader_space(&r, &p, &n), 0);
            size_t k = len - at < steps[s] ? len - at : steps[s];
            if (k > n)
                k = n;
            memcpy(p, f + at, k);
            psw_reader_commit(&r, k);
            at += k;
            rc = psw_reader_next(&r, &body, &blen);
        }
        EXPECT_INT(rc, 1, "frame read in steps of %zu", steps[s]);
        EXPECT_INT(r.last.broken, 0, "scan lost its way (steps %zu)",
                   steps[s]);
        EXPECT_INT(r.last.nhits, 1, "payloads hit (steps %zu)", steps[s]);
        msgpack_zone z;
        msgpack_zone_init(&z, 4096);
        msgpack_object obj;
        const msgpack_object *msgs;
        char err[128];
        assert_int_equal(psw_frame_decode(body, blen, &z, &obj, err,
                                          sizeof err), 0);
        assert_int_equal(psw_frame_messages(&obj, 8, &msgs, err, sizeof err),
                         4);
        for (int i = 0; i < 4; i++) {
            psw_msg m;
            assert_int_equal(psw_msg_decode(&msgs[i], &m, err, sizeof err), 0);
            if (!m.vals_len)
                continue;
            EXPECT_INT(psw_reader_nonfinite(&r, m.vals, m.vals_len),
                       psw_nonfinite(m.vals, m.vals_len),
                       "message %d (steps %zu)", i, steps[s]);
            EXPECT_INT(psw_reader_nonfinite(&r, m.vals, m.vals_len), i == 1,
                       "message %d (steps %zu)", i, steps[s]);
        }
        msgpack_zone_destroy(&z);
        psw_reader_destroy(&r);
    }
    free(f);
}

/* A frame put back comes out again, whole and with its scan; then the
 * next one. */
static void reader_unread_gives_the_same_frame_again(void **state)
{
    (void)state;
    uint64_t keys[4] = { 5, 6, 7, 8 };
    static float big[3000];
    float small[4] = { 0 };
    uint32_t nan = 0x7fc00000u;
    memcpy(&big[10], &nan, 4);
    size_t len;
    char *f = scan_frame(&len, keys, big, small);
    psw_reader r;
    psw_reader_init(&r, 1 << 20);
    psw_reader_scan(&r, 1);
    for (int copy = 0; copy < 2; copy++) {
        char *p;
        size_t n;
        while (psw_reader_space(&r, &p, &n) == 0 && n < len)
            ;
        memcpy(p, f, len);
        psw_reader_commit(&r, len);
    }
    const char *b1, *b2, *b3;
    size_t l1, l2, l3;
    assert_int_equal(psw_reader_next(&r, &b1, &l1), 1);
    psw_reader_unread(&r);
    EXPECT_INT(psw_reader_pending(&r), 2 * len, "bytes after unread");
    assert_int_equal(psw_reader_next(&r, &b2, &l2), 1);
    EXPECT_PTR(b2, b1, "the frame given again");
    EXPECT_INT(l2, l1, "its length");
    EXPECT_INT(r.last.nhits, 1, "its scan");
    assert_int_equal(psw_reader_next(&r, &b3, &l3), 1);
    assert_memory_equal(b3, b1, l1);
    EXPECT_INT(psw_reader_next(&r, &b3, &l3), 0, "a third frame");
    psw_reader_destroy(&r);
    free(f);
}

/* Gives the reader the next n bytes of f, *fed of them given so far,
 * through its space (the buffer, or a hole's memory). */
static void feed(psw_reader *r, const char *f, size_t *fed, size_t n)
{
    while (n > 0) {
        char *p;
        size_t room;
        assert_int_equal(psw_reader_space(r, &p, &room), 0);
        size_t k = n < room ? n : room;
        memcpy(p, f + *fed, k);
        psw_reader_commit(r, k);
        *fed += k;
        n -= k;
    }
}

/* What a stream that ends now cuts short: the bytes of a frame begun,
 * past every complete frame, whether those were taken yet or not. */
static void reader_says_what_an_end_now_would_cut_short(void **state)
{
    (void)state;
    uint64_t keys[4] = { 1, 2, 3, 4 };
    static float big[3000];
    float small[4] = { 0 };
    size_t len;
    char *f = scan_frame(&len, keys, big, small);
    psw_reader r;
    psw_reader_init(&r, 1 << 20);
    EXPECT_INT(psw_reader_cut(&r), 0, "nothing received");
    size_t sent[] = { 3, len - 3, len, 10, len - 10 - 1, 1 };
    size_t want[] = { 3, 0, 0, 10, len - 1, 0 };
    for (int i = 0; i < 6; i++) {
        size_t done = 0;
        for (int k = 0; k < i; k++)
            done += sent[k];
        char *p;
        size_t n;
        while (psw_reader_space(&r, &p, &n) == 0 && n < sent[i])
            ;
        memcpy(p, f + done % len, sent[i]);
        psw_reader_commit(&r, sent[i]);
        EXPECT_INT(psw_reader_cut(&r), want[i], "after piece %d", i);
    }
    const char *b;
    size_t l;
    assert_int_equal(psw_reader_next(&r, &b, &l), 1);
    EXPECT_INT(psw_reader_cut(&r), 0, "after one of three frames is taken");
    assert_int_equal(psw_reader_next(&r, &b, &l), 1);
    assert_int_equal(psw_reader_next(&r, &b, &l), 1);
    EXPECT_INT(psw_reader_cut(&r), 0, "after all three");
    psw_reader_destroy(&r);
    /* A payload received straight into the caller's memory (a hole)
     * counts as received as its bytes come. */
    psw_reader_init(&r, 1 << 20);
    static const unsigned char bin[] = { 0xc5, 0x2e, 0xe0 };   /* 12000 */
    const char *h = NULL;
    for (size_t i = 0; !h && i + sizeof bin <= len; i++)
        if (!memcmp(f + i, bin, sizeof bin))
            h = f + i;
    assert_non_null(h);
    size_t at = (size_t)(h - f) + sizeof bin - 4;   /* body offset */
    static char dst[12000];
    size_t fed = 0;
    feed(&r, f, &fed, 4 + at + 100);
    EXPECT_INT(psw_reader_cut(&r), 4 + at + 100, "before the hole");
    assert_int_equal(psw_reader_divert(&r, at, sizeof bin, dst, 12000), 0);
    EXPECT_INT(psw_reader_cut(&r), 4 + at + 100, "as the hole opens");
    feed(&r, f, &fed, 5000);
    EXPECT_INT(psw_reader_cut(&r), 4 + at + 5100, "in the hole");
    feed(&r, f, &fed, 12000 - 5100);
    EXPECT_INT(psw_reader_cut(&r), 4 + at + 12000, "the hole filled");
    feed(&r, f, &fed, len - fed);
    EXPECT_INT(psw_reader_cut(&r), 0, "the frame whole");
    const char *body;
    size_t blen;
    assert_int_equal(psw_reader_next(&r, &body, &blen), 1);
    assert_memory_equal(dst, h + sizeof bin, 12000);
    psw_reader_destroy(&r);
    free(f);
}

/* A frame that announces 8 MiB and sends 100 KiB makes the buffer grow
 * with what came, not to what was announced. */
static void reader_buffer_grows_with_the_bytes_that_arrive(void **state)
{
    (void)state;
    psw_reader r;
    psw_reader_init(&r, 64 << 20);
    const unsigned char hdr[4] = { 0x00, 0x80, 0x00, 0x00 };   /* 8 MiB */
    size_t sent = 0;
    char *p;
    size_t n;
    while (sent < 100 * 1024) {
        assert_int_equal(psw_reader_space(&r, &p, &n), 0);
        size_t k = n < 4096 ? n : 4096;
        memset(p, 0x90, k);
        if (sent == 0)
            memcpy(p, hdr, 4);
        psw_reader_commit(&r, k);
        sent += k;
        const char *b;
        size_t l;
        assert_int_equal(psw_reader_next(&r, &b, &l), 0);
    }
    if (r.cap > 2 * sent + 64 * 1024)
        fail_msg("buffer of %zu bytes for %zu received (8 MiB announced)",
                 r.cap, sent);
    psw_reader_destroy(&r);
}

static void reader_refuses_oversized_length_before_buffering(void **state)
{
    (void)state;
    const unsigned char huge[] = { 0xff, 0xff, 0xff, 0xff };
    assert_int_equal(reader_verdict(huge, 4, 64 << 20), PSW_ETOOBIG);
    /* Lengths count the body and the CRC: a 4097-byte body is 4101. */
    const unsigned char over[] = { 0x00, 0x00, 0x10, 0x05 };
    assert_int_equal(reader_verdict(over, 4, 4096), PSW_ETOOBIG);
    const unsigned char exact[] = { 0x00, 0x00, 0x10, 0x04 }; /* 4096 */
    assert_int_equal(reader_verdict(exact, 4, 4096), 0);       /* waits */
}

static void reader_refuses_empty_frame(void **state)
{
    (void)state;
    const unsigned char zero[] = { 0, 0, 0, 0 };
    assert_int_equal(reader_verdict(zero, 4, 4096), PSW_EPROTO);
    /* A CRC with no body before it. */
    const unsigned char crc_only[] = { 0, 0, 0, 4, 0, 0, 0, 0 };
    assert_int_equal(reader_verdict(crc_only, 8, 4096), PSW_EPROTO);
}

static void crc32c_is_the_castagnoli_crc_and_chains(void **state)
{
    (void)state;
    /* The check value of CRC-32C (RFC 3720, appendix B.4). */
    EXPECT_U64(psw_crc32c(0, "123456789", 9), 0xe3069283u, "crc of 1..9");
    uint32_t part = psw_crc32c(0, "1234", 4);
    EXPECT_U64(psw_crc32c(part, "56789", 5), 0xe3069283u, "chained");
    EXPECT_U64(psw_crc32c(0, "", 0), 0, "crc of nothing");
}

/* After a partial write, the rest starts at the first iovec not written
 * whole, advanced past its written bytes: mid-iovec, at a boundary, and
 * past empty iovecs. */
static void iov_skip_finds_where_the_rest_starts(void **state)
{
    (void)state;
    char a[10], b[5], c[7];
    struct iovec iov[4];
    static const struct { size_t done, k, off; } cases[] = {
        { 0, 0, 0 }, { 3, 0, 3 }, { 10, 2, 0 }, { 11, 2, 1 }, { 15, 3, 0 },
        { 21, 3, 6 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        iov[0] = (struct iovec){ a, sizeof a };
        iov[1] = (struct iovec){ b, 0 };        /* empty: always skipped */
        iov[2] = (struct iovec){ b, sizeof b };
        iov[3] = (struct iovec){ c, sizeof c };
        size_t k = psw_iov_skip(iov, cases[i].done);
        EXPECT_U64(k, cases[i].k, "done %zu: index", cases[i].done);
        const char *base = k == 0 ? a : k == 3 ? c : b;
        size_t len = k == 0 ? sizeof a : k == 3 ? sizeof c : sizeof b;
        EXPECT_PTR(iov[k].iov_base, base + cases[i].off, "done %zu: base",
                   cases[i].done);
        EXPECT_U64(iov[k].iov_len, len - cases[i].off, "done %zu: length",
                   cases[i].done);
    }
}

/* Every single-bit flip in a frame's body or CRC is caught before the
 * body is handed out. */
static void reader_refuses_a_frame_whose_bits_were_flipped(void **state)
{
    (void)state;
    uint64_t keys[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    float vals[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    size_t len;
    char *s = sample_stream(&len, 1, vals, 8, keys);
    assert_int_equal(reader_verdict((const unsigned char *)s, len, 4096), 1);
    for (size_t byte = 4; byte < len; byte++)
        for (int bit = 0; bit < 8; bit++) {
            s[byte] ^= (char)(1 << bit);
            int rc = reader_verdict((const unsigned char *)s, len, 4096);
            if (rc != PSW_EPROTO)
                fail_msg("bit %d of byte %zu flipped: got %d, want %d", bit,
                         byte, rc, PSW_EPROTO);
            s[byte] ^= (char)(1 << bit);
        }
    psw_reader r;
    psw_reader_init(&r, 4096);
    char *p;
    size_t cap;
    assert_int_equal(psw_reader_space(&r, &p, &cap), 0);
    memcpy(p, s, len);
    p[len - 1] ^= 1;
    psw_reader_commit(&r, len);
    const char *body;
    size_t blen;
    assert_int_equal(psw_reader_next(&r, &body, &blen), PSW_EPROTO);
    EXPECT_SUBSTR(r.why, "CRC32C mismatch", "the reason");
    psw_reader_destroy(&r);
    free(s);
}

static void guard_rejects_counts_larger_than_the_bytes_left(void **state)
{
    (void)state;
    /* The 5-byte inputs that make msgpack-c reserve 512 MiB .. 128 GiB. */
    const unsigned char a[] = { 0xdd, 0x00, 0xff, 0xff, 0xff };
    const unsigned char b[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    const unsigned char m[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    const unsigned char fuzz[] = { 0x04, 0xdd, 0xd0, 0xfe, 0x2f, 0x01 };
    const unsigned char a16[] = { 0xdc, 0xff, 0xff, 0xc0 };
    assert_int_equal(psw_guard(a, sizeof a, 8), -1);
    assert_int_equal(psw_guard(b, sizeof b, 8), -1);
    assert_int_equal(psw_guard(m, sizeof m, 8), -1);
    assert_int_equal(psw_guard(fuzz + 1, sizeof fuzz - 1, 8), -1);
    assert_int_equal(psw_guard(a16, sizeof a16, 8), -1);
}

static void guard_rejects_deep_nesting_and_the_unused_byte(void **state)
{
    (void)state;
    unsigned char deep[100];
    memset(deep, 0x91, sizeof deep);      /* [[[[...]]]] */
    deep[99] = 0xc0;
    assert_int_equal(psw_guard(deep, sizeof deep, 8), -1);
    deep[0] = 0xc1;
    assert_int_equal(psw_guard(deep, 1, 8), -1);
    const unsigned char nested[] = { 0x92, 0x91, 0x01, 0x02 };  /* [[1],2] */
    assert_int_equal(psw_guard(nested, sizeof nested, 8), 4);
}

static void guard_reports_truncated_values_as_incomplete(void **state)
{
    (void)state;
    const unsigned char bin[] = { 0xc6, 0x00, 0x00, 0x10, 0x00, 1, 2, 3 };
    assert_int_equal(psw_guard(bin, sizeof bin, 8), 0);
    const unsigned char u32[] = { 0xce, 0x00, 0x01 };
    assert_int_equal(psw_guard(u32, sizeof u32, 8), 0);
}

/* msgpack-c allocates 24 bytes per container element up front: more
 * elements than a frame of 65536 seven-field messages can hold are
 * refused, however few bytes each takes. */
static void guard_caps_the_elements_of_a_frame(void **state)
{
    (void)state;
    size_t n = 1 + 5 + PSW_MAX_ITEMS;
    unsigned char *b = malloc(n + 8);
    /* [ [nil x (2^19 - 1)] ]: 2^19 elements in all. */
    size_t k = 0;
    b[k++] = 0x91;
    b[k++] = 0xdd;
    uint32_t c = PSW_MAX_ITEMS - 1;
    b[k++] = (unsigned char)(c >> 24);
    b[k++] = (unsigned char)(c >> 16);
    b[k++] = (unsigned char)(c >> 8);
    b[k++] = (unsigned char)c;
    memset(b + k, 0xc0, c);
    k += c;
    EXPECT_INT(psw_guard(b, k, 8), (long)k, "2^19 elements");
    /* One more nil: 2^19 + 1. */
    c++;
    b[2] = (unsigned char)(c >> 24);
    b[3] = (unsigned char)(c >> 16);
    b[4] = (unsigned char)(c >> 8);
    b[5] = (unsigned char)c;
    b[k++] = 0xc0;
    EXPECT_INT(psw_guard(b, k, 8), -1, "2^19 + 1 elements");
    free(b);
}

static void decode_rejects_trailing_bytes_and_wrong_shapes(void **state)
{
    (void)state;
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[128];
    const char two[] = { (char)0x91, 0x01, 0x02 };     /* [1] then 2 */
    assert_int_equal(psw_frame_decode(two, 3, &z, &obj, err, sizeof err),
                     PSW_EPROTO);
    assert_non_null(strstr(err, "after the msgpack value"));
    const char num[] = { 0x05 };
    assert_int_equal(psw_frame_decode(num, 1, &z, &obj, err, sizeof err), 0);
    assert_true(psw_frame_messages(&obj, 10, &msgs, err, sizeof err) < 0);
    const char empty[] = { (char)0x90 };
    assert_int_equal(psw_frame_decode(empty, 1, &z, &obj, err, sizeof err), 0);
    assert_true(psw_frame_messages(&obj, 10, &msgs, err, sizeof err) < 0);
    msgpack_zone_destroy(&z);
}

/* Decodes the single message of a one-frame psw_out. */
static void decode_one(psw_out *o, msgpack_zone *z, char **buf,
                       const msgpack_object **msg)
{
    size_t len;
    msgpack_object obj;
    char err[128];
    *buf = flatten(o, &len);
    int rc = psw_frame_decode(*buf + PSW_FRAME_HDR,
                              len - PSW_FRAME_HDR - PSW_FRAME_CRC, z, &obj, err,
                              sizeof err);
    if (rc)
        fail_msg("decode: %s", err);
    assert_int_equal(psw_frame_messages(&obj, 10, msg, err, sizeof err), 1);
}

static void push_message_round_trips_with_referenced_payload(void **state)
{
    (void)state;
    enum { N = 3000 };
    static uint64_t keys[N];
    static float vals[N * 4];
    for (size_t i = 0; i < N; i++)
        keys[i] = UINT64_MAX - i;
    for (size_t i = 0; i < N * 4; i++)
        vals[i] = (float)i / 3.0f;
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_msg m = { .op = PSW_OP_PUSHPULL, .ts = 1ull << 40, .part = 7,
                  .table = 2, .keys = (const char *)keys, .nkeys = N,
                  .vals = (const char *)vals, .vals_len = sizeof vals };
    psw_pack_request(&o, &m);
    psw_out_frame_end(&o);
    assert_int_equal(o.nsegs, 2);            /* both payloads referenced */
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    char *buf, err[128];
    const msgpack_object *msg;
    decode_one(&o, &z, &buf, &msg);
    psw_msg d;
    assert_int_equal(psw_msg_decode(msg, &d, err, sizeof err), 0);
    assert_int_equal(d.op, PSW_OP_PUSHPULL);
    assert_int_equal(d.ts, 1ull << 40);
    assert_int_equal(d.part, 7);
    assert_int_equal(d.table, 2);
    assert_int_equal(d.nkeys, N);
    assert_int_equal(d.vals_len, sizeof vals);
    assert_int_equal(psw_key_at(d.keys, N - 1), UINT64_MAX - (N - 1));
    assert_memory_equal(d.vals, vals, sizeof vals);
    /* The payload is a view into the frame, not a copy. */
    assert_true(d.vals > buf && d.vals < buf + o.total);
    free(buf);
    msgpack_zone_destroy(&z);
    psw_out_destroy(&o);
}

static void range_and_reply_messages_round_trip(void **state)
{
    (void)state;
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    char *p = psw_pack_reply(&o, 99, 3, PSW_OK, NULL, 8, 0);
    memcpy(p, "\1\2\3\4\5\6\7\10", 8);
    psw_out_frame_end(&o);
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    char *buf, err[128];
    const msgpack_object *msg;
    decode_one(&o, &z, &buf, &msg);
    psw_msg d;
    assert_int_equal(psw_msg_decode(msg, &d, err, sizeof err), 0);
    assert_int_equal(d.op, PSW_OP_REPLY);
    assert_int_equal(d.ts, 99);
    assert_int_equal(d.part, 3);
    assert_int_equal(d.vals_len, 8);
    assert_memory_equal(d.vals, "\1\2\3\4\5\6\7\10", 8);
    free(buf);

    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_reply(&o, 5, 0, PSW_ENOTOWNER, "owned by node 1", 0, 0);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_msg_decode(msg, &d, err, sizeof err), 0);
    assert_int_equal(d.status, PSW_ENOTOWNER);
    assert_int_equal(d.text_len, strlen("owned by node 1"));
    assert_memory_equal(d.text, "owned by node 1", d.text_len);
    free(buf);

    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_msg r = { .op = PSW_OP_PULL_RANGE, .ts = 1, .table = 0,
                  .first = 123456789012ull, .count = 77 };
    psw_pack_request(&o, &r);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_msg_decode(msg, &d, err, sizeof err), 0);
    assert_int_equal(d.first, 123456789012ull);
    assert_int_equal(d.count, 77);
    free(buf);
    msgpack_zone_destroy(&z);
    psw_out_destroy(&o);
}

static void hello_and_layout_round_trip(void **state)
{
    (void)state;
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_hello h = { PSW_VERSION, 0xabcdef, 42, -1, NULL, 0 };
    psw_pack_hello(&o, &h);
    psw_out_frame_end(&o);
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    char *buf, err[128];
    const msgpack_object *msg;
    decode_one(&o, &z, &buf, &msg);
    psw_hello hd;
    assert_int_equal(psw_hello_decode(msg, &hd, err, sizeof err), 0);
    assert_int_equal(hd.client_id, 0xabcdef);
    assert_int_equal(hd.worker, -1);
    assert_null(hd.nonce);
    free(buf);

    char nodes[2][PSW_ADDR_MAX] = { "127.0.0.1:7070", "[::1]:7071" };
    psw_table_desc t[1] = { { 0, "emb", 0, 16, 0, 0 } };
    psw_cluster l = { .status = PSW_OK, .version = 1, .node_index = 1,
                     .epoch = 77, .max_frame = 1 << 20, .shards = 16,
                     .nnodes = 2, .nodes = nodes, .ntables = 1, .tables = t,
                     .heartbeat_ms = 1000, .peer_timeout_ms = 4000 };
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_hello_ok(&o, &l);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    psw_cluster ld;
    assert_int_equal(psw_hello_ok_decode(msg, &ld, err, sizeof err), 0);
    assert_int_equal(ld.nnodes, 2);
    assert_string_equal(ld.nodes[1], "[::1]:7071");
    assert_int_equal(ld.ntables, 1);
    assert_string_equal(ld.tables[0].name, "emb");
    assert_int_equal(ld.tables[0].dim, 16);
    assert_int_equal(ld.epoch, 77);
    EXPECT_INT(ld.heartbeat_ms, 1000, "heartbeat_ms");
    EXPECT_INT(ld.peer_timeout_ms, 4000, "peer_timeout_ms");
    psw_cluster_free(&ld);

    /* Tables come in id order, 0..N-1: the client indexes them by id, so
     * a table listed under another id is refused. */
    t[0].id = 1;
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_hello_ok(&o, &l);
    psw_out_frame_end(&o);
    free(buf);
    decode_one(&o, &z, &buf, &msg);
    EXPECT_INT(psw_hello_ok_decode(msg, &ld, err, sizeof err) < 0, 1,
               "a table whose id is not its place");
    EXPECT_SUBSTR(err, "bad table 0", "the decoder's reason");
    t[0].id = 0;

    /* A refusal's text comes without its control bytes. */
    psw_cluster refused = { .status = PSW_EAUTH,
                            .text = "wrong\x1b]0;pwned\x07token" };
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_hello_ok(&o, &refused);
    psw_out_frame_end(&o);
    free(buf);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_hello_ok_decode(msg, &ld, err, sizeof err), 0);
    EXPECT_STR(ld.text, "wrong?]0;pwned?token", "refusal text cleaned");
    psw_cluster_free(&ld);
    free(buf);

    /* A frame that ran out of memory is closed by its end all the same:
     * left open, its connection took every later reply for a part of it
     * and never sent or refused anything. */
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_msg p1 = { .op = PSW_OP_PING };
    psw_pack_request(&o, &p1);
    o.oom = 1;                   /* as a failed allocation leaves it */
    EXPECT_INT((int)psw_out_frame_end(&o), 0, "the end of a frame out of "
               "memory");
    EXPECT_INT(psw_out_frame_open(&o), 0, "that frame is closed");
    o.oom = 0;

    /* The session messages: a PING has only its op, an ACK its mark. */
    psw_msg ping = { .op = PSW_OP_PING }, ack = { .op = PSW_OP_ACK,
                                                  .value = 123456789 };
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_request(&o, &ack);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    psw_msg md;
    assert_int_equal(psw_msg_decode(msg, &md, err, sizeof err), 0);
    EXPECT_INT(md.op, PSW_OP_ACK, "op");
    EXPECT_U64(md.value, 123456789, "ack value");
    free(buf);
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_request(&o, &ping);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_msg_decode(msg, &md, err, sizeof err), 0);
    EXPECT_INT(md.op, PSW_OP_PING, "op");
    free(buf);
    msgpack_zone_destroy(&z);
    psw_out_destroy(&o);
}

/* Decodes raw msgpack bytes as one message; returns psw_msg_decode's rc. */
static int decode_raw(const unsigned char *b, size_t n, char *err)
{
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    msgpack_object obj;
    psw_msg m;
    int rc = psw_frame_decode((const char *)b, n, &z, &obj, err, 128);
    if (rc == 0)
        rc = psw_msg_decode(&obj, &m, err, 128);
    msgpack_zone_destroy(&z);
    return rc;
}

static void message_decoder_rejects_bad_fields(void **state)
{
    (void)state;
    char err[128];
    /* [10, 1, 0, 0, bin(7), bin(4)]: keys not a multiple of 8 bytes */
    const unsigned char k7[] = { 0x96, 10, 1, 0, 0, 0xc4, 7, 0, 0, 0, 0, 0, 0,
                                 0, 0xc4, 4, 0, 0, 0, 0 };
    assert_int_equal(decode_raw(k7, sizeof k7, err), PSW_EPROTO);
    assert_non_null(strstr(err, "uint64"));
    /* [99, 1, 0, 0]: unknown op */
    const unsigned char op[] = { 0x94, 99, 1, 0, 0 };
    assert_int_equal(decode_raw(op, sizeof op, err), PSW_EPROTO);
    assert_non_null(strstr(err, "unknown op"));
    /* [11, -1, 0, 0, bin(0)]: negative timestamp */
    const unsigned char ts[] = { 0x95, 11, 0xff, 0, 0, 0xc4, 0 };
    assert_int_equal(decode_raw(ts, sizeof ts, err), PSW_EPROTO);
    /* [11, 1, 0, 0]: a pull without keys */
    const unsigned char few[] = { 0x94, 11, 1, 0, 0 };
    assert_int_equal(decode_raw(few, sizeof few, err), PSW_EPROTO);
    /* [11, 1, 0, "x", bin(0)]: table id is a string */
    const unsigned char tab[] = { 0x95, 11, 1, 0, 0xa1, 'x', 0xc4, 0 };
    assert_int_equal(decode_raw(tab, sizeof tab, err), PSW_EPROTO);
    /* [13, 1, 0, 0, 0, 1, bin(3)]: values not float32 */
    const unsigned char v3[] = { 0x97, 13, 1, 0, 0, 0, 1, 0xc4, 3, 1, 2, 3 };
    assert_int_equal(decode_raw(v3, sizeof v3, err), PSW_EPROTO);
}

/* Random byte flips of a valid frame never crash the decoder and never
 * yield a message that breaks its own size invariants. */
static void mutated_frames_never_crash_the_decoder(void **state)
{
    (void)state;
    uint64_t keys[40];
    float vals[40];
    for (int i = 0; i < 40; i++) {
        keys[i] = (uint64_t)i;
        vals[i] = (float)i;
    }
    size_t len;
    char *s = sample_stream(&len, 1, vals, 40, keys);
    char *m = malloc(len);
    uint64_t seed = 12345;
    int accepted = 0, rejected = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(m, s, len);
        int flips = 1 + it % 4;
        for (int f = 0; f < flips; f++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            m[4 + (seed >> 33) % (len - 4)] = (char)(seed >> 20);
        }
        msgpack_zone z;
        msgpack_zone_init(&z, 1024);
        msgpack_object obj;
        const msgpack_object *msgs;
        char err[128];
        int ok = psw_frame_decode(m + 4, len - 4, &z, &obj, err, sizeof err) == 0;
        int n = ok ? psw_frame_messages(&obj, 100, &msgs, err, sizeof err) : -1;
        for (int i = 0; i < n; i++) {
            psw_msg d;
            if (psw_msg_decode(&msgs[i], &d, err, sizeof err) == 0) {
                accepted++;
                assert_int_equal(d.vals_len % 4, 0);
                assert_true(d.nkeys * 8 <= len);
            } else
                rejected++;
        }
        if (n < 0)
            rejected++;
        msgpack_zone_destroy(&z);
    }
    assert_true(accepted > 0 && rejected > 0);
    free(m);
    free(s);
}

/* The handshake's messages: CHALLENGE, AUTH, and HELLO_OK's proof field
 * (15 fields) next to the 14-field version 2 shape. */
static void handshake_messages_round_trip(void **state)
{
    (void)state;
    psw_out o;
    msgpack_zone z;
    char *buf, err[128];
    const msgpack_object *msg;
    msgpack_zone_init(&z, 1024);
    psw_out_init(&o);
    psw_challenge ch = { .node_index = 3 }, chd;
    for (int i = 0; i < PSW_NONCE_LEN; i++)
        ch.nonce[i] = (uint8_t)i;
    psw_out_frame_begin(&o);
    psw_pack_challenge(&o, &ch);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_challenge_decode(msg, &chd, err, sizeof err), 0);
    EXPECT_INT(chd.node_index, 3, "node index");
    assert_memory_equal(chd.nonce, ch.nonce, PSW_NONCE_LEN);
    free(buf);

    uint8_t proof[PSW_PROOF_LEN] = { 9 };
    psw_auth_msg a = { (const char *)proof, PSW_PROOF_LEN }, ad;
    for (int nil = 0; nil < 2; nil++) {
        psw_out_reset(&o);
        psw_out_frame_begin(&o);
        psw_pack_auth(&o, nil ? &(psw_auth_msg){ NULL, 0 } : &a);
        psw_out_frame_end(&o);
        decode_one(&o, &z, &buf, &msg);
        assert_int_equal(psw_auth_decode(msg, &ad, err, sizeof err), 0);
        EXPECT_INT(ad.proof_len, nil ? 0 : PSW_PROOF_LEN, "proof length");
        assert_true((ad.proof == NULL) == nil);
        free(buf);
    }
    /* A CHALLENGE decoded as an AUTH, and a short nonce, are refused. */
    psw_out_reset(&o);
    psw_out_frame_begin(&o);
    psw_pack_challenge(&o, &ch);
    psw_out_frame_end(&o);
    decode_one(&o, &z, &buf, &msg);
    assert_int_equal(psw_auth_decode(msg, &ad, err, sizeof err), PSW_EPROTO);
    free(buf);

    char nodes[1][PSW_ADDR_MAX] = { "ps-0.example:7070" };
    psw_table_desc t[1] = { { 0, "emb", 0, 16, 0, 0 } };
    for (int shape = PSW_PROOF_ABSENT; shape <= PSW_PROOF_SET; shape++) {
        psw_cluster l = { .status = PSW_OK, .version = 3, .node_index = 0,
                          .epoch = 7, .max_frame = 1 << 20, .shards = 4,
                          .nnodes = 1, .nodes = nodes, .ntables = 1,
                          .tables = t, .heartbeat_ms = 1000,
                          .peer_timeout_ms = 4000, .proof_state = shape };
        memcpy(l.proof, proof, PSW_PROOF_LEN);
        psw_out_reset(&o);
        psw_out_frame_begin(&o);
        psw_pack_hello_ok(&o, &l);
        psw_out_frame_end(&o);
        decode_one(&o, &z, &buf, &msg);
        EXPECT_INT(msg->via.array.size, shape == PSW_PROOF_ABSENT ? 14 : 15,
                   "HELLO_OK fields");
        psw_cluster ld;
        assert_int_equal(psw_hello_ok_decode(msg, &ld, err, sizeof err), 0);
        EXPECT_INT(ld.proof_state, shape, "proof state");
        if (shape == PSW_PROOF_SET)
            assert_memory_equal(ld.proof, proof, PSW_PROOF_LEN);
        assert_string_equal(ld.nodes[0], "ps-0.example:7070");
        psw_cluster_free(&ld);
        free(buf);
    }
    psw_out_destroy(&o);
    msgpack_zone_destroy(&z);
}

/* The proofs are HMAC-SHA-256 over the transcript of PROTOCOL.md section
 * 4; the expected values were computed independently with Python's hmac
 * module, so another implementation can check itself against them. */
static void proofs_match_the_documented_example(void **state)
{
    (void)state;
    static const char token[] = "correct-horse-battery-staple-42";
    psw_transcript t = { .version = 3, .client_id = 0x0123456789abcdefULL,
                         .incarnation = 1700000000000000000ULL,
                         .worker = -1, .node_index = 0 };
    for (int i = 0; i < PSW_NONCE_LEN; i++) {
        t.cnonce[i] = (uint8_t)i;
        t.snonce[i] = (uint8_t)(32 + i);
    }
    static const char *const want[2] = {
        "fb0eff98ee9ef9e7a85634ca2af082f509318f60c3c3a9337b582cb749d41e04",
        "c69fb4f14e552b9aaecc5f1c7743636c5d0bcaebb06054aacab79f829046e3e9",
    };
    assert_int_equal(psw_auth_init(), 0);
    for (int role = 0; role < 2; role++) {
        uint8_t p[PSW_PROOF_LEN];
        char hex[2 * PSW_PROOF_LEN + 1];
        psw_auth_proof(token, strlen(token), role, &t, p);
        for (int i = 0; i < PSW_PROOF_LEN; i++)
            snprintf(hex + 2 * i, 3, "%02x", p[i]);
        if (strcmp(hex, want[role]))
            fail_msg("%s proof: got %s, want %s",
                     role ? "server" : "client", hex, want[role]);
        EXPECT_INT(psw_auth_verify(token, strlen(token), role, &t, p,
                                   PSW_PROOF_LEN), 0, "verify");
        EXPECT_INT(psw_auth_verify(token, strlen(token), !role, &t, p,
                                   PSW_PROOF_LEN), -1, "the other role");
        EXPECT_INT(psw_auth_verify(token, strlen(token) - 1, role, &t, p,
                                   PSW_PROOF_LEN), -1, "another token");
        EXPECT_INT(psw_auth_verify(token, strlen(token), role, &t, p,
                                   PSW_PROOF_LEN - 1), -1, "a short proof");
    }
}

/* The one grammar of node addresses (psd's nodes line, ps_open's list). */
static void addresses_parse_in_every_form(void **state)
{
    (void)state;
    static const struct { const char *in, *host; int port, kind; } ok[] = {
        { "127.0.0.1:7070", "127.0.0.1", 7070, PSW_HOST_IPV4 },
        { " [0:0::1]:1 ", "::1", 1, PSW_HOST_IPV6 },
        { "[fec0::1]:1", "fec0::1", 1, PSW_HOST_IPV6 },   /* past fe80::/10 */
        { "ps-0.example:65535", "ps-0.example", 65535, PSW_HOST_NAME },
        { "localhost:7070", "localhost", 7070, PSW_HOST_NAME },
        { "trainer_ps_0:80", "trainer_ps_0", 80, PSW_HOST_NAME },
        { "localhost.:7070", "localhost.", 7070, PSW_HOST_NAME }, /* FQDN */
    };
    static const struct { const char *in, *why; } bad[] = {
        { "127.0.0.1", "expected host:port" },
        { "::1:7070", "expected host:port" },
        { "[::1]7070", "expected host:port" },
        { "a..b:1", "expected a host name" },
        { "a..:1", "expected a host name" },
        { "-.:1", "expected a host name" },
        { "-a:1", "expected a host name" },
        { "a b:1", "expected a host name" },
        { "1.2.3:1", "expected a numeric IPv4 address" },
        { "[::g]:1", "expected a numeric IPv6 address" },
        /* Link-local: psd could not bind one, nor a client connect,
         * without the zone the grammar does not take. */
        { "[fe80::1]:1", "a link-local IPv6 address" },
        { "[FEBF::1]:1", "a link-local IPv6 address" },
        { "[fe80::1%eth0]:1", "an IPv6 zone (%eth0) is not taken" },
        { "h:0", "expected a port 1..65535" },
        { "h:65536", "expected a port 1..65535" },
        { "h:+1", "expected a port 1..65535" },
        { ":1", "expected host:port" },
    };
    psw_addr a;
    char why[160], text[PSW_ADDR_TEXT_MAX];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        if (psw_addr_parse(ok[i].in, strlen(ok[i].in), &a, why, sizeof why))
            fail_msg("\"%s\": got \"%s\", want it parsed", ok[i].in, why);
        assert_string_equal(a.host, ok[i].host);
        EXPECT_INT(a.port, ok[i].port, "port of %s", ok[i].in);
        EXPECT_INT(a.kind, ok[i].kind, "kind of %s", ok[i].in);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (psw_addr_parse(bad[i].in, strlen(bad[i].in), &a, why,
                           sizeof why) == 0 || !strstr(why, bad[i].why))
            fail_msg("\"%s\": got \"%s\", want \"%s\"", bad[i].in, why,
                     bad[i].why);
    }
    /* A 253-byte name is the longest there is. */
    char name[260];
    memset(name, 'a', sizeof name);
    for (int i = 63; i < 253; i += 64)
        name[i] = '.';
    snprintf(name + 253, sizeof name - 253, ":7");
    assert_int_equal(psw_addr_parse(name, strlen(name), &a, why, sizeof why),
                     0);
    assert_true(psw_addr_format(&a, text, sizeof text) < (int)sizeof text);
    name[253] = 'a';
    snprintf(name + 254, sizeof name - 254, ":7");
    assert_int_equal(psw_addr_parse(name, strlen(name), &a, why, sizeof why),
                     -1);
    a.kind = PSW_HOST_IPV6;
    snprintf(a.host, sizeof a.host, "::1");
    a.port = 9;
    psw_addr_format(&a, text, sizeof text);
    assert_string_equal(text, "[::1]:9");

    psw_addr *list;
    psw_addr_error e;
    int n;
    assert_int_equal(psw_addr_list_parse("a:1, b:2 ,c:3", 8, &list, &n, &e),
                     0);
    EXPECT_INT(n, 3, "entries");
    assert_string_equal(list[2].host, "c");
    free(list);
    assert_int_equal(psw_addr_list_parse("a:1,,b:2", 8, &list, &n, &e), -1);
    EXPECT_INT(e.entry, 2, "empty entry");
    assert_int_equal(psw_addr_list_parse("A:1, a:1", 8, &list, &n, &e), -1);
    EXPECT_INT(e.first, 1, "duplicate of");
    EXPECT_INT(e.entry, 2, "duplicate");
    assert_int_equal(psw_addr_list_parse("a:1,b:2,c:3", 2, &list, &n, &e), -1);
    assert_int_equal(psw_addr_list_parse("  ", 2, &list, &n, &e), -1);
    /* The entry quoted back reaches terminals (psctl -s, ps_open's
     * stderr): its control bytes do not. */
    assert_int_equal(psw_addr_list_parse("a:1,\x1b]0;x\a\x1b[2Jb:1", 8, &list,
                                         &n, &e), -1);
    assert_string_equal(e.item, "?]0;x??[2Jb:1");
}

/* psw_cluster_diff names the first difference HELLO_OK shows, as "the
 * node's against the cluster's", and nothing where those agree. */
static void layouts_differ_by_what_hello_ok_shows(void **state)
{
    (void)state;
    char na[2][PSW_ADDR_MAX] = { "127.0.0.1:7070", "127.0.0.1:7071" };
    char nb[2][PSW_ADDR_MAX] = { "127.0.0.1:7070", "127.0.0.1:7071" };
    psw_table_desc ta[2] = { { 0, "emb", 0, 8, 0, PSW_CONS_ASYNC },
                             { 1, "w", 1, 4, 100, PSW_CONS_BSP } };
    psw_table_desc tb[2];
    memcpy(tb, ta, sizeof tb);
    psw_cluster a = { .nnodes = 2, .nodes = na, .shards = 16,
                      .ntables = 2, .tables = ta };
    psw_cluster b = a;
    b.nodes = nb;
    b.tables = tb;
    char out[200];
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "");
    tb[1].rows = 200;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "table 'w' of 200 rows against 100");
    tb[1].consistency = PSW_CONS_SSP;
    tb[1].rows = 100;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "table 'w' ssp against bsp");
    tb[0].dim = 16;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "table 'emb' of dim 16 against 8");
    tb[0].dense = 1;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "table 'emb' dense against sparse");
    snprintf(tb[0].name, sizeof tb[0].name, "emb2");
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "table 0 'emb2' against 'emb'");
    b.ntables = 1;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "1 table against 2");
    snprintf(nb[1], sizeof nb[1], "127.0.0.1:7072");
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "node 1 at 127.0.0.1:7072 against "
                             "127.0.0.1:7071");
    b.shards = 8;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "8 shards against 16");
    b.nnodes = 1;
    psw_cluster_diff(&a, &b, out, sizeof out);
    assert_string_equal(out, "1 node against 2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reader_yields_same_frames_for_every_split_point),
        cmocka_unit_test(reader_yields_same_frames_byte_by_byte),
        cmocka_unit_test(nonfinite_finds_nan_and_inf_anywhere),
        cmocka_unit_test(reader_scan_finds_nonfinite_values_whatever_the_cut),
        cmocka_unit_test(reader_unread_gives_the_same_frame_again),
        cmocka_unit_test(reader_says_what_an_end_now_would_cut_short),
        cmocka_unit_test(reader_buffer_grows_with_the_bytes_that_arrive),
        cmocka_unit_test(reader_refuses_oversized_length_before_buffering),
        cmocka_unit_test(reader_refuses_empty_frame),
        cmocka_unit_test(crc32c_is_the_castagnoli_crc_and_chains),
        cmocka_unit_test(iov_skip_finds_where_the_rest_starts),
        cmocka_unit_test(reader_refuses_a_frame_whose_bits_were_flipped),
        cmocka_unit_test(guard_rejects_counts_larger_than_the_bytes_left),
        cmocka_unit_test(guard_rejects_deep_nesting_and_the_unused_byte),
        cmocka_unit_test(guard_reports_truncated_values_as_incomplete),
        cmocka_unit_test(guard_caps_the_elements_of_a_frame),
        cmocka_unit_test(decode_rejects_trailing_bytes_and_wrong_shapes),
        cmocka_unit_test(push_message_round_trips_with_referenced_payload),
        cmocka_unit_test(range_and_reply_messages_round_trip),
        cmocka_unit_test(hello_and_layout_round_trip),
        cmocka_unit_test(message_decoder_rejects_bad_fields),
        cmocka_unit_test(mutated_frames_never_crash_the_decoder),
        cmocka_unit_test(handshake_messages_round_trip),
        cmocka_unit_test(proofs_match_the_documented_example),
        cmocka_unit_test(addresses_parse_in_every_form),
        cmocka_unit_test(layouts_differ_by_what_hello_ok_shows),
    };
    return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
