/* The strict ini reader: see inifile.h. inih splits lines into keys and
 * values; our line callback sees every physical line first, to refuse
 * what inih would silently split or cut and to parse section headers. */

/* Debian's libinih always passes the line number as a fifth argument, so
 * the handler must take it. We count lines ourselves, in the reader. */
#define INI_HANDLER_LINENO 1
#include <ini.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inifile.h"
#include "../proto/auth.h"

/* State of one read: the file, where we are, and what inih is about to
 * hand to on_value. */
typedef struct reader {
    psd_ini *ini;
    FILE *f;
    psd_ini_name_check check;
    int line;           /* physical lines read so far */
    int key_seen;       /* a key since the last header: inih's prev_name */
    int cont;           /* the current line continues the previous value */
    int skip_section;   /* under a header that failed: its keys are not
                           read (they would land in the section before) */
    int skip_cont;      /* after a line that failed: its indented lines */
    int header;         /* the line classify() saw was a section header */
} reader;

/* Copies an error's text to out (size bytes, cut short if it must be),
 * with the file's bytes that a terminal would not show as they are
 * written: a vertical tab or form feed (white space to the reader) as '?',
 * and every byte beyond ASCII as \\xNN, so that a zero-width space or a
 * look-alike letter in a key or a path is seen. psd's own words are
 * ASCII. */
static void quote(char *out, size_t size, const char *text)
{
    size_t at = 0;
    for (const unsigned char *q = (const unsigned char *)text;
         *q && at + 1 < size; q++) {
        if (*q >= 0x80) {
            if (at + 5 > size)
                break;
            snprintf(out + at, 5, "\\x%02x", *q);
            at += 4;
        } else {
            out[at++] = *q < 0x20 && *q != '\t' && *q != '\n' ? '?'
                                                             : (char)*q;
        }
    }
    out[at] = '\0';
}

/* The last line when errors are not shown, after the `shown` that are,
 * into out (cap bytes); its length, or -1. */
static int more_line(const psd_ini *ini, int shown, char *out, size_t cap)
{
    return snprintf(out, cap, "\n%s: more errors than these %d (fix them "
                    "and check again)", ini->path, shown);
}

/* Writes the errors kept (in the order of their lines) into the caller's
 * buffer: the first cut short if it must be, the others whole or not at
 * all (room is left for the last line), at most PSD_INI_MAX_ERRORS, and
 * when some are not shown a last line that says so. */
static void render(psd_ini *ini)
{
    size_t at = 0;
    int shown = 0;
    ini->err[0] = '\0';
    for (int i = 0; i < ini->nerrs && shown < PSD_INI_MAX_ERRORS; i++) {
        const char *t = ini->errs[i].text;
        size_t l = strlen(t);
        if (shown == 0) {
            snprintf(ini->err, ini->errlen, "%s", t);
            at = strlen(ini->err);
            if (l > at && ini->errlen > 4)    /* cut: say so */
                memcpy(ini->err + ini->errlen - 4, "...", 4);
            shown = 1;
            continue;
        }
        char more[400];
        int ml = more_line(ini, shown + 1, more, sizeof more);
        if (ml < 0 || at + 1 + l + (size_t)ml + 1 > ini->errlen)
            break;
        ini->err[at++] = '\n';
        memcpy(ini->err + at, t, l + 1);
        at += l;
        shown++;
    }
    if (ini->failed > shown && shown > 0) {
        char more[400];
        int ml = more_line(ini, shown, more, sizeof more);
        if (ml > 0 && at + (size_t)ml + 1 <= ini->errlen)
            memcpy(ini->err + at, more, (size_t)ml + 1);
    }
}

