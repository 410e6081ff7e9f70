/* Framing: a 4-byte big-endian length, a body holding one msgpack value,
 * and a 4-byte CRC32C of the body (the length counts body and CRC).
 * psw_reader cuts frames out of a byte stream with the length checked
 * before anything is buffered and the CRC checked before the body is
 * handed out; psw_guard bounds every msgpack count before msgpack-c sees
 * it; psw_out builds outgoing frames as iovecs so large payloads are
 * referenced, not copied. No sockets here. */
#ifndef PSW_FRAME_H
#define PSW_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <msgpack.h>

#define PSW_FRAME_HDR 4
#define PSW_FRAME_CRC 4
/* The least a reader's receive buffer grows by (and what it holds from
 * the first read on): a peer costs this much however little it sends. */
#define PSW_READ_CHUNK (64 * 1024)

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t psw_crc32c(uint32_t crc, const void *p, size_t n);

/* Whether any of the n / 4 little-endian float32 at p (any alignment) is
 * NaN or +-Inf; bytes past the last whole float are ignored. Vectorised
 * (AVX2 where the CPU has it), about 0.15 ms per 16 MiB here. */
int psw_nonfinite(const void *p, size_t n);

/* ---- reading -------------------------------------------------------- */

/* What the reader learns of a frame's values while its bytes arrive (and
 * are still in cache): it follows the body's msgpack structure and looks
 * at every BIN payload that is field 5 or later of a message (the values
 * of PUSH, PUSHPULL and PUSH_RANGE; keys are field 4), float by float
 * from the payload's start, noting the payloads that hold a NaN or an
 * infinity. */
#define PSW_SCAN_HITS 64
#define PSW_SCAN_DEPTH 8
typedef struct psw_scan {
    size_t pos;          /* body bytes walked */
    uint64_t pending;    /* values not yet started, all levels */
    unsigned depth;
    uint64_t left[PSW_SCAN_DEPTH], total[PSW_SCAN_DEPTH];
    size_t skip;         /* payload bytes still to pass over */
    size_t bin;          /* bytes of the payload being scanned still due */
    size_t bin_at;       /* body offset of that payload */
    size_t bin_done;     /* its bytes scanned (whole floats) */
    int bin_hit;         /* it holds a non-finite float */
    int broken;          /* the walk lost the structure: results unknown */
    int overflow;        /* more than PSW_SCAN_HITS payloads were hit */
    uint32_t nhits;
    size_t hits[PSW_SCAN_HITS];  /* body offsets of hit payloads, rising */
} psw_scan;

/* A growable receive buffer. Bytes [off, len) are received but not yet
 * consumed; a frame returned by psw_reader_next stays valid until the
 * next psw_reader_space call (which may move or compact the buffer). The
 * CRC of the frame being received is computed as its bytes arrive, while
 * they are still in cache. */
typedef struct psw_reader {
    char *buf;
    size_t off, len, cap;
    size_t max_frame;    /* largest accepted frame body */
    size_t crc_done;     /* body bytes of the frame at off in crc */
    uint32_t crc;
    int scan_on;         /* look for non-finite values (psw_reader_scan) */
    psw_scan cur;        /* the frame at off */
    psw_scan last;       /* the frame psw_reader_next returned last */
    const char *last_body;
    size_t last_len;     /* its length field: body and CRC */
    uint32_t last_crc;
    /* Holes (psw_reader_divert): body bytes of the frame at off that go
     * to the caller's memory instead of the buffer. Offsets into the
     * frame at off count only the bytes that stay in the buffer. */
    size_t holes;        /* bytes of that frame that went (or go) to holes */
    char *hole_dst;      /* where the rest of the open hole goes */
    size_t hole_left;    /* bytes of the open hole still due */
    int hole_discard;    /* the rest of the open hole is dropped */
    int in_hole;         /* the space handed out last is the hole's */
    char *sink;          /* READ_CHUNK bytes for a discarded hole */
    char why[128];       /* after an error: what was wrong */
} psw_reader;

void psw_reader_init(psw_reader *r, size_t max_frame);
void psw_reader_destroy(psw_reader *r);

/* Gives the free space to receive into (at least 64 KiB, or the rest of
 * the frame being received when that is larger). Returns 0, or -1 when
 * memory runs out. */
int psw_reader_space(psw_reader *r, char **p, size_t *n);

/* How many bytes psw_reader_space would add to the buffer now (0 when
 * it has room), so that a caller can check a memory budget first. */
size_t psw_reader_grow(const psw_reader *r);

/* Frees the buffer when it holds no unconsumed byte (memory a quiet
 * connection need not keep). Not while a frame view is in use. */
void psw_reader_trim(psw_reader *r);

/* Records that n bytes were written into the space. */
void psw_reader_commit(psw_reader *r, size_t n);

