/* Softmax regression math for the examples: logits, a numerically stable
 * softmax, the cross-entropy gradient and accuracy. */
#include "softmax.h"

#include <math.h>
#include <string.h>

#define F SOFTMAX_FEATURES
#define C SOFTMAX_CLASSES

/* z = x w + b. Fashion-MNIST images are about half black, so skipping zero
 * pixels halves the work without changing the result. */
static void logits(const float *w, const float *x, float *z)
{
    memcpy(z, w + (size_t)F * C, C * sizeof *z);
    for (size_t j = 0; j < F; j++) {
        float xj = x[j];
        if (xj == 0.0f)
            continue;
        const float *wj = w + j * C;
        for (int k = 0; k < C; k++)
            z[k] += xj * wj[k];
    }
}

int softmax_argmax(const float *z)
{
    int best = 0;
    for (int k = 1; k < C; k++)
        if (z[k] > z[best])
            best = k;
    return best;
}

/* Subtracting the largest logit keeps expf from overflowing, and the loss
 * comes from the shifted logits rather than from logf(p[y]), which would be
 * infinite once p[y] underflows to 0. */
float softmax_cross_entropy(const float *z, int y, float *p)
{
    float max = z[softmax_argmax(z)];
    float sum = 0.0f;
    for (int k = 0; k < C; k++) {
        p[k] = expf(z[k] - max);
        sum += p[k];
    }
    for (int k = 0; k < C; k++)
        p[k] /= sum;
    return logf(sum) - (z[y] - max);
}

int softmax_forward(const float *w, const float *x, float *p)
{
    float z[C];
    logits(w, x, z);
    softmax_cross_entropy(z, 0, p);
    return softmax_argmax(z);
}

double softmax_grad(const float *w, const float *x, const uint8_t *y,
                    const size_t *idx, size_t n, float *grad)
{
    double loss = 0.0;
    float z[C], d[C];

    memset(grad, 0, SOFTMAX_PARAMS * sizeof *grad);
    for (size_t i = 0; i < n; i++) {
        const float *xi = x + idx[i] * F;
        int yi = y[idx[i]];

        logits(w, xi, z);
        loss += softmax_cross_entropy(z, yi, d);
        d[yi] -= 1.0f;          /* dL/dz = p - onehot(y) */

        for (size_t j = 0; j < F; j++) {
            float xj = xi[j];
            if (xj == 0.0f)
                continue;
            float *gj = grad + j * C;
            for (int k = 0; k < C; k++)
                gj[k] += xj * d[k];
        }
        float *gb = grad + (size_t)F * C;
        for (int k = 0; k < C; k++)
            gb[k] += d[k];
    }

    float scale = 1.0f / (float)n;
    for (size_t i = 0; i < SOFTMAX_PARAMS; i++)
        grad[i] *= scale;
    return loss / (double)n;
}

double softmax_accuracy(const float *w, const float *x, const uint8_t *y,
                        size_t n)
{
    size_t right = 0;
    float z[C];

    for (size_t i = 0; i < n; i++) {
        logits(w, x + i * F, z);
        if (softmax_argmax(z) == y[i])
            right++;
    }
    return n ? (double)right / (double)n : 0.0;
}
