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
void psd_log(psd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define psd_debug(...) psd_log(PSD_LOG_DEBUG, __VA_ARGS__)
#define psd_info(...) psd_log(PSD_LOG_INFO, __VA_ARGS__)
#define psd_warn(...) psd_log(PSD_LOG_WARN, __VA_ARGS__)
#define psd_error(...) psd_log(PSD_LOG_ERROR, __VA_ARGS__)

/* ---- collapsing repeated messages ---------------------------------------
 * One psd_logrep per kind of message that may repeat, in static storage
 * (it registers itself on first use and must live as long as the
 * process):
 *
 *     static psd_logrep refused = PSD_LOGREP_INIT;
 *     psd_log_rep(&refused, PSD_LOG_WARN, "refusing %s: %s", peer, why);
 *
 * The first message of a kind is logged at once and opens a window of
 * PSD_LOGREP_WINDOW_MS; the ones that follow inside the window are only
 * counted. When the window has ended, the next message of that kind, or
 * psd_log_flush (call it from a periodic timer), logs one line
 *     ... and 976 more like "refusing 127.0.0.1:4711: ..." in 10 s
 * and the next message is logged again. So a flood costs two lines per
 * window, a single message one line, and no count is ever lost. */
#define PSD_LOGREP_WINDOW_MS 10000
#define PSD_LOGREP_TEXT 160

typedef struct psd_logrep {
    uint64_t start_ms;           /* monotonic start of the open window */
    unsigned long more;          /* messages counted, not logged, in it */
    int open;                    /* a window is open */
    int registered;              /* on the list psd_log_flush walks */
    psd_log_level level;         /* of the messages, for the summary */
    char first[PSD_LOGREP_TEXT]; /* the logged message, for the summary */
    struct psd_logrep *next;
} psd_logrep;

#define PSD_LOGREP_INIT { 0, 0, 0, 0, PSD_LOG_DEBUG, "", 0 }

/* Logs (or counts) one message of r's kind; see above. */
void psd_log_rep(psd_logrep *r, psd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs the summary line of every kind whose window has ended with
 * messages counted, and closes those windows. Cheap when there is none. */
void psd_log_flush(void);

/* The same two with the time given (milliseconds on any monotonic
 * clock), for tests. */
void psd_log_rep_at(psd_logrep *r, uint64_t now_ms, psd_log_level level,
                    const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void psd_log_flush_at(uint64_t now_ms);

#endif
