/* Whether a push's values hold a NaN or an infinity, read by the calling
 * thread and, for large pushes, a helper thread at once.
 *
 * A push of several parts is read whole before any part is sent
 * (slice.c, goes_in_two_waves), so that psd refuses one holding such a
 * value whole: nothing else runs meanwhile (the I/O thread and the nodes
 * wait for its first part). From 1 MiB on, the back half goes to one
 * helper thread of the process, started at the first such read and kept
 * (a detached thread, blocked while idle); a caller that finds it taken
 * by another reads alone, as does one where no thread can be made. A
 * fork's child starts without it. Measured on 16 MiB pushes at 1 in
 * flight (psbench, alternating): 11 % more GB/s, the read taking about
 * a sixth of each push's time alone. */
#ifndef PSC_SCAN_H
#define PSC_SCAN_H

#include <stddef.h>

/* psw_nonfinite of the n bytes at p (float32 values), 1 or 0; p is only
 * read, and not after the call returns. */
int psc_nonfinite(const void *p, size_t n);

#endif
