/* A one-hidden-layer perceptron on 28x28 images, the math only: forward
 * pass, loss, minibatch gradient and accuracy. 784 pixels -> `hidden` ReLU
 * units -> 10 softmax classes. No I/O and no psd client. */
#ifndef MLP_H
#define MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_FEATURES 784                  /* 28 x 28 pixels */
#define MLP_CLASSES 10
#define MLP_W1_ROWS (MLP_FEATURES + 1)    /* pixel rows, then the bias */
#define MLP_MAX_HIDDEN 4096               /* bounds the stack buffers */

/* The weights are two matrices, each the layout of a dense psd table:
 * - w1: MLP_W1_ROWS x hidden floats, row-major: w1[j * hidden + h] weighs
 *   pixel j for unit h; the last row holds the hidden biases
 *   (table rows 785, dim hidden).
 * - w2: (hidden + 1) x MLP_CLASSES floats: w2[h * MLP_CLASSES + k] weighs
 *   unit h for class k; the last row holds the class biases
 *   (table rows hidden + 1, dim 10).
 * `hidden` is 1..MLP_MAX_HIDDEN everywhere. Images are MLP_FEATURES floats
 * each. Every pointer is borrowed for the duration of the call only. */
typedef struct mlp_weights {
    const float *w1;
    const float *w2;
    size_t hidden;
} mlp_weights;

/* Floats in w1 and in w2 for a given hidden size. */
size_t mlp_w1_size(size_t hidden);
size_t mlp_w2_size(size_t hidden);

/* Writes the class probabilities of image x into p (MLP_CLASSES floats)
 * and returns the most likely class. */
int mlp_forward(const mlp_weights *m, const float *x, float *p);

/* The cross-entropy gradient of a minibatch: the n >= 1 images
 * x + idx[i] * MLP_FEATURES with labels y[idx[i]]. Overwrites g1 and g2
 * (shaped like w1 and w2) with dL/dw averaged over the batch, so that
 * w -= lr * g is one SGD step, and returns the batch's mean loss (with the
 * weights as given, before any step). */
double mlp_grad(const mlp_weights *m, const float *x, const uint8_t *y,
                const size_t *idx, size_t n, float *g1, float *g2);

/* The fraction of the n images x (n * MLP_FEATURES floats) whose most
 * likely class is their label y[i]; 0 when n is 0. */
double mlp_accuracy(const mlp_weights *m, const float *x, const uint8_t *y,
                    size_t n);

#endif
