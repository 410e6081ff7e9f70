/* Client connections of one node: read bytes, cut frames, decode them,
 * hand the requests to the command layer (request.c), batch the replies
 * of everything read together into one write, and enforce the transport
 * limits (frame sizes, the pre-HELLO limit, the HELLO and frame
 * timeouts, the output budget a frame's replies must fit before it runs,
 * max_client_memory over all connections, max_connections and
 * max_connections_per_addr with room made by closing idle connections)
 * and liveness (heartbeats both ways). Each connection gets a share of
 * each loop turn (about 1 MiB read or run, or 64 frames; a frame always
 * runs whole) and then yields to the others until the next turn. A bad
 * frame closes only its connection, with one log line (collapsed in a
 * flood). */
#ifndef PSD_CONN_H
#define PSD_CONN_H

#include <uv.h>

#include "auth.h"
#include "node.h"

typedef struct psd_conn psd_conn;

/* Every connection of one listener. The owner (server.c) embeds it and
 * must keep loop and node alive while any connection is open. */
typedef struct psd_conns {
    uv_loop_t *loop;
    psd_node *node;
    psd_auth *auth;              /* the token and throttle; borrowed, set
                                    by the owner before the first accept */
    psd_conn *head;              /* doubly linked list */
    int n;
    uint64_t closed;             /* connections closed since psd began */
    int fd_room;                 /* connections the open files limit
                                    leaves room for (psd_fd_room), set by
                                    the owner: max_connections is at most
                                    this. INT_MAX: no limit */
    uv_stream_t *accept_waiting; /* a listener whose pending connection
                                    waits for a refusal to end */
    int refusing;                /* connections refused at accept, not
                                    closed yet */
    uint64_t mem;                /* buffers of all open connections, as
                                    counted against max_client_memory */
    /* Fairness: a connection that has read or executed its share of one
     * loop turn (conn.c's TURN_BYTES, TURN_FRAMES) yields; it waits in
     * the deferred list and the idle handle resumes it on the next turn,
     * after the loop has polled every other connection. */
    uv_check_t turn_check;       /* counts loop turns */
    uv_idle_t resume_idle;       /* active while some connection waits */
    uint64_t turn;
    uint64_t tick_ms;            /* loop time of the last psd_conns_tick */
    uint64_t tick_period;        /* its period, set by the owner (ms) */
    int recheck;                 /* a late tick left the checks to the
                                    turn's check phase, after its poll */
    psd_conn *deferred, *deferred_tail;
    int turn_handles;            /* the two handles are initialised */
    /* A connection psd has no memory for is still taken off the listener
     * (libuv stops watching a listener until its pending connection is
     * accepted), into this handle, and closed at once. */
    uv_tcp_t drop;
    int drop_closing;            /* the handle is not free yet */
    uv_stream_t *drop_waiting;   /* a listener whose pending connection
                                    waits for the handle */
} psd_conns;

void psd_conns_init(psd_conns *set, uv_loop_t *loop, psd_node *node);

/* Accepts one pending connection from listener. When max_connections
 * are open, or max_connections_per_addr from its address, the connection
 * idle longest (no request for idle_timeout, not a worker, nothing owed,
 * no frame arriving; or no HELLO for a second) is closed to make room;
 * with none, the new one is refused with a HELLO_OK of status PSW_EBUSY. */
void psd_conn_accept(psd_conns *set, uv_stream_t *listener);

/* Periodic work (several times per heartbeat): checks the proofs of
 * authentications the throttle held back (auth.h), closes connections that
 * sent no accepted HELLO within hello_timeout, connections whose peer
 * has been silent for peer_timeout_ms (a dead or unreachable host: the
 * worker it served, if any, starts its grace), and connections with a
 * frame that has not arrived whole within frame_timeout; sends a PING on
 * every connection idle for heartbeat_ms, so that live clients never look
 * dead; gives back buffers quiet connections keep; logs the counts of
 * collapsed log lines. */
void psd_conns_tick(psd_conns *set);

/* The node's durable_lsn moved: connections whose replies waited for the
 * journal send them now. */
void psd_conns_durable(psd_conns *set);

/* Shutdown: every connection stops reading, writes what it owes, then
 * closes. The loop ends once all are closed. */
void psd_conns_shutdown(psd_conns *set);

#endif
