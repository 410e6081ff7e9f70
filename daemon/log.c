/* Logging for psd: stderr (journald adds its own metadata under systemd),
 * one line per record so lines from several nodes interleave cleanly;
 * repeated messages collapse into a count (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int log_node;
static psd_log_level log_level = PSD_LOG_INFO;

/* Whether stderr is systemd's journal stream ($JOURNAL_STREAM names its
 * device and inode): then each line starts with its syslog priority,
 * "<3>" for an error, which journald takes off and keeps as the
 * record's priority (journalctl -p warning found nothing: every line
 * came in at info). -1: not looked at yet. */
static int to_journal = -1;

static int journal_stream(void)
{
    if (to_journal >= 0)
        return to_journal;
    to_journal = 0;
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 &&
        fstat(STDERR_FILENO, &st) == 0 &&
        (unsigned long long)st.st_dev == dev &&
        (unsigned long long)st.st_ino == ino)
        to_journal = 1;
    return to_journal;
}

const char *psd_log_prefix(psd_log_level level)
{
    static const char *const prio[] = { "<7>", "<6>", "<4>", "<3>" };
    return journal_stream() ? prio[level] : "";
}

void psd_log_init(int node, psd_log_level level)
{
    log_node = node;
    log_level = level;
}

void psd_log_set_level(psd_log_level level)
{
    log_level = level;
}

static void log_line(psd_log_level level, const char *line)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    struct timespec ts;
    struct tm tm;
    char when[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per record: stderr is unbuffered, so this keeps a
     * record in one write. */
    fprintf(stderr, "%s%s.%03ldZ psd[%d] %s: %s\n", psd_log_prefix(level),
            when, ts.tv_nsec / 1000000, log_node, names[level], line);
}

void psd_log(psd_log_level level, const char *fmt, ...)
{
    if (level < log_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    log_line(level, line);
}

/* ---- collapsing --------------------------------------------------------- */

/* A message's bytes kept for its count: at 160, "... max_client_memory
 * is 1048576" was quoted as "... is 1048", read as 1048 bytes. */
#define REP_TEXT 320

/* One kind of message and its window. */
typedef struct rep {
    char key[REP_TEXT];          /* the text, digit runs as one '#' */
    char first[REP_TEXT];        /* the message logged, for the count */
    char last[REP_TEXT];         /* the last one counted: its own peer */
    uint64_t start_ms;           /* the window's start */
    unsigned long more;          /* alike messages counted in it */
    psd_log_level level;
    int open;
} rep;

static rep reps[PSD_LOGREP_KINDS];

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether c is part of an address's number: a digit, or, within the
 * brackets of an IPv6 address ("[fe80::1]:7070"), a hex digit, ':' or
 * '.' (with digits alone, every IPv6 peer was a kind of its own, and a
 * flood from many of them a line each). */
static int number_char(char c, int in_brackets)
{
    return (c >= '0' && c <= '9') ||
           (in_brackets && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
                            c == ':' || c == '.'));
}

/* What alike messages share: the text with each run of an address's
 * number characters as '#'. */
static void rep_key(const char *line, char *key, size_t cap)
{
    size_t k = 0;
    int in = 0;
    for (const char *p = line; *p && k + 1 < cap; p++) {
        if (number_char(*p, in)) {
            if (k == 0 || key[k - 1] != '#')
                key[k++] = '#';
        } else
            key[k++] = *p;
        in = *p == '[' ? 1 : *p == ']' ? 0 : in;
    }
    key[k] = '\0';
}

static void copy_text(char *dst, const char *src, size_t cap)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Logs the count of r's window (if any was counted) and closes it. */
static void rep_close(rep *r, uint64_t now_ms)
{
    if (r->more > 0 && r->level >= log_level) {
        char line[2 * REP_TEXT + 96];
        uint64_t secs = (now_ms - r->start_ms + 500) / 1000;
        /* The first names one peer (or port): the last says another,
         * so that the line does not read as if the first were all. */
        snprintf(line, sizeof line, "... and %lu more like \"%s\" in %llu s"
                 "%s%s%s", r->more, r->first,
                 (unsigned long long)(secs ? secs : 1),
                 strcmp(r->last, r->first) ? " (the last: \"" : "",
                 strcmp(r->last, r->first) ? r->last : "",
                 strcmp(r->last, r->first) ? "\")" : "");
        log_line(r->level, line);
    }
    r->open = 0;
    r->more = 0;
}

__attribute__((format(printf, 3, 0)))
static void rep_vlog(uint64_t now_ms, psd_log_level level, const char *fmt,
                     va_list ap)
{
    char line[1024], key[REP_TEXT];
    vsnprintf(line, sizeof line, fmt, ap);
    rep_key(line, key, sizeof key);
    rep *r = NULL, *slot = NULL;
    for (int i = 0; i < PSD_LOGREP_KINDS; i++) {
        rep *x = &reps[i];
        if (x->open && strcmp(x->key, key) == 0) {
            r = x;
            break;
        }
        /* Where a new kind goes: a free slot, else the oldest window. */
        if (!slot || (slot->open && (!x->open || x->start_ms < slot->start_ms)))
            slot = x;
    }
    if (r && now_ms - r->start_ms < PSD_LOGREP_WINDOW_MS) {
        r->more++;
        copy_text(r->last, line, sizeof r->last);
        return;
    }
    if (!r)
        r = slot;
    if (r->open)
        rep_close(r, now_ms);
    r->open = 1;
    r->start_ms = now_ms;
    r->level = level;
    copy_text(r->key, key, sizeof r->key);
    copy_text(r->first, line, sizeof r->first);
    if (level >= log_level)
        log_line(level, line);
}

void psd_log_rep(psd_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rep_vlog(mono_ms(), level, fmt, ap);
    va_end(ap);
}

void psd_log_rep_at(uint64_t now_ms, psd_log_level level, const char *fmt,
                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    rep_vlog(now_ms, level, fmt, ap);
    va_end(ap);
}

void psd_log_flush_at(uint64_t now_ms)
{
    for (int i = 0; i < PSD_LOGREP_KINDS; i++)
        if (reps[i].open && now_ms - reps[i].start_ms >= PSD_LOGREP_WINDOW_MS)
            rep_close(&reps[i], now_ms);
}

void psd_log_flush(void)
{
    psd_log_flush_at(mono_ms());
}

void psd_log_flush_all(void)
{
    uint64_t now = mono_ms();
    for (int i = 0; i < PSD_LOGREP_KINDS; i++)
        if (reps[i].open)
            rep_close(&reps[i], now);
}
