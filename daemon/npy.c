/* The .npy format, written and read; see npy.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "npy.h"

/* A header longer than this is no array of psd's: refused before it is
 * read (a version 2 header names a length of up to 4 GiB). */
#define HEADER_MAX 65536

static char host_order(void)
{
    const uint16_t one = 1;
    return *(const char *)&one ? '<' : '>';
}

int psd_npy_header(FILE *f, const char *type, uint64_t n, uint32_t dim)
{
    char dict[200], shape[64];
    if (dim)
        snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)n,
                 dim);
    else
        snprintf(shape, sizeof shape, "(%llu,)", (unsigned long long)n);
    int len = snprintf(dict, sizeof dict, "{'descr': '%c%s', "
                       "'fortran_order': False, 'shape': %s, }", host_order(),
                       type, shape);
    size_t used = 10 + (size_t)len + 1, pad = (64 - used % 64) % 64;
    size_t hl = (size_t)len + pad + 1;
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              (unsigned char)(hl & 0xff),
                              (unsigned char)(hl >> 8) };
    if (fwrite(pre, 1, sizeof pre, f) != sizeof pre ||
        fwrite(dict, 1, (size_t)len, f) != (size_t)len)
        return -1;
    for (size_t i = 0; i < pad; i++)
        if (fputc(' ', f) == EOF)
            return -1;
    return fputc('\n', f) == EOF ? -1 : 0;
}

/* The value of 'key' in the header dict h: where it starts (after the
 * colon and spaces), or NULL. Only a key of the dict counts (after its
 * '{' or a ','), not the same text inside another value. */
static const char *value_of(const char *h, const char *key)
{
    char q[32];
    snprintf(q, sizeof q, "'%s'", key);
    for (const char *p = strstr(h, q); p; p = strstr(p + 1, q)) {
        const char *b = p;
        while (b > h && b[-1] == ' ')
            b--;
        if (b == h || (b[-1] != '{' && b[-1] != ','))
            continue;
        p += strlen(q);
        while (*p == ' ')
            p++;
        if (*p != ':')
            return NULL;
        p++;
        while (*p == ' ')
            p++;
        return p;
    }
    return NULL;
}

/* How much of a value to quote in a message: up to its end in the dict. */
static int quoted(const char *v)
{
    int n = 0;
    while (v[n] && v[n] != ',' && v[n] != '}' && n < 40)
        n++;
    return n;
}

