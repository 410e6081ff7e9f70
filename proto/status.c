/* Text for the shared status codes (one table, used by daemon logs and
 * by ps_strerror in the client). */
#include <stdio.h>

#include "status.h"

void psw_range_error(char *err, size_t errlen, const char *table,
                     uint64_t first, uint64_t count, uint64_t rows)
{
    if (count == 0) {
        snprintf(err, errlen, "an empty range (count 0) at row %llu of "
                 "table '%s' (rows = %llu)", (unsigned long long)first, table,
                 (unsigned long long)rows);
        return;
    }
    /* A count that runs past the last 64-bit row has no last row to
     * name: its size is said instead. */
    if (first + count - 1 < first) {
        snprintf(err, errlen, "%llu rows from row %llu (past row 2^64 - 1) "
                 "are outside table '%s' (rows = %llu)",
                 (unsigned long long)count, (unsigned long long)first, table,
                 (unsigned long long)rows);
        return;
    }
    /* A range that starts inside the table runs past its end: "outside"
     * read as if its first row were missing too. */
    if (first < rows)
        snprintf(err, errlen, "rows %llu..%llu go past the end of table "
                 "'%s' (rows = %llu: its last row is %llu)",
                 (unsigned long long)first,
                 (unsigned long long)(first + count - 1), table,
                 (unsigned long long)rows, (unsigned long long)rows - 1);
    else
        snprintf(err, errlen, "rows %llu..%llu are outside table '%s' "
                 "(rows = %llu)", (unsigned long long)first,
                 (unsigned long long)(first + count - 1), table,
                 (unsigned long long)rows);
}

const char *psw_status_name(int code)
{
    static const char *const names[] = {
        "OK", "EINVAL", "ENOMEM", "ECONN", "ETIMEDOUT", "EPROTO", "EAUTH",
        "ENOTABLE", "EKEY", "ETOOBIG", "ECLOSED", "ESERVER", "ENOTOWNER",
        "EBUSY", "ENONFINITE", "EFULL" };
    _Static_assert(sizeof names / sizeof names[0] == 1 - PSW_EFULL,
                   "a status without a name");
    return code <= 0 && code >= PSW_EFULL ? names[-code] : NULL;
}

const char *psw_strerror(int code)
{
    switch (code) {
    case PSW_OK: return "success";
    case PSW_EINVAL: return "invalid argument";
    case PSW_ENOMEM: return "out of memory";
    case PSW_ECONN: return "connection failed or lost";
    case PSW_ETIMEDOUT: return "timed out";
    case PSW_EPROTO: return "protocol error";
    case PSW_EAUTH: return "authentication failed";
    case PSW_ENOTABLE: return "no such table";
    case PSW_EKEY: return "key out of range";
    case PSW_ETOOBIG: return "request too big";
    case PSW_ECLOSED: return "closed";
    case PSW_ESERVER: return "server error";
    case PSW_ENOTOWNER: return "shard is owned by another node";
    case PSW_EBUSY: return "server busy";
    case PSW_ENONFINITE: return "value is NaN or infinite";
    case PSW_EFULL: return "table full";
    default: return "unknown error";
    }
}
