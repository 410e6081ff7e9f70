/* ARFF text data sets for the examples: an in-place parser that calls back
 * per record, the word hasher that turns a text into sorted feature keys,
 * and a loader that builds a whole labelled set from a file. */
#include "arff.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FNV_OFFSET 2166136261u
#define FNV_PRIME 16777619u

__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    if (errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static char *skip_blanks(char *p, const char *end)
{
    while (p < end && is_blank(*p))
        p++;
    return p;
}

/* Parses one data line s[0..end): 'text',label. Unescapes the text in
 * place and sets *text, *len and *label. Returns 0, or -1 with *why set to
 * a static reason. */
static int parse_record(char *s, const char *end, char **text, size_t *len,
                        int *label, const char **why)
{
    char quote = *s;
    if (quote != '\'' && quote != '"') {
        *why = "expected a quoted text";
        return -1;
    }
    char *r = s + 1, *w = s + 1;
    for (;;) {
        if (r == end) {
            *why = "the text has no closing quote";
            return -1;
        }
        char c = *r++;
        if (c == quote)
            break;
        if (c == '\\') {
            if (r == end) {
                *why = "the text has no closing quote";
                return -1;
            }
            c = *r++;
            if (c == 'n')
                c = '\n';
            else if (c == 'r')
                c = '\r';
            else if (c == 't')
                c = '\t';
        }
        *w++ = c;
    }
    *text = s + 1;
    *len = (size_t)(w - (s + 1));

    r = skip_blanks(r, end);
    if (r == end || *r != ',') {
        *why = "expected a comma after the text";
        return -1;
    }
    r = skip_blanks(r + 1, end);
    if (r == end || (*r != '0' && *r != '1')) {
        *why = "the class must be 0 or 1";
        return -1;
    }
    *label = *r - '0';
    r = skip_blanks(r + 1, end);
    if (r != end) {
        *why = "unexpected characters after the class";
        return -1;
    }
    return 0;
}

/* True if the header line s[0..end) is "@data", in any case. */
static int is_data_line(const char *s, const char *end)
{
    size_t n = (size_t)(end - s);
    return n >= 5 && strncasecmp(s, "@data", 5) == 0 &&
           (n == 5 || is_blank(s[5]));
}

long arff_parse(char *buf, size_t len, arff_record_fn fn, void *arg,
                char *err, size_t errlen)
{
    char *p = buf, *end = buf + len;
    unsigned long line = 0;
    int in_data = 0;
    long count = 0;

    set_err(err, errlen, "%s", "");
    while (p < end) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *next = eol ? eol + 1 : end;
        char *q = eol ? eol : end;
        line++;
        if (q > p && q[-1] == '\r')
            q--;
        char *s = skip_blanks(p, q);
        p = next;

        if (s == q || *s == '%')
            continue;
        if (*s == '@') {
            if (in_data) {
                set_err(err, errlen, "line %lu: a header line after @data",
                        line);
                return -1;
            }
            in_data = is_data_line(s, q);
            continue;
        }
        if (!in_data) {
            set_err(err, errlen, "line %lu: data before the @data line",
                    line);
            return -1;
        }

        char *text;
        size_t tlen;
        int label;
        const char *why;
        if (parse_record(s, q, &text, &tlen, &label, &why) < 0) {
            set_err(err, errlen, "line %lu: %s", line, why);
            return -1;
        }
        if (fn && fn(text, tlen, label, arg, err, errlen) < 0)
            return -1;
        count++;
    }
    if (!in_data) {
        set_err(err, errlen, "no @data line");
        return -1;
    }
    return count;
}

uint32_t arff_fnv1a(const char *s, size_t n)
{
    uint32_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= FNV_PRIME;
    }
    return h;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Hashes each word as it is scanned, so no word is copied; the letters are
 * lower-cased by hand, since tolower() would depend on the locale. */
