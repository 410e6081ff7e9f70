/* The node's server: listens (refusing non-loopback addresses without
 * auth, as redis's protected mode does), runs the timers, reloads and
 * stops. See server.h. */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>

#include "log.h"
#include "preflight.h"
#include "request.h"
#include "server.h"
#include "version.h"

#define MODE_TICK_MS 100

/* The connections the open files limit leaves room for, read again (its
 * soft limit lifted as at start): at a reload, and at each tick, since
 * `prlimit --pid` changes it under a running psd (the kernel then reset
 * newcomers past it unseen). Said when it leaves fewer than
 * max_connections, and when that ends. */
static void fd_room_update(psd_server *s)
{
    const psd_config *cfg = &s->node.cfg;
    int room = psd_fd_room(cfg->max_connections, psd_fd_reserve(cfg), 1);
    int was = s->conns.fd_room, was_max = s->fd_max;
    s->conns.fd_room = room;
    s->fd_max = cfg->max_connections;
    /* A reload may change max_connections with the room as it was. */
    int short_now = room < cfg->max_connections, short_was = was < was_max;
    if (room == was && cfg->max_connections == was_max)
        return;
    if (!short_now && !short_was)
        return;
    if (short_now)
        psd_warn("%s: [server] max_connections = %d, but the open files "
                 "limit leaves room for %d connections (ulimit -n; "
                 "LimitNOFILE= in a unit; prlimit): more are refused as at "
                 "max_connections", s->cfg_path, cfg->max_connections, room);
    else
        psd_info("the open files limit leaves room for max_connections "
                 "(%d) again", cfg->max_connections);
}

static void on_conn_tick(uv_timer_t *t)
{
    psd_server *s = t->data;
    /* Stopping: the ticks go on while connections write what they owe,
     * so that a peer that reads nothing is still presumed dead after
     * peer_timeout_ms and cannot hold the stop (and the final snapshot)
     * for ever; they end with the last connection. */
    if (s->stopping && !s->conns.head) {
        uv_close((uv_handle_t *)t, NULL);
        return;
    }
    fd_room_update(s);
    psd_conns_tick(&s->conns);
}

/* glibc keeps what closed connections held below the mmap threshold
 * (their structures, buffers of up to 256 KiB: main.c) in its heap for
 * the next ones: after a churn of 16,500 connections a node held 48 MB
 * resident with none open and 20 MB in use, which reads as a leak on a
 * dashboard. Given back once the closes pause (a tick without one), or
 * every TRIM_MS while they go on, when TRIM_FREE bytes or more of what
 * is resident is not in use: the trim stalls the loop while it hands the
 * free pages back (5-12 ms for 16-25 MB here, 50 ms for 20 MB in 10 KiB
 * holes), so small amounts are left for the next connections. Resident,
 * not glibc's free count, which a trim does not lower: gated on that, a
 * trim of nothing ran every 10 s (review). */
#define TRIM_MS 10000
#define TRIM_FREE ((uint64_t)16 << 20)

/* mallinfo2 came with glibc 2.33. */
#ifdef __GLIBC__
#if __GLIBC_PREREQ(2, 33)
#define PSD_TRIM 1
#endif
#endif

#ifdef PSD_TRIM
/* Bytes resident in psd's memory that malloc holds free, about: the
 * resident set less what malloc has handed out (heap and mmapped); the
 * rest of the resident set (code, stacks) is a few MB. 0 when unknown. */
static uint64_t resident_free(void)
{
    uint64_t rss = psd_rss_bytes();
    if (!rss)
        return 0;
    struct mallinfo2 mi = mallinfo2();
    uint64_t used = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
    return rss > used ? rss - used : 0;
}
#endif

static void trim_freed(psd_server *s, uint64_t now)
{
#ifdef PSD_TRIM
    if (s->conns.closed != s->trim_looked) {
        s->trim_looked = s->conns.closed;
        s->trim_due = 1;
        if (now - s->trim_ms < TRIM_MS)
            return;              /* closes go on: wait for their pause */
    } else if (!s->trim_due)
        return;
    s->trim_due = 0;
    if (resident_free() < TRIM_FREE)
        return;
    s->trim_ms = now;
    (void)malloc_trim(0);
#else
    (void)s;
    (void)now;
#endif
}

