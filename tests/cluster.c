/* Starting and stopping real psd processes for end-to-end tests. */
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

/* 127.0.0.1:port. */
static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* One port the kernel hands out now (bind to port 0), or -1. */
static int kernel_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* Whether nothing is bound to 127.0.0.1:port now (nor to the wildcard
 * address, nor in TIME_WAIT: the bind has no SO_REUSEADDR). */
static int port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(port);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* PSD_TEST_PORTS=LO-HI: the range this test program takes its ports
 * from, in turn, each checked free when taken. tests/run.sh runs several
 * programs at once and gives each its own range below the kernel's
 * ephemeral ports, so that no two pick the same port: the kernel hands
 * the same free port to binds close together, in one process or two.
 * 0 when unset (or malformed: the kernel's ports then). */
static int range_port(void)
{
    static int lo = -1, hi, at;
    if (lo < 0) {
        const char *r = getenv("PSD_TEST_PORTS");
        lo = hi = 0;
        if (r && sscanf(r, "%d-%d", &lo, &hi) != 2)
            lo = hi = 0;
        if (lo < 1024 || hi > 65535 || hi < lo)
            lo = hi = 0;
    }
    if (!lo)
        return 0;
    for (int tries = 0; tries <= hi - lo; tries++) {
        int port = lo + at++ % (hi - lo + 1);
        if (port_free(port))
            return port;
    }
    return -1;
}

/* A port the kernel just handed out: free now, and unlikely to be handed
 * out again within the second it takes psd to bind it. The kernel may
 * hand out the port it gave the call before (it is free again once that
 * socket closed), so the last ports returned are never returned again:
 * two nodes of one cluster, started a moment later, would both get it.
 * Under tests/run.sh, a port of this program's range (range_port). */
int cluster_free_port(void)
{
    static int recent[64];
    static unsigned next;
    int ranged = range_port();
    if (ranged)
        return ranged;
    for (int tries = 0; tries < 100; tries++) {
        int port = kernel_port(), seen = 0;
        if (port < 0)
            return -1;
        for (unsigned i = 0; i < 64 && !seen; i++)
            seen = recent[i] == port;
        if (seen)
            continue;
        recent[next++ % 64] = port;
        return port;
    }
    return -1;
}

static int port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(port);
    int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static pid_t start_node(const test_cluster *c, int i, const char *arg)
{
    const char *psd = getenv("PSD_BIN");
    char log[400], node[16];
    snprintf(log, sizeof log, "%s/node%d.log", c->dir, i);
    snprintf(node, sizeof node, "%d", i);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)    /* the parent died before prctl */
        _exit(1);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        dup2(fd, 1);
        close(fd);
    }
    execl(psd ? psd : "build/psd", "psd", "-c", c->ini, "-n", node, arg,
          (char *)NULL);
    fprintf(stderr, "exec psd: %s\n", strerror(errno));
    _exit(127);
}

int cluster_start(test_cluster *c, int nodes, int shards, const char *extra)
{
    return cluster_start_ex(c, nodes, shards, "workers = 4\n", extra);
}

int cluster_wait_up(test_cluster *c, int i, int ms)
{
    for (int t = 0; t <= ms; t += 10) {
        if (!cluster_alive(c, i))
            break;
        if (port_open(c->port[i]))
            return 0;
        sleep_ms(10);
    }
    char *log = cluster_log(c, i);
    fprintf(stderr, "psd node %d did not come up within %d ms; its log:\n"
            "%s\n", i, ms, log ? log : "");
    free(log);
    return -1;
}

int cluster_start_ex(test_cluster *c, int nodes, int shards,
                     const char *cluster_lines, const char *extra)
{
    return cluster_start_opts(c, nodes, shards, 0, cluster_lines, extra);
}

int cluster_start_opts(test_cluster *c, int nodes, int shards, int proxied,
                       const char *cluster_lines, const char *extra)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/psd-test-XXXXXX");
    if (!mkdtemp(c->dir)) {
        perror("mkdtemp");
        return -1;
    }
    snprintf(c->ini, sizeof c->ini, "%s/cluster.ini", c->dir);
    FILE *f = fopen(c->ini, "w");
    if (!f)
        return -1;
    fprintf(f, "[cluster]\nnodes = ");
    size_t at = 0;
    for (int i = 0; i < nodes; i++) {
        c->port[i] = cluster_free_port();
        c->pub[i] = proxied ? cluster_free_port() : c->port[i];
        fprintf(f, "%s127.0.0.1:%d", i ? ", " : "", c->pub[i]);
        at += (size_t)snprintf(c->spec + at, sizeof c->spec - at, "%s127.0.0.1:%d",
                               i ? "," : "", c->pub[i]);
    }
    if (proxied) {
        fprintf(f, "\nlisten = ");
        for (int i = 0; i < nodes; i++)
            fprintf(f, "%s127.0.0.1:%d", i ? ", " : "", c->port[i]);
    }
    /* Every cluster keeps its snapshots and journal in its own folder. */
    const char *srv = strstr(extra, "[server]\n");
    if (srv)
        fprintf(f, "\nshards = %d\n%s\n%.*s[server]\ndata_dir = %s\n%s\n",
                shards, cluster_lines, (int)(srv - extra), extra, c->dir,
                srv + 9);
    else
        fprintf(f, "\nshards = %d\n%s\n%s\n[server]\ndata_dir = %s\n",
                shards, cluster_lines, extra, c->dir);
    fclose(f);
    c->n = nodes;
    for (int i = 0; i < nodes; i++)
        c->pid[i] = start_node(c, i, NULL);
    for (int i = 0; i < nodes; i++)
        if (cluster_wait_up(c, i, 5000)) {
            cluster_stop(c);
            return -1;
        }
    return 0;
}

