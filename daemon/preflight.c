/* The checks psd makes before it starts; see preflight.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "metrics.h"
#include "preflight.h"
#include "table.h"
#include "updater.h"
#include "../proto/layout.h"
#include "../proto/auth.h"
#include "../proto/msg.h"

typedef char line_t[512];

__attribute__((format(printf, 5, 6)))
static void add(line_t **list, int *n, const char *path, int line,
                const char *fmt, ...)
{
    line_t *l = realloc(*list, ((size_t)*n + 1) * sizeof *l);
    if (!l)
        return;                  /* the count below still says it failed */
    *list = l;
    char *at = l[*n];
    int k = line > 0 ? snprintf(at, sizeof *l, "%s:%d: ", path, line)
                     : snprintf(at, sizeof *l, "%s: ", path);
    /* A path longer than the line: the text would go past it. */
    if (k < 0 || (size_t)k >= sizeof *l - 1)
        k = (int)strlen(at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(at + k, sizeof *l - (size_t)k, fmt, ap);
    va_end(ap);
    (*n)++;
}

static int is_loopback(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
            return 1;
        /* ::ffff:127.x.y.z */
        return IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) &&
               a->sin6_addr.s6_addr[12] == 127;
    }
    return 0;
}

/* Resolves a; the first answer goes to *out. 0, or the getaddrinfo
 * error. */
static int resolve(const psd_node_addr *a, struct sockaddr_storage *out)
{
    struct addrinfo hints = { 0 }, *res = NULL;
    char port[8];
    hints.ai_socktype = SOCK_STREAM;
    if (a->kind != PSW_HOST_NAME)
        hints.ai_flags = AI_NUMERICHOST;
    snprintf(port, sizeof port, "%d", a->port);
    int g = getaddrinfo(a->host, port, &hints, &res);
    if (g == 0 && !res)
        g = EAI_NONAME;
    if (g == 0) {
        memcpy(out, res->ai_addr, res->ai_addrlen);
        freeaddrinfo(res);
    }
    return g;
}

int psd_preflight_loopback_bind(const psd_config *c, int i,
                                struct sockaddr_storage *sa)
{
    return resolve(c->nlisten > 0 ? &c->listen[i] : &c->nodes[i], sa) == 0 &&
           is_loopback(sa);
}

void psd_sa_text(const struct sockaddr_storage *sa, char *out, size_t cap)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr,
                  host, sizeof host);
    else
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
                  host, sizeof host);
    snprintf(out, cap, "%s", host);
}

int psd_bind_tcp(const struct sockaddr *sa)
{
    int one = 1, zero = 0;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        (sa->sa_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero)) ||
        bind(fd, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                               : sizeof(struct sockaddr_in))) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

const char *psd_bind_hint(int err)
{
    switch (err) {
    case EADDRNOTAVAIL:
        return " (not an address of this host: is this the host of that "
               "node? psd -n NODE starts another one)";
    case EADDRINUSE:
        return " (another program, or a psd, listens there: ss -ltnp "
               "names it)";
    case EACCES:
        return " (a port below 1024 takes root or CAP_NET_BIND_SERVICE)";
    default:
        return "";
    }
}

/* Whether sa is a wildcard (0.0.0.0, ::): bound, every address of the
 * host; told to a client, its own host. */
