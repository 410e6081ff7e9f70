/* libFuzzer target for journal segments (daemon/journal.c): what psd
 * replays at start (psd_journal_replay, with the daemon's own apply
 * function psd_request_replay of daemon/request.c, as daemon/durable.c
 * calls it) and what `psd --check` reads (psd_journal_check), for a node
 * of the fixed cluster of request_conf.h.
 *
 * Input: byte 0 flags, byte 1 `pick`, then up to 6 segments
 * (docs/durability.md §6) separated by the 8 bytes "PSDJSEG\n" (past the
 * sixth, the separator is data). Flags: bits 0-1, the first segment's
 * number minus 1 (the others follow it); bits 2-3, the segment the replay
 * starts from minus 1 (the snapshot's journal_seq); bit 4, a number
 * skipped before the last segment; bit 5, node 1 (else 0); bit 6, every
 * record's two CRCs made right, walking the records by their lengths, so
 * that mutations get past them; bit 7, the same segments also written
 * under the other node's names (a folder shared by nodes). The files go to
 * a private folder (disk.h). `pick` chooses the damage of the derived
 * check below: bits 0-1 the kind (0 cut short, 1 zeros from a record's
 * start to the end, 2 zeros from a 4096-byte page boundary inside a record
 * to the end, 3 a page of zeros after the last record), bits 2-7 the
 * record, counted back from the last.
 *
 * Checked: what the sanitizers check (no crash, no read past a buffer, no
 * leak, no allocation a length in the file alone decides:
 * -malloc_limit_mb); the replay and the check return 0 or -1; a refusal
 * names a segment ("FILE: offset N: reason" with N within that file as
 * written, "FILE: missing (...)", or the missing snapshot) and leaves
 * every file as it was; a replay that succeeds cut at most the newest
 * segment, at the offset its message names, counted exactly the PUSH and
 * CLOCK records it applied, and says to open the segment after the
 * newest; the check refuses only what the replay refuses, and a missing
 * snapshot or a foreign start record at offset 0 that the replay refuses
 * the check refuses too; another node's files are never touched.
 * After a replay that succeeds: a second one, on a fresh node, cuts
 * nothing and gives the same state (fuzz_disk_digest); the node it left
 * is written as a snapshot and loads again the same; and the newest
 * segment damaged as a crash may leave it (`pick`) replays with a cut at
 * the first record the damage reaches and the same state as the segment
 * cut there by hand (§6, "Torn tail"). */
#define _GNU_SOURCE              /* memmem */
#include <errno.h>
#include <string.h>

#include "disk.h"
#include "fuzz.h"
#include "../../daemon/journal.h"
#include "../../daemon/log.h"
#include "../../daemon/request.h"
#include "../../daemon/snapshot.h"

#define T0_MS 1000000
#define SEP "PSDJSEG\n"
#define SEP_LEN 8
#define MAX_SEGS 6
#define HDR 12                   /* a record's header (journal.c) */
#define PAGE 4096                /* journal.c's TAIL_PAGE */

typedef struct seg {
    uint64_t seq;
    uint8_t *p;                  /* malloc'd copy */
    size_t n;
} seg;

/* One input, as parsed. */
static struct {
    int node, nseg;
    uint64_t from;
    seg s[MAX_SEGS];
    int other;                   /* the other node's copies exist */
} in;

static const char *dir, *dir2;   /* the segments; a snapshot of the node */

/* What one replay did. */
typedef struct result {
    int rc;
    uint64_t next, records, applied, digest;
    char cut[1024], err[1024];
} result;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    psd_log_set_level(PSD_LOG_ERROR);
    fuzz_disk_config();
    dir = fuzz_disk_dir("journal");
    dir2 = fuzz_disk_dir("journal-snapshot");
    return 0;
}

/* Makes both CRCs of every record right, walking them by their lengths;
 * a record cut short gets its header's CRC only. */
static void fix_crcs(uint8_t *p, size_t n)
{
    size_t off = 0;
    while (n - off >= HDR) {
        uint32_t len, crc;
        memcpy(&len, p + off, 4);
        int whole = len <= n - off - HDR;
        if (whole) {
            crc = psw_crc32c(0, p + off + HDR, len);
            memcpy(p + off + 4, &crc, 4);
        }
        crc = psw_crc32c(0, p + off, 8);
        memcpy(p + off + 8, &crc, 4);
        if (!whole)
            break;
        off += HDR + len;
    }
}