static void on_mode_tick(uv_timer_t *t)
{
    psd_server *s = t->data;
    s->node.writer_forked = s->dur.child != 0;
    psd_request_tick(&s->node, uv_now(s->loop));
    /* A journal that failed (disk full) is tried again: the replies of the
     * pushes it holds wait for it, and new pushes are refused until then. */
    uint64_t now = uv_now(s->loop);
    if (s->node.journal_error[0] &&
        now - s->journal_tried_ms >= s->journal_retry_ms) {
        s->journal_tried_ms = now;
        if (psd_node_commit(&s->node) == 0)
            psd_conns_durable(&s->conns);
    }
    trim_freed(s, now);
}

static void on_durable_moved(void *arg)
{
    psd_server *s = arg;
    psd_conns_durable(&s->conns);
}

/* A socket bound to sa, not yet listening, or -1 with "PATH:LINE: [SEC]
 * KEY: node N cannot listen on ADDR: reason (hint)" in err: the line to
 * change, which "cannot listen on ADDR" alone left to be found. Bound by
 * psd itself (psd_bind_tcp, with the options libuv's bind sets) rather
 * than with uv_tcp_bind, which leaves EADDRINUSE for uv_listen to report:
 * psd binds before it loads its files (minutes for a large snapshot) and
 * listens after, so a port another process listens on shows here.
 * (Another process that has only bound it, with SO_REUSEADDR as psd does,
 * as a second psd loading its files would, is found at listen.) */
static void bind_error(char *err, size_t errlen, const char *path, int line,
                       const char *key, int node, const psd_node_addr *a,
                       const char *why, const char *hint)
{
    char text[PSW_ADDR_TEXT_MAX], where[4200];
    psw_addr_format(a, text, sizeof text);
    if (line > 0)
        snprintf(where, sizeof where, "%s:%d: ", path, line);
    else
        snprintf(where, sizeof where, "%s: ", path);
    snprintf(err, errlen, "%s[%s] %s: node %d cannot listen on %s: %s%s",
             where, strcmp(key, "metrics_listen") ? "cluster" : "server", key,
             node, text, why, hint);
}

static int bind_port(const struct sockaddr *sa, const char *path, int line,
                     const char *key, int node, const psd_node_addr *a,
                     char *err, size_t errlen)
{
    int fd = psd_bind_tcp(sa);
    if (fd < 0) {
        bind_error(err, errlen, path, line, key, node, a,
                   uv_strerror(uv_translate_sys_error(-fd)),
                   psd_bind_hint(-fd));
        return -1;
    }
    return fd;
}

/* metrics_listen's address m as a socket address: it is numeric
 * (config.c refuses names). 0, or a UV_E* code. */
static int metrics_sa(const psd_node_addr *m, struct sockaddr_storage *sa)
{
    return strchr(m->host, ':')
               ? uv_ip6_addr(m->host, m->port, (struct sockaddr_in6 *)sa)
               : uv_ip4_addr(m->host, m->port, (struct sockaddr_in *)sa);
}

/* Whether another program listens at sa, the address a of KEY at line:
 * -1 with bind_error's text in err when so, else 0. */
static int in_use(const struct sockaddr_storage *sa, const char *path,
                  int line, const char *key, int node,
                  const psd_node_addr *a, char *err, size_t errlen)
{
    int fd = psd_bind_tcp((const struct sockaddr *)sa);
    if (fd >= 0)
        close(fd);
    if (fd != -EADDRINUSE)
        return 0;
    bind_error(err, errlen, path, line, key, node, a,
               uv_strerror(UV_EADDRINUSE), psd_bind_hint(EADDRINUSE));
    return -1;
}

int psd_server_check_bind(const psd_config *cfg, const char *path, int node,
                          const struct sockaddr_storage *sa, char *err,
                          size_t errlen)
{
    int listen = cfg->nlisten > 0;
    if (in_use(sa, path, listen ? cfg->listen_line : cfg->nodes_line,
               listen ? "listen" : "nodes", node,
               listen ? &cfg->listen[node] : &cfg->nodes[node], err, errlen))
        return -1;
    /* metrics_listen too: one held by another program passed --check,
     * and the start failed. */
    struct sockaddr_storage ms;
    if (!cfg->nmetrics || metrics_sa(&cfg->metrics[node], &ms))
        return 0;
    return in_use(&ms, path, cfg->metrics_line, "metrics_listen", node,
                  &cfg->metrics[node], err, errlen);
}

