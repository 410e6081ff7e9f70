/* Tests of the fault-injection proxy (tests/faultproxy.h) against a small
 * frame echo server on a thread of this process, with plain sockets on
 * the client side: no psd and no client library involved. */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "expect.h"
#include "faultproxy.h"

#define IO_TIMEOUT_S 5        /* every read and write of a test */
#define TEST_TIMEOUT_S 60     /* a whole test, whatever happens */
#define WAIT_MS 5000          /* polling for a counter */
#define SRV_MAX_FRAME (1u << 20)
#define SRV_CONNS 16

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Polls cond every millisecond for up to WAIT_MS; fails the test if it
 * never holds. */
#define WAIT_FOR(cond, what)                                               \
    do {                                                                   \
        int ok_ = 0;                                                       \
        for (int t_ = 0; t_ < WAIT_MS && !(ok_ = (cond)); t_++)            \
            sleep_ms(1);                                                   \
        if (!ok_)                                                          \
            fail_msg("timed out after %d ms waiting for %s", WAIT_MS,      \
                     what);                                                \
    } while (0)

/* ---- the frame echo server ------------------------------------------ */

/* Echoes every complete frame back whole; a length above SRV_MAX_FRAME
 * makes it echo raw bytes from there on. On accept it first sends
 * `greet` frames of its own ("greet 0", "greet 1", ...). */
typedef struct echo_conn {
    int fd;
    char *buf;
    size_t len, cap;
    int raw;
} echo_conn;

typedef struct echo_srv {
    int lfd, port, wake[2], greet;
    pthread_t th;
    pthread_mutex_t mu;          /* guards the counters */
    unsigned frames, accepted, eofs, resets;
    echo_conn c[SRV_CONNS];
} echo_srv;

static unsigned srv_count(echo_srv *s, const unsigned *field)
{
    pthread_mutex_lock(&s->mu);
    unsigned v = *field;
    pthread_mutex_unlock(&s->mu);
    return v;
}

#define SRV(s, field) srv_count((s), &(s)->field)

static void srv_bump(echo_srv *s, unsigned *field)
{
    pthread_mutex_lock(&s->mu);
    (*field)++;
    pthread_mutex_unlock(&s->mu);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static void put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static uint32_t get_be32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
           (uint32_t)u[2] << 8 | u[3];
}

static void srv_drop(echo_srv *s, echo_conn *c, int reset)
{
    srv_bump(s, reset ? &s->resets : &s->eofs);
    close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Echoes what is complete in c's buffer; returns -1 if the peer is gone. */
static int srv_echo(echo_srv *s, echo_conn *c)
{
    size_t at = 0;
    while (!c->raw && c->len - at >= 4) {
        uint32_t l = get_be32(c->buf + at);
        if (l > SRV_MAX_FRAME) {
            c->raw = 1;
            break;
        }
        if (c->len - at < 4 + (size_t)l)
            break;
        /* Counted before its echo: a client that has read the echo may
         * read the count at once (seen once: 5 of 6 under load). */
        srv_bump(s, &s->frames);
        if (write_all(c->fd, c->buf + at, 4 + (size_t)l))
            return -1;
        at += 4 + l;
    }
    if (c->raw) {
        if (write_all(c->fd, c->buf + at, c->len - at))
            return -1;
        at = c->len;
    }
    memmove(c->buf, c->buf + at, c->len - at);
    c->len -= at;
    return 0;
}

static void srv_accept(echo_srv *s)
{
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0)
        return;
    echo_conn *c = NULL;
    for (int i = 0; i < SRV_CONNS && !c; i++)
        if (s->c[i].fd < 0)
            c = &s->c[i];
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    srv_bump(s, &s->accepted);
    for (int i = 0; i < s->greet; i++) {
        char f[32];
        int n = snprintf(f + 4, sizeof f - 4, "greet %d", i);
        put_be32(f, (uint32_t)n);
        write_all(fd, f, 4 + (size_t)n);
    }
}

static void srv_read(echo_srv *s, echo_conn *c)
{
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap ? c->cap * 2 : 131072;
        char *b = realloc(c->buf, cap);
        if (!b) {
            srv_drop(s, c, 1);
            return;
        }
        c->buf = b;
        c->cap = cap;
    }
    ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        srv_drop(s, c, n < 0);
        return;
    }
    c->len += (size_t)n;
    if (srv_echo(s, c))
        srv_drop(s, c, 1);
}

