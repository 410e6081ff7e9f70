/* psctl: asks running psd nodes how they are and tells them to save.
 * Speaks the wire protocol directly (proto/), one blocking connection per
 * node, one request at a time: a HELLO as a client that is not a worker,
 * then ADMIN commands (PROTOCOL.md). Human output is built from the
 * node's "metrics" and "rates" answers (the Prometheus line format, easy
 * to read back); with --json every command but top (one document per
 * refresh) prints one JSON document (stats and tables: each node's
 * "stats" document as is). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "config.h"
#include "opts.h"
#include "../client/nodes.h"
#include "../proto/auth.h"
#include "../proto/frame.h"
#include "../proto/msg.h"
#include "../proto/status.h"

/* A node's time to connect and to answer; --wait sets both. */
static int connect_ms = 3000, reply_ms = 10000;
#define MAX_FRAME (64u << 20)

static void usage(FILE *f)
{
    fprintf(f,
        "usage: psctl [-c INI | -s HOST:PORT[,HOST:PORT...]] [-n NODE] "
        "[--json]\n"
        "             [--wait SECS] [--timeout SECS] [-i SECS] [--count N] "
        "COMMAND\n"
        "       psctl --version | --help\n"
        "commands:\n"
        "  ping     round trip to every node\n"
        "  layout   nodes, shards and tables, as the cluster describes itself\n"
        "  tables   per table: rows, memory, pushes/pulls and keys per second;\n"
        "           its updater, the hyper-parameters in force, and\n"
        "           nonfinite, max_rows, init and seed where not the\n"
        "           defaults (nodes that differ are named)\n"
        "  stats    per node: memory, connections, rates, service times,\n"
        "           workers, snapshot and journal\n"
        "  save     every node writes a snapshot now; waits for the result:\n"
        "           each node has 10 s to take the command, then all have\n"
        "           --timeout SECS (default 600) to finish writing\n"
        "  top      stats and tables, refreshed every second (-i SECS, "
        "--count N;\n"
        "           0, the default: until Ctrl-C); with --json, each "
        "refresh is\n"
        "           what --json stats prints (one array after another);\n"
        "           a node not answering is asked again at each refresh,\n"
        "           for up to the interval (at least 1 s)\n"
        "  end-job  ends a bsp/ssp job whose workers stopped at different "
        "counts\n"
        "           (one crashed): the next job waits for all workers and "
        "starts\n"
        "           where this one ended; refused while a worker is "
        "connected\n"
        "--json: stdout is one JSON document for every command but top "
        "(one array per\n  refresh, as above): ping, stats, tables, save and "
        "end-job print an array\n  with one object per node (tables: the "
        "stats documents), layout one object;\n  nodes "
        "that do not answer are said on stderr (end-job lists them too,\n  "
        "with \"error\": not ended).\n"
        "Exit status: 0 when every node answered (and saved, or ended the "
        "job), 1 when\none did not (or a worker is connected, for end-job) "
        "or the nodes describe\ndifferent layouts (end-job then ends "
        "nothing) or the output cannot be\nwritten, 2 for bad arguments (an "
        "ini without a [cluster] nodes line\namong them).\nAn ini psd would refuse is read as a client reads it (its "
        "nodes and token),\nwith a warning, so that `psctl -c INI stats` "
        "shows why a reload failed.\n"
        "-n NODE: only node NODE of the ini (with -s: the NODE-th address, "
        "from 0).\n"
        "--wait SECS: each node's time to connect and to answer (default 3 s "
        "to connect,\n  10 s to answer; more for a node behind a slow or "
        "lossy network).\n"
        "Long forms: --config INI, --servers LIST, --node NODE, --interval "
        "SECS.\n"
        "--version: psctl's release and wire protocol; --help: this text.\n"
        "Without -c or -s: -c /etc/psd/psd.ini when it exists, else "
        "-s 127.0.0.1:7070.\nRates are over the last 10 s (or since a node's "
        "start, when less). The token: "
        "$PSD_AUTH_TOKEN, else the ini's auth_token\nor auth_token_file.\n");
}

/* ---- one node's connection ---------------------------------------------- */

typedef struct node {
    char addr[PSW_ADDR_MAX + 8];
    int fd;
    psw_reader rd;
    psw_cluster layout;
    psw_transcript tr;           /* the handshake's, for the proofs */
    int challenged;
    int index;                   /* the node's own, once it said (HELLO_OK);
                                    -1 before */
    uint64_t ts;
    char err[1024];
    int refused;                 /* the last command's error is the node's
                                    answer, not a lost connection */
    int status;                  /* that answer's status */
    int shadowed;                /* answered, but another cluster's node of
                                    its number was asked first: not shown */
    int ready;                   /* its handshake is done */
    uint64_t sent_ms;            /* when the last frame went to it */
} node;

/* Every node psctl asks (main sets them): while one is waited for, they
 * all hear a PING every heartbeat_ms, as from a client, or they close
 * the connection as a dead peer's (peer_timeout_ms) while a node that
 * stopped answering keeps psctl waiting up to reply_ms. */
static node *all_nodes;
static int all_n;

/* The cluster's token ($PSD_AUTH_TOKEN, else the ini's auth_token or
 * auth_token_file), or none. */
static char token[PSW_AUTH_TOKEN_MAX + 1];
static size_t token_len;
/* The ini's auth_token_file, when the token came from it: psd reads it at
 * start only, so a refusal may mean the file changed since. */
static char token_file[4096];

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Splits "host:port" or "[v6]:port". */
static int split(const char *a, char *host, size_t hl, char *port, size_t pl)
{
    const char *colon = strrchr(a, ':');
    if (!colon || !colon[1])
        return -1;
    const char *h = a;
    size_t n = (size_t)(colon - a);
    if (a[0] == '[' && n >= 2 && a[n - 1] == ']') {
        h = a + 1;
        n -= 2;
    }
    if (n == 0 || n >= hl || strlen(colon + 1) >= pl)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    snprintf(port, pl, "%s", colon + 1);
    return 0;
}

static int wait_fd(int fd, short ev, int ms)
{
    struct pollfd p = { fd, ev, 0 };
    int rc;
    while ((rc = poll(&p, 1, ms)) < 0 && errno == EINTR)
        ;
    return rc;
}

