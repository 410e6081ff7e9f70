/* Unit tests for daemon/updater.c: every updater against an independent
 * double-precision reference over several steps, and the initialisers'
 * determinism, independence and distributions. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../daemon/updater.h"

#define DIM 8
#define STEPS 6
#define NDRAWS 100000

/* Gradients per step and column: negative, zero, large, tiny, alternating
 * sign; column 1 is always zero, column 7 is zero on some steps only. */
static const float grads[STEPS][DIM] = {
    { -1.5f, 0.0f,  1000.0f, 1e-6f,  0.25f, -3.0f,   2.0f,  0.0f },
    { -0.7f, 0.0f, -2500.0f, 3e-6f, -0.25f, -3.0f,   0.1f,  4.0f },
    { -2.0f, 0.0f,   800.0f, -1e-6f, 0.30f, -2.0f,  -0.4f,  0.0f },
    { -0.1f, 0.0f,  4000.0f, 2e-6f, -0.35f, -1.0f,   3.0f, -6.0f },
    { -3.3f, 0.0f, -1000.0f, 1e-6f,  0.40f, -0.5f, -1e-3f,  0.0f },
    { -0.9f, 0.0f,  1200.0f, 5e-6f, -0.45f, -4.0f,   0.9f,  2.0f },
};

/* Starting weights, as an initialiser might have left them. */
static const float start[DIM] = {
    0.0f, 0.5f, -0.25f, 1.0f, 0.0f, -2.0f, 0.125f, 3.0f
};

/* Dyadic gradients on a per-column scale: sums and lr = 0.25 products
 * of these are exact in float, so sum, assign and sgd can be compared
 * with ==. Column 2 is large, column 3 tiny, column 1 zero. */
static const float dyadic[STEPS][DIM] = {
    { -1.5f, 0.0f,  1048576.0f, 0.0078125f,  0.25f, -3.0f,  2.0f,  0.0f },
    { -0.5f, 0.0f, -2097152.0f, 0.0234375f, -0.25f, -3.0f,  0.5f,  4.0f },
    { -2.0f, 0.0f,    65536.0f, -0.015625f,  0.75f, -2.0f, -0.5f,  0.0f },
    { -0.25f, 0.0f, 4194304.0f, 0.0078125f, -1.25f, -1.0f,  3.0f, -6.0f },
    { -3.5f, 0.0f, -1048576.0f, 0.0546875f,  0.5f, -0.5f, -1.0f,  0.0f },
    { -0.75f, 0.0f, 3145728.0f, 0.03125f,   -1.5f, -4.0f,  1.0f,  2.0f },
};

/* Starting weights on the same scales as `dyadic`. */
static const float dyadic_start[DIM] = {
    0.0f, 0.5f, -1024.0f, 1.0f, 0.0f, -2.0f, 0.125f, 3.0f
};

/* Fails the test with "what: row R col C step S: got X, want Y" unless
 * got is within atol or within rtol (relative to want) of want. */
static void expect_close(double got, double want, double rtol, double atol,
                         const char *what, int row, uint32_t col, int step)
{
    double err = fabs(got - want);

    if (err <= atol || err <= rtol * fabs(want))
        return;
    print_error("%s: row %d col %u step %d: got %.9g, want %.9g\n",
                what, row, col, step, got, want);
    fail();
}

/* Like expect_close with no tolerance at all. */
static void expect_exact(float got, double want, const char *what, int row,
                         uint32_t col, int step)
{
    if ((double)got == want)
        return;
    print_error("%s: row %d col %u step %d: got %.9g, want %.9g\n",
                what, row, col, step, (double)got, want);
    fail();
}

static psd_updater_params params(psd_updater_kind kind)
{
    psd_updater_params p = {
        .kind = kind, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
        .epsilon = 1e-8f, .l1 = 0.0f, .l2 = 0.0f, .beta = 1.0f,
    };
    return p;
}

/* ---- Double-precision references, written straight from the formulas.
 * Hyper-parameters are read from the same float params, widened. ---- */

typedef void (*ref_fn)(const psd_updater_params *p, double *w, double *st,
                       uint32_t *step, const float *g, uint32_t dim);

