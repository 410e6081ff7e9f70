/* Turns ps_open's `servers` argument into a list of addresses to try:
 * "host:port[,host:port...]" ("[v6]:port" for IPv6), or the path of the
 * cluster's ini file, whose [cluster] nodes line is used. */
#ifndef PS_NODES_H
#define PS_NODES_H

#include <stddef.h>

typedef struct ps_addr {
    char host[256];
    char port[8];
} ps_addr;

/* Fills *out (malloc'd, caller frees) and *n. Returns 0, or PS_EINVAL with
 * a reason in err. */
int ps_nodes_parse(const char *servers, ps_addr **out, int *n, char *err,
                   size_t errlen);

#endif
