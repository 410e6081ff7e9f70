/* The ini schema of DESIGN.md section 5. inih splits lines into keys and
 * values; a strict line reader of ours finds section headers and refuses
 * overlong lines; one table of settings then parses, defaults and checks. */

/* Debian's libinih always passes the line number as a fifth argument, so
 * the handler must take it. We count lines ourselves, in the reader. */
#define INI_HANDLER_LINENO 1
#include <ini.h>

#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define TIB (1024ULL * GIB)

#define MAX_NODES 4096
#define TABLE_PREFIX "table."
#define TABLE_PREFIX_LEN 6
#define SECTION_MAX (TABLE_PREFIX_LEN + PSD_NAME_MAX)

/* ---- the settings table ------------------------------------------------ */

typedef enum { SC_CLUSTER, SC_SERVER, SC_TABLE } scope;

typedef enum {
    T_INT,      /* int field, decimal, min..max */
    T_U32,      /* uint32_t field, decimal, min..max */
    T_U64,      /* uint64_t field, decimal, min..max */
    T_SIZE,     /* uint64_t field, decimal with optional K, M or G */
    T_FLOAT,    /* float field, finite, in the range `frange` */
    T_WORD,     /* enum or int field: index of the value in `words` */
    T_STR,      /* char array: length min..max, max + 1 is the array size */
    T_NODES,    /* psd_config.nodes and nnodes */
    T_INIT      /* psd_init_params kind, a and b */
} type;

typedef enum { F_POS = 1, F_NONNEG, F_UNIT } frange;

enum { REQUIRED = 1 };

typedef struct setting {
    scope scope;
    const char *key;
    type type;
    const char *def;            /* default in ini syntax; NULL: none */
    size_t off;                 /* into psd_config or psd_table_conf */
    uint64_t min, max;
    frange frange;
    const char *const *words;   /* NULL-terminated, in enum order */
    int flags;
} setting;

static const char *const durability_words[] = { "snapshot", "log", NULL };
static const char *const fsync_words[] = {
    "always", "everysec", "no", NULL
};
static const char *const log_words[] = {
    "debug", "info", "warn", "error", NULL
};
static const char *const kind_words[] = { "sparse", "dense", NULL };
static const char *const updater_words[] = {
    "sum", "assign", "sgd", "adagrad", "adam", "ftrl", NULL
};
static const char *const consistency_words[] = {
    "async", "bsp", "ssp", NULL
};
static const char *const aggregate_words[] = { "sum", "mean", NULL };

/* T_WORD stores the index of the word, so the word lists above must follow
 * the enums of config.h, and the enums must be int-sized. */
_Static_assert(PSD_DUR_LOG == 1 && PSD_FSYNC_NO == 2 && PSD_LOG_ERROR == 3 &&
               PSD_UPD_ADAGRAD == 3 && PSD_UPD_FTRL == 5 &&
               PSD_CONS_SSP == 2, "word lists follow the enums");
_Static_assert(sizeof(psd_durability) == sizeof(int) &&
               sizeof(psd_fsync) == sizeof(int) &&
               sizeof(psd_log_level) == sizeof(int) &&
               sizeof(psd_updater_kind) == sizeof(int) &&
               sizeof(psd_consistency) == sizeof(int),
               "enum fields are stored as int");

#define CL(f) offsetof(psd_config, f)
#define TB(f) offsetof(psd_table_conf, f)
#define STRMAX(f) (sizeof(((psd_config *)0)->f) - 1)

/* Every setting, its default and its range. The ini parser, the defaults
 * and conf/psd.ini all follow this table; change them together. */