/* Binds the node's port and metrics_listen's (see bind_port). */
static int bind_ports(psd_server *s, const psd_config *cfg, int node,
                      char *err, size_t errlen)
{
    int listen = cfg->nlisten > 0;
    const psd_node_addr *a = listen ? &cfg->listen[node] : &cfg->nodes[node];
    s->listen_fd = bind_port((const struct sockaddr *)&s->bind, s->cfg_path,
                             listen ? cfg->listen_line : cfg->nodes_line,
                             listen ? "listen" : "nodes", node, a, err,
                             errlen);
    if (s->listen_fd < 0 || !cfg->nmetrics)
        return s->listen_fd < 0 ? -1 : 0;
    const psd_node_addr *m = &cfg->metrics[node];
    struct sockaddr_storage sa;
    int rc = metrics_sa(m, &sa);
    if (rc) {
        bind_error(err, errlen, s->cfg_path, cfg->metrics_line,
                   "metrics_listen", node, m, uv_strerror(rc), "");
        return -1;
    }
    s->metrics_fd = bind_port((const struct sockaddr *)&sa, s->cfg_path,
                              cfg->metrics_line, "metrics_listen", node, m,
                              err, errlen);
    return s->metrics_fd < 0 ? -1 : 0;
}

int psd_server_init(psd_server *s, uv_loop_t *loop, psd_config *cfg,
                    const char *cfg_path, int node,
                    const psd_start_opts *opts, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->listen_fd = s->metrics_fd = -1;
    snprintf(s->cfg_path, sizeof s->cfg_path, "%s", cfg_path);
    if (node < 0 || node >= cfg->nnodes) {
        snprintf(err, errlen, "%s: node %d does not exist (the file lists %d "
                 "node%s)", cfg_path, node, cfg->nnodes,
                 cfg->nnodes == 1 ? "" : "s");
        psd_config_destroy(cfg);
        return -1;
    }
    psd_preflight pf;
    int bad = psd_preflight_start(&pf, cfg, cfg_path, node);
    for (int i = 0; i < pf.nnotes; i++)
        psd_warn("%s", pf.notes[i]);
    if (bad) {
        size_t at = 0;
        err[0] = '\0';
        for (int i = 0; i < pf.nproblems && at + 1 < errlen; i++)
            at += (size_t)snprintf(err + at, errlen - at, "%s%s",
                                   i ? "\n" : "", pf.problems[i]);
        psd_preflight_destroy(&pf);
        psd_config_destroy(cfg);
        return -1;
    }
    s->bind = pf.bind;
    s->auth = psd_auth_new(pf.token, pf.token_len);
    psd_preflight_destroy(&pf);
    if (!s->auth) {
        snprintf(err, errlen, "out of memory");
        psd_config_destroy(cfg);
        return -1;
    }
    if (psd_node_init(&s->node, cfg, node, uv_now(loop), err, errlen))
        return -1;
    psd_conns_init(&s->conns, loop, &s->node);
    s->conns.auth = s->auth;
    /* The soft open files limit lifted toward max_connections and psd's
     * own files (preflight said what the hard limit leaves). */
    s->conns.fd_room = psd_fd_room(s->node.cfg.max_connections,
                                   psd_fd_reserve(&s->node.cfg), 1);
    s->fd_max = s->node.cfg.max_connections;
    /* The folder first, named by the line that gives it: "cannot create
     * /x" alone left the operator to find which setting said /x. */
    char dir[4096], why[4400];
    psd_config_data_dir(&s->node.cfg, dir, sizeof dir);
    if (psd_durable_make_dir(dir, why, sizeof why)) {
        if (s->node.cfg.data_dir_line > 0)
            snprintf(err, errlen, "%s:%d: [server] data_dir: %s", cfg_path,
                     s->node.cfg.data_dir_line, why);
        else
            snprintf(err, errlen, "%s: [server] data_dir: %s", cfg_path, why);
        return -1;
    }
    /* The folder's lock, then the ports, then the files: a second psd for
     * the node says so (rather than "port in use"), and a port another
     * program holds stops psd before it loads anything. */
    if (psd_durable_lock(&s->dur, loop, &s->node, on_durable_moved, s, err,
                         errlen) ||
        bind_ports(s, &s->node.cfg, node, err, errlen))
        return -1;
    return psd_durable_start(&s->dur, opts, err, errlen);
}

