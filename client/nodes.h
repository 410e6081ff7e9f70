/* Turns ps_open's `servers` argument into a list of addresses to try:
 * "host:port[,host:port...]" ("[v6]:port" for IPv6), or the path of the
 * cluster's ini file, whose [cluster] nodes line is used. */
#ifndef PSC_NODES_H
#define PSC_NODES_H

#include <stddef.h>

typedef struct psc_addr {
    char host[256];
    char port[8];
} psc_addr;

/* Fills *out (malloc'd, caller frees) and *n. Returns 0, or PS_EINVAL with
 * a reason in err. */
int psc_nodes_parse(const char *servers, psc_addr **out, int *n, char *err,
                   size_t errlen);

#endif
