/*
 * layer.h — the layers of the trainer and their CPU reference kernels.
 *
 * Tensors are plain row-major float arrays. A batch of activations is
 * (B, C, H, W) with one sample's C*H*W floats contiguous (NCHW); a dense
 * activation is (B, N) with C = N, H = W = 1. Parameters are NOT owned by
 * a layer: every layer's weights live in the model's one flat parameter
 * array at [param_off, param_off + param_count), and its gradients at the
 * same offsets in the model's flat gradient array (model.h). Non-trained
 * state (batch-norm running statistics) lives likewise in the model's flat
 * buffer array at [buf_off, buf_off + buf_count).
 *
 * Per-layer parameter layouts (all inside the layer's slice, in order):
 *   DENSE      W (out, in), b (out)
 *   CONV2D     W (out_c, in_c, k, k), b (out_c)
 *   BATCHNORM  gamma (C), beta (C);     buffers: running mean (C), var (C)
 *   others     none
 *
 * The kernels are the specification: simple loops plus sgemm (OpenBLAS),
 * tested against finite differences in tests/unit/test_trainer_layers.c.
 */
#ifndef TR_LAYER_H
#define TR_LAYER_H

#include "dropout_hash.h"

#include <stddef.h>
#include <stdint.h>

typedef enum tr_layer_kind {
    TR_DENSE = 0,   /* y = x W^T + b */
    TR_CONV2D,      /* k x k, stride 1, padding pad (im2col + sgemm) */
    TR_MAXPOOL,     /* k x k window, stride k */
    TR_RELU,
    TR_DROPOUT,     /* inverted dropout, mask from a counter-based hash */
    TR_BATCHNORM,   /* per channel over (B, H, W); dense: per feature over B */
    TR_FLATTEN,     /* (B, C, H, W) -> (B, C*H*W): a no-op on memory */
    TR_LAYER_KIND_COUNT
} tr_layer_kind;

typedef struct tr_shape { int c, h, w; } tr_shape;   /* one sample */

static inline size_t tr_shape_size(tr_shape s) { return (size_t)s.c * (size_t)s.h * (size_t)s.w; }

/* What a model builder asks for; tr_layer_setup turns it into a tr_layer. */
typedef struct tr_layer_spec {
    tr_layer_kind kind;
    int   out;      /* DENSE: output features; CONV2D: output channels */
    int   k;        /* CONV2D kernel size; MAXPOOL window (= stride) */
    int   pad;      /* CONV2D zero padding */
    float p;        /* DROPOUT drop probability in [0, 1) */
} tr_layer_spec;

typedef struct tr_layer {
    tr_layer_kind kind;
    tr_layer_spec spec;
    tr_shape in, out;        /* per-sample shapes */
    size_t param_off, param_count;   /* slice of the model's params/grads */
    size_t buf_off, buf_count;       /* slice of the model's buffers */
    /* scratch owned by the model, sized for its max batch: */
    float   *col;            /* CONV2D im2col (in.c*k*k, out.h*out.w) per sample */
    int32_t *argmax;         /* MAXPOOL (B, out) index of the max in the input */
    float   *xhat;           /* BATCHNORM (B, C, H, W) normalised input */
    float   *stat;           /* BATCHNORM batch mean (C), inverse std (C) */
    uint8_t *mask;           /* DROPOUT (B, in) kept = 1 */
} tr_layer;

/* Everything a kernel needs besides the tensors. */
typedef struct tr_layer_ctx {
    int      train;          /* 1: training (dropout on, BN batch stats) */
    uint64_t seed;           /* dropout masks: hash(seed, step, layer, row_base + row, i) */
    int64_t  step;
    int      index;          /* layer index in the model */
    int64_t  row_base;       /* global row of row 0 (data-parallel shards) */
    float    bn_momentum;    /* running = (1-m) running + m batch; 0.1 */
    float    bn_eps;         /* 1e-5 */
} tr_layer_ctx;

/* Fill l from spec and the input shape; sets out, param_count, buf_count
 * (offsets are the model's to set). RET 0 or HF_EINVAL (bad spec/shape). */
int tr_layer_setup(tr_layer *l, const tr_layer_spec *spec, tr_shape in);

/* Bytes of scratch the layer needs for batch B (the model allocates it). */
size_t tr_layer_scratch_floats(const tr_layer *l, int B);

/* Initialise the layer's parameters (He-uniform weights, zero biases,
 * gamma 1, beta 0) and buffers (mean 0, var 1) from seed. */
void tr_layer_init(const tr_layer *l, float *params, float *bufs, uint64_t seed);

/* Forward: x (B, in) -> y (B, out). params/bufs are the layer's slices. */
void tr_layer_forward(tr_layer *l, const tr_layer_ctx *c, const float *params, float *bufs,
                      const float *x, float *y, int B);

/* Backward: given x, y of the forward and dy (B, out), write the layer's
 * parameter gradients into grads (overwritten, not accumulated) and, when
 * dx != NULL, the input gradient dx (B, in). dy may be clobbered. */
void tr_layer_backward(tr_layer *l, const tr_layer_ctx *c, const float *params,
                       const float *x, const float *y, float *dy, float *dx,
                       float *grads, int B);

const char *tr_layer_name(tr_layer_kind k);

/* Softmax cross-entropy over logits (B, C) with labels (B): returns the
 * mean loss; when dlogits != NULL writes d(mean loss)/d logits (B, C)
 * scaled by 1/scale_B (pass B for a plain mean; the global batch in data
 * parallel). *correct (may be NULL) gets the number of argmax hits. */
double tr_softmax_xent(const float *logits, const int32_t *labels, int B, int C,
                       float *dlogits, int scale_B, int *correct);

/* Counter-based random numbers (splitmix64): the same inputs always give
 * the same value, so masks and augmentations need no saved state. The
 * hash itself, tr_hash_unit and the dropout mask are in dropout_hash.h,
 * which the CUDA kernels compile too. */
uint64_t tr_hash64(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

#endif