static void *srv_main(void *arg)
{
    echo_srv *s = arg;
    for (;;) {
        struct pollfd pf[2 + SRV_CONNS];
        echo_conn *who[2 + SRV_CONNS];
        int n = 0;
        pf[n++] = (struct pollfd){ .fd = s->wake[0], .events = POLLIN };
        pf[n++] = (struct pollfd){ .fd = s->lfd, .events = POLLIN };
        for (int i = 0; i < SRV_CONNS; i++) {
            if (s->c[i].fd >= 0) {
                who[n] = &s->c[i];
                pf[n++] = (struct pollfd){ .fd = s->c[i].fd, .events = POLLIN };
            }
        }
        if (poll(pf, (nfds_t)n, -1) < 0)
            continue;
        if (pf[0].revents)
            return NULL;
        if (pf[1].revents)
            srv_accept(s);
        for (int i = 2; i < n; i++)
            if (pf[i].revents)
                srv_read(s, who[i]);
    }
}

static int srv_start(echo_srv *s, int greet)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < SRV_CONNS; i++)
        s->c[i].fd = -1;
    s->greet = greet;
    pthread_mutex_init(&s->mu, NULL);
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) ||
        listen(s->lfd, 64) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &len) || pipe(s->wake))
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->th, NULL, srv_main, s) ? -1 : 0;
}

static void srv_stop(echo_srv *s)
{
    if (write(s->wake[1], "x", 1) != 1)
        perror("echo server: wake");
    pthread_join(s->th, NULL);
    for (int i = 0; i < SRV_CONNS; i++) {
        if (s->c[i].fd >= 0)
            close(s->c[i].fd);
        free(s->c[i].buf);
    }
    close(s->lfd);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
}