static int is_wildcard(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr ==
               htonl(INADDR_ANY);
    return sa->ss_family == AF_INET6 &&
           IN6_IS_ADDR_UNSPECIFIED(
               &((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Notes a relative path of the ini (key = value): it is taken from the
 * folder psd runs in, named here, which the ini does not say (systemd
 * starts services in /). `takes` says who takes it from where, `then`
 * what goes wrong. */
static void note_relative(psd_preflight *pf, const char *path, int line,
                          const char *key, const char *value,
                          const char *takes, const char *then)
{
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd))
        snprintf(cwd, sizeof cwd, "(unknown: %s)", strerror(errno));
    add(&pf->notes, &pf->nnotes, path, line, "[server] %s: %s is relative%s: "
        "%s (here %s), not from the ini's; started from another folder "
        "(systemd starts psd in /), %s. Give an absolute path", key, value,
        psd_config_quote_note(value), takes, cwd, then);
}

/* The token in force, from auth_token or auth_token_file. */
static void check_token(psd_preflight *pf, const psd_config *c,
                        const char *path)
{
    if (c->auth_token[0]) {
        pf->token_len = strlen(c->auth_token);
        memcpy(pf->token, c->auth_token, pf->token_len + 1);
        /* The ini usually is readable by all; a token in it is only as
         * private as the file. */
        struct stat st;
        if (stat(path, &st) == 0 && (st.st_mode & 077))
            add(&pf->notes, &pf->nnotes, path, c->auth_token_line,
                "[server] auth_token: this file is readable by group or "
                "others (mode %04o); auth_token_file keeps the token in a "
                "private file", (unsigned)(st.st_mode & 07777));
        return;
    }
    if (!c->auth_token_file[0])
        return;
    /* As a relative data_dir: from the folder psd starts in. */
    if (c->auth_token_file[0] != '/' &&
        !psw_path_may_be_token(c->auth_token_file))
        note_relative(pf, path, c->auth_token_file_line, "auth_token_file",
                      c->auth_token_file, "psd and clients take it from "
                      "the folder they start in", "psd would not find it");
    char why[400];
    if (psw_token_read_file(c->auth_token_file, pf->token, sizeof pf->token,
                            &pf->token_len, why, sizeof why) < 0)
        add(&pf->problems, &pf->nproblems, path, c->auth_token_file_line,
            "[server] auth_token_file: %s", why);
}

/* The kernel's range of ports for outgoing connections; 0 and 0 when it
 * cannot be read. */
static void ephemeral_range(unsigned *lo, unsigned *hi)
{
    *lo = *hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (!f)
        return;
    if (fscanf(f, "%u %u", lo, hi) != 2)
        *lo = *hi = 0;
    fclose(f);
}

/* A port in that range may be taken, when psd starts, by any program's
 * outgoing connection (a client of this very cluster among them), and
 * psd then cannot listen: a note, since the port is free most of the
 * time. Not reserved ports (net.ipv4.ip_local_reserved_ports): those the
 * kernel never hands out. */
static void ephemeral_note(psd_preflight *pf, const char *path, int line,
                           const char *key, int i, unsigned port)
{
    unsigned lo, hi;
    ephemeral_range(&lo, &hi);
    if (!lo || port < lo || port > hi)
        return;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_reserved_ports", "r");
    if (f) {
        char buf[65536], *save = NULL;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        for (char *t = strtok_r(buf, ",\n", &save); t;
             t = strtok_r(NULL, ",\n", &save)) {
            unsigned a, b;
            int k = sscanf(t, "%u-%u", &a, &b);
            if ((k == 1 && a == port) || (k == 2 && a <= port && port <= b))
                return;
        }
    }
    add(&pf->notes, &pf->nnotes, path, line, "[%s] %s: node %d's port %u is "
        "in this host's ephemeral range (%u-%u, net.ipv4.ip_local_port_range"
        "): an outgoing connection of any program may hold it when psd "
        "starts, and psd then cannot listen. Use a port below %u, or reserve "
        "it (net.ipv4.ip_local_reserved_ports)",
        strcmp(key, "metrics_listen") ? "cluster" : "server", key, i, port,
        lo, hi, lo);
}

/* Binds sa as psd would at start, and says what would stop it there: an
 * address this host does not have (the wrong -n, the wrong host: psd
 * stopped with "address not available" and no line, while --check said
 * OK), IPv6 turned off, and for --check a port below 1024 this user may
 * not bind (a note: --check may run as another user than psd, and
 * psd.service grants no capability). A port in use is not judged here:
 * --check runs beside the live node before a SIGHUP, and only main.c
 * knows whether that node runs (psd_server_check_bind). shown: the
 * address as the messages write it; hint: what follows "not an address
 * of this host". */
static void try_bind(psd_preflight *pf, const char *path, int line,
                     const char *section, const char *key, int i,
                     const char *shown, const struct sockaddr_storage *sa,
                     const char *hint)
{
    int fd = psd_bind_tcp((const struct sockaddr *)sa);
    const char *off = fd < 0 ? psw_addr_ipv6_off((const struct sockaddr *)sa,
                                                 -fd)
                             : "";
    if (fd >= 0)
        close(fd);
    else if (*off)
        add(&pf->problems, &pf->nproblems, path, line, "[%s] %s: node %d "
            "cannot listen on %s%s", section, key, i, shown, off);
    else if (fd == -EADDRNOTAVAIL)
        add(&pf->problems, &pf->nproblems, path, line, "[%s] %s: node %d "
            "cannot listen on %s: it is not an address of this host%s",
            section, key, i, shown, hint);
    else if (fd == -EACCES && !pf->self)
        add(&pf->notes, &pf->nnotes, path, line, "[%s] %s: node %d cannot "
            "listen on %s as this user (uid %ld): a port below 1024 takes "
            "root or CAP_NET_BIND_SERVICE, which psd.service does not "
            "grant", section, key, i, shown, (long)geteuid());
}

/* Node i's bind address: resolved, and loopback unless there is a token.
 * own: psd is node i (it must bind there); otherwise a name that does
 * not resolve here is only worth a note. one: a single node is checked
 * (psd's start, --check -n), so this host's port range concerns it. */
static void check_node(psd_preflight *pf, const psd_config *c,
                       const char *path, int i, int own, int one)
{
    int listen = c->nlisten > 0;
    const psd_node_addr *a = listen ? &c->listen[i] : &c->nodes[i];
    int line = listen ? c->listen_line : c->nodes_line;
    const char *key = listen ? "listen" : "nodes";
    char text[PSW_ADDR_TEXT_MAX], ip[INET6_ADDRSTRLEN];
    struct sockaddr_storage sa;
    psw_addr_format(a, text, sizeof text);
    int g = resolve(a, &sa);
    if (g) {
        if (own)
            add(&pf->problems, &pf->nproblems, path, line, "[cluster] %s: "
                "node %d's address %s does not resolve: %s", key, i, text,
                gai_strerror(g));
        else
            add(&pf->notes, &pf->nnotes, path, line, "[cluster] %s: node "
                "%d's address %s does not resolve here: %s", key, i, text,
                gai_strerror(g));
        return;
    }
    /* The bind address, then the one clients are told (the same
     * without listen). A literal link-local address is refused with the
     * file's syntax (addr.c); a name's passed, and psd failed to listen
     * ("invalid argument") or clients to connect. A wildcard told to
     * clients reaches this node from its own host alone (a client
     * elsewhere connects to itself): wildcards are bound with listen. */
    struct sockaddr_storage told = sa;
    int known = !listen || resolve(&c->nodes[i], &told) == 0;
    for (int k = 0; k < 1 + (listen && known); k++) {
        const psd_node_addr *x = k ? &c->nodes[i] : a;
        const struct sockaddr_storage *xs = k ? &told : &sa;
        char xtext[PSW_ADDR_TEXT_MAX];
        if (x->kind != PSW_HOST_NAME ||
            !psw_addr_link_local((const struct sockaddr *)xs))
            continue;
        psw_addr_format(x, xtext, sizeof xtext);
        psd_sa_text(xs, ip, sizeof ip);
        add(own ? &pf->problems : &pf->notes,
            own ? &pf->nproblems : &pf->nnotes, path,
            k ? c->nodes_line : line, "[cluster] %s: node %d's address %s "
            "resolves to %s, a link-local address, so %s: "
            PSW_LINK_LOCAL_WHY, k ? "nodes" : key, i, xtext, ip,
            k ? "clients cannot connect to it"
              : listen ? "psd cannot listen there"
                       : "psd cannot listen there nor clients connect");
        return;
    }
    if ((own || !one) && known && is_wildcard(&told)) {
        char ntext[PSW_ADDR_TEXT_MAX];
        psw_addr_format(&c->nodes[i], ntext, sizeof ntext);
        add(&pf->notes, &pf->nnotes, path, c->nodes_line, "[cluster] nodes: "
            "node %d's address %s is a wildcard: clients are told it, and "
            "reach this node by it only from its own host. Give the host's "
            "address in nodes, and the wildcard in [cluster] listen", i,
            ntext);
    }
    if (own) {
        pf->bind = sa;
        pf->bind_set = 1;
    }
    /* The node psd starts, or that --check -n names, binds here, and so
     * does its metrics_listen. */
    if (own && one) {
        char shown[PSW_ADDR_TEXT_MAX + INET6_ADDRSTRLEN + 4], hint[96];
        psd_sa_text(&sa, ip, sizeof ip);
        snprintf(shown, sizeof shown, "%s%s%s", text,
                 a->kind == PSW_HOST_NAME ? " = " : "",
                 a->kind == PSW_HOST_NAME ? ip : "");
        snprintf(hint, sizeof hint, ": is this the host of node %d? (psd -n "
                 "NODE starts another one)", i);
        try_bind(pf, path, line, "cluster", key, i, shown, &sa, hint);
        struct sockaddr_storage ms;
        char mtext[PSW_ADDR_TEXT_MAX];
        if (c->nmetrics && resolve(&c->metrics[i], &ms) == 0) {
            psw_addr_format(&c->metrics[i], mtext, sizeof mtext);
            try_bind(pf, path, c->metrics_line, "server", "metrics_listen",
                     i, mtext, &ms, "");
        }
    }
    /* This host's range says something of the nodes this host runs: the
     * one started, the one --check -n names, and without -n those on a
     * loopback address (plain --check, as the README shows it, said
     * nothing of them). */
    if (own && (one || is_loopback(&sa))) {
        ephemeral_note(pf, path, line, key, i, (unsigned)a->port);
        if (c->nmetrics)
            ephemeral_note(pf, path, c->metrics_line, "metrics_listen", i,
                           (unsigned)c->metrics[i].port);
    }
    /* /metrics answers anyone who reaches it (Prometheus scrapes it
     * without a token): off loopback without a token it told a network
     * the data folder, tables and hyper-parameters, which protected mode
     * promises no address does: refused, for every node, as the clients'
     * address is below. With a token, a note, of this node (start, -n)
     * or of every node (plain --check, which said nothing of it). */
    struct sockaddr_storage ms;
    if (c->nmetrics && resolve(&c->metrics[i], &ms) == 0 &&
        !is_loopback(&ms)) {
        char mtext[PSW_ADDR_TEXT_MAX];
        psw_addr_format(&c->metrics[i], mtext, sizeof mtext);
        if (!pf->token_len && !c->auth_token_file[0])
            add(&pf->problems, &pf->nproblems, path, c->metrics_line,
                "[server] metrics_listen: node %d would serve /metrics on "
                "%s, which is not a loopback address, and [server] has no "
                "auth_token: psd refuses to serve anything on a network "
                "unauthenticated. Set auth_token_file, or serve /metrics on "
                "a loopback address", i, mtext);
        else if (own || !one)
            add(&pf->notes, &pf->nnotes, path, c->metrics_line,
                "[server] metrics_listen: node %d serves /metrics on %s "
                "without authentication (the token guards the clients' "
                "port only): its tables, hyper-parameters and data folder "
                "are readable from the network", i, mtext);
    }
    if (pf->token_len || c->auth_token_file[0] || is_loopback(&sa))
        return;
    psd_sa_text(&sa, ip, sizeof ip);
    add(&pf->problems, &pf->nproblems, path, line, "[cluster] %s: node %d "
        "would listen on %s%s%s, which is not a loopback address, and "
        "[server] has no auth_token: psd refuses to serve unauthenticated "
        "clients on a network. Set auth_token_file (or auth_token) in "
        "[server] (traffic is still not encrypted: see the README), or "
        "have the node listen on a loopback address (%s)", key, i, text,
        a->kind == PSW_HOST_NAME ? " = " : "",
        a->kind == PSW_HOST_NAME ? ip : "",
        listen ? "listen = 127.0.0.1:PORT" : "[cluster] listen");
}

/* Below this much free space in data_dir's file system: a note. */
#define PF_LOW_DISK_MIB 64.0

/* The data folder: psd creates what is missing of it at start, so only a
 * part of its path that exists and is not a folder makes that fail for
 * certain. A folder this user may not write (the data folder, or the last
 * one of its path that exists) is no proof for --check, since psd may run
 * as another user, so it is a note there; for psd starting it is a
 * problem. The folder
 * is data_dir, or, when data_dir is left at its default and systemd set
 * $STATE_DIRECTORY, the first folder named there (psd_config_data_dir). */
static void writable_note(psd_preflight *pf, const psd_config *c,
                          const char *path, const char *folder,
                          const char *dir)
{
    /* The kernel's own file systems take no files, whoever asks: root
     * passes access() there, and psd then failed at start ("cannot
     * create /proc/x", or no lock file in /proc) while --check said OK. */
    static const struct {
        long magic;
        const char *name;
    } kernel_fs[] = {
        { PROC_SUPER_MAGIC, "proc" },       { SYSFS_MAGIC, "sysfs" },
        { CGROUP_SUPER_MAGIC, "cgroup" },   { CGROUP2_SUPER_MAGIC, "cgroup2" },
        { DEBUGFS_MAGIC, "debugfs" },       { TRACEFS_MAGIC, "tracefs" },
        { SECURITYFS_MAGIC, "securityfs" }, { BPF_FS_MAGIC, "bpf" },
        { PSTOREFS_MAGIC, "pstore" },       { DEVPTS_SUPER_MAGIC, "devpts" },
        { EFIVARFS_MAGIC, "efivarfs" },
    };
    struct statfs fs;
    if (statfs(folder, &fs) == 0) {
        const char *kind = NULL;
        for (size_t k = 0; !kind && k < sizeof kernel_fs / sizeof *kernel_fs;
             k++)
            if ((unsigned long)fs.f_type == (unsigned long)kernel_fs[k].magic)
                kind = kernel_fs[k].name;
        if (kind) {
            add(&pf->problems, &pf->nproblems, path, c->data_dir_line,
                "[server] data_dir: %s is on the kernel's %s file system, "
                "where psd cannot %s %s: give a folder on a disk", folder,
                kind, strcmp(folder, dir) ? "create" : "keep files in", dir);
            pf->data_dir_bad = 1;
            return;
        }
        /* A full disk passed --check, then psd stopped at start ("cannot
         * write the journal"); nearly full, it refuses pushes soon. */
        double free_mib = (double)fs.f_bavail * (double)fs.f_bsize /
                          (1024.0 * 1024);
        if (free_mib < PF_LOW_DISK_MIB)
            add(&pf->notes, &pf->nnotes, path,
                c->data_dir_line, "[server] data_dir: the file system of %s "
                "has %.1f MiB free: psd keeps its journal and snapshots "
                "there, and refuses pushes while it cannot write them",
                folder, free_mib);
    }
    /* psd starting asks as it will write: its effective ids and
     * capabilities (access() asks for the real uid, without them, and
     * refused a service user given CAP_DAC_OVERRIDE). */
    if ((pf->self ? faccessat(AT_FDCWD, folder, W_OK | X_OK, AT_EACCESS)
                  : access(folder, W_OK | X_OK)) == 0)
        return;
    /* A read-only file system refuses every user: that one is certain. */
    if (errno == EROFS) {
        add(&pf->problems, &pf->nproblems, path, c->data_dir_line,
            "[server] data_dir: %s is on a read-only file system, so psd "
            "cannot %s %s", folder, strcmp(folder, dir) ? "create" : "use",
            dir);
        return;                  /* its files can still be checked */
    }
    /* Run by systemd as a unit's command (ExecStartPre, ExecStart:
     * $SYSTEMD_EXEC_PID is this process), psd runs as the service's user:
     * then it is certain. ($INVOCATION_ID alone is inherited by anything
     * a service starts, as any user.) So it is when this is psd starting. */
    const char *ep = getenv("SYSTEMD_EXEC_PID");
    int unit = ep && strtol(ep, NULL, 10) == (long)getpid();
    int certain = unit || pf->self;
    add(certain ? &pf->problems : &pf->notes,
        certain ? &pf->nproblems : &pf->nnotes, path, c->data_dir_line,
        "[server] data_dir: this user (uid %u) may not write %s, so psd "
        "run as this user cannot %s %s: %s%s", (unsigned)getuid(), folder,
        strcmp(folder, dir) ? "create" : "use", dir, strerror(errno),
        unit ? " (run by systemd as the service's user: give the unit "
               "ReadWritePaths= for it, or leave data_dir to "
               "StateDirectory=)"
        : pf->self ? " (psd would take pushes it could never save: give it "
                     "a folder this user may write, or run psd as the "
                     "folder's owner)"
                   : " (run --check as the user psd runs as)");
}

static void check_data_dir(psd_preflight *pf, const psd_config *c,
                           const char *path)
{
    char dir[4096];
    psd_config_data_dir(c, dir, sizeof dir);
    /* Relative: from the folder psd starts in, which the ini does not
     * say (systemd starts services in /): the same file started from
     * another folder would serve an empty model. */
    if (dir[0] != '/')
        note_relative(pf, path, c->data_dir_line, "data_dir", dir,
                      "psd takes it from the folder it starts in",
                      "it would not find its snapshot and would start "
                      "empty");
    char part[sizeof dir];
    for (size_t n = 1; n <= strlen(dir); n++) {
        if (dir[n] != '/' && dir[n] != '\0')
            continue;
        snprintf(part, sizeof part, "%.*s", (int)n, dir);
        struct stat st;
        if (stat(part, &st) != 0) {
            /* Missing: psd creates it, in the folder before it (the
             * working one for a relative path's first part). */
            char *slash = strrchr(part, '/');
            const char *in = !slash ? "." : slash == part ? "/" : part;
            if (slash && slash != part)
                *slash = '\0';
            writable_note(pf, c, path, in, dir);
            return;
        }
        if (!S_ISDIR(st.st_mode)) {
            add(&pf->problems, &pf->nproblems, path, c->data_dir_line,
                "[server] data_dir: %s is not a folder, so psd cannot "
                "create or use %s", part, dir);
            pf->data_dir_bad = 1;
            return;
        }
    }
    writable_note(pf, c, path, dir, dir);
}

/* Bytes of this host's memory psd may use: MemTotal, or less where the
 * cgroup it runs in has a limit (systemd's MemoryMax); and MemAvailable
 * now. 0 when not known. *cgroup: whether the limit is a cgroup's;
 * *swap: SwapTotal. */
static void host_memory_of(double *limit, double *avail, int *cgroup,
                           double *swap)
{
    *limit = *avail = *swap = 0;
    *cgroup = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    char line[4200];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *limit = (double)kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = (double)kb * 1024;
        else if (sscanf(line, "SwapTotal: %llu kB", &kb) == 1)
            *swap = (double)kb * 1024;
    }
    if (f)
        fclose(f);
    /* This process's group: cgroup v2's memory.max ("max": no limit),
     * or v1's memory controller's memory.limit_in_bytes (a hybrid host
     * lists v1's controllers first, v2's "0::" line last: the first line
     * alone read no limit there). */
    char v2[4200] = "", v1[4200] = "", p[4300];
    f = fopen("/proc/self/cgroup", "re");
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\n");
        line[n] = '\0';
        /* "ID:CONTROLLERS:PATH": v1's memory may share its hierarchy
         * with others ("4:cpu,memory:/x"). */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!strncmp(line, "0::", 3)) {
            snprintf(v2, sizeof v2, "%s", line + 3);
        } else if (c2) {
            *c2 = '\0';
            char *save = NULL;
            for (char *tok = strtok_r(c1 + 1, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save))
                if (!strcmp(tok, "memory"))
                    snprintf(v1, sizeof v1, "%s", c2 + 1);
        }
    }
    if (f)
        fclose(f);
    /* The group's limit and every ancestor's, the smallest: a slice's
     * MemoryMax= (or a pod's limit) holds its members, whose own file
     * says "max", and a table beyond it passed --check, then the start
     * was killed (a memory trial). */
    for (int v = 0; v < 2; v++) {
        char *cg = v ? v1 : v2;
        if (!cg[0])
            continue;
        for (;;) {
            const char *at = strcmp(cg, "/") ? cg : "";
            snprintf(p, sizeof p, v ? "/sys/fs/cgroup/memory%s/"
                                      "memory.limit_in_bytes"
                                    : "/sys/fs/cgroup%s/memory.max", at);
            f = fopen(p, "re");
            if (!f && !v) {      /* a hybrid host mounts v2 here */
                snprintf(p, sizeof p, "/sys/fs/cgroup/unified%s/memory.max",
                         at);
                f = fopen(p, "re");
            }
            if (f && fscanf(f, "%llu", &kb) == 1 &&
                (*limit <= 0 || (double)kb < *limit)) {
                *limit = (double)kb;
                *cgroup = 1;
            }
            if (f)
                fclose(f);
            char *slash = strrchr(cg, '/');
            if (!slash || !at[0])
                break;
            if (slash == cg)
                cg[1] = '\0';   /* the root, last */
            else
                *slash = '\0';
        }
    }
    if (*avail > *limit)
        *avail = *limit;
}

