/* Node addresses: the one grammar of the `[cluster] nodes` (and `listen`)
 * line, read by psd's config and by libpsclient alike, and the text form
 * the layout carries in HELLO_OK. A host is a name (resolved later by
 * whoever connects or binds), a numeric IPv4 address, or an IPv6 address
 * in brackets. Pure libc: nothing here resolves or touches a socket. */
#ifndef PSW_ADDR_H
#define PSW_ADDR_H

#include <stddef.h>

#define PSW_HOST_MAX 254         /* a DNS name is at most 253 bytes */
/* "[host]:port" plus the NUL: the longest text psw_addr_format writes,
 * and the bound of a node address in HELLO_OK. */
#define PSW_ADDR_TEXT_MAX (PSW_HOST_MAX + 2 + 6 + 1)

enum { PSW_HOST_NAME, PSW_HOST_IPV4, PSW_HOST_IPV6 };

typedef struct psw_addr {
    char host[PSW_HOST_MAX];     /* numeric addresses in canonical form
                                    (inet_ntop), names as written */
    int port;                    /* 1..65535 */
    int kind;                    /* PSW_HOST_* */
} psw_addr;

/* Parses one "host:port", "a.b.c.d:port" or "[v6]:port" of len bytes
 * (blanks around it are skipped). Returns 0, or -1 with the reason
 * ("expected a port 1..65535", ...) written to why. */
int psw_addr_parse(const char *s, size_t len, psw_addr *a, char *why,
                   size_t whylen);

/* Whether text holds one or more words (split at blanks) and each reads
 * as an address (psw_addr_parse). */
int psw_addr_words(const char *text);

/* For an ini error about an address list: value is the list as read,
 * its first `first` bytes from the key's own line (SIZE_MAX: all of it).
 * psw_addr_on_line: whether item lies whole in that first part.
 * psw_addr_quotable: that, or each word of item reads as an address (a
 * comma missing at a line's end). Other text of an indented line may be
 * a token pasted under the list, and is not quoted: psd's checks and the
 * client's reader of the same file both ask these. */
int psw_addr_on_line(const char *value, size_t first, const char *item);
int psw_addr_quotable(const char *value, size_t first, const char *item);

/* What was wrong with a list: entry (1-based; 0: the list as a whole),
 * that entry's text, and why. For a duplicate, first is the entry it
 * repeats (else 0). */
typedef struct psw_addr_error {
    int entry;
    int first;
    char item[96];
    char why[128];
} psw_addr_error;

/* Parses "addr, addr, ..." (at most max entries) into *out (malloc'd,
 * the caller frees) and *n. Empty entries and duplicates (the same host,
 * compared without case, and port) are errors. Returns 0, -1 with *e
 * filled, or -2 when memory ran out. */
int psw_addr_list_parse(const char *line, int max, psw_addr **out, int *n,
                        psw_addr_error *e);

/* As psw_addr_list_parse, but an address may repeat: a list of bind
 * addresses (listen, metrics_listen), where nodes on different hosts may
 * well bind the same one (listen = 0.0.0.0:7070, 0.0.0.0:7070). The
 * caller decides which repeats are wrong. */
int psw_addr_bind_list_parse(const char *line, int max, psw_addr **out,
                             int *n, psw_addr_error *e);

/* Why an IPv6 link-local address (fe80::/10) cannot be a node's, for
 * the messages of psd, psctl and libpsclient alike. */
#define PSW_LINK_LOCAL_WHY                                                 \
    "link-local IPv6 addresses (fe80::/10) need a zone, which node "      \
    "addresses do not take: use a name or address of a global or "        \
    "fd00::/8 one"

struct sockaddr;

/* 1 when sa (any family) is an IPv6 link-local address: resolved from a
 * name, nothing can connect to it nor listen there without a zone
 * ("invalid argument"). */
int psw_addr_link_local(const struct sockaddr *sa);

/* Why an IPv6 address sa cannot be bound or connected to on this host
 * when IPv6 is off here, for a bind or connect that failed with errno
 * err (EADDRNOTAVAIL, EAFNOSUPPORT): " (IPv6 is off on this host: ...)",
 * naming the setting; "" otherwise. With IPv6 off, [::1] failed with
 * "not an address of this host: is this the host of node 0?". */
const char *psw_addr_ipv6_off(const struct sockaddr *sa, int err);

/* 1 when the connected socket fd runs from a port to itself: its local
 * and peer addresses are one. Linux takes a connect's local port from the
 * ephemeral range, and may take the very port connected to when nothing
 * listens there: the SYN meets itself (a TCP simultaneous open) and the
 * connect succeeds. The caller would read its own HELLO back, and hold
 * the port the node needs to start; what it stands for is a refusal. */
int psw_addr_self_connected(int fd);

/* The host a reaches: its own, but the IPv4 address an IPv4-mapped IPv6
 * one ([::ffff:a.b.c.d]) maps, which is the same socket. *v4 (may be
 * NULL) says whether it is IPv4. Points into a. */
const char *psw_addr_host(const psw_addr *a, int *v4);

/* 1 when a and b are the same address (host compared without case, an
 * IPv4-mapped one as the IPv4 address: psw_addr_host). */
int psw_addr_same(const psw_addr *a, const psw_addr *b);

/* Writes "host:port" ("[v6]:port" for IPv6) to out (cap bytes, cut if
 * short); returns the length it needed. */
int psw_addr_format(const psw_addr *a, char *out, size_t cap);

#endif