static void ref_adagrad(const psd_updater_params *p, double *w, double *st,
                        uint32_t *step, const float *g, uint32_t dim)
{
    (void)step;
    for (uint32_t i = 0; i < dim; i++) {
        st[i] += (double)g[i] * g[i];
        w[i] -= p->lr * (double)g[i] / (sqrt(st[i]) + p->epsilon);
    }
}

static void ref_adam(const psd_updater_params *p, double *w, double *st,
                     uint32_t *step, const float *g, uint32_t dim)
{
    double b1 = p->beta1, b2 = p->beta2;
    double *m = st, *v = st + dim;

    *step += 1;
    for (uint32_t i = 0; i < dim; i++) {
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
        double mhat = m[i] / (1 - pow(b1, *step));
        double vhat = v[i] / (1 - pow(b2, *step));
        w[i] -= p->lr * mhat / (sqrt(vhat) + p->epsilon);
    }
}

static void ref_ftrl(const psd_updater_params *p, double *w, double *st,
                     uint32_t *step, const float *g, uint32_t dim)
{
    double alpha = p->lr, beta = p->beta, l1 = p->l1, l2 = p->l2;
    double *z = st, *n = st + dim;

    (void)step;
    for (uint32_t i = 0; i < dim; i++) {
        double gi = g[i];
        double sigma = (sqrt(n[i] + gi * gi) - sqrt(n[i])) / alpha;
        z[i] += gi - sigma * w[i];
        n[i] += gi * gi;
        if (fabs(z[i]) <= l1) {
            w[i] = 0;
        } else {
            double sgn = z[i] < 0 ? -1 : 1;
            w[i] = -(z[i] - sgn * l1) / ((beta + sqrt(n[i])) / alpha + l2);
        }
    }
}

/* Runs psd_update_row and the reference side by side over all steps of
 * `grads`, from `start`, comparing weights and state after every step. */
static void check_against_reference(const psd_updater_params *p, ref_fn ref,
                                    int row, double rtol)
{
    unsigned nst = psd_updater_state_per_float(p->kind);
    float w[DIM], st[2 * DIM] = { 0 };
    double rw[DIM], rst[2 * DIM] = { 0 };
    uint32_t step = 0, rstep = 0;

    for (uint32_t i = 0; i < DIM; i++)
        rw[i] = w[i] = start[i];
    for (int s = 0; s < STEPS; s++) {
        psd_update_row(p, w, st, &step, grads[s], DIM);
        ref(p, rw, rst, &rstep, grads[s], DIM);
        for (uint32_t i = 0; i < DIM; i++)
            expect_close(w[i], rw[i], rtol, 1e-7, "weight", row, i, s + 1);
        for (uint32_t i = 0; i < nst * DIM; i++)
            expect_close(st[i], rst[i], rtol, 1e-7, "state", row, i, s + 1);
    }
    assert_int_equal(step, rstep);
}

/* ---- Updaters ---- */

static void test_state_sizes_and_step_flags_match_header(void **unused)
{
    (void)unused;
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_SUM), 0);
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_ASSIGN), 0);
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_SGD), 0);
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_ADAGRAD), 1);
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_ADAM), 2);
    assert_int_equal(psd_updater_state_per_float(PSD_UPD_FTRL), 2);
    assert_false(psd_updater_has_step(PSD_UPD_SUM));
    assert_false(psd_updater_has_step(PSD_UPD_ASSIGN));
    assert_false(psd_updater_has_step(PSD_UPD_SGD));
    assert_false(psd_updater_has_step(PSD_UPD_ADAGRAD));
    assert_true(psd_updater_has_step(PSD_UPD_ADAM));
    assert_false(psd_updater_has_step(PSD_UPD_FTRL));
}

/* Sum, assign and sgd get NULL state and step: touching them would crash
 * under the sanitizers. */
static void test_sum_adds_pushed_rows_exactly(void **unused)
{
    psd_updater_params p = params(PSD_UPD_SUM);
    float w[DIM];
    double want[DIM];

    (void)unused;
    for (uint32_t i = 0; i < DIM; i++)
        want[i] = w[i] = dyadic_start[i];
    for (int s = 0; s < STEPS; s++) {
        psd_update_row(&p, w, NULL, NULL, dyadic[s], DIM);
        for (uint32_t i = 0; i < DIM; i++) {
            want[i] += dyadic[s][i];
            expect_exact(w[i], want[i], "sum", 0, i, s + 1);
        }
    }
}