__attribute__((format(printf, 3, 0)))
static void vfail(psd_ini *ini, int line, const char *fmt, va_list ap)
{
    ini->failed++;
    if (!ini->err || ini->errlen == 0)
        return;
    /* Kept up to PSD_INI_FIND_ERRORS, in the order of their lines (the
     * read finds the bad lines, the caller then the bad values: two
     * passes), so that the first PSD_INI_MAX_ERRORS are the first in
     * the file, not the first found. */
    if (ini->nerrs >= PSD_INI_FIND_ERRORS)
        return;
    if (!ini->errs &&
        !(ini->errs = malloc(PSD_INI_FIND_ERRORS * sizeof *ini->errs)))
        return;
    char one[4096 + 1024];
    int n = line > 0 ? snprintf(one, sizeof one, "%s:%d: ", ini->path, line)
                     : snprintf(one, sizeof one, "%s: ", ini->path);
    if (n < 0 || (size_t)n >= sizeof one)
        n = 0;
    char text[4096];
    vsnprintf(text, sizeof text, fmt, ap);
    quote(one + n, sizeof one - (size_t)n, text);
    char *t = strdup(one);
    if (!t)
        return;
    /* After every error of the same line or before (stable). */
    int at = ini->nerrs;
    while (at > 0 && ini->errs[at - 1].line > line)
        at--;
    memmove(&ini->errs[at + 1], &ini->errs[at],
            (size_t)(ini->nerrs - at) * sizeof *ini->errs);
    ini->errs[at].line = line;
    ini->errs[at].text = t;
    ini->nerrs++;
    render(ini);
}

void psd_ini_fail(psd_ini *ini, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(ini, line, fmt, ap);
    va_end(ap);
}

#define fail psd_ini_fail

/* An error after which the read stops: what follows is not read (a line
 * too long, a binary file, out of memory). */
__attribute__((format(printf, 3, 4)))
static void fatal(psd_ini *ini, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(ini, line, fmt, ap);
    va_end(ap);
    ini->stopped = 1;
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

/* Handles a "[name]" line; t is the '[' and end is one past the last
 * non-space byte. inih would silently cut long names and ignore text after
 * ']', so the header is parsed here. Returns 0, or -1 with the error set. */
static int on_header(reader *p, const char *t, const char *end)
{
    const char *close = memchr(t, ']', (size_t)(end - t));
    if (!close) {
        fail(p->ini, p->line,
             "expected \"]\" at the end of the section header");
        return -1;
    }
    const char *rest = close + 1;
    while (rest < end && isspace((unsigned char)*rest))
        rest++;
    if (rest < end && *rest != ';') {
        /* Not quoted: "[server] auth_token = ..." on one line echoed the
         * token into the log and /metrics (a hostile-ini trial). */
        fail(p->ini, p->line,
             "unexpected text after the section header (%zu bytes, not "
             "shown: it may be a secret; a setting goes on a line of its "
             "own)", (size_t)(end - rest));
        return -1;
    }
    const char *name = t + 1;
    size_t n = (size_t)(close - name);
    char why[200];
    if (p->check && p->check(name, n, why, sizeof why)) {
        fail(p->ini, p->line, "%s", why);
        return -1;
    }
    if (n >= PSD_INI_SECTION_MAX) {
        fail(p->ini, p->line, "section name \"%.*s\" is too long", (int)n,
             name);
        return -1;
    }
    if (p->ini->nsecs >= PSD_INI_SECTIONS_MAX) {
        fatal(p->ini, p->line, "more than %d sections", PSD_INI_SECTIONS_MAX);
        return -1;
    }
    for (int i = 0; i < p->ini->nsecs; i++) {
        if (strlen(p->ini->secs[i].name) == n &&
            memcmp(p->ini->secs[i].name, name, n) == 0) {
            fail(p->ini, p->line,
                 "duplicate section [%.*s] (first at line %d)", (int)n, name,
                 p->ini->secs[i].line);
            return -1;
        }
    }
    if (p->ini->nsecs == p->ini->cap) {
        int cap = p->ini->cap ? 2 * p->ini->cap : 4;
        psd_ini_section *s = realloc(p->ini->secs, (size_t)cap * sizeof *s);
        if (!s) {
            fatal(p->ini, 0, "out of memory");
            return -1;
        }
        p->ini->secs = s;
        p->ini->cap = cap;
    }
    psd_ini_section *s = &p->ini->secs[p->ini->nsecs++];
    memset(s, 0, sizeof *s);
    memcpy(s->name, name, n);
    s->line = p->line;
    return 0;
}

/* Sorts the line in buf[0..n) the way inih will, so that we know about
 * section headers and continuation lines. Returns 0, -1 (error set) or 1
 * (a line of one that failed: not to be read). */
static int classify(reader *p, const char *buf, size_t n)
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
    p->header = 0;
    if (t == end || *t == ';' || *t == '#')
        return 0;                       /* blank or comment */
    if (p->skip_cont && t > buf)
        return 1;                       /* continues a line that failed */
    if (p->key_seen && t > buf) {
        p->cont = 1;                    /* indented: continues the value */
        return 0;
    }
    p->skip_cont = 0;
    if (*t == '[') {
        p->key_seen = 0;
        p->header = 1;
        int rc = on_header(p, t, end);
        p->skip_section = rc != 0;
        return rc;
    }
    if (p->skip_section)
        return 1;
    const char *sep = find_chars_or_comment(t, end, "=:");
    if (sep == end || (*sep != '=' && *sep != ':')) {
        /* Only the first word is echoed: the rest may be a secret whose
         * '=' was forgotten (auth_token s3cret...), and the error goes to
         * the log and the terminal. */
        const char *w = t;
        while (w < end && !isspace((unsigned char)*w))
            w++;
        if (!psd_ini_key_like(t, (size_t)(w - t)))
            fail(p->ini, p->line, "expected \"key = value\" or "
                 "\"[section]\", got a line of %zu bytes (not shown: it may "
                 "be a secret)", (size_t)(end - t));
        else
            fail(p->ini, p->line, "expected \"key = value\" or "
                 "\"[section]\", got \"%.*s%s\"", (int)(w - t), t,
                 w < end ? " ..." : "");
        p->skip_cont = 1;
        return -1;
    }
    p->key_seen = 1;
    return 0;
}