size_t arff_text_keys(const char *text, size_t len, uint64_t *keys)
{
    size_t n = 0, run = 0;
    uint32_t h = FNV_OFFSET;

    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)text[i] : 0;
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        if (c >= 'a' && c <= 'z') {
            h = (h ^ c) * FNV_PRIME;
            run++;
            continue;
        }
        if (run >= 2)
            keys[n++] = h & (ARFF_KEY_SPACE - 1);
        run = 0;
        h = FNV_OFFSET;
    }

    if (n < 2)
        return n;
    qsort(keys, n, sizeof *keys, cmp_u64);
    size_t m = 1;
    for (size_t i = 1; i < n; i++)
        if (keys[i] != keys[m - 1])
            keys[m++] = keys[i];
    return m;
}

/* ---- whole sets -------------------------------------------------------- */

/* What arff_set_parse's callback fills: the set, and the room its arrays
 * and the scratch keys have. */
typedef struct builder {
    arff_set *set;
    size_t cap_labels, cap_start, cap_keys;
    uint64_t *scratch;      /* arff_text_keys output */
    size_t cap_scratch;
} builder;

/* Grows *p (holding *cap items of size bytes) to hold at least want. */
static int grow(void **p, size_t *cap, size_t want, size_t size)
{
    if (want <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < want)
        n *= 2;
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int add_record(const char *text, size_t len, int label, void *arg,
                      char *err, size_t errlen)
{
    builder *b = arg;
    arff_set *s = b->set;

    if (grow((void **)&b->scratch, &b->cap_scratch, ARFF_MAX_WORDS(len),
             sizeof *b->scratch) < 0)
        goto oom;
    size_t k = arff_text_keys(text, len, b->scratch);

    size_t used = s->start[s->n];
    if (grow((void **)&s->labels, &b->cap_labels, s->n + 1,
             sizeof *s->labels) < 0 ||
        grow((void **)&s->start, &b->cap_start, s->n + 2,
             sizeof *s->start) < 0 ||
        grow((void **)&s->keys, &b->cap_keys, used + k, sizeof *s->keys) < 0)
        goto oom;

    if (k)      /* keys is still NULL while every text had no words */
        memcpy(s->keys + used, b->scratch, k * sizeof *s->keys);
    s->labels[s->n] = (uint8_t)label;
    s->npos += (size_t)label;
    s->n++;
    s->start[s->n] = used + k;
    return 0;
oom:
    set_err(err, errlen, "out of memory");
    return -1;
}

int arff_set_parse(char *buf, size_t len, arff_set *out, char *err,
                   size_t errlen)
{
    builder b = { out, 0, 1, 0, NULL, 0 };

    memset(out, 0, sizeof *out);
    out->start = calloc(1, sizeof *out->start);   /* start[0] = 0 */
    if (!out->start) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    long n = arff_parse(buf, len, add_record, &b, err, errlen);
    free(b.scratch);
    if (n < 0) {
        arff_destroy(out);
        return -1;
    }
    return 0;
}

int arff_load(const char *path, arff_set *out, char *err, size_t errlen)
{
    char why[256];
    char *buf = NULL;
    size_t len = 0, cap = 0;

    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        if (len == cap && grow((void **)&buf, &cap, len + 65536, 1) < 0) {
            set_err(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len > ARFF_MAX_BYTES) {
            set_err(err, errlen, "%s: larger than %u bytes", path,
                    ARFF_MAX_BYTES);
            goto fail;
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        set_err(err, errlen, "%s: read error", path);
        goto fail;
    }
    fclose(f);
    f = NULL;

    if (arff_set_parse(buf, len, out, why, sizeof why) < 0) {
        set_err(err, errlen, "%s: %s", path, why);
        goto fail;
    }
    free(buf);
    return 0;
fail:
    if (f)
        fclose(f);
    free(buf);
    return -1;
}

void arff_destroy(arff_set *s)
{
    free(s->labels);
    free(s->start);
    free(s->keys);
    memset(s, 0, sizeof *s);
}
