/* The node's server: builds tables from the config, answers HELLO with
 * the layout, listens (refusing non-loopback addresses without auth, as
 * redis's protected mode does), reloads and stops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "log.h"
#include "server.h"
#include "sync.h"
#include "../proto/status.h"

static void build_layout(psd_server *s)
{
    psw_layout *l = &s->layout;
    l->status = PSW_OK;
    l->version = PSW_VERSION;
    l->node_index = s->node;
    l->max_frame = s->cfg.max_frame;
    l->shards = s->cfg.shards;
    for (int i = 0; i < l->nnodes; i++) {
        const psd_node_addr *a = &s->cfg.nodes[i];
        if (strchr(a->host, ':'))
            snprintf(l->nodes[i], PSW_ADDR_MAX, "[%s]:%d", a->host, a->port);
        else
            snprintf(l->nodes[i], PSW_ADDR_MAX, "%s:%d", a->host, a->port);
    }
    for (int i = 0; i < l->ntables; i++) {
        const psd_table_conf *tc = &s->cfg.tables[i];
        psw_table_desc *d = &l->tables[i];
        d->id = (uint32_t)i;
        snprintf(d->name, sizeof d->name, "%s", tc->name);
        d->dense = tc->dense;
        d->dim = tc->dim;
        d->rows = tc->dense ? tc->rows : 0;
        d->consistency = tc->consistency == PSD_CONS_BSP   ? PSW_CONS_BSP
                         : tc->consistency == PSD_CONS_SSP ? PSW_CONS_SSP
                                                           : PSW_CONS_ASYNC;
    }
}

/* The layout epoch identifies this shape of the cluster: clients compare
 * it across nodes so they never mix two layouts. */
static uint64_t layout_epoch(const psd_config *c)
{
    uint64_t h = 1469598103934665603ULL;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ULL)
    MIX(c->nnodes);
    MIX(c->shards);
    for (int i = 0; i < c->nnodes; i++) {
        for (const char *p = c->nodes[i].host; *p; p++)
            MIX((unsigned char)*p);
        MIX(c->nodes[i].port);
    }
    for (int i = 0; i < c->ntables; i++) {
        for (const char *p = c->tables[i].name; *p; p++)
            MIX((unsigned char)*p);
        MIX(c->tables[i].dense);
        MIX(c->tables[i].dim);
        MIX(c->tables[i].rows);
    }
#undef MIX
    return h;
}

static int is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

int psd_server_init(psd_server *s, uv_loop_t *loop, psd_config *cfg,
                    const char *cfg_path, int node, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->cfg = *cfg;
    memset(cfg, 0, sizeof *cfg);
    snprintf(s->cfg_path, sizeof s->cfg_path, "%s", cfg_path);
    s->node = node;
    if (node < 0 || node >= s->cfg.nnodes) {
        snprintf(err, errlen, "%s: node %d does not exist (the file lists %d "
                 "nodes)", cfg_path, node, s->cfg.nnodes);
        return -1;
    }
    if (s->cfg.auth_token[0]) {
        snprintf(err, errlen, "%s: auth_token is set, but token "
                 "authentication is not implemented in this release; leave "
                 "it empty and use loopback addresses", cfg_path);
        return -1;
    }
    for (int i = 0; i < s->cfg.nnodes; i++)
        if (!is_loopback(s->cfg.nodes[i].host)) {
            snprintf(err, errlen, "%s: node %d address %s is not loopback and "
                     "auth_token is empty: refusing to serve unauthenticated "
                     "clients on a network address", cfg_path, i,
                     s->cfg.nodes[i].host);
            return -1;
        }
    s->layout.nnodes = s->cfg.nnodes;
    s->layout.ntables = s->cfg.ntables;
    s->layout.epoch = layout_epoch(&s->cfg);
    s->layout.nodes = calloc((size_t)s->cfg.nnodes, sizeof *s->layout.nodes);
    s->layout.tables = calloc((size_t)s->cfg.ntables + 1,
                              sizeof *s->layout.tables);
    s->tables = calloc((size_t)s->cfg.ntables + 1, sizeof *s->tables);
    if (!s->layout.nodes || !s->layout.tables || !s->tables) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    build_layout(s);
    if (psd_sync_init(s)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < s->cfg.ntables; i++) {
        s->tables[i] = psd_table_new(&s->cfg.tables[i], s->cfg.shards,
                                     s->cfg.nnodes, node, err, errlen);
        if (!s->tables[i])
            return -1;
        s->ntables = i + 1;
    }
    return 0;
}

static void on_sweep(uv_timer_t *t)
{
    psd_conn_sweep(t->data);
}