/* Takes the next complete frame: returns 1 and sets *body and *len to a view
 * into the buffer (the body, without its CRC); 0 when more bytes are
 * needed; PSW_ETOOBIG (body above max_frame) or PSW_EPROTO (a frame too
 * short to hold a body and its CRC, or a CRC that does not match) when
 * the stream must be closed, with the reason in r->why. */
int psw_reader_next(psw_reader *r, const char **body, size_t *len);

/* After psw_reader_next failed: 1 when the bytes where a frame should
 * begin are a line of text (an HTTP request or answer, an SSH or SMTP
 * banner: another protocol's peer), with that line, cut at its end or at
 * cap - 1 characters, in out; else 0. Four printable characters or
 * more: a frame's big-endian length below 512 MiB begins with a byte
 * below 0x20, the first printable one, so a frame is taken for text only
 * past that size (max_frame allows 1 GiB) and when its first bytes all
 * happen to be printable: callers say what they saw, not that it is
 * another protocol. */
int psw_reader_text(const psw_reader *r, char *out, size_t cap);

/* Puts the frame psw_reader_next returned last back, unconsumed, as if
 * it had not been taken (its CRC and scan are kept): the next call
 * returns it again. Only right after that call, before psw_reader_space. */
void psw_reader_unread(psw_reader *r);

/* Turns the non-finite scan on or off (off by default), from the frame
 * whose first byte comes next. */
void psw_reader_scan(psw_reader *r, int on);

/* For the frame psw_reader_next returned last: whether the len bytes at
 * p, a BIN payload inside it, hold a NaN or infinite float32. Answered
 * from the scan when it covered that payload (a lookup), else by reading
 * the bytes (psw_nonfinite). */
int psw_reader_nonfinite(const psw_reader *r, const char *p, size_t len);

/* Sends the rest of a BIN payload of the frame being received straight
 * to dst instead of the buffer: the payload is `len` bytes from body
 * offset `at` (offsets count only bytes in the buffer, past earlier
 * holes), its header the `hdr` bytes before it (0xc5 or 0xc6 and the
 * length). The payload bytes already buffered move to dst; the rest is
 * received into dst (psw_reader_space hands out dst), then reception
 * goes on in the buffer. The CRC still covers every byte, in order, and
 * psw_reader_next checks it before it returns the frame, whose body then
 * holds an empty BIN in place of the payload (the length bytes are set
 * to 0 in the buffer). dst must stay valid until the hole is filled, the
 * frame is returned, or psw_reader_undivert. Returns 0, or -1 (nothing
 * done) when no frame is partly here, a hole is open, the payload is
 * already here whole, or it does not lie inside the body. */
int psw_reader_divert(psw_reader *r, size_t at, size_t hdr, char *dst,
                      size_t len);

/* Whether a hole is open (bytes still due into it). */
static inline int psw_reader_diverting(const psw_reader *r)
{
    return r->hole_left > 0;
}

/* The rest of the open hole is received and checked, but dropped: dst
 * is no longer written. */
void psw_reader_undivert(psw_reader *r);

/* Bytes received and not yet consumed. */
static inline size_t psw_reader_pending(const psw_reader *r)
{
    return r->len - r->off;
}

/* Bytes received of a frame not yet complete, past every complete frame
 * still buffered (0 when the stream ends on a frame boundary): what a
 * stream that ends now cuts short. */
size_t psw_reader_cut(const psw_reader *r);

/* The most container elements one frame may hold in all: 65536 messages
 * of at most 7 fields each (a request or reply frame; HELLO_OK needs far
 * fewer). msgpack-c allocates 24 bytes per element up front, so this
 * keeps decoding one frame within 12 MiB whatever its size. */
#define PSW_MAX_ITEMS (1u << 19)

/* Bounds a msgpack value without allocating: returns the bytes the value
 * spans in [p, p+n), 0 if incomplete, -1 if malformed, nested deeper
 * than max_depth (at most 32), declaring a container count larger than
 * the bytes left, or holding more than PSW_MAX_ITEMS container elements
 * in all (so msgpack-c's up-front allocation stays within 24 bytes per
 * element, and 12 MiB). */
long psw_guard(const uint8_t *p, size_t n, unsigned max_depth);

/* Decodes one frame body into *obj, allocating containers from zone.
 * The body must be exactly one msgpack value that passes psw_guard.
 * BIN payloads in *obj point into body. Returns 0 or PSW_EPROTO with a
 * reason in err. */
int psw_frame_decode(const char *body, size_t len, msgpack_zone *zone,
                     msgpack_object *obj, char *err, size_t errlen);

/* ---- writing -------------------------------------------------------- */

/* Payloads at least this large are referenced (an iovec to the caller's
 * memory) instead of copied into the frame buffer. */
