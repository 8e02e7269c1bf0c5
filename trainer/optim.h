/*
 * optim.h — optimizers as steps over flat float arrays, learning-rate
 * schedules and gradient clipping.
 *
 * An optimizer owns only its state (momentum / Adam moments), laid out like
 * the parameters it updates: state element i belongs to params[i]. A
 * parameter server holding a shard [off, off+n) of the model creates an
 * optimizer of n elements and steps it with params+off, grads+off.
 *
 *   sgd    v = mu v + (g + wd p);  p -= lr v          (nesterov: p -= lr (g + wd p + mu v))
 *   adam   g' = g + wd p; m, v moments; p -= lr m^/(sqrt(v^) + eps)
 *   adamw  p -= lr wd p (decoupled); then adam with g
 * (PyTorch's definitions, so runs can be compared.)
 */
#ifndef TR_OPTIM_H
#define TR_OPTIM_H

#include "options.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { TR_OPT_SGD = 0, TR_OPT_ADAM, TR_OPT_ADAMW } tr_optim_kind;

typedef struct tr_optim {
    tr_optim_kind kind;
    float   momentum, beta1, beta2, eps, weight_decay;
    int     nesterov;
    int64_t t;            /* steps taken (Adam bias correction) */
    size_t  n;            /* elements */
    size_t  n_state;      /* floats in state: 0, n (sgd+momentum) or 2n (adam) */
    float  *state;        /* (n_state): sgd: v; adam: m then v. Owned. */
} tr_optim;

/* Configure from options for n parameters. RET 0, HF_EINVAL or HF_ENOMEM. */
int  tr_optim_init(tr_optim *o, const tr_options *opt, size_t n);
void tr_optim_free(tr_optim *o);

/* One update of params (n) from grads (n) at learning rate lr; t += 1. */
void tr_optim_step(tr_optim *o, float *params, const float *grads, float lr);

/* Learning rate at global step (0-based) with spe steps per epoch. */
double tr_lr_at(const tr_options *opt, int64_t step, int64_t spe);

/* L2 norm of g (n), accumulated in double. */
double tr_grad_norm(const float *g, size_t n);
/* Scale g so its norm is at most max_norm (no-op when max_norm <= 0 or the
 * norm is already small). RET the norm before clipping. */
double tr_grad_clip(float *g, size_t n, double max_norm);

#endif
