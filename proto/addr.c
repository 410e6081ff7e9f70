/* The grammar of node addresses, shared by psd and libpsclient; see
 * addr.h. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "addr.h"

#define WHY(...) (snprintf(why, whylen, __VA_ARGS__), -1)

/* A host name as resolvers take it: dot-separated labels of 1..63
 * letters, digits, '-' or '_' (container and service names use it), not
 * starting or ending with '-'. */
static int valid_name(const char *h, size_t n)
{
    size_t label = 0;
    if (n == 0 || n >= PSW_HOST_MAX)
        return 0;
    /* A fully qualified name may end in the root's dot ("ps0.example."),
     * kept as written: the resolver then tries no search domain. */
    if (n > 1 && h[n - 1] == '.')
        n--;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (ch == '.') {
            if (label == 0 || h[i - 1] == '-')
                return 0;
            label = 0;
            continue;
        }
        if (!isalnum(ch) && ch != '-' && ch != '_')
            return 0;
        if (ch == '-' && label == 0)
            return 0;
        if (++label > 63)
            return 0;
    }
    return label > 0 && h[n - 1] != '-';
}

static int all_digits_and_dots(const char *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)h[i]) && h[i] != '.')
            return 0;
    return 1;
}

int psw_addr_parse(const char *s, size_t len, psw_addr *a, char *why,
                   size_t whylen)
{
    static const char form[] = "expected host:port, IPv4:port or [IPv6]:port";
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    memset(a, 0, sizeof *a);
    const char *host = s, *colon;
    size_t hlen;
    if (len && *s == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || close + 1 >= s + len || close[1] != ':')
            return WHY("%s", form);
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
        a->kind = PSW_HOST_IPV6;
    } else {
        colon = memchr(s, ':', len);
        if (!colon || memchr(colon + 1, ':', (size_t)(s + len - colon - 1)))
            return WHY("%s", form);
        hlen = (size_t)(colon - s);
        a->kind = all_digits_and_dots(s, hlen) ? PSW_HOST_IPV4
                                               : PSW_HOST_NAME;
    }
    const char *port = colon + 1;
    size_t plen = (size_t)(s + len - port);
    if (hlen == 0)
        return WHY("%s", form);
    if (a->kind == PSW_HOST_NAME) {
        if (!valid_name(host, hlen))
            return WHY("expected a host name (letters, digits, '-', '_' and "
                       "dots, at most %d bytes), a numeric IPv4 address or "
                       "an [IPv6] address", PSW_HOST_MAX - 1);
        memcpy(a->host, host, hlen);
        a->host[hlen] = '\0';
    } else {
        char tmp[64];
        unsigned char bin[16];
        int af = a->kind == PSW_HOST_IPV6 ? AF_INET6 : AF_INET;
        if (hlen >= sizeof tmp)
            return WHY("expected a numeric %s address",
                       af == AF_INET6 ? "IPv6" : "IPv4");
        memcpy(tmp, host, hlen);
        tmp[hlen] = '\0';
        if (af == AF_INET6 && memchr(tmp, '%', hlen))
            return WHY("an IPv6 zone (%%eth0) is not taken, nor link-local "
                       "addresses: use a global or fd00::/8 one");
        if (inet_pton(af, tmp, bin) != 1 ||
            !inet_ntop(af, bin, a->host, sizeof a->host))
            return WHY("expected a numeric %s address",
                       af == AF_INET6 ? "IPv6" : "IPv4");
        /* fe80::/10 means nothing without the interface it is on: psd
         * could not listen on one ("invalid argument") and a client not
         * connect, while psd --check took it. */
        if (af == AF_INET6 && bin[0] == 0xfe && (bin[1] & 0xc0) == 0x80)
            return WHY("a link-local IPv6 address (it needs a zone, which "
                       "is not taken): use a global or fd00::/8 one");
    }
    long p = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!isdigit((unsigned char)port[i]) || p > 65535) {
            p = -1;
            break;
        }
        p = p * 10 + (port[i] - '0');
    }
    if (plen == 0 || p < 1 || p > 65535)
        return WHY("expected a port 1..65535");
    a->port = (int)p;
    return 0;
}

