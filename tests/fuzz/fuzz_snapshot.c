/* libFuzzer target for snapshot files (daemon/snapshot.c, with the
 * loaders of daemon/table.c, daemon/sync.c and daemon/dedup.c under it):
 * what psd reads at start (psd_snapshot_load) and what `psd --check`
 * reads (psd_snapshot_check), for a node of the fixed cluster of
 * request_conf.h.
 *
 * Input: a snapshot file (docs/durability.md §5), written as
 * psd-nodeN.snap in a private folder (disk.h), N the node its header
 * names when that is 1, else 0. Each input runs twice: as it is, and
 * with its checksums made right (the header's; the sections', found from
 * the end of the file by their stored lengths, the last one first), so
 * that mutations get past the CRCs to the parsers behind them.
 *
 * Checked: what the sanitizers check (no crash, no read past a buffer, no
 * leak, no allocation the file's counts alone decide: -malloc_limit_mb);
 * the load returns 0 or -1, never 1 (the file is there); a refusal reads
 * "FILE: offset N: reason" with FILE the snapshot and N within it, and so
 * does a refusal of the check; the check and the load agree where they
 * read the same thing: the check refuses only files the load refuses, at
 * the same offset or after it (it reads the header, and every section
 * when the shape says the tables differ, but not the tables' keys; a
 * shape refused after that is at offset 24), with the same words at the
 * header, a file that loads passes the check with
 * the same journal_seq, and both match a snapshot's tables to the
 * config's the same way (by name: psd_snap_tables); a load reports the
 * file's size.
 * A node that loaded is whole: it is written again with psd's own writer
 * (psd_snapshot_write), that file loads into a fresh node, and both nodes
 * hold the same state (fuzz_disk_digest), generation and journal_seq. */
#include <errno.h>
#include <string.h>

#include "disk.h"
#include "fuzz.h"
#include "request_conf.h"
#include "../../daemon/log.h"
#include "../../daemon/snapshot.h"

#define T0_MS 1000000
#define HEADER 64
#define SEC_TRAILER 12           /* u64 length, u32 CRC */
#define SEC_HEAD 8               /* u32 kind, u32 aux */

static const char *dir, *dir2;   /* the input; the node written again */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    psd_log_set_level(PSD_LOG_ERROR);
    fuzz_disk_config();
    dir = fuzz_disk_dir("snapshot");
    dir2 = fuzz_disk_dir("snapshot-again");
    return 0;
}

/* Makes the header's CRC and each section's right, walking the sections
 * back from the end of the file by their stored lengths. 1 when a byte
 * changed. */
static int fix_crcs(uint8_t *p, size_t n)
{
    int changed = 0;
    uint32_t crc;
    if (n >= HEADER) {
        crc = psw_crc32c(0, p, 60);
        changed |= memcmp(p + 60, &crc, 4) != 0;
        memcpy(p + 60, &crc, 4);
    }
    size_t end = n;
    while (end >= HEADER + SEC_HEAD + SEC_TRAILER) {
        uint64_t len;
        memcpy(&len, p + end - SEC_TRAILER, 8);
        if (len > end - HEADER - SEC_HEAD - SEC_TRAILER)
            break;
        size_t start = end - SEC_TRAILER - (size_t)len - SEC_HEAD;
        crc = psw_crc32c(0, p + start, SEC_HEAD + (size_t)len);
        changed |= memcmp(p + end - 4, &crc, 4) != 0;
        memcpy(p + end - 4, &crc, 4);
        end = start;
    }
    return changed;
}

/* Checks that err reads "PATH: offset N: reason" with N <= max, and
 * returns N. */
static unsigned long long check_error(const char *what, const char *err,
                                      const char *path, uint64_t max)
{
    size_t plen = strlen(path);
    FUZZ_CHECK(strncmp(err, path, plen) == 0 &&
               strncmp(err + plen, ": offset ", 9) == 0,
               "%s: the error does not start with \"%s: offset \": \"%s\"",
               what, path, err);
    char *end;
    errno = 0;
    unsigned long long off = strtoull(err + plen + 9, &end, 10);
    FUZZ_CHECK(errno == 0 && end != err + plen + 9 && end[0] == ':' &&
               end[1] == ' ' && end[2] != '\0' && end[2] != ' ',
               "%s: no offset and reason: \"%s\"", what, err);
    FUZZ_CHECK(off <= max, "%s: offset %llu of a file of %llu bytes: \"%s\"",
               what, off, (unsigned long long)max, err);
    return off;
}

