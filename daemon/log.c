/* Logging for psd: stderr (journald adds its own metadata under systemd),
 * one line per record so lines from several nodes interleave cleanly;
 * repeated messages collapse into a count (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static int log_node;
static psd_log_level log_level = PSD_LOG_INFO;
static psd_logrep *reps;         /* every psd_logrep used so far */

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
    fprintf(stderr, "%s.%03ldZ psd[%d] %s: %s\n", when, ts.tv_nsec / 1000000,
            log_node, names[level], line);
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

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Logs the count of r's window, which has ended, and closes it. */
static void rep_close(psd_logrep *r, uint64_t now_ms)
{
    if (r->more > 0 && r->level >= log_level) {
        char line[PSD_LOGREP_TEXT + 96];
        uint64_t secs = (now_ms - r->start_ms + 500) / 1000;
        snprintf(line, sizeof line, "... and %lu more like \"%s\" in %llu s",
                 r->more, r->first, (unsigned long long)(secs ? secs : 1));
        log_line(r->level, line);
    }
    r->open = 0;
    r->more = 0;
}

static void rep_vlog(psd_logrep *r, uint64_t now_ms, psd_log_level level,
                     const char *fmt, va_list ap)
{
    if (!r->registered) {
        r->registered = 1;
        r->next = reps;
        reps = r;
    }
    if (r->open && now_ms - r->start_ms < PSD_LOGREP_WINDOW_MS) {
        r->more++;
        return;
    }
    if (r->open)
        rep_close(r, now_ms);
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    r->open = 1;
    r->start_ms = now_ms;
    r->level = level;
    size_t n = strlen(line);
    if (n >= sizeof r->first)
        n = sizeof r->first - 1;
    memcpy(r->first, line, n);
    r->first[n] = '\0';
    if (level >= log_level)
        log_line(level, line);
}

void psd_log_rep(psd_logrep *r, psd_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rep_vlog(r, mono_ms(), level, fmt, ap);
    va_end(ap);
}

void psd_log_rep_at(psd_logrep *r, uint64_t now_ms, psd_log_level level,
                    const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rep_vlog(r, now_ms, level, fmt, ap);
    va_end(ap);
}

void psd_log_flush_at(uint64_t now_ms)
{
    for (psd_logrep *r = reps; r; r = r->next)
        if (r->open && now_ms - r->start_ms >= PSD_LOGREP_WINDOW_MS)
            rep_close(r, now_ms);
}

void psd_log_flush(void)
{
    psd_log_flush_at(mono_ms());
}