#define PSW_REF_MIN 4096

/* A seg's tag: 0 for memory the caller keeps unchanged until the bytes
 * are written; PSW_TAG_OWNED for a copy the psw_out owns (freed by reset
 * and destroy); any other value is the caller's label for memory that
 * may change, which it must turn into a copy (psw_out_seg_own) first. */
#define PSW_TAG_OWNED UINT32_MAX

typedef struct psw_seg {
    size_t at;           /* offset in sb where the reference goes */
    const void *ptr;     /* referenced bytes (not owned, unless tagged
                            PSW_TAG_OWNED) */
    size_t len;
    uint32_t tag;
} psw_seg;

/* Frames under construction: msgpack bytes in sb, interleaved at recorded
 * offsets with referenced payloads. Several frames may be appended one
 * after the other. Referenced memory must stay valid and unchanged until
 * the bytes are written. */
typedef struct psw_out {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    psw_seg *segs;
    size_t nsegs, segcap;
    size_t frame_start;  /* offset of the open frame's length, or SIZE_MAX */
    size_t frame_ref;    /* referenced bytes inside the open frame */
    size_t frame_seg;    /* first of segs inside the open frame */
    uint32_t frame_msgs; /* messages packed into the open frame */
    size_t total;        /* all bytes: sb plus references */
    size_t owned;        /* bytes of the copies it owns (psw_out_seg_own) */
    int oom;             /* set when an allocation failed */
} psw_out;

void psw_out_init(psw_out *o);
void psw_out_destroy(psw_out *o);
void psw_out_reset(psw_out *o);
/* Gives back what o's buffer holds past twice its bytes (8 KiB at
 * least), when no frame is open: a buffer that once held a large reply
 * and now a small one. Offsets into it stay valid, pointers do not. */
void psw_out_shrink(psw_out *o);

/* Opens a frame whose body is an array of the messages packed next (the
 * psw_pack_* functions count them). */
void psw_out_frame_begin(psw_out *o);
/* Whether a frame is open (begun and not yet ended). */
static inline int psw_out_frame_open(const psw_out *o)
{
    return o->frame_start != SIZE_MAX;
}

/* Bytes of the open frame's body so far (0 when none is open). */
size_t psw_out_frame_body(const psw_out *o);
/* Closes the open frame, writing its length and message count and
 * appending the CRC of its body (referenced payloads included: they must
 * hold their final bytes by now). Returns its body size. A frame that got
 * no message is dropped (returns 0). */
size_t psw_out_frame_end(psw_out *o);

/* Packs a BIN of len bytes: copied when small, referenced when large. */
void psw_out_bin(psw_out *o, const void *p, size_t len);

/* A BIN assembled from pieces: the header for len bytes, then pieces
 * adding up to exactly len. A piece is copied when small and referenced
 * (with the given tag, see psw_seg) when at least PSW_REF_MIN. */
void psw_out_bin_begin(psw_out *o, size_t len);
void psw_out_bin_piece(psw_out *o, const void *p, size_t len, uint32_t tag);

/* Makes seg i a copy owned by o, with the bytes it references now, and
 * returns the copy (NULL, with nothing changed, when memory runs out).
 * The caller repoints any iovec it handed out for those bytes. */
void *psw_out_seg_own(psw_out *o, size_t i);

/* Packs a BIN header of len bytes and returns where its len bytes go
 * (inside sb, to be filled by the caller), or NULL when out of memory.
 * The pointer stays valid while at most PSW_RESERVE_SLACK more bytes are
 * packed. */
#define PSW_RESERVE_SLACK 64
char *psw_out_bin_reserve(psw_out *o, size_t len);

/* A position in the frame buffer, and a return to it: drops everything
 * packed since the mark. Valid only when no payload was referenced (with
 * psw_out_bin) after the mark. */
typedef struct psw_mark {
    size_t size;
    uint32_t msgs;
} psw_mark;

static inline psw_mark psw_out_mark(const psw_out *o)
{
    psw_mark m = { o->sb.size, o->frame_msgs };
    return m;
}

static inline void psw_out_rewind(psw_out *o, psw_mark mark)
{
    o->sb.size = mark.size;
    o->frame_msgs = mark.msgs;
}

/* Number of iovecs psw_out_iov needs. */
size_t psw_out_iovcnt(const psw_out *o);
/* Fills iov (psw_out_iovcnt entries) with the bytes to write, in order. */
void psw_out_iov(const psw_out *o, struct iovec *iov);
/* After a write that took `done` bytes (less than all) of iov: advances
 * the first iovec not written whole past its written bytes and returns
 * its index, where the rest of the write starts. */
size_t psw_iov_skip(struct iovec *iov, size_t done);

#endif