static void host_memory(double *limit, double *avail)
{
    int cgroup;
    double swap;
    host_memory_of(limit, avail, &cgroup, &swap);
}

int psd_snapshot_fits(uint64_t bytes, char *why, size_t whylen)
{
    double limit, avail, swap;
    int cgroup;
    host_memory_of(&limit, &avail, &cgroup, &swap);
    /* Swap takes what memory does not, slowly: a host's limit is its
     * memory and swap (a cgroup's memory.max is its memory alone). */
    if (!cgroup && limit > 0)
        limit += swap;
    if (limit <= 0 || (double)bytes <= limit)
        return 1;
    const double mib = 1024.0 * 1024;
    snprintf(why, whylen, "it holds %.1f MiB of rows, more than the %.1f "
             "MiB psd may use on this host (%s): loading it, psd would be "
             "killed by the kernel, with no word why. Raise the limit, or "
             "run this node on a host with more memory", (double)bytes / mib,
             limit / mib,
             cgroup ? "its cgroup's memory limit: MemoryMax= in a unit, a "
                      "container's or pod's limit"
                    : "its memory and swap, MemTotal and SwapTotal");
    return 0;
}

/* What psd's own address space takes before any row (measured: 39 MB of
 * VmSize for a node with no rows; some room on top). */