static void on_connection(uv_stream_t *l, int status)
{
    psd_server *s = l->data;
    if (status < 0) {
        psd_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    psd_conn_accept(s);
}

int psd_server_listen(psd_server *s, char *err, size_t errlen)
{
    const psd_node_addr *a = &s->cfg.nodes[s->node];
    struct sockaddr_storage sa;
    int rc = strchr(a->host, ':')
                 ? uv_ip6_addr(a->host, a->port, (struct sockaddr_in6 *)&sa)
                 : uv_ip4_addr(a->host, a->port, (struct sockaddr_in *)&sa);
    if (rc == 0)
        rc = uv_tcp_init(s->loop, &s->listener);
    if (rc == 0) {
        s->listener.data = s;
        rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&sa, 0);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (rc) {
        snprintf(err, errlen, "cannot listen on %s: %s", s->layout.nodes[s->node],
                 uv_strerror(rc));
        return -1;
    }
    uv_tcp_nodelay(&s->listener, 1);
    uv_timer_init(s->loop, &s->sweep_timer);
    s->sweep_timer.data = s;
    uv_timer_start(&s->sweep_timer, on_sweep, 1000, 1000);
    uint64_t rows = 0, bytes = 0;
    for (int i = 0; i < s->ntables; i++) {
        rows += psd_table_rows(s->tables[i]);
        bytes += psd_table_bytes(s->tables[i]);
    }
    psd_info("node %d of %d listening on %s: %d tables, %u shards, %llu dense "
             "rows here (%.1f MiB)", s->node, s->cfg.nnodes,
             s->layout.nodes[s->node], s->ntables, s->cfg.shards,
             (unsigned long long)rows, (double)bytes / (1 << 20));
    return 0;
}

/* What a reload may not change: anything clients or stored rows depend on. */
static const char *layout_change(const psd_config *a, const psd_config *b)
{
    if (layout_epoch(a) != layout_epoch(b) || a->ntables != b->ntables)
        return "nodes, shards or tables changed";
    for (int i = 0; i < a->ntables; i++) {
        const psd_table_conf *x = &a->tables[i], *y = &b->tables[i];
        if (x->upd.kind != y->upd.kind)
            return "an updater kind changed (its state would not fit)";
        if (x->init.kind != y->init.kind || x->init.a != y->init.a ||
            x->init.b != y->init.b || x->init.seed != y->init.seed)
            return "an initializer changed";
        if (x->consistency != y->consistency || x->staleness != y->staleness)
            return "a consistency mode changed";
    }
    if (strcmp(a->auth_token, b->auth_token))
        return "auth_token changed";
    /* Connected clients size their frames by the value they were told. */
    if (a->max_frame != b->max_frame)
        return "max_frame changed";
    return NULL;
}

void psd_server_reload(psd_server *s)
{
    psd_config nc;
    char err[512];
    if (psd_config_load(&nc, s->cfg_path, err, sizeof err)) {
        psd_error("reload failed, keeping the running configuration: %s", err);
        return;
    }
    const char *why = layout_change(&s->cfg, &nc);
    if (why) {
        psd_error("reload refused, keeping the running configuration: %s "
                  "(restart psd to apply that)", why);
        psd_config_destroy(&nc);
        return;
    }
    for (int i = 0; i < s->ntables; i++) {
        psd_table_set_params(s->tables[i], &nc.tables[i].upd);
        s->cfg.tables[i].upd = nc.tables[i].upd;
    }
    s->cfg.log_level = nc.log_level;
    s->cfg.max_output = nc.max_output;
    s->cfg.max_connections = nc.max_connections;
    s->cfg.hello_timeout = nc.hello_timeout;
    s->cfg.snapshot_interval = nc.snapshot_interval;
    psd_log_set_level(nc.log_level);
    psd_config_destroy(&nc);
    psd_info("reloaded %s", s->cfg_path);
}

static void on_listener_closed(uv_handle_t *h)
{
    (void)h;
}

void psd_server_stop(psd_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    uv_close((uv_handle_t *)&s->sweep_timer, NULL);
    psd_sync_stop(s);
    for (psd_conn *c = s->conns, *n; c; c = n) {
        n = psd_conn_next(c);
        psd_conn_shutdown(c);
    }
    psd_info("stopping: %llu connections served, %llu requests in %llu "
             "frames (%llu answered with an error), %llu connections closed "
             "for protocol errors, %llu refused at max_connections",
             (unsigned long long)s->stats.conns_accepted,
             (unsigned long long)s->stats.requests,
             (unsigned long long)s->stats.frames,
             (unsigned long long)s->stats.request_errors,
             (unsigned long long)s->stats.proto_errors,
             (unsigned long long)s->stats.conns_refused);
}

void psd_server_destroy(psd_server *s)
{
    for (int i = 0; i < s->ntables; i++)
        psd_table_free(s->tables[i]);
    free(s->tables);
    psd_sync_destroy(s);
    psw_layout_free(&s->layout);
    psd_config_destroy(&s->cfg);
}
