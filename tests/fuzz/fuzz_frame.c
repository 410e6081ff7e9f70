/* libFuzzer target for the frame reader (psw_reader, proto/frame.h): the
 * input is a byte stream fed in pieces, every frame that comes out is
 * decoded with every message decoder, and the frames must not depend on
 * how the stream was cut.
 *
 * Input: byte 0 picks how to feed the rest, as hiredis's reader fuzzer
 * does: bits 0-1 the cut (0 all at once, 1 byte by byte, 2 two reads
 * split at (bits 3-7)/31 of the way, 3 four-byte chunks), bit 2 the frame
 * limit (the daemon's 4096 bytes before HELLO, or 96 KiB: above the
 * reader's 64 KiB read size, so a frame longer than one read is sized from
 * its header, yet small enough that a mutated length does not make every
 * run map and fault in a fresh megabyte). The rest is fed
 * three ways: as it is; with the CRC of every frame it holds made right
 * (so mutated frames get past the CRC to the decoders); and wrapped whole
 * as the body of one frame with a correct length and CRC. The reader
 * scans pushed values for NaN and infinities as their bytes arrive; for
 * every push that decodes, the scan must agree with reading the values. */
#include <string.h>

#include "decode.h"
#include "fuzz.h"
#include "../../proto/frame.h"
#include "../../proto/status.h"

#define SMALL_MAX_FRAME 4096
#define LARGE_MAX_FRAME (96u * 1024)

/* What a stream gave: the frames (body length and CRC) and how it ended. */
typedef struct frame_rec {
    size_t len;
    uint32_t crc;
} frame_rec;

typedef struct run {
    frame_rec *f;
    size_t n, cap;
    int rc;              /* 0, or the error psw_reader_next returned */
    char why[128];
    size_t pending;      /* bytes left unconsumed when rc is 0 */
    int decode;          /* decode the frames (only one run of each pair) */
} run;

static msgpack_zone zone;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    msgpack_zone_init(&zone, 4096);
    return 0;
}

/* The reader's scan, made as the bytes arrived in whatever cut, says of
 * every pushed payload what reading it says: NaN or infinity, or not. */
static void check_scan(const psw_reader *rd, const msgpack_object *obj)
{
    const msgpack_object *msgs;
    char err[160];
    int n = psw_frame_messages(obj, PSW_MAX_MSGS, &msgs, err, sizeof err);
    for (int i = 0; i < n; i++) {
        psw_msg m;
        if (psw_msg_decode(&msgs[i], &m, err, sizeof err) ||
            !psw_op_has(m.op, PSW_OPF_PUSHES))
            continue;
        int scan = psw_reader_nonfinite(rd, m.vals, m.vals_len);
        int read = m.vals_len >= 4 && psw_nonfinite(m.vals, m.vals_len);
        FUZZ_CHECK(scan == read, "message %d (op %d, %zu bytes of values): "
                   "the scan says %d, reading says %d", i, m.op, m.vals_len,
                   scan, read);
    }
}

/* Checks one frame handed out by the reader and records it. */
static void on_frame(run *r, const psw_reader *rd, const char *body,
                     size_t len)
{
    FUZZ_CHECK(len >= 1 && len <= rd->max_frame, "frame body of %zu bytes, "
               "limit %zu", len, rd->max_frame);
    /* The CRC follows the body in the reader's buffer. */
    uint32_t want = fuzz_be32(body + len), got = psw_crc32c(0, body, len);
    FUZZ_CHECK(got == want, "frame of %zu bytes handed out with CRC %08x, "
               "computed %08x", len, want, got);
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        frame_rec *f = realloc(r->f, cap * sizeof *f);
        FUZZ_CHECK(f != NULL, "out of memory for %zu frame records", cap);
        r->f = f;
        r->cap = cap;
    }
    r->f[r->n++] = (frame_rec){ len, got };
    if (r->decode) {
        msgpack_object obj;
        if (fuzz_decode_body(body, len, &zone, &obj) == 0) {
            fuzz_decode_frame(&obj);
            check_scan(rd, &obj);
        }
    }
}

/* Takes every complete frame; stops the run at the first error, as the
 * daemon closes the connection then. */
static void drain(run *r, psw_reader *rd)
{
    while (r->rc == 0) {
        const char *body;
        size_t len;
        int rc = psw_reader_next(rd, &body, &len);
        if (rc == 0)
            return;
        if (rc < 0) {
            FUZZ_CHECK(rc == PSW_EPROTO || rc == PSW_ETOOBIG,
                       "psw_reader_next returned %d", rc);
            FUZZ_CHECK(rd->why[0] != '\0', "error %d without a reason", rc);
            r->rc = rc;
            snprintf(r->why, sizeof r->why, "%s", rd->why);
            return;
        }
        FUZZ_CHECK(rc == 1, "psw_reader_next returned %d", rc);
        on_frame(r, rd, body, len);
    }
}

/* Where the next bytes go: the space psw_reader_space offered, less what
 * was committed into it since. */
typedef struct space {
    char *dst;
    size_t room;
} space;

/* Receives n bytes and takes the frames after them. A read asks the
 * reader for space first, as the daemon's on_alloc does before every
 * read; a piece (read = 0) goes into what is left of the space the last
 * read got, and asks for more only when that is used up. The small cuts
 * feed pieces: asking for space before every byte would make each run
 * copy 64 KiB per byte under ASan, since psw_reader_space reallocates
 * whenever part of a frame is pending. */