static int dial(node *nd)
{
    char host[PSW_ADDR_MAX], port[16];
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
    if (split(nd->addr, host, sizeof host, port, sizeof port)) {
        snprintf(nd->err, sizeof nd->err, "bad address");
        return -1;
    }
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        snprintf(nd->err, sizeof nd->err, "%s", gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (ai = res; ai; ai = ai->ai_next) {
        int self = 0;
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC |
                    SOCK_NONBLOCK, 0);
        if (fd < 0) {
            /* Said (IPv6 off in the kernel, out of descriptors): the
             * reason was left empty. */
            snprintf(nd->err, sizeof nd->err, "cannot connect: %s%s",
                     strerror(errno), psw_addr_ipv6_off(ai->ai_addr, errno));
            continue;
        }
        /* Unusable without a zone: said as such, not EINVAL. */
        if (psw_addr_link_local(ai->ai_addr)) {
            snprintf(nd->err, sizeof nd->err, "%.*s resolves to a link-local "
                     "address: " PSW_LINK_LOCAL_WHY, 96, host);
            close(fd);
            fd = -1;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
            (errno == EINPROGRESS && wait_fd(fd, POLLOUT, connect_ms) > 0)) {
            int e = 0;
            socklen_t l = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
            /* Nothing listens there: psw_addr_self_connected. */
            self = e == 0 && psw_addr_self_connected(fd);
            if (e == 0 && !self)
                break;
            errno = self ? ECONNREFUSED : e;
        } else if (errno == EINPROGRESS)
            errno = ETIMEDOUT;
        /* A node behind a lossy link connects late (a lost SYN is sent
         * again after 1 s, then 3 s): said, with the way to wait longer. */
        snprintf(nd->err, sizeof nd->err, "cannot connect: %s%s",
                 strerror(errno), self ? " (the connection reached itself: "
                 "its local port was the node's)"
                 : errno == ETIMEDOUT ? " (--wait SECS gives a slow or "
                                        "lossy network more time)"
                 /* A node that starts listens only once its tables are
                  * made and its snapshot loaded (minutes for a large
                  * model), and read as one that is down (a trial). */
                 : errno == ECONNREFUSED ? " (nothing listens there: the "
                                           "node is down, or still starting; "
                                           "its log says which)"
                 : psw_addr_ipv6_off(ai->ai_addr, errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nd->fd = fd;
    return 0;
}

static int send_out(node *nd, psw_out *o)
{
    size_t n = psw_out_iovcnt(o);
    struct iovec iov[8];
    if (o->oom || n > 8) {
        snprintf(nd->err, sizeof nd->err, "cannot build the request");
        return -1;
    }
    psw_out_iov(o, iov);
    for (size_t i = 0; i < n; i++) {
        const char *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left) {
            ssize_t k = send(nd->fd, p, left, MSG_NOSIGNAL);
            if (k < 0 && errno == EAGAIN && wait_fd(nd->fd, POLLOUT,
                                                    reply_ms) > 0)
                continue;
            if (k <= 0) {
                snprintf(nd->err, sizeof nd->err, "send: %s",
                         k < 0 ? strerror(errno) : "closed");
                return -1;
            }
            p += k;
            left -= (size_t)k;
        }
    }
    nd->sent_ms = now_ms();
    return 0;
}

static int ping_node(node *nd);

/* A PING to each node whose handshake is done and that was sent nothing
 * for its heartbeat_ms (the one waited for too: its answer may take
 * long). Only where the socket takes it at once: a node that reads
 * nothing must not hold up the wait for another. One that fails is
 * left as it is, its error too (a refusal not yet said): the next
 * command on it says why it failed. */
static void keep_alive(void)
{
    uint64_t t = now_ms();
    for (int i = 0; i < all_n; i++) {
        node *nd = &all_nodes[i];
        uint64_t beat = nd->layout.heartbeat_ms ? nd->layout.heartbeat_ms
                                                : 1000;
        if (nd->fd < 0 || !nd->ready || t - nd->sent_ms < beat ||
            wait_fd(nd->fd, POLLOUT, 0) <= 0)
            continue;
        char keep[sizeof nd->err];
        memcpy(keep, nd->err, sizeof keep);
        if (ping_node(nd)) {
            memcpy(nd->err, keep, sizeof keep);
            nd->sent_ms = t;     /* not again at every slice */
        }
    }
}

/* Reads frames until one whose first message decodes with `take`, until
 * `deadline` (now_ms) at most: 0, or -1 with nd->err. With deadline 0,
 * only what has arrived: 1 when that holds no such frame yet. */
typedef int (*take_fn)(node *nd, const msgpack_object *msg, void *arg);

static int receive_until(node *nd, take_fn take, void *arg,
                         uint64_t deadline)
{
    for (;;) {
        const char *body;
        size_t len;
        int rc = psw_reader_next(&nd->rd, &body, &len);
        char line[80];
        if (rc < 0 && psw_reader_text(&nd->rd, line, sizeof line)) {
            snprintf(nd->err, sizeof nd->err, "not a psd node: it answered "
                     "\"%s\"", line);
            return -1;
        }
        if (rc < 0) {
            snprintf(nd->err, sizeof nd->err, "bad frame: %s", nd->rd.why);
            return -1;
        }
        if (rc == 1) {
            msgpack_zone zone;
            msgpack_object obj;
            const msgpack_object *msgs;
            char why[200];
            msgpack_zone_init(&zone, 4096);
            int n = psw_frame_decode(body, len, &zone, &obj, why, sizeof why)
                        ? -1
                        : psw_frame_messages(&obj, PSW_MAX_MSGS, &msgs, why,
                                             sizeof why);
            int got = 0;
            for (int i = 0; i < n && !got; i++) {
                got = take(nd, &msgs[i], arg);
                if (got < 0)
                    break;
            }
            msgpack_zone_destroy(&zone);
            if (n < 0) {
                snprintf(nd->err, sizeof nd->err, "bad frame: %s", why);
                return -1;
            }
            if (got)
                return got > 0 ? 0 : -1;
            continue;            /* a PING, or a frame of something else */
        }
        if (deadline == 0 && wait_fd(nd->fd, POLLIN, 0) <= 0)
            return 1;
        /* In slices, so that the other nodes are kept meanwhile. */
        int ready = 0;
        for (uint64_t t; deadline && !ready && (t = now_ms()) < deadline;) {
            keep_alive();
            uint64_t ms = deadline - t < 250 ? deadline - t : 250;
            int w = wait_fd(nd->fd, POLLIN, (int)ms);
            if (w < 0)
                break;
            ready = w > 0;
        }
        if (deadline && !ready) {
            snprintf(nd->err, sizeof nd->err, "no answer within %d s "
                     "(--wait SECS waits longer)", reply_ms / 1000);
            return -1;
        }
        char *p;
        size_t room;
        if (psw_reader_space(&nd->rd, &p, &room)) {
            snprintf(nd->err, sizeof nd->err, "out of memory");
            return -1;
        }
        ssize_t k = recv(nd->fd, p, room, 0);
        if (k < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (k <= 0) {
            snprintf(nd->err, sizeof nd->err, "connection closed%s%s",
                     k < 0 ? ": " : " by the node",
                     k < 0 ? strerror(errno) : "");
            return -1;
        }
        psw_reader_commit(&nd->rd, (size_t)k);
    }
}

static int receive(node *nd, take_fn take, void *arg)
{
    return receive_until(nd, take, arg, now_ms() + reply_ms);
}

static int send_out(node *nd, psw_out *o);

/* A node with a token challenges: our proof (or none, and it refuses). */
static int answer_challenge(node *nd, const msgpack_object *msg)
{
    psw_challenge ch;
    char why[200];
    if (nd->challenged || psw_challenge_decode(msg, &ch, why, sizeof why)) {
        snprintf(nd->err, sizeof nd->err, "bad CHALLENGE: %s",
                 nd->challenged ? "a second one" : why);
        return -1;
    }
    nd->challenged = 1;
    nd->tr.node_index = ch.node_index;
    memcpy(nd->tr.snonce, ch.nonce, PSW_NONCE_LEN);
    uint8_t proof[PSW_PROOF_LEN];
    psw_auth_msg a = { NULL, 0 };
    if (token_len) {
        psw_auth_proof(token, token_len, PSW_ROLE_CLIENT, &nd->tr, proof);
        a.proof = (const char *)proof;
        a.proof_len = PSW_PROOF_LEN;
    }
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_pack_auth(&o, &a);
    psw_out_frame_end(&o);
    psw_wipe(proof, sizeof proof);
    int rc = send_out(nd, &o);
    psw_out_destroy(&o);
    return rc ? -1 : 0;          /* and read on, for HELLO_OK */
}

static int take_hello_ok(node *nd, const msgpack_object *msg, void *arg)
{
    (void)arg;
    char why[200];
    if (msg->type == MSGPACK_OBJECT_ARRAY && msg->via.array.size > 0 &&
        msg->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        msg->via.array.ptr[0].via.u64 == PSW_OP_CHALLENGE)
        return answer_challenge(nd, msg);
    if (psw_hello_ok_decode(msg, &nd->layout, why, sizeof why)) {
        snprintf(nd->err, sizeof nd->err, "bad HELLO_OK: %s", why);
        return -1;
    }
    if (nd->layout.status != PSW_OK) {
        /* A token file changed under a running psd (a reload refuses
         * it): psctl, reading the file, was shut out of the node whose
         * refused reload it would show. */
        int changed = nd->layout.status == PSW_EAUTH && token_file[0];
        snprintf(nd->err, sizeof nd->err, "refused: %.280s%s%.300s%s",
                 nd->layout.text,
                 changed ? " (psctl read the token from " : "",
                 changed ? token_file : "",
                 changed ? ", which psd reads at start only: if it changed "
                           "since, give psctl the node's token in "
                           "$PSD_AUTH_TOKEN, or restart psd)" : "");
        return -1;
    }
    nd->index = nd->layout.node_index;
    /* With a token the node proves it holds it too. */
    if (token_len &&
        (nd->layout.proof_state != PSW_PROOF_SET ||
         psw_auth_verify(token, token_len, PSW_ROLE_SERVER, &nd->tr,
                         nd->layout.proof, PSW_PROOF_LEN))) {
        snprintf(nd->err, sizeof nd->err, "%s", nd->challenged
                 ? "the node could not prove that it knows the token"
                 : "the node accepted us without authentication (it has no "
                   "auth_token, or it is not a node of this cluster)");
        return -1;
    }
    return 1;
}

/* Sends HELLO; take_hello_ok reads the answer (and answers a CHALLENGE). */
static int hello_send(node *nd)
{
    uint64_t id;
    if (getrandom(&id, sizeof id, 0) != sizeof id)
        id = (uint64_t)getpid() << 32 ^ now_ms();
    nd->challenged = 0;
    nd->tr = (psw_transcript){ .version = PSW_VERSION_READER,
                               .client_id = id,
                               .incarnation = 1, .worker = -1 };
    psw_auth_nonce(nd->tr.cnonce);
    psw_hello h = { PSW_VERSION_READER, id, 1, -1,
                    (const char *)nd->tr.cnonce,
                    PSW_NONCE_LEN };
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_pack_hello(&o, &h);
    psw_out_frame_end(&o);
    int rc = send_out(nd, &o);
    psw_out_destroy(&o);
    return rc ? -1 : 0;
}

typedef struct answer {
    uint64_t ts;
    char *text;
    size_t len;
} answer;

static int take_reply(node *nd, const msgpack_object *msg, void *arg)
{
    answer *a = arg;
    psw_msg m;
    char why[200];
    if (psw_msg_decode(msg, &m, why, sizeof why)) {
        snprintf(nd->err, sizeof nd->err, "bad reply: %s", why);
        return -1;
    }
    if (m.op != PSW_OP_REPLY || m.ts != a->ts)
        return 0;
    /* The node's texts go to a terminal: an escape sequence in them must
     * not act there (a node writes none; admin.c escapes them). */
    if (m.status != PSW_OK) {
        nd->refused = 1;
        nd->status = m.status;
        int n = snprintf(nd->err, sizeof nd->err, "%s: %.*s",
                         psw_strerror(m.status), (int)m.text_len,
                         m.text ? m.text : "");
        psw_text_clean(nd->err, n < 0 ? 0
                                : (size_t)n < sizeof nd->err ? (size_t)n
                                : sizeof nd->err - 1, 0);
        return -1;
    }
    a->text = malloc(m.vals_len + 1);
    if (!a->text) {
        snprintf(nd->err, sizeof nd->err, "out of memory");
        return -1;
    }
    memcpy(a->text, m.vals, m.vals_len);
    a->text[m.vals_len] = '\0';
    psw_text_clean(a->text, m.vals_len, 1);    /* lines are kept */
    a->len = m.vals_len;
    return 1;
}

/* Sends one request message in a frame of its own. 0 or -1 with
 * nd->err. */
static int send_request(node *nd, const psw_msg *m)
{
    psw_out o;
    psw_out_init(&o);
    psw_out_frame_begin(&o);
    psw_pack_request(&o, m);
    psw_out_frame_end(&o);
    int rc = send_out(nd, &o);
    psw_out_destroy(&o);
    return rc;
}

/* Sends an ADMIN command; its answer, malloc'd and NUL-terminated, or
 * NULL with nd->err set. */
static char *command(node *nd, const char *cmd)
{
    psw_msg m = { .op = PSW_OP_ADMIN, .ts = ++nd->ts, .text = cmd,
                  .text_len = strlen(cmd) };
    nd->refused = 0;
    int rc = send_request(nd, &m);
    answer a = { m.ts, NULL, 0 };
    if (rc || receive(nd, take_reply, &a))
        return NULL;
    return a.text;
}

static void node_close(node *nd);

/* Dials the node and sends its HELLO; node_handshake reads the answer.
 * A node whose handshake fails is closed again: left open, it would be
 * sent the command too and report a second, misleading error ("closed
 * by the node") after the reason. nd->err keeps the reason. */
static int node_open(node *nd)
{
    nd->fd = -1;
    nd->ready = 0;
    psw_reader_init(&nd->rd, MAX_FRAME);
    if (dial(nd) || hello_send(nd)) {
        node_close(nd);
        return -1;
    }
    return 0;
}

/* Reads what the node has sent of its handshake: 0 once it is done, 1
 * while it is not, -1 (the node closed) when it failed. */
static int node_handshake(node *nd)
{
    int rc = receive_until(nd, take_hello_ok, NULL, 0);
    if (rc < 0)
        node_close(nd);
    nd->ready = rc == 0;
    return rc;
}

static void node_close(node *nd)
{
    if (nd->fd >= 0)
        close(nd->fd);
    nd->fd = -1;
    nd->ready = 0;
    psw_reader_destroy(&nd->rd);
    psw_cluster_free(&nd->layout);
}

/* ---- the metrics line format ---------------------------------------------- */

typedef struct sample {
    char name[64];
    char *labels;                /* inside the braces; owned (an escaped
                                    data_dir and address passed a fixed
                                    384 bytes and were cut short) */
    double v;
} sample;

typedef struct samples {
    sample *s;
    int n, cap;
} samples;

static void samples_free(samples *ss)
{
    for (int i = 0; i < ss->n; i++)
        free(ss->s[i].labels);
    free(ss->s);
    ss->s = NULL;
    ss->n = ss->cap = 0;
}

/* Appends the `name{labels} value` lines of text; comments skipped. */
static void parse_lines(samples *out, const char *text)
{
    for (const char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1
                                                         : l + strlen(l)) {
        if (*l == '#' || *l == '\n')
            continue;
        if (out->n == out->cap) {
            int cap = out->cap ? 2 * out->cap : 256;
            sample *s = realloc(out->s, (size_t)cap * sizeof *s);
            if (!s)
                return;
            out->s = s;
            out->cap = cap;
        }
        sample *s = &out->s[out->n];
        size_t n = strcspn(l, "{ \n");
        if (n == 0 || n >= sizeof s->name)
            continue;
        memcpy(s->name, l, n);
        s->name[n] = '\0';
        const char *p = l + n;
        const char *lab = "";
        size_t labn = 0;
        if (*p == '{') {
            /* Label values may hold escaped quotes; find the closing brace
             * outside quotes. */
            const char *q = p + 1;
            int in = 0;
            for (; *q && *q != '\n' && (in || *q != '}'); q++) {
                if (*q == '\\' && q[1])
                    q++;
                else if (*q == '"')
                    in = !in;
            }
            if (*q != '}')
                continue;
            lab = p + 1;
            labn = (size_t)(q - p - 1);
            p = q + 1;
        }
        char *end;
        s->v = strtod(p, &end);
        if (end != p && (s->labels = strndup(lab, labn)) != NULL)
            out->n++;
    }
}

/* The first sample called name whose labels contain every "k=\"v\"" of
 * want (a comma-separated list, or ""), or NULL. */
static const sample *find(const samples *ss, const char *name,
                          const char *want)
{
    for (int i = 0; i < ss->n; i++) {
        if (strcmp(ss->s[i].name, name))
            continue;
        int ok = 1;
        char w[160];
        snprintf(w, sizeof w, "%s", want);
        for (char *save, *t = strtok_r(w, ",", &save); t && ok;
             t = strtok_r(NULL, ",", &save))
            ok = strstr(ss->s[i].labels, t) != NULL;
        if (ok)
            return &ss->s[i];
    }
    return NULL;
}

/* Its value; 0 when there is none. */
static double get(const samples *ss, const char *name, const char *want)
{
    const sample *x = find(ss, name, want);
    return x ? x->v : 0;
}

/* The value of label `key` in labels (unescaped), or "". */
static void label_value(const char *labels, const char *key, char *out,
                        size_t len)
{
    char k[64];
    snprintf(k, sizeof k, ",%s=\"", key);
    /* The first label has no comma before it. */
    size_t kl = strlen(k + 1);
    const char *p = !strncmp(labels, k + 1, kl) ? labels : strstr(labels, k);
    out[0] = '\0';
    if (!p)
        return;
    p += kl + (p != labels);
    size_t o = 0;
    for (; *p && *p != '"' && o + 1 < len; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            out[o++] = *p == 'n' ? '\n' : *p;
        } else
            out[o++] = *p;
    }
    out[o] = '\0';
}

/* The value of label key in the sample called name of node idx,
 * unescaped. Matched on the node too: the samples of every node are in
 * one list (fetch_all), and each node has its own data_dir, errors. */
static void get_label(const samples *ss, const char *name, int idx,
                      const char *key, char *out, size_t len)
{
    char me[32];
    size_t mel = (size_t)snprintf(me, sizeof me, "node=\"%d\"", idx);
    out[0] = '\0';
    for (int i = 0; i < ss->n; i++) {
        const char *l = ss->s[i].labels;
        if (strcmp(ss->s[i].name, name) || strncmp(l, me, mel) ||
            (l[mel] && l[mel] != ','))
            continue;
        label_value(l, key, out, len);
        return;
    }
}

/* Tables a "metrics tables A B" answer covers: about 1 KB each at the
 * longest names, far below an ADMIN answer's 4 MiB. */
#define TABLES_A_PART 1024

/* Metrics and rates of node nd into ss. 0 or -1. */
static int fetch(node *nd, samples *ss)
{
    char *m = command(nd, "metrics");
    if (!m && nd->refused && nd->status == PSW_ETOOBIG) {
        /* Too long for one answer (thousands of tables of long names):
         * the node's own lines, then its tables a part at a time. A node
         * before 0.4.4 knows no parts: its refusal stands. */
        char err[sizeof nd->err];
        snprintf(err, sizeof err, "%s", nd->err);
        m = command(nd, "metrics node");
        for (int t = 0; m && t < nd->layout.ntables; t += TABLES_A_PART) {
            char cmd[64];
            snprintf(cmd, sizeof cmd, "metrics tables %d %d", t,
                     t + TABLES_A_PART);
            char *part = command(nd, cmd);
            char *both = part ? malloc(strlen(m) + strlen(part) + 1) : NULL;
            if (both)
                strcat(strcpy(both, m), part);
            else if (part)
                snprintf(nd->err, sizeof nd->err, "out of memory");
            free(part);
            free(m);
            m = both;
        }
        if (!m && nd->refused)
            snprintf(nd->err, sizeof nd->err, "%s", err);
    }
    if (!m)
        return -1;
    char *r = command(nd, "rates");
    if (!r) {
        free(m);
        return -1;
    }
    parse_lines(ss, m);
    parse_lines(ss, r);
    free(m);
    free(r);
    return 0;
}

/* ---- printing -------------------------------------------------------------- */

/* s as a JSON string on stdout. The node sends UTF-8 (admin.c replaces
 * any other byte), so only quotes, backslashes and control bytes need
 * escaping. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* 1234567 -> "1.2M" (kept in one of eight rotating buffers, so several
 * fit in one printf). */
static const char *human(double v)
{
    static char bufs[16][32];   /* one printf's worth of figures */
    static int k;
    static const char *const unit[] = { "", "k", "M", "G", "T" };
    char *b = bufs[k++ % 16];
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        u++;
    }
    snprintf(b, 32, u || (v < 100 && v != (double)(long)v) ? "%.1f%s"
                                                           : "%.0f%s",
             v, unit[u]);
    return b;
}

static const char *mib(double bytes)
{
    static char bufs[4][32];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 32, "%.1f MiB", bytes / (1 << 20));
    return b;
}

