/* Loads an MNIST-style data set (an IDX image file and its IDX label file,
 * gzip-compressed or not) into memory, for the example trainers. */
#ifndef IDX_H
#define IDX_H

#include <stddef.h>
#include <stdint.h>

#define IDX_ROWS 28
#define IDX_COLS 28
#define IDX_PIXELS (IDX_ROWS * IDX_COLS)
#define IDX_CLASSES 10          /* labels must be 0..IDX_CLASSES-1 */
#define IDX_MAX_ITEMS 1000000   /* refuse larger counts before allocating */

typedef struct idx_set {
    size_t n;           /* number of images, and of labels */
    float *pixels;      /* n * IDX_PIXELS floats, row-major, scaled to [0, 1] */
    uint8_t *labels;    /* n labels, each below IDX_CLASSES */
} idx_set;

/* Reads the images at `images` (magic 0x00000803, n x 28 x 28 uint8) and the
 * labels at `labels` (magic 0x00000801, n uint8) into *out. A path ending in
 * ".gz" is decompressed through `gzip -dc`; such a path must not contain a
 * single quote. Returns 0, or -1 with a one-line reason in err (errlen bytes,
 * always terminated) and *out zeroed. On success *out owns both arrays until
 * idx_destroy(out). */
int idx_load(const char *images, const char *labels, idx_set *out,
             char *err, size_t errlen);

/* Loads split SPLIT ("train" or "t10k") from folder DIR:
 * DIR/SPLIT-images-idx3-ubyte.gz and DIR/SPLIT-labels-idx1-ubyte.gz, or the
 * same names without ".gz" when the compressed images are missing and the
 * plain ones are there. Returns and owns like idx_load. */
int idx_load_split(const char *dir, const char *split, idx_set *out,
                   char *err, size_t errlen);

/* Frees what idx_load allocated and zeroes *s. Safe on a zeroed set. */
void idx_destroy(idx_set *s);

#endif