static void test_assign_replaces_row_exactly(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ASSIGN);
    const float big[DIM] = { 1e30f, -1e30f, 0.0f, -0.0f, 1e-30f, 3.0f,
                             -7.5f, 0.1f };
    float w[DIM];

    (void)unused;
    memcpy(w, start, sizeof w);
    for (int s = 0; s < STEPS; s++) {
        psd_update_row(&p, w, NULL, NULL, dyadic[s], DIM);
        for (uint32_t i = 0; i < DIM; i++)
            expect_exact(w[i], dyadic[s][i], "assign", 0, i, s + 1);
    }
    psd_update_row(&p, w, NULL, NULL, big, DIM);
    assert_memory_equal(w, big, sizeof w);
}

static void test_sgd_subtracts_lr_times_gradient_exactly(void **unused)
{
    psd_updater_params p = params(PSD_UPD_SGD);
    float w[DIM];
    double want[DIM];

    (void)unused;
    p.lr = 0.25f;
    for (uint32_t i = 0; i < DIM; i++)
        want[i] = w[i] = dyadic_start[i];
    for (int s = 0; s < STEPS; s++) {
        psd_update_row(&p, w, NULL, NULL, dyadic[s], DIM);
        for (uint32_t i = 0; i < DIM; i++) {
            want[i] -= 0.25 * dyadic[s][i];
            expect_exact(w[i], want[i], "sgd", 0, i, s + 1);
        }
    }
}

static void test_sgd_matches_double_reference_with_inexact_lr(void **unused)
{
    psd_updater_params p = params(PSD_UPD_SGD);
    float w[DIM];
    double want[DIM];

    (void)unused;
    p.lr = 0.03f;
    for (uint32_t i = 0; i < DIM; i++)
        want[i] = w[i] = start[i];
    for (int s = 0; s < STEPS; s++) {
        psd_update_row(&p, w, NULL, NULL, grads[s], DIM);
        for (uint32_t i = 0; i < DIM; i++) {
            want[i] -= (double)p.lr * grads[s][i];
            expect_close(w[i], want[i], 1e-6, 1e-7, "sgd", 0, i, s + 1);
        }
    }
}

static void test_adagrad_matches_double_reference(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ADAGRAD);

    (void)unused;
    check_against_reference(&p, ref_adagrad, 0, 1e-5);
    p.lr = 0.5f;
    p.epsilon = 1e-3f;
    check_against_reference(&p, ref_adagrad, 1, 1e-5);
}

static void test_adam_matches_double_reference(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ADAM);

    (void)unused;
    check_against_reference(&p, ref_adam, 0, 1e-5);
    p.lr = 0.1f;
    p.beta1 = 0.5f;
    p.beta2 = 0.9f;
    p.epsilon = 1e-3f;
    check_against_reference(&p, ref_adam, 1, 1e-5);
}

/* Two rows keep their own t: the counter lives with the row, not the
 * table. */
static void test_adam_step_counter_counts_calls_per_row(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ADAM);
    float wa[DIM] = { 0 }, wb[DIM] = { 0 };
    float sa[2 * DIM] = { 0 }, sb[2 * DIM] = { 0 };
    uint32_t ta = 0, tb = 0;

    (void)unused;
    for (uint32_t k = 1; k <= 5; k++) {
        psd_update_row(&p, wa, sa, &ta, grads[k % STEPS], DIM);
        assert_int_equal(ta, k);
    }
    assert_int_equal(tb, 0);
    psd_update_row(&p, wb, sb, &tb, grads[0], DIM);
    assert_int_equal(tb, 1);
    assert_int_equal(ta, 5);
}

/* On step 1, m/(1-b1) = g and v/(1-b2) = g^2, so the move is
 * lr g / (|g| + epsilon): lr times the sign of g, or 0 for g = 0. */
