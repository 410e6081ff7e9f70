/* Parsing of ps_open's server list; see nodes.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INI_HANDLER_LINENO 1
#include <ini.h>

#include "nodes.h"
#include "psclient.h"

#define MAX_SEEDS 4096

/* Parses one "host:port" item of len bytes. */
static int parse_one(const char *s, size_t len, psc_addr *a)
{
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    const char *colon;
    const char *host = s;
    size_t hlen;
    if (len && *s == '[') {
        const char *close = memchr(s, ']', len);
        if (!close || close + 1 >= s + len || close[1] != ':')
            return -1;
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = NULL;
        for (size_t i = len; i-- > 0;)
            if (s[i] == ':') {
                colon = s + i;
                break;
            }
        if (!colon)
            return -1;
        hlen = (size_t)(colon - s);
    }
    size_t plen = (size_t)(s + len - colon - 1);
    if (hlen == 0 || hlen >= sizeof a->host || plen == 0 ||
        plen >= sizeof a->port)
        return -1;
    memcpy(a->host, host, hlen);
    a->host[hlen] = '\0';
    memcpy(a->port, colon + 1, plen);
    a->port[plen] = '\0';
    char *end;
    long p = strtol(a->port, &end, 10);
    if (*end || p < 1 || p > 65535)
        return -1;
    return 0;
}

static int parse_list(const char *list, psc_addr **out, int *n, char *err,
                      size_t errlen)
{
    int cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    if (cap > MAX_SEEDS) {
        snprintf(err, errlen, "more than %d servers listed", MAX_SEEDS);
        return PS_EINVAL;
    }
    psc_addr *a = calloc((size_t)cap, sizeof *a);
    if (!a)
        return PS_ENOMEM;
    int k = 0;
    for (const char *p = list;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (parse_one(p, len, &a[k])) {
            snprintf(err, errlen, "bad server address \"%.*s\" (expected "
                     "host:port)", (int)(len > 80 ? 80 : len), p);
            free(a);
            return PS_EINVAL;
        }
        k++;
        if (!e)
            break;
        p = e + 1;
    }
    *out = a;
    *n = k;
    return 0;
}

typedef struct ini_nodes {
    char *nodes;      /* the [cluster] nodes value, owned */
} ini_nodes;

static int on_ini(void *user, const char *section, const char *name,
                  const char *value, int lineno)
{
    ini_nodes *in = user;
    (void)lineno;
    if (!strcmp(section, "cluster") && !strcmp(name, "nodes")) {
        free(in->nodes);
        in->nodes = strdup(value);
    }
    return 1;
}

int psc_nodes_parse(const char *servers, psc_addr **out, int *n, char *err,
                   size_t errlen)
{
    struct stat st;
    if (!servers || !*servers) {
        snprintf(err, errlen, "no servers given");
        return PS_EINVAL;
    }
    if (stat(servers, &st) != 0 || !S_ISREG(st.st_mode))
        return parse_list(servers, out, n, err, errlen);
    /* The cluster's ini file: the daemon validates it fully (psd --check);
     * the client needs only where the nodes are. */
    ini_nodes in = { NULL };
    int rc = ini_parse(servers, on_ini, &in);
    if (rc < 0 || !in.nodes) {
        snprintf(err, errlen, "%s: %s", servers,
                 rc < 0 ? "cannot read the file" : "no [cluster] nodes line");
        free(in.nodes);
        return PS_EINVAL;
    }
    rc = parse_list(in.nodes, out, n, err, errlen);
    free(in.nodes);
    return rc;
}
