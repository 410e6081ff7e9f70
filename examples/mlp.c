/* One-hidden-layer perceptron math for the examples: ReLU hidden layer,
 * backpropagation and accuracy; the output softmax is softmax.c's. */
#include "mlp.h"

#include <string.h>

#include "softmax.h"

#define F MLP_FEATURES
#define C MLP_CLASSES

_Static_assert(MLP_CLASSES == SOFTMAX_CLASSES,
               "the output layer uses softmax.c's functions");

size_t mlp_w1_size(size_t hidden)
{
    return (size_t)MLP_W1_ROWS * hidden;
}

size_t mlp_w2_size(size_t hidden)
{
    return (hidden + 1) * C;
}

/* dst[i] += a * src[i] for i < n: the inner loop of both layers. At -O2
 * GCC vectorises a loop only when it needs no remainder, so the bulk goes
 * in blocks of constant length 8 and the rest one by one. */
static void axpy(float *restrict dst, float a, const float *restrict src,
                 size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++)
            dst[i + k] += a * src[i + k];
    for (; i < n; i++)
        dst[i] += a * src[i];
}

/* Hidden pre-activations a = x w1 + b1 and activations r = relu(a), each
 * `hidden` floats. Fashion-MNIST images are about half black, so skipping
 * zero pixels halves the work without changing the result. */
static void hidden_layer(const mlp_weights *m, const float *x, float *a,
                         float *r)
{
    size_t H = m->hidden;
    memcpy(a, m->w1 + (size_t)F * H, H * sizeof *a);
    for (size_t j = 0; j < F; j++)
        if (x[j] != 0.0f)
            axpy(a, x[j], m->w1 + j * H, H);
    for (size_t h = 0; h < H; h++)
        r[h] = a[h] > 0.0f ? a[h] : 0.0f;
}

/* Class logits z = r w2 + b2. Inactive units contribute nothing. */
static void output_layer(const mlp_weights *m, const float *r, float *z)
{
    size_t H = m->hidden;
    memcpy(z, m->w2 + H * C, C * sizeof *z);
    for (size_t h = 0; h < H; h++)
        if (r[h] != 0.0f)
            axpy(z, r[h], m->w2 + h * C, C);
}

int mlp_forward(const mlp_weights *m, const float *x, float *p)
{
    float a[MLP_MAX_HIDDEN], r[MLP_MAX_HIDDEN], z[C];
    hidden_layer(m, x, a, r);
    output_layer(m, r, z);
    softmax_cross_entropy(z, 0, p);
    return softmax_argmax(z);
}

double mlp_grad(const mlp_weights *m, const float *x, const uint8_t *y,
                const size_t *idx, size_t n, float *g1, float *g2)
{
    size_t H = m->hidden;
    float a[MLP_MAX_HIDDEN], r[MLP_MAX_HIDDEN], da[MLP_MAX_HIDDEN];
    float z[C], dz[C];
    double loss = 0.0;

    memset(g1, 0, mlp_w1_size(H) * sizeof *g1);
    memset(g2, 0, mlp_w2_size(H) * sizeof *g2);
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + idx[i] * F;
        int yi = y[idx[i]];

        hidden_layer(m, xi, a, r);
        output_layer(m, r, z);
        loss += softmax_cross_entropy(z, yi, dz);
        dz[yi] -= 1.0f;             /* dL/dz = p - onehot(y) */

        /* Output layer: dL/dw2[h] = r[h] dz, and the error sent back to
         * unit h is w2[h] . dz, passed only where the ReLU was open. */
        for (size_t h = 0; h < H; h++) {
            da[h] = 0.0f;
            if (r[h] == 0.0f)
                continue;
            const float *w2h = m->w2 + h * C;
            float s = 0.0f;
            for (int k = 0; k < C; k++)
                s += w2h[k] * dz[k];
            da[h] = s;
            axpy(g2 + h * C, r[h], dz, C);
        }
        axpy(g2 + H * C, 1.0f, dz, C);

        /* Hidden layer: dL/dw1[j] = x[j] da. */
        for (size_t j = 0; j < F; j++)
            if (xi[j] != 0.0f)
                axpy(g1 + j * H, xi[j], da, H);
        axpy(g1 + (size_t)F * H, 1.0f, da, H);
    }

    float scale = 1.0f / (float)n;
    for (size_t i = 0; i < mlp_w1_size(H); i++)
        g1[i] *= scale;
    for (size_t i = 0; i < mlp_w2_size(H); i++)
        g2[i] *= scale;
    return loss / (double)n;
}

double mlp_accuracy(const mlp_weights *m, const float *x, const uint8_t *y,
                    size_t n)
{
    size_t right = 0;
    float p[C];

    for (size_t i = 0; i < n; i++)
        if (mlp_forward(m, x + i * F, p) == y[i])
            right++;
    return n ? (double)right / (double)n : 0.0;
}