/* Reads a whole number at *p (digits, then an optional L of Python 2). */
static int number(const char **p, uint64_t *v)
{
    const char *s = *p;
    if (*s < '0' || *s > '9')
        return -1;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (x > (UINT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (uint64_t)(*s - '0');
    }
    if (*s == 'L')
        s++;
    *p = s;
    *v = x;
    return 0;
}

/* "(N,)", "(N, D)" or "(N, D,)" into *n and *dim (0 for 1-D). */
static int shape_of(const char *p, uint64_t *n, uint64_t *dim)
{
    if (*p++ != '(')
        return -1;
    while (*p == ' ')
        p++;
    if (number(&p, n))
        return -1;
    while (*p == ' ')
        p++;
    if (*p != ',')
        return -1;
    p++;
    while (*p == ' ')
        p++;
    *dim = 0;
    if (*p == ')')
        return 0;
    if (number(&p, dim) || *dim == 0)
        return -1;
    while (*p == ' ')
        p++;
    if (*p == ',')
        p++;
    while (*p == ' ')
        p++;
    return *p == ')' ? 0 : -1;
}

#define FAIL(...)                                                         \
    do {                                                                  \
        int at_ = snprintf(err, errlen, "%s: ", path);                    \
        if (at_ >= 0 && (size_t)at_ < errlen)                             \
            snprintf(err + at_, errlen - (size_t)at_, __VA_ARGS__);       \
        goto fail;                                                        \
    } while (0)

int psd_npy_open(psd_npy *a, const char *path, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    char *h = NULL;
    /* Opened without waiting: a FIFO would block open() until a writer
     * came. Only a regular file is read, and then in blocking mode. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st = { 0 };
    int bad = fd < 0 || fstat(fd, &st);
    const char *why = bad ? strerror(errno) : NULL;
    if (!bad && !S_ISREG(st.st_mode)) {
        bad = 1;
        why = "not a regular file";
    }
    if (!bad && (fcntl(fd, F_SETFL, 0) || !(a->f = fdopen(fd, "rb")))) {
        bad = 1;
        why = strerror(errno);
    }
    if (bad) {
        snprintf(err, errlen, "%s: %s", path, why);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    unsigned char pre[12];
    if (fread(pre, 1, 10, a->f) != 10 || memcmp(pre, "\x93NUMPY", 6))
        FAIL("not an .npy file (no \\x93NUMPY at its start)");
    unsigned major = pre[6];
    uint64_t hl, start;
    if (major == 1) {
        hl = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, a->f) != 2)
            FAIL("cut short in its header");
        hl = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 |
             (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
        start = 12;
    } else
        FAIL(".npy version %u is not 1, 2 or 3", major);
    if (hl == 0 || hl > HEADER_MAX)
        FAIL("a header of %llu bytes", (unsigned long long)hl);
    h = malloc(hl + 1);
    if (!h)
        FAIL("out of memory");
    if (fread(h, 1, hl, a->f) != hl)
        FAIL("cut short in its header");
    h[hl] = '\0';
    if (strlen(h) != hl)
        FAIL("a NUL in its header");
    const char *d = value_of(h, "descr"), *fo = value_of(h, "fortran_order");
    const char *sh = value_of(h, "shape");
    if (!d || !fo || !sh)
        FAIL("its header lacks descr, fortran_order or shape: %.120s", h);
    if (strncmp(fo, "False", 5))
        FAIL("Fortran order (save numpy.ascontiguousarray(a): C order)");
    char want = host_order();
    if (strnlen(d, 5) < 5 || d[0] != '\'' || (d[1] != want && d[1] != '=') ||
        d[4] != '\'' ||
        (strncmp(d + 2, "f4", 2) && strncmp(d + 2, "u8", 2) &&
         strncmp(d + 2, "i8", 2)))
        FAIL("its type is %.*s; psd reads float32 values and uint64 or "
             "int64 keys in this host's byte order ('%cf4', '%cu8', '%ci8')",
             quoted(d), d, want, want, want);
    a->kind = d[2];
    uint64_t n, dim;
    if (shape_of(sh, &n, &dim)) {
        int sl = 0;              /* quoted up to its ')' */
        while (sh[sl] && sh[sl] != ')' && sl < 40)
            sl++;
        FAIL("its shape %.*s is not (N,) or (N, D)", sl + (sh[sl] == ')'),
             sh);
    }
    if (dim > 65536)
        FAIL("rows of %llu values (a table's dim is at most 65536)",
             (unsigned long long)dim);
    uint64_t size = a->kind == 'f' ? 4 : 8, per = size * (dim ? dim : 1);
    if (n > ((uint64_t)1 << 62) / per)
        FAIL("%llu rows is too many", (unsigned long long)n);
    if ((uint64_t)st.st_size != start + hl + n * per)
        FAIL("%llu bytes, where its header says %llu rows of %llu bytes "
             "after %llu bytes of header: it is cut short or has more",
             (unsigned long long)st.st_size, (unsigned long long)n,
             (unsigned long long)per, (unsigned long long)(start + hl));
    a->n = n;
    a->dim = (uint32_t)dim;
    free(h);
    return 0;
fail:
    free(h);
    fclose(a->f);
    a->f = NULL;
    return -1;
}

long psd_npy_read(psd_npy *a, void *buf, size_t rows)
{
    uint64_t left = a->n - a->read;
    size_t m = rows < left ? rows : (size_t)left;
    if (m == 0)
        return 0;
    size_t per = (a->kind == 'f' ? 4 : 8) * (size_t)(a->dim ? a->dim : 1);
    if (fread(buf, per, m, a->f) != m) {
        if (!ferror(a->f))
            errno = EIO;         /* shorter than its stat said: changed */
        return -1;
    }
    a->read += m;
    return (long)m;
}

void psd_npy_close(psd_npy *a)
{
    if (a->f)
        fclose(a->f);
    a->f = NULL;
}

uint32_t psd_npy_crc32(uint32_t crc, const void *p, size_t n)
{
    /* ISA-L's reflected CRC-32 is zlib's, and chains as zlib's does. */
    return crc32_gzip_refl(crc, (const unsigned char *)p, (uint64_t)n);
}
