/* Parsing of ps_open's server list and of the cluster's ini; see
 * nodes.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INI_HANDLER_LINENO 1
#include <ini.h>

#include "nodes.h"
#include "psclient.h"
#include "../proto/auth.h"
#include "../proto/msg.h"

static int parse_list(const char *list, size_t first, psc_servers *out,
                      char *err, size_t errlen)
{
    psw_addr *a;
    psw_addr_error e;
    int n;
    int rc = psw_addr_list_parse(list, PSW_MAX_NODES, &a, &n, &e);
    snprintf(err, errlen, "out of memory reading the server list");
    if (rc == -2)
        return PS_ENOMEM;
    if (rc < 0) {
        if (e.first)
            snprintf(err, errlen, "server %s is listed twice (entries %d and "
                     "%d)", e.item, e.first, e.entry);
        else if (e.entry && !psw_addr_quotable(list, first, e.item))
            snprintf(err, errlen, "bad server address (entry %d, text of an "
                     "indented line, not shown: it may be a secret): %s",
                     e.entry, e.why);
        else if (e.entry)
            snprintf(err, errlen, "bad server address \"%s\" (entry %d): %s",
                     e.item, e.entry, e.why);
        else
            snprintf(err, errlen, "bad server list: %s", e.why);
        return PS_EINVAL;
    }
    out->seeds = calloc((size_t)n, sizeof *out->seeds);
    if (!out->seeds) {
        free(a);
        return PS_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        memcpy(out->seeds[i].host, a[i].host, sizeof a[i].host);
        snprintf(out->seeds[i].port, sizeof out->seeds[i].port, "%d",
                 a[i].port);
    }
    out->nseeds = n;
    free(a);
    return 0;
}

/* What the client reads of the ini. psd validates the whole file (psd
 * --check); the client needs where the nodes are and the token. */
/* A value joined from its pieces (psw_append_wiped). */
typedef struct joined {
    char *s;
    size_t len, cap;
} joined;

typedef struct ini_read {
    joined nodes;                /* [cluster] nodes, pieces joined */
    size_t nodes_first;          /* bytes of it from the key's own line,
                                    SIZE_MAX when it has no other: what
                                    errors may quote (psw_addr_quotable) */
    joined token, token_file;    /* [server] auth_token, auth_token_file */
    int oom;
} ini_read;

/* How much of a piece is value: up to an inline comment (a ';' after
 * whitespace), without the spaces before it. inih r55 cuts it from a
 * key's own line but keeps it on continuation lines; psd cuts it from
 * every line (daemon/inifile.c), and we must read the nodes it reads. */
static size_t value_len(const char *v)
{
    size_t n = 0;
    int was_space = 0;
    for (; v[n] && !(was_space && v[n] == ';'); n++)
        was_space = isspace((unsigned char)v[n]);
    while (n > 0 && isspace((unsigned char)v[n - 1]))
        n--;
    return n;
}

/* inih calls the handler again, with the same key, for each indented
 * continuation line; psd joins the pieces with one space, and so do we. */
static void append(ini_read *in, joined *dst, const char *value)
{
    if (psw_append_wiped(&dst->s, &dst->len, &dst->cap, dst->len ? ' ' : 0,
                         value, value_len(value)))
        in->oom = 1;
}

static int on_ini(void *user, const char *section, const char *name,
                  const char *value, int lineno)
{
    ini_read *in = user;
    (void)lineno;
    if (!strcmp(section, "cluster") && !strcmp(name, "nodes")) {
        if (in->nodes.s && in->nodes_first == SIZE_MAX)
            in->nodes_first = in->nodes.len;
        append(in, &in->nodes, value);
    }
    else if (!strcmp(section, "server") && !strcmp(name, "auth_token"))
        append(in, &in->token, value);
    else if (!strcmp(section, "server") && !strcmp(name, "auth_token_file"))
        append(in, &in->token_file, value);
    return 1;
}

