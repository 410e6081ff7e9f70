/* Updaters (sum, assign, sgd, adagrad, adam, ftrl) and seeded initialisers
 * for one row. This is the server's hot path: each kind is switched on
 * once per row and runs its own tight loop; nothing here allocates. The
 * pointers are restrict (a pushed row never overlaps the table, as
 * updater.h states) so the loops vectorise; the Makefile lets GCC add
 * the scalar tail such loops need. */
#include <math.h>
#include <string.h>

#include "updater.h"
#include "../proto/layout.h"

unsigned psd_updater_state_per_float(psd_updater_kind kind)
{
    switch (kind) {
    case PSD_UPD_ADAGRAD:
        return 1;
    case PSD_UPD_ADAM:
    case PSD_UPD_FTRL:
        return 2;
    default:
        return 0;
    }
}

int psd_updater_has_step(psd_updater_kind kind)
{
    return kind == PSD_UPD_ADAM;
}

uint64_t psd_updater_row_bytes(psd_updater_kind kind, uint32_t dim)
{
    return (uint64_t)dim * sizeof(float) *
               (1 + psd_updater_state_per_float(kind)) +
           (psd_updater_has_step(kind) ? sizeof(float) : 0);
}

int psd_updater_params_list(const psd_updater_params *p, const char **names,
                            double *values)
{
    int n = 0;
#define PARAM(name) (names[n] = #name, values[n++] = (double)p->name)
    switch (p->kind) {
    case PSD_UPD_SGD:
        PARAM(lr);
        break;
    case PSD_UPD_ADAGRAD:
        PARAM(lr);
        PARAM(epsilon);
        break;
    case PSD_UPD_ADAM:
        PARAM(lr);
        PARAM(beta1);
        PARAM(beta2);
        PARAM(epsilon);
        break;
    case PSD_UPD_FTRL:
        PARAM(lr);
        PARAM(beta);
        PARAM(l1);
        PARAM(l2);
        break;
    default:
        break;
    }
#undef PARAM
    return n;
}

static void update_sum(float *restrict w, const psd_ufloat *restrict g,
                       uint32_t dim)
{
    for (uint32_t i = 0; i < dim; i++)
        w[i] += g[i];
}

static void update_sgd(float lr, float *restrict w,
                       const psd_ufloat *restrict g, uint32_t dim)
{
    for (uint32_t i = 0; i < dim; i++)
        w[i] -= lr * g[i];
}

/* h += g^2; w -= lr g / (sqrt(h) + epsilon). h is state[0..dim). */
static void update_adagrad(const psd_updater_params *p, float *restrict w,
                           float *restrict h, const psd_ufloat *restrict g,
                           uint32_t dim)
{
    const float lr = p->lr, eps = p->epsilon;

    for (uint32_t i = 0; i < dim; i++) {
        float gi = g[i];
        float hi = h[i] + gi * gi;

        h[i] = hi;
        w[i] -= lr * gi / (sqrtf(hi) + eps);
    }
}

/* 1 / (1 - b^t) rounded to float, computed in double as
 * 1 / -expm1(t log b): for b near 1 (beta2 = 0.999) 1 - b^t in float
 * would lose most of its digits to cancellation, and in double the
 * float result does not depend on the last bits of the C library's log
 * and expm1 (PROTOCOL.md spells this out for other implementations). */
static float bias_correction(float b, uint32_t t)
{
    return (float)(1.0 / -expm1((double)t * log((double)b)));
}

/* Adam with bias correction. The step counter saturates rather than wrap
 * to 0, where 1 - beta^t would be 0 and the update would divide by it. */