static void test_adam_first_step_moves_by_lr_times_sign(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ADAM);
    const float g[DIM] = { 3.0f, -0.5f, 1e-3f, 1e4f, -1e-2f, 0.0f,
                           7.0f, -7.0f };
    float w[DIM] = { 0 }, st[2 * DIM] = { 0 };
    uint32_t t = 0;

    (void)unused;
    psd_update_row(&p, w, st, &t, g, DIM);
    for (uint32_t i = 0; i < DIM; i++) {
        double want = g[i] > 0 ? -0.01 : g[i] < 0 ? 0.01 : 0.0;
        expect_close(w[i], want, 1e-4, 0.0, "adam step 1", 0, i, 1);
    }
}

static void test_ftrl_matches_double_reference(void **unused)
{
    psd_updater_params p = params(PSD_UPD_FTRL);

    (void)unused;
    p.lr = 0.1f;
    p.beta = 1.0f;
    p.l1 = 0.5f;
    p.l2 = 0.1f;
    check_against_reference(&p, ref_ftrl, 0, 1e-5);
    p.lr = 0.05f;
    p.beta = 0.5f;
    p.l1 = 0.0f;
    p.l2 = 0.0f;
    check_against_reference(&p, ref_ftrl, 1, 1e-5);
}

/* Small gradients keep |z| <= l1: the weight must be exactly 0 (not just
 * small), even from a non-zero start; one big push then frees it, with
 * the sign opposite to z. */
static void test_ftrl_weight_is_exactly_zero_while_z_within_l1(void **unused)
{
    psd_updater_params p = params(PSD_UPD_FTRL);
    const float small[4] = { 0.1f, -0.05f, 0.2f, -0.3f };
    float w[4] = { 0.3f, -0.2f, 0.0f, 0.01f }, st[8] = { 0 };
    float big[4] = { 5.0f, -5.0f, 5.0f, -5.0f };

    (void)unused;
    p.lr = 0.1f;
    p.l1 = 2.0f;
    p.l2 = 0.5f;
    for (int s = 0; s < 5; s++) {
        psd_update_row(&p, w, st, NULL, small, 4);
        for (uint32_t i = 0; i < 4; i++) {
            assert_true(fabsf(st[i]) <= p.l1);
            expect_exact(w[i], 0.0, "ftrl w", 0, i, s + 1);
        }
    }
    assert_true(st[0] != 0.0f);
    psd_update_row(&p, w, st, NULL, big, 4);
    for (uint32_t i = 0; i < 4; i++) {
        assert_true(fabsf(st[i]) > p.l1);
        assert_true(w[i] != 0.0f);
        assert_true((w[i] < 0) == (st[i] > 0));
    }
}

/* With beta = 0 and l2 = 0 (both allowed; TensorFlow's Ftrl defaults to
 * beta 0) FTRL divides by sqrt(n) / alpha, which is 0 while n is: a
 * first gradient whose square rounds to 0 in float (|g| < 2^-75) would
 * give the row an infinite weight, and z = inf at the next push keeps it
 * there for good. The weight stays finite (0, as for a row that saw no
 * gradient), and the next real gradient moves the row as it would a
 * fresh one. */
static void test_ftrl_with_beta_0_stays_finite_when_squares_underflow(
    void **unused)
{
    psd_updater_params p = params(PSD_UPD_FTRL);
    float w[2] = { 0.0f, 0.0f }, st[4] = { 0 };
    const float tiny[2] = { 1e-24f, -3e-30f }, real[2] = { 0.5f, -2.0f };

    (void)unused;
    p.lr = 0.1f;
    p.beta = 0.0f;
    psd_update_row(&p, w, st, NULL, tiny, 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_true(st[2 + i] == 0.0f);           /* the square underflowed */
        expect_exact(w[i], 0.0, "ftrl beta 0, tiny g", 0, i, 1);
    }
    psd_update_row(&p, w, st, NULL, real, 2);
    for (uint32_t i = 0; i < 2; i++) {
        /* n = g^2, z = g + tiny: w = -alpha z / |g|, about -alpha sgn(g). */
        double want = real[i] > 0 ? -0.1 : 0.1;
        expect_close(w[i], want, 1e-6, 0.0, "ftrl beta 0, then g", 0, i, 2);
    }
}

/* ---- Long runs against long double ---- */

#define LONG_STEPS 5000
#define LDIM 4

