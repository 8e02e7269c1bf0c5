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

#include <stddef.h>

enum { TR_DEV_CPU = 0, TR_DEV_CUDA = 1 };

/* Is a CUDA GPU usable? RET 1 (name filled) or 0 (why filled). */
int tr_cuda_probe(char *why, size_t whylen);

/* Resolve "cpu"|"cuda"|"auto". RET TR_DEV_* or HF_EUNSUP (cuda asked,
 * none usable: err says why). */
int tr_device_select(const char *want, char *err, size_t errlen);

#endif
