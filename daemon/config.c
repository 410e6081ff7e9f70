/* psd's ini schema (conf/psd.ini documents every setting): one table of
 * settings parses, defaults and checks what inifile.c read. */
#include "config.h"
#include "inifile.h"
#include "near.h"
#include "../proto/auth.h"
#include "../proto/frame.h"

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
#include <strings.h>

#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define TIB (1024ULL * GIB)

#define DEFAULT_DATA_DIR "/var/lib/psd"
#define TABLE_PREFIX "table."
#define TABLE_PREFIX_LEN 6

/* ---- the settings table ------------------------------------------------ */

typedef enum { SC_CLUSTER, SC_SERVER, SC_TABLE } scope;

typedef enum {
    T_INT,      /* int field, decimal, min..max */
    T_U32,      /* uint32_t field, decimal, min..max */
    T_U64,      /* uint64_t field, decimal, min..max */
    T_SIZE,     /* uint64_t field, decimal with optional K, M, G or T */
    T_FLOAT,    /* float field, finite, in the range `frange` */
    T_WORD,     /* enum or int field: index of the value in `words` */
    T_STR,      /* char array: length min..max, max + 1 is the array size */
    T_NODES,    /* psd_config.nodes and nnodes, or listen and nlisten */
    T_INIT      /* psd_init_params kind, a and b */
} type;

typedef enum { F_POS = 1, F_NONNEG, F_UNIT } frange;

enum {
    REQUIRED = 1,
    SECRET = 2                  /* its value is never echoed in an error */
};

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
static const char *const nonfinite_words[] = { "reject", "allow", NULL };

const char *psd_updater_name(psd_updater_kind k)
{
    return updater_words[k];
}

const char *psd_consistency_name(psd_consistency c)
{
    return consistency_words[c];
}

const char *psd_fsync_name(psd_fsync f)
{
    return fsync_words[f];
}

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
    { SC_CLUSTER, "nodes", T_NODES, NULL, 0, 1, PSW_MAX_NODES, 0, NULL,
      REQUIRED },
    { SC_CLUSTER, "listen", T_NODES, NULL, 0, 1, PSW_MAX_NODES, 0, NULL, 0 },
    { SC_CLUSTER, "shards", T_U32, "16", CL(shards), 1, 65535, 0, NULL, 0 },
    { SC_CLUSTER, "workers", T_INT, "1", CL(workers), 1, 65535, 0, NULL, 0 },
    { SC_CLUSTER, "worker_grace", T_INT, "30", CL(worker_grace), 0, 86400,
      0, NULL, 0 },
    /* [server] */
    { SC_SERVER, "data_dir", T_STR, DEFAULT_DATA_DIR, CL(data_dir),
      1, STRMAX(data_dir), 0, NULL, 0 },
    { SC_SERVER, "snapshot_interval", T_INT, "300", CL(snapshot_interval),
      0, 31536000, 0, NULL, 0 },
    { SC_SERVER, "snapshot_journal_mb", T_INT, "2048",
      CL(snapshot_journal_mb), 0, 16777216, 0, NULL, 0 },
    { SC_SERVER, "durability", T_WORD, "snapshot", CL(durability),
      0, 0, 0, durability_words, 0 },
    { SC_SERVER, "fsync", T_WORD, "everysec", CL(fsync),
      0, 0, 0, fsync_words, 0 },
    { SC_SERVER, "metrics_listen", T_NODES, NULL, 0, 1, PSW_MAX_NODES, 0,
      NULL, 0 },
    { SC_SERVER, "auth_token", T_STR, "", CL(auth_token),
      0, STRMAX(auth_token), 0, NULL, SECRET },
    { SC_SERVER, "auth_token_file", T_STR, "", CL(auth_token_file),
      0, STRMAX(auth_token_file), 0, NULL, 0 },
    { SC_SERVER, "max_frame", T_SIZE, "64M", CL(max_frame),
      KIB, GIB, 0, NULL, 0 },
    { SC_SERVER, "log_level", T_WORD, "info", CL(log_level),
      0, 0, 0, log_words, 0 },
    { SC_SERVER, "max_output", T_SIZE, "16M", CL(max_output),
      KIB, TIB, 0, NULL, 0 },
    { SC_SERVER, "max_connections", T_INT, "1024", CL(max_connections),
      1, 1048576, 0, NULL, 0 },
    { SC_SERVER, "max_connections_per_addr", T_INT, "256",
      CL(max_connections_per_addr), 1, 1048576, 0, NULL, 0 },
    { SC_SERVER, "max_client_memory", T_SIZE, "1G", CL(max_client_memory),
      MIB, TIB, 0, NULL, 0 },
    { SC_SERVER, "hello_timeout", T_INT, "10", CL(hello_timeout),
      1, 3600, 0, NULL, 0 },
    { SC_SERVER, "frame_timeout", T_INT, "30", CL(frame_timeout),
      1, 3600, 0, NULL, 0 },
    { SC_SERVER, "idle_timeout", T_INT, "60", CL(idle_timeout),
      1, 86400, 0, NULL, 0 },
    { SC_SERVER, "heartbeat_ms", T_INT, "1000", CL(heartbeat_ms),
      10, 600000, 0, NULL, 0 },
    { SC_SERVER, "peer_timeout_ms", T_INT, "4000", CL(peer_timeout_ms),
      50, 3600000, 0, NULL, 0 },
    { SC_SERVER, "client_ttl", T_INT, "600", CL(client_ttl),
      1, 604800, 0, NULL, 0 },
    { SC_SERVER, "max_unacked_pushes", T_U64, "1048576",
      CL(max_unacked_pushes), 1, GIB, 0, NULL, 0 },
    { SC_SERVER, "max_remembered_pushes", T_U64, "2097152",
      CL(max_remembered_pushes), 1, 16 * GIB, 0, NULL, 0 },
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
    { SC_TABLE, "nonfinite", T_WORD, "reject", TB(allow_nonfinite),
      0, 0, 0, nonfinite_words, 0 },
    { SC_TABLE, "max_rows", T_U64, "0", TB(max_rows), 0, UINT64_MAX, 0, NULL,
      0 },
};

#define NSETTINGS (sizeof settings / sizeof settings[0])

/* ---- sections ----------------------------------------------------------- */

/* What the schema needs to know of a section read by inifile.c. */
typedef struct section {
    const char *name;               /* "cluster", "server", "table.NAME" */
    int line;                       /* of the header; 0 for defaults */
    scope scope;
    const psd_ini_section *ini;     /* its entries; NULL for defaults */
} section;

static int valid_table_name(const char *s, size_t n)
{
    if (n < 1 || n >= PSD_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

/* Whether a section name psd refuses may be quoted in the error, which
 * goes to the log and, after a reload, to /metrics (no token needed): a
 * token line that starts with '[' reads as a header. A token is 16 bytes
 * or more; a name that long is shown when it reads as a name (a
 * separator in it, none of base64's '+', '/' and '='). */
static int name_shown(const char *w, size_t n)
{
    if (n < 16)
        return 1;
    int sep = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] == '+' || w[i] == '/' || w[i] == '=')
            return 0;
        sep |= w[i] == '_' || w[i] == '-' || w[i] == '.' || w[i] == ' ';
    }
    return sep;
}

