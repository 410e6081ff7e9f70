/* psd's release as text ("0.3.1"), for its start line, /metrics and the
 * stats: libpsclient's (psclient.h), which psd and psctl ship with, so
 * that a half-upgraded cluster shows which node runs what. */
#ifndef PSD_VERSION_H
#define PSD_VERSION_H

#include "psclient.h"

#define PSD_STR_(x) #x
#define PSD_STR(x) PSD_STR_(x)
#define PSD_RELEASE PSD_STR(PS_VERSION_MAJOR) "." PSD_STR(PS_VERSION_MINOR) \
                    "." PSD_STR(PS_VERSION_PATCH)

#endif