/* inih's reader callback: reads one physical line into buf (size bytes).
 * A line that does not fit with room for "\r\n" is refused, never split
 * (and not read on: a file of one endless line, /dev/zero, ends there);
 * so is a control character (a NUL byte, or any below space but tab,
 * vertical tab and form feed, or DEL: a binary file given as the ini,
 * which the error would otherwise echo to a terminal). Returns buf, or NULL to stop at EOF or after an
 * error. */
static char *read_line(char *buf, int size, void *stream)
{
    reader *p = stream;
    if (p->ini->stopped || p->ini->failed > PSD_INI_FIND_ERRORS || size < 8)
        return NULL;
    size_t max = (size_t)size - 3, n = 0;
    int ch = EOF, too_long = 0;
    while ((ch = getc(p->f)) != EOF) {
        if (n == (size_t)size - 1) {
            too_long = 1;
            break;
        }
        buf[n++] = (char)ch;
        if (ch == '\n')
            break;
    }
    if (ch == EOF && ferror(p->f)) {
        fatal(p->ini, 0, "read error: %s", strerror(errno));
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
        fatal(p->ini, p->line, "line too long (max %zu bytes)", max);
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        /* Tab, vertical tab and form feed (an editor's page break) are
         * white space to classify(). */
        if ((c < 0x20 && c != '\t' && c != '\v' && c != '\f') || c == 0x7f) {
            if (c == 0)
                fatal(p->ini, p->line, "unexpected NUL byte");
            else
                fatal(p->ini, p->line, "unexpected control character "
                      "0x%02x (byte %zu of the line)", c, i + 1);
            return NULL;
        }
    }
    if (classify(p, buf, n) == 0)
        return buf;
    if (p->ini->stopped)
        return NULL;
    /* A line that failed is read on past, so that one check lists every
     * error: inih gets a blank line instead, and classify() skips what
     * belonged to it (a bad header's keys, a bad line's indented ones). */
    if (p->header) {
        /* A header for inih, as the line was: it forgets the key before,
         * which an indented line after would otherwise continue there
         * while this reader takes it for a header or key of its own. */
        memcpy(buf, "[-]\n", 5);
        return buf;
    }
    buf[0] = '\n';
    buf[1] = '\0';
    return buf;
}

/* Joins a continuation line to the last value, separated by one space.
 * inih r55 keeps inline comments on continuation lines; we drop them so
 * that `; comment` means the same on every line. */
static int append_piece(reader *p, const char *piece)
{
    psd_ini_section *s = &p->ini->secs[p->ini->nsecs - 1];
    psd_ini_entry *e = &s->entries[s->nentries - 1];
    const char *end = find_chars_or_comment(piece, piece + strlen(piece),
                                            NULL);
    while (end > piece && isspace((unsigned char)end[-1]))
        end--;
    size_t old = e->len;
    if (psw_append_wiped(&e->value, &e->len, &e->cap, ' ', piece,
                         (size_t)(end - piece))) {
        fatal(p->ini, 0, "out of memory");
        return -1;
    }
    if (!e->cont_line) {
        e->cont_line = p->line;
        e->first_len = old;
    }
    return 0;
}

/* inih's handler: records the key and value under the current section.
 * The section and line number inih passes are not used: the reader knows
 * both, without inih's 49-character cut of section names. */