#define OWN_AS (64.0 * 1024 * 1024)

/* Whether node i runs on this host as far as the file can tell: the
 * address clients reach it at, or the one it listens on, is a loopback
 * one (listen = 0.0.0.0:P says nothing of the host). */
static int here(const psd_config *c, int i)
{
    struct sockaddr_storage sa;
    if (resolve(&c->nodes[i], &sa) == 0 && is_loopback(&sa))
        return 1;
    return c->nlisten > 0 && resolve(&c->listen[i], &sa) == 0 &&
           is_loopback(&sa);
}

/* A dense table's rows are all made, and written with their init, when
 * psd starts: those of node i's shards (node -1: of every node on a
 * loopback address, which all run here), with their optimizer state,
 * must fit this host, or the kernel kills psd while it fills them (a
 * malloc above free memory succeeds, its pages come later), with no word
 * why. */
/* The nodes whose memory this host gives, each name looked up once:
 * node, and with it (or without a node, -1) every node on a loopback
 * address, since they all run here. Marks them in mine (nnodes bytes)
 * when it is given; returns their count. */
static int nodes_here(const psd_config *c, int node, char *mine)
{
    int nodes = 0, loop_own = node >= 0 && here(c, node);
    for (int n = 0; n < c->nnodes; n++) {
        int m = n == node || ((node < 0 || loop_own) && here(c, n));
        if (mine)
            mine[n] = (char)m;
        nodes += m;
    }
    return nodes;
}