static void run(const uint8_t *data, size_t size)
{
    uint32_t hnode = 0;
    if (size >= 16)
        memcpy(&hnode, data + 12, 4);
    int node = hnode == 1 ? 1 : 0;
    char path[256], path2[256];
    psd_snapshot_path(path, sizeof path, dir, node);
    psd_snapshot_path(path2, sizeof path2, dir2, node);
    fuzz_disk_clear(dir);
    fuzz_disk_write(path, data, size);

    char cerr[1024] = "", lerr[1024] = "";
    /* Tables are matched by name, as psd does, two of them dropped. */
    static const char *const drop[] = { FUZZ_DROPPED_DENSE,
                                        FUZZ_DROPPED_SPARSE };
    psd_snap_tables ct = { .drop = drop, .ndrop = 2 }, lt = ct;
    psd_snap_info ci;
    memset(&ci, 0x55, sizeof ci);
    int rc_c = psd_snapshot_check(dir, node, fuzz_disk_config(), &ct, &ci,
                                  cerr, sizeof cerr);
    FUZZ_CHECK(rc_c == 0 || rc_c == -1, "psd_snapshot_check returned %d "
               "(%s)", rc_c, cerr);
    unsigned long long coff = rc_c ? check_error("the check", cerr, path,
                                                 size) : 0;

    psd_node n;
    psd_snap_info si;
    memset(&si, 0x55, sizeof si);
    fuzz_disk_node(&n, node, T0_MS);
    int rc_l = psd_snapshot_load(&n, dir, T0_MS, &si, &lt, lerr,
                                 sizeof lerr);
    FUZZ_CHECK(rc_l == 0 || rc_l == -1, "psd_snapshot_load returned %d (%s)",
               rc_l, lerr);
    /* The check reads past tables without looking at their keys, so the
     * load may refuse a section for a reason the check does not see,
     * but never later in the file; a header both refuse alike. The shape
     * is checked once every section was read and refused at its field
     * (offset 24), so there the load may refuse any section first. */
    FUZZ_CHECK(!rc_c || rc_l, "the check says \"%s\", the load took it",
               cerr);
    if (rc_c) {
        unsigned long long loff = check_error("the load", lerr, path, size);
        FUZZ_CHECK((loff <= coff || coff == 24) &&
                   (coff != 0 || strcmp(cerr, lerr) == 0),
                   "the check says \"%s\", the load \"%s\"", cerr, lerr);
    }
    FUZZ_CHECK((ct.map != NULL) == (!rc_c && ct.nmap > 0) &&
               (lt.map != NULL) == (!rc_l && lt.nmap > 0),
               "a table map without its count, or after a refusal");
    if (!rc_c && !rc_l)
        FUZZ_CHECK((ct.map != NULL) == (lt.map != NULL) &&
                   ct.nmap == lt.nmap && ct.added == lt.added &&
                   (!ct.map || memcmp(ct.map, lt.map, ct.nmap *
                                      sizeof *ct.map) == 0),
                   "the check and the load match the tables differently");
    if (!rc_l)
        FUZZ_CHECK(ct.dropped == lt.dropped, "the check drops %d tables, "
                   "the load %d", ct.dropped, lt.dropped);
    free(ct.map);
    free(lt.map);
    if (rc_l) {
        (void)check_error("the load", lerr, path, size);
        psd_node_destroy(&n);
        return;
    }
    FUZZ_CHECK(rc_c == 0, "the load took a file the check refuses: %s", cerr);
    FUZZ_CHECK(ci.journal_seq == si.journal_seq, "the check says journal_seq "
               "%llu, the load %llu", (unsigned long long)ci.journal_seq,
               (unsigned long long)si.journal_seq);
    FUZZ_CHECK(si.bytes == size, "the load says %llu bytes of %zu",
               (unsigned long long)si.bytes, size);

    /* A node that loaded can be written and loaded again, the same. */
    uint64_t d1 = fuzz_disk_digest(&n);
    char werr[1024] = "";
    psd_snap_info wi, si2;
    fuzz_disk_clear(dir2);
    FUZZ_CHECK(psd_snapshot_write(&n, dir2, si.generation, si.journal_seq,
                                  &wi, werr, sizeof werr) == 0,
               "a node that loaded cannot be written: %s", werr);
    psd_node_destroy(&n);
    fuzz_disk_node(&n, node, T0_MS);
    FUZZ_CHECK(psd_snapshot_load(&n, dir2, T0_MS, &si2, NULL, lerr,
                                 sizeof lerr) == 0,
               "a node that loaded, written again, does not load: %s", lerr);
    FUZZ_CHECK(si2.generation == si.generation &&
               si2.journal_seq == si.journal_seq && si2.bytes == wi.bytes,
               "written again: generation %llu journal_seq %llu, was %llu "
               "%llu", (unsigned long long)si2.generation,
               (unsigned long long)si2.journal_seq,
               (unsigned long long)si.generation,
               (unsigned long long)si.journal_seq);
    uint64_t d2 = fuzz_disk_digest(&n);
    FUZZ_CHECK(d1 == d2, "a node that loaded, written and loaded again, "
               "holds another state (%016llx, was %016llx)",
               (unsigned long long)d2, (unsigned long long)d1);
    psd_node_destroy(&n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    FUZZ_CHECK(fixed != NULL, "out of memory for %zu bytes", size);
    if (size)
        memcpy(fixed, data, size);
    if (fix_crcs(fixed, size))
        run(fixed, size);
    free(fixed);
    return 0;
}
