/* NumPy's .npy format (numpy.lib.format), as psd --export writes it and
 * psd --import reads it: the magic "\x93NUMPY", a version, the header's
 * length, the header (a Python dict literal: descr, fortran_order,
 * shape), then the array's bytes in C order. Only what psd's tables
 * hold: 1-D and 2-D arrays of little-endian float32 rows, uint64 keys,
 * or int64 keys (numpy's default integer). */
#ifndef PSD_NPY_H
#define PSD_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Writes the header of an array of n rows of dim values (dim 0: a 1-D
 * array of n) of type "u8" or "f4", in the host's byte order, padded so
 * that the data start at a multiple of 64 bytes. 0, or -1 (errno). */
int psd_npy_header(FILE *f, const char *type, uint64_t n, uint32_t dim);

typedef struct psd_npy {
    FILE *f;
    char kind;               /* 'f' (float32), 'u' (uint64), 'i' (int64) */
    uint64_t n;              /* rows */
    uint32_t dim;            /* values per row; 0 for a 1-D array */
    uint64_t read;           /* rows read so far */
} psd_npy;

/* Opens path and reads its header: an .npy file of version 1, 2 or 3,
 * C order, '<f4', '<u8' or '<i8' (on a little-endian host), 1-D or 2-D
 * (at most 65536 columns), whose size is exactly the header and n rows.
 * 0, or -1 with "PATH: reason" in err (nothing is left open). */
int psd_npy_open(psd_npy *a, const char *path, char *err, size_t errlen);

/* Reads up to rows rows (rows * max(dim, 1) values of 4 or 8 bytes) into
 * buf: how many were read, 0 at the end; -1 when the file ends early or
 * cannot be read (errno). */
long psd_npy_read(psd_npy *a, void *buf, size_t rows);

void psd_npy_close(psd_npy *a);

/* CRC-32 as zlib computes it (zlib.crc32 in Python: read_export checks
 * what psd --export lists with it), continued from crc (0 to begin) over
 * p's n bytes: an export's manifest lists it for each file's array. */
uint32_t psd_npy_crc32(uint32_t crc, const void *p, size_t n);

#endif
