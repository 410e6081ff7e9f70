/* Reads IDX image and label files (the MNIST format) for the examples.
 * Compressed files are read from a `gzip -dc` child through popen, so the
 * examples need no zlib. */
#include "idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define IMAGES_MAGIC 0x00000803u  /* uint8 data, 3 dimensions */
#define LABELS_MAGIC 0x00000801u  /* uint8 data, 1 dimension */

/* One open input: a plain file, or the output of `gzip -dc`. */
typedef struct stream {
    FILE *f;
    int piped;              /* f came from popen */
    int truncated;          /* a read hit the end of the data early */
    unsigned long long pos; /* bytes consumed so far, for messages */
    const char *path;       /* borrowed from the caller, for messages */
} stream;

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Opens path for reading, through gzip when it ends in ".gz". Returns 0, or
 * -1 with err set. */
static int stream_open(stream *s, const char *path, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->path = path;

    /* Opening the file ourselves first turns a missing or unreadable file
     * into a clear message here, not a gzip complaint on stderr followed by
     * a puzzling "file is empty". */
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (!ends_with(path, ".gz")) {
        s->f = f;
        return 0;
    }
    fclose(f);

    /* The path goes to the shell between single quotes, where nothing but
     * a single quote is special. Refusing that one character is simpler
     * and safer than escaping it. */
    if (strchr(path, '\'')) {
        snprintf(err, errlen, "%s: path contains a single quote", path);
        return -1;
    }
    size_t len = strlen(path) + sizeof "gzip -dc -- ''";
    char *cmd = malloc(len);
    if (!cmd) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(cmd, len, "gzip -dc -- '%s'", path);
    errno = 0;
    s->f = popen(cmd, "r");
    int e = errno;
    free(cmd);
    if (!s->f) {
        snprintf(err, errlen, "%s: cannot run gzip: %s", path,
                 e ? strerror(e) : "popen failed");
        return -1;
    }
    s->piped = 1;
    return 0;
}

/* Closes s (a no-op when it is not open). For a pipe, returns -1 with err
 * set when gzip did not exit 0: corrupt input, or a CRC error that gzip only
 * detects at the end of the stream. Returns 0 otherwise. */