static double nodev(const samples *ss, const char *name, int i)
{
    char lab[32];
    snprintf(lab, sizeof lab, "node=\"%d\"", i);
    return get(ss, name, lab);
}

/* The sum of name over node i's label sets (e.g. every table's bytes). */
static double sum(const samples *ss, const char *name, int i)
{
    char lab[32];
    double v = 0;
    snprintf(lab, sizeof lab, "node=\"%d\"", i);
    for (int k = 0; k < ss->n; k++)
        if (!strcmp(ss->s[k].name, name) && strstr(ss->s[k].labels, lab))
            v += ss->s[k].v;
    return v;
}

/* Quantile q of node i's service times of kind, in us, from metric
 * (psd_request_service_seconds or its _recent_ form). */
static double lat_us(const samples *ss, const char *metric, int i,
                     const char *kind, const char *q)
{
    char lab[96];
    snprintf(lab, sizeof lab, "node=\"%d\",kind=\"%s\",quantile=\"%s\"", i,
             kind, q);
    return get(ss, metric, lab) * 1e6;
}

static void print_node(const node *nd, int i, const samples *ss)
{
    double up = nodev(ss, "psd_uptime_seconds", i);
    char ver[32];
    get_label(ss, "psd_node_info", i, "version", ver, sizeof ver);
    /* The count psd gives includes the connection this psctl asked on:
     * an operator reading "connections 1" on an idle node took it for a
     * client. */
    double conns = nodev(ss, "psd_connections", i);
    printf("node %d  %s  psd %s  up %dh%02dm%02ds  rss %s  tables %s  "
           "connections %.0f besides psctl's\n", i, nd->addr,
           ver[0] ? ver : "?", (int)(up / 3600),
           (int)(up / 60) % 60, (int)up % 60,
           mib(nodev(ss, "psd_resident_memory_bytes", i)),
           mib(sum(ss, "psd_table_bytes", i)), conns >= 1 ? conns - 1 : 0);
    printf("  requests %s/s (pushes %s/s, pulls %s/s), keys pushed %s/s, "
           "pulled %s/s, errors %s/s\n",
           human(nodev(ss, "psd_requests_per_second", i)),
           human(nodev(ss, "psd_pushes_per_second", i)),
           human(nodev(ss, "psd_pulls_per_second", i)),
           human(nodev(ss, "psd_keys_pushed_per_second", i)),
           human(nodev(ss, "psd_keys_pulled_per_second", i)),
           human(nodev(ss, "psd_request_errors_per_second", i)));
    /* Not from a node of a release before 0.4.5, which counts no bytes. */
    char nl[32];
    snprintf(nl, sizeof nl, "node=\"%d\"", i);
    if (find(ss, "psd_received_bytes_per_second", nl))
        /* psctl's own fetches too (a top on a cluster of many tables
         * reads its own answers there): said, since psd cannot tell its
         * connections from a trainer's (an observability trial). */
        printf("  bytes in %sB/s, out %sB/s (client connections, psctl's "
               "included)\n",
               human(nodev(ss, "psd_received_bytes_per_second", i)),
               human(nodev(ss, "psd_sent_bytes_per_second", i)));
    /* A kind with no request in the window has NaN quantiles: "-". */
    static const char *const kinds[] = { "push", "pull", "pushpull" };
    /* Over the rates' window (the last 10 s); over the node's life from a
     * node of a release before that, which says only that. */
    char lab0[32];
    snprintf(lab0, sizeof lab0, "node=\"%d\"", i);
    const char *metric = "psd_request_service_recent_seconds";
    if (!find(ss, metric, lab0)) {
        metric = "psd_request_service_seconds";
        printf("  service time (since the start):");
    } else
        /* Whole seconds, as the uptime beside it (3.6 s read "last 4 s"
         * next to "up 0h00m03s"). */
        printf("  service time (last %d s):",
               (int)nodev(ss, "psd_rate_window_seconds", i));
    for (int k = 0; k < 3; k++) {
        double p50 = lat_us(ss, metric, i, kinds[k], "0.5");
        double p99 = lat_us(ss, metric, i, kinds[k], "0.99");
        if (isnan(p50) || isnan(p99))
            printf("%s %s -", k ? "," : "", kinds[k]);
        else
            printf("%s %s p50 %.0f us p99 %.0f us", k ? "," : "", kinds[k],
                   p50, p99);
    }
    printf("\n");
    char lab[64];
    snprintf(lab, sizeof lab, "node=\"%d\",state=\"live\"", i);
    double live = get(ss, "psd_workers", lab);
    snprintf(lab, sizeof lab, "node=\"%d\",state=\"gone\"", i);
    double gone = get(ss, "psd_workers", lab);
    snprintf(lab, sizeof lab, "node=\"%d\",state=\"left\"", i);
    double left = get(ss, "psd_workers", lab);
    snprintf(lab, sizeof lab, "node=\"%d\",state=\"absent\"", i);
    double absent = get(ss, "psd_workers", lab);
    /* Those absent too, where a bsp or ssp table waits for them as for
     * the rest (an async cluster's default worker is no news): not in a
     * job now, never joined or back from one that is over ("never
     * joined" read, after every clean job, as if no trainer had come). */
    int sync_tables = 0;
    for (int t = 0; t < nd->layout.ntables; t++)
        sync_tables |= nd->layout.tables[t].consistency != 0;
    /* Live workers whose open has not completed (protocol 4): taken in
     * only at their OPENED. */
    double opening = nodev(ss, "psd_workers_opening", i);
    char op[48] = "";
    if (opening > 0)
        snprintf(op, sizeof op, " (%.0f of them opening)", opening);
    if (sync_tables)
        printf("  workers: %.0f live%s, %.0f lost (in grace), %.0f left, "
               "%.0f not joined; clock %.0f (--json stats: each one's)\n",
               live, op, gone, left, absent, nodev(ss, "psd_clock", i));
    else
        printf("  workers: %.0f live, %.0f lost (in grace), %.0f left; "
               "clock %.0f\n", live, gone, left, nodev(ss, "psd_clock", i));
    char err[256], dur[16], fs[16], dir[256];
    get_label(ss, "psd_snapshot_last_error_info", i, "error", err,
              sizeof err);
    get_label(ss, "psd_node_info", i, "durability", dur, sizeof dur);
    get_label(ss, "psd_node_info", i, "fsync", fs, sizeof fs);
    get_label(ss, "psd_node_info", i, "data_dir", dir, sizeof dir);
    double gen = nodev(ss, "psd_snapshot_generation", i);
    /* One this process did not write: the times below would be zeros,
     * read as a snapshot written in no time. */
    if (gen > 0 && nodev(ss, "psd_snapshots_total", i) == 0)
        printf("  snapshot %.0f in %s, %.0f s old (loaded at start), %.0f "
               "failed", gen, dir, nodev(ss, "psd_snapshot_age_seconds", i),
               nodev(ss, "psd_snapshot_failures_total", i));
    else if (gen > 0)
        printf("  snapshot %.0f in %s, %.0f s old, took %.2f s (fork "
               "%.2f ms), %.0f failed", gen, dir,
               nodev(ss, "psd_snapshot_age_seconds", i),
               nodev(ss, "psd_snapshot_last_duration_seconds", i),
               nodev(ss, "psd_snapshot_last_fork_seconds", i) * 1e3,
               nodev(ss, "psd_snapshot_failures_total", i));
    else
        printf("  no snapshot yet in %s, %.0f failed", dir,
               nodev(ss, "psd_snapshot_failures_total", i));
    printf("%s%s\n", err[0] ? "; last error: " : "", err);
    /* psctl save --timeout sends here a snapshot still being written. */
    double running = nodev(ss, "psd_snapshot_running_seconds", i);
    if (running > 0)
        printf("  snapshot %.0f being written, for %.1f s\n", gen + 1,
               running);
    if (!strcmp(dur, "log")) {
        char jerr[1024];
        get_label(ss, "psd_journal_error_info", i, "error", jerr,
                  sizeof jerr);
        printf("  journal (fsync = %s): segment %s, %.0f fsyncs, longest "
               "%.2f ms, %.0f write errors%s%s\n", fs,
               mib(nodev(ss, "psd_journal_bytes", i)),
               nodev(ss, "psd_journal_fsyncs_total", i),
               nodev(ss, "psd_journal_fsync_seconds_max", i) * 1e3,
               nodev(ss, "psd_journal_write_errors_total", i),
               jerr[0] ? "; FAILING: " : "", jerr);
    } else
        printf("  no journal (durability = snapshot)\n");
    char rerr[700];
    get_label(ss, "psd_config_reload_error_info", i, "error", rerr,
              sizeof rerr);
    if (rerr[0])
        printf("  last reload FAILED, running the previous configuration: "
               "%s\n", rerr);
}

/* For each sample, the index of the table its `table` label names in l,
 * or -1: one look-up per sample in the names sorted (a walk over every
 * sample for every table took 13 s for 4096 tables). NULL when out of
 * memory; the caller frees it. */
static const psw_cluster *by_name_l;

static int by_name(const void *a, const void *b)
{
    return strcmp(by_name_l->tables[*(const int *)a].name,
                  by_name_l->tables[*(const int *)b].name);
}