static const setting settings[] = {
    /* [cluster] */
    { SC_CLUSTER, "nodes", T_NODES, NULL, 0, 1, MAX_NODES, 0, NULL,
      REQUIRED },
    { SC_CLUSTER, "shards", T_U32, "16", CL(shards), 1, 65535, 0, NULL, 0 },
    { SC_CLUSTER, "workers", T_INT, "1", CL(workers), 1, 65535, 0, NULL, 0 },
    { SC_CLUSTER, "worker_grace", T_INT, "30", CL(worker_grace), 0, 86400,
      0, NULL, 0 },
    /* [server] */
    { SC_SERVER, "data_dir", T_STR, "/var/lib/psd", CL(data_dir),
      1, STRMAX(data_dir), 0, NULL, 0 },
    { SC_SERVER, "snapshot_interval", T_INT, "300", CL(snapshot_interval),
      0, 31536000, 0, NULL, 0 },
    { SC_SERVER, "durability", T_WORD, "snapshot", CL(durability),
      0, 0, 0, durability_words, 0 },
    { SC_SERVER, "fsync", T_WORD, "everysec", CL(fsync),
      0, 0, 0, fsync_words, 0 },
    { SC_SERVER, "auth_token", T_STR, "", CL(auth_token),
      0, STRMAX(auth_token), 0, NULL, 0 },
    { SC_SERVER, "max_frame", T_SIZE, "64M", CL(max_frame),
      KIB, GIB, 0, NULL, 0 },
    { SC_SERVER, "log_level", T_WORD, "info", CL(log_level),
      0, 0, 0, log_words, 0 },
    { SC_SERVER, "max_output", T_SIZE, "16M", CL(max_output),
      KIB, TIB, 0, NULL, 0 },
    { SC_SERVER, "max_connections", T_INT, "1024", CL(max_connections),
      1, 1048576, 0, NULL, 0 },
    { SC_SERVER, "hello_timeout", T_INT, "10", CL(hello_timeout),
      1, 3600, 0, NULL, 0 },
    /* [table.NAME] */
    { SC_TABLE, "kind", T_WORD, "sparse", TB(dense), 0, 0, 0, kind_words, 0 },
    { SC_TABLE, "dim", T_U32, NULL, TB(dim), 1, 65536, 0, NULL, REQUIRED },
    { SC_TABLE, "rows", T_U64, NULL, TB(rows), 1, UINT64_MAX, 0, NULL, 0 },
    { SC_TABLE, "updater", T_WORD, "sum", TB(upd.kind),
      0, 0, 0, updater_words, 0 },
    { SC_TABLE, "lr", T_FLOAT, "0.01", TB(upd.lr), 0, 0, F_POS, NULL, 0 },
    { SC_TABLE, "beta1", T_FLOAT, "0.9", TB(upd.beta1), 0, 0, F_UNIT, NULL,
      0 },
    { SC_TABLE, "beta2", T_FLOAT, "0.999", TB(upd.beta2), 0, 0, F_UNIT, NULL,
      0 },
    { SC_TABLE, "epsilon", T_FLOAT, "1e-8", TB(upd.epsilon), 0, 0, F_POS,
      NULL, 0 },
    { SC_TABLE, "l1", T_FLOAT, "0", TB(upd.l1), 0, 0, F_NONNEG, NULL, 0 },
    { SC_TABLE, "l2", T_FLOAT, "0", TB(upd.l2), 0, 0, F_NONNEG, NULL, 0 },
    { SC_TABLE, "beta", T_FLOAT, "1", TB(upd.beta), 0, 0, F_NONNEG, NULL,
      0 },
    { SC_TABLE, "init", T_INIT, "zeros", TB(init), 0, 0, 0, NULL, 0 },
    { SC_TABLE, "seed", T_U64, "0", TB(init.seed), 0, UINT64_MAX, 0, NULL,
      0 },
    { SC_TABLE, "consistency", T_WORD, "async", TB(consistency),
      0, 0, 0, consistency_words, 0 },
    { SC_TABLE, "staleness", T_INT, "0", TB(staleness), 0, 65535, 0, NULL,
      0 },
    { SC_TABLE, "aggregate", T_WORD, "sum", TB(aggregate_mean),
      0, 0, 0, aggregate_words, 0 },
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* ---- what the first pass collects --------------------------------------- */

/* One `key = value` line, with any continuation lines joined to it. */
typedef struct entry {
    char *key;
    char *value;
    int line;           /* line of the key */
    int cont_line;      /* first continuation line, or 0 */
} entry;

typedef struct section {
    char name[SECTION_MAX];     /* "cluster", "server" or "table.NAME" */
    scope scope;
    int line;                   /* line of the header */
    entry *entries;
    int nentries, cap;
} section;

typedef struct parser {
    FILE *f;
    const char *path;
    int line;           /* physical lines read so far */
    int key_seen;       /* a key since the last header: inih's prev_name */
    int cont;           /* the current line continues the previous value */
    section *secs;
    int nsecs, cap;
    int failed;
    char *err;
    size_t errlen;
} parser;

/* Records the first error as "PATH:LINE: reason" ("PATH: reason" when
 * line is 0); later errors are dropped. */
__attribute__((format(printf, 3, 4)))
static void fail(parser *p, int line, const char *fmt, ...)
{
    if (p->failed)
        return;
    p->failed = 1;
    if (!p->err || p->errlen == 0)
        return;
    int n = line > 0 ? snprintf(p->err, p->errlen, "%s:%d: ", p->path, line)
                     : snprintf(p->err, p->errlen, "%s: ", p->path);
    if (n < 0 || (size_t)n >= p->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* The same scan inih uses: the first char of `chars` in [s, end), or the
 * start of an inline comment (a ';' after whitespace), or end. */
static const char *find_chars_or_comment(const char *s, const char *end,
                                         const char *chars)
{
    int was_space = 0;
    for (; s < end; s++) {
        if (chars && strchr(chars, *s))
            break;
        if (was_space && *s == ';')
            break;
        was_space = isspace((unsigned char)*s);
    }
    return s;
}

static int valid_table_name(const char *s, size_t n)
{
    if (n < 1 || n >= PSD_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

/* Handles a "[name]" line; t is the '[' and end is one past the last
 * non-space byte. inih would silently cut long names and ignore text after
 * ']', so the header is parsed here. Returns 0, or -1 with the error set. */
static int on_header(parser *p, const char *t, const char *end)
{
    const char *close = memchr(t, ']', (size_t)(end - t));
    if (!close) {
        fail(p, p->line, "expected \"]\" at the end of the section header");
        return -1;
    }
    const char *rest = close + 1;
    while (rest < end && isspace((unsigned char)*rest))
        rest++;
    if (rest < end && *rest != ';') {
        fail(p, p->line, "unexpected text after the section header: \"%.*s\"",
             (int)(end - rest), rest);
        return -1;
    }
    const char *name = t + 1;
    size_t n = (size_t)(close - name);
    scope sc;
    if (n == 7 && memcmp(name, "cluster", 7) == 0) {
        sc = SC_CLUSTER;
    } else if (n == 6 && memcmp(name, "server", 6) == 0) {
        sc = SC_SERVER;
    } else if (n >= TABLE_PREFIX_LEN &&
               memcmp(name, TABLE_PREFIX, TABLE_PREFIX_LEN) == 0) {
        if (!valid_table_name(name + TABLE_PREFIX_LEN,
                              n - TABLE_PREFIX_LEN)) {
            fail(p, p->line, "invalid table name \"%.*s\" (allowed: "
                 "A-Z a-z 0-9 _ -, 1..%d characters)",
                 (int)(n - TABLE_PREFIX_LEN), name + TABLE_PREFIX_LEN,
                 PSD_NAME_MAX - 1);
            return -1;
        }
        sc = SC_TABLE;
    } else {
        fail(p, p->line, "unknown section [%.*s] (expected [cluster], "
             "[server] or [table.NAME])", (int)n, name);
        return -1;
    }
    for (int i = 0; i < p->nsecs; i++) {
        if (strlen(p->secs[i].name) == n &&
            memcmp(p->secs[i].name, name, n) == 0) {
            fail(p, p->line, "duplicate section [%.*s] (first at line %d)",
                 (int)n, name, p->secs[i].line);
            return -1;
        }
    }
    if (p->nsecs == p->cap) {
        int cap = p->cap ? 2 * p->cap : 4;
        section *s = realloc(p->secs, (size_t)cap * sizeof *s);
        if (!s) {
            fail(p, 0, "out of memory");
            return -1;
        }
        p->secs = s;
        p->cap = cap;
    }
    section *s = &p->secs[p->nsecs++];
    memset(s, 0, sizeof *s);
    memcpy(s->name, name, n);
    s->scope = sc;
    s->line = p->line;
    return 0;
}

/* Sorts the line in buf[0..n) the way inih will, so that we know about
 * section headers and continuation lines. Returns 0 or -1 (error set). */
static int classify(parser *p, const char *buf, size_t n)
{
    const char *start = buf, *end = buf + n;
    if (p->line == 1 && n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
        start += 3;                     /* inih skips a UTF-8 BOM */
    while (end > start && isspace((unsigned char)end[-1]))
        end--;
    const char *t = start;
    while (t < end && isspace((unsigned char)*t))
        t++;
    p->cont = 0;
    if (t == end || *t == ';' || *t == '#')
        return 0;                       /* blank or comment */
    if (p->key_seen && t > buf) {
        p->cont = 1;                    /* indented: continues the value */
        return 0;
    }
    if (*t == '[') {
        p->key_seen = 0;
        return on_header(p, t, end);
    }
    const char *sep = find_chars_or_comment(t, end, "=:");
    if (sep == end || (*sep != '=' && *sep != ':')) {
        fail(p, p->line, "expected \"key = value\" or \"[section]\", "
             "got \"%.*s\"", (int)(end - t), t);
        return -1;
    }
    p->key_seen = 1;
    return 0;
}

/* inih's reader callback: reads one physical line into buf (size bytes).
 * A line that does not fit with room for "\r\n" is refused, never split;
 * so is a NUL byte. Returns buf, or NULL to stop at EOF or after an error. */
static char *read_line(char *buf, int size, void *stream)
{
    parser *p = stream;
    if (p->failed || size < 4)
        return NULL;
    size_t max = (size_t)size - 3, n = 0;
    int ch = EOF, too_long = 0, nul = 0;
    while ((ch = getc(p->f)) != EOF) {
        if (n < (size_t)size - 1)
            buf[n++] = (char)ch;
        else
            too_long = 1;
        if (ch == '\n')
            break;
        if (ch == '\0')
            nul = 1;
    }
    if (ch == EOF && ferror(p->f)) {
        fail(p, 0, "read error: %s", strerror(errno));
        return NULL;
    }
    if (n == 0)
        return NULL;
    buf[n] = '\0';
    p->line++;
    size_t len = n;
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    if (too_long || len > max) {
        fail(p, p->line, "line too long (max %zu bytes)", max);
        return NULL;
    }
    if (nul) {
        fail(p, p->line, "unexpected NUL byte");
        return NULL;
    }
    return classify(p, buf, n) == 0 ? buf : NULL;
}

/* Joins a continuation line to the last value, separated by one space.
 * inih r55 keeps inline comments on continuation lines; we drop them so
 * that `; comment` means the same on every line. */
static int append_piece(parser *p, const char *piece)
{
    section *s = &p->secs[p->nsecs - 1];
    entry *e = &s->entries[s->nentries - 1];
    const char *end = find_chars_or_comment(piece, piece + strlen(piece),
                                            NULL);
    while (end > piece && isspace((unsigned char)end[-1]))
        end--;
    size_t old = strlen(e->value), add = (size_t)(end - piece);
    char *v = realloc(e->value, old + add + 2);
    if (!v) {
        fail(p, 0, "out of memory");
        return -1;
    }
    v[old] = ' ';
    memcpy(v + old + 1, piece, add);
    v[old + 1 + add] = '\0';
    e->value = v;
    if (!e->cont_line)
        e->cont_line = p->line;
    return 0;
}

/* inih's handler: records the key and value under the current section.
 * The section and line number inih passes are not used: the reader knows
 * both, without inih's 49-character cut of section names. */
static int on_value(void *user, const char *section_name, const char *name,
                    const char *value, int lineno)
{
    parser *p = user;
    (void)section_name;
    (void)lineno;
    if (p->failed)
        return 1;
    if (p->cont) {
        append_piece(p, value);
        return 1;
    }
    if (!*name) {
        fail(p, p->line, "missing key before \"=\"");
        return 1;
    }
    if (p->nsecs == 0) {
        fail(p, p->line, "key \"%s\" outside any section", name);
        return 1;
    }
    section *s = &p->secs[p->nsecs - 1];
    if (s->nentries == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        entry *es = realloc(s->entries, (size_t)cap * sizeof *es);
        if (!es) {
            fail(p, 0, "out of memory");
            return 1;
        }
        s->entries = es;
        s->cap = cap;
    }
    entry *e = &s->entries[s->nentries];
    e->key = strdup(name);
    e->value = strdup(value);
    e->line = p->line;
    e->cont_line = 0;
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        fail(p, 0, "out of memory");
        return 1;
    }
    s->nentries++;
    return 1;
}

static void parser_free(parser *p)
{
    for (int i = 0; i < p->nsecs; i++) {
        for (int j = 0; j < p->secs[i].nentries; j++) {
            free(p->secs[i].entries[j].key);
            free(p->secs[i].entries[j].value);
        }
        free(p->secs[i].entries);
    }
    free(p->secs);
}

/* ---- values ------------------------------------------------------------- */

/* A decimal integer: digits only (no sign, space or base prefix). */
static int parse_u64(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || *end)
        return -1;
    *out = v;
    return 0;
}

/* A decimal integer with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -1;
    unsigned shift = 0;
    if (*end) {
        if (end[1])
            return -1;
        switch (*end) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        default: return -1;
        }
    }
    if (v > UINT64_MAX >> shift)
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* A finite number that is also finite as a float. */
static int parse_float(const char *s, float *out)
{
    if (!*s || isspace((unsigned char)*s))
        return -1;
    char *end;
    double d = strtod(s, &end);
    if (*end || !isfinite(d) || d > FLT_MAX || d < -FLT_MAX)
        return -1;
    *out = (float)d;
    return 0;
}

static int float_in_range(float v, frange r)
{
    switch (r) {
    case F_POS: return v > 0;
    case F_NONNEG: return v >= 0;
    case F_UNIT: return v >= 0 && v < 1;
    }
    return 1;
}

/* Writes a size the way the ini would say it: 1K, 64M, 1G. */
static void format_size(char *buf, size_t len, uint64_t v)
{
    static const char units[] = "TGMK";
    for (int i = 0; i < 4; i++) {
        uint64_t u = 1ULL << (10 * (4 - i));
        if (v >= u && v % u == 0) {
            snprintf(buf, len, "%llu%c", (unsigned long long)(v / u),
                     units[i]);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* Describes what a setting accepts, for "expected ..., got ..." errors. */
static void describe(const setting *st, char *buf, size_t len)
{
    char lo[32], hi[32];
    switch (st->type) {
    case T_INT:
    case T_U32:
    case T_U64:
        snprintf(buf, len, "an integer %llu..%llu",
                 (unsigned long long)st->min, (unsigned long long)st->max);
        break;
    case T_SIZE:
        format_size(lo, sizeof lo, st->min);
        format_size(hi, sizeof hi, st->max);
        snprintf(buf, len, "a size %s..%s (bytes, or with a K, M or G "
                 "suffix)", lo, hi);
        break;
    case T_FLOAT:
        snprintf(buf, len, "%s", st->frange == F_POS ? "a number > 0"
                 : st->frange == F_NONNEG ? "a number >= 0"
                 : "a number in [0, 1)");
        break;
    case T_WORD: {
        size_t n = 0;
        buf[0] = '\0';
        for (int i = 0; st->words[i] && n < len; i++) {
            int w = snprintf(buf + n, len - n, "%s%s", i ? " | " : "",
                             st->words[i]);
            if (w < 0)
                break;
            n += (size_t)w;
        }
        break;
    }
    case T_STR:
        snprintf(buf, len, "%s%llu bytes", st->min ? "1.." : "at most ",
                 (unsigned long long)st->max);
        break;
    case T_NODES:
        snprintf(buf, len, "a comma-separated list of IPv4:port or "
                 "[IPv6]:port");
        break;
    case T_INIT:
        snprintf(buf, len, "zeros | constant V | uniform LO HI | "
                 "normal MEAN STD");
        break;
    }
}

/* Reports that e's value is not what st accepts; `why` overrides the
 * generic "expected ..." text when it is not NULL. */
static void bad_value(parser *p, const section *s, const entry *e,
                      const setting *st, const char *why)
{
    char expect[160], note[48] = "";
    if (why)
        snprintf(expect, sizeof expect, "%s", why);
    else
        describe(st, expect, sizeof expect);
    if (e->cont_line)
        snprintf(note, sizeof note, " (continued on line %d)", e->cont_line);
    fail(p, e->line, "[%s] %s: %s%s, got \"%s\"%s", s->name, st->key,
         why ? "" : "expected ", expect, e->value, note);
}

/* Parses `init = zeros | constant V | uniform LO HI | normal MEAN STD`. */
static int parse_init(parser *p, const section *s, const entry *e,
                      const setting *st, psd_init_params *ip)
{
    char buf[128], *tok[5], *save = NULL;
    int n = 0;
    if (strlen(e->value) >= sizeof buf) {
        bad_value(p, s, e, st, NULL);
        return -1;
    }
    strcpy(buf, e->value);
    for (char *t = strtok_r(buf, " \t", &save); t && n < 5;
         t = strtok_r(NULL, " \t", &save))
        tok[n++] = t;
    float a = 0, b = 0;
    psd_init_kind kind;
    int want;
    if (n > 0 && strcmp(tok[0], "zeros") == 0) {
        kind = PSD_INIT_ZEROS;
        want = 1;
    } else if (n > 0 && strcmp(tok[0], "constant") == 0) {
        kind = PSD_INIT_CONSTANT;
        want = 2;
    } else if (n > 0 && strcmp(tok[0], "uniform") == 0) {
        kind = PSD_INIT_UNIFORM;
        want = 3;
    } else if (n > 0 && strcmp(tok[0], "normal") == 0) {
        kind = PSD_INIT_NORMAL;
        want = 3;
    } else {
        bad_value(p, s, e, st, NULL);
        return -1;
    }
    if (n != want || (want >= 2 && parse_float(tok[1], &a) < 0) ||
        (want >= 3 && parse_float(tok[2], &b) < 0)) {
        bad_value(p, s, e, st, NULL);
        return -1;
    }
    if (kind == PSD_INIT_UNIFORM && !(a < b)) {
        bad_value(p, s, e, st, "uniform needs LO < HI");
        return -1;
    }
    if (kind == PSD_INIT_NORMAL && !(b >= 0)) {
        bad_value(p, s, e, st, "normal needs STD >= 0");
        return -1;
    }
    ip->kind = kind;
    ip->a = a;
    ip->b = b;
    return 0;
}

/* Reports a problem with entry i (1-based) of a nodes list. */
static void bad_node(parser *p, const section *s, const entry *e,
                     const char *why, const char *item, int i)
{
    char note[48] = "";
    if (e->cont_line)
        snprintf(note, sizeof note, " (continued on line %d)", e->cont_line);
    if (!*item)
        fail(p, e->line, "[%s] nodes: entry %d is empty, in \"%s\"%s",
             s->name, i, e->value, note);
    else
        fail(p, e->line, "[%s] nodes: %s, got \"%s\" (entry %d of \"%s\")%s",
             s->name, why, item, i, e->value, note);
}

/* Parses one "a.b.c.d:port" or "[v6]:port" into nd, the host in canonical
 * text. Returns 0, or -1 with the error set. */
static int parse_node(parser *p, const section *s, const entry *e,
                      char *item, int i, psd_node_addr *nd)
{
    static const char form[] = "expected IPv4:port or [IPv6]:port";
    char *host = item, *colon;
    int af = AF_INET;
    if (*item == '[') {
        char *close = strchr(item, ']');
        if (!close || close[1] != ':') {
            bad_node(p, s, e, form, item, i);
            return -1;
        }
        host = item + 1;
        *close = '\0';
        colon = close + 1;
        af = AF_INET6;
    } else {
        colon = strchr(item, ':');
        if (!colon || strchr(colon + 1, ':')) {
            bad_node(p, s, e, form, item, i);
            return -1;
        }
        *colon = '\0';
    }
    unsigned char addr[16];
    uint64_t port;
    int ok = inet_pton(af, host, addr) == 1;
    if (af == AF_INET6)
        colon[-1] = ']';
    *colon = ':';
    if (!ok) {
        bad_node(p, s, e, af == AF_INET6 ? "expected a numeric IPv6 address"
                 : "expected a numeric IPv4 address (or [IPv6]:port)",
                 item, i);
        return -1;
    }
    if (parse_u64(colon + 1, &port) < 0 || port < 1 || port > 65535) {
        bad_node(p, s, e, "expected a port 1..65535", item, i);
        return -1;
    }
    if (!inet_ntop(af, addr, nd->host, sizeof nd->host)) {
        bad_node(p, s, e, form, item, i);
        return -1;
    }
    nd->port = (int)port;
    return 0;
}

/* Parses `nodes = host:port, host:port, ...` into c->nodes. */
static int parse_nodes(parser *p, const section *s, const entry *e,
                       const setting *st, psd_config *c)
{
    size_t count = 1;
    for (const char *q = e->value; *q; q++)
        count += *q == ',';
    if (!*e->value) {
        bad_value(p, s, e, st, NULL);
        return -1;
    }
    if (count > st->max) {
        char why[64];
        snprintf(why, sizeof why, "at most %llu nodes",
                 (unsigned long long)st->max);
        bad_value(p, s, e, st, why);
        return -1;
    }
    char *copy = strdup(e->value);
    psd_node_addr *nodes = calloc(count, sizeof *nodes);
    if (!copy || !nodes) {
        free(copy);
        free(nodes);
        fail(p, 0, "out of memory");
        return -1;
    }
    int n = 0, rc = 0;
    for (char *item = copy, *next; item && rc == 0; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        while (isspace((unsigned char)*item))
            item++;
        char *end = item + strlen(item);
        while (end > item && isspace((unsigned char)end[-1]))
            *--end = '\0';
        if (!*item) {
            bad_node(p, s, e, NULL, item, n + 1);
            rc = -1;
        } else if (parse_node(p, s, e, item, n + 1, &nodes[n]) < 0) {
            rc = -1;
        }
        for (int j = 0; rc == 0 && j < n; j++) {
            if (nodes[j].port == nodes[n].port &&
                strcmp(nodes[j].host, nodes[n].host) == 0) {
                fail(p, e->line, "[%s] nodes: duplicate node \"%s\" "
                     "(entries %d and %d)", s->name, item, j + 1, n + 1);
                rc = -1;
            }
        }
        n++;
    }
    free(copy);
    if (rc < 0) {
        free(nodes);
        return -1;
    }
    free(c->nodes);
    c->nodes = nodes;
    c->nnodes = n;
    return 0;
}

/* Parses e's value as setting st into the struct at base (a psd_config
 * or a psd_table_conf, by st->scope). Returns 0, or -1 with the error set. */
static int apply(parser *p, const section *s, const entry *e,
                 const setting *st, char *base, psd_config *c)
{
    void *field = base + st->off;
    uint64_t u;
    switch (st->type) {
    case T_INT:
    case T_U32:
    case T_U64:
        if (parse_u64(e->value, &u) < 0 || u < st->min || u > st->max)
            break;
        if (st->type == T_INT) {
            int v = (int)u;
            memcpy(field, &v, sizeof v);
        } else if (st->type == T_U32) {
            uint32_t v = (uint32_t)u;
            memcpy(field, &v, sizeof v);
        } else {
            memcpy(field, &u, sizeof u);
        }
        return 0;
    case T_SIZE:
        if (parse_size(e->value, &u) < 0 || u < st->min || u > st->max)
            break;
        memcpy(field, &u, sizeof u);
        return 0;
    case T_FLOAT: {
        float f;
        if (parse_float(e->value, &f) < 0 || !float_in_range(f, st->frange))
            break;
        memcpy(field, &f, sizeof f);
        return 0;
    }
    case T_WORD:
        for (int i = 0; st->words[i]; i++) {
            if (strcmp(st->words[i], e->value) == 0) {
                memcpy(field, &i, sizeof i);
                return 0;
            }
        }
        break;
    case T_STR: {
        size_t n = strlen(e->value);
        if (n < st->min || n > st->max)
            break;
        memcpy(field, e->value, n + 1);
        return 0;
    }
    case T_NODES:
        return parse_nodes(p, s, e, st, c);
    case T_INIT:
        return parse_init(p, s, e, st, field);
    }
    bad_value(p, s, e, st, NULL);
    return -1;
}

static const setting *find_setting(scope sc, const char *key)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].scope == sc && strcmp(settings[i].key, key) == 0)
            return &settings[i];
    return NULL;
}

static const entry *find_entry(const section *s, const char *key)
{
    for (int i = 0; i < s->nentries; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

/* Sets every setting of scope sc that has a default. */
static int apply_defaults(parser *p, scope sc, const char *name, char *base,
                          psd_config *c)
{
    section s = { .scope = sc };
    snprintf(s.name, sizeof s.name, "%s", name);
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (settings[i].scope != sc || !settings[i].def)
            continue;
        entry e = { NULL, (char *)settings[i].def, 0, 0 };
        if (apply(p, &s, &e, &settings[i], base, c) < 0)
            return -1;              /* a bad default: a bug in the table */
    }
    return 0;
}

/* Applies the entries of one section in file order: unknown and duplicate
 * keys are errors; then required keys must be there. */
static int apply_section(parser *p, const section *s, char *base,
                         psd_config *c)
{
    for (int i = 0; i < s->nentries; i++) {
        const entry *e = &s->entries[i];
        const setting *st = find_setting(s->scope, e->key);
        if (!st) {
            fail(p, e->line, "[%s] %s: unknown key", s->name, e->key);
            return -1;
        }
        const entry *first = find_entry(s, e->key);
        if (first != e) {
            fail(p, e->line, "[%s] %s: duplicate key (first at line %d)",
                 s->name, e->key, first->line);
            return -1;
        }
        if (apply(p, s, e, st, base, c) < 0)
            return -1;
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (settings[i].scope == s->scope &&
            (settings[i].flags & REQUIRED) && !find_entry(s, settings[i].key)) {
            fail(p, s->line, "[%s] %s: required key missing", s->name,
                 settings[i].key);
            return -1;
        }
    }
    return 0;
}

/* Checks of a table that involve more than one of its keys. */
static int check_table(parser *p, const section *s, const psd_table_conf *t)
{
    const entry *rows = find_entry(s, "rows");
    if (t->dense && !rows) {
        fail(p, s->line, "[%s] rows: required key missing (kind = dense)",
             s->name);
        return -1;
    }
    if (!t->dense && rows) {
        fail(p, rows->line, "[%s] rows: only a dense table has rows "
             "(kind = sparse), got \"%s\"", s->name, rows->value);
        return -1;
    }
    /* staleness on a non-ssp table is kept but has no effect: DESIGN.md's
     * own example sets it on an async table ("ssp only"). */
    if (t->dense && t->rows > UINT64_MAX / t->dim / sizeof(float)) {
        fail(p, rows->line, "[%s] rows: rows * dim * 4 bytes overflows "
             "64 bits, got \"%s\"", s->name, rows->value);
        return -1;
    }
    return 0;
}

/* The second pass: builds c from the collected sections. */
static int build(parser *p, psd_config *c)
{
    if (apply_defaults(p, SC_CLUSTER, "cluster", (char *)c, c) < 0 ||
        apply_defaults(p, SC_SERVER, "server", (char *)c, c) < 0)
        return -1;
    int ntables = 0;
    const section *cluster = NULL;
    for (int i = 0; i < p->nsecs; i++) {
        ntables += p->secs[i].scope == SC_TABLE;
        if (p->secs[i].scope == SC_CLUSTER)
            cluster = &p->secs[i];
    }
    if (ntables > 0) {
        c->tables = calloc((size_t)ntables, sizeof *c->tables);
        if (!c->tables) {
            fail(p, 0, "out of memory");
            return -1;
        }
    }
    for (int i = 0; i < p->nsecs; i++) {
        const section *s = &p->secs[i];
        char *base = (char *)c;
        psd_table_conf *t = NULL;
        if (s->scope == SC_TABLE) {
            t = &c->tables[c->ntables++];
            snprintf(t->name, sizeof t->name, "%s",
                     s->name + TABLE_PREFIX_LEN);
            t->line = s->line;
            base = (char *)t;
            if (apply_defaults(p, SC_TABLE, s->name, base, c) < 0)
                return -1;
        }
        if (apply_section(p, s, base, c) < 0)
            return -1;
        if (t && check_table(p, s, t) < 0)
            return -1;
    }
    if (!cluster) {
        fail(p, 0, "[cluster] nodes: required key missing (no [cluster] "
             "section)");
        return -1;
    }
    /* Dense shard ranges compute rows * shards (proto/layout.h). */
    for (int i = 0, k = 0; i < p->nsecs; i++) {
        const section *s = &p->secs[i];
        if (s->scope != SC_TABLE)
            continue;
        const psd_table_conf *t = &c->tables[k++];
        if (t->dense && t->rows > UINT64_MAX / c->shards) {
            const entry *rows = find_entry(s, "rows");
            fail(p, rows->line, "[%s] rows: rows * shards (%u) overflows "
                 "64 bits, got \"%s\"", s->name, (unsigned)c->shards,
                 rows->value);
            return -1;
        }
    }
    return 0;
}

int psd_config_load(psd_config *c, const char *path, char *err, size_t errlen)
{
    parser p = { .path = path, .err = err, .errlen = errlen };
    memset(c, 0, sizeof *c);
    if (err && errlen)
        err[0] = '\0';
    p.f = fopen(path, "r");
    if (!p.f) {
        fail(&p, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    int rc = ini_parse_stream(read_line, &p, on_value, &p);
    fclose(p.f);
    if (!p.failed && rc > 0)
        fail(&p, rc, "syntax error");       /* the reader catches these */
    else if (!p.failed && rc < 0)
        fail(&p, 0, "out of memory");
    if (!p.failed)
        build(&p, c);
    parser_free(&p);
    if (p.failed) {
        psd_config_destroy(c);
        return -1;
    }
    return 0;
}

void psd_config_destroy(psd_config *c)
{
    free(c->nodes);
    free(c->tables);
    memset(c, 0, sizeof *c);
}