static int stream_close(stream *s, char *err, size_t errlen)
{
    if (!s->f)
        return 0;
    FILE *f = s->f;
    s->f = NULL;
    if (!s->piped) {
        fclose(f);
        return 0;
    }
    int st = pclose(f);
    if (st == -1) {
        snprintf(err, errlen, "%s: waiting for gzip: %s", s->path,
                 strerror(errno));
        return -1;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    if (WIFEXITED(st))
        snprintf(err, errlen, "%s: gzip -dc failed (exit status %d)",
                 s->path, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(err, errlen, "%s: gzip -dc killed by signal %d", s->path,
                 WTERMSIG(st));
    else
        snprintf(err, errlen, "%s: gzip -dc failed (status %d)", s->path, st);
    return -1;
}

/* Reads exactly n bytes. Returns 0, or -1 with err set. `want` is the size
 * the whole file should have, for the message when it is shorter. */
static int read_exact(stream *s, void *buf, size_t n, unsigned long long want,
                      char *err, size_t errlen)
{
    size_t got = fread(buf, 1, n, s->f);
    s->pos += got;
    if (got == n)
        return 0;
    if (ferror(s->f)) {
        snprintf(err, errlen, "%s: read error after %llu bytes: %s", s->path,
                 s->pos, strerror(errno));
    } else {
        s->truncated = 1;
        snprintf(err, errlen, "%s: data ends after %llu bytes, want %llu",
                 s->path, s->pos, want);
    }
    return -1;
}

/* Fails unless the data ends exactly here: extra bytes mean the header
 * does not describe the file. Reading to the end also lets gzip finish its
 * CRC check before stream_close asks how it exited. */
static int expect_end(stream *s, char *err, size_t errlen)
{
    int c = fgetc(s->f);
    if (c == EOF && !ferror(s->f))
        return 0;
    if (c == EOF)
        snprintf(err, errlen, "%s: read error after %llu bytes: %s", s->path,
                 s->pos, strerror(errno));
    else
        snprintf(err, errlen, "%s: unexpected data after %llu bytes",
                 s->path, s->pos);
    return -1;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
           (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

/* Reads the magic number and ndims big-endian dimensions (at most 3).
 * Returns 0, or -1 with err set. */
static int read_header(stream *s, uint32_t magic, const char *kind,
                       uint32_t *dims, int ndims, char *err, size_t errlen)
{
    unsigned char b[16];
    size_t len = 4 + 4 * (size_t)ndims;
    if (read_exact(s, b, len, len, err, errlen) < 0)
        return -1;
    if (be32(b) != magic) {
        snprintf(err, errlen, "%s: not an IDX %s file (magic 0x%08x, "
                 "want 0x%08x)", s->path, kind, (unsigned)be32(b),
                 (unsigned)magic);
        return -1;
    }
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(b + 4 + 4 * i);
    return 0;
}

/* Reads both headers and checks that they describe n 28x28 images and n
 * labels, with n within limits. Sets *n; returns 0, or -1 with err set. */
static int read_headers(stream *img, stream *lab, size_t *n,
                        char *err, size_t errlen)
{
    uint32_t d[3], nlab;
    if (read_header(img, IMAGES_MAGIC, "image", d, 3, err, errlen) < 0 ||
        read_header(lab, LABELS_MAGIC, "label", &nlab, 1, err, errlen) < 0)
        return -1;
    if (d[1] != IDX_ROWS || d[2] != IDX_COLS) {
        snprintf(err, errlen, "%s: images are %ux%u, want %dx%d", img->path,
                 (unsigned)d[1], (unsigned)d[2], IDX_ROWS, IDX_COLS);
        return -1;
    }
    if (d[0] == 0 || d[0] > IDX_MAX_ITEMS) {
        snprintf(err, errlen, "%s: %u images, want 1..%d", img->path,
                 (unsigned)d[0], IDX_MAX_ITEMS);
        return -1;
    }
    if (nlab != d[0]) {
        snprintf(err, errlen, "%s has %u images but %s has %u labels",
                 img->path, (unsigned)d[0], lab->path, (unsigned)nlab);
        return -1;
    }
    *n = d[0];
    return 0;
}

/* Reads n images into pixels, scaled to [0, 1]. */
static int read_pixels(stream *s, size_t n, float *pixels,
                       char *err, size_t errlen)
{
    unsigned long long want = 16 + (unsigned long long)n * IDX_PIXELS;
    unsigned char buf[IDX_PIXELS];
    for (size_t i = 0; i < n; i++) {
        if (read_exact(s, buf, sizeof buf, want, err, errlen) < 0)
            return -1;
        float *p = pixels + i * IDX_PIXELS;
        for (size_t j = 0; j < IDX_PIXELS; j++)
            p[j] = (float)buf[j] / 255.0f;
    }
    return 0;
}

/* Reads n labels and checks that each names a class: the trainers index
 * arrays with them. */
static int read_labels(stream *s, size_t n, uint8_t *labels,
                       char *err, size_t errlen)
{
    if (read_exact(s, labels, n, 8 + (unsigned long long)n, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (labels[i] >= IDX_CLASSES) {
            snprintf(err, errlen, "%s: label %u at index %zu is not in "
                     "0..%d", s->path, (unsigned)labels[i], i,
                     IDX_CLASSES - 1);
            return -1;
        }
    }
    return 0;
}

/* Closes both streams. When a read came up short or everything else
 * succeeded, a gzip failure is the better explanation (corrupt file rather
 * than "data ends after..."), so it replaces err. After other errors gzip
 * was cut off on purpose and its status means nothing. */
static int close_both(stream *img, stream *lab, int rc,
                      char *err, size_t errlen)
{
    stream *s[2] = { img, lab };
    for (int i = 0; i < 2; i++) {
        int report = rc == 0 || s[i]->truncated;
        char tmp[512];
        if (stream_close(s[i], tmp, sizeof tmp) < 0 && report) {
            snprintf(err, errlen, "%s", tmp);
            rc = -1;
        }
    }
    return rc;
}

int idx_load(const char *images, const char *labels, idx_set *out,
             char *err, size_t errlen)
{
    stream img, lab;
    idx_set set = { 0, NULL, NULL };
    int rc = -1;

    memset(out, 0, sizeof *out);
    memset(&lab, 0, sizeof lab);
    if (stream_open(&img, images, err, errlen) < 0)
        return -1;
    if (stream_open(&lab, labels, err, errlen) < 0)
        goto done;
    if (read_headers(&img, &lab, &set.n, err, errlen) < 0)
        goto done;

    set.pixels = malloc(set.n * IDX_PIXELS * sizeof *set.pixels);
    set.labels = malloc(set.n);
    if (!set.pixels || !set.labels) {
        snprintf(err, errlen, "%s: out of memory for %zu images", images,
                 set.n);
        goto done;
    }
    if (read_pixels(&img, set.n, set.pixels, err, errlen) < 0 ||
        expect_end(&img, err, errlen) < 0 ||
        read_labels(&lab, set.n, set.labels, err, errlen) < 0 ||
        expect_end(&lab, err, errlen) < 0)
        goto done;
    rc = 0;

done:
    rc = close_both(&img, &lab, rc, err, errlen);
    if (rc == 0)
        *out = set;
    else
        idx_destroy(&set);
    return rc;
}

/* Writes DIR/SPLIT-KIND-ubyteEXT into buf. Returns 0, or -1 if it does not
 * fit. */
static int split_path(char *buf, size_t size, const char *dir,
                      const char *split, const char *kind, const char *ext)
{
    int n = snprintf(buf, size, "%s/%s-%s-ubyte%s", dir, split, kind, ext);
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

int idx_load_split(const char *dir, const char *split, idx_set *out,
                   char *err, size_t errlen)
{
    char images[4096], labels[4096];
    const char *ext = ".gz";

    memset(out, 0, sizeof *out);
    if (split_path(images, sizeof images, dir, split, "images-idx3", ext) == 0
        && access(images, F_OK) != 0
        && split_path(images, sizeof images, dir, split, "images-idx3", "") == 0
        && access(images, F_OK) == 0)
        ext = "";
    if (split_path(images, sizeof images, dir, split, "images-idx3", ext) < 0 ||
        split_path(labels, sizeof labels, dir, split, "labels-idx1", ext) < 0) {
        /* The trainers take DIR as --data. */
        snprintf(err, errlen, "--data: path too long");
        return -1;
    }
    return idx_load(images, labels, out, err, errlen);
}

void idx_destroy(idx_set *s)
{
    free(s->pixels);
    free(s->labels);
    memset(s, 0, sizeof *s);
}