/* One float of a row in long double, written from the papers (Duchi et
 * al. 2011; Kingma and Ba 2015, with bias correction; McMahan et al.
 * 2013, algorithm 1), not from PROTOCOL.md's float recipe: the weight,
 * the state (adagrad: a = h; adam: a = m, b = v; ftrl: a = z, b = n) and
 * the sum of the weight's moves. */
typedef struct lrow {
    long double w, a, b, moved;
} lrow;

static void lref(const psd_updater_params *p, lrow *r, unsigned long t,
                 float gf)
{
    long double g = gf, lr = p->lr, was = r->w;

    if (p->kind == PSD_UPD_ADAGRAD) {
        r->a += g * g;
        r->w -= lr * g / (sqrtl(r->a) + p->epsilon);
    } else if (p->kind == PSD_UPD_ADAM) {
        long double b1 = p->beta1, b2 = p->beta2;
        r->a = b1 * r->a + (1 - b1) * g;
        r->b = b2 * r->b + (1 - b2) * g * g;
        r->w -= lr * (r->a / (1 - powl(b1, t))) /
                (sqrtl(r->b / (1 - powl(b2, t))) + p->epsilon);
    } else {
        long double n1 = r->b + g * g;
        r->a += g - (sqrtl(n1) - sqrtl(r->b)) / lr * r->w;
        r->b = n1;
        r->w = fabsl(r->a) <= p->l1
                   ? 0
                   : -(r->a - copysignl(p->l1, r->a)) /
                         ((p->beta + sqrtl(n1)) / lr + p->l2);
    }
    r->moved += fabsl(r->w - was);
}

/* A gradient in (-scale, scale) from a xorshift stream, with a zero now
 * and then. */
static float long_gradient(uint64_t *x, double scale)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    if ((*x & 15) == 0)
        return 0.0f;
    return (float)(((double)(*x >> 11) / 9007199254740992.0 - 0.5) * 2.0 *
                   scale);
}

/* Runs LONG_STEPS pushes of one row whose columns see gradients of scale
 * 1e-10, 1e-2, 1 and 1e10, comparing after every push. */
static void check_long_run(const psd_updater_params *p, int row)
{
    const double scale[LDIM] = { 1e-10, 1e-2, 1.0, 1e10 };
    float w[LDIM] = { 0.5f, -0.25f, 0.0f, 1.0f }, st[2 * LDIM] = { 0 };
    lrow r[LDIM];
    uint32_t t = 0;
    uint64_t x = 0x9e3779b97f4a7c15ULL + (uint64_t)row;

    for (uint32_t i = 0; i < LDIM; i++) {
        r[i].w = w[i];
        r[i].a = r[i].b = r[i].moved = 0;
    }
    for (int s = 1; s <= LONG_STEPS; s++) {
        float g[LDIM];
        for (uint32_t i = 0; i < LDIM; i++) {
            g[i] = long_gradient(&x, scale[i]);
            lref(p, &r[i], (unsigned long)s, g[i]);
        }
        psd_update_row(p, w, st, &t, g, LDIM);
        for (uint32_t i = 0; i < LDIM; i++)
            expect_close(w[i], (double)r[i].w, 1e-4,
                         1e-30 + 1e-6 * (double)r[i].moved, "long run",
                         row, i, s);
    }
}

static void test_updaters_match_long_double_over_5000_pushes(void **unused)
{
    psd_updater_params p = params(PSD_UPD_ADAGRAD);

    (void)unused;
    p.lr = 0.05f;
    p.epsilon = 1e-6f;
    check_long_run(&p, 0);
    p = params(PSD_UPD_ADAM);
    check_long_run(&p, 1);
    p.lr = 0.003f;
    p.beta1 = 0.5f;
    p.beta2 = 0.99f;
    p.epsilon = 1e-4f;
    check_long_run(&p, 2);
    p = params(PSD_UPD_FTRL);
    p.lr = 0.1f;
    check_long_run(&p, 3);
    p.lr = 2.0f;
    p.beta = 0.5f;
    p.l1 = 1e-3f;
    p.l2 = 0.5f;
    check_long_run(&p, 4);
}

/* ---- Initialisers ---- */