const char *psw_addr_host(const psw_addr *a, int *v4)
{
    static const char mapped[] = "::ffff:";
    int four = a->kind == PSW_HOST_IPV4;
    const char *h = a->host;
    if (a->kind == PSW_HOST_IPV6 &&
        strncasecmp(h, mapped, sizeof mapped - 1) == 0 &&
        strchr(h + sizeof mapped - 1, '.')) {
        four = 1;
        h += sizeof mapped - 1;
    }
    if (v4)
        *v4 = four;
    return h;
}

int psw_addr_link_local(const struct sockaddr *sa)
{
    struct sockaddr_in6 a6;
    if (sa->sa_family != AF_INET6)
        return 0;
    memcpy(&a6, sa, sizeof a6);      /* sa may be a sockaddr's alignment */
    return IN6_IS_ADDR_LINKLOCAL(&a6.sin6_addr);
}

/* The first character of a /proc/sys file, or 0 when it cannot be read. */
static char sysctl_char(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    int c = fgetc(f);
    fclose(f);
    return c == EOF ? 0 : (char)c;
}

/* 1 when every interface has IPv6 turned off (disable_ipv6 = 1 under
 * /proc/sys/net/ipv6/conf, "all" and "default" aside), 0 when one has
 * it or none can be read. */
static int ipv6_off_everywhere(void)
{
    DIR *d = opendir("/proc/sys/net/ipv6/conf");
    if (!d)
        return 0;
    int seen = 0, on = 0;
    for (struct dirent *e; !on && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "all") ||
            !strcmp(e->d_name, "default"))
            continue;
        char path[300];
        snprintf(path, sizeof path,
                 "/proc/sys/net/ipv6/conf/%.200s/disable_ipv6", e->d_name);
        char c = sysctl_char(path);
        seen += c != 0;
        on += c == '0';
    }
    closedir(d);
    return seen && !on;
}

const char *psw_addr_ipv6_off(const struct sockaddr *sa, int err)
{
    if (sa->sa_family != AF_INET6)
        return "";
    if (err == EAFNOSUPPORT)
        return " (this kernel has no IPv6: started with ipv6.disable=1, or "
               "built or confined without it; use an IPv4 address)";
    if (err != EADDRNOTAVAIL)
        return "";
    /* Off on every interface (all = 1 sets each one), or on the loopback
     * interface for ::1; an address that is simply not this host's says
     * nothing more (all = 1 then lo = 0 has ::1 back). */
    int everywhere = ipv6_off_everywhere();
    if (everywhere &&
        sysctl_char("/proc/sys/net/ipv6/conf/all/disable_ipv6") == '1')
        return " (IPv6 is off on this host: net.ipv6.conf.all.disable_ipv6 "
               "= 1; use an IPv4 address, or turn it on)";
    struct sockaddr_in6 a6;
    memcpy(&a6, sa, sizeof a6);
    if (IN6_IS_ADDR_LOOPBACK(&a6.sin6_addr) &&
        sysctl_char("/proc/sys/net/ipv6/conf/lo/disable_ipv6") == '1')
        return " (IPv6 is off on the loopback interface: "
               "net.ipv6.conf.lo.disable_ipv6 = 1; use 127.0.0.1, or turn "
               "it on)";
    if (everywhere)
        return " (IPv6 is off on every interface of this host: "
               "net.ipv6.conf.IFACE.disable_ipv6 = 1; use an IPv4 address, "
               "or turn it on)";
    return "";
}

int psw_addr_self_connected(int fd)
{
    struct sockaddr_storage me, peer;
    socklen_t nme = sizeof me, npeer = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&me, &nme) ||
        getpeername(fd, (struct sockaddr *)&peer, &npeer) || nme != npeer ||
        me.ss_family != peer.ss_family)
        return 0;
    if (me.ss_family == AF_INET) {
        struct sockaddr_in a, b;
        memcpy(&a, &me, sizeof a);
        memcpy(&b, &peer, sizeof b);
        return a.sin_port == b.sin_port &&
               a.sin_addr.s_addr == b.sin_addr.s_addr;
    }
    if (me.ss_family == AF_INET6) {
        struct sockaddr_in6 a, b;
        memcpy(&a, &me, sizeof a);
        memcpy(&b, &peer, sizeof b);
        return a.sin6_port == b.sin6_port &&
               !memcmp(&a.sin6_addr, &b.sin6_addr, sizeof a.sin6_addr);
    }
    return 0;
}