/* The scope of a section name (n bytes), or -1 when psd has no such
 * section; why says what is wrong then. */
static int scope_of(const char *name, size_t n, char *why, size_t whylen)
{
    if (n == 7 && memcmp(name, "cluster", 7) == 0)
        return SC_CLUSTER;
    if (n == 6 && memcmp(name, "server", 6) == 0)
        return SC_SERVER;
    if (n >= TABLE_PREFIX_LEN &&
        memcmp(name, TABLE_PREFIX, TABLE_PREFIX_LEN) == 0) {
        if (valid_table_name(name + TABLE_PREFIX_LEN, n - TABLE_PREFIX_LEN))
            return SC_TABLE;
        if (name_shown(name, n))
            snprintf(why, whylen, "invalid table name \"%.*s\" (allowed: "
                     "A-Z a-z 0-9 _ -, 1..%d characters)",
                     (int)(n - TABLE_PREFIX_LEN), name + TABLE_PREFIX_LEN,
                     PSD_NAME_MAX - 1);
        else
            snprintf(why, whylen, "invalid table name of %zu bytes (not "
                     "shown: it may be a secret; allowed: A-Z a-z 0-9 _ -, "
                     "1..%d characters)", n - TABLE_PREFIX_LEN,
                     PSD_NAME_MAX - 1);
        return -1;
    }
    if (name_shown(name, n))
        snprintf(why, whylen, "unknown section [%.*s] (expected [cluster], "
                 "[server] or [table.NAME])", (int)n, name);
    else
        snprintf(why, whylen, "unknown section name of %zu bytes (not "
                 "shown: it may be a secret; expected [cluster], [server] "
                 "or [table.NAME])", n);
    return -1;
}

static int check_section_name(const char *name, size_t n, char *why,
                              size_t whylen)
{
    return scope_of(name, n, why, whylen) < 0 ? -1 : 0;
}

typedef psd_ini_entry entry;
typedef psd_ini parser;
#define fail psd_ini_fail

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