static void feed(run *r, psw_reader *rd, space *sp, const uint8_t *p,
                 size_t n, int read)
{
    if (read)
        sp->room = 0;
    while (n > 0 && r->rc == 0) {
        if (sp->room == 0) {
            FUZZ_CHECK(psw_reader_space(rd, &sp->dst, &sp->room) == 0,
                       "psw_reader_space failed with %zu bytes pending",
                       psw_reader_pending(rd));
            FUZZ_CHECK(sp->room > 0, "psw_reader_space offered 0 bytes");
        }
        size_t k = n < sp->room ? n : sp->room;
        memcpy(sp->dst, p, k);
        psw_reader_commit(rd, k);
        sp->dst += k;
        sp->room -= k;
        p += k;
        n -= k;
        drain(r, rd);
    }
}

/* Feeds the stream cut as `cut` says (byte 0 of the input). */
static void run_stream(run *r, const uint8_t *p, size_t n, size_t max_frame,
                       unsigned cut, unsigned frac)
{
    psw_reader rd;
    space sp = { NULL, 0 };
    psw_reader_init(&rd, max_frame);
    psw_reader_scan(&rd, 1);
    switch (cut) {
    case 0:
        feed(r, &rd, &sp, p, n, 1);
        break;
    case 1:
        for (size_t i = 0; i < n && r->rc == 0; i++)
            feed(r, &rd, &sp, p + i, 1, 0);
        break;
    case 2: {
        size_t at = n * frac / 31;
        feed(r, &rd, &sp, p, at, 1);
        feed(r, &rd, &sp, p + at, n - at, 1);
        break;
    }
    default:
        for (size_t i = 0; i < n && r->rc == 0; i += 4)
            feed(r, &rd, &sp, p + i, n - i < 4 ? n - i : 4, 0);
        break;
    }
    r->pending = psw_reader_pending(&rd);
    psw_reader_destroy(&rd);
}

/* Feeds a stream cut as asked, and all at once, and checks that both gave
 * the same frames and ended the same way: how reads happen to cut a stream
 * must never change what it means. */
static void check_stream(const uint8_t *p, size_t n, size_t max_frame,
                         unsigned cut, unsigned frac)
{
    run a = { .decode = 1 };
    run_stream(&a, p, n, max_frame, cut, frac);
    if (cut != 0) {
        run b = { 0 };
        run_stream(&b, p, n, max_frame, 0, 0);
        FUZZ_CHECK(a.n == b.n, "cut %u gave %zu frames, all at once %zu", cut,
                   a.n, b.n);
        for (size_t i = 0; i < a.n; i++)
            FUZZ_CHECK(a.f[i].len == b.f[i].len && a.f[i].crc == b.f[i].crc,
                       "frame %zu: cut %u gave %zu bytes (CRC %08x), all at "
                       "once %zu bytes (CRC %08x)", i, cut, a.f[i].len,
                       a.f[i].crc, b.f[i].len, b.f[i].crc);
        FUZZ_CHECK(a.rc == b.rc && strcmp(a.why, b.why) == 0,
                   "cut %u ended with %d (%s), all at once with %d (%s)", cut,
                   a.rc, a.why, b.rc, b.why);
        if (a.rc == 0)
            FUZZ_CHECK(a.pending == b.pending, "cut %u left %zu bytes, all "
                       "at once %zu", cut, a.pending, b.pending);
        free(b.f);
    }
    free(a.f);
}

/* A copy of the stream in which every frame that fits carries the right
 * CRC; a frame whose length is bad or runs past the end is left as it is,
 * and so is everything after it. */
static uint8_t *fix_crcs(const uint8_t *p, size_t n, size_t max_frame)
{
    uint8_t *q = malloc(n ? n : 1);
    FUZZ_CHECK(q != NULL, "out of memory copying %zu bytes", n);
    if (n)
        memcpy(q, p, n);
    size_t at = 0;
    while (n - at >= PSW_FRAME_HDR) {
        uint32_t flen = fuzz_be32(q + at);
        if (flen < PSW_FRAME_CRC + 1 || flen - PSW_FRAME_CRC > max_frame ||
            flen > n - at - PSW_FRAME_HDR)
            break;
        size_t body = flen - PSW_FRAME_CRC;
        fuzz_put_be32(q + at + PSW_FRAME_HDR + body,
                      psw_crc32c(0, q + at + PSW_FRAME_HDR, body));
        at += PSW_FRAME_HDR + flen;
    }
    return q;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned cut = data[0] & 3, frac = data[0] >> 3;
    size_t max_frame = data[0] & 4 ? SMALL_MAX_FRAME : LARGE_MAX_FRAME;
    const uint8_t *p = data + 1;
    size_t n = size - 1;

    check_stream(p, n, max_frame, cut, frac);

    uint8_t *fixed = fix_crcs(p, n, max_frame);
    if (n && memcmp(fixed, p, n) != 0)
        check_stream(fixed, n, max_frame, cut, frac);
    free(fixed);

    /* The whole rest as one frame's body. */
    size_t wn = PSW_FRAME_HDR + n + PSW_FRAME_CRC;
    uint8_t *w = malloc(wn);
    FUZZ_CHECK(w != NULL, "out of memory wrapping %zu bytes", n);
    fuzz_put_be32(w, (uint32_t)(n + PSW_FRAME_CRC));
    if (n)
        memcpy(w + PSW_FRAME_HDR, p, n);
    fuzz_put_be32(w + PSW_FRAME_HDR + n, psw_crc32c(0, p, n));
    check_stream(w, wn, max_frame, cut, frac);
    free(w);
    return 0;
}