static psd_init_params init(psd_init_kind kind, float a, float b,
                            uint64_t seed)
{
    psd_init_params p = { .kind = kind, .a = a, .b = b, .seed = seed };
    return p;
}

static void test_init_zeros_gives_exact_zeros(void **unused)
{
    psd_init_params p = init(PSD_INIT_ZEROS, 5.0f, 6.0f, 9);
    float w[DIM];

    (void)unused;
    for (uint32_t i = 0; i < DIM; i++)
        w[i] = 7.0f;
    psd_init_row(&p, 42, w, DIM);
    for (uint32_t i = 0; i < DIM; i++)
        expect_exact(w[i], 0.0, "zeros", 42, i, 0);
}

static void test_init_constant_gives_exact_value(void **unused)
{
    psd_init_params p = init(PSD_INIT_CONSTANT, -0.3f, 0.0f, 9);
    float w[DIM] = { 0 };

    (void)unused;
    psd_init_row(&p, 42, w, DIM);
    for (uint32_t i = 0; i < DIM; i++)
        expect_exact(w[i], -0.3f, "constant", 42, i, 0);
}

/* Every kind writes dim floats and not one more or less. */
static void test_init_writes_exactly_dim_floats(void **unused)
{
    const psd_init_kind kinds[] = { PSD_INIT_ZEROS, PSD_INIT_CONSTANT,
                                    PSD_INIT_UNIFORM, PSD_INIT_NORMAL };
    float buf[DIM + 2];

    (void)unused;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        psd_init_params p = init(kinds[k], 3.0f, 4.0f, 1);
        for (uint32_t i = 0; i < DIM + 2; i++)
            buf[i] = -99.0f;
        psd_init_row(&p, 5, buf + 1, DIM);
        assert_true(buf[0] == -99.0f);
        assert_true(buf[DIM + 1] == -99.0f);
        for (uint32_t i = 1; i <= DIM; i++)
            assert_true(buf[i] != -99.0f);
    }
}

static void test_init_same_seed_and_key_gives_same_row(void **unused)
{
    const psd_init_kind kinds[] = { PSD_INIT_UNIFORM, PSD_INIT_NORMAL };
    float a[64], b[64];

    (void)unused;
    for (size_t k = 0; k < 2; k++) {
        psd_init_params p = init(kinds[k], -1.0f, 1.0f, 7);
        memset(a, 0, sizeof a);
        memset(b, 0xff, sizeof b);
        psd_init_row(&p, 123456789, a, 64);
        psd_init_row(&p, 123456789, b, 64);
        assert_memory_equal(a, b, sizeof a);
    }
}

/* Neighbouring and far-apart keys, the seed's low and high bits, and
 * seed and key swapped. */
static void test_init_different_keys_or_seeds_give_different_rows(
    void **unused)
{
    const psd_init_kind kinds[] = { PSD_INIT_UNIFORM, PSD_INIT_NORMAL };
    const uint64_t vals[] = { 0, 1, 2, 3, 1ULL << 32, 1ULL << 63,
                              UINT64_MAX };
    const size_t nv = sizeof vals / sizeof vals[0];
    float a[16], b[16];

    (void)unused;
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < nv; i++) {
            for (size_t j = i + 1; j < nv; j++) {
                psd_init_params p = init(kinds[k], 0.0f, 1.0f, 7);
                psd_init_row(&p, vals[i], a, 16);
                psd_init_row(&p, vals[j], b, 16);
                assert_memory_not_equal(a, b, sizeof a);

                psd_init_params pi = init(kinds[k], 0.0f, 1.0f, vals[i]);
                psd_init_params pj = init(kinds[k], 0.0f, 1.0f, vals[j]);
                psd_init_row(&pi, 99, a, 16);
                psd_init_row(&pj, 99, b, 16);
                assert_memory_not_equal(a, b, sizeof a);

                /* Seed and key do not simply combine: (i, j) != (j, i). */
                psd_init_row(&pi, vals[j], a, 16);
                psd_init_row(&pj, vals[i], b, 16);
                assert_memory_not_equal(a, b, sizeof a);
            }
        }
    }
}

/* The mean and variance of NDRAWS uniform values (100 keys of 1000
 * columns), all of which must lie in [lo, hi). */