static void on_connection(uv_stream_t *l, int status)
{
    psd_server *s = l->data;
    if (status < 0) {
        /* Out of descriptors, libuv closes the connections waiting to be
         * accepted (their clients see a reset): said, since "accept
         * failed" alone read as one lost attempt (a fault trial). */
        psd_log_rep(PSD_LOG_WARN, "accept failed: %s%s",
                    uv_strerror(status),
                    status == UV_EMFILE || status == UV_ENFILE
                        ? " (the connections waiting meanwhile are closed: "
                          "raise the open files limit, LimitNOFILE=)"
                        : "");
        return;
    }
    psd_conn_accept(&s->conns, l);
}

int psd_server_listen(psd_server *s, char *err, size_t errlen)
{
    const psd_node *n = &s->node;
    const psd_node_addr *a = n->cfg.nlisten ? &n->cfg.listen[n->index]
                                            : &n->cfg.nodes[n->index];
    /* The metrics listener listens before the clients' one: the kernel
     * completes connections to a listening port before the loop runs, so
     * whoever waits for the client port (a supervisor, a test) would
     * otherwise find /metrics refusing for a moment. */
    if (psd_admin_init(&s->admin, s->loop, &s->node, &s->conns, &s->dur)) {
        snprintf(err, errlen, "out of memory for the stats window");
        return -1;
    }
    s->admin.reload_error = s->reload_error;
    if (n->cfg.nmetrics) {
        int fd = s->metrics_fd;
        s->metrics_fd = -1;          /* the listener's now */
        if (psd_metrics_start(&s->metrics, s->loop, fd,
                              &n->cfg.metrics[n->index], psd_admin_command,
                              &s->admin, err, errlen))
            return -1;
    }
    /* The loop's clock stood still while the node loaded its files. */
    uv_update_time(s->loop);
    psd_sync_serving(&s->node.sync, uv_now(s->loop));
    int rc = uv_tcp_init(s->loop, &s->listener);
    if (rc == 0) {
        s->listener.data = s;
        rc = uv_tcp_open(&s->listener, s->listen_fd);
        if (rc == 0)
            s->listen_fd = -1;       /* the handle's now */
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    char text[PSW_ADDR_TEXT_MAX + INET6_ADDRSTRLEN + 8];
    psw_addr_format(a, text, sizeof text);
    if (rc) {
        snprintf(err, errlen, "cannot listen on %s: %s", text,
                 uv_strerror(rc));
        return -1;
    }
    uv_tcp_nodelay(&s->listener, 1);
    /* A name may resolve to several addresses, of which psd binds the
     * first: the log says which, for the operator who finds the others
     * refusing. */
    if (a->kind == PSW_HOST_NAME) {
        char ip[INET6_ADDRSTRLEN];
        psd_sa_text(&s->bind, ip, sizeof ip);
        size_t at = strlen(text);
        snprintf(text + at, sizeof text - at,
                 s->bind.ss_family == AF_INET6 ? ", bound at [%s]"
                                               : ", bound at %s", ip);
    }
    /* Listening: from here psd serves, so now its files may change. */
    if (psd_durable_open(&s->dur, err, errlen))
        return -1;
    /* Four looks per heartbeat keep PINGs close to on time; the HELLO
     * timeout and the dead-peer bound are checked as often. */
    uint64_t period = (uint64_t)n->cfg.heartbeat_ms / 4;
    if (period < 5)
        period = 5;
    if (period > 250)
        period = 250;
    uv_timer_init(s->loop, &s->conn_timer);
    s->conn_timer.data = s;
    s->conns.tick_period = period;
    uv_timer_start(&s->conn_timer, on_conn_tick, period, period);
    uv_timer_init(s->loop, &s->mode_timer);
    s->mode_timer.data = s;
    /* For tests: a retry that never comes first, so that what else may
     * write the held records (a snapshot's rotation) can be seen alone. */
    const char *knob = getenv("PSD_TEST_JOURNAL_RETRY_MS");
    s->journal_retry_ms = knob ? strtoull(knob, NULL, 10) : MODE_TICK_MS;
    uv_timer_start(&s->mode_timer, on_mode_tick, MODE_TICK_MS, MODE_TICK_MS);
    uint64_t rows, bytes;
    psd_node_size(n, &rows, &bytes);
    psd_info("node %d of %d listening on %s (clients are told %s%s): %d "
             "table%s, %u shard%s, %llu rows here (%.1f MiB); psd "
             PSD_RELEASE ", wire protocol %d; inits mark %06x", n->index,
             n->cfg.nnodes, text, n->cluster.nodes[n->index],
             psd_auth_on(s->auth) ? "; clients must authenticate" : "",
             n->ntables, n->ntables == 1 ? "" : "s", n->cfg.shards,
             n->cfg.shards == 1 ? "" : "s", (unsigned long long)rows,
             (double)bytes / (1 << 20), PSW_VERSION, (unsigned)n->inits);
    /* The inits its journal's rows start from (the mark above): after a
     * crash and an init change, the refusal names the mark of then, and
     * these lines of the run that wrote it say what to put back. A table
     * not named starts from zeros. */
    for (int i = 0; i < n->ntables; i++) {
        const psd_table_conf *tc = &n->cfg.tables[i];
        if (tc->init.kind == PSD_INIT_ZEROS)
            continue;
        char init[96];
        psd_init_format(init, sizeof init, &tc->init);
        psd_info("table '%s': init %s, seed %llu", tc->name, init,
                 (unsigned long long)tc->init.seed);
    }
    psd_node_warn_full(n);
    return 0;
}

/* psd reads auth_token_file at start only. A reload that named the same
 * file (another one is refused with the layout) while the file no longer
 * gives the token in force must not say "reloaded": clients that read the
 * new token would be refused with no hint why. Returns 0 when the file
 * gives the running token (or there is none), 1 when it gives another
 * one, -1 when it cannot be read (why in err). */
static int token_file_moved(const psd_server *s, const psd_config *nc,
                            char *err, size_t errlen)
{
    const char *file = nc->auth_token_file;
    if (!file[0] || strcmp(file, s->node.cfg.auth_token_file) != 0)
        return 0;
    char token[PSW_AUTH_TOKEN_MAX + 1], why[400];
    size_t len;
    if (psw_token_read_file(file, token, sizeof token, &len, why,
                            sizeof why) < 0) {
        snprintf(err, errlen, "%.200s:%d: [server] auth_token_file: %.250s",
                 s->cfg_path, nc->auth_token_file_line, why);
        return -1;
    }
    int same = psd_auth_same(s->auth, token, len);
    psw_wipe(token, sizeof token);
    return !same;
}

/* A note without its "FILE:LINE: " or "FILE: " (a reload's edits move
 * the lines). */
static const char *note_text(const char *note, const char *path)
{
    size_t n = strlen(path);
    if (strncmp(note, path, n) || note[n] != ':')
        return note;
    const char *q = note + n + 1;
    while (*q >= '0' && *q <= '9')
        q++;
    if (*q == ':')
        q++;
    while (*q == ' ')
        q++;
    return q;
}

/* Whether text is among n notes of `size` bytes each from `notes`,
 * their places aside. */
static int noted(const char *text, const void *notes, size_t size, int n,
                 const char *path)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(text, note_text((const char *)notes + (size_t)i * size,
                                    path)))
            return 1;
    return 0;
}