/* ---- the client side ------------------------------------------------ */

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = { IO_TIMEOUT_S, 0 };
    int one = 1;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a))
        fail_msg("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Reads up to n bytes, stopping early only at EOF or an error. Returns
 * the bytes read; *err is 0 when all came or at EOF, else the errno
 * (EAGAIN after IO_TIMEOUT_S without a byte). */
static size_t read_upto(int fd, void *buf, size_t n, int *err)
{
    char *b = buf;
    size_t got = 0;
    *err = 0;
    while (got < n) {
        ssize_t r = recv(fd, b + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            *err = errno;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return got;
}

/* Reads one frame into buf (cap bytes); returns its body length. Fails
 * the test on EOF, an error or a timeout. */
static size_t read_frame(int fd, char *buf, size_t cap)
{
    int err;
    char hdr[4];
    size_t got = read_upto(fd, hdr, 4, &err);
    if (got < 4)
        fail_msg("reading a frame header: got %zu of 4 bytes (%s)", got,
                 err ? strerror(err) : "EOF");
    size_t len = get_be32(hdr);
    if (len > cap)
        fail_msg("frame of %zu bytes: got more than the %zu expected", len,
                 cap);
    got = read_upto(fd, buf, len, &err);
    if (got < len)
        fail_msg("reading a frame body: got %zu of %zu bytes (%s)", got, len,
                 err ? strerror(err) : "EOF");
    return len;
}

/* Fails unless a read ended the way wanted (0 = EOF). */
static void expect_errno(int got, int want, const char *what)
{
    if (got != want)
        fail_msg("%s: got %s, want %s", what, got ? strerror(got) : "EOF",
                 want ? strerror(want) : "EOF");
}

/* Frame seq's body: the sequence number, then bytes derived from it. */
static size_t body_len_of(unsigned seq)
{
    return 8 + (seq * 37) % 120;
}

static void make_body(unsigned seq, char *out, size_t len)
{
    memcpy(out, &seq, 4);
    for (size_t i = 4; i < len; i++)
        out[i] = (char)(seq * 31 + i * 7);
}

/* Checks that body is frame seq's, intact; returns seq. */
static unsigned check_body(const char *body, size_t len)
{
    unsigned seq;
    if (len < 8)
        fail_msg("frame body of %zu bytes: got fewer than 8", len);
    memcpy(&seq, body, 4);
    EXPECT_INT(len, body_len_of(seq), "length of frame %u", seq);
    for (size_t i = 4; i < len; i++)
        EXPECT_INT((unsigned char)body[i], (unsigned char)(seq * 31 + i * 7),
                   "byte %zu of frame %u", i, seq);
    return seq;
}

/* Sends frames first..first+n-1 in one write. */
static void send_frames(int fd, unsigned first, unsigned n)
{
    size_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += 4 + body_len_of(first + i);
    char *buf = malloc(total), *at = buf;
    assert_non_null(buf);
    for (unsigned i = 0; i < n; i++) {
        size_t len = body_len_of(first + i);
        put_be32(at, (uint32_t)len);
        make_body(first + i, at + 4, len);
        at += 4 + len;
    }
    if (write_all(fd, buf, total))
        fail_msg("sending %u frames: %s", n, strerror(errno));
    free(buf);
}

static unsigned read_seq(int fd)
{
    char body[256];
    size_t len = read_frame(fd, body, sizeof body);
    return check_body(body, len);
}

/* Whether nothing at all is waiting to be read on fd right now (so no
 * byte, no EOF, no reset). */
static int nothing_to_read(int fd)
{
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* ---- fixture -------------------------------------------------------- */

typedef struct fixture {
    echo_srv srv;
    fp_proxy *p;
    uint64_t seed;
} fixture;

/* The seed of every proxy; PSD_TEST_SEED replays another one. */
static uint64_t test_seed(void)
{
    const char *s = getenv("PSD_TEST_SEED");
    return s ? strtoull(s, NULL, 0) : 20240611;
}

static fp_dir_counts dir_stats(fp_proxy *p, int dir)
{
    fp_counts n;
    fp_stats(p, &n);
    return n.dir[dir];
}

static fp_counts stats(fp_proxy *p)
{
    fp_counts n;
    fp_stats(p, &n);
    return n;
}

static fp_proxy *start_proxy(int port, uint64_t seed)
{
    char err[256];
    fp_proxy *p = fp_start("127.0.0.1", port, seed, err, sizeof err);
    if (!p)
        fail_msg("fp_start: %s", err);
    printf("# faultproxy seed %llu\n", (unsigned long long)seed);
    fflush(stdout);
    return p;
}

static int setup_greeting(void **state, int greet)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || srv_start(&fx->srv, greet))
        return -1;
    alarm(TEST_TIMEOUT_S);       /* no test may hang the suite */
    fx->seed = test_seed();
    fx->p = start_proxy(fx->srv.port, fx->seed);
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return setup_greeting(state, 0);
}

static int setup_greet3(void **state)
{
    return setup_greeting(state, 3);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    fp_stop(fx->p);
    srv_stop(&fx->srv);
    free(fx);
    alarm(0);
    return 0;
}

/* ---- tests ---------------------------------------------------------- */

static void transparent_mode_delivers_every_frame_byte_identical_in_order(
    void **state)
{
    fixture *fx = *state;
    int fd = connect_to(fp_port(fx->p));
    /* Frames of many sizes, an empty one and one of 300 KB among them,
     * sent in one write so the proxy sees them cut at arbitrary places.
     * About 1 MB in all: less than the proxy queues before it stops
     * reading, so the one-threaded write cannot deadlock. */
    enum { N = 40, BIG = 300000 };
    size_t size[N], total = 0;
    for (int i = 0; i < N; i++) {
        size[i] = i == 7 ? 0 : i == 20 ? BIG : (size_t)i * i * 317 % 40000;
        total += 4 + size[i];
    }
    char *out = malloc(total), *in = malloc(BIG), *at = out;
    assert_true(out && in);
    for (int i = 0; i < N; i++) {
        put_be32(at, (uint32_t)size[i]);
        for (size_t j = 0; j < size[i]; j++)
            at[4 + j] = (char)(i * 13 + j * 3);
        at += 4 + size[i];
    }
    assert_int_equal(write_all(fd, out, total), 0);
    at = out;
    for (int i = 0; i < N; i++) {
        size_t len = read_frame(fd, in, BIG);
        EXPECT_INT(len, size[i], "length of frame %d", i);
        EXPECT_INT(memcmp(in, at + 4, len), 0, "body of frame %d differs",
                   i);
        at += 4 + size[i];
    }
    fp_dir_counts up = dir_stats(fx->p, FP_UP);
    EXPECT_U64(up.frames, N, "frames up");
    EXPECT_U64(up.forwarded, N, "frames forwarded up");
    EXPECT_U64(up.bytes_out, total, "bytes forwarded up");
    EXPECT_U64(dir_stats(fx->p, FP_DOWN).bytes_out, total,
               "bytes forwarded down");
    free(out);
    free(in);
    close(fd);
}

static void drop_all_up_delivers_nothing_while_down_still_works(
    void **state)
{
    fixture *fx = *state;           /* the server greets with 3 frames */
    fp_faults f = { .drop = 1.0 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    for (int i = 0; i < 3; i++) {
        char body[64], want[32];
        size_t len = read_frame(fd, body, sizeof body - 1);
        body[len] = '\0';
        snprintf(want, sizeof want, "greet %d", i);
        EXPECT_STR(body, want, "greeting %d down", i);
    }
    send_frames(fd, 0, 10);
    WAIT_FOR(dir_stats(fx->p, FP_UP).dropped == 10, "10 frames dropped up");
    EXPECT_INT(SRV(&fx->srv, frames), 0, "frames the server got");
    EXPECT_INT(nothing_to_read(fd), 1, "nothing came back");
    /* Whole frames were dropped, so the stream is still in sync. */
    fp_faults none = { 0 };
    fp_set(fx->p, FP_UP, &none);
    send_frames(fd, 10, 1);
    EXPECT_INT(read_seq(fd), 10, "the frame sent after the drops");
    close(fd);
}

static void drop_20_percent_of_2000_frames_keeps_the_rest_intact_in_order(
    void **state)
{
    fixture *fx = *state;
    enum { N = 2000 };
    fp_faults f = { .drop = 0.2 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, N);
    WAIT_FOR(dir_stats(fx->p, FP_UP).frames == N, "2000 frames up");
    fp_dir_counts up = dir_stats(fx->p, FP_UP);
    unsigned delivered = N - (unsigned)up.dropped;
    printf("# dropped %llu of %d frames with seed %llu\n",
           (unsigned long long)up.dropped, N, (unsigned long long)fx->seed);
    if (up.dropped < N * 12 / 100 || up.dropped > N * 28 / 100)
        fail_msg("dropped: got %llu of %d, want 12%%..28%%",
                 (unsigned long long)up.dropped, N);
    long last = -1;
    for (unsigned i = 0; i < delivered; i++) {
        unsigned seq = read_seq(fd);
        if ((long)seq <= last)
            fail_msg("frame %u came after frame %ld: want ascending", seq,
                     last);
        last = seq;
    }
    EXPECT_INT(SRV(&fx->srv, frames), delivered, "frames the server got");
    EXPECT_INT(nothing_to_read(fd), 1, "nothing more came back");
    close(fd);
}

static void dup_at_1_delivers_every_frame_exactly_twice(void **state)
{
    fixture *fx = *state;
    fp_faults f = { .dup = 1.0 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 100);
    for (unsigned i = 0; i < 200; i++)
        EXPECT_INT(read_seq(fd), i / 2, "frame %u back", i);
    WAIT_FOR(SRV(&fx->srv, frames) == 200, "200 frames at the server");
    EXPECT_U64(dir_stats(fx->p, FP_UP).duplicated, 100, "duplicated up");
    EXPECT_INT(nothing_to_read(fd), 1, "no third copy");
    close(fd);
}

static void reorder_at_1_swaps_neighbours_and_loses_nothing(void **state)
{
    fixture *fx = *state;
    fp_faults f = { .reorder = 1.0 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 100);
    for (unsigned i = 0; i < 100; i++)
        EXPECT_INT(read_seq(fd), i ^ 1, "frame %u back", i);
    EXPECT_U64(dir_stats(fx->p, FP_UP).reordered, 50, "reordered up");
    close(fd);
}

static void corrupt_at_1_flips_exactly_one_bit_per_body_never_the_length(
    void **state)
{
    fixture *fx = *state;
    enum { N = 300 };
    fp_faults f = { .corrupt = 1.0 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, N);
    for (unsigned i = 0; i < N; i++) {
        char got[256], want[256];
        /* A flipped length would desynchronise the stream: every frame
         * arriving with its own length proves none was touched. */
        size_t len = read_frame(fd, got, sizeof got);
        EXPECT_INT(len, body_len_of(i), "length of frame %u", i);
        make_body(i, want, len);
        int bits = 0;
        for (size_t j = 0; j < len; j++)
            bits += __builtin_popcount((unsigned char)(got[j] ^ want[j]));
        EXPECT_INT(bits, 1, "bits flipped in frame %u", i);
    }
    EXPECT_U64(dir_stats(fx->p, FP_UP).corrupted, N, "corrupted up");
    close(fd);
}

static void delay_adds_at_least_delay_ms(void **state)
{
    fixture *fx = *state;
    fp_faults f = { .delay_ms = 150 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    double t0 = now_ms();
    send_frames(fd, 0, 1);
    EXPECT_INT(read_seq(fd), 0, "the delayed frame");
    double took = now_ms() - t0;
    if (took < 150)
        fail_msg("round trip: got %.1f ms, want at least 150", took);
    close(fd);
}

static void jitter_never_reorders_frames(void **state)
{
    fixture *fx = *state;
    fp_faults f = { .delay_ms = 3, .jitter_ms = 3 };
    fp_set(fx->p, FP_BOTH, &f);
    int fd = connect_to(fp_port(fx->p));
    for (unsigned i = 0; i < 200; i += 10) {
        send_frames(fd, i, 10);
        for (unsigned j = i; j < i + 10; j++)
            EXPECT_INT(read_seq(fd), j, "frame back");
    }
    close(fd);
}

static void blackhole_swallows_frames_without_closing(void **state)
{
    fixture *fx = *state;
    fp_faults f = { .blackhole = 1 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 20);
    WAIT_FOR(dir_stats(fx->p, FP_UP).blackholed == 20,
             "20 frames blackholed up");
    EXPECT_INT(SRV(&fx->srv, frames), 0, "frames the server got");
    EXPECT_INT(nothing_to_read(fd), 1, "no byte, EOF or reset at the client");
    EXPECT_INT(SRV(&fx->srv, eofs) + SRV(&fx->srv, resets), 0,
               "connections the server saw end");
    EXPECT_U64(stats(fx->p).open, 1, "connections open at the proxy");
    fp_faults none = { 0 };
    fp_set(fx->p, FP_UP, &none);
    send_frames(fd, 20, 1);
    EXPECT_INT(read_seq(fd), 20, "the frame sent after the blackhole");
    close(fd);
}

static void pause_stops_delivery_and_resuming_delivers_everything_held(
    void **state)
{
    fixture *fx = *state;
    fp_faults f = { .pause = 1 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    /* A small send buffer, so backpressure shows after a few hundred KB
     * instead of megabytes. */
    int sndbuf = 16384;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    char frame[4 + 128];
    unsigned sent = 0;
    size_t rest = 0, len = 0;
    for (;;) {
        len = body_len_of(sent);
        put_be32(frame, (uint32_t)len);
        make_body(sent, frame + 4, len);
        ssize_t w = send(fd, frame, 4 + len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (w < 0)
            fail_msg("send: %s", strerror(errno));
        if ((size_t)w < 4 + len) {
            rest = 4 + len - (size_t)w;   /* the tail goes after resuming */
            sent++;
            break;
        }
        if (++sent > 1000000)
            fail_msg("sent %u frames without backpressure", sent);
    }
    printf("# %u frames written before backpressure\n", sent);
    EXPECT_INT(SRV(&fx->srv, frames), 0, "frames the server got");
    EXPECT_U64(dir_stats(fx->p, FP_UP).bytes_in, 0, "bytes read up");
    fp_faults none = { 0 };
    fp_set(fx->p, FP_UP, &none);
    if (rest && write_all(fd, frame + 4 + len - rest, rest))
        fail_msg("sending the tail: %s", strerror(errno));
    for (unsigned i = 0; i < sent; i++)
        EXPECT_INT(read_seq(fd), i, "frame back");
    close(fd);
}

static void cut_after_resets_mid_frame_and_the_client_sees_econnreset(
    void **state)
{
    fixture *fx = *state;
    fp_faults f = { .cut_after = 100 };
    fp_set(fx->p, FP_DOWN, &f);
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 20);      /* far more than 100 bytes back */
    char buf[4096];
    int err;
    size_t got = read_upto(fd, buf, sizeof buf, &err);
    EXPECT_INT(got, 100, "bytes before the reset");
    expect_errno(err, ECONNRESET, "how the connection ended");
    WAIT_FOR(SRV(&fx->srv, resets) == 1, "the server to see a reset");
    EXPECT_U64(stats(fx->p).reset, 1, "connections reset");
    close(fd);
}

static void skip_frames_lets_the_first_frames_of_each_connection_through(
    void **state)
{
    fixture *fx = *state;
    fp_faults f = { .drop = 1.0, .skip_frames = 3 };
    fp_set(fx->p, FP_UP, &f);
    for (int conn = 0; conn < 2; conn++) {
        int fd = connect_to(fp_port(fx->p));
        send_frames(fd, 0, 10);
        for (unsigned i = 0; i < 3; i++)
            EXPECT_INT(read_seq(fd), i, "connection %d, frame back", conn);
        WAIT_FOR(dir_stats(fx->p, FP_UP).dropped == 7 * (unsigned)(conn + 1),
                 "the other 7 frames dropped");
        EXPECT_INT(nothing_to_read(fd), 1, "nothing after the first 3");
        close(fd);
    }
    EXPECT_INT(SRV(&fx->srv, frames), 6, "frames the server got");
}

static void refuse_closes_new_connections_at_once(void **state)
{
    fixture *fx = *state;
    fp_refuse(fx->p, 1);
    int fd = connect_to(fp_port(fx->p));
    char b;
    int err;
    size_t got = read_upto(fd, &b, 1, &err);
    EXPECT_INT(got, 0, "bytes from a refused connection");
    expect_errno(err, 0, "how a refused connection ended");
    close(fd);
    EXPECT_U64(stats(fx->p).refused, 1, "connections refused");
    EXPECT_INT(SRV(&fx->srv, accepted), 0, "connections the server got");
    fp_refuse(fx->p, 0);
    fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 1);
    EXPECT_INT(read_seq(fd), 0, "a frame once refusing is off");
    close(fd);
}

/* Which of n frames a proxy with this seed lets through at drop 0.5. */
static void drop_pattern(int port, uint64_t seed, unsigned n, char *through)
{
    fp_proxy *p = start_proxy(port, seed);
    fp_faults f = { .drop = 0.5 };
    fp_set(p, FP_UP, &f);
    int fd = connect_to(fp_port(p));
    send_frames(fd, 0, n);
    WAIT_FOR(dir_stats(p, FP_UP).frames == n, "every frame up");
    unsigned delivered = n - (unsigned)dir_stats(p, FP_UP).dropped;
    memset(through, 0, n);
    for (unsigned i = 0; i < delivered; i++)
        through[read_seq(fd)] = 1;
    close(fd);
    fp_stop(p);
}

static void same_seed_gives_the_same_drop_pattern_twice(void **state)
{
    fixture *fx = *state;
    enum { N = 200 };
    char a[N], b[N], c[N];
    drop_pattern(fx->srv.port, fx->seed, N, a);
    drop_pattern(fx->srv.port, fx->seed, N, b);
    drop_pattern(fx->srv.port, fx->seed + 1, N, c);
    for (int i = 0; i < N; i++)
        EXPECT_INT(b[i], a[i], "frame %d passed, second run", i);
    EXPECT_INT(memcmp(a, c, N) != 0, 1, "another seed's pattern differs");
}

static void reset_all_resets_every_open_connection(void **state)
{
    fixture *fx = *state;
    int fd[2];
    for (int i = 0; i < 2; i++) {
        fd[i] = connect_to(fp_port(fx->p));
        send_frames(fd[i], 0, 1);        /* so both are surely proxied */
        EXPECT_INT(read_seq(fd[i]), 0, "frame back");
    }
    fp_reset_all(fx->p);
    EXPECT_U64(stats(fx->p).open, 0, "connections open after fp_reset_all");
    for (int i = 0; i < 2; i++) {
        char b;
        int err;
        read_upto(fd[i], &b, 1, &err);
        expect_errno(err, ECONNRESET, "how a client's connection ended");
        close(fd[i]);
    }
    WAIT_FOR(SRV(&fx->srv, resets) == 2, "the server to see 2 resets");
}

static void fin_from_the_client_comes_back_as_fin(void **state)
{
    fixture *fx = *state;
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 5);
    shutdown(fd, SHUT_WR);
    for (unsigned i = 0; i < 5; i++)
        EXPECT_INT(read_seq(fd), i, "frame back before the FIN");
    char b;
    int err;
    size_t got = read_upto(fd, &b, 1, &err);
    EXPECT_INT(got, 0, "bytes after the echo server closed");
    expect_errno(err, 0, "how the connection ended");
    EXPECT_INT(SRV(&fx->srv, eofs), 1, "EOFs the server saw");
    EXPECT_INT(SRV(&fx->srv, resets), 0, "resets the server saw");
    WAIT_FOR(stats(fx->p).open == 0, "the proxy to close the connection");
    EXPECT_U64(stats(fx->p).reset, 0, "connections reset");
    close(fd);
}

static void rst_from_the_client_reaches_the_server_as_rst(void **state)
{
    fixture *fx = *state;
    int fd = connect_to(fp_port(fx->p));
    send_frames(fd, 0, 1);
    EXPECT_INT(read_seq(fd), 0, "frame back");
    struct linger l = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
    WAIT_FOR(SRV(&fx->srv, resets) == 1, "the server to see a reset");
    EXPECT_INT(SRV(&fx->srv, eofs), 0, "EOFs the server saw");
}

static void hostile_length_falls_back_to_passing_bytes_through(void **state)
{
    fixture *fx = *state;
    /* Dropping every frame shows that from the hostile length on, the
     * bytes are no longer treated as frames. */
    fp_faults f = { .drop = 1.0 };
    fp_set(fx->p, FP_UP, &f);
    int fd = connect_to(fp_port(fx->p));
    char out[4 + 100], in[sizeof out];
    put_be32(out, 0xfffffff0u);
    for (int i = 0; i < 100; i++)
        out[4 + i] = (char)i;
    assert_int_equal(write_all(fd, out, sizeof out), 0);
    int err;
    size_t got = read_upto(fd, in, sizeof in, &err);
    EXPECT_INT(got, sizeof out, "bytes echoed");
    EXPECT_INT(memcmp(in, out, sizeof out), 0, "echoed bytes differ");
    EXPECT_U64(dir_stats(fx->p, FP_UP).passthrough, 1, "passthrough up");
    EXPECT_U64(dir_stats(fx->p, FP_UP).dropped, 0, "dropped up");
    close(fd);
}

static void unreachable_target_resets_the_client(void **state)
{
    (void)state;
    /* A port that was free a moment ago has nobody listening. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    socklen_t len = sizeof a;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    fp_proxy *p = start_proxy(ntohs(a.sin_port), test_seed());
    int fd = connect_to(fp_port(p));
    char b;
    int err;
    read_upto(fd, &b, 1, &err);
    expect_errno(err, ECONNRESET, "how the connection ended");
    close(fd);
    fp_stop(p);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        T(transparent_mode_delivers_every_frame_byte_identical_in_order),
        cmocka_unit_test_setup_teardown(
            drop_all_up_delivers_nothing_while_down_still_works,
            setup_greet3, teardown),
        T(drop_20_percent_of_2000_frames_keeps_the_rest_intact_in_order),
        T(dup_at_1_delivers_every_frame_exactly_twice),
        T(reorder_at_1_swaps_neighbours_and_loses_nothing),
        T(corrupt_at_1_flips_exactly_one_bit_per_body_never_the_length),
        T(delay_adds_at_least_delay_ms),
        T(jitter_never_reorders_frames),
        T(blackhole_swallows_frames_without_closing),
        T(pause_stops_delivery_and_resuming_delivers_everything_held),
        T(cut_after_resets_mid_frame_and_the_client_sees_econnreset),
        T(skip_frames_lets_the_first_frames_of_each_connection_through),
        T(refuse_closes_new_connections_at_once),
        T(same_seed_gives_the_same_drop_pattern_twice),
        T(reset_all_resets_every_open_connection),
        T(fin_from_the_client_comes_back_as_fin),
        T(rst_from_the_client_reaches_the_server_as_rst),
        T(hostile_length_falls_back_to_passing_bytes_through),
        T(unreachable_target_resets_the_client),
    };
    return cmocka_run_group_tests_name("faultproxy", tests, NULL, NULL);
}