int psw_addr_same(const psw_addr *a, const psw_addr *b)
{
    int a4, b4;
    const char *ha = psw_addr_host(a, &a4), *hb = psw_addr_host(b, &b4);
    return a->port == b->port && a4 == b4 && strcasecmp(ha, hb) == 0;
}

/* Both list parsers; unique: a repeated address is an error. */
static int list_parse(const char *line, int max, int unique, psw_addr **out,
                      int *n, psw_addr_error *e)
{
    memset(e, 0, sizeof *e);
    *out = NULL;
    *n = 0;
    size_t count = 1;
    for (const char *q = line; *q; q++)
        count += *q == ',';
    const char *q = line;
    while (isspace((unsigned char)*q))
        q++;
    if (!*q) {
        snprintf(e->why, sizeof e->why, "expected a comma-separated list "
                 "of host:port");
        return -1;
    }
    if (count > (size_t)max) {
        snprintf(e->why, sizeof e->why, "at most %d addresses", max);
        return -1;
    }
    psw_addr *a = calloc(count, sizeof *a);
    if (!a)
        return -2;
    int k = 0;
    for (const char *p = line;; k++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        size_t skip = 0;
        while (skip < len && isspace((unsigned char)p[skip]))
            skip++;
        size_t tl = len - skip;
        while (tl && isspace((unsigned char)p[skip + tl - 1]))
            tl--;
        e->entry = k + 1;
        snprintf(e->item, sizeof e->item, "%.*s", (int)tl, p + skip);
        /* Quoted back in errors that reach a terminal (psctl -s, ps_open's
         * stderr): an escape sequence in it must not act there. */
        for (char *c = e->item; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        if (tl == 0) {
            snprintf(e->why, sizeof e->why, "entry %d is empty", k + 1);
            free(a);
            return -1;
        }
        if (psw_addr_parse(p, len, &a[k], e->why, sizeof e->why)) {
            free(a);
            return -1;
        }
        for (int j = 0; unique && j < k; j++)
            if (psw_addr_same(&a[j], &a[k])) {
                e->first = j + 1;
                snprintf(e->why, sizeof e->why, "duplicate");
                free(a);
                return -1;
            }
        if (!end)
            break;
        p = end + 1;
    }
    memset(e, 0, sizeof *e);
    *out = a;
    *n = k + 1;
    return 0;
}

int psw_addr_list_parse(const char *line, int max, psw_addr **out, int *n,
                        psw_addr_error *e)
{
    return list_parse(line, max, 1, out, n, e);
}

int psw_addr_bind_list_parse(const char *line, int max, psw_addr **out,
                             int *n, psw_addr_error *e)
{
    return list_parse(line, max, 0, out, n, e);
}

int psw_addr_format(const psw_addr *a, char *out, size_t cap)
{
    if (a->kind == PSW_HOST_IPV6)
        return snprintf(out, cap, "[%s]:%d", a->host, a->port);
    return snprintf(out, cap, "%s:%d", a->host, a->port);
}

int psw_addr_words(const char *text)
{
    int words = 0;
    for (const char *w = text; *w;) {
        w += strspn(w, " \t");
        size_t n = strcspn(w, " \t");
        if (!n)
            break;
        psw_addr a;
        char why[160];
        if (psw_addr_parse(w, n, &a, why, sizeof why))
            return 0;
        words++;
        w += n;
    }
    return words > 0;
}

int psw_addr_on_line(const char *value, size_t first, const char *item)
{
    size_t n = strlen(item);
    if (first == SIZE_MAX)
        return 1;
    for (size_t i = 0; n && i + n <= first; i++)
        if (memcmp(value + i, item, n) == 0)
            return 1;
    return 0;
}

int psw_addr_quotable(const char *value, size_t first, const char *item)
{
    return psw_addr_on_line(value, first, item) || psw_addr_words(item);
}