/* Bytes a sparse row takes beside its weights and optimizer state: its
 * key, and its share of the slot array (8 to 16 bytes a slot, at most
 * 3/4 full): about, for a note. */
#define SPARSE_ROW_EXTRA 24

/* Sparse tables grow as keys come; max_rows bounds each on each node. A
 * bound the memory psd may use here cannot hold is a mistake worth a
 * note: the node is killed before its tables reach it, where a push past
 * max_rows would have been refused (PS_EFULL) with the node still up.
 * `nodes` of the cluster run here (node i among them); dense is what
 * their dense tables take. Tables without max_rows say nothing. */
static void sparse_cap_note(psd_preflight *pf, const psd_config *c,
                            const char *path, int nodes, int i, double dense,
                            double limit)
{
    double cap = 0, most = 0;
    const psd_table_conf *big = NULL;
    for (int t = 0; t < c->ntables; t++) {
        const psd_table_conf *tc = &c->tables[t];
        if (tc->dense || tc->max_rows == 0)
            continue;
        double b = (double)tc->max_rows *
                   ((double)psd_updater_row_bytes(tc->upd.kind, tc->dim) +
                    SPARSE_ROW_EXTRA) *
                   nodes;
        cap += b;
        if (b > most) {
            most = b;
            big = tc;
        }
    }
    if (!big || limit <= 0 || dense + cap <= limit)
        return;
    const double gib = 1024.0 * 1024 * 1024;
    char who[64];
    if (nodes == 1)
        snprintf(who, sizeof who, "node %d", i);
    else
        snprintf(who, sizeof who, "the %d nodes on this host (loopback)",
                 nodes);
    add(&pf->notes, &pf->nnotes, path, big->line, "[table.%s]: max_rows lets "
        "the sparse tables of %s grow to about %.1f GiB with their "
        "optimizer state and index (this one %.1f GiB), beside %.1f GiB of "
        "dense rows: more than the %.1f GiB psd may use on this host, so "
        "it would be killed before they reach max_rows. Lower max_rows, or "
        "give psd more memory", big->name, who, cap / gib, most / gib,
        dense / gib, limit / gib);
}