static void parse(const uint8_t *data, size_t size)
{
    uint8_t flags = size > 0 ? data[0] : 0;
    memset(&in, 0, sizeof in);
    in.node = flags >> 5 & 1;
    in.from = 1 + (flags >> 2 & 3);
    in.other = flags >> 7;
    if (size < 2)
        return;
    const uint8_t *p = data + 2, *end = data + size;
    uint64_t seq = 1 + (flags & 3);
    for (;;) {
        const uint8_t *q = in.nseg + 1 < MAX_SEGS
                               ? memmem(p, (size_t)(end - p), SEP, SEP_LEN)
                               : NULL;
        size_t n = (size_t)((q ? q : end) - p);
        seg *s = &in.s[in.nseg++];
        s->p = malloc(n ? n : 1);
        FUZZ_CHECK(s->p != NULL, "out of memory for %zu bytes", n);
        if (n)
            memcpy(s->p, p, n);
        s->n = n;
        if (flags & 0x40)
            fix_crcs(s->p, n);
        if (!q)
            break;
        p = q + SEP_LEN;
    }
    for (int i = 0; i < in.nseg; i++)
        in.s[i].seq = seq++ + ((flags & 0x10) && in.nseg > 1 &&
                               i == in.nseg - 1);
}

static void seg_path(char *buf, size_t len, int node, uint64_t seq)
{
    psd_journal_path(buf, len, dir, node, seq);
}

static void write_all(void)
{
    char path[512];
    fuzz_disk_clear(dir);
    for (int i = 0; i < in.nseg; i++) {
        seg_path(path, sizeof path, in.node, in.s[i].seq);
        fuzz_disk_write(path, in.s[i].p, in.s[i].n);
        if (in.other) {
            seg_path(path, sizeof path, !in.node, in.s[i].seq);
            fuzz_disk_write(path, in.s[i].p, in.s[i].n);
        }
    }
}

/* Every file but the node's segment `except` (0: none) is as written. */
static void check_untouched(uint64_t except, const char *after)
{
    char path[512];
    for (int i = 0; i < in.nseg; i++) {
        seg_path(path, sizeof path, in.node, in.s[i].seq);
        FUZZ_CHECK(in.s[i].seq == except ||
                   fuzz_disk_size(path) == (long long)in.s[i].n,
                   "%s: %s now has %lld bytes, %zu were written", after,
                   path, fuzz_disk_size(path), in.s[i].n);
        if (in.other) {
            seg_path(path, sizeof path, !in.node, in.s[i].seq);
            FUZZ_CHECK(fuzz_disk_size(path) == (long long)in.s[i].n,
                       "%s: another node's %s now has %lld bytes, %zu were "
                       "written", after, path, fuzz_disk_size(path),
                       in.s[i].n);
        }
    }
}

/* The apply function, counting what it applied. */
typedef struct counting {
    psd_replay_ctx ctx;
    uint64_t applied;
} counting;

static int count_apply(void *arg, const psd_jrecord *r, char *err,
                       size_t errlen)
{
    counting *c = arg;
    FUZZ_CHECK(r->type == PSD_J_PUSH || r->type == PSD_J_CLOCK ||
               r->type == PSD_J_PARAMS || r->type == PSD_J_WORKER ||
               r->type == PSD_J_ACK, "replay handed over a record of type "
               "%d", r->type);
    err[0] = '\0';
    int rc = psd_request_replay(&c->ctx, r, err, errlen);
    if (rc)
        FUZZ_CHECK(err[0] != '\0', "a record of type %d refused without a "
                   "reason", r->type);
    else
        c->applied += r->type == PSD_J_PUSH || r->type == PSD_J_CLOCK;
    return rc;
}

/* Replays the folder into a fresh node, as daemon/durable.c does;
 * `node_out`, when given, keeps the node (the caller destroys it). */
