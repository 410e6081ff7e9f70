/* Softmax regression on 28x28 images, the math only: forward pass, loss,
 * gradient and accuracy. No I/O and no psd client, so a trainer over any
 * transport (or a local test) can share it. */
#ifndef SOFTMAX_H
#define SOFTMAX_H

#include <stddef.h>
#include <stdint.h>

#define SOFTMAX_FEATURES 784                  /* 28 x 28 pixels */
#define SOFTMAX_CLASSES 10
#define SOFTMAX_ROWS (SOFTMAX_FEATURES + 1)   /* pixel rows, then the bias */
#define SOFTMAX_PARAMS (SOFTMAX_ROWS * SOFTMAX_CLASSES)

/* Every `w` below is SOFTMAX_ROWS x SOFTMAX_CLASSES floats, row-major:
 * w[j * SOFTMAX_CLASSES + k] weighs pixel j for class k, and the last row
 * holds the class biases. This is the layout of a dense psd table with
 * rows = 785 and dim = 10. Images are SOFTMAX_FEATURES floats each. */

/* The index of the largest of the SOFTMAX_CLASSES logits z (the first on a
 * tie). */
int softmax_argmax(const float *z);

/* Turns the SOFTMAX_CLASSES logits z into probabilities p and returns
 * -log p[y], the cross-entropy loss of a sample of class y. z and p may
 * not overlap. Shared with the output layer of mlp.c. */
float softmax_cross_entropy(const float *z, int y, float *p);

/* Writes the class probabilities of image x into p (SOFTMAX_CLASSES floats)
 * and returns the most likely class. */
int softmax_forward(const float *w, const float *x, float *p);

/* The cross-entropy gradient of a minibatch: the n >= 1 images
 * x + idx[i] * SOFTMAX_FEATURES with labels y[idx[i]]. Overwrites grad
 * (SOFTMAX_PARAMS floats) with dL/dw averaged over the batch, so that
 * w -= lr * grad is one SGD step, and returns the batch's mean loss
 * (computed with w as given, before any step). */
double softmax_grad(const float *w, const float *x, const uint8_t *y,
                    const size_t *idx, size_t n, float *grad);

/* The fraction of the n images x (n * SOFTMAX_FEATURES floats) whose most
 * likely class is their label y[i]; 0 when n is 0. */
double softmax_accuracy(const float *w, const float *x, const uint8_t *y,
                        size_t n);

#endif
