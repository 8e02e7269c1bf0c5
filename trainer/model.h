/*
 * model.h — a sequential model: a stack of layers over one flat parameter
 * array and one flat gradient array of the same layout.
 *
 * Memory contract (what data-parallel and parameter-server code relies on):
 *   params  (n_params)  every trained weight, layer after layer; layer i's
 *                       slice is [layers[i].param_off, +param_count)
 *   grads   (n_params)  same layout; written (not accumulated) by backward
 *   bufs    (n_bufs)    non-trained state (BN running stats), checkpointed
 *   act[i]  (B, in(i))  the input of layer i; act[0] is the model input
 *                       (the caller writes it), act[n_layers] the logits
 *   dact[i] (B, in(i))  gradient of the loss w.r.t. act[i]; the caller
 *                       writes dact[n_layers] (e.g. tr_softmax_xent)
 * All arrays are owned by the model and sized for max_batch rows; callers
 * may read and write them between calls (a pipeline stage copies a received
 * activation into act[a] and sends act[b] on).
 *
 * Layer-by-layer use (model parallel): tr_model_forward(m, a, b, ...) runs
 * layers [a, b); tr_model_backward(m, a, b, ...) runs them backwards from
 * dact[b] and fills dact[a] when a > 0. With a == 0, input gradients below
 * the first layer that has parameters are not computed (they would flow
 * into data only), which saves a third of the first dense layer's work.
 *
 * The loops below (forward, backward, step, infer) are the compute-backend
 * driver (backend.h) run on the CPU backend over this model: the CPU
 * reference and every backend share one loop over layers.
 *
 * Gradient hand-off (DDP-style bucketing): backward calls
 * on_layer_grad(ctx, offset, count) right after layer i's gradients are
 * final, last layer first, only for layers that have parameters. The
 * callback may start reducing grads[offset, offset+count) at once; backward
 * will not touch that range again in this call.
 */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include "layer.h"
#include "options.h"

#include <stddef.h>
#include <stdint.h>

#define TR_MAX_LAYERS 64

typedef void (*tr_grad_cb)(void *ctx, size_t offset, size_t count);

typedef struct tr_model {
    int       n_layers;
    tr_layer  layers[TR_MAX_LAYERS];
    tr_shape  in_shape;          /* one sample, e.g. (1, 28, 28) */
    int       n_classes;         /* logits per sample */
    int       max_batch;
    size_t    n_params, n_bufs;
    float    *params;            /* (n_params) */
    float    *grads;             /* (n_params) */
    float    *bufs;              /* (n_bufs) */
    float    *act[TR_MAX_LAYERS + 1];
    float    *dact[TR_MAX_LAYERS + 1];
    float    *scratch;           /* one block for all layers' scratch */
    uint64_t  arch_hash;         /* hash of the layer stack: checkpoints must match */
    char      desc[512];         /* "mlp 784-256-128-10" style summary */
} tr_model;

/* Build a model from layer specs over inputs of shape in. RET a model with
 * parameters initialised from seed, or NULL (bad spec: err filled). */
tr_model *tr_model_new(tr_shape in, const tr_layer_spec *specs, int n_specs, int max_batch,
                       uint64_t seed, char *err, size_t errlen);

/* Build the model the options ask for (--model mlp|cnn, --hidden,
 * --channels, --fc, --dropout, --batch-norm) for 28x28x1 inputs, 10 classes. */
tr_model *tr_model_from_options(const tr_options *o, int max_batch, char *err, size_t errlen);

void tr_model_free(tr_model *m);

/* Fill the specs the options describe. RET count or HF_EINVAL. */
int tr_model_specs(const tr_options *o, tr_layer_spec *specs, int max_specs, char *err, size_t errlen);

/* Forward layers [a, b) on B rows: reads act[a], writes act[a+1..b].
 * c->index is set per layer by this function. */
void tr_model_forward(tr_model *m, int a, int b, int B, const tr_layer_ctx *c);

/* Backward layers [a, b) from dact[b]: writes grads of those layers and
 * dact[a+1..b-1] (and dact[a] when a > 0), calling on_layer_grad (may be
 * NULL) after each layer with parameters, last layer first. */
void tr_model_backward(tr_model *m, int a, int b, int B, const tr_layer_ctx *c,
                       tr_grad_cb on_layer_grad, void *cb_ctx);

/* One full training step's math (no optimizer): forward all layers on
 * act[0] (B rows), softmax cross-entropy against labels, backward.
 * scale_B as for tr_softmax_xent. RET the batch's mean loss; *correct as
 * there (may be NULL). */
double tr_model_step(tr_model *m, const int32_t *labels, int B, int scale_B,
                     const tr_layer_ctx *c, tr_grad_cb on_layer_grad, void *cb_ctx, int *correct);

/* Inference on act[0] (B rows): logits in act[n_layers]. */
void tr_model_infer(tr_model *m, int B);

#endif