static void replay(result *res, psd_node *node_out)
{
    psd_node n;
    fuzz_disk_node(&n, in.node, T0_MS);
    counting c = { { &n, T0_MS, NULL, 0, 0 }, 0 };
    memset(res, 0, sizeof *res);
    memset(res->err, 0x55, sizeof res->err);
    res->rc = psd_journal_replay(dir, in.node, n.shape, n.inits, in.from,
                                 (size_t)n.cfg.max_frame + 4096, count_apply,
                                 &c, &res->next, &res->records, res->cut,
                                 sizeof res->cut, res->err, sizeof res->err);
    FUZZ_CHECK(res->rc == 0 || res->rc == -1, "psd_journal_replay returned "
               "%d", res->rc);
    if (res->rc == 0) {
        res->err[0] = '\0';
        FUZZ_CHECK(psd_node_apply_params(&n) == 0, "psd_node_apply_params");
        psd_request_replayed(&n, T0_MS);
        res->digest = fuzz_disk_digest(&n);
    }
    res->applied = c.applied;
    if (node_out)
        *node_out = n;
    else
        psd_node_destroy(&n);
}

/* The size the node's segment seq was written with, -1 for none. */
static long long written_size(uint64_t seq)
{
    for (int i = 0; i < in.nseg; i++)
        if (in.s[i].seq == seq)
            return (long long)in.s[i].n;
    return -1;
}

/* A refusal names a segment of the node: "FILE: offset N: reason" with N
 * within it, "FILE: missing (...)", or the missing snapshot. */
static void check_refusal(const char *what, const char *err)
{
    char prefix[512];
    int plen = snprintf(prefix, sizeof prefix, "%s/psd-node%d.journal.",
                        dir, in.node);
    FUZZ_CHECK(strncmp(err, prefix, (size_t)plen) == 0, "%s: the error does "
               "not name a segment of node %d: \"%s\"", what, in.node, err);
    char *end;
    uint64_t seq = strtoull(err + plen, &end, 10);
    FUZZ_CHECK(end == err + plen + 10 && end[0] == ':' && end[1] == ' ',
               "%s: no segment number: \"%s\"", what, err);
    const char *rest = end + 2;
    if (strncmp(rest, "missing (", 9) == 0 ||
        strncmp(rest, "the journal starts at segment ", 30) == 0)
        return;
    FUZZ_CHECK(strncmp(rest, "offset ", 7) == 0, "%s: neither an offset nor "
               "a missing file: \"%s\"", what, err);
    unsigned long long off = strtoull(rest + 7, &end, 10);
    FUZZ_CHECK(end != rest + 7 && end[0] == ':' && end[1] == ' ' &&
               end[2] != '\0', "%s: no offset and reason: \"%s\"", what, err);
    long long size = written_size(seq);
    FUZZ_CHECK(size >= 0 && off <= (unsigned long long)size, "%s: offset "
               "%llu of segment %llu, written with %lld bytes: \"%s\"", what,
               off, (unsigned long long)seq, size, err);
}

/* The node's highest segment, 0 when none. */
static uint64_t newest(void)
{
    uint64_t hi = 0;
    for (int i = 0; i < in.nseg; i++)
        if (in.s[i].seq > hi)
            hi = in.s[i].seq;
    return hi;
}

/* "PATH: offset N: ..." for the cut message: N, or -1 when it is not so. */
static long long cut_offset(const char *cut, const char *path)
{
    size_t plen = strlen(path);
    if (strncmp(cut, path, plen) != 0 || strncmp(cut + plen, ": offset ", 9))
        return -1;
    char *end;
    unsigned long long off = strtoull(cut + plen + 9, &end, 10);
    return end[0] == ':' && end[1] == ' ' ? (long long)off : -1;
}

/* The newest segment damaged as `pick` says, where the replay before
 * left it whole (o, n bytes): the replay must cut at the first record the
 * damage reaches, as if the file had been cut there. */
