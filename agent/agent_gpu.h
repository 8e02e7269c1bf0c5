/*
 * agent_gpu.h — GPU inventory through NVML, loaded with dlopen so the agent
 * builds and runs on machines without the NVIDIA driver (it then offers CPU
 * slots only).
 */
#ifndef AGENT_GPU_H
#define AGENT_GPU_H

#include <jansson.h>
#include <stddef.h>

/* Discover GPUs. spec: "auto" (all NVML devices), "none", or a comma list
 * of indices "0,2" (kept even where NVML is absent, named "unknown").
 * RET 0 with *out a new array of {"index", "name", "memory_mb"}; HF_EINVAL
 * for a malformed spec (err says why). NVML being absent is not an error:
 * "auto" then yields []. */
int agent_gpu_discover(const char *spec, json_t **out, char *err, size_t errlen);

#endif