static void test_init_uniform_in_range_with_right_mean_and_variance(
    void **unused)
{
    const float lo = -0.5f, hi = 2.0f;
    psd_init_params p = init(PSD_INIT_UNIFORM, lo, hi, 3);
    float w[1000];
    double sum = 0, sum2 = 0, min = hi, max = lo;

    (void)unused;
    for (uint64_t key = 0; key < NDRAWS / 1000; key++) {
        psd_init_row(&p, key, w, 1000);
        for (uint32_t i = 0; i < 1000; i++) {
            if (!(w[i] >= lo && w[i] < hi)) {
                print_error("key %llu col %u: got %.9g, want [%g, %g)\n",
                            (unsigned long long)key, i, (double)w[i],
                            (double)lo, (double)hi);
                fail();
            }
            sum += w[i];
            sum2 += (double)w[i] * w[i];
            min = w[i] < min ? w[i] : min;
            max = w[i] > max ? w[i] : max;
        }
    }
    double mean = sum / NDRAWS, var = sum2 / NDRAWS - mean * mean;
    double span = hi - lo;
    /* Standard error of the mean is span/sqrt(12 N) = 0.0023. */
    expect_close(mean, (lo + hi) / 2.0, 0.0, 0.01, "uniform mean", 0, 0, 0);
    expect_close(var, span * span / 12, 0.02, 0.0, "uniform var", 0, 0, 0);
    expect_close(min, lo, 0.0, span * 1e-3, "uniform min", 0, 0, 0);
    expect_close(max, hi, 0.0, span * 1e-3, "uniform max", 0, 0, 0);
}

/* Between 2^24 and 2^24 + 2 the only float is 2^24, and lo + u (hi - lo)
 * rounds up to hi for u > 1/2: the initialiser must still stay below hi. */
static void test_init_uniform_never_returns_hi_when_rounding_would(
    void **unused)
{
    const float lo = 16777216.0f, hi = 16777218.0f;
    psd_init_params p = init(PSD_INIT_UNIFORM, lo, hi, 0);
    float w[1000];

    (void)unused;
    for (uint64_t key = 0; key < 10; key++) {
        psd_init_row(&p, key, w, 1000);
        for (uint32_t i = 0; i < 1000; i++)
            expect_exact(w[i], lo, "uniform", (int)key, i, 0);
    }
}

/* Pins the first values of one row. Servers of different builds in one
 * cluster must create the same rows, so a change here is a format
 * change, not a refactoring. */
static void test_init_uniform_matches_pinned_values(void **unused)
{
    psd_init_params p = init(PSD_INIT_UNIFORM, 0.0f, 1.0f, 7);
    const float want[4] = { 0x1.dfb29p-2f, 0x1.da48e6p-1f, 0x1.5d8a78p-2f,
                            0x1.b99e0cp-2f };
    float w[4];

    (void)unused;
    psd_init_row(&p, 42, w, 4);
    for (uint32_t i = 0; i < 4; i++)
        expect_exact(w[i], want[i], "pinned", 42, i, 0);
}

/* Mean, standard deviation and the share within one std of the mean,
 * over NDRAWS values. */
static void test_init_normal_has_right_mean_std_and_shape(void **unused)
{
    const float mean = 1.5f, std = 0.5f;
    psd_init_params p = init(PSD_INIT_NORMAL, mean, std, 11);
    float w[1000];
    double sum = 0, sum2 = 0;
    int within = 0;

    (void)unused;
    for (uint64_t key = 0; key < NDRAWS / 1000; key++) {
        psd_init_row(&p, key, w, 1000);
        for (uint32_t i = 0; i < 1000; i++) {
            assert_true(isfinite(w[i]));
            sum += w[i];
            sum2 += (double)w[i] * w[i];
            within += fabs(w[i] - mean) <= std;
        }
    }
    double m = sum / NDRAWS, s = sqrt(sum2 / NDRAWS - m * m);
    /* Standard errors: mean 0.0016, std 0.0011, share 0.0015. */
    expect_close(m, mean, 0.0, 0.01, "normal mean", 0, 0, 0);
    expect_close(s, std, 0.01, 0.0, "normal std", 0, 0, 0);
    expect_close((double)within / NDRAWS, 0.682689, 0.0, 0.006,
                 "normal share within 1 std", 0, 0, 0);
}

