/* The per-process secret of secret.h. */
#include <time.h>
#include <unistd.h>
#include <sys/random.h>

#include "secret.h"
#include "../proto/layout.h"

/* One thread uses these (the event loop; the offline tools). */
static uint64_t secret[4];
static int drawn;

static void spread(uint64_t s)
{
    for (int i = 0; i < 4; i++)
        secret[i] = s = psw_mix64(s + 0x9e3779b97f4a7c15ULL);
    drawn = 1;
}

uint64_t psd_secret_mix(unsigned which, uint64_t x)
{
    /* Drawn at first use, from the kernel's random source when it
     * answers. */
    if (!drawn) {
        if (getrandom(secret, sizeof secret, 0) == (ssize_t)sizeof secret)
            drawn = 1;
        else {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            spread((uint64_t)t.tv_nsec ^ (uint64_t)t.tv_sec << 30 ^
                   (uint64_t)getpid() << 44 ^ (uintptr_t)&drawn);
        }
    }
    return psw_mix64(x ^ secret[which & 3]);
}

void psd_secret_fix(uint64_t seed)
{
    spread(seed);
}