static int *table_of_samples(const psw_cluster *l, const samples *all)
{
    int *order = malloc((size_t)(l->ntables ? l->ntables : 1) * sizeof *order);
    int *of = malloc((size_t)(all->n ? all->n : 1) * sizeof *of);
    if (!order || !of) {
        free(order);
        free(of);
        return NULL;
    }
    for (int t = 0; t < l->ntables; t++)
        order[t] = t;
    by_name_l = l;
    qsort(order, (size_t)l->ntables, sizeof *order, by_name);
    for (int i = 0; i < all->n; i++) {
        char name[PSW_NAME_MAX + 2];
        label_value(all->s[i].labels, "table", name, sizeof name);
        of[i] = -1;
        for (int lo = 0, hi = l->ntables - 1; name[0] && lo <= hi;) {
            int mid = lo + (hi - lo) / 2;
            int c = strcmp(name, l->tables[order[mid]].name);
            if (!c) {
                of[i] = order[mid];
                break;
            }
            if (c < 0)
                hi = mid - 1;
            else
                lo = mid + 1;
        }
    }
    free(order);
    return of;
}

/* The limits and init of a psd_table_info sample, which nodes may hold
 * apart with no client able to tell: nonfinite, max_rows, init and seed
 * where they are not the defaults (reject, 0 = no limit, zeros, 0), as
 * "nonfinite allow, seed 7" (empty when all are). Returns whether the
 * sample carries them (nodes of a release before them do not). */
static int table_limits(const char *labels, char *out, size_t len)
{
    static const char *const keys[] = { "nonfinite", "max_rows", "init",
                                        "seed" };
    static const char *const defaults[] = { "reject", "0", "zeros", "0" };
    size_t at = 0;
    int has = 0;
    out[0] = '\0';
    for (int k = 0; k < 4; k++) {
        char v[64];
        label_value(labels, keys[k], v, sizeof v);
        has |= v[0] != '\0';
        if (!v[0] || !strcmp(v, defaults[k]) || at >= len)
            continue;
        int w = snprintf(out + at, len - at, "%s%s %s", at ? ", " : "",
                         keys[k], v);
        at = w < 0 ? len : at + (size_t)w;
    }
    return has;
}

/* "params, limits", either part possibly empty; "-" when both are. */
static const char *joined(const char *params, const char *limits, char *out,
                          size_t len)
{
    snprintf(out, len, "%s%s%s", params, params[0] && limits[0] ? ", " : "",
             limits);
    return out[0] ? out : "-";
}

/* Per table, its updater and the settings in force, as the first node
 * that answered has them, and every other node whose differ (a reload
 * that reached only some nodes). Limits and init are those of the first
 * node that reports them: a node of an older release (node 0 not yet
 * upgraded, say) neither shows nor hides them. */
static void print_params(const psw_cluster *l, const samples *all)
{
    printf("%-20s %-8s %s\n", "table", "updater",
           "hyper-parameters and limits in force");
    int *of = table_of_samples(l, all);
    int *first = malloc((size_t)(l->ntables ? l->ntables : 1) * sizeof *first);
    if (!of || !first) {
        printf("(out of memory)\n");
        free(of);
        free(first);
        return;
    }
    for (int t = 0; t < l->ntables; t++)
        first[t] = -1;
    for (int i = 0; i < all->n; i++)
        if (of[i] >= 0 && first[of[i]] < 0 &&
            !strcmp(all->s[i].name, "psd_table_info"))
            first[of[i]] = i;
    /* The other nodes' samples of a table come after its first, so one
     * walk from there finds them; tables are printed in the layout's
     * order. */
    for (int t = 0; t < l->ntables; t++) {
        if (first[t] < 0)
            continue;
        char params[192], lim[192] = "", upd[32], line[400], at[16];
        const char *head = all->s[first[t]].labels;
        label_value(head, "updater", upd, sizeof upd);
        label_value(head, "params", params, sizeof params);
        int has = 0;
        for (int i = first[t]; i < all->n && !has; i++)
            if (of[i] == t && !strcmp(all->s[i].name, "psd_table_info"))
                has = table_limits(all->s[i].labels, lim, sizeof lim);
        printf("%-20s %-8s %s\n", l->tables[t].name, upd,
               joined(params, lim, line, sizeof line));
        for (int i = first[t] + 1; i < all->n; i++) {
            const sample *s = &all->s[i];
            if (of[i] != t || strcmp(s->name, "psd_table_info"))
                continue;
            char p2[192], l2[192];
            label_value(s->labels, "params", p2, sizeof p2);
            int has2 = table_limits(s->labels, l2, sizeof l2);
            label_value(s->labels, "node", at, sizeof at);
            if (strcmp(p2, params) || (has && has2 && strcmp(l2, lim)))
                printf("%-20s %-8s node %s differs: %s\n", "", "", at,
                       joined(p2, l2, line, sizeof line));
        }
    }
    free(of);
    free(first);
}

/* Per table, summed over the nodes that answered. */
static void print_tables(const psw_cluster *l, const samples *all)
{
    printf("%-20s %-6s %6s %12s %12s %9s %9s %10s %10s\n", "table", "kind",
           "dim", "rows", "memory", "pushes/s", "pulls/s", "keys in/s",
           "keys out/s");
    static const char *const names[] = {
        "psd_table_rows", "psd_table_bytes", "psd_table_pushes_per_second",
        "psd_table_pulls_per_second", "psd_table_keys_pushed_per_second",
        "psd_table_keys_pulled_per_second" };
    enum { NF = sizeof names / sizeof names[0] };
    int *of = table_of_samples(l, all);
    double (*sum)[NF] = calloc((size_t)(l->ntables ? l->ntables : 1),
                               sizeof *sum);
    if (!of || !sum) {
        printf("(out of memory)\n");
        free(of);
        free(sum);
        return;
    }
    for (int i = 0; i < all->n; i++)
        for (int k = 0; of[i] >= 0 && k < NF; k++)
            if (!strcmp(all->s[i].name, names[k])) {
                sum[of[i]][k] += all->s[i].v;
                break;
            }
    for (int t = 0; t < l->ntables; t++) {
        const psw_table_desc *d = &l->tables[t];
        printf("%-20s %-6s %6u %12.0f %12s %9s %9s %10s %10s\n", d->name,
               d->dense ? "dense" : "sparse", d->dim, sum[t][0],
               mib(sum[t][1]), human(sum[t][2]), human(sum[t][3]),
               human(sum[t][4]), human(sum[t][5]));
    }
    free(of);
    free(sum);
}

/* ---- commands ------------------------------------------------------------ */

typedef struct cluster {
    node *nodes;
    int n;
    int only;                    /* -n: one node, or -1 */
    int from_ini;                /* the nodes are an ini's (-c), not -s */
} cluster;

/* The index node i of psctl's list goes by: its own once it answered (a
 * -s list may name any nodes in any order, and the figures are labelled
 * with node="index"), else its place in the list (the ini's index). */
static int id(const cluster *c, int i)
{
    return c->nodes[i].index >= 0 ? c->nodes[i].index : i;
}

/* Whether node i's index is known: it answered, or the nodes are an
 * ini's. A -s entry that never answered is no node of a known index (it
 * read "node 0" for the second entry of a list when it was down, "node
 * 1" when up): it goes by its address. */
static int index_known(const cluster *c, int i)
{
    return c->nodes[i].index >= 0 || c->from_ini;
}

/* Says node i's error on stderr, as "node N (ADDR)", or "ADDR" where its
 * index is not known. */
static void say_err(const cluster *c, int i, const char *err)
{
    if (index_known(c, i))
        fprintf(stderr, "psctl: node %d (%s): %s\n", id(c, i),
                c->nodes[i].addr, err);
    else
        fprintf(stderr, "psctl: %s: %s\n", c->nodes[i].addr, err);
}

/* `"node": N` of node i for JSON, null where its index is not known. */
static void json_node(const cluster *c, int i)
{
    if (index_known(c, i))
        printf("\"node\": %d", id(c, i));
    else
        printf("\"node\": null");
}

/* A PING, so that the node does not take a quiet psctl for a dead peer
 * (peer_timeout_ms). 0 or -1 with nd->err. */
static int ping_node(node *nd)
{
    psw_msg m = { .op = PSW_OP_PING };
    return send_request(nd, &m);
}

/* Entry i answered as a node it is not (nodes[i].err says why): closed,
 * and labelled by its place from here on. */
static void not_this_node(cluster *c, int i, int quiet)
{
    c->nodes[i].index = -1;
    node_close(&c->nodes[i]);
    if (!quiet)
        say_err(c, i, c->nodes[i].err);
}

/* Every node is sent its HELLO before psctl waits for any answer, and
 * all answers share one reply_ms: nodes that accept and hang (stopped,
 * or a loop stuck) cost that time once, not once each. */
/* A psd reached at two of the addresses asked (one address written two
 * ways, such as localhost and 127.0.0.1, in an ini whose node at the
 * second is not running, or in a -s list): two entries answering as one
 * node of one layout. Asked twice, it was listed, saved and counted
 * twice, and the node missing never said so. The second is closed as not
 * answering: 1 when one was. (An ini's entry answering as another index
 * than its place: crossed_nodes.) */
static int same_node_twice(cluster *c, int quiet)
{
    int bad = 0;
    for (int i = 0; i < c->n; i++) {
        node *nd = &c->nodes[i];
        if (nd->fd < 0 || nd->index < 0)
            continue;
        int j = 0;
        while (j < i && (c->nodes[j].fd < 0 || c->nodes[j].index != nd->index ||
                         c->nodes[j].layout.epoch != nd->layout.epoch))
            j++;
        if (j == i)
            continue;
        snprintf(nd->err, sizeof nd->err, "the psd at this address is node "
                 "%d, already asked at %.200s (one address written two "
                 "ways?)", nd->index, c->nodes[j].addr);
        not_this_node(c, i, quiet);
        bad = 1;
    }
    return bad;
}

/* With an ini's nodes (-c), the psd reached at node i's address must be
 * node i, as libpsclient requires: with nodes and listen crossed, psctl
 * ping said "pong" from both nodes, exit 0, while every trainer's
 * ps_open failed (an addressing trial). One of another node count runs
 * another ini, which the layout check says. 1 when one was closed. */
static int crossed_nodes(cluster *c, int quiet)
{
    int bad = 0;
    for (int i = 0; c->from_ini && i < c->n; i++) {
        node *nd = &c->nodes[i];
        if (nd->fd < 0 || nd->index < 0 || nd->index == i ||
            nd->layout.nnodes != c->n)
            continue;
        snprintf(nd->err, sizeof nd->err, "the psd at this address is node "
                 "%d, where the ini's nodes list puts node %d (nodes and "
                 "listen crossed, one address written two ways, or a name "
                 "resolving to another node's address?): clients refuse "
                 "it", nd->index, i);
        not_this_node(c, i, quiet);
        bad = 1;
    }
    return bad;
}

/* wait_ms: how long the handshakes may take (reply_ms; top redialling
 * the nodes that did not answer waits a refresh's interval). */
