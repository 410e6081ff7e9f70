/* What the fuzz targets (tests/fuzz/fuzz_*.c) share: the libFuzzer entry
 * points, which replay.c also calls from a plain main() so that `make
 * test` replays the corpus without clang; the oracle check, which aborts
 * so that libFuzzer keeps the input that broke it; and small helpers. */
#ifndef PSD_FUZZ_H
#define PSD_FUZZ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../proto/frame.h"

/* Called once before the first input (by libFuzzer, or by replay.c). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
/* Runs one input; data is valid only during the call. Returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__attribute__((noreturn, format(printf, 4, 5)))
static inline void fuzz_fail(const char *file, int line, const char *cond,
                             const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: fuzz check failed: %s: ", file, line, cond);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* An oracle: when cond is false, prints what was got and what was wanted
 * (the format and its arguments) and aborts. */
#define FUZZ_CHECK(cond, ...)                                              \
    do {                                                                   \
        if (!(cond))                                                       \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);             \
    } while (0)

/* Big-endian 32-bit load and store, as frame lengths and CRCs travel. */
static inline uint32_t fuzz_be32(const void *p)
{
    const unsigned char *u = p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
           (uint32_t)u[2] << 8 | (uint32_t)u[3];
}

static inline void fuzz_put_be32(void *p, uint32_t v)
{
    unsigned char *u = p;
    u[0] = (unsigned char)(v >> 24);
    u[1] = (unsigned char)(v >> 16);
    u[2] = (unsigned char)(v >> 8);
    u[3] = (unsigned char)v;
}

/* Reads every byte of a view a decoder handed out, so that AddressSanitizer
 * sees a view that runs past its buffer. Returns a sum nobody needs. */
static inline unsigned fuzz_touch(const void *p, size_t n)
{
    const volatile unsigned char *u = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += u[i];
    return s;
}

/* The bytes of o as writev would send them, in one malloc'd buffer (the
 * caller frees it); *len is their count. NULL when memory runs out. */
static inline char *fuzz_flatten(const psw_out *o, size_t *len)
{
    size_t cnt = psw_out_iovcnt(o), total = 0;
    *len = 0;
    struct iovec *iov = calloc(cnt, sizeof *iov);
    if (!iov)
        return NULL;
    psw_out_iov(o, iov);
    for (size_t i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    char *buf = malloc(total ? total : 1), *p = buf;
    for (size_t i = 0; buf && i < cnt; i++) {
        if (iov[i].iov_len)
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    free(iov);
    *len = total;
    return buf;
}

#endif
