/* Telling the service manager how psd is doing: systemd's notify protocol
 * (sd_notify(3)), one datagram per message to the unix socket named by
 * $NOTIFY_SOCKET: READY=1 once the node is restored and listening,
 * STATUS= while it loads, RELOADING=1 / READY=1 around a SIGHUP reload,
 * STOPPING=1 at stop, WATCHDOG=1 from a loop timer when $WATCHDOG_USEC
 * asks for it. Without $NOTIFY_SOCKET every call does nothing.
 *
 * Written here (about forty lines) rather than linked from libsystemd:
 * the protocol is a documented, stable datagram format, and psd then runs
 * the same in containers and on hosts without libsystemd. */
#ifndef PSD_NOTIFY_H
#define PSD_NOTIFY_H

#include <stdint.h>

/* Sends one message ("READY=1", "STATUS=loading", lines joined by '\n').
 * printf-style. Failures are ignored: a service manager that went away
 * must not stop psd. */
void psd_notify(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* The watchdog period asked for, in microseconds, or 0: $WATCHDOG_USEC
 * when set and $WATCHDOG_PID is unset or this process. */
uint64_t psd_notify_watchdog_usec(void);

#endif