static int open_all(cluster *c, int quiet, int wait_ms)
{
    int bad = 0;
    char *asked = calloc((size_t)c->n, 1);   /* 1: its handshake awaited */
    if (!asked) {
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    for (int i = 0; i < c->n; i++) {
        if ((c->only >= 0 && i != c->only) || c->nodes[i].fd >= 0)
            continue;
        if (node_open(&c->nodes[i])) {
            if (!quiet)
                say_err(c, i, c->nodes[i].err);
            bad = 1;
        } else
            asked[i] = 1;
    }
    /* Whichever node speaks is answered at once: a node with a token
     * waits for our AUTH only hello_timeout, however long another takes. */
    struct pollfd *p = calloc((size_t)c->n, sizeof *p);
    int *at = calloc((size_t)c->n, sizeof *at);
    uint64_t deadline = now_ms() + (uint64_t)wait_ms;
    for (;;) {
        int np = 0;
        for (int i = 0; p && at && i < c->n; i++)
            if (asked[i] == 1) {
                p[np] = (struct pollfd){ c->nodes[i].fd, POLLIN, 0 };
                at[np++] = i;
            }
        uint64_t t = now_ms();
        if (np == 0 || t >= deadline)
            break;
        /* The nodes done meanwhile, and those open before (psctl top
         * redialling the nodes that did not answer), are kept alive, in
         * slices as receive_until does. */
        keep_alive();
        uint64_t ms = deadline - t < 250 ? deadline - t : 250;
        if (poll(p, (nfds_t)np, (int)ms) < 0 && errno != EINTR)
            break;
        for (int k = 0; k < np; k++) {
            int i = at[k], rc;
            if (!p[k].revents || (rc = node_handshake(&c->nodes[i])) > 0)
                continue;
            asked[i] = 0;
            if (rc < 0) {
                if (!quiet)
                    say_err(c, i, c->nodes[i].err);
                bad = 1;
            }
        }
    }
    for (int i = 0; i < c->n; i++)
        if (asked[i] == 1) {     /* no answer in time (or no memory) */
            snprintf(c->nodes[i].err, sizeof c->nodes[i].err,
                     p && at ? "no answer within %g s (--wait SECS waits "
                               "longer)" : "out of memory",
                     wait_ms / 1000.0);
            node_close(&c->nodes[i]);
            if (!quiet)
                say_err(c, i, c->nodes[i].err);
            bad = 1;
        }
    bad |= same_node_twice(c, quiet);
    bad |= crossed_nodes(c, quiet);
    free(p);
    free(at);
    free(asked);
    return bad;
}

static int want(const cluster *c, int i)
{
    return (c->only < 0 || i == c->only) && c->nodes[i].fd >= 0;
}

/* A node that failed a command is closed, so the next round redials it. */
static void failed(cluster *c, int i)
{
    say_err(c, i, c->nodes[i].err);
    node_close(&c->nodes[i]);
}

/* Nodes that answered with different layout epochs run different inis
 * (a rolling restart half done, a node moved with only some nodes told):
 * each node's own view looks healthy, yet clients refuse the mix. Says
 * which nodes hold which layout on stderr; 1 when they differ. */
static int layouts_differ(const cluster *c)
{
    int first = -1, differ = 0;
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].fd >= 0) {
            if (first < 0)
                first = i;
            else if (c->nodes[i].layout.epoch != c->nodes[first].layout.epoch)
                differ = 1;
        }
    if (!differ)
        return 0;
    fprintf(stderr, "psctl: the nodes disagree on the layout, so clients "
            "refuse to connect until every node runs the same ini (restart "
            "the others with it):\n");
    for (int i = 0; i < c->n; i++) {
        const psw_cluster *l = &c->nodes[i].layout;
        if (c->nodes[i].fd < 0)
            continue;
        fprintf(stderr, "  node %d (%s): epoch %016llx, %d node%s, %u "
                "shards, tables", id(c, i), c->nodes[i].addr,
                (unsigned long long)l->epoch, l->nnodes,
                l->nnodes == 1 ? "" : "s", l->shards);
        /* Each table's shape too: a changed dim or rows is what differs
         * most often, and the names alone would not show it. */
        static const char *const cons[] = { "async", "bsp", "ssp" };
        for (int t = 0; t < l->ntables; t++) {
            const psw_table_desc *d = &l->tables[t];
            fprintf(stderr, "%s %s (%s, dim %u", t ? "," : "", d->name,
                    d->dense ? "dense" : "sparse", d->dim);
            if (d->dense)
                fprintf(stderr, ", %llu rows", (unsigned long long)d->rows);
            fprintf(stderr, ", %s)", d->consistency >= 0 &&
                                     d->consistency <= 2
                                         ? cons[d->consistency] : "?");
        }
        for (int k = 0; k < l->nnodes; k++)
            fprintf(stderr, "%s%s", k ? ", " : "; nodes ", l->nodes[k]);
        fprintf(stderr, "\n");
    }
    /* What the epoch holds beyond the lines above. */
    fprintf(stderr, "  (the epoch also holds each table's updater, "
            "staleness and aggregate, and [cluster] workers: lines alike "
            "above differ in those, or the nodes run releases that do not "
            "agree on what the epoch holds (psctl stats shows each node's "
            "release; README, \"Upgrading psd\"))\n");
    return 1;
}

/* With json, a JSON array of {"node", "address", "ms"}, one per node
 * that answered (like --json stats, the others are said on stderr). */
static int do_ping(cluster *c, int json)
{
    int bad = 0, first = 1;
    if (json)
        printf("[");
    for (int i = 0; i < c->n; i++) {
        if (!want(c, i))
            continue;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        char *r = command(&c->nodes[i], "ping");
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (!r) {
            failed(c, i);
            bad = 1;
            continue;
        }
        double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 +
                    (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        if (json) {
            printf("%s{", first ? "" : ",\n");
            json_node(c, i);
            printf(", \"address\": ");
            json_str(c->nodes[i].addr);
            printf(", \"ms\": %.3f}", ms);
        } else
            printf("node %d (%s): %.*s in %.3f ms\n", id(c, i),
                   c->nodes[i].addr,
                   (int)strcspn(r, "\n"), r, ms);
        first = 0;
        free(r);
    }
    if (json)
        printf("]\n");
    return bad;
}

static const psw_cluster *any_layout(const cluster *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i].fd >= 0)
            return &c->nodes[i].layout;
    return NULL;
}

/* Whether the addresses a and b ("host:port" texts) are one place: the
 * same port, and hosts alike or resolving to a common address (an -s
 * entry "localhost:7071" is the layout's "127.0.0.1:7071"). */
static int same_place(const char *a, const char *b)
{
    psw_addr x, y;
    char why[128];
    if (psw_addr_parse(a, strlen(a), &x, why, sizeof why) ||
        psw_addr_parse(b, strlen(b), &y, why, sizeof why) || x.port != y.port)
        return 0;
    if (psw_addr_same(&x, &y))
        return 1;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ra, *rb;
    if (getaddrinfo(x.host, NULL, &hints, &ra))
        return 0;
    if (getaddrinfo(y.host, NULL, &hints, &rb)) {
        freeaddrinfo(ra);
        return 0;
    }
    /* Resolved without a service, both have port 0: the whole sockaddrs
     * compare. */
    int same = 0;
    for (const struct addrinfo *p = ra; p && !same; p = p->ai_next)
        for (const struct addrinfo *q = rb; q && !same; q = q->ai_next)
            same = p->ai_addrlen == q->ai_addrlen &&
                   !memcmp(p->ai_addr, q->ai_addr, p->ai_addrlen);
    freeaddrinfo(ra);
    freeaddrinfo(rb);
    return same;
}

/* The node psctl asked that is node i of layout l and answered, or NULL;
 * *asked (may be NULL) says whether psctl asked it at all (every node
 * with -c; -n asks one). */
static const node *node_of(const cluster *c, const psw_cluster *l, int i,
                           int *asked)
{
    const node *found = NULL;
    if (asked)
        *asked = 0;
    for (int k = 0; k < c->n; k++) {
        /* One that never answered has no number of its own: with -c its
         * place is its number; with -s, it is the node whose address it
         * is, written alike or resolving alike (its place in the list
         * named another node). */
        const node *nd = &c->nodes[k];
        if (c->only >= 0 && k != c->only)
            continue;            /* -n: the others were not asked */
        int is = nd->index >= 0 || c->from_ini
                     ? id(c, k) == i
                     : same_place(nd->addr, l->nodes[i]);
        if (is) {
            if (asked)
                *asked = 1;
            if (nd->fd >= 0 && !found)
                found = nd;
        }
    }
    return found;
}

