/*
 * device.c — --device selection (device.h). The CUDA probe lives in
 * cuda_blas.cu when the build has CUDA; otherwise it reports why not.
 */
#include "device.h"

#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>
#include <string.h>

#ifdef HF_HAVE_CUDA
int tr_cuda_probe_impl(char *why, size_t whylen);   /* cuda_blas.cu */
#endif

int tr_cuda_probe(char *why, size_t whylen)
{
#ifdef HF_HAVE_CUDA
    return tr_cuda_probe_impl(why, whylen);
#else
    snprintf(why, whylen, "this hyperfarm-train was built without CUDA (nvcc not found at build time)");
    return 0;
#endif
}

#ifndef HF_HAVE_CUDA
/* Without CUDA at build time: tr_cuda_new fails and nothing else is reached. */
tr_cuda *tr_cuda_new(const tr_model *m, char *err, size_t el)
{
    (void)m;
    snprintf(err, el, "no usable CUDA GPU: this hyperfarm-train was built without CUDA");
    return NULL;
}

void tr_cuda_free(tr_cuda *c) { (void)c; }

int tr_cuda_load(tr_cuda *c, const float *params, const float *bufs, const tr_optim *o)
{
    (void)c; (void)params; (void)bufs; (void)o;
    return HF_EUNSUP;
}

int tr_cuda_store(tr_cuda *c, float *params, float *bufs, tr_optim *o)
{
    (void)c; (void)params; (void)bufs; (void)o;
    return HF_EUNSUP;
}

int tr_cuda_get(tr_cuda *c, float *grads, float *logits, int B)
{
    (void)c; (void)grads; (void)logits; (void)B;
    return HF_EUNSUP;
}

int tr_cuda_set_grads(tr_cuda *c, const float *grads)
{
    (void)c; (void)grads;
    return HF_EUNSUP;
}

int tr_cuda_clip(tr_cuda *c, double max_norm, double *norm)
{
    (void)c; (void)max_norm; (void)norm;
    return HF_EUNSUP;
}

int tr_cuda_optim_step(tr_cuda *c, tr_optim *o, float lr)
{
    (void)c; (void)o; (void)lr;
    return HF_EUNSUP;
}

int tr_cuda_layer(tr_cuda *c, int i, const tr_layer_ctx *ctx, int B, const float *x, float *y, const float *dy,
                  float *dx, float *grads)
{
    (void)c; (void)i; (void)ctx; (void)B; (void)x; (void)y; (void)dy; (void)dx; (void)grads;
    return HF_EUNSUP;
}

#endif

int tr_device_select(const char *want, char *err, size_t el)
{
    char why[256] = "";
    if (!strcmp(want, "cpu")) return TR_DEV_CPU;
    int ok = tr_cuda_probe(why, sizeof why);
    if (!strcmp(want, "cuda")) {
        if (!ok) return snprintf(err, el, "no usable CUDA GPU: %s", why), HF_EUNSUP;
        hf_info("device cuda: %s", why);
        return TR_DEV_CUDA;
    }
    if (ok) {
        hf_info("device auto: using CUDA (%s)", why);
        return TR_DEV_CUDA;
    }
    hf_info("device auto: no usable CUDA GPU (%s); using the CPU", why);
    return TR_DEV_CPU;
}