static void check_memory(psd_preflight *pf, const psd_config *c,
                         const char *path, int node)
{
    double need = 0, most = 0, limit, avail;
    const psd_table_conf *big = NULL;
    /* Each node is its own process, under its own address-space limit
     * (ulimit -v, LimitAS=): what the largest one needs is held to it. */
    double *per = calloc((size_t)c->nnodes, sizeof *per);
    char *mine = calloc((size_t)c->nnodes, 1);
    if (!mine || !per) {
        free(mine);
        free(per);
        return;
    }
    int i = node, nodes = nodes_here(c, node, mine);
    for (int n = 0; n < c->nnodes; n++)
        if (mine[n])
            i = n;
    if (nodes == 0) {
        free(mine);
        free(per);
        return;
    }
    for (int t = 0; t < c->ntables; t++) {
        const psd_table_conf *tc = &c->tables[t];
        if (!tc->dense)
            continue;
        double rows = 0,
               per_row = (double)psd_updater_row_bytes(tc->upd.kind, tc->dim);
        for (uint32_t s = 0; s < c->shards; s++) {
            int at = psw_node_of_shard(s, c->nnodes);
            if (!mine[at])
                continue;
            double r = (double)(psw_dense_shard_start(tc->rows, c->shards,
                                                      s + 1) -
                                psw_dense_shard_start(tc->rows, c->shards, s));
            rows += r;
            per[at] += r * per_row;
        }
        double b = rows * per_row;
        need += b;
        if (b > most) {
            most = b;
            big = tc;
        }
    }
    const double gib = 1024.0 * 1024 * 1024;
    struct rlimit as;
    /* The node asked for, whose process this limit is (or will be); for
     * every node, the one that needs most. */
    int worst = node;
    for (int n = 0; node < 0 && n < c->nnodes; n++)
        if (mine[n] && (worst < 0 || per[n] > per[worst]))
            worst = n;
    /* Beside psd's own address space before any row (its code, libraries,
     * thread stacks, the loop: about 40 MB; OWN_AS): a table that fit
     * the limit alone passed --check, and the start then failed. */
    if (big && worst >= 0 && getrlimit(RLIMIT_AS, &as) == 0 &&
        as.rlim_cur != RLIM_INFINITY &&
        per[worst] + OWN_AS > (double)as.rlim_cur)
        add(&pf->problems, &pf->nproblems, path, big->line, "[table.%s]: "
            "node %d's rows of dense tables need %.2f GiB with their "
            "optimizer state, more than the %.2f GiB of address space a "
            "process may have here (ulimit -v; LimitAS= in a unit), less "
            "psd's own %.0f MiB: it would fail to make them. Raise the "
            "limit, or give the tables fewer rows or the cluster more "
            "nodes", big->name, worst, per[worst] / gib,
            (double)as.rlim_cur / gib, OWN_AS / (1024.0 * 1024));
    free(mine);
    free(per);
    host_memory(&limit, &avail);
    sparse_cap_note(pf, c, path, nodes, i, need, limit);
    /* Not known (a unit with ProcSubset=pid hides /proc/meminfo): said
     * when the rows are big enough to matter, since nothing else would
     * stop psd from being killed while it makes them. */
    if (big && limit <= 0 && need >= gib) {
        add(&pf->notes, &pf->nnotes, path, big->line, "[table.%s]: dense "
            "tables need %.1f GiB here with their optimizer state, and "
            "this host's memory cannot be read (/proc/meminfo, and no "
            "cgroup memory.max): not checked", big->name, need / gib);
        return;
    }
    /* No available figure: no note. */
    if (!big || limit <= 0 || need <= avail || (need <= limit && avail <= 0))
        return;
    char who[64];
    if (nodes == 1)
        snprintf(who, sizeof who, "node %d's", i);
    else
        snprintf(who, sizeof who, "the %d node%s on this host (loopback): "
                 "their", nodes, nodes == 1 ? "" : "s");
    if (need > limit)
        add(&pf->problems, &pf->nproblems, path, big->line, "[table.%s]: "
            "%s rows of dense tables need %.1f GiB with their optimizer "
            "state (this one %.1f GiB), more than the %.1f GiB psd may use "
            "on this host: it would be killed while it makes them. Give the "
            "tables fewer rows, or the cluster more nodes (on other hosts)",
            big->name, who, need / gib, most / gib, limit / gib);
    else
        add(&pf->notes, &pf->nnotes, path, big->line, "[table.%s]: %s rows "
            "of dense tables need %.1f GiB with their optimizer state, and "
            "this host has %.1f GiB available now: psd may be killed while "
            "it makes them", big->name, who, need / gib, avail / gib);
}

