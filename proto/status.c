/* Text for the shared status codes (one table, used by daemon logs and
 * by ps_strerror in the client). */
#include "status.h"

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