/* A decimal integer with an optional K, M, G or T suffix (powers of
 * 1024). */
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
        case 'T': shift = 40; break;   /* max_output's and max_client_memory's
                                          ranges end at 1T, as they say */
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
    /* A normal float: ftrl divides by lr (1 / 1e-39 is an infinity,
     * which made every row NaN at its first push). */
    case F_POS: return v >= FLT_MIN;
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
        snprintf(buf, len, "a size %s..%s (bytes, or with a %s suffix)",
                 lo, hi,
                 st->max >= (uint64_t)1 << 40 ? "K, M, G or T" : "K, M or G");
        break;
    case T_FLOAT:
        /* A float's range: 1e39 was refused as "expected a number > 0"
         * alone. */
        snprintf(buf, len, "%s", st->frange == F_POS
                                     ? "a number > 0 (1.2e-38..3.4e38)"
                 : st->frange == F_NONNEG ? "a number >= 0 (at most 3.4e38)"
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


/* " (continued on line N)" for a value that went on over indented lines
 * (its error names the key's line), else "": into buf, which it returns. */
static const char *cont_note(const entry *e, char buf[48])
{
    buf[0] = '\0';
    if (e->cont_line)
        snprintf(buf, 48, " (continued on line %d)", e->cont_line);
    return buf;
}
/* Whether the words of e's continuation lines (an address list's) may be
 * quoted whole: numbers of fewer than 16 bytes only, never a word that
 * may be a token pasted under the key. */
static int cont_words_shown(const entry *e)
{
    const char *w = e->value + e->first_len;
    while (*w) {
        while (*w == ' ' || *w == '\t')
            w++;
        size_t n = strcspn(w, " \t");
        if (n >= 16 || strspn(w, "0123456789.+-eE") < n)
            return 0;
        w += n;
    }
    return 1;
}

/* e's value as errors quote it: when it goes on, on indented lines, its
 * first line's part and "...", unless what follows is only numbers. */
static const char *value_shown(const entry *e, char *buf, size_t cap)
{
    if (!e->cont_line || cont_words_shown(e))
        return e->value;
    snprintf(buf, cap, e->first_len ? "%.*s ..." : "...", (int)e->first_len,
             e->value);
    return buf;
}

/* Whether the n bytes at w name a setting of any section. */
static int a_setting(const char *w, size_t n)
{
    for (size_t i = 0; i < NSETTINGS; i++)
        if (strlen(settings[i].key) == n && !memcmp(settings[i].key, w, n))
            return 1;
    return 0;
}

/* The setting whose "KEY =" (or "KEY:") a value holds, glued to it: a
 * line appended to a file whose last line had no line break (`echo
 * "auth_token = ..." >> psd.ini`) joins that line's value, as
 * "infoauth_token = ...". NULL when none. */
static const char *glued_setting(const char *v)
{
    for (const char *q = v; *q; q++) {
        if (*q != '=' && *q != ':')
            continue;
        const char *end = q;
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        const char *w = end;
        while (w > v && (islower((unsigned char)w[-1]) ||
                         isdigit((unsigned char)w[-1]) || w[-1] == '_'))
            w--;
        for (size_t i = 0; i < NSETTINGS; i++) {
            size_t k = strlen(settings[i].key);
            if ((size_t)(end - w) >= k && !memcmp(end - k, settings[i].key, k))
                return settings[i].key;
        }
    }
    return NULL;
}

/* Reports that e's value is not what st accepts; `why` overrides the
 * generic "expected ..." text when it is not NULL. */
static void bad_value(parser *p, const section *s, const entry *e,
                      const setting *st, const char *why)
{
    char expect[160], note[48];
    if (why)
        snprintf(expect, sizeof expect, "%s", why);
    else
        describe(st, expect, sizeof expect);
    const char *glued = glued_setting(e->value);
    if (st->flags & SECRET)
        fail(p, e->line, "[%s] %s: %s%s, got %zu bytes%s", s->name, st->key,
             why ? "" : "expected ", expect, strlen(e->value),
             cont_note(e, note));
    else if (glued)
        fail(p, e->line, "[%s] %s: %s%s, got %zu bytes holding \"%s =\" "
             "(a line appended to a file whose last line had no line "
             "break joins it: put it on a line of its own; not shown: it "
             "may hold the token)", s->name, st->key, why ? "" : "expected ",
             expect, strlen(e->value), glued);
    else if (e->cont_line && e->first_len <= 160 && !cont_words_shown(e))
        /* What the indented lines added is not shown when a word of it
         * may be a token pasted under the key (the error goes to the
         * log, and after a reload to /metrics, which needs no token). */
        fail(p, e->line, "[%s] %s: %s%s, got \"%.*s\" and %zu more bytes "
             "from the indented line %d on (a line indented under a key "
             "continues its value; not shown: it may be a secret)",
             s->name, st->key, why ? "" : "expected ", expect,
             (int)e->first_len, e->value,
             strlen(e->value) - e->first_len - 1, e->cont_line);
    else if (strlen(e->value) > 160)
        /* A list of 4,097 addresses was echoed whole (8 KB). */
        fail(p, e->line, "[%s] %s: %s%s, got \"%.80s...\" (%zu bytes)%s",
             s->name, st->key, why ? "" : "expected ", expect, e->value,
             strlen(e->value), cont_note(e, note));
    else
        fail(p, e->line, "[%s] %s: %s%s, got \"%s\"%s%s", s->name, st->key,
             why ? "" : "expected ", expect, e->value, cont_note(e, note),
             psd_config_quote_note(e->value));
}

/* How far from the mean a normal draw can go, in standard deviations:
 * sqrt(-2 ln 2^-24), for the smallest u1 updater.c's Box-Muller takes. */
#define NORMAL_REACH 5.77

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
    if (n != want) {
        bad_value(p, s, e, st, NULL);
        return -1;
    }
    for (int k = 1; k < want; k++)
        if (parse_float(tok[k], k == 1 ? &a : &b) < 0) {
            /* Say which number, and why: "nan" is a number strtod reads,
             * and an initial row must be finite. */
            char why[120];
            snprintf(why, sizeof why, "%s: \"%.40s\" is not a finite number "
                     "(within +-3.4e38)", tok[0], tok[k]);
            bad_value(p, s, e, st, why);
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
    /* The draws reach 5.77 standard deviations (updater.c: u1 >= 2^-24),
     * and a row must start finite: an infinite one stays so, or turns
     * NaN, whatever is pushed. */
    if (kind == PSD_INIT_NORMAL &&
        fabs((double)a) + NORMAL_REACH * (double)b > FLT_MAX) {
        bad_value(p, s, e, st, "normal MEAN STD must keep |MEAN| + 5.77 STD "
                  "within the largest float (3.4e38)");
        return -1;
    }
    ip->kind = kind;
    ip->a = a;
    ip->b = b;
    return 0;
}

static int is_blank(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return *s == '\0';
}

/* metrics_listen is bound as written, by a numeric parser
 * (daemon/server.c, bind_ports): a host name would pass here and then stop psd at
 * start without a line, so it is refused here, where the line is known. */
static int numeric_only(parser *p, const section *s, const entry *e,
                        const setting *st, const psw_addr *a, int n)
{
    for (int i = 0; i < n; i++) {
        if (a[i].kind != PSW_HOST_NAME)
            continue;
        char text[PSW_ADDR_TEXT_MAX], note[48], vb[200];
        psw_addr_format(&a[i], text, sizeof text);
        cont_note(e, note);
        /* A host name read off an indented line may be a token: it
         * parses as a name, so only the key's own line is quoted. */
        int shown = psw_addr_on_line(e->value,
                                     e->cont_line ? e->first_len : SIZE_MAX,
                                     text);
        fail(p, e->line, "[%s] %s: expected a numeric IPv4 or [IPv6] "
             "address (names are not resolved here), got %s%s%s (entry %d "
             "of \"%s\")%s", s->name, st->key, shown ? "\"" : "",
             shown ? text : "a name from an indented line (not shown: it "
                            "may be a secret)",
             shown ? "\"" : "", i + 1, value_shown(e, vb, sizeof vb), note);
        return -1;
    }
    return 0;
}

/* Parses `nodes = host:port, host:port, ...` (or listen) with the
 * grammar libpsclient reads too (proto/addr.h) into c->nodes. */
static int parse_nodes(parser *p, const section *s, const entry *e,
                       const setting *st, psd_config *c)
{
    psw_addr *nodes;
    psw_addr_error pe;
    int n;
    /* conf/psd.ini gives listen's and metrics_listen's default as empty:
     * written so, they keep it (nodes has none: it stays an error). */
    if (strcmp(st->key, "nodes") != 0 && is_blank(e->value))
        return 0;
    /* nodes must all differ; bind addresses may repeat across hosts
     * (checked against nodes in bind_clashes, once both are read). */
    int rc = strcmp(st->key, "nodes") == 0
                 ? psw_addr_list_parse(e->value, (int)st->max, &nodes, &n,
                                       &pe)
                 : psw_addr_bind_list_parse(e->value, (int)st->max, &nodes,
                                            &n, &pe);
    if (rc == -2) {
        fail(p, 0, "out of memory");
        return -1;
    }
    if (rc < 0) {
        char note[48], vb[200], item[sizeof pe.item + 2];
        cont_note(e, note);
        if (psw_addr_quotable(e->value,
                              e->cont_line ? e->first_len : SIZE_MAX,
                              pe.item))
            snprintf(item, sizeof item, "\"%s\"", pe.item);
        else
            snprintf(item, sizeof item, "text of an indented line (not "
                     "shown: it may be a secret)");
        if (pe.entry == 0)
            bad_value(p, s, e, st, pe.why);
        else if (pe.first)
            fail(p, e->line, "[%s] %s: duplicate %s %s (entries %d and "
                 "%d)%s", s->name, st->key,
                 strcmp(st->key, "nodes") ? "address" : "node", item,
                 pe.first, pe.entry, note);
        else if (!pe.item[0])
            fail(p, e->line, "[%s] %s: entry %d is empty, in \"%s\"%s",
                 s->name, st->key, pe.entry, value_shown(e, vb, sizeof vb),
                 note);
        else
            fail(p, e->line, "[%s] %s: %s, got %s (entry %d of \"%s\")%s%s",
                 s->name, st->key, pe.why, item, pe.entry,
                 value_shown(e, vb, sizeof vb), note,
                 strpbrk(pe.item, " \t") && psw_addr_words(pe.item)
                     ? "; a ',' missing between them?" : "");
        return -1;
    }
    if (strcmp(st->key, "metrics_listen") == 0 &&
        numeric_only(p, s, e, st, nodes, n) < 0) {
        free(nodes);
        return -1;
    }
    if (strcmp(st->key, "listen") == 0) {
        free(c->listen);
        c->listen = nodes;
        c->nlisten = n;
        c->listen_line = e->line;
    } else if (strcmp(st->key, "metrics_listen") == 0) {
        free(c->metrics);
        c->metrics = nodes;
        c->nmetrics = n;
        c->metrics_line = e->line;
    } else {
        free(c->nodes);
        c->nodes = nodes;
        c->nnodes = n;
        c->nodes_line = e->line;
    }
    return 0;
}

/* An invisible character that a paste leaves at the start or end of a
 * value (UTF-8): its length at v (start) or before end (end), else 0. */
static size_t invisible_at(const char *v, const char *end, int at_end)
{
    static const char *const marks[] = {
        "\xc2\xa0",         /* no-break space, U+00A0 */
        "\xe2\x80\x8b",     /* zero-width space, U+200B */
        "\xe2\x80\xaf",     /* narrow no-break space, U+202F */
        "\xe3\x80\x80",     /* ideographic space, U+3000 */
        "\xef\xbb\xbf",     /* zero-width no-break space, U+FEFF */
    };
    size_t n = (size_t)(end - v);
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++) {
        size_t k = strlen(marks[i]);
        if (n >= k && !memcmp(at_end ? end - k : v, marks[i], k))
            return k;
    }
    return 0;
}

