/* readdir with its failure told from its end, for whatever reads a folder
 * whole: psd --import, --export and --reshard, and the journal's listing
 * of its segments. */
#ifndef PSD_READDIR_H
#define PSD_READDIR_H

#include <dirent.h>
#include <errno.h>

/* The next entry of d, or NULL at the end or on an error, which sets
 * *failed to its errno: a listing cut short by an I/O error was taken
 * for the whole folder, and psd --import took a half-replaced export for
 * a model (a review). */
static inline struct dirent *psd_readdir(DIR *d, int *failed)
{
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e && errno)
        *failed = errno;
    return e;
}

#endif
