/* Status codes shared by the wire protocol, the daemon and the client.
 * The numeric values travel on the wire in every reply and are the same
 * values libpsclient exposes as PS_E* (client.c checks that at compile time). */
#ifndef PSW_STATUS_H
#define PSW_STATUS_H

#include <stddef.h>
#include <stdint.h>

enum {
    PSW_OK = 0,
    PSW_EINVAL = -1,     /* bad argument or request shape */
    PSW_ENOMEM = -2,     /* out of memory */
    PSW_ECONN = -3,      /* connection failed or lost */
    PSW_ETIMEDOUT = -4,  /* no answer within the bounded time */
    PSW_EPROTO = -5,     /* malformed frame or message */
    PSW_EAUTH = -6,      /* authentication failed or required */
    PSW_ENOTABLE = -7,   /* unknown table */
    PSW_EKEY = -8,       /* key or row out of range */
    PSW_ETOOBIG = -9,    /* frame or request above a limit */
    PSW_ECLOSED = -10,   /* client or server is shutting down */
    PSW_ESERVER = -11,   /* server-side failure */
    PSW_ENOTOWNER = -12, /* the shard lives on another node */
    PSW_EBUSY = -13,     /* the server is at a limit: try again later */
    PSW_ENONFINITE = -14,/* a pushed value is NaN or infinite */
    PSW_EFULL = -15      /* a sparse table holds max_rows rows on a node,
                            or a shard as many as one can hold */
};

/* How the text of a PSW_ESERVER answer to a push begins when the node
 * forgot whether it applied that push (PROTOCOL.md check 10a): clients
 * count such a part as perhaps applied. */
#define PSW_FORGOT_TEXT "this node forgot whether it applied"

/* Returns a static English description of a status code. */
const char *psw_strerror(int code);

/* The name of a status as psclient.h spells it without its PS_ prefix
 * ("EFULL"), or NULL for a code that is none of them. */
const char *psw_status_name(int code);

/* The text of a range refused with PSW_EKEY (count 0, or rows past the
 * end of a table of `rows` rows), into err: the daemon and the client
 * word it alike. "rows F..L are outside table 'T' (rows = R)" (F >= R),
 * "rows F..L go past the end of table 'T' (rows = R: its last row is
 * R-1)" (F < R), or for count 0 "an empty range (count 0) at row F of
 * table 'T' (rows = R)", where F..L would read as every row up to
 * 2^64 - 1. */
void psw_range_error(char *err, size_t errlen, const char *table,
                     uint64_t first, uint64_t count, uint64_t rows);

#endif
