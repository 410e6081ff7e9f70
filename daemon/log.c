/* Logging for psd: stderr (journald adds its own metadata under systemd),
 * one line per record so lines from several nodes interleave cleanly. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "log.h"

static int log_node;
static psd_log_level log_level = PSD_LOG_INFO;

void psd_log_init(int node, psd_log_level level)
{
    log_node = node;
    log_level = level;
}

void psd_log_set_level(psd_log_level level)
{
    log_level = level;
}

void psd_log(psd_log_level level, const char *fmt, ...)
{
    static const char *names[] = { "debug", "info", "warn", "error" };
    if (level < log_level)
        return;
    struct timespec ts;
    struct tm tm;
    char when[32], line[1024];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per record: stderr is unbuffered, so this keeps a
     * record in one write. */
    fprintf(stderr, "%s.%03ldZ psd[%d] %s: %s\n", when, ts.tv_nsec / 1000000,
            log_node, names[level], line);
}