/* After a reload was applied: warns of what its settings are worth a
 * note for that the settings before it were not (psd --check's notes,
 * and those a start logs): the file's (the running config's, nc's) and
 * this host's for them (pwas before, computed now after). A worker_grace
 * of 0 or a max_remembered_pushes of 1 set by SIGHUP said nothing until
 * the next start (a trial saw a bsp clock end with a worker alone, and
 * every push refused). The running config keeps nc's notes from now on;
 * nc gets the old ones, to free. */
static void take_notes(psd_server *s, psd_config *nc,
                       const psd_preflight *pwas)
{
    psd_config *run = &s->node.cfg;
    const char *path = s->cfg_path;
    psd_preflight pnow;
    (void)psd_preflight_settings(&pnow, run, path, s->node.index);
    for (int i = 0; i < nc->nnotes; i++)
        if (!noted(note_text(nc->notes[i], path), run->notes,
                   sizeof *run->notes, run->nnotes, path))
            psd_warn("after the reload: %s", nc->notes[i]);
    for (int i = 0; i < pnow.nnotes; i++)
        if (!noted(note_text(pnow.notes[i], path), pwas->notes,
                   sizeof *pwas->notes, pwas->nnotes, path))
            psd_warn("after the reload: %s", pnow.notes[i]);
    psd_preflight_destroy(&pnow);
    char (*notes)[PSD_NOTE_MAX] = run->notes;
    int nnotes = run->nnotes;
    run->notes = nc->notes;
    run->nnotes = nc->nnotes;
    nc->notes = notes;
    nc->nnotes = nnotes;
}

