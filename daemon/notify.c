/* systemd's notify protocol; see notify.h. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

void psd_notify(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t n = path ? strlen(path) : 0;
    /* A path, or '@' for a name in the abstract namespace. */
    if (n < 2 || n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@'))
        return;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    char msg[1100];              /* STATUS= and psd_server_status's line */
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (len < 0)
        return;
    if ((size_t)len >= sizeof msg)
        len = sizeof msg - 1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    while (sendto(fd, msg, (size_t)len, MSG_NOSIGNAL,
                  (const struct sockaddr *)&sa, salen) < 0 && errno == EINTR)
        ;
    close(fd);
}

uint64_t psd_notify_watchdog_usec(void)
{
    const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!us || (pid && strtol(pid, NULL, 10) != (long)getpid()))
        return 0;
    char *end;
    unsigned long long v = strtoull(us, &end, 10);
    return *us && !*end ? (uint64_t)v : 0;
}
