/* One-line log records on stderr: time, node, level, message; and
 * collapsing of warnings that can come in floods (refused connections,
 * failed authentication): the first of a burst is logged, the rest are
 * counted and summed up in one line. */
#ifndef PSD_LOG_H
#define PSD_LOG_H

#include <stdint.h>

#include "config.h"

void psd_log_init(int node, psd_log_level level);
void psd_log_set_level(psd_log_level level);
/* "<N>", the syslog priority of level, when stderr is systemd's journal
 * (journald keeps it as the line's priority), else "": for lines written
 * to stderr by hand, such as psd's fatal "psd: ..." ones. */
const char *psd_log_prefix(psd_log_level level);
void psd_log(psd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define psd_debug(...) psd_log(PSD_LOG_DEBUG, __VA_ARGS__)
#define psd_info(...) psd_log(PSD_LOG_INFO, __VA_ARGS__)
#define psd_warn(...) psd_log(PSD_LOG_WARN, __VA_ARGS__)
#define psd_error(...) psd_log(PSD_LOG_ERROR, __VA_ARGS__)

/* ---- collapsing repeated messages ---------------------------------------
 * For messages that can come in floods (refused connections, failed
 * authentication, broken frames):
 *
 *     psd_warn_rep("refusing %s: %s", peer, why);
 *
 * Messages are alike when their texts are equal with every run of digits
 * taken as the same (so the same refusal from other peers and ports is
 * alike, and a different reason is not). The first of a kind is logged
 * at once and opens a window of PSD_LOGREP_WINDOW_MS; the alike ones that
 * follow inside the window are only counted. When the window has ended,
 * the next alike message, or psd_log_flush (call it from a periodic
 * timer), logs one line
 *     ... and 976 more like "refusing 127.0.0.1:4711: ..." in 10 s
 *         (the last: "refusing 127.0.0.1:5902: ...")
 * and the next one is logged again. So a flood costs two lines per window,
 * a lone message one line, and no count is lost (up to PSD_LOGREP_KINDS
 * kinds at once; a new kind beyond that ends the oldest window early). */
#define PSD_LOGREP_WINDOW_MS 10000
#define PSD_LOGREP_KINDS 64

void psd_log_rep(psd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define psd_warn_rep(...) psd_log_rep(PSD_LOG_WARN, __VA_ARGS__)

/* Logs the count of every kind whose window has ended with messages
 * counted, and closes those windows. Cheap when there is none. */
void psd_log_flush(void);

/* Logs the count of every kind with messages counted, whether or not
 * its window has ended, and closes every window: for a process about to
 * end, whose counts would otherwise be lost. */
void psd_log_flush_all(void);

/* The same two with the time given (milliseconds on any monotonic
 * clock), for tests. */
void psd_log_rep_at(uint64_t now_ms, psd_log_level level, const char *fmt,
                    ...)
    __attribute__((format(printf, 3, 4)));
void psd_log_flush_at(uint64_t now_ms);

#endif