void psd_server_reload(psd_server *s)
{
    psd_config nc;
    char err[8192];
    int moved = 0;
    if (psd_config_load(&nc, s->cfg_path, err, sizeof err) ||
        (moved = token_file_moved(s, &nc, err, sizeof err)) < 0) {
        if (moved < 0)
            psd_config_destroy(&nc);
        /* One log line per error (a file may have several), and the
         * first with their count for psctl stats and /metrics. */
        int lines = 1, cut = 0;
        for (const char *q = err; (q = strchr(q, '\n')); q++)
            lines++;
        /* The last line may say that more errors were not listed. */
        const char *last = strrchr(err, '\n');
        if (last && strstr(last, ": more errors than these ")) {
            lines--;
            cut = 1;
        }
        for (const char *q = err; *q;) {
            size_t len = strcspn(q, "\n");
            psd_error("reload failed, keeping the running configuration: "
                      "%.*s", (int)len, q);
            q += len + (q[len] == '\n');
        }
        int first = (int)strcspn(err, "\n");
        if (lines > 1)
            snprintf(s->reload_error, sizeof s->reload_error,
                     "%.*s (and %s%d more)", first > 560 ? 560 : first, err,
                     cut ? "at least " : "", lines - 1);
        else
            snprintf(s->reload_error, sizeof s->reload_error, "%.600s", err);
        s->node.stats.reloads_refused++;
        return;
    }
    int interval = s->node.cfg.snapshot_interval;
    /* What this host notes of the running settings, to tell a reload's
     * new notes from those said before. */
    psd_preflight pwas;
    (void)psd_preflight_settings(&pwas, &s->node.cfg, s->cfg_path,
                                 s->node.index);
    char why[512];
    int refused = moved ? snprintf(why, sizeof why, "%s: the token in "
                                   "auth_token_file changed", s->cfg_path)
                        : psd_node_reload(&s->node, &nc, s->cfg_path, why,
                                          sizeof why);
    /* A new shape (node count, shards, a table's name, place, kind, dim,
     * rows, updater or consistency) is what this node's snapshot and
     * journal were not written under. A restart matches the snapshot's
     * tables by name, so it takes tables added, removed (with
     * --drop-table) or moved, and refuses the rest: "restart to apply"
     * would send the operator into a node that does not start. */
    char gone[300] = "";
    /* Other nodes are what psd --reshard moves a model onto (not other
     * shards or tables: it refuses those). */
    int nodes_moved = !psd_config_same_nodes(&s->node.cfg, &nc);
    int layout = refused && psd_config_shape(&nc) != s->node.shape
                     ? psd_config_restart(&s->node.cfg, &nc, gone,
                                          sizeof gone)
                     : PSD_RESTART_TAKES;
    if (!refused)
        take_notes(s, &nc, &pwas);
    psd_preflight_destroy(&pwas);
    psd_config_destroy(&nc);
    if (refused) {
        char hint[1024];
        if (layout == PSD_RESTART_REFUSES)
            snprintf(hint, sizeof hint, "a new layout: the node's snapshot "
                     "and journal do not fit it, so a restart refuses it "
                     "too; keep the layout (a table with another kind, "
                     "dim, rows, updater or consistency takes a new name)%s; "
                     "or move the weights over: psd --export, then psd "
                     "--import into empty folders under the new ini (the "
                     "optimizer state starts over; every node stopped); "
                     "or start the node fresh, without its model "
                     "(--skip-snapshot; see docs/durability.md, \"Adding, "
                     "removing and reordering tables\")",
                     nodes_moved ? "; other nodes take the model with psd "
                                   "--reshard, every node stopped (README, "
                                   "\"Running psd in production\")"
                                 : "");
        else if (layout == PSD_RESTART_DROPS)
            snprintf(hint, sizeof hint, "restart psd with --drop-table for "
                     "each table removed (%s) to apply that; the other "
                     "tables keep their rows", gone);
        else
            snprintf(hint, sizeof hint, "restart psd to apply that");
        psd_error("reload refused, keeping the running configuration: %s "
                  "(%s)", why, hint);
        snprintf(s->reload_error, sizeof s->reload_error, "%s (%s)", why,
                 layout == PSD_RESTART_REFUSES
                     ? "a new layout: a restart refuses it too"
                 : layout == PSD_RESTART_DROPS
                     ? "restart psd with --drop-table to apply that"
                     : "restart psd to apply that");
        s->node.stats.reloads_refused++;
        return;
    }
    s->node.stats.reloads++;
    s->reload_error[0] = '\0';
    psd_log_set_level(s->node.cfg.log_level);
    /* Re-arming starts the interval over: only a new value may do that,
     * or reloads more frequent than the interval would put the periodic
     * snapshot off for ever. */
    if (s->node.cfg.snapshot_interval != interval)
        psd_durable_reload(&s->dur);
    fd_room_update(s);
    psd_info("reloaded %s", s->cfg_path);
}

