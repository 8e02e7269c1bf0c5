/*
 * backend.h — the trainer's compute backends: one table of operations that
 * the training loop (train.c), the evaluation (report.c) and the
 * distributed modes (dist_*.c) call, the way the collectives have theirs
 * (coll_int.h). Two implementations:
 *
 *   cpu   backend_cpu.c: the reference kernels of layer.c and optim.c
 *         (OpenBLAS sgemm); the backend works on the model's own host
 *         arrays (params, grads, bufs, act, dact of model.h)
 *   cuda  cuda.cu: every layer, the loss, clipping and the optimizer on the
 *         GPU (cuBLAS); its own device copies of params, grads, BN buffers,
 *         optimizer state and activations. Compiled only with CUDA
 *         (HF_HAVE_CUDA); reached through tr_backend_cuda_ops().
 *
 * The backend is chosen once at start (tr_backend_select, from --device)
 * and nothing above this header branches on which one it is. The host
 * model stays the authority for checkpoints: tr_backend_sync copies the
 * backend's params, BN buffers and optimizer state into it, and
 * tr_backend_load pushes them back (after a resume). Both are no-ops on
 * the CPU.
 *
 * The loops over layers (a step, a range of layers, inference) are here,
 * once, in backend.c, over the per-layer operations; the results on the
 * CPU are those of the reference, bit for bit (model.c's tr_model_* calls
 * are this driver on the CPU backend). See docs/trainer.md, "Compute
 * backends".
 */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include "model.h"
#include "optim.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tr_backend tr_backend;

/*
 * The operations of one backend. Every int-returning op RETs 0 or a
 * negative HF_E* (a device error is logged by the backend). Layer i works
 * on the backend's activations: forward reads act[i] and writes act[i+1]
 * (B rows); backward reads dact[i+1] and writes layer i's parameter
 * gradient and, when want_dx, dact[i]. ctx->index is set by the caller.
 */
typedef struct tr_backend_ops {
    const char *name;   /* "cpu", "cuda" */
    int host;           /* 1: params, grads and activations are the model's host arrays */
    /* Bind be->m; set be->dev. RET 0 or HF_E* with err filled. */
    int  (*open)(tr_backend *be, char *err, size_t errlen);
    void (*close)(tr_backend *be);
    /* Host -> backend: params (n_params), bufs (n_bufs), optimizer state
     * (o->n_state); any may be NULL. */
    int  (*load)(tr_backend *be, const float *params, const float *bufs, const tr_optim *o);
    /* Backend -> host, the same three (any may be NULL). */
    int  (*store)(tr_backend *be, float *params, float *bufs, tr_optim *o);
    /* The batch: x (B, in) into act[0] (x NULL: keep act[0]), labels y (B)
     * for the next loss (y NULL: keep). RET HF_EINVAL for a bad B. */
    int  (*put_batch)(tr_backend *be, const float *x, const int32_t *y, int B);
    int  (*forward)(tr_backend *be, int i, const tr_layer_ctx *ctx, int B);
    int  (*backward)(tr_backend *be, int i, const tr_layer_ctx *ctx, int B, int want_dx);
    /* Softmax cross-entropy of the logits act[n_layers] (B rows) against
     * the labels put; when want_grad, d(loss)/d(logits) scaled by
     * 1/scale_B into dact[n_layers] (tr_softmax_xent). The results wait
     * for xent_result (a device need not synchronise before backward). */
    int  (*xent)(tr_backend *be, int B, int scale_B, int want_grad);
    /* The last xent's mean loss over its B rows and its correct rows. */
    int  (*xent_result)(tr_backend *be, int B, double *loss, int *hits);
    /* Clip the whole gradient to max_norm as tr_grad_clip (<= 0: only
     * measure); *norm (may be NULL) the norm before clipping. */
    int  (*clip)(tr_backend *be, double max_norm, double *norm);
    /* tr_optim_step over params[off, off + o->n) with grads at the same
     * offsets; o->t advances on the host. */
    int  (*optim_step)(tr_backend *be, tr_optim *o, size_t off, float lr);
} tr_backend_ops;

/* An open backend over one model. Caller-owned (a stack struct is fine);
 * the members are the backends' own. */
struct tr_backend {
    const tr_backend_ops *ops;
    tr_model      *m;          /* the host model: shapes, offsets; checkpoints */
    void          *dev;        /* the backend's state (cuda: its tr_cuda) */
    const int32_t *y;          /* cpu: the labels of the batch put */
    double         loss;       /* cpu: the last xent's results */
    int            hits;
};

/* The CPU backend over m (never fails; nothing to close, but closing is fine). */
void tr_backend_cpu(tr_backend *be, tr_model *m);
const tr_backend_ops *tr_backend_cpu_ops(void);
#ifdef HF_HAVE_CUDA
/* cuda.cu: the CUDA backend's table. */
const tr_backend_ops *tr_backend_cuda_ops(void);
#endif

/* Open the backend for device dev (TR_DEV_* of device.h, as
 * tr_device_select resolved `want`) over m. With want "cuda" a backend that
 * will not open is an error (err: why); with "auto" the CPU takes over
 * with a warning. RET 0 or HF_E*. */
int  tr_backend_select(tr_backend *be, int dev, const char *want, tr_model *m, char *err, size_t errlen);
void tr_backend_close(tr_backend *be);

/* The host model's params and bufs and o's state (may be NULL) into the
 * backend, and back (no-ops on the CPU). */
int  tr_backend_load(tr_backend *be, const tr_optim *o);
int  tr_backend_sync(tr_backend *be, tr_optim *o);

/* One training step's math (no optimizer): put x (B, in) and y, forward
 * every layer, softmax cross-entropy with d(logits) scaled by 1/scale_B,
 * backward every layer. on_grad (may be NULL; host backends only, else
 * HF_EUNSUP) as tr_model_backward. OUT *loss (mean over the B rows),
 * *hits (may be NULL). */
int  tr_backend_step(tr_backend *be, const float *x, const int32_t *y, int B, int scale_B, const tr_layer_ctx *ctx,
                     tr_grad_cb on_grad, void *cb_ctx, double *loss, int *hits);
/* Layers [a, b) forward on B rows (as tr_model_forward). */
int  tr_backend_forward(tr_backend *be, int a, int b, int B, const tr_layer_ctx *ctx);
/* Layers [a, b) backward from dact[b] (as tr_model_backward). */
int  tr_backend_backward(tr_backend *be, int a, int b, int B, const tr_layer_ctx *ctx, tr_grad_cb on_grad,
                         void *cb_ctx);
/* Loss of the logits in act[n_layers] against y (B rows); want_grad: also
 * d(logits) scaled by 1/scale_B into dact[n_layers]. OUT *loss, *hits. */
int  tr_backend_xent(tr_backend *be, const int32_t *y, int B, int scale_B, int want_grad, double *loss, int *hits);
/* Inference (no dropout, BN running statistics): put x, y (B rows),
 * forward, mean cross-entropy and correct rows; the gradient is untouched. */
int  tr_backend_infer(tr_backend *be, const float *x, const int32_t *y, int B, double *loss, int *hits);
int  tr_backend_clip(tr_backend *be, double max_norm, double *norm);
int  tr_backend_optim_step(tr_backend *be, tr_optim *o, size_t off, float lr);

#endif
