/* A main() for the fuzz targets without libFuzzer, so that any compiler
 * builds them: runs each file named on the command line once through
 * LLVMFuzzerTestOneInput, as a libFuzzer binary does when given files.
 * Each input sits in a buffer of exactly its size, so a sanitizer build
 * (make sanitize) catches a read past its end. Exits 0 when every input
 * ran; a failed check aborts (fuzz.h), and an unreadable file exits 2. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* The whole file at path in a malloc'd buffer of its size (1 byte for an
 * empty file); NULL with errno set when it cannot be read. */
static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, k;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
        }
        k = fread(buf + n, 1, cap - n, f);
        n += k;
    } while (k > 0);
    int bad = ferror(f);
    fclose(f);
    /* Exactly n bytes, so that reading one more is caught. */
    uint8_t *exact = bad ? NULL : malloc(n ? n : 1);
    if (exact && n)
        memcpy(exact, buf, n);
    free(buf);
    if (!exact)
        errno = bad ? EIO : ENOMEM;
    *len = n;
    return exact;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        size_t len;
        uint8_t *data = read_file(argv[i], &len);
        if (!data) {
            fprintf(stderr, "%s: cannot read %s: %s\n", argv[0], argv[i],
                    strerror(errno));
            return 2;
        }
        LLVMFuzzerTestOneInput(data, len);
        free(data);
    }
    return 0;
}