/* A path (data_dir, auth_token_file) that holds what a person meant as
 * something else: " #" read as a comment, which this file's grammar keeps
 * (a comment is " ;", or "#" at a line's start), or an invisible
 * character pasted at an end. Either named another folder, and psd
 * started with no model: --check said OK (a trial). 0, or -1 said. */
static int path_mistake(parser *p, const section *s, const entry *e,
                        const setting *st)
{
    const char *v = e->value, *end = v + strlen(v);
    /* A path may hold " = ", but one that holds a setting's "KEY =" is
     * two lines joined, and the second (the token, say) was lost without
     * a word: psd ran without authentication (a hostile-ini trial). */
    const char *glued = glued_setting(v);
    if (glued) {
        fail(p, e->line, "[%s] %s: the path holds \"%s =\": a line "
             "appended to a file whose last line had no line break joins "
             "it; put it on a line of its own (not shown: it may hold the "
             "token)", s->name, st->key, glued);
        return -1;
    }
    const char *hash = strstr(v, " #");
    if (!hash)
        hash = strstr(v, "\t#");
    if (hash) {
        fail(p, e->line, "[%s] %s: \"%s\" holds \"%c#\", which this file "
             "keeps as part of the path (a comment starts with \" ;\", or "
             "with \"#\" at a line's start): put the comment on its own "
             "line", s->name, st->key, v, hash[0]);
        return -1;
    }
    if (invisible_at(v, end, 0) || invisible_at(v, end, 1)) {
        fail(p, e->line, "[%s] %s: the path %s with an invisible character "
             "(a no-break or zero-width space, pasted from a web page?), "
             "which would be part of it: retype that end of the line",
             s->name, st->key, invisible_at(v, end, 0) ? "starts" : "ends");
        return -1;
    }
    return 0;
}

/* Parses e's value as setting st into the struct at base (a psd_config
 * or a psd_table_conf, by st->scope). Returns 0, or -1 with the error set. */
static int apply(parser *p, const section *s, const entry *e,
                 const setting *st, char *base, psd_config *c)
{
    void *field = base + st->off;
    uint64_t u;
    if (e->cont_line && (st->flags & SECRET) && e->len > e->first_len) {
        /* A token may go on over indented lines, but not one whose next
         * line reads as a key or a section: that is a line indented by
         * mistake, taken into the token (a trial: `    max_frame = 1M`
         * under auth_token made a token of 47 bytes, and max_frame kept
         * its default). Its text is not quoted, the key's name is. */
        const char *w = e->value + e->first_len + 1;
        size_t k = strspn(w, "abcdefghijklmnopqrstuvwxyz_0123456789");
        const char *after = w + k;
        while (*after == ' ' || *after == '\t')
            after++;
        int key = k && (*after == '=' || *after == ':') && a_setting(w, k);
        if (key || *w == '[') {
            fail(p, e->line, "[%s] %s: line %d is indented, which makes it "
                 "part of the token, and it reads as %s%.*s%s: unindent "
                 "line %d", s->name, st->key, e->cont_line,
                 key ? "the key \"" : "a section header", key ? (int)k : 0,
                 w, key ? "\"" : "", e->cont_line);
            return -1;
        }
    }
    if (st->type == T_STR && !(st->flags & SECRET) &&
        (!strcmp(st->key, "data_dir") || !strcmp(st->key, "auth_token_file")) &&
        path_mistake(p, s, e, st))
        return -1;
    if (e->cont_line && st->type != T_NODES && !(st->flags & SECRET)) {
        /* A value of one word, one path or one init (a few words) has
         * no use for another line:
         * what an indented line added is a mistake, a key indented by
         * accident or a token pasted under the key, and is not quoted
         * (the error goes to the log, and after a reload to /metrics,
         * which needs no token). */
        fail(p, e->line, "[%s] %s: line %d is indented, which makes it "
             "part of this value, and %s takes one line: unindent line %d, "
             "or write the value on one line", s->name, st->key,
             e->cont_line, st->key, e->cont_line);
        return -1;
    }
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

/* Other frameworks' names for psd's keys (and near misses of them):
 * learning_rate is lr here. */
static const char *const other_names[][2] = {
    { "learning_rate", "lr" }, { "optimizer", "updater" },
    { "dimension", "dim" },    { "type", "kind" },
    { "eps", "epsilon" },      { "num_shards", "shards" },
    { "num_workers", "workers" },
};

static const setting *find_setting(scope sc, const char *key);

/* The setting of scope sc whose key is nearest to a key the file
 * misspelt (near.h), or whose name elsewhere it is, or NULL. */
static const setting *suggest(scope sc, const char *key)
{
    const char *names[NSETTINGS + 1];
    const setting *of[NSETTINGS];
    size_t n = 0;
    for (size_t i = 0; i < NSETTINGS; i++)
        if (settings[i].scope == sc) {
            of[n] = &settings[i];
            names[n++] = settings[i].key;
        }
    names[n] = NULL;
    /* Keys are lower case: LR is lr. */
    char low[64];
    size_t kl = strlen(key);
    if (kl < sizeof low) {
        for (size_t i = 0; i <= kl; i++)
            low[i] = (char)tolower((unsigned char)key[i]);
        key = low;
    }
    const char *w = psd_suggest(key, names);
    for (size_t i = 0; w && i < n; i++)
        if (names[i] == w)
            return of[i];
    const size_t nother = sizeof other_names / sizeof other_names[0];
    const char *others[sizeof other_names / sizeof other_names[0] + 1];
    for (size_t i = 0; i < nother; i++)
        others[i] = other_names[i][0];
    others[nother] = NULL;
    w = psd_suggest(key, others);
    for (size_t i = 0; w && i < nother; i++)
        if (others[i] == w)
            return find_setting(sc, other_names[i][1]);
    return NULL;
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
    return s->ini ? psd_ini_find(s->ini, key) : NULL;
}

/* Sets every setting of scope sc that has a default. */
static int apply_defaults(parser *p, scope sc, const char *name, char *base,
                          psd_config *c)
{
    section s = { .name = name, .scope = sc };
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (settings[i].scope != sc || !settings[i].def)
            continue;
        entry e = { NULL, (char *)settings[i].def, 0, 0, 0, 0, 0 };
        if (apply(p, &s, &e, &settings[i], base, c) < 0)
            return -1;              /* a bad default: a bug in the table */
    }
    return 0;
}

/* Adds "PATH:LINE: text" to the config's notes. Returns 0 or -1 (out of
 * memory, error set). */