static int on_value(void *user, const char *section_name, const char *name,
                    const char *value, int lineno)
{
    reader *p = user;
    (void)section_name;
    (void)lineno;
    if (p->ini->stopped)
        return 1;
    if (p->cont) {
        /* Always after a recorded entry: a key line that was not
         * recorded sets skip_cont, so its indented lines come not here. */
        append_piece(p, value);
        return 1;
    }
    if (!*name) {
        fail(p->ini, p->line, "missing key before \"=\"");
        p->skip_cont = 1;
        return 1;
    }
    if (p->ini->nsecs == 0) {
        p->skip_cont = 1;
        /* The file overwritten with the token (`base64 > psd.ini`) gets
         * here: not echoed then (psd_ini_key_like). */
        if (psd_ini_key_like(name, strlen(name)))
            fail(p->ini, p->line, "key \"%s\" outside any section", name);
        else
            fail(p->ini, p->line, "a key of %zu bytes outside any section "
                 "(not shown: it may be a secret)", strlen(name));
        return 1;
    }
    psd_ini_section *s = &p->ini->secs[p->ini->nsecs - 1];
    if (s->nentries == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        psd_ini_entry *es = realloc(s->entries, (size_t)cap * sizeof *es);
        if (!es) {
            fatal(p->ini, 0, "out of memory");
            return 1;
        }
        s->entries = es;
        s->cap = cap;
    }
    psd_ini_entry *e = &s->entries[s->nentries];
    e->key = strdup(name);
    e->value = strdup(value);
    e->line = p->line;
    e->cont_line = 0;
    e->len = e->value ? strlen(e->value) : 0;
    e->cap = e->len + 1;
    if (!e->key || !e->value) {
        free(e->key);
        free(e->value);
        fatal(p->ini, 0, "out of memory");
        return 1;
    }
    s->nentries++;
    return 1;
}

void psd_ini_free(psd_ini *ini)
{
    for (int i = 0; i < ini->nsecs; i++) {
        for (int j = 0; j < ini->secs[i].nentries; j++) {
            /* Values wiped: one may be an inline auth_token. */
            psd_ini_entry *e = &ini->secs[i].entries[j];
            free(e->key);
            if (e->value)
                psw_wipe(e->value, strlen(e->value));
            free(e->value);
        }
        free(ini->secs[i].entries);
    }
    free(ini->secs);
    ini->secs = NULL;
    ini->nsecs = ini->cap = 0;
    for (int i = 0; i < ini->nerrs; i++)
        free(ini->errs[i].text);
    free(ini->errs);
    ini->errs = NULL;
    ini->nerrs = 0;
}

const psd_ini_entry *psd_ini_find(const psd_ini_section *s, const char *key)
{
    for (int i = 0; i < s->nentries; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

int psd_ini_read(psd_ini *ini, const char *path, psd_ini_name_check check,
                 char *err, size_t errlen)
{
    memset(ini, 0, sizeof *ini);
    ini->path = path;
    ini->err = err;
    ini->errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
    reader r = { .ini = ini, .check = check };
    /* O_NONBLOCK: a FIFO would wait for a writer at open, and a reload
     * runs on psd's loop; FIFOs and sockets are refused, other files
     * read as they are (a device is cut at its first overlong line). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        fatal(ini, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || S_ISFIFO(st.st_mode) ||
        S_ISSOCK(st.st_mode)) {
        close(fd);
        fatal(ini, 0, "cannot read: a FIFO or socket, not a file");
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags != -1)
        (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    r.f = fdopen(fd, "r");
    if (!r.f) {
        close(fd);
        fatal(ini, 0, "cannot open: %s", strerror(errno));
        return -1;
    }
    int rc = ini_parse_stream(read_line, &r, on_value, &r);
    fclose(r.f);
    if (!ini->failed && rc > 0)
        fail(ini, rc, "syntax error");       /* the reader catches these */
    else if (!ini->failed && rc < 0)
        fail(ini, 0, "out of memory");
    ini->read_failed = ini->failed;
    return ini->failed ? -1 : 0;
}

int psd_ini_key_like(const char *w, size_t n)
{
    int under = 0;
    if (n < 8)                   /* a token of 16 bytes or more cut at a
                                    '=' or ':' shows little of it */
        return 1;
    if (n > 32)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)w[i];
        if (!(islower(ch) || isdigit(ch) || ch == '_'))
            return 0;
        under |= ch == '_';
    }
    return n < 16 || under;
}
