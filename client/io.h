/* The I/O thread of a client: its libuv loop owns one connection per psd
 * node, sends the parts the Customer hands it (batching small ones into
 * shared frames and one write), reads replies, enforces deadlines and
 * reports each part's outcome back to the Customer. Callbacks of
 * completed requests run on this thread. */
#ifndef PSC_IO_H
#define PSC_IO_H

#include "internal.h"
#include "nodes.h"
#include "stats.h"

typedef struct psc_io psc_io;

/* Starts the I/O thread of c, which connects to the seeds (tried in
 * order) until one answers HELLO_OK, adopts its layout and connects to
 * every node; it then ends the open with c->open_state. Takes ownership
 * of seeds. Returns 0, or PS_ENOMEM (memory, or a thread the system would
 * not give) or PS_ECONN (fds for the event loop) with why. */
int psc_io_start(ps_client *c, psc_addr *seeds, int nseeds, char *why,
                 size_t whylen);

/* Wakes the I/O thread: parts were submitted to the Customer. */
void psc_io_wake(ps_client *c);

/* Whether the calling thread is c's I/O thread (where callbacks run). */
int psc_io_on_thread(const ps_client *c);

/* The counters of node (0..nodes-1), or of all nodes summed (-1), since
 * the last psc_io_stats_reset. 0 or PS_EINVAL. Any thread. */
int psc_io_stats(const ps_client *c, int node, psc_stats *out);
void psc_io_stats_reset(ps_client *c);

/* Closes the Customer, stops the thread (every connection closes; what is
 * still queued or in flight fails with PS_ECLOSED) and frees its state. */
void psc_io_stop(ps_client *c);

#endif
