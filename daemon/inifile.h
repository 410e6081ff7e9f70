/* A strict reader of ini files around inih: sections, `key = value`
 * lines, indented continuation lines and comments, with every problem
 * reported as "PATH:LINE: reason". Unlike inih alone it refuses overlong
 * lines and NUL bytes instead of splitting or cutting them, and parses
 * section headers itself (no silent cut of long names). It knows nothing
 * of psd's settings: config.c gives meaning to what it collects.
 * (Named inifile, not ini, so it never shadows inih's <ini.h>.) */
#ifndef PSD_INIFILE_H
#define PSD_INIFILE_H

#include <stddef.h>

#define PSD_INI_SECTION_MAX 80   /* longest section name + 1 */
/* Sections a file may hold: each new one is checked against the others,
 * so a file of 100,000 took seconds (and a reload stalled psd's loop). */
#define PSD_INI_SECTIONS_MAX 8192

/* One `key = value` line, with any continuation lines joined to it by a
 * single space. */
typedef struct psd_ini_entry {
    char *key;
    char *value;
    int line;            /* line of the key */
    int cont_line;       /* first continuation line, or 0 */
    size_t first_len;    /* with one: the bytes of value from the key's
                            own line */
    size_t len, cap;     /* value's length, and the bytes it has
                            (psw_append_wiped joins its lines) */
} psd_ini_entry;

typedef struct psd_ini_section {
    char name[PSD_INI_SECTION_MAX];
    int line;            /* line of the header */
    psd_ini_entry *entries;
    int nentries, cap;
} psd_ini_section;

/* Decides whether a section name is allowed: returns 0, or -1 after
 * writing the reason (for example "unknown section [x] (expected ...)")
 * to why. name is not NUL-terminated: n bytes. */
typedef int (*psd_ini_name_check)(const char *name, size_t n, char *why,
                                  size_t whylen);

/* A file read whole. A line that does not parse is an error, and the read
 * goes on past it (and past the keys of a section whose header failed),
 * so that a file with several mistakes is fixed in one pass: the errors
 * are kept one per line, up to PSD_INI_MAX_ERRORS. Only a line too long,
 * a control character (a binary file), a read error, too many sections
 * or running out of memory stop the read (`stopped`): what follows is
 * not read. A caller that then interprets the entries adds its errors
 * the same way (psd_ini_fail). */
#define PSD_INI_MAX_ERRORS 20
/* Errors looked for, and kept, before the first PSD_INI_MAX_ERRORS by
 * line are shown: past these the rest of a file is not read (a file of
 * 100,000 bad keys took 15 s to check them all). */
#define PSD_INI_FIND_ERRORS 200
typedef struct psd_ini {
    const char *path;    /* borrowed from the caller of psd_ini_read */
    psd_ini_section *secs;
    int nsecs, cap;
    int failed;          /* errors recorded */
    int stopped;         /* the read ended before the end of the file */
    int read_failed;     /* errors of the read itself (bad lines and
                            headers), before the caller's */
    struct psd_ini_error {
        int line;        /* 0: of the whole file */
        char *text;      /* "PATH[:LINE]: reason", owned */
    } *errs;             /* the first PSD_INI_FIND_ERRORS, by line */
    int nerrs;
    char *err;           /* the caller's error buffer */
    size_t errlen;
} psd_ini;

/* Reads the file at path into ini (which the call initialises; path and
 * err must outlive ini). Duplicate sections are errors. Returns 0, or -1
 * with "PATH:LINE: reason" (or "PATH: reason") in err; free ini with
 * psd_ini_free either way. */
int psd_ini_read(psd_ini *ini, const char *path, psd_ini_name_check check,
                 char *err, size_t errlen);
void psd_ini_free(psd_ini *ini);

/* The first entry of section s with this key, or NULL. */
const psd_ini_entry *psd_ini_find(const psd_ini_section *s, const char *key);

/* Whether the n bytes at w may be echoed in an error as a key: under 8
 * bytes, or like psd's keys (lower-case letters, digits and '_', at most
 * 32 bytes, with an '_' when 16 or more: a hex token has none). A line
 * that is not a setting may be the token itself (`base64 >> psd.ini`,
 * its key cut at a '=' or ':'), and errors go to the log and, after a
 * SIGHUP, to /metrics, which needs no token. */
int psd_ini_key_like(const char *w, size_t n);

/* Records an error found by the caller while interpreting ini, in the
 * same form: kept in the order of the lines with the read's, each on a
 * line of its own in the caller's buffer. line 0: no line. */
void psd_ini_fail(psd_ini *ini, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));


#endif
