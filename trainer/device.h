/*
 * device.h — which compute device a run uses (--device cpu|cuda|auto).
 *
 * The CPU path (layer.c) is the reference. The CUDA backend (cuda*.cu:
 * cuBLAS + kernels) is compiled when the Makefile finds nvcc (CUDA=1,
 * HF_HAVE_CUDA); without it, or without a usable GPU at run time,
 * --device cuda fails with "no usable CUDA GPU: <reason>" and --device auto
 * falls back to the CPU with a message.
 */
#ifndef TR_DEVICE_H
#define TR_DEVICE_H

#include "model.h"
#include "optim.h"

#include <stddef.h>
#include <stdint.h>

enum { TR_DEV_CPU = 0, TR_DEV_CUDA = 1 };

/* Is a CUDA GPU usable? RET 1 (name filled) or 0 (why filled). */
int tr_cuda_probe(char *why, size_t whylen);

/* Resolve "cpu"|"cuda"|"auto". RET TR_DEV_* or HF_EUNSUP (cuda asked,
 * none usable: err says why). */
int tr_device_select(const char *want, char *err, size_t errlen);

/*
 * The CUDA backend's device state (cuda.cu). Training and evaluation reach
 * it through the backend table (backend.h, tr_backend_cuda_ops); the
 * functions below are its device-level interface, for the backend's own
 * table and for tests that compare it with the CPU piece by piece. Every
 * layer kind (dense, conv2d, max-pool, ReLU, dropout, batch norm,
 * flatten), softmax cross-entropy, gradient clipping and the optimizer
 * (SGD/momentum/Nesterov, Adam, AdamW) run on the GPU; cuBLAS sgemm in
 * FP32 (TF32 off) for dense and conv2d.
 *
 * The device holds its own copy of params, grads, BN buffers and the
 * optimizer state, so a training step moves only the batch in and the
 * loss out. The host model (tr_model, tr_optim) stays the authority for
 * checkpoints and evaluation: tr_cuda_store refreshes it, tr_cuda_load
 * (after a resume) pushes it back. Dropout masks use the same counter
 * hash as the CPU (tr_hash64 of seed, step, layer, global row, element),
 * so CPU and GPU drop the same units (both compile dropout_hash.h). See
 * docs/trainer.md for the tolerances CPU and GPU agree within.
 */
typedef struct tr_cuda tr_cuda;

/* Device buffers for m (its layer stack and max batch); uploads m->params
 * and m->bufs. RET NULL with err ("no usable CUDA GPU: ..." without one). */
tr_cuda *tr_cuda_new(const tr_model *m, char *err, size_t errlen);
void     tr_cuda_free(tr_cuda *c);

/* Host -> device: params (n_params), bufs (n_bufs), optimizer state
 * (o->n_state); any may be NULL. RET 0, HF_EINVAL or HF_EIO. */
int tr_cuda_load(tr_cuda *c, const float *params, const float *bufs, const tr_optim *o);
/* Device -> host, the same three (any may be NULL). */
int tr_cuda_store(tr_cuda *c, float *params, float *bufs, tr_optim *o);

/* Download the gradient (n_params) and/or the last logits (B, classes). */
int tr_cuda_get(tr_cuda *c, float *grads, float *logits, int B);
/* Upload a gradient (n_params) (tests; a reduced gradient). */
int tr_cuda_set_grads(tr_cuda *c, const float *grads);

/* Clip the device gradient to max_norm as tr_grad_clip (<= 0: only
 * measure); *norm (may be NULL) gets the norm before clipping. */
int tr_cuda_clip(tr_cuda *c, double max_norm, double *norm);
/* tr_optim_step on the device: same math, same IEEE operations; o->t is
 * advanced on the host, o->state lives on the device until
 * tr_cuda_store. */
int tr_cuda_optim_step(tr_cuda *c, tr_optim *o, float lr);

/* One layer on host arrays (tests): forward x (B, in) -> y (B, out) (y may
 * be NULL); when dy != NULL, backward: dx (B, in) (NULL: not computed) and
 * the layer's parameter gradient (param_count floats) into grads (may be
 * NULL). Uses the device params/bufs; BN running stats update in train. */
int tr_cuda_layer(tr_cuda *c, int i, const tr_layer_ctx *ctx, int B, const float *x, float *y,
                  const float *dy, float *dx, float *grads);

#endif
