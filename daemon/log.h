/* One-line log records on stderr: time, node, level, message. */
#ifndef PSD_LOG_H
#define PSD_LOG_H

#include "config.h"

void psd_log_init(int node, psd_log_level level);
void psd_log_set_level(psd_log_level level);
void psd_log(psd_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define psd_debug(...) psd_log(PSD_LOG_DEBUG, __VA_ARGS__)
#define psd_info(...) psd_log(PSD_LOG_INFO, __VA_ARGS__)
#define psd_warn(...) psd_log(PSD_LOG_WARN, __VA_ARGS__)
#define psd_error(...) psd_log(PSD_LOG_ERROR, __VA_ARGS__)

#endif
