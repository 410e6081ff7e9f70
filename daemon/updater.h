/* Server-side updaters (how a pushed row changes a stored row) and seeded
 * initialisers (what a row holds before its first push). Pure functions
 * over caller-owned float arrays; no allocation. */
#ifndef PSD_UPDATER_H
#define PSD_UPDATER_H

#include <stdint.h>
#include "config.h"

/* A float that may sit at any address: pushed rows are read straight
 * from the receive buffer, where msgpack leaves them unaligned (a GCC and
 * Clang extension; the loads compile to plain unaligned moves). */
typedef float psd_ufloat __attribute__((aligned(1)));

/* Floats of optimizer state kept per float of weight: sum, assign, sgd: 0;
 * adagrad: 1 (sum of squared gradients); adam: 2 (m, v); ftrl: 2 (z, n). */
unsigned psd_updater_state_per_float(psd_updater_kind kind);

/* Whether the updater keeps a per-row step counter (adam's t). */
int psd_updater_has_step(psd_updater_kind kind);

/* The bytes a row of dim floats takes with kind's state and step: what
 * memory checks and messages count per row. */
uint64_t psd_updater_row_bytes(psd_updater_kind kind, uint32_t dim);

/* The hyper-parameters p's kind reads, named as in the ini (lr, beta1,
 * beta2, epsilon, l1, l2, beta), into names and values (room for
 * PSD_UPDATER_PARAMS_MAX each); returns how many (0 for sum and assign).
 * For operators: what a node runs with, after reloads. */
#define PSD_UPDATER_PARAMS_MAX 4
int psd_updater_params_list(const psd_updater_params *p, const char **names,
                            double *values);

/* Applies the pushed row g (dim floats, any alignment, not overlapping w
 * or state) to weights w (dim floats).
 * state points at dim * psd_updater_state_per_float() floats laid out as
 * consecutive blocks of dim (adam: m then v; ftrl: z then n), zero at
 * first; step points at the row's counter (adam only, else may be NULL).
 * Formulas:
 *   sum: w += g            assign: w = g            sgd: w -= lr g
 *   adagrad: h += g^2; w -= lr g / (sqrt(h) + epsilon)
 *   adam: t += 1; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *         w -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + epsilon)
 *         (as m k1 and v k2, k = 1 / -expm1(t log b) rounded to float:
 *         proto/PROTOCOL.md gives each updater's exact order of float
 *         operations, which a reference must follow to agree bit for bit)
 *   ftrl (McMahan et al. 2013, alpha = lr):
 *         sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma w;
 *         n += g^2; w = |z| <= l1 ? 0
 *                       : -(z - sgn(z) l1) / ((beta + sqrt(n)) / alpha + l2)
 *         (and w = 0 when that divisor is 0: beta = l2 = 0 and n = 0;
 *         TensorFlow's Ftrl adds 2 l2 there, conf/psd.ini says so) */
void psd_update_row(const psd_updater_params *p, float *w, float *state,
                    uint32_t *step, const psd_ufloat *g, uint32_t dim);

/* Fills w (dim floats) with the initial row of `key`: a pure function of
 * (params, key, column), so every run and every server computes the same
 * row. Normal values use Box-Muller over two hashed uniforms. */
void psd_init_row(const psd_init_params *p, uint64_t key, float *w,
                  uint32_t dim);

#endif
