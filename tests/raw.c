/* The protocol over a plain socket; see raw.h. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <cmocka.h>

#include "raw.h"
#include "expect.h"

int raw_connect_from(int port, const char *from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (from) {
        struct sockaddr_in s = { .sin_family = AF_INET };
        inet_pton(AF_INET, from, &s.sin_addr);
        if (bind(fd, (struct sockaddr *)&s, sizeof s))
            fail_msg("bind %s: %s", from, strerror(errno));
    }
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        fail_msg("connect: %s", strerror(errno));
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

int raw_connect(int port)
{
    return raw_connect_from(port, NULL);
}

void raw_send(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        b += k;
        n -= (size_t)k;
    }
}

void raw_send_out(int fd, const psw_out *o)
{
    size_t cnt = psw_out_iovcnt(o);
    struct iovec *iov = calloc(cnt ? cnt : 1, sizeof *iov);
    assert_non_null(iov);
    psw_out_iov(o, iov);
    for (size_t i = 0; i < cnt; i++)
        raw_send(fd, iov[i].iov_base, iov[i].iov_len);
    free(iov);
}

char *raw_read_frame(int fd, size_t *len)
{
    unsigned char h[4];
    size_t got = 0;
    while (got < 4) {
        ssize_t k = recv(fd, h + got, 4 - got, 0);
        if (k <= 0)
            return NULL;
        got += (size_t)k;
    }
    size_t flen = (size_t)h[0] << 24 | (size_t)h[1] << 16 |
                  (size_t)h[2] << 8 | h[3];
    assert_true(flen > PSW_FRAME_CRC);
    char *b = malloc(flen);
    assert_non_null(b);
    for (got = 0; got < flen;) {
        ssize_t k = recv(fd, b + got, flen - got, 0);
        if (k <= 0) {
            free(b);
            return NULL;
        }
        got += (size_t)k;
    }
    *len = flen - PSW_FRAME_CRC;
    const unsigned char *t = (const unsigned char *)b + *len;
    uint32_t want = (uint32_t)t[0] << 24 | (uint32_t)t[1] << 16 |
                    (uint32_t)t[2] << 8 | t[3];
    EXPECT_U64(psw_crc32c(0, b, *len), want, "CRC of a frame from psd");
    return b;
}

int raw_closed(int fd)
{
    char b[256];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            return 1;
        if (k < 0)
            return 0;            /* timed out: still open */
    }
}

int raw_hello_as(int fd, uint64_t id, uint64_t incarnation)
{
    return raw_hello_worker(fd, id, incarnation, -1);
}

int raw_hello_worker(int fd, uint64_t id, uint64_t incarnation,
                     int32_t worker)
{
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_hello h = { .version = PSW_VERSION, .client_id = id,
                    .incarnation = incarnation, .worker = worker };
    psw_pack_hello(&o, &h);
    psw_out_frame_end(&o);
    raw_send_out(fd, &o);
    psw_out_destroy(&o);
    size_t len;
    char *f = raw_read_frame(fd, &len);
    if (!f)
        return -100;
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    msgpack_object obj;
    const msgpack_object *msgs;
    char err[128];
    int status = -100;
    psw_cluster l;
    if (psw_frame_decode(f, len, &z, &obj, err, sizeof err) == 0 &&
        psw_frame_messages(&obj, 1, &msgs, err, sizeof err) == 1 &&
        psw_hello_ok_decode(&msgs[0], &l, err, sizeof err) == 0) {
        status = l.status;
        psw_cluster_free(&l);
    }
    msgpack_zone_destroy(&z);
    free(f);
    return status;
}

char *raw_frame_bytes(const psw_msg *m, int n, size_t *len)
{
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    for (int i = 0; i < n; i++)
        psw_pack_request(&o, &m[i]);
    psw_out_frame_end(&o);
    assert_false(o.oom);
    size_t cnt = psw_out_iovcnt(&o);
    struct iovec *iov = calloc(cnt, sizeof *iov);
    psw_out_iov(&o, iov);
    char *b = malloc(o.total), *p = b;
    for (size_t i = 0; i < cnt; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    *len = o.total;
    free(iov);
    psw_out_destroy(&o);
    return b;
}

void raw_send_msgs(int fd, const psw_msg *m, int n)
{
    size_t len;
    char *b = raw_frame_bytes(m, n, &len);
    raw_send(fd, b, len);
    free(b);
}

/* GET /metrics from 127.0.0.1:port: the value of `name{node="0"}`, or -1
 * (no answer, or no such line). */
double raw_node_metric(int port, const char *name)
{
    int fd = raw_connect(port);
    const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    raw_send(fd, req, strlen(req));
    size_t cap = 1 << 20, len = 0;
    char *out = malloc(cap);
    ssize_t k;
    while (out && len + 1 < cap && (k = recv(fd, out + len, cap - 1 - len,
                                             0)) > 0)
        len += (size_t)k;
    close(fd);
    double v = -1;
    if (!out)
        return v;
    out[len] = '\0';
    char want[128];
    snprintf(want, sizeof want, "\n%s{node=\"0\"} ", name);
    const char *at = strstr(out, want);
    if (at)
        v = strtod(at + strlen(want), NULL);
    free(out);
    return v;
}
