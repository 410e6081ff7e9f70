/* What the fuzz targets for the files psd loads at start (fuzz_snapshot.c,
 * fuzz_journal.c) and make_seeds.c share: a private folder for the files
 * (the loaders take a folder, not bytes), the node of the fixed cluster
 * in request_conf.h, and a digest of a node's state, so that two nodes
 * that should hold the same rows, clocks and memory of applied pushes can
 * be compared. */
#ifndef PSD_FUZZ_DISK_H
#define PSD_FUZZ_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "../../daemon/config.h"
#include "../../daemon/node.h"

/* A folder of its own for this process, made once per tag and removed
 * with its files at exit: under /dev/shm when there is one (a tmpfs,
 * where the loaders' fsyncs cost nothing), else under /tmp. The first
 * call removes the folders of processes that ended without exit (an
 * input that aborted). */
const char *fuzz_disk_dir(const char *tag);

/* Removes every file in dir (the folder stays). */
void fuzz_disk_clear(const char *dir);

/* Writes n bytes as the file at path, replacing it. */
void fuzz_disk_write(const char *path, const void *p, size_t n);

/* The file at path, malloc'd (at least 1 byte), its size in *n. */
char *fuzz_disk_read(const char *path, size_t *n);

/* The size of the file at path, or -1 when there is none. */
long long fuzz_disk_size(const char *path);

/* The fixed cluster of request_conf.h, loaded on the first call. */
const psd_config *fuzz_disk_config(void);

/* The secret fuzz_disk_config fixes (make_seeds fixes it first thing). */
#define FUZZ_SECRET 0x5eed5eed5eed5eedULL

/* Builds node `index` of the fixed cluster afresh, as psd does before it
 * recovers (psd_node_init); psd_node_destroy frees it. */
void fuzz_disk_node(psd_node *n, int index, uint64_t now_ms);

/* A digest of what n would put in a snapshot: every table's rows, state
 * and bsp sums (psd_table_save), the workers (psd_sync_save) and the
 * memory of applied pushes (psd_dedup_save, taken in no particular order:
 * its order follows the hash table's history, not its contents). */
uint64_t fuzz_disk_digest(const psd_node *n);

#endif