static void update_adam(const psd_updater_params *p, float *restrict w,
                        float *restrict state, uint32_t *step,
                        const psd_ufloat *restrict g, uint32_t dim)
{
    float *restrict m = state, *restrict v = state + dim;
    const float b1 = p->beta1, b2 = p->beta2;
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    const float lr = p->lr, eps = p->epsilon;
    uint32_t t = *step;

    if (t < UINT32_MAX)
        t++;
    *step = t;

    /* Bias corrections, once per row. */
    const float k1 = bias_correction(b1, t);
    const float k2 = bias_correction(b2, t);

    for (uint32_t i = 0; i < dim; i++) {
        float gi = g[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;

        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * (mi * k1) / (sqrtf(vi * k2) + eps);
    }
}

/* FTRL-proximal (McMahan et al. 2013, algorithm 1) with alpha = lr. z is
 * state[0..dim), n is state[dim..2 dim). The weight is recomputed from z
 * and n, so it is exactly 0 while |z| <= l1. The divisor is 0 only with
 * beta = l2 = 0 while n is 0, which a nonzero gradient leaves so when its
 * square rounds to 0 (|g| < 2^-75): the weight is then 0 too, as for a
 * row that saw no gradient, rather than -z/0, an infinity that the next
 * push would carry into z for good. */
static void update_ftrl(const psd_updater_params *p, float *restrict w,
                        float *restrict state, const psd_ufloat *restrict g,
                        uint32_t dim)
{
    float *restrict z = state, *restrict n = state + dim;
    const float inv_alpha = 1.0f / p->lr;
    const float beta = p->beta, l1 = p->l1, l2 = p->l2;

    for (uint32_t i = 0; i < dim; i++) {
        float gi = g[i];
        float n_old = n[i];
        float n_new = n_old + gi * gi;
        float sqrt_new = sqrtf(n_new);
        float sigma = (sqrt_new - sqrtf(n_old)) * inv_alpha;
        float zi = z[i] + gi - sigma * w[i];

        z[i] = zi;
        n[i] = n_new;
        float shrunk = zi - copysignf(l1, zi);
        float den = (beta + sqrt_new) * inv_alpha + l2;
        w[i] = fabsf(zi) <= l1 || den == 0.0f ? 0.0f : -shrunk / den;
    }
}

/* Switches on the kind once and runs that updater's loop over the row. */
void psd_update_row(const psd_updater_params *p, float *w, float *state,
                    uint32_t *step, const psd_ufloat *g, uint32_t dim)
{
    if (dim == 0)   /* w may be NULL, which memmove must not see */
        return;
    switch (p->kind) {
    case PSD_UPD_SUM:
        update_sum(w, g, dim);
        break;
    case PSD_UPD_ASSIGN:
        /* memmove: pushing a row onto itself is harmless. */
        memmove(w, (const void *)g, (size_t)dim * sizeof *w);
        break;
    case PSD_UPD_SGD:
        update_sgd(p->lr, w, g, dim);
        break;
    case PSD_UPD_ADAGRAD:
        update_adagrad(p, w, state, g, dim);
        break;
    case PSD_UPD_ADAM:
        update_adam(p, w, state, step, g, dim);
        break;
    case PSD_UPD_FTRL:
        update_ftrl(p, w, state, g, dim);
        break;
    }
}

/* Initialisers draw from a splitmix64 stream per row: the row's base is a
 * hash of (seed, key), and column c reads psw_mix64(base + (c+1) golden).
 * Different seeds or keys give unrelated bases, so their streams do not
 * overlap in practice, and only one mix is paid per column. */
#define GOLDEN 0x9e3779b97f4a7c15ULL
#define SEED_SALT 0x5053445f494e4954ULL     /* "PSD_INIT" */

static uint64_t row_base(uint64_t seed, uint64_t key)
{
    return psw_mix64(psw_mix64(seed ^ SEED_SALT) ^ key);
}

static uint64_t col_hash(uint64_t base, uint32_t col)
{
    return psw_mix64(base + ((uint64_t)col + 1) * GOLDEN);
}

/* 24 bits fit a float's significand, so these are exact in float. */
#define U24 (1.0f / 16777216.0f)

/* Uniform on [a, b). The span is taken in double so that wide ranges do
 * not overflow; a value that rounds up to b in float is clamped to the
 * float just below it. An empty or invalid range gives a. */
static void init_uniform(float a, float b, uint64_t base, float *w,
                         uint32_t dim)
{
    if (!(a < b)) {
        for (uint32_t i = 0; i < dim; i++)
            w[i] = a;
        return;
    }
    const double span = (double)b - (double)a;
    const float top = nextafterf(b, a);

    for (uint32_t i = 0; i < dim; i++) {
        float u = (float)(col_hash(base, i) >> 40) * U24;
        float x = (float)((double)a + span * (double)u);
        w[i] = x < b ? x : top;
    }
}

/* Normal(mean, std) by Box-Muller: the hash's top 24 bits give u1 in
 * (0, 1] (so log never sees 0), the next 24 bits give u2 in [0, 1).
 * Computed in double and rounded once to float, so that another
 * implementation with any accurate libm gets the same floats (see
 * PROTOCOL.md); the float functions of C libraries differ in last bits. */
static void init_normal(float mean, float std, uint64_t base, float *w,
                        uint32_t dim)
{
    const double two_pi = 6.283185307179586;

    for (uint32_t i = 0; i < dim; i++) {
        uint64_t h = col_hash(base, i);
        double u1 = (double)((h >> 40) + 1) * (1.0 / 16777216.0);
        double u2 = (double)((h >> 16) & 0xffffff) * (1.0 / 16777216.0);
        double r = sqrt(-2.0 * log(u1));

        w[i] = (float)((double)mean + (double)std * (r * cos(two_pi * u2)));
    }
}

/* Switches on the kind once and fills the row. */
void psd_init_row(const psd_init_params *p, uint64_t key, float *w,
                  uint32_t dim)
{
    if (dim == 0)   /* w may be NULL, which memset must not see */
        return;
    switch (p->kind) {
    case PSD_INIT_ZEROS:
        memset(w, 0, (size_t)dim * sizeof *w);
        break;
    case PSD_INIT_CONSTANT:
        for (uint32_t i = 0; i < dim; i++)
            w[i] = p->a;
        break;
    case PSD_INIT_UNIFORM:
        init_uniform(p->a, p->b, row_base(p->seed, key), w, dim);
        break;
    case PSD_INIT_NORMAL:
        init_normal(p->a, p->b, row_base(p->seed, key), w, dim);
        break;
    }
}
