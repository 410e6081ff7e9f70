/* "Did you mean": the word of a list nearest to a mistyped one, for psd's
 * and psctl's options and psctl's commands (opts.h) and the ini's keys
 * (config.c). */
#ifndef PSD_NEAR_H
#define PSD_NEAR_H

#include <stddef.h>
#include <string.h>

/* Edit distance of a and b up to 2 (3 when further): for "did you mean". */
static inline int psd_near(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > 48 || nb > 48 || (na > nb ? na - nb : nb - na) > 2)
        return 3;
    unsigned char d[49][49];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = (unsigned char)(i > 3 ? 3 : i);
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = (unsigned char)(j > 3 ? 3 : j);
    for (size_t i = 1; i <= na; i++)
        for (size_t j = 1; j <= nb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v)
                v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            d[i][j] = (unsigned char)(v > 3 ? 3 : v);
        }
    return d[na][nb];
}

/* The one word of names[] (NULL-ended) nearest to given, if it is within
 * two edits and no other word is as near: the hint for a typo. */
static inline const char *psd_suggest(const char *given,
                                      const char *const *names)
{
    const char *best = NULL;
    int bd = 3, ties = 0;
    for (size_t i = 0; names[i]; i++) {
        int d = psd_near(given, names[i]);
        if (d < bd) {
            bd = d;
            best = names[i];
            ties = 0;
        } else if (d == bd) {
            ties++;
        }
    }
    return bd < 3 && !ties ? best : NULL;
}

#endif
