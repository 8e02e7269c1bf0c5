/*
 * device.c — --device selection (device.h). The CUDA probe lives in
 * cuda.cu when the build has CUDA; otherwise it reports why not.
 */
#include "device.h"

#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>
#include <string.h>

#ifdef HF_HAVE_CUDA
int tr_cuda_probe_impl(char *why, size_t whylen);   /* cuda.cu */
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
tr_cuda *tr_cuda_new(const tr_model *m, char *err, size_t el)
{
    (void)m;
    snprintf(err, el, "this hyperfarm-train was built without CUDA");
    return NULL;
}

void tr_cuda_free(tr_cuda *c) { (void)c; }

int tr_cuda_step(tr_cuda *c, const float *params, const float *x, const int32_t *y, int B, int scale_B,
                 float *grads, float *logits, double *loss, int *hits)
{
    (void)c; (void)params; (void)x; (void)y; (void)B; (void)scale_B; (void)grads; (void)logits; (void)loss;
    (void)hits;
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