void psd_server_stop(psd_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    uv_close((uv_handle_t *)&s->listener, NULL);
    if (!s->conns.head)
        uv_close((uv_handle_t *)&s->conn_timer, NULL);
    uv_close((uv_handle_t *)&s->mode_timer, NULL);
    psd_admin_stop(&s->admin);
    psd_metrics_stop(&s->metrics);
    psd_durable_stop(&s->dur);
    psd_conns_shutdown(&s->conns);
    const psd_stats *st = &s->node.stats;
    psd_info("stopping: %llu connections served, %llu requests in %llu "
             "frames (%llu answered with an error), %llu connections closed "
             "for protocol errors (%llu of them a frame past frame_timeout), "
             "%llu refused at max_connections(_per_addr) or the open files "
             "limit, %llu idle ones "
             "closed to make room, %llu closed at max_client_memory or out of "
             "memory, %llu "
             "failed authentications",
             (unsigned long long)st->conns_accepted,
             (unsigned long long)st->requests,
             (unsigned long long)st->frames,
             (unsigned long long)st->request_errors,
             (unsigned long long)st->proto_errors,
             (unsigned long long)st->frames_timed_out,
             (unsigned long long)st->conns_refused,
             (unsigned long long)st->conns_evicted,
             (unsigned long long)st->conns_over_memory,
             (unsigned long long)st->auth_failures);
}

int psd_server_final(psd_server *s)
{
    char err[512];
    int rc = psd_durable_final(&s->dur, err, sizeof err);
    if (rc == -2) {
        psd_error("final snapshot not written: %s", err);
        return -1;
    }
    if (rc) {
        psd_error("final snapshot failed, the previous files are kept: %s",
                  err);
        return -1;
    }
    return 0;
}

const char *psd_server_status(psd_server *s)
{
    static char line[1024];
    const psd_node *n = &s->node;
    int k = snprintf(line, sizeof line, "node %d of %d serving %s: %d "
                     "table%s, snapshot generation %llu", n->index,
                     n->cfg.nnodes, n->cluster.nodes[n->index], n->ntables,
                     n->ntables == 1 ? "" : "s",
                     (unsigned long long)s->dur.st.generation);
    /* What `systemctl status` shows after `systemctl reload`: a reload
     * that kept the old configuration must not look like one that took. */
    if (s->reload_error[0] && k > 0 && (size_t)k < sizeof line)
        snprintf(line + k, sizeof line - (size_t)k, "; last reload failed, "
                 "running the previous configuration: %s", s->reload_error);
    return line;
}

void psd_server_destroy(psd_server *s)
{
    /* Ports bound but never listened on (a start that failed). */
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    if (s->metrics_fd >= 0)
        close(s->metrics_fd);
    s->listen_fd = s->metrics_fd = -1;
    psd_journal_close(s->node.journal);
    s->node.journal = NULL;
    psd_request_drop_all(&s->node);
    psd_node_destroy(&s->node);
    psd_auth_free(s->auth);
    s->auth = NULL;
}
