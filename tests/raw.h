/* The psd protocol over a plain socket, for tests that must send what
 * libpsclient never would (hostile frames, handshakes by hand) and read
 * psd's answers byte for byte. Failures fail the running cmocka test. */
#ifndef TEST_RAW_H
#define TEST_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/frame.h"
#include "../proto/msg.h"

/* A socket connected to 127.0.0.1:port, from source address `from` (any
 * 127.x.y.z; NULL: the kernel's choice), with a 5 s receive timeout. */
int raw_connect_from(int port, const char *from);
int raw_connect(int port);

/* Sends what it can: the server may have closed already. */
void raw_send(int fd, const void *p, size_t n);
/* Sends every byte of o's frames. */
void raw_send_out(int fd, const psw_out *o);

/* Reads one frame body (malloc'd, *len set) and checks its CRC; NULL on
 * EOF or timeout. */
char *raw_read_frame(int fd, size_t *len);

/* The bytes of one frame holding the n messages m (malloc'd, *len set). */
char *raw_frame_bytes(const psw_msg *m, int n, size_t *len);
/* Sends one frame holding the n messages m. */
void raw_send_msgs(int fd, const psw_msg *m, int n);

/* Sends a HELLO (a reader with the given client id and incarnation) and
 * returns the status of the HELLO_OK (-100 when none came). */
int raw_hello_as(int fd, uint64_t id, uint64_t incarnation);
/* The same as worker `worker` (-1: a reader). */
int raw_hello_worker(int fd, uint64_t id, uint64_t incarnation,
                     int32_t worker);

/* Whether the server closed the connection (EOF or reset) before the
 * receive timeout. */
int raw_closed(int fd);

/* GET /metrics from 127.0.0.1:port (a node's metrics_listen): the value
 * of `name{node="0"}`, or -1 (no answer, or no such line). */
double raw_node_metric(int port, const char *name);

#endif