__attribute__((format(printf, 4, 5)))
static int note(parser *p, psd_config *c, int line, const char *fmt, ...)
{
    char (*notes)[PSD_NOTE_MAX] =
        realloc(c->notes, ((size_t)c->nnotes + 1) * sizeof *notes);
    if (!notes) {
        fail(p, 0, "out of memory");
        return -1;
    }
    c->notes = notes;
    char *at = notes[c->nnotes++];
    int n = snprintf(at, PSD_NOTE_MAX, "%s:%d: ", p->path, line);
    /* A long path: snprintf says what it would have written, and the
     * note's text went past the slot (ASan, a path of 300 bytes). */
    if (n < 0 || n >= PSD_NOTE_MAX - 1)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at + n, PSD_NOTE_MAX - (size_t)n, fmt, ap);
    va_end(ap);
    return 0;
}

/* Applies the entries of one section in file order: unknown and duplicate
 * keys are errors; then required keys must be there. Every bad entry is
 * reported (p->more), not only the first. */
static int apply_section(parser *p, const section *s, char *base,
                         psd_config *c)
{
    int bad = 0;
    /* Past the errors anyone reads, the rest is not looked at: a file of
     * 100,000 bad keys took 15 s (each key is looked for among those
     * before it), on psd's loop for a reload. */
    for (int i = 0; i < s->ini->nentries && p->failed <= PSD_INI_FIND_ERRORS;
         i++) {
        const entry *e = &s->ini->entries[i];
        const setting *st = find_setting(s->scope, e->key);
        const entry *first = st ? find_entry(s, e->key) : NULL;
        if (!st) {
            char hint[96] = "";
            const setting *near = suggest(s->scope, e->key);
            /* A key of another section (worker_grace under [server]):
             * where it goes, rather than a near miss of this one. */
            static const char *const scope_name[] = { "the [cluster]",
                                                      "the [server]",
                                                      "a [table.NAME]" };
            const setting *other = NULL, *other_near = NULL;
            for (int k = SC_CLUSTER; k <= SC_TABLE && !other; k++)
                if (k != (int)s->scope)
                    other = find_setting((scope)k, e->key);
            /* learning_rate under [server]: lr, of a table's section. */
            for (int k = SC_CLUSTER; k <= SC_TABLE && !other && !near &&
                                     !other_near;
                 k++)
                if (k != (int)s->scope)
                    other_near = suggest((scope)k, e->key);
            if (other)
                snprintf(hint, sizeof hint, " (it belongs in %s section)",
                         scope_name[other->scope]);
            else if (other_near)
                snprintf(hint, sizeof hint, " (did you mean %s? it belongs "
                         "in %s section)", other_near->key,
                         scope_name[other_near->scope]);
            else if (near)
                snprintf(hint, sizeof hint, " (did you mean %s?)", near->key);
            /* A long one echoed only as a near miss of a key (a typo),
             * or one of another section. */
            size_t kl = strlen(e->key);
            if (psd_ini_key_like(e->key, kl) &&
                (kl < 16 || near || other || other_near))
                fail(p, e->line, "[%s] %s: unknown key%s", s->name, e->key,
                     hint);
            else
                fail(p, e->line, "[%s] an unknown key of %zu bytes (not "
                     "shown: a line that is not one of psd's settings may "
                     "be the token)%s", s->name, kl, hint);
            bad = 1;
        } else if (first != e) {
            fail(p, e->line, "[%s] %s: duplicate key (first at line %d)",
                 s->name, e->key, first->line);
            bad = 1;
        } else if (apply(p, s, e, st, base, c) < 0) {
            bad = 1;
        }
    }
    for (size_t i = 0; i < NSETTINGS; i++) {
        if (settings[i].scope == s->scope &&
            (settings[i].flags & REQUIRED) && !find_entry(s, settings[i].key)) {
            fail(p, s->line, "[%s] %s: required key missing", s->name,
                 settings[i].key);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

/* A dense table without rows: -1, said. */
static int rows_missing(parser *p, const section *s,
                        const psd_table_conf *t)
{
    if (!t->dense || find_entry(s, "rows"))
        return 0;
    fail(p, s->line, "[%s] rows: required key missing (kind = dense)",
         s->name);
    return -1;
}

/* Checks of a table that involve more than one of its keys. */
static int check_table(parser *p, const section *s, psd_table_conf *t,
                       psd_config *c)
{
    const entry *cons = find_entry(s, "consistency");
    t->consistency_line = cons ? cons->line : 0;
    const entry *k = find_entry(s, "kind"), *d = find_entry(s, "dim"),
                *r = find_entry(s, "rows"), *u = find_entry(s, "updater");
    t->kind_line = k ? k->line : 0;
    t->dim_line = d ? d->line : 0;
    t->rows_line = r ? r->line : 0;
    t->updater_line = u ? u->line : 0;
    const entry *rows = find_entry(s, "rows");
    if (rows_missing(p, s, t))
        return -1;
    if (!t->dense && rows) {
        fail(p, rows->line, "[%s] rows: only a dense table has rows "
             "(kind = sparse), got \"%s\"", s->name, rows->value);
        return -1;
    }
    const entry *mr = find_entry(s, "max_rows");
    if (t->dense && mr) {
        fail(p, mr->line, "[%s] max_rows: only a sparse table grows (kind = "
             "dense has its rows fixed by rows), got \"%s\"", s->name,
             mr->value);
        return -1;
    }
    /* staleness on a non-ssp table is kept but has no effect: the schema's
     * own example (docs/design.md) sets it on an async table, so it is not
     * an error; a note says so, in case the user meant mode = ssp. */
    const entry *st = find_entry(s, "staleness");
    t->staleness_line = st ? st->line : 0;
    if (st && t->consistency != PSD_CONS_SSP &&
        note(p, c, st->line, "[%s] staleness has no effect unless "
             "consistency = ssp (it is %s)", s->name,
             consistency_words[t->consistency]) < 0)
        return -1;
    /* So is aggregate = mean off bsp: only bsp tables sum pushes before
     * applying them (async and ssp ones apply each push as it comes), and
     * an ssp table meant to average would take steps `workers` times too
     * large. aggregate = sum is what such tables do anyway. */
    const entry *ag = find_entry(s, "aggregate");
    t->aggregate_line = ag ? ag->line : 0;
    if (ag && t->aggregate_mean && t->consistency != PSD_CONS_BSP &&
        note(p, c, ag->line, "[%s] aggregate = mean has no effect unless "
             "consistency = bsp (it is %s)", s->name,
             consistency_words[t->consistency]) < 0)
        return -1;
    if (t->dense && t->rows > UINT64_MAX / t->dim / sizeof(float)) {
        fail(p, rows->line, "[%s] rows: rows * dim * 4 bytes overflows "
             "64 bits, got \"%s\"", s->name, rows->value);
        return -1;
    }
    return 0;
}

/* How two listeners on one host, bound as psd binds them (libuv:
 * SO_REUSEADDR, and IPV6_V6ONLY off whatever net.ipv6.bindv6only says),
 * could not both listen. Linux refuses a second listener on the same
 * address and port, one beside [::]:P on any address, IPv4 included, and
 * one beside 0.0.0.0:P on any IPv4 address; an IPv4-mapped address
 * ([::ffff:a.b.c.d]) is the IPv4 one. A name is compared as written: what
 * it resolves to is not known here, except that [::] takes it too. */
typedef enum { CLASH_NONE, CLASH_SAME, CLASH_ANY6, CLASH_ANY4 } clash;

static int is_any(const psw_addr *a, const char *any)
{
    int v4;
    return a->kind != PSW_HOST_NAME && strcmp(psw_addr_host(a, &v4), any) == 0;
}

static clash binds_clash(const psw_addr *a, const psw_addr *b)
{
    if (a->port != b->port)
        return CLASH_NONE;
    int a4, b4;
    const char *ha = psw_addr_host(a, &a4), *hb = psw_addr_host(b, &b4);
    if (is_any(a, "::") || is_any(b, "::"))
        return CLASH_ANY6;
    if (a->kind == PSW_HOST_NAME || b->kind == PSW_HOST_NAME)
        return psw_addr_same(a, b) ? CLASH_SAME : CLASH_NONE;
    if (a4 == b4 && strcmp(ha, hb) == 0)
        return CLASH_SAME;
    if (a4 && b4 && (is_any(a, "0.0.0.0") || is_any(b, "0.0.0.0")))
        return CLASH_ANY4;
    return CLASH_NONE;
}

/* Writes how entry k (0-based) of e names socket a, `[cluster] listen:
 * entry 2 "0.0.0.0:8070"` (without the colon when colon is 0), saying
 * when a node listens on its nodes address. */
static void bind_name(char *out, size_t cap, const entry *e, int k,
                      const psw_addr *a, int colon)
{
    char text[PSW_ADDR_TEXT_MAX], node[80] = "";
    psw_addr_format(a, text, sizeof text);
    if (strcmp(e->key, "nodes") == 0)
        snprintf(node, sizeof node, " (node %d listens on its nodes "
                 "address: no listen is set)", k);
    snprintf(out, cap, "[%s] %s%s entry %d \"%s\"%s",
             strcmp(e->key, "metrics_listen") == 0 ? "server" : "cluster",
             e->key, colon ? ":" : "", k + 1, text, node);
}

/* Every socket nodes on one host bind (their client listeners and
 * /metrics) must be able to listen beside the others: a clash
 * (binds_clash) would stop the second node at start, or the first at its
 * metrics listener, naming an address but no line. Nodes on different
 * hosts may bind the same address (listen = 0.0.0.0:7070 on each); hosts
 * are told apart by their nodes address as written. Socket u is node
 * u / per's client listener (listen, else its nodes address) or, when
 * u % per is 1, its /metrics. The error is at the later socket's line,
 * but at the metrics entry's when the other is a nodes address: nodes
 * names the cluster, the bind is what to change. Returns 0, or -1 with
 * the error set. */
/* The line of key in section s, 0 when either is absent. */
static int line_of(const section *s, const char *key)
{
    const entry *e = s ? find_entry(s, key) : NULL;
    return e ? e->line : 0;
}

static int bind_clashes(parser *p, const section *cluster,
                        const section *server, const psd_config *c)
{
    int per = c->nmetrics ? 2 : 1;
    const psw_addr *client = c->nlisten ? c->listen : c->nodes;
    const entry *ent[2] = {
        find_entry(cluster, c->nlisten ? "listen" : "nodes"),
        c->nmetrics ? find_entry(server, "metrics_listen") : NULL };
    for (int v = 1; v < c->nnodes * per; v++) {
        int j = v / per, mv = v % per;
        const psw_addr *b = mv ? &c->metrics[j] : &client[j];
        for (int u = 0; u < v; u++) {
            int i = u / per, mu = u % per;
            const psw_addr *a = mu ? &c->metrics[i] : &client[i];
            clash why = binds_clash(a, b);
            if (why == CLASH_NONE ||
                strcasecmp(psw_addr_host(&c->nodes[i], NULL),
                           psw_addr_host(&c->nodes[j], NULL)) != 0)
                continue;
            /* x is the socket reported at its line, y the other. */
            int swap = mu && !mv && !c->nlisten;
            const psw_addr *x = swap ? a : b, *y = swap ? b : a;
            const entry *ex = ent[swap ? mu : mv], *ey = ent[swap ? mv : mu];
            char nx[PSW_ADDR_TEXT_MAX + 160], ny[PSW_ADDR_TEXT_MAX + 160];
            char text[PSW_ADDR_TEXT_MAX], note[48];
            bind_name(nx, sizeof nx, ex, swap ? i : j, x, 1);
            bind_name(ny, sizeof ny, ey, swap ? j : i, y, 0);
            cont_note(ex, note);
            if (why == CLASH_SAME) {
                int v4;
                fail(p, ex->line, "%s clashes with %s: both take port %d of "
                     "address %s on host %s%s", nx, ny, x->port,
                     psw_addr_host(x, &v4), c->nodes[j].host, note);
            } else {
                const char *any = why == CLASH_ANY6 ? "::" : "0.0.0.0";
                psw_addr_format(is_any(x, any) ? x : y, text, sizeof text);
                fail(p, ex->line, "%s clashes with %s: %s takes port %d on "
                     "every %saddress of host %s%s", nx, ny, text, x->port,
                     why == CLASH_ANY6 ? "IPv6 and IPv4 " : "IPv4 ",
                     c->nodes[j].host, note);
            }
            return -1;
        }
    }
    return 0;
}

/* The token settings: one of the two at most, and a token that is not
 * trivially guessed (the file's contents are checked when psd starts:
 * preflight.c). */
static int check_auth(parser *p, const section *server, psd_config *c)
{
    const entry *tok = find_entry(server, "auth_token");
    const entry *file = find_entry(server, "auth_token_file");
    c->auth_token_line = tok ? tok->line : 0;
    c->auth_token_file_line = file ? file->line : 0;
    if (c->auth_token[0] && c->auth_token_file[0]) {
        fail(p, file->line, "[server] auth_token_file: set either auth_token "
             "or auth_token_file, not both (auth_token is on line %d)",
             tok->line);
        return -1;
    }
    char why[160];
    if (c->auth_token[0] &&
        psw_token_check(c->auth_token, strlen(c->auth_token), why,
                        sizeof why) < 0) {
        fail(p, tok->line, "[server] auth_token: %s", why);
        return -1;
    }
    return 0;
}

/* Builds c from the sections read (secs, n of them). */
static int build(parser *p, const section *secs, int n, psd_config *c)
{
    if (apply_defaults(p, SC_CLUSTER, "cluster", (char *)c, c) < 0 ||
        apply_defaults(p, SC_SERVER, "server", (char *)c, c) < 0)
        return -1;
    int ntables = 0, bad = 0;
    const section *cluster = NULL, *server = NULL;
    for (int i = 0; i < n; i++) {
        ntables += secs[i].scope == SC_TABLE;
        if (secs[i].scope == SC_CLUSTER)
            cluster = &secs[i];
        if (secs[i].scope == SC_SERVER)
            server = &secs[i];
    }
    if (ntables > 0) {
        c->tables = calloc((size_t)ntables, sizeof *c->tables);
        if (!c->tables) {
            fail(p, 0, "out of memory");
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        const section *s = &secs[i];
        char *base = (char *)c;
        psd_table_conf *t = NULL;
        if (s->scope == SC_TABLE) {
            /* Every table travels in HELLO_OK, which a client refuses
             * beyond this count: such a file would start a node nobody
             * can connect to. */
            if (c->ntables == PSW_MAX_TABLES) {
                fail(p, s->line, "[%s]: at most %d tables", s->name,
                     PSW_MAX_TABLES);
                return -1;
            }
            t = &c->tables[c->ntables++];
            snprintf(t->name, sizeof t->name, "%s",
                     s->name + TABLE_PREFIX_LEN);
            t->line = s->line;
            base = (char *)t;
            if (apply_defaults(p, SC_TABLE, s->name, base, c) < 0)
                return -1;
        }
        /* Each section's errors are all said; a table's own checks need
         * its values, the file's cross checks below every value. */
        if (apply_section(p, s, base, c) < 0) {
            bad = 1;
            /* Missing, not bad: said with the rest, not after a second
             * run (a bad updater hid it from a newcomer). The kind is
             * known unless its own line was the bad one. */
            const entry *kind = find_entry(s, "kind");
            if (t && (!kind || !strcmp(kind->value, "dense") ||
                      !strcmp(kind->value, "sparse")))
                (void)rows_missing(p, s, t);
        } else if (t && check_table(p, s, t, c) < 0)
            bad = 1;
    }
    if (bad)
        return -1;
    if (!cluster) {
        /* Not when the read failed: its bad header ([clustr]) or a line
         * of it was said, and "no [cluster] section" beside it, first in
         * line order, was false (a hostile-ini trial). */
        if (!p->read_failed)
            fail(p, 0, "[cluster] nodes: required key missing (no [cluster] "
                 "section)");
        return -1;
    }
    if (c->nlisten && c->nlisten != c->nnodes) {
        const entry *e = find_entry(cluster, "listen");
        fail(p, e->line, "[cluster] listen: %d address%s for %d node%s "
             "(one per node, in the order of nodes)", c->nlisten,
             c->nlisten == 1 ? "" : "es", c->nnodes,
             c->nnodes == 1 ? "" : "s");
        return -1;
    }
    if (c->nmetrics && c->nmetrics != c->nnodes) {
        const entry *e = find_entry(server, "metrics_listen");
        fail(p, e->line, "[server] metrics_listen: %d address%s for %d "
             "node%s (one per node, in the order of nodes)", c->nmetrics,
             c->nmetrics == 1 ? "" : "es", c->nnodes,
             c->nnodes == 1 ? "" : "s");
        return -1;
    }
    if (bind_clashes(p, cluster, server, c) < 0)
        return -1;
    if (server && check_auth(p, server, c) < 0)
        return -1;
    c->data_dir_line = line_of(server, "data_dir");
    c->shards_line = line_of(cluster, "shards");
    c->workers_line = line_of(cluster, "workers");
    c->durability_line = line_of(server, "durability");
    c->fsync_line = line_of(server, "fsync");
    c->max_frame_line = line_of(server, "max_frame");
    c->max_client_memory_line = line_of(server, "max_client_memory");
    c->heartbeat_ms_line = line_of(server, "heartbeat_ms");
    c->peer_timeout_ms_line = line_of(server, "peer_timeout_ms");
    /* A live peer sends something every heartbeat: a timeout shorter than
     * two of them would close healthy connections. */
    if (c->peer_timeout_ms < 2 * c->heartbeat_ms) {
        const entry *e = server ? find_entry(server, "peer_timeout_ms") : NULL;
        if (!e && server)
            e = find_entry(server, "heartbeat_ms");
        fail(p, e ? e->line : 0, "[server] peer_timeout_ms (%d) must be at "
             "least twice heartbeat_ms (%d)", c->peer_timeout_ms,
             c->heartbeat_ms);
        return -1;
    }
    /* fsync says when the journal reaches the disk; with durability =
     * snapshot there is none, and an operator who set fsync = always
     * believes each push is on disk when it is acknowledged. (The other
     * values promise nothing per push: the annotated conf/psd.ini sets
     * the default everysec beside durability = snapshot.) */
    const entry *fs = server ? find_entry(server, "fsync") : NULL;
    if (fs && c->fsync == PSD_FSYNC_ALWAYS && c->durability != PSD_DUR_LOG &&
        note(p, c, fs->line, "[server] fsync = always has no effect unless "
             "durability = log (it is snapshot: pushes acknowledged since "
             "the last snapshot are lost in a crash)") < 0)
        return -1;
    /* Said at start and by --check: requests then travel in more
     * frames, and a connection is paused sooner for its replies. */
    uint64_t cut_frame = psd_config_frame(c), cut_out = psd_config_output(c);
    if (cut_frame < c->max_frame || cut_out < c->max_output) {
        /* max_frame or max_output over 342M cut them under the default
         * budget too. */
        const entry *cm = server ? find_entry(server, "max_client_memory")
                                 : NULL;
        if (!cm && server)
            cm = find_entry(server, cut_frame < c->max_frame ? "max_frame"
                                                             : "max_output");
        char frame[96] = "", out[128] = "";
        if (cut_frame < c->max_frame)
            snprintf(frame, sizeof frame, "frames to %llu bytes (max_frame "
                     "is %llu)", (unsigned long long)cut_frame,
                     (unsigned long long)c->max_frame);
        if (cut_out < c->max_output)
            snprintf(out, sizeof out, "%sthe replies a connection may be "
                     "owed to %llu bytes (max_output is %llu)",
                     frame[0] ? ", and " : "", (unsigned long long)cut_out,
                     (unsigned long long)c->max_output);
        if (note(p, c, cm ? cm->line : 0, "[server] max_client_memory: "
                 "%llu bytes cut %s%s: one frame and its reply must fit it%s",
                 (unsigned long long)c->max_client_memory, frame, out,
                 frame[0] ? "; clients send requests in more frames" : "")
            < 0)
            return -1;
    }
    /* A node's restart lets its loaded workers' grace run from its
     * start: below the time the others take to reconnect, the first
     * worker back ends a bsp clock alone, and with aggregate = mean its
     * push counts W times on that node, for good (a trial: grace 0, 8
     * workers). */
    int bsp = 0;
    for (int i = 0; i < c->ntables; i++)
        bsp |= c->tables[i].consistency == PSD_CONS_BSP;
    if (bsp && c->workers > 1 && c->worker_grace < 5) {
        const entry *wg = find_entry(cluster, "worker_grace");
        if (note(p, c, wg ? wg->line : cluster->line, "[cluster] "
                 "worker_grace = %d with bsp tables and %d workers: a node "
                 "restarted (or a worker reconnecting) can end a clock with "
                 "the first worker back alone, its push not summed with the "
                 "others' (with aggregate = mean, counted %d times on that "
                 "node). Keep it above the time a restart and the workers' "
                 "reconnection take (a few seconds at least)",
                 c->worker_grace, c->workers, c->workers) < 0)
            return -1;
    }
    /* Shard s lives on node s mod N: with fewer shards than nodes, the
     * nodes past them hold nothing, yet every client connects to every
     * node, so each of them can keep the cluster from opening. */
    if (c->shards < (uint32_t)c->nnodes) {
        const entry *sh = find_entry(cluster, "shards");
        int idle = c->nnodes - (int)c->shards;
        char which[48];
        if (idle == 1)
            snprintf(which, sizeof which, "node %d holds", c->nnodes - 1);
        else
            snprintf(which, sizeof which, "nodes %u..%d hold", c->shards,
                     c->nnodes - 1);
        if (note(p, c, sh ? sh->line : cluster->line, "[cluster] shards: %u "
                 "shard%s for %d nodes: %s no row of any table, though "
                 "clients need every node to open the cluster (shards >= "
                 "nodes spreads the rows over all)", c->shards,
                 c->shards == 1 ? "" : "s", c->nnodes, which) < 0)
            return -1;
    }
    /* Dense shard ranges compute rows * shards (proto/layout.h). */
    for (int i = 0, k = 0; i < n; i++) {
        const section *s = &secs[i];
        if (s->scope != SC_TABLE)
            continue;
        const psd_table_conf *t = &c->tables[k++];
        /* One row and its key must fit a message (a range of a dense
         * table's rows carries no key, but a keyed request on it does): a
         * wider row can never be pushed or pulled (the client refuses
         * every request), so the table is a mistake psd would only show
         * at the first use. What max_client_memory makes of max_frame
         * (psd_config_frame, 298K at least) holds any row (dim <= 65536). */
        uint64_t rowb = (uint64_t)t->dim * sizeof(float);
        if (rowb + 8 > psw_payload_max(c->max_frame)) {
            const entry *d = find_entry(s, "dim");
            fail(p, d ? d->line : s->line, "[%s] dim: a row of %u floats "
                 "(%llu bytes) and its key do not fit a message under "
                 "[server] max_frame = %llu (a request carries up to %llu "
                 "bytes of keys and rows); raise max_frame to at least %llu, "
                 "or lower dim", s->name, t->dim, (unsigned long long)rowb,
                 (unsigned long long)c->max_frame,
                 (unsigned long long)psw_payload_max(c->max_frame),
                 (unsigned long long)(rowb + 8 + PSW_BODY_OVERHEAD +
                                      PSW_MSG_OVERHEAD));
            return -1;
        }
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
    psd_ini ini;
    memset(c, 0, sizeof *c);
    int rc = psd_ini_read(&ini, path, check_section_name, err, errlen);
    section *secs = NULL;
    /* Its values are checked too when the read went on past its errors:
     * the operator fixes the file in one pass. */
    if (rc == 0 || !ini.stopped) {
        secs = calloc((size_t)ini.nsecs + 1, sizeof *secs);
        if (!secs)
            fail(&ini, 0, "out of memory");
    }
    if (secs) {
        char why[8];
        for (int i = 0; i < ini.nsecs; i++) {
            const psd_ini_section *is = &ini.secs[i];
            secs[i] = (section){ is->name, is->line,
                                 scope_of(is->name, strlen(is->name), why,
                                          sizeof why), is };
        }
        build(&ini, secs, ini.nsecs, c);
    }
    free(secs);
    int failed = ini.failed;
    psd_ini_free(&ini);
    if (failed) {
        psd_config_destroy(c);
        return -1;
    }
    return 0;
}

const char *psd_config_setting(int i, const char **sect)
{
    static const char *const names[] = { "cluster", "server", "table" };
    if (i < 0 || (size_t)i >= NSETTINGS)
        return NULL;
    if (sect)
        *sect = names[settings[i].scope];
    return settings[i].key;
}

void psd_config_data_dir(const psd_config *c, char *buf, size_t len)
{
    const char *state = getenv("STATE_DIRECTORY");
    if (state && *state && strcmp(c->data_dir, DEFAULT_DATA_DIR) == 0)
        snprintf(buf, len, "%.*s", (int)strcspn(state, ":"), state);
    else
        snprintf(buf, len, "%s", c->data_dir);
}

void psd_config_destroy(psd_config *c)
{
    psw_wipe(c->auth_token, sizeof c->auth_token);
    free(c->nodes);
    free(c->listen);
    free(c->metrics);
    free(c->tables);
    free(c->notes);
    memset(c, 0, sizeof *c);
}

/* The fewest digits of v that read back as v: 7 for most inits, up to 9
 * (a value such as 1/sqrt(512) written with 7 read back as another float,
 * so an init put back from the log made another inits mark). */
static int float_digits(float v)
{
    for (int d = 7; d < 9; d++) {
        char t[32];
        snprintf(t, sizeof t, "%.*g", d, (double)v);
        if (strtof(t, NULL) == v)
            return d;
    }
    return 9;
}

int psd_init_format(char *buf, size_t len, const psd_init_params *ip)
{
    static const char *const names[] = { "zeros", "constant", "uniform",
                                         "normal" };
    switch (ip->kind) {
    case PSD_INIT_ZEROS:
        return snprintf(buf, len, "%s", names[ip->kind]);
    case PSD_INIT_CONSTANT:
        return snprintf(buf, len, "%s %.*g", names[ip->kind],
                        float_digits(ip->a), (double)ip->a);
    default:
        return snprintf(buf, len, "%s %.*g %.*g", names[ip->kind],
                        float_digits(ip->a), (double)ip->a,
                        float_digits(ip->b), (double)ip->b);
    }
}

/* What one frame, or one connection's owed replies, may take of
 * max_client_memory (1M at least: 298K at least). */
static uint64_t budget_fit(const psd_config *c)
{
    return (c->max_client_memory - 2 * PSW_READ_CHUNK) / 3 &
           ~(uint64_t)1023;
}

uint64_t psd_config_frame(const psd_config *c)
{
    uint64_t fit = budget_fit(c);
    return c->max_frame < fit ? c->max_frame : fit;
}

const char *psd_config_quote_note(const char *value)
{
    size_t n = strlen(value);
    if (n >= 2 && (value[0] == '"' || value[0] == '\'') &&
        value[n - 1] == value[0])
        return " (quotes are kept as part of the value: write it without "
               "them)";
    return "";
}

uint64_t psd_config_output(const psd_config *c)
{
    uint64_t fit = budget_fit(c);
    return c->max_output < fit ? c->max_output : fit;
}