static void check_torn_tail(const result *first, uint8_t pick, size_t size)
{
    uint64_t hi = newest();
    char path[512];
    seg_path(path, sizeof path, in.node, hi);
    size_t n;
    char *o = fuzz_disk_read(path, &n);
    /* The record boundaries b[0..k]. */
    size_t cap = 16, k = 0, *b = malloc(cap * sizeof *b);
    FUZZ_CHECK(b != NULL, "out of memory");
    b[0] = 0;
    while (b[k] < n) {
        uint32_t len;
        FUZZ_CHECK(n - b[k] >= HDR, "the replay left %zu bytes of a record "
                   "header at the end of %s", n - b[k], path);
        memcpy(&len, o + b[k], 4);
        FUZZ_CHECK(len <= n - b[k] - HDR, "the replay left a record cut "
                   "short at offset %zu of %s", b[k], path);
        if (k + 2 > cap) {
            cap *= 2;
            b = realloc(b, cap * sizeof *b);
            FUZZ_CHECK(b != NULL, "out of memory");
        }
        b[k + 1] = b[k] + HDR + len;
        k++;
    }
    /* The damaged file m (mlen bytes). */
    int kind = pick & 3;
    size_t r = k ? k - 1 - (size_t)(pick >> 2) % k : 0, mlen = n;
    char *m = calloc(n + PAGE, 1);
    FUZZ_CHECK(m != NULL, "out of memory");
    memcpy(m, o, n);
    if (kind == 2) {
        /* A record holding a page boundary: r or the nearest before it,
         * else after it; without one, zeros from r's start. */
        size_t q = 0;
        for (size_t i = 0; i < k && !q; i++) {
            size_t j = i <= r ? r - i : i;
            size_t pb = (b[j] / PAGE + 1) * PAGE;
            if (pb < b[j + 1])
                q = pb;
        }
        if (q)
            memset(m + q, 0, n - q);
        else
            kind = 1;
    }
    if (kind == 0 && k) {
        size_t span = b[r + 1] - b[r];
        mlen = b[r] + 1 + size % (span - 1);
    } else if (kind == 1 && k)
        memset(m + b[r], 0, n - b[r]);
    else if (kind == 3 || !k)
        mlen = n + PAGE;         /* calloc'd: zeros */
    /* The first record the damage reaches. */
    size_t at = k;
    for (size_t i = 0; i < k && at == k; i++)
        if (b[i + 1] > mlen || memcmp(m + b[i], o + b[i], b[i + 1] - b[i]))
            at = i;
    int torn = at < k || mlen > n;

    result ref, got;
    if (torn) {
        fuzz_disk_write(path, o, b[at]);
        replay(&ref, NULL);
        FUZZ_CHECK(ref.rc == 0 && ref.cut[0] == '\0', "%s cut at its record "
                   "boundary %zu does not replay cleanly: %s%s", path, b[at],
                   ref.err, ref.cut);
    } else
        ref = *first;
    fuzz_disk_write(path, m, mlen);
    replay(&got, NULL);
    FUZZ_CHECK(got.rc == 0, "%s damaged from offset %zu as a crash may "
               "leave it (kind %d, %zu of %zu bytes) is refused: %s", path,
               kind == 0 ? mlen : kind == 3 ? n : b[at], kind, mlen, n,
               got.err);
    if (torn) {
        long long off = cut_offset(got.cut, path);
        FUZZ_CHECK(off == (long long)b[at], "%s damaged (kind %d) from its "
                   "record at %zu: cut \"%s\"", path, kind, b[at], got.cut);
        FUZZ_CHECK(fuzz_disk_size(path) == (long long)b[at], "%s was cut to "
                   "%lld bytes, its message says %zu", path,
                   fuzz_disk_size(path), b[at]);
    } else
        FUZZ_CHECK(got.cut[0] == '\0', "%s, whole, was cut: %s", path,
                   got.cut);
    FUZZ_CHECK(got.records == ref.records && got.digest == ref.digest &&
               got.next == ref.next, "%s damaged (kind %d): %llu records, "
               "state %016llx; cut by hand at %zu: %llu, %016llx", path, kind,
               (unsigned long long)got.records,
               (unsigned long long)got.digest, b[at],
               (unsigned long long)ref.records,
               (unsigned long long)ref.digest);
    check_untouched(hi, "after the damaged segment's replay");
    free(m);
    free(b);
    free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse(data, size);
    uint8_t pick = size > 1 ? data[1] : 0;
    write_all();
    const psd_config *cfg = fuzz_disk_config();
    uint64_t shape = psd_config_shape(cfg), hi = newest();
    char kerr[1024] = "";
    int rc_k = psd_journal_check(dir, in.node, shape, psd_config_inits(cfg),
                                 in.from, (size_t)cfg->max_frame + 4096,
                                 kerr, sizeof kerr);
    FUZZ_CHECK(rc_k == 0 || rc_k == -1, "psd_journal_check returned %d (%s)",
               rc_k, kerr);
    if (rc_k)
        check_refusal("the check", kerr);
    check_untouched(0, "after the check");

    result first;
    psd_node n;
    replay(&first, &n);
    if (first.rc) {
        check_refusal("the replay", first.err);
        FUZZ_CHECK(first.cut[0] == '\0', "a refused replay says it cut: %s",
                   first.cut);
        check_untouched(0, "after a refused replay");
        if (strstr(first.err, ": the journal starts at segment ") ||
            strstr(first.err, ": offset 0: written by node "))
            FUZZ_CHECK(rc_k == -1, "the replay refuses (%s), the check does "
                       "not", first.err);
        if (strstr(first.err, ": the journal starts at segment "))
            FUZZ_CHECK(strcmp(kerr, first.err) == 0, "the check says "
                       "\"%s\", the replay \"%s\"", kerr, first.err);
        psd_node_destroy(&n);
        goto out;
    }
    FUZZ_CHECK(rc_k == 0, "the check refuses what the replay takes: %s",
               kerr);
    FUZZ_CHECK(first.records == first.applied, "the replay counts %llu "
               "records, %llu PUSH and CLOCK records were applied",
               (unsigned long long)first.records,
               (unsigned long long)first.applied);
    FUZZ_CHECK(first.next == (hi >= in.from ? hi + 1 : in.from), "next "
               "segment %llu after segments up to %llu from %llu",
               (unsigned long long)first.next, (unsigned long long)hi,
               (unsigned long long)in.from);
    check_untouched(hi, "after the replay");
    if (hi) {
        char path[512];
        seg_path(path, sizeof path, in.node, hi);
        long long now = fuzz_disk_size(path), was = written_size(hi);
        if (first.cut[0])
            FUZZ_CHECK(hi >= in.from && cut_offset(first.cut, path) == now &&
                       now < was, "cut \"%s\", and %s has %lld bytes of "
                       "%lld", first.cut, path, now, was);
        else
            FUZZ_CHECK(now == was, "%s has %lld bytes of %lld, with no cut "
                       "said", path, now, was);
    }

    /* The node the replay left is whole: written as a snapshot, it loads
     * again the same. */
    char err[1024] = "";
    psd_snap_info si;
    fuzz_disk_clear(dir2);
    FUZZ_CHECK(psd_snapshot_write(&n, dir2, 1, first.next, &si, err,
                                  sizeof err) == 0,
               "the replayed node cannot be written: %s", err);
    psd_node_destroy(&n);
    fuzz_disk_node(&n, in.node, T0_MS);
    FUZZ_CHECK(psd_snapshot_load(&n, dir2, T0_MS, &si, NULL, err,
                                 sizeof err) == 0,
               "the replayed node, written, does not load: %s", err);
    FUZZ_CHECK(fuzz_disk_digest(&n) == first.digest, "the replayed node, "
               "written and loaded, holds another state");
    psd_node_destroy(&n);

    /* What was cut stays cut: a second replay cuts nothing. */
    result again;
    replay(&again, NULL);
    FUZZ_CHECK(again.rc == 0 && again.cut[0] == '\0' &&
               again.records == first.records &&
               again.digest == first.digest && again.next == first.next,
               "a second replay: rc %d, cut \"%s\", %llu records (%llu "
               "before), same state %d: %s", again.rc, again.cut,
               (unsigned long long)again.records,
               (unsigned long long)first.records,
               again.digest == first.digest, again.err);
    if (hi >= in.from)
        check_torn_tail(&first, pick, size);
out:
    for (int i = 0; i < in.nseg; i++)
        free(in.s[i].p);
    return 0;
}
