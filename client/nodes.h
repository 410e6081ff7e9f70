/* Turns ps_open's `servers` argument into addresses to try and, when it
 * names the cluster's ini file, the token that file gives: either
 * "host:port[,host:port...]" ("[v6]:port" for IPv6), or the path of the
 * ini, whose [cluster] nodes line (continuation lines joined, as psd
 * reads them) is parsed with psd's own grammar (proto/addr.h). */
#ifndef PSC_NODES_H
#define PSC_NODES_H

#include <stddef.h>

#include "../proto/addr.h"

typedef struct psc_addr {
    char host[PSW_HOST_MAX];
    char port[8];
} psc_addr;

/* What ps_open learns from `servers`. */
typedef struct psc_servers {
    psc_addr *seeds;             /* malloc'd; the caller frees */
    int nseeds;
    int from_ini;                /* servers named an ini file */
    char token[256];             /* the ini's auth_token, or the contents
                                    of its auth_token_file ("": none; read
                                    only when want_token was set) */
    size_t token_len;
} psc_servers;

/* Fills *out. want_token: also read the ini's token (the caller has none
 * from its options or the environment). lenient: lines of the ini that
 * are not "key = value" or "[section]", or too long, are read past (psctl
 * on a file psd refuses); otherwise they are refused with their line
 * number. Returns 0, or PS_EINVAL / PS_ENOMEM with a reason in err. */
int psc_servers_parse(const char *servers, int want_token, int lenient,
                      psc_servers *out, char *err, size_t errlen);

#endif
