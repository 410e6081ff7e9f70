/* An LD_PRELOAD shim for test_conn: makes psd's allocation of a newly
 * accepted connection fail, as it would when psd is out of memory, for
 * every connection from the IPv4 address in PSD_TEST_ACCEPT_OOM_FROM (a
 * test connects from 127.0.0.x to choose). It fails the first calloc a
 * thread makes after accept4 returned such a connection: libuv accepts
 * with accept4, and psd's accept callback allocates the connection
 * first. PSD_TEST_ACCEPT_OOM_DELAY_MS=ms makes the first failure take
 * that long, so that more connections queue meanwhile and psd takes them
 * in the same loop turn. Does nothing in a process built with
 * AddressSanitizer, whose allocator does not go through this calloc. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

/* glibc's own calloc: calling it needs no dlsym, which allocates. */
void *__libc_calloc(size_t n, size_t size);

static __thread int armed;
static int failed;

/* Whether fd's peer is the address in PSD_TEST_ACCEPT_OOM_FROM. */
static int from_target(int fd)
{
    const char *want = getenv("PSD_TEST_ACCEPT_OOM_FROM");
    struct in_addr a;
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    return want && inet_pton(AF_INET, want, &a) == 1 &&
           getpeername(fd, (struct sockaddr *)&sa, &len) == 0 &&
           sa.sin_family == AF_INET && sa.sin_addr.s_addr == a.s_addr;
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
    static int (*next)(int, struct sockaddr *, socklen_t *, int);
    if (!next)
        next = (int (*)(int, struct sockaddr *, socklen_t *, int))
            dlsym(RTLD_NEXT, "accept4");
    int r = next(fd, sa, len, flags);
    if (r >= 0)
        armed = from_target(r);
    return r;
}

void *calloc(size_t n, size_t size)
{
    if (armed) {
        armed = 0;
        const char *d = getenv("PSD_TEST_ACCEPT_OOM_DELAY_MS");
        int ms = d ? atoi(d) : 0;
        if (!failed++ && ms > 0) {
            struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
        }
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(n, size);
}