/* Every table keeps a record of each shard of the cluster, its node's or
 * not (PSD_TABLE_SHARD_BYTES), before any row: 65,535 shards of 4,096
 * tables are 47 GB on every node, which --check passed and psd died of
 * as it started (100 tables took 1.1 GB). Said from 64 MiB a node on. */
static void check_shards(psd_preflight *pf, const psd_config *c,
                         const char *path, int node)
{
    const double gib = 1024.0 * 1024 * 1024;
    double one = (double)c->ntables * c->shards * PSD_TABLE_SHARD_BYTES;
    if (one < 64.0 * 1024 * 1024)
        return;
    int nodes = nodes_here(c, node, NULL);
    if (nodes == 0)
        return;
    char what[200];
    snprintf(what, sizeof what, "[cluster] shards: %u shards of %d tables "
             "take %.2f GiB on every node before any row (%d bytes a shard "
             "a table, its node's or not)", c->shards, c->ntables,
             one / gib, PSD_TABLE_SHARD_BYTES);
    const char *fix = "give the cluster fewer shards (a few per node is "
                      "enough to spread the rows) or fewer tables";
    struct rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
        one > (double)as.rlim_cur) {
        add(&pf->problems, &pf->nproblems, path, c->shards_line, "%s, more "
            "than the %.2f GiB of address space a process may have here "
            "(ulimit -v; LimitAS= in a unit): %s", what,
            (double)as.rlim_cur / gib, fix);
        return;
    }
    double limit, avail, need = one * nodes;
    host_memory(&limit, &avail);
    char who[64] = "";
    if (nodes > 1)
        snprintf(who, sizeof who, " (%.1f GiB for the %d nodes on this "
                 "host)", need / gib, nodes);
    if (limit > 0 && need > limit)
        add(&pf->problems, &pf->nproblems, path, c->shards_line, "%s%s, "
            "more than the %.1f GiB psd may use on this host: it would be "
            "killed as it starts; %s", what, who, limit / gib, fix);
    else if (avail > 0 && need > avail)
        add(&pf->notes, &pf->nnotes, path, c->shards_line, "%s%s, and this "
            "host has %.1f GiB available now: psd may be killed as it "
            "starts; %s", what, who, avail / gib, fix);
}

/* Bytes a remembered push may take at the most (a slot of its client's
 * table at low load, and its place in the client's ring; conf/psd.ini,
 * max_client_memory's E). */
#define REMEMBERED_PUSH_BYTES 288

/* max_remembered_pushes is a bound on what a node may hold, not what it
 * needs: said when it is a bound this host could not honour (up to 17
 * billion pushes passed with no word, some 4.5 TiB). */
