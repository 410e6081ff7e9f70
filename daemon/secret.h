/* A secret drawn once per process, mixed into psd's hashes of values a
 * client chooses (timestamps, parts, client ids), so that no client can
 * pick values that pile into one chain or probe run of psd's own tables
 * and make each lookup walk it (psw_mix64 alone is public: clients place
 * keys with it). Not for the tables' rows: their slots follow the same
 * public hash as the shards. */
#ifndef PSD_SECRET_H
#define PSD_SECRET_H

#include <stdint.h>

/* psw_mix64 of x under secret `which` (0..3): x's image is fixed for the
 * life of the process and unknown outside it. */
uint64_t psd_secret_mix(unsigned which, uint64_t x);

/* Fixes the secret from seed, before its first use: for programs that
 * must write the same bytes at every run (the fuzzers' seed corpus, whose
 * snapshots list exactly-once's entries in the order of its hashed slots)
 * and fuzz targets, whose runs must repeat. Never in psd itself. */
void psd_secret_fix(uint64_t seed);

#endif