static int ini_token(const char *path, const ini_read *in, psc_servers *out,
                     char *err, size_t errlen)
{
    char why[400];
    if (in->token.s && *in->token.s) {
        size_t n = in->token.len;
        if (n >= sizeof out->token) {
            snprintf(err, errlen, "%s: auth_token is too long (%zu bytes; "
                     "at most %d)", path, n, PSW_AUTH_TOKEN_MAX);
            return PS_EINVAL;
        }
        memcpy(out->token, in->token.s, n + 1);
        out->token_len = n;
        return 0;
    }
    if (in->token_file.s && *in->token_file.s &&
        psw_token_read_file(in->token_file.s, out->token, sizeof out->token,
                            &out->token_len, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s: auth_token_file: %s", path, why);
        return PS_EINVAL;
    }
    return 0;
}

/* Hands inih the file a physical line at a time. inih's own reading cuts
 * a line longer than its buffer into pieces it numbers as lines of their
 * own: an error then named the line after the long one, and a value was
 * cut short. psd and psd --check refuse such a line by its number. */
typedef struct ini_lines {
    FILE *f;
    int line;                    /* physical lines read */
    int too_long;                /* the first line longer than inih takes
                                    (0: none) */
    int control;                 /* the first line holding a control
                                    character psd refuses (0: none) */
    unsigned char control_ch;    /* that character, */
    size_t control_at;           /* at this byte of the line (1-based) */
    int lenient;                 /* read such lines as empty ones rather
                                    than stop there */
    size_t max;                  /* the longest line inih takes */
} ini_lines;

/* Reads at most what inih's buffer takes, as psd does: the rest of a line
 * too long is read past, never held (a file of one endless line would
 * otherwise be read whole into memory). */
static char *next_line(char *out, int size, void *stream)
{
    ini_lines *r = stream;
    if (size < 4)
        return NULL;
    r->max = (size_t)size - 3;   /* the line, its end and inih's NUL */
    size_t n = 0;
    int ch = EOF, over = 0;
    while ((ch = getc(r->f)) != EOF) {
        if (n == (size_t)size - 1) {
            over = 1;
            while (ch != '\n' && (ch = getc(r->f)) != EOF)
                ;
            break;
        }
        out[n++] = (char)ch;
        if (ch == '\n')
            break;
    }
    if (n == 0 && !over)
        return NULL;
    out[n] = '\0';
    r->line++;
    size_t len = n;
    if (len > 0 && out[len - 1] == '\n')
        len--;
    if (len > 0 && out[len - 1] == '\r')
        len--;
    if (over || len > r->max) {
        if (!r->too_long)
            r->too_long = r->line;
        if (!r->lenient)
            return NULL;
        snprintf(out, (size_t)size, "\n");
        return out;
    }
    /* A NUL byte (which would cut the line here), a CR inside it or any
     * other control character but tab, vertical tab and form feed: psd
     * refuses the file, so the client does not read on with the part of
     * the line before it. */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)out[i];
        if ((c < 0x20 && c != '\t' && c != '\v' && c != '\f') || c == 0x7f) {
            if (!r->control) {
                r->control = r->line;
                r->control_ch = c;
                r->control_at = i + 1;
            }
            if (!r->lenient)
                return NULL;
            snprintf(out, (size_t)size, "\n");
            break;
        }
    }
    return out;
}

int psc_servers_parse(const char *servers, int want_token, int lenient,
                      psc_servers *out, char *err, size_t errlen)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    if (!servers || !*servers) {
        snprintf(err, errlen, "no servers given");
        return PS_EINVAL;
    }
    int found = stat(servers, &st) == 0, missing = found ? 0 : errno;
    if (!found || !S_ISREG(st.st_mode)) {
        int rc = parse_list(servers, SIZE_MAX, out, err, errlen);
        /* A path that is no address: most likely an ini path with a
         * typo, which "bad server address" would not say. */
        size_t len = strlen(servers);
        if (rc == PS_EINVAL && !strchr(servers, ',') &&
            (strchr(servers, '/') ||
             (len > 4 && !strcmp(servers + len - 4, ".ini"))))
            snprintf(err, errlen, "cannot open the ini file \"%s\": %s "
                     "(ps_open takes an ini file or host:port,...)", servers,
                     found ? "not a regular file" : strerror(missing));
        return rc;
    }
    out->from_ini = 1;
    ini_read in = { .nodes_first = SIZE_MAX };
    ini_lines lines = { .f = fopen(servers, "r"), .lenient = lenient };
    int rc = lines.f ? ini_parse_stream(next_line, &lines, on_ini, &in) : -1;
    if (lines.f)
        fclose(lines.f);
    /* inih goes on past a bad line: the first error is the one named,
     * as psd names it. */
    if (rc > 0 && lines.too_long && rc < lines.too_long)
        lines.too_long = 0;
    if (rc > 0 && lines.control && rc < lines.control)
        lines.control = 0;
    if (rc == -2 || in.oom) {
        snprintf(err, errlen, "%s: out of memory reading it", servers);
        rc = PS_ENOMEM;
    } else if (lines.too_long && !lenient) {
        snprintf(err, errlen, "%s:%d: line too long (max %zu bytes); psd "
                 "--check -c %s says more", servers, lines.too_long,
                 lines.max, servers);
        rc = PS_EINVAL;
    } else if (lines.control && !lenient) {
        snprintf(err, errlen, "%s:%d: unexpected %s (byte %zu of the "
                 "line); psd --check -c %s says more", servers,
                 lines.control,
                 lines.control_ch == 0      ? "NUL byte"
                 : lines.control_ch == '\r' ? "carriage return (CR)"
                                            : "control character",
                 lines.control_at, servers);
        rc = PS_EINVAL;
    } else if (rc > 0 && !lenient) {
        /* A line psd refuses to start with: read past, the client would
         * go on with a cluster the file may not describe. */
        snprintf(err, errlen, "%s:%d: not an ini line (\"key = value\" "
                 "or \"[section]\"); psd --check -c %s says more",
                 servers, rc, servers);
        rc = PS_EINVAL;
    } else if (rc < 0 || !in.nodes.s) {
        snprintf(err, errlen, "%s: %s", servers,
                 rc < 0 ? "cannot read the file" : "no [cluster] nodes line");
        rc = PS_EINVAL;
    } else {
        char why[600];
        rc = parse_list(in.nodes.s, in.nodes_first, out, why, sizeof why);
        if (rc == PS_EINVAL)     /* which file said it */
            snprintf(err, errlen, "%s: [cluster] nodes: %s", servers, why);
        if (rc == 0 && want_token)
            rc = ini_token(servers, &in, out, err, errlen);
        if (rc) {
            free(out->seeds);
            out->seeds = NULL;
        }
    }
    if (in.token.s)
        psw_wipe(in.token.s, in.token.len);
    free(in.nodes.s);
    free(in.token.s);
    free(in.token_file.s);
    return rc;
}