static void check_remembered(psd_preflight *pf, const psd_config *c,
                             const char *path)
{
    double limit, avail, gib = 1024.0 * 1024 * 1024;
    /* One request's parts are taken past the limit (psd_dedup_room). */
    double most = ((double)c->max_remembered_pushes + PSW_MAX_PARTS) *
                  REMEMBERED_PUSH_BYTES;
    /* A connected client's pushes stay remembered until its next frame
     * acknowledges them: below one a connection, a client idle after a
     * push holds what another's next push needs (a trial: at 1, two of
     * three clients were refused every round). */
    if (c->max_remembered_pushes < (uint64_t)c->max_connections)
        add(&pf->notes, &pf->nnotes, path, 0, "[server] "
            "max_remembered_pushes = %llu is below max_connections (%d): "
            "each client's pushes stay remembered until its next frame "
            "acknowledges them, so clients idle after a push can hold them "
            "all, and the others' pushes are refused (PS_EBUSY) meanwhile. "
            "Give it some pushes in flight per connection",
            (unsigned long long)c->max_remembered_pushes,
            c->max_connections);
    host_memory(&limit, &avail);
    if (limit <= 0 || most <= limit)
        return;
    add(&pf->notes, &pf->nnotes, path, 0, "[server] max_remembered_pushes "
        "= %llu: remembering that many pushes could take up to %.1f GiB "
        "(%d bytes each, and one request's %d parts past it), more than "
        "the %.1f GiB psd may use on this host: a node would be killed "
        "before it reached the limit. Lower it (the default, 2097152, is "
        "up to 594 MiB)",
        (unsigned long long)c->max_remembered_pushes, most / gib,
        REMEMBERED_PUSH_BYTES, PSW_MAX_PARTS, limit / gib);
}

int psd_fd_reserve(const psd_config *c)
{
    return PSD_FD_RESERVE + (c->nmetrics ? PSD_METRICS_FDS : 0);
}

int psd_fd_room(int want, int reserve, int raise)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r))
        return INT_MAX;
    rlim_t need = (rlim_t)want + (rlim_t)reserve;
    if (raise && r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need) {
        struct rlimit up = r;
        up.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max > need
                          ? need : r.rlim_max;
        /* At the hard limit already: nothing to ask (psd asks at each
         * tick). */
        if (up.rlim_cur != r.rlim_cur && setrlimit(RLIMIT_NOFILE, &up) == 0)
            r = up;
    }
    rlim_t have = raise ? r.rlim_cur : r.rlim_max;
    /* rlim_t is unsigned: a limit under the reserve is no room, not a
     * difference that wraps around to "no limit". */
    if (have == RLIM_INFINITY)
        return INT_MAX;
    if (have <= (rlim_t)reserve)
        return 0;
    return have - (rlim_t)reserve >= (rlim_t)INT_MAX
               ? INT_MAX : (int)(have - (rlim_t)reserve);
}

/* The open files limit against max_connections: at the limit, the kernel
 * refuses a connection's descriptor and libuv closes it unseen (no log
 * line, no count, psctl shut out with the clients), and psd's own files
 * fail (the journal's next segment, snapshots, a reload's ini). psd
 * lifts the soft limit toward what it needs at start (psd_fd_room); what
 * the hard limit leaves is said here, and then psd treats its room as
 * max_connections. */
static void check_files(psd_preflight *pf, const psd_config *c,
                        const char *path)
{
    int reserve = psd_fd_reserve(c);
    int room = psd_fd_room(c->max_connections, reserve, 0);
    struct rlimit r;
    if (room >= c->max_connections || getrlimit(RLIMIT_NOFILE, &r))
        return;
    if (room < 1)
        add(&pf->problems, &pf->nproblems, path, 0, "the open files limit "
            "is %llu here (ulimit -n; LimitNOFILE= in a unit): psd keeps %d "
            "for its own files%s, which leaves none for a connection. Raise "
            "it", (unsigned long long)r.rlim_max, reserve,
            c->nmetrics ? " and /metrics" : "");
    else
        add(&pf->notes, &pf->nnotes, path, 0, "[server] max_connections = "
            "%d, but the open files limit is %llu here (ulimit -n; "
            "LimitNOFILE= in a unit): psd takes %d connection%s and refuses "
            "more as at max_connections, keeping %d files for its own (the "
            "journal, snapshots, a reload%s). Raise the limit for more",
            c->max_connections, (unsigned long long)r.rlim_max, room,
            room == 1 ? "" : "s", reserve, c->nmetrics ? ", /metrics" : "");
}

static int run(psd_preflight *pf, const psd_config *cfg, const char *path,
               int node, int self, int nodes)
{
    memset(pf, 0, sizeof *pf);
    pf->self = self;
    check_token(pf, cfg, path);
    check_data_dir(pf, cfg, path);
    for (int i = 0; nodes && i < cfg->nnodes; i++)
        check_node(pf, cfg, path, i, node < 0 || node == i, node >= 0);
    /* This host's memory says something of the nodes it runs: the one
     * started, or the one --check -n names; without -n, those on a
     * loopback address. */
    if (nodes && node < cfg->nnodes) {
        check_memory(pf, cfg, path, node);
        check_shards(pf, cfg, path, node);
    }
    check_remembered(pf, cfg, path);
    check_files(pf, cfg, path);
    return pf->nproblems;
}

int psd_preflight_run(psd_preflight *pf, const psd_config *cfg,
                      const char *path, int node)
{
    return run(pf, cfg, path, node, 0, 1);
}

int psd_preflight_settings(psd_preflight *pf, const psd_config *cfg,
                           const char *path, int node)
{
    return run(pf, cfg, path, node, 1, 0);
}

int psd_preflight_start(psd_preflight *pf, const psd_config *cfg,
                        const char *path, int node)
{
    return run(pf, cfg, path, node, 1, 1);
}

void psd_preflight_destroy(psd_preflight *pf)
{
    psw_wipe(pf->token, sizeof pf->token);
    free(pf->problems);
    free(pf->notes);
    pf->problems = pf->notes = NULL;
    pf->nproblems = pf->nnotes = 0;
}