static int do_layout(cluster *c, int json)
{
    const psw_cluster *l = any_layout(c);
    if (!l) {
        if (json)                /* still one JSON document */
            printf("null\n");
        return 1;
    }
    static const char *const cons[] = { "async", "bsp", "ssp" };
    /* The node psctl asked that is each layout node and answered, found
     * once (with -s, finding it may resolve names). */
    const node **who = calloc((size_t)l->nnodes + 1, sizeof *who);
    int *asked = calloc((size_t)l->nnodes + 1, sizeof *asked);
    if (!who || !asked) {
        free(who);
        free(asked);
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    for (int i = 0; i < l->nnodes; i++)
        who[i] = node_of(c, l, i, &asked[i]);
    if (json) {
        /* The epoch as the text output writes it, a string of 16 hex
         * digits: as a JSON number, a 64-bit value is rounded by jq and
         * JavaScript (doubles), and two layouts could read the same. */
        printf("{\"epoch\": \"%016llx\", \"shards\": %u, "
               "\"max_frame\": %llu, \"heartbeat_ms\": %u, "
               "\"peer_timeout_ms\": %u, \"nodes\": [",
               (unsigned long long)l->epoch, l->shards,
               (unsigned long long)l->max_frame, l->heartbeat_ms,
               l->peer_timeout_ms);
        for (int i = 0; i < l->nnodes; i++)
            printf("%s\"%s\"", i ? ", " : "", l->nodes[i]);
        /* Each node's own (a node may run with another max_frame or
         * max_client_memory, which bounds it): null where not asked or
         * not answering. */
        printf("], \"node_max_frame\": [");
        for (int i = 0; i < l->nnodes; i++) {
            if (who[i])
                printf("%s%llu", i ? ", " : "",
                       (unsigned long long)who[i]->layout.max_frame);
            else
                printf("%snull", i ? ", " : "");
        }
        printf("], \"tables\": [");
        for (int t = 0; t < l->ntables; t++) {
            const psw_table_desc *d = &l->tables[t];
            printf("%s{\"id\": %u, \"name\": \"%s\", \"kind\": \"%s\", "
                   "\"dim\": %u, \"rows\": %llu, \"consistency\": \"%s\"}",
                   t ? ", " : "", d->id, d->name, d->dense ? "dense" : "sparse",
                   d->dim, (unsigned long long)d->rows, cons[d->consistency]);
        }
        printf("]}\n");
        free(who);
        free(asked);
        return 0;
    }
    /* One max_frame for all where the nodes that answered agree; else
     * each node's on its line (a node restarted with a smaller max_frame
     * or max_client_memory tells clients its own). */
    unsigned long long mf = 0;
    int mixed = 0;
    for (int i = 0; i < l->nnodes; i++) {
        if (!who[i])
            continue;
        mixed |= mf && mf != who[i]->layout.max_frame;
        mf = who[i]->layout.max_frame;
    }
    if (!mf)
        mf = l->max_frame;
    char frame[64] = "max_frame by node";
    if (!mixed)
        snprintf(frame, sizeof frame, "max_frame %llu", mf);
    printf("%d node%s, %u shard%s (shard s on node s mod %d), %s, "
           "heartbeat %u ms, peer timeout %u ms, layout epoch %016llx\n",
           l->nnodes, l->nnodes == 1 ? "" : "s", l->shards,
           l->shards == 1 ? "" : "s", l->nnodes, frame,
           l->heartbeat_ms,
           l->peer_timeout_ms, (unsigned long long)l->epoch);
    for (int i = 0; i < l->nnodes; i++) {
        /* Said only of the nodes psctl asked (all of them with -c). */
        char own[48] = "";
        if (mixed && who[i])
            snprintf(own, sizeof own, "  max_frame %llu",
                     (unsigned long long)who[i]->layout.max_frame);
        printf("  node %d  %s%s%s\n", i, l->nodes[i], own,
               asked[i] && !who[i] ? "  (not answering)" : "");
    }
    free(who);
    free(asked);
    for (int t = 0; t < l->ntables; t++) {
        const psw_table_desc *d = &l->tables[t];
        printf("  table %-20s %-6s dim %u", d->name,
               d->dense ? "dense" : "sparse", d->dim);
        if (d->dense)
            printf(", %llu rows", (unsigned long long)d->rows);
        printf(", %s\n", cons[d->consistency]);
    }
    return 0;
}

/* Every node's metrics and rates into one sample list. */
static int fetch_all(cluster *c, samples *all)
{
    int bad = 0;
    for (int i = 0; i < c->n; i++) {
        if (!want(c, i))
            continue;
        /* Figures are found by node number: another cluster's node of a
         * number asked already (-s naming two clusters) would be shown
         * with the first one's figures. */
        int j = 0;
        while (j < i && (!want(c, j) || c->nodes[j].index < 0 ||
                         c->nodes[j].index != c->nodes[i].index))
            j++;
        if (j < i) {
            c->nodes[i].shadowed = 1;
            snprintf(c->nodes[i].err, sizeof c->nodes[i].err, "another "
                     "cluster's node %d was asked first (at %.120s): its "
                     "figures are not shown (give -s one cluster's nodes)",
                     c->nodes[i].index, c->nodes[j].addr);
            failed(c, i);
            bad = 1;
            continue;
        }
        if (fetch(&c->nodes[i], all)) {
            failed(c, i);
            bad = 1;
        }
    }
    return bad;
}

/* The table figures are sums over the nodes that answered: when some did
 * not (or -n picked one), the sums are not the cluster's, and a reader
 * of the table alone (stderr may go elsewhere) must be told so. */
static void print_coverage(const cluster *c)
{
    int asked = 0, missing = 0, shadowed = 0;
    for (int i = 0; i < c->n; i++)
        if (c->only < 0 || i == c->only) {
            asked++;
            shadowed += c->nodes[i].shadowed;
            missing += c->nodes[i].fd < 0 && !c->nodes[i].shadowed;
        }
    if (shadowed)
        printf("partial: %d of %d addresses asked are another cluster's "
               "node of a number shown already: not counted\n", shadowed,
               asked);
    if (missing) {
        printf("partial: %d of %d node%s did not answer (", missing, asked,
               asked == 1 ? "" : "s");
        const char *sep = "";
        for (int i = 0; i < c->n; i++)
            if ((c->only < 0 || i == c->only) && c->nodes[i].fd < 0 &&
                !c->nodes[i].shadowed) {
                printf("%snode %d", sep, id(c, i));
                sep = ", ";
            }
        printf("): rows, memory and rates are the others' sums\n");
    } else if (c->only >= 0 && c->n > 1) {
        printf("node %d only (-n): rows, memory and rates are its share "
               "of %d nodes\n", id(c, c->only), c->n);
    } else if (c->only < 0) {
        /* -s may name fewer nodes than the cluster has: each node says
         * how many there are. */
        int total = 0;
        for (int i = 0; i < c->n && !total; i++)
            if (c->nodes[i].fd >= 0)
                total = c->nodes[i].layout.nnodes;
        if (total > c->n && c->from_ini)
            printf("%d of the cluster's %d nodes asked (the ini names "
                   "%d): rows, memory and rates are their share\n", c->n,
                   total, c->n);
        else if (total > c->n)
            printf("%d of the cluster's %d nodes asked (-s): rows, memory "
                   "and rates are their share (-c INI asks every node)\n",
                   c->n, total);
    }
}

static int do_stats(cluster *c, int json, int tables_too)
{
    int bad = 0;
    if (json) {
        printf("[");
        int first = 1;
        for (int i = 0; i < c->n; i++) {
            if (!want(c, i))
                continue;
            char *r = command(&c->nodes[i], "stats");
            if (!r) {
                failed(c, i);
                bad = 1;
                continue;
            }
            printf("%s%s", first ? "" : ",\n", r);
            first = 0;
            free(r);
        }
        printf("]\n");
        return bad;
    }
    samples all = { 0 };
    bad = fetch_all(c, &all);
    for (int i = 0; i < c->n; i++)
        if (want(c, i))
            print_node(&c->nodes[i], id(c, i), &all);
    const psw_cluster *l = any_layout(c);
    if (tables_too && l) {
        printf("\n");
        print_tables(l, &all);
        print_coverage(c);
        print_params(l, &all);
    }
    samples_free(&all);
    return bad;
}

static int do_tables(cluster *c, int json)
{
    if (json)
        return do_stats(c, 1, 0);
    samples all = { 0 };
    int bad = fetch_all(c, &all);
    const psw_cluster *l = any_layout(c);
    if (l) {
        print_tables(l, &all);
        print_coverage(c);
        print_params(l, &all);
    }
    samples_free(&all);
    return bad || !l;
}

/* What became of one node's save. */
typedef struct saved {
    enum { S_NONE, S_WAITING, S_WRITTEN, S_FAILED } state;
    int current;                 /* the node's newest snapshot was current:
                                    nothing new was written */
    double gen, fails, secs;
    char dir[256], err[sizeof ((node *)0)->err];
} saved;

/* Asks every node to save, then waits until each one's snapshot
 * generation reaches the one it started, or its failures grow (a node
 * whose newest snapshot is current answers with it, and writes none).
 * People get a line per node as it finishes; with json, a JSON array in
 * node order once all have, of {"node", "address", "generation", "ok",
 * "current"} with
 * "seconds" and "data_dir" when it was written and "error" when not (a
 * failed snapshot, or one still being written at the timeout). Nodes that
 * stop answering are said on stderr, as for --json stats. */
static int do_save(cluster *c, int timeout_s, int json)
{
    int bad = 0;
    saved *sv = calloc((size_t)c->n, sizeof *sv);
    if (!sv) {
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    int waiting = 0;
    for (int i = 0; i < c->n; i++) {
        if (!want(c, i))
            continue;
        samples ss = { 0 };
        if (fetch(&c->nodes[i], &ss)) {
            failed(c, i);
            bad = 1;
            continue;
        }
        sv[i].fails = nodev(&ss, "psd_snapshot_failures_total", id(c, i));
        samples_free(&ss);
        char *r = command(&c->nodes[i], "save");
        if (!r) {
            /* A node that refused answered: it is listed, with why. */
            if (c->nodes[i].refused) {
                sv[i].state = S_FAILED;
                snprintf(sv[i].err, sizeof sv[i].err, "%s",
                         c->nodes[i].err);
            }
            failed(c, i);
            bad = 1;
            continue;
        }
        const char *g = strstr(r, "\"generation\": ");
        sv[i].gen = g ? strtod(g + 14, NULL) : 0;
        sv[i].current = strstr(r, "\"current\": true") != NULL;
        sv[i].state = S_WAITING;
        free(r);
        waiting++;
    }
    uint64_t deadline = now_ms() + (uint64_t)timeout_s * 1000;
    while (waiting) {
        for (int i = 0; i < c->n; i++) {
            if (!want(c, i) || sv[i].state != S_WAITING)
                continue;
            samples ss = { 0 };
            if (fetch(&c->nodes[i], &ss)) {
                /* Gone while it wrote: a psd stopping (SIGTERM) closes
                 * its connections, lets the writer finish, then writes a
                 * final snapshot if anything changed since, which
                 * "connection lost" alone did not say (and "writes a
                 * final one instead" was wrong: a big-model trial). */
                size_t k = strlen(c->nodes[i].err);
                if (!sv[i].current && strstr(c->nodes[i].err, "closed"))
                    snprintf(c->nodes[i].err + k,
                             sizeof c->nodes[i].err - k,
                             " (before it said that its snapshot %.0f was "
                             "written, which it may have been: its log "
                             "says. A psd that is stopping finishes that "
                             "snapshot, then writes a final one if anything "
                             "changed since; one killed, by the kernel's "
                             "OOM killer under a memory limit say, says "
                             "nothing: dmesg does)", sv[i].gen);
                failed(c, i);
                sv[i].state = S_NONE;
                bad = 1;
                waiting--;
                continue;
            }
            int me = id(c, i);
            double now = nodev(&ss, "psd_snapshot_generation", me);
            if (now >= sv[i].gen) {
                sv[i].state = S_WRITTEN;
                sv[i].gen = now;
                sv[i].secs = nodev(&ss, "psd_snapshot_last_duration_seconds",
                                   me);
                get_label(&ss, "psd_node_info", me, "data_dir", sv[i].dir,
                          sizeof sv[i].dir);
                if (!json && sv[i].current)
                    printf("node %d (%s): snapshot %.0f in %s is current "
                           "(nothing changed since it was written)\n", me,
                           c->nodes[i].addr, now, sv[i].dir);
                else if (!json)
                    printf("node %d (%s): snapshot %.0f written in %.2f s "
                           "to %s\n", me, c->nodes[i].addr, now, sv[i].secs,
                           sv[i].dir);
                waiting--;
            } else if (nodev(&ss, "psd_snapshot_failures_total", me) >
                       sv[i].fails) {
                sv[i].state = S_FAILED;
                get_label(&ss, "psd_snapshot_last_error_info", me, "error",
                          sv[i].err, sizeof sv[i].err);
                if (!json)
                    printf("node %d (%s): snapshot %.0f FAILED: %s (the "
                           "previous one is kept)\n", me, c->nodes[i].addr,
                           sv[i].gen, sv[i].err);
                waiting--;
                bad = 1;
            }
            samples_free(&ss);
        }
        if (waiting && now_ms() > deadline) {
            fprintf(stderr, "psctl: %d node(s) still writing after %d s\n",
                    waiting, timeout_s);
            for (int i = 0; i < c->n; i++)
                if (sv[i].state == S_WAITING) {
                    sv[i].state = S_FAILED;
                    snprintf(sv[i].err, sizeof sv[i].err, "still writing "
                             "after %d s", timeout_s);
                    if (!json)
                        printf("node %d (%s): snapshot %.0f still being "
                               "written after %d s (--timeout): see psctl "
                               "stats\n", id(c, i), c->nodes[i].addr,
                               sv[i].gen, timeout_s);
                }
            bad = 1;
            break;
        }
        if (waiting)
            usleep(100 * 1000);
    }
    if (json) {
        int first = 1;
        printf("[");
        for (int i = 0; i < c->n; i++) {
            if (sv[i].state == S_NONE)
                continue;
            printf("%s{", first ? "" : ",\n");
            json_node(c, i);
            printf(", \"address\": ");
            json_str(c->nodes[i].addr);
            printf(", \"generation\": %.0f, \"ok\": %s, \"current\": %s",
                   sv[i].gen, sv[i].state == S_WRITTEN ? "true" : "false",
                   sv[i].current ? "true" : "false");
            if (sv[i].state == S_WRITTEN) {
                printf(", \"seconds\": %.3f, \"data_dir\": ", sv[i].secs);
                json_str(sv[i].dir);
            } else {
                printf(", \"error\": ");
                json_str(sv[i].err);
            }
            printf("}");
            first = 0;
        }
        printf("]\n");
    }
    free(sv);
    return bad;
}

static volatile sig_atomic_t stop;

/* Whether stdout took what was written so far; the first failure's errno
 * is kept (later calls change errno; EPIPE, a reader that went, is not
 * worth a word). SIGPIPE is ignored, so this is how a gone reader shows. */
static int out_errno;
/* Whether fd 1 was closed when psctl started: psd_hold_std_fds put
 * /dev/null there, which takes every write, so psctl said nothing and
 * exited 0 (and top ran for ever) with its output thrown away. */
static int out_closed;

static int stdout_ok(void)
{
    if (out_closed) {
        out_errno = EBADF;
        return 0;
    }
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 1;
    if (!out_errno)
        out_errno = errno ? errno : EIO;
    return 0;
}

static void on_int(int sig)
{
    (void)sig;
    stop = 1;
}

/* A PING to every open node. A node closes a connection it hears
 * nothing on for peer_timeout_ms as a dead peer's; one that fails is
 * closed here, and the next round redials it. */
static void ping_all(cluster *c)
{
    for (int i = 0; i < c->n; i++)
        if (want(c, i) && ping_node(&c->nodes[i]))
            node_close(&c->nodes[i]);
}

/* Sleeps secs (or until Ctrl-C), with a PING every heartbeat_ms as the
 * reference client sends, so that a refresh interval longer than
 * peer_timeout_ms does not cost the connections. */
static void idle(cluster *c, double secs)
{
    const psw_cluster *l = any_layout(c);
    double beat = l && l->heartbeat_ms ? l->heartbeat_ms / 1000.0 : 1.0;
    while (secs > 0 && !stop) {
        double d = secs < beat ? secs : beat;
        struct timespec t = { (time_t)d,
                              (long)((d - (double)(time_t)d) * 1e9) };
        while (nanosleep(&t, &t) && errno == EINTR && !stop)
            ;
        secs -= d;
        if (secs > 0 && !stop)
            ping_all(c);
    }
}

/* Refreshes stats and tables every interval seconds, count times (0: until
 * Ctrl-C). With json, each refresh prints what `--json stats` prints (one
 * JSON array per refresh), for scripts; nodes not answering are said on
 * stderr. */
/* Whether a node asked has no connection (do_stats asks only the others). */
static int not_answering(const cluster *c)
{
    for (int i = 0; i < c->n; i++)
        if ((c->only < 0 || i == c->only) && c->nodes[i].fd < 0)
            return 1;
    return 0;
}

static int do_top(cluster *c, double interval, int count, int json)
{
    signal(SIGINT, on_int);
    int tty = isatty(1), bad = 0;   /* a node did not answer, last refresh */
    for (int k = 0; !stop && (count <= 0 || k < count); k++) {
        if (k) {
            idle(c, interval);
            if (stop)
                break;
            /* Nodes that came back; one that still does not answer (a
             * loop stopped) holds each refresh up to the interval, at
             * least 1 s, not reply_ms. */
            double w = interval < 1 ? 1000 : interval * 1000;
            open_all(c, 1, w < reply_ms ? (int)w : reply_ms);
        }
        if (json) {
            bad = do_stats(c, 1, 0) || not_answering(c);
            if (!stdout_ok())
                return 1;        /* stdout is gone (| head): main says */
            continue;
        }
        if (tty)
            printf("\033[H\033[2J");
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
        printf("psctl top  %s  every %.1f s  (rates over the last 10 s, or "
               "since a node's start; Ctrl-C quits)\n\n", when, interval);
        bad = do_stats(c, 0, 1) || not_answering(c);
        for (int i = 0; i < c->n; i++)
            if ((c->only < 0 || i == c->only) && c->nodes[i].fd < 0)
                printf("node %d  %s  %s: %s\n", id(c, i),
                       c->nodes[i].addr,
                       c->nodes[i].shadowed ? "NOT SHOWN" : "NOT ANSWERING",
                       c->nodes[i].err);
        /* SIGPIPE is ignored: a reader that went (| head) shows here,
         * and top stopped only at Ctrl-C. */
        if (!stdout_ok())
            return 1;
    }
    /* As every command: 1 when a node asked did not answer (at the last
     * refresh), for a script that runs top --count N. */
    return bad;
}

/* What one node answered to end-job. */
typedef struct ended {
    int asked, ok, ended, applied, let_go, lined_up;
    unsigned long long clock, barrier;
    unsigned long long was_clock, was_barrier;   /* before the line-up */
    char err[sizeof ((node *)0)->err];
} ended;

/* The number after `key` in a node's JSON answer (0 when absent). */
static unsigned long long json_u64(const char *r, const char *key)
{
    const char *p = strstr(r, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* Sends cmd ("end-job", or "end-job C B") to node i and reads the
 * answer's counts into *e. 0, or -1 with the reason in e->err. */
static int end_one(cluster *c, int i, const char *cmd, ended *e)
{
    char *r = command(&c->nodes[i], cmd);
    if (!r) {
        snprintf(e->err, sizeof e->err, "%s", c->nodes[i].err);
        fprintf(stderr, "psctl: node %d (%s): end-job: %s\n", id(c, i),
                c->nodes[i].addr, c->nodes[i].err);
        node_close(&c->nodes[i]);
        e->ok = 0;
        return -1;
    }
    e->ok = 1;
    e->ended |= strstr(r, "\"ended\": true") != NULL;
    e->applied |= strstr(r, "\"applied_sums\": true") != NULL;
    e->clock = json_u64(r, "\"clock\": ");
    e->barrier = json_u64(r, "\"barrier\": ");
    e->let_go += (int)json_u64(r, "\"let_go\": ");
    free(r);
    return 0;
}

/* Ends the job in progress on every node (the ADMIN end-job): each
 * node's workers become absent at one clock and barrier count, so the
 * next job waits for all of them and starts there. Nodes with a worker
 * connected are found first, and then nothing is ended: a job still
 * training is not cut on some nodes and not others. Then, where the
 * nodes ended at different counts (one was down for some calls), those
 * behind are raised to the largest, so that the next job's workers
 * find one count everywhere. A line per node; with json, an array of
 * {"node", "address", "ended", "clock", "barrier", "applied_sums",
 * "let_go", "lined_up"} or {"node", "address", "error"}. */
static int do_end_job(cluster *c, int json)
{
    int bad = 0, busy = 0;
    ended *e = calloc((size_t)c->n, sizeof *e);
    if (!e) {
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->only >= 0 && i != c->only)
            continue;
        e[i].asked = 1;
        /* Not reached when psctl connected (said then): not ended. */
        if (c->nodes[i].fd < 0) {
            snprintf(e[i].err, sizeof e[i].err, "%s", c->nodes[i].err);
            bad = 1;
            continue;
        }
        samples ss = { 0 };
        if (fetch(&c->nodes[i], &ss)) {
            snprintf(e[i].err, sizeof e[i].err, "%s", c->nodes[i].err);
            failed(c, i);
            bad = 1;
            continue;
        }
        char lab[64];
        snprintf(lab, sizeof lab, "node=\"%d\",state=\"live\"", id(c, i));
        double live = get(&ss, "psd_workers", lab);
        samples_free(&ss);
        if (live > 0) {
            snprintf(e[i].err, sizeof e[i].err, "%.0f worker%s connected: "
                     "end-job ends a job whose workers have all stopped "
                     "(psctl stats lists them)", live,
                     live == 1 ? " is" : "s are");
            say_err(c, i, e[i].err);
            busy = 1;
        }
    }
    if (busy) {
        fprintf(stderr, "psctl: end-job: nothing was ended\n");
        if (json) {
            const char *sep = "";
            printf("[");
            for (int i = 0; i < c->n; i++) {
                if (!e[i].asked)
                    continue;
                printf("%s{", sep);
                json_node(c, i);
                printf(", \"address\": ");
                json_str(c->nodes[i].addr);
                printf(", \"error\": ");
                json_str(e[i].err[0] ? e[i].err : "not ended: a worker is "
                         "connected to another node");
                printf("}");
                sep = ",\n";
            }
            printf("]\n");
        }
        free(e);
        return 1;
    }
    unsigned long long top_c = 0, top_b = 0;
    for (int i = 0; i < c->n; i++) {
        if (!want(c, i))
            continue;
        if (end_one(c, i, "end-job", &e[i])) {
            bad = 1;
            continue;
        }
        if (e[i].clock > top_c)
            top_c = e[i].clock;
        if (e[i].barrier > top_b)
            top_b = e[i].barrier;
    }
    /* Asked alone (-n), a node is not lined up with the others: psctl
     * does not know their counts. */
    for (int i = 0; i < c->n && c->only < 0; i++) {
        if (!e[i].ok || (e[i].clock == top_c && e[i].barrier == top_b))
            continue;
        char cmd[80];
        snprintf(cmd, sizeof cmd, "end-job %llu %llu", top_c, top_b);
        e[i].was_clock = e[i].clock;
        e[i].was_barrier = e[i].barrier;
        /* Barriers are node 0's (ps_barrier goes there alone): another
         * node's barrier count moves only here, so raising it is routine,
         * not a node that fell behind (every clean job read so). */
        if (end_one(c, i, cmd, &e[i]))
            bad = 1;
        else
            e[i].lined_up = e[i].was_clock != top_c ||
                            (id(c, i) == 0 && e[i].was_barrier != top_b);
    }
    int first = 1;
    if (json)
        printf("[");
    for (int i = 0; i < c->n; i++) {
        if (!e[i].asked)
            continue;
        if (json) {
            printf("%s{", first ? "" : ",\n");
            json_node(c, i);
            printf(", \"address\": ");
            json_str(c->nodes[i].addr);
            if (e[i].ok)
                printf(", \"ended\": %s, \"clock\": %llu, \"barrier\": "
                       "%llu, \"applied_sums\": %s, \"let_go\": %d, "
                       "\"lined_up\": %s}",
                       e[i].ended ? "true" : "false", e[i].clock,
                       e[i].barrier, e[i].applied ? "true" : "false",
                       e[i].let_go, e[i].lined_up ? "true" : "false");
            else {
                printf(", \"error\": ");
                json_str(e[i].err);
                printf("}");
            }
            first = 0;
        } else if (e[i].ok) {
            char moved[120] = "";
            if (e[i].lined_up)
                snprintf(moved, sizeof moved, " (raised from clock %llu, "
                         "barrier %llu, to line up with the other nodes)",
                         e[i].was_clock, e[i].was_barrier);
            printf("node %d (%s): %s at clock %llu, barrier %llu%s%s%s\n",
                   id(c, i), c->nodes[i].addr,
                   e[i].ended ? "job ended" : "no job in progress",
                   e[i].clock, e[i].barrier, moved,
                   e[i].applied ? "; the pushes of the clock in progress "
                                  "applied as its end" : "",
                   e[i].let_go ? "; lost workers' processes are refused "
                                     "if they come back" : "");
        }
    }
    int any = 0;
    for (int i = 0; i < c->n; i++)
        any |= e[i].ended;
    if (json)
        printf("]\n");
    else if (!bad) {
        if (any)
            printf("the next job starts when all its workers have joined\n");
    } else
        fprintf(stderr, "psctl: end-job: run it again once every node "
                "answers: the nodes that ended are lined up then\n");
    free(e);
    return bad;
}

/* ---- main ------------------------------------------------------------------ */

/* Marks c's nodes unconnected: 0, or 1 when c->nodes could not be
 * allocated. */
static int nodes_ready(cluster *c)
{
    if (!c->nodes) {
        fprintf(stderr, "psctl: out of memory\n");
        return 1;
    }
    for (int i = 0; i < c->n; i++) {
        c->nodes[i].fd = -1;
        c->nodes[i].index = -1;
    }
    return 0;
}

/* An ini psd would refuse (a bad edit, perhaps one a reload just turned
 * down, which `psctl stats` is the way to see): the nodes and token as a
 * client reads them (client/nodes.c: [cluster] nodes, [server]
 * auth_token or auth_token_file, nothing else checked). */
/* Each line of text (psd_config_load gives one per error) on stderr
 * after prefix. */
static void say_lines(const char *prefix, const char *text)
{
    for (const char *q = text; *q;) {
        size_t len = strcspn(q, "\n");
        fprintf(stderr, "%s%.*s\n", prefix, (int)len, q);
        q += len + (q[len] == '\n');
    }
}

static int load_servers_leniently(cluster *c, const char *ini,
                                  const char *strict_err)
{
    psc_servers sv;
    char err[600];
    struct stat st;
    if (stat(ini, &st) || !S_ISREG(st.st_mode)) {
        say_lines("psctl: ", strict_err);       /* no file to read */
        return 2;
    }
    int rc = psc_servers_parse(ini, !token_len, 1, &sv, err, sizeof err);
    if (rc) {
        say_lines("psctl: ", strict_err);
        fprintf(stderr, "psctl: %s\n", err);
        return rc == PSW_ENOMEM ? 1 : 2;
    }
    say_lines("psctl: warning: ", strict_err);
    fprintf(stderr, "psctl: warning: psd would refuse this file; psctl "
            "uses its [cluster] nodes\n");
    if (!token_len && sv.token_len) {
        memcpy(token, sv.token, sv.token_len);
        token_len = sv.token_len;
    }
    psw_wipe(sv.token, sizeof sv.token);
    c->n = sv.nseeds;
    c->nodes = calloc((size_t)c->n, sizeof *c->nodes);
    for (int i = 0; c->nodes && i < c->n; i++) {
        /* The seeds are text (getaddrinfo's); a host with a ':' is IPv6. */
        psw_addr a = { .port = atoi(sv.seeds[i].port),
                       .kind = strchr(sv.seeds[i].host, ':') ? PSW_HOST_IPV6
                                                             : PSW_HOST_NAME };
        memcpy(a.host, sv.seeds[i].host, sizeof a.host);
        psw_addr_format(&a, c->nodes[i].addr, sizeof c->nodes[i].addr);
    }
    free(sv.seeds);
    return nodes_ready(c);
}

/* 0, or the exit status: 2 for an ini (or its token file) psctl cannot
 * take, like any other argument it cannot take, since 1 says that a node
 * did not answer; 1 when memory runs out. */
static int load_servers(cluster *c, const char *ini, const psw_addr *list,
                        int nlist)
{
    if (ini) {
        psd_config cfg;
        char err[8192];          /* every error of the file: as psd */
        if (psd_config_load(&cfg, ini, err, sizeof err))
            return load_servers_leniently(c, ini, err);
        char why[300];
        if (!token_len && cfg.auth_token[0]) {
            token_len = strlen(cfg.auth_token);
            memcpy(token, cfg.auth_token, token_len);
        } else if (!token_len && cfg.auth_token_file[0]) {
            snprintf(token_file, sizeof token_file, "%s",
                     cfg.auth_token_file);
            if (psw_token_read_file(cfg.auth_token_file, token, sizeof token,
                                    &token_len, why, sizeof why)) {
                /* Where the file is named, as psd and libpsclient say. */
                fprintf(stderr, "psctl: %s:%d: [server] auth_token_file: "
                        "%s\n", ini, cfg.auth_token_file_line, why);
                psd_config_destroy(&cfg);
                return 2;
            }
        }
        c->n = cfg.nnodes;
        c->nodes = calloc((size_t)c->n, sizeof *c->nodes);
        for (int i = 0; c->nodes && i < c->n; i++)
            psw_addr_format(&cfg.nodes[i], c->nodes[i].addr,
                            sizeof c->nodes[i].addr);
        psd_config_destroy(&cfg);
    } else {
        c->n = nlist;
        c->nodes = calloc((size_t)c->n, sizeof *c->nodes);
        for (int i = 0; c->nodes && i < c->n; i++)
            psw_addr_format(&list[i], c->nodes[i].addr,
                            sizeof c->nodes[i].addr);
    }
    return nodes_ready(c);
}

/* The number after option `flag`, lo..hi, whole: -1 with a message
 * otherwise (atoi took "abc" for 0, which is a node, and "-3" for all). */
static int number_arg(const char *flag, const char *s, double lo, double hi,
                      int integer, double *out)
{
    char *end;
    errno = 0;
    double v = integer ? (double)strtol(s, &end, 10) : strtod(s, &end);
    if (end == s || *end || errno || v != v || v < lo || v > hi) {
        if (integer)
            fprintf(stderr, "psctl: %s: expected an integer %.0f..%.0f, got "
                    "\"%s\"\n", flag, lo, hi, s);
        else
            fprintf(stderr, "psctl: %s: expected a number %g..%g, got "
                    "\"%s\"\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses a -s list into *a (malloc'd) and *n, or says which entry is
 * not HOST:PORT. Done before connecting, so that a typo is a usage error
 * (2), not a node that cannot be reached (1). */
static int parse_servers(const char *list, psw_addr **a, int *n)
{
    /* The grammar ps_open and psd take ("[v6]:port", blanks around an
     * entry), not one of psctl's own: "fd77::1:7070" was taken here and
     * refused by them, and ", [::1]:7070" refused here. */
    psw_addr_error e;
    int rc = psw_addr_list_parse(list, 4096, a, n, &e);
    if (rc == -2) {
        fprintf(stderr, "psctl: out of memory\n");
        return -1;
    }
    if (rc == 0)
        return 0;
    /* Named twice, a node's rows and rates were counted twice, and a
     * save or end-job was sent to it twice. */
    if (e.first)
        fprintf(stderr, "psctl: -s: \"%s\" is given twice (entries %d and "
                "%d)\n", e.item, e.first, e.entry);
    else if (e.entry && !e.item[0])
        fprintf(stderr, "psctl: -s: entry %d is empty, in \"%s\"\n",
                e.entry, list);
    else if (e.entry)
        fprintf(stderr, "psctl: -s: entry %d, \"%s\": %s\n", e.entry,
                e.item, e.why);
    else
        fprintf(stderr, "psctl: -s: %s\n", e.why);
    return -1;
}

int main(int argc, char **argv)
{
    static const char *const commands[] = { "ping", "layout", "tables",
                                            "stats", "save", "top",
                                            "end-job", NULL };
    const size_t ncommands = sizeof commands / sizeof commands[0] - 1;
    const char *ini = NULL, *list = NULL, *cmd = NULL;
    int json = 0, count = 0, only = -1, timeout_s = 600;
    int for_top = 0, for_save = 0;   /* -i or --count; --timeout */
    double interval = 1.0, v;
    out_closed = fcntl(1, F_GETFD) < 0 && errno == EBADF;
    psd_hold_std_fds();
    /* Every argument is checked before psctl connects to anything: a
     * mistake says what it is at once, with status 2. getopt_long takes
     * each value in every usual form (-n 1, -n1, --count=2) and options
     * before or after the command; its own messages are off, psctl says
     * what is wrong in its words. */
    enum { O_COUNT = 256, O_TIMEOUT, O_WAIT, O_JSON, O_VERSION };
    static const struct option longs[] = {
        { "config", required_argument, NULL, 'c' },
        { "servers", required_argument, NULL, 's' },
        { "node", required_argument, NULL, 'n' },
        { "interval", required_argument, NULL, 'i' },
        { "count", required_argument, NULL, O_COUNT },
        { "timeout", required_argument, NULL, O_TIMEOUT },
        { "wait", required_argument, NULL, O_WAIT },
        { "json", no_argument, NULL, O_JSON },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, O_VERSION },
        { NULL, 0, NULL, 0 }
    };
    for (;;) {
        const char *a;
        int o = psd_getopt(argc, argv, ":c:s:n:i:h", longs, "", "psctl",
                           &a);
        if (o == -1)
            break;
        if (o == -2)
            return 2;
        switch (o) {
        case 'c':
            ini = optarg;
            break;
        case 's':
            list = optarg;
            break;
        case 'n':
            if (number_arg("-n", optarg, 0, PSW_MAX_NODES - 1, 1, &v))
                return 2;
            only = (int)v;
            break;
        case 'i':
            if (number_arg("-i", optarg, 0.01, 86400, 0, &interval))
                return 2;
            for_top = 1;
            break;
        case O_COUNT:
            if (number_arg("--count", optarg, 0, 1e9, 1, &v))
                return 2;
            count = (int)v;
            for_top = 1;
            break;
        case O_TIMEOUT:
            if (number_arg("--timeout", optarg, 1, 1e9, 1, &v))
                return 2;
            timeout_s = (int)v;
            for_save = 1;
            break;
        case O_WAIT:
            if (number_arg("--wait", optarg, 1, 3600, 1, &v))
                return 2;
            connect_ms = reply_ms = (int)v * 1000;
            break;
        case O_JSON:
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case O_VERSION:
            psd_version("psctl", 0);
            return 0;
        case ':':
            fprintf(stderr, "psctl: %s needs a value\n", a);
            return 2;
        default: {
            char hint[96];
            fprintf(stderr, "psctl: unexpected argument \"%s\"%s\n", a,
                    psd_opt_hint(a, longs, hint, sizeof hint));
            fprintf(stderr, "psctl: psctl --help lists the options and "
                    "commands\n");
            return 2;
        }
        }
    }
    if (optind < argc)
        cmd = argv[optind];
    if (optind + 1 < argc) {
        fprintf(stderr, "psctl: one command, got \"%s\" and \"%s\"\n",
                cmd, argv[optind + 1]);
        return 2;
    }
    if (!cmd) {
        fprintf(stderr, "psctl: no command\n");
        usage(stderr);
        return 2;
    }
    size_t k = 0;
    while (k < ncommands && strcmp(cmd, commands[k]))
        k++;
    if (k == ncommands) {
        const char *near = psd_suggest(cmd, commands);
        fprintf(stderr, "psctl: unknown command \"%s\"%s%s%s\n", cmd,
                near ? " (did you mean " : "", near ? near : "",
                near ? "?)" : "");
        /* The commands, not the whole help: the error was lost above 40
         * lines of it (an operators' trial). */
        fprintf(stderr, "psctl: the commands are");
        for (size_t i = 0; i < ncommands; i++)
            fprintf(stderr, "%s %s", i ? "," : "", commands[i]);
        fprintf(stderr, " (psctl --help says more)\n");
        return 2;
    }
    /* An option of another command was taken without a word: `ping
     * --timeout 5` pinged with the fixed answer limit it does not set. */
    if ((for_top && strcmp(cmd, "top")) || (for_save && strcmp(cmd, "save"))) {
        if (for_top && strcmp(cmd, "top"))
            fprintf(stderr, "psctl: -i and --count go with top, not %s\n",
                    cmd);
        else
            fprintf(stderr, "psctl: --timeout goes with save, not %s\n", cmd);
        return 2;
    }
    if (ini && list) {
        fprintf(stderr, "psctl: -c and -s cannot be used together (-c takes "
                "the nodes from the ini)\n");
        return 2;
    }
    if (!ini && !list)
        ini = access("/etc/psd/psd.ini", R_OK) == 0 ? "/etc/psd/psd.ini"
                                                     : NULL;
    int default_list = !ini && !list;
    if (default_list)
        list = "127.0.0.1:7070";

    signal(SIGPIPE, SIG_IGN);
    if (psw_auth_init()) {
        fprintf(stderr, "psctl: libsodium cannot start\n");
        return 1;
    }
    const char *env = getenv("PSD_AUTH_TOKEN");
    if (env && *env) {
        char why[160];
        token_len = psw_token_trim(env, strlen(env));   /* as ps_open */
        if (token_len >= sizeof token) {
            fprintf(stderr, "psctl: PSD_AUTH_TOKEN is longer than %d bytes\n",
                    PSW_AUTH_TOKEN_MAX);
            return 2;
        }
        /* No node holds such a token: say so rather than be refused. */
        if (psw_token_check(env, token_len, why, sizeof why)) {
            fprintf(stderr, "psctl: PSD_AUTH_TOKEN: %s\n", why);
            return 2;
        }
        memcpy(token, env, token_len);
    }
    cluster c = { NULL, 0, only, ini != NULL };
    psw_addr *addrs = NULL;
    int naddrs = 0;
    if (list && parse_servers(list, &addrs, &naddrs))
        return 2;
    int loaded = load_servers(&c, ini, addrs, naddrs);
    free(addrs);
    if (loaded)
        return loaded;
    if (only >= c.n) {
        if (ini)
            fprintf(stderr, "psctl: -n %d: %s names %d node%s (0..%d)\n",
                    only, ini, c.n, c.n == 1 ? "" : "s", c.n - 1);
        else if (default_list)
            fprintf(stderr, "psctl: -n %d: without -c or -s psctl asks only "
                    "127.0.0.1:7070 (node 0)\n", only);
        else
            fprintf(stderr, "psctl: -n %d: -s gives %d address%s (0..%d)\n",
                    only, c.n, c.n == 1 ? "" : "es", c.n - 1);
        free(c.nodes);
        return 2;
    }
    all_nodes = c.nodes;
    all_n = c.n;
    int rc, bad = open_all(&c, 0, reply_ms), differ = layouts_differ(&c);
    bad |= differ;
    if (differ && !strcmp(cmd, "end-job")) {
        /* Nodes of two layouts may be two clusters (a -s list mixing
         * them): lining their counts up would move the other's. */
        fprintf(stderr, "psctl: end-job: the nodes answered with different "
                "layouts (above), as nodes of two clusters would: nothing "
                "was ended (ask one cluster's nodes, or one node with -n)\n");
        if (json) {
            printf("[");
            for (int i = 0; i < c.n; i++) {
                printf("%s{", i ? ",\n" : "");
                json_node(&c, i);
                printf(", \"address\": ");
                json_str(c.nodes[i].addr);
                printf(", \"error\": \"not ended: the nodes answered with "
                       "different layouts\"}");
            }
            printf("]\n");
        }
        rc = 1;
    } else if (!strcmp(cmd, "ping"))
        rc = do_ping(&c, json);
    else if (!strcmp(cmd, "layout"))
        rc = do_layout(&c, json);
    else if (!strcmp(cmd, "tables"))
        rc = do_tables(&c, json);
    else if (!strcmp(cmd, "stats"))
        rc = do_stats(&c, json, 0);
    else if (!strcmp(cmd, "save"))
        rc = do_save(&c, timeout_s, json);
    else if (!strcmp(cmd, "end-job"))
        rc = do_end_job(&c, json);
    else                         /* top: the commands were checked above */
        rc = do_top(&c, interval, count, json);
    for (int i = 0; i < c.n; i++)
        if (c.nodes[i].fd >= 0)
            node_close(&c.nodes[i]);
    free(c.nodes);
    /* Output a script reads must not end short with status 0 (a full
     * disk); a reader that went (| head) needs no word. */
    if (!stdout_ok()) {
        if (out_closed)
            fprintf(stderr, "psctl: standard output is closed: nothing "
                    "written\n");
        else if (out_errno != EPIPE)
            fprintf(stderr, "psctl: writing the output: %s\n",
                    strerror(out_errno));
        return 1;
    }
    return rc ? rc : bad;
}