/* Pearson correlation of x and y over n pairs. */
static double correlation(const double *x, const double *y, size_t n)
{
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;

    for (size_t i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        syy += y[i] * y[i];
        sxy += x[i] * y[i];
    }
    double nn = (double)n;
    double cov = sxy - sx * sy / nn;
    return cov / sqrt((sxx - sx * sx / nn) * (syy - sy * sy / nn));
}

/* Values one column, one key or one seed apart must look independent:
 * over NDRAWS pairs |r| stays below 0.015 (about 5 standard errors). */
static void test_init_neighbouring_columns_keys_and_seeds_are_uncorrelated(
    void **unused)
{
    static double x[NDRAWS], by_col[NDRAWS], by_key[NDRAWS], by_seed[NDRAWS];
    const psd_init_kind kinds[] = { PSD_INIT_UNIFORM, PSD_INIT_NORMAL };
    float w[1001], wk[1000], ws[1000];

    (void)unused;
    for (size_t k = 0; k < 2; k++) {
        psd_init_params p = init(kinds[k], 0.0f, 1.0f, 5);
        psd_init_params q = init(kinds[k], 0.0f, 1.0f, 6);
        for (uint64_t key = 0; key < NDRAWS / 1000; key++) {
            psd_init_row(&p, key, w, 1001);
            psd_init_row(&p, key + 1, wk, 1000);
            psd_init_row(&q, key, ws, 1000);
            for (uint32_t i = 0; i < 1000; i++) {
                size_t j = key * 1000 + i;
                x[j] = w[i];
                by_col[j] = w[i + 1];
                by_key[j] = wk[i];
                by_seed[j] = ws[i];
            }
        }
        const double *ys[3] = { by_col, by_key, by_seed };
        for (int v = 0; v < 3; v++) {
            double r = correlation(x, ys[v], NDRAWS);
            expect_close(r, 0.0, 0.0, 0.015, "correlation", (int)k,
                         (uint32_t)v, 0);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_sizes_and_step_flags_match_header),
        cmocka_unit_test(test_sum_adds_pushed_rows_exactly),
        cmocka_unit_test(test_assign_replaces_row_exactly),
        cmocka_unit_test(test_sgd_subtracts_lr_times_gradient_exactly),
        cmocka_unit_test(test_sgd_matches_double_reference_with_inexact_lr),
        cmocka_unit_test(test_adagrad_matches_double_reference),
        cmocka_unit_test(test_adam_matches_double_reference),
        cmocka_unit_test(test_adam_step_counter_counts_calls_per_row),
        cmocka_unit_test(test_adam_first_step_moves_by_lr_times_sign),
        cmocka_unit_test(test_ftrl_matches_double_reference),
        cmocka_unit_test(test_ftrl_weight_is_exactly_zero_while_z_within_l1),
        cmocka_unit_test(
            test_ftrl_with_beta_0_stays_finite_when_squares_underflow),
        cmocka_unit_test(test_updaters_match_long_double_over_5000_pushes),
        cmocka_unit_test(test_init_zeros_gives_exact_zeros),
        cmocka_unit_test(test_init_constant_gives_exact_value),
        cmocka_unit_test(test_init_writes_exactly_dim_floats),
        cmocka_unit_test(test_init_same_seed_and_key_gives_same_row),
        cmocka_unit_test(
            test_init_different_keys_or_seeds_give_different_rows),
        cmocka_unit_test(
            test_init_uniform_in_range_with_right_mean_and_variance),
        cmocka_unit_test(
            test_init_uniform_never_returns_hi_when_rounding_would),
        cmocka_unit_test(test_init_uniform_matches_pinned_values),
        cmocka_unit_test(test_init_normal_has_right_mean_std_and_shape),
        cmocka_unit_test(
            test_init_neighbouring_columns_keys_and_seeds_are_uncorrelated),
    };
    const int total = (int)(sizeof tests / sizeof tests[0]);
    int failed = cmocka_run_group_tests_name("updater", tests, NULL, NULL);

    printf("%d passed, %d failed\n", total - failed, failed);
    return failed;
}