int cluster_prepare(test_cluster *c, int n)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "/tmp/psd-test-XXXXXX");
    if (!mkdtemp(c->dir))
        return -1;
    snprintf(c->ini, sizeof c->ini, "%s/cluster.ini", c->dir);
    c->n = n;
    return 0;
}

int cluster_restart(test_cluster *c, int i)
{
    if (cluster_alive(c, i))
        cluster_kill(c, i, SIGKILL);
    c->pid[i] = start_node(c, i, NULL);
    return cluster_wait_up(c, i, 5000);
}

void cluster_launch(test_cluster *c, int i, const char *arg)
{
    if (cluster_alive(c, i))
        cluster_kill(c, i, SIGKILL);
    c->pid[i] = start_node(c, i, arg);
}

int cluster_restart_with(test_cluster *c, int i, const char *arg)
{
    cluster_launch(c, i, arg);
    return cluster_wait_up(c, i, 5000);
}

int cluster_wait_exit(test_cluster *c, int i, int ms)
{
    for (int t = 0; c->pid[i] > 0 && t <= ms; t += 10) {
        int st;
        if (waitpid(c->pid[i], &st, WNOHANG) == c->pid[i]) {
            c->pid[i] = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        sleep_ms(10);
    }
    return -1;
}

int cluster_alive(test_cluster *c, int i)
{
    if (c->pid[i] <= 0)
        return 0;
    int st;
    pid_t r = waitpid(c->pid[i], &st, WNOHANG);
    if (r == c->pid[i]) {
        c->pid[i] = -1;
        return 0;
    }
    return 1;
}

void cluster_kill(test_cluster *c, int i, int sig)
{
    if (c->pid[i] > 0) {
        kill(c->pid[i], sig);
        waitpid(c->pid[i], NULL, 0);
        c->pid[i] = -1;
    }
}

int cluster_stop(test_cluster *c)
{
    int bad = 0;
    for (int i = 0; i < c->n; i++)
        if (c->pid[i] > 0)
            kill(c->pid[i], SIGTERM);
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] <= 0)
            continue;
        int ms = c->stop_ms > 0 ? c->stop_ms : 10000;
        int st = 0, t, tries = ms < 10 ? 1 : ms / 10;
        for (t = 0; t < tries; t++) {
            if (waitpid(c->pid[i], &st, WNOHANG) == c->pid[i])
                break;
            sleep_ms(10);
        }
        if (t == tries) {
            fprintf(stderr, "psd node %d ignored SIGTERM for %.1f s\n", i,
                    ms / 1000.0);
            kill(c->pid[i], SIGKILL);
            waitpid(c->pid[i], &st, 0);
            bad = 1;
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            char *log = cluster_log(c, i);
            fprintf(stderr, "psd node %d exited badly (status %d); its log:\n"
                    "%s\n", i, st, log ? log : "");
            free(log);
            bad = 1;
        }
        c->pid[i] = -1;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (c->dir[0] && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", c->dir);
    return bad ? -1 : 0;
}

void cluster_discard(const test_cluster *c)
{
    static const char name[] = "/node0.log";   /* as start_node names it */
    char path[sizeof c->dir + sizeof name];
    size_t n = strlen(c->dir);
    if (!n)
        return;
    memcpy(path, c->dir, n);
    memcpy(path + n, name, sizeof name);
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] > 0)
            kill(c->pid[i], SIGKILL);
        path[n + 5] = (char)('0' + i % 10);   /* CLUSTER_MAX <= 10 */
        unlink(path);
    }
    unlink(c->ini);
    rmdir(c->dir);
}

int cluster_log_wait(const test_cluster *c, int i, const char *text, int ms)
{
    for (int t = 0; t <= ms; t += 10) {
        char *log = cluster_log(c, i);
        int found = log && strstr(log, text);
        free(log);
        if (found)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

char *cluster_psctl(const test_cluster *c, int *status, const char *args)
{
    const char *b = getenv("PSCTL_BIN");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s -c '%s' %s 2>&1", b ? b : "build/psctl",
             c->ini, args);
    *status = -1;
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 16, n = 0, k;
    char *out = malloc(cap + 1);
    while (out && (k = fread(out + n, 1, cap - n, p)) > 0)
        if ((n += k) == cap) {
            char *more = realloc(out, 2 * cap + 1);
            if (!more)
                break;
            out = more;
            cap *= 2;
        }
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (out)
        out[n] = '\0';
    return out;
}

char *cluster_log(const test_cluster *c, int i)
{
    char path[400];
    snprintf(path, sizeof path, "%s/node%d.log", c->dir, i);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb)
                break;
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static int holds(const char *b, size_t n, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (b[i] == s[0] && memcmp(b + i, s, k) == 0)
            return 1;
    return 0;
}

const char *cluster_psd_sanitizer(void)
{
    const char *psd = getenv("PSD_BIN") ? getenv("PSD_BIN") : "build/psd";
    FILE *f = fopen(psd, "rb");
    if (!f)
        return NULL;
    /* The runtimes' entry points are in the binary's symbol names. */
    static const char *const names[][2] = {
        { "__asan_init", "AddressSanitizer" },
        { "__tsan_init", "ThreadSanitizer" },
    };
    const char *found = NULL;
    char buf[1 << 16];
    size_t keep = 0, n;
    while (!found && (n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
        n += keep;
        for (size_t i = 0; !found && i < 2; i++)
            if (holds(buf, n, names[i][0]))
                found = names[i][1];
        /* A name may straddle two reads: keep the tail. */
        keep = n < 16 ? n : 16;
        memmove(buf, buf + n - keep, keep);
    }
    fclose(f);
    return found;
}

pid_t spawn(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(fn(arg));
    }
    return pid;
}

int reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}
