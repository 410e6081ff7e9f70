/* Byte streams for saving and loading state (snapshot.c gives them a file
 * and a checksum; table.c, sync.c and dedup.c write and read their own
 * parts). Each call returns 0, or -1 on an I/O error (write) or on
 * running out of input (read). */
#ifndef PSD_STREAM_H
#define PSD_STREAM_H

#include <stddef.h>

typedef struct psd_sink {
    int (*write)(void *ctx, const void *p, size_t n);
    void *ctx;
} psd_sink;

typedef struct psd_source {
    int (*read)(void *ctx, void *p, size_t n);
    void *ctx;
} psd_source;

static inline int psd_put(psd_sink *o, const void *p, size_t n)
{
    return n ? o->write(o->ctx, p, n) : 0;
}

static inline int psd_get(psd_source *in, void *p, size_t n)
{
    return n ? in->read(in->ctx, p, n) : 0;
}

#endif
