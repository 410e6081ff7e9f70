/* A TCP proxy for tests that injects faults between a client and a psd
 * node: delay, drops, duplicates, reordering, bit flips, a blackhole, a
 * pause, resets. It runs its own libuv loop on its own thread and cuts
 * each direction into frames (proto/PROTOCOL.md §2), so frame faults act
 * on whole frames and a dropped frame leaves the stream in sync.
 *
 * How a test uses it: start psd (tests/cluster.c), start a proxy in front
 * of one node, and open the client against the proxy's port:
 *
 *     test_cluster c;
 *     cluster_start(&c, 1, 4, TABLES);
 *     char err[128];
 *     fp_proxy *p = fp_start("127.0.0.1", c.port[0], seed, err, sizeof err);
 *     printf("# faultproxy seed %llu\n", (unsigned long long)seed);
 *     fp_faults f = { .drop = 0.2, .skip_frames = 1 };  // HELLO passes
 *     fp_set(p, FP_UP, &f);
 *     snprintf(spec, sizeof spec, "127.0.0.1:%d", fp_port(p));
 *     ps_open(&client, spec, NULL);
 *     ...
 *     fp_stop(p);
 *     cluster_stop(&c);
 *
 * With a plain cluster only the node the client is opened through is
 * proxied: libpsclient dials the other nodes at the addresses HELLO_OK
 * lists. To put every node behind a proxy, start the cluster with
 * cluster_start_opts(..., proxied = 1, ...): the ini then names pub[i]
 * (where the test starts fp_start_at(c.pub[i], "127.0.0.1", c.port[i],
 * ...)) while node i listens on port[i] ([cluster] listen).
 *
 * The knobs (fp_faults), per direction; all zero forwards transparently:
 *   delay_ms, jitter_ms  every frame (or chunk, when no frame fault is on)
 *                        waits delay ± jitter ms; order is kept.
 *   drop                 probability that a frame is discarded.
 *   dup                  probability that a frame is sent twice.
 *   reorder              probability that a frame is held back and sent
 *                        right after the next frame (1.0 swaps neighbours:
 *                        2 1 4 3 ...). A held frame waits for that next
 *                        frame, or for the sender's FIN.
 *   corrupt              probability that one random bit of one random
 *                        byte of the frame body flips (never the length).
 *   blackhole            read and discard everything, FIN and RST too.
 *                        Whole frames are swallowed, so clearing it
 *                        leaves the stream in sync, unless it was set
 *                        while a frame was half through.
 *   pause                stop reading, so TCP backpressure builds up;
 *                        clearing it delivers everything held.
 *   cut_after            after this many more bytes forwarded in that
 *                        direction (counted from this fp_set, over all
 *                        connections), reset both sides of the
 *                        connection that crossed it, possibly mid-frame.
 *                        Fires once; 0 = off.
 *   skip_frames          the first N frames of every connection in that
 *                        direction pass untouched (no frame fault, no
 *                        delay), e.g. to let HELLO through.
 *
 * Replay: the decisions on a connection's frames come from a PRNG seeded
 * with (seed, connection number, direction) and are drawn only for the
 * faults that are on, so the same seed, settings and frames give the
 * same faults. Print the seed in test output. Jitter has its own stream,
 * since chunking depends on timing. When one side closes, the proxy
 * closes the other the same way: FIN after everything queued, RST at
 * once. A frame length above FP_MAX_FRAME switches that direction of
 * that connection to passing bytes through untouched. */
#ifndef TEST_FAULTPROXY_H
#define TEST_FAULTPROXY_H

#include <stddef.h>
#include <stdint.h>

enum { FP_UP = 0, FP_DOWN = 1, FP_BOTH = 2 };   /* client→server, back */

/* The largest frame body the proxy buffers whole. */
#define FP_MAX_FRAME ((uint64_t)1 << 30)

typedef struct fp_faults {
    unsigned delay_ms, jitter_ms;
    double drop, dup, reorder, corrupt;  /* probabilities, 0..1 */
    int blackhole, pause;                /* booleans */
    uint64_t cut_after;                  /* bytes; 0 = off */
    unsigned skip_frames;
} fp_faults;

/* Counters of one direction. Frames are complete frames read from the
 * sender; forwarded counts frames written on, a duplicate twice. */
typedef struct fp_dir_counts {
    uint64_t frames, forwarded, dropped, duplicated, reordered, corrupted;
    uint64_t blackholed;     /* frames swallowed by the blackhole */
    uint64_t bytes_in, bytes_out;
    uint64_t passthrough;    /* connections that fell back to raw bytes */
} fp_dir_counts;

typedef struct fp_counts {
    fp_dir_counts dir[2];    /* [FP_UP], [FP_DOWN] */
    uint64_t accepted;       /* connections proxied */
    uint64_t refused;        /* closed at once by fp_refuse */
    uint64_t reset;          /* connections ended with RST, either cause */
    uint64_t open;           /* connections open now */
} fp_counts;

typedef struct fp_proxy fp_proxy;

/* Starts a proxy listening on 127.0.0.1 on an ephemeral port (fp_start)
 * or on listen_port (fp_start_at; 0 = ephemeral) that connects every
 * accepted connection to target_host:target_port (resolved once, now).
 * Returns the proxy, to be freed with fp_stop, or NULL with a reason in
 * err. The caller keeps target_host. The proxy's thread blocks SIGPIPE
 * for itself only; the process's dispositions are left alone. */
fp_proxy *fp_start(const char *target_host, int target_port, uint64_t seed,
                   char *err, size_t errlen);
fp_proxy *fp_start_at(int listen_port, const char *target_host,
                      int target_port, uint64_t seed, char *err,
                      size_t errlen);

/* The port the proxy listens on. */
int fp_port(const fp_proxy *p);

/* Replaces the faults of direction dir (FP_UP, FP_DOWN or FP_BOTH) with
 * *f, copied, and returns once the proxy's thread has taken them in: a
 * pause has stopped every read by then. Applies to open connections
 * too. Callable from any thread except the proxy's own. */
void fp_set(fp_proxy *p, int dir, const fp_faults *f);

/* Resets (RST) every open connection, then returns. Callable from any
 * thread except the proxy's own. */
void fp_reset_all(fp_proxy *p);

/* While on, new connections are accepted and closed at once (FIN). */
void fp_refuse(fp_proxy *p, int on);

/* Copies the counters into *out. Callable from any thread. */
void fp_stats(const fp_proxy *p, fp_counts *out);

/* Closes every connection and the listener, joins the thread, frees p.
 * NULL is a no-op. */
void fp_stop(fp_proxy *p);

#endif
