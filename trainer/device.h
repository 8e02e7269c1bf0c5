/*
 * device.h — which compute device a run uses (--device cpu|cuda|auto).
 *
 * The CPU path (layer.c) is the reference. The CUDA backend (cuda.cu:
 * cuBLAS + kernels) is compiled when the Makefile finds nvcc (CUDA=1,
 * HF_HAVE_CUDA); without it, or without a usable GPU at run time,
 * --device cuda fails with "no usable CUDA GPU: <reason>" and --device auto
 * falls back to the CPU with a message.
 */
#ifndef TR_DEVICE_H
#define TR_DEVICE_H

#include "model.h"

#include <stddef.h>
#include <stdint.h>

enum { TR_DEV_CPU = 0, TR_DEV_CUDA = 1 };

/* Is a CUDA GPU usable? RET 1 (name filled) or 0 (why filled). */
int tr_cuda_probe(char *why, size_t whylen);

/* Resolve "cpu"|"cuda"|"auto". RET TR_DEV_* or HF_EUNSUP (cuda asked,
 * none usable: err says why). */
int tr_device_select(const char *want, char *err, size_t errlen);

/*
 * The CUDA training step (cuda.cu). The host keeps the authoritative
 * parameters and runs the optimizer (optim.c), so checkpoints, evaluation
 * and the optimizer math are the same code on both devices; the GPU runs
 * the forward and backward passes: cuBLAS sgemm (FP32, TF32 off) for
 * dense layers and kernels for bias, ReLU and softmax cross-entropy.
 * Supported layers: dense, ReLU, flatten (the MLP without dropout or
 * batch norm); tr_cuda_new fails with HF_EUNSUP for others and the
 * trainer falls back to the CPU with a message.
 */
typedef struct tr_cuda tr_cuda;

/* Device buffers for m (its layer stack and max batch). RET NULL with err. */
tr_cuda *tr_cuda_new(const tr_model *m, char *err, size_t errlen);
void     tr_cuda_free(tr_cuda *c);

/* One forward+backward on the GPU: uploads params (n_params) and the batch
 * x (B, in) / y (B), writes the gradient into grads (n_params, host) and,
 * when logits != NULL, the logits (B, classes). Loss, hits and dlogits
 * scaling as tr_softmax_xent. RET 0 or HF_EIO (CUDA error, logged). */
int tr_cuda_step(tr_cuda *c, const float *params, const float *x, const int32_t *y, int B, int scale_B,
                 float *grads, float *logits, double *loss, int *hits);

#endif
