/*
 * agent_gpu.c — NVML via dlopen("libnvidia-ml.so.1") (see agent_gpu.h).
 *
 * Only the handful of NVML entry points needed for an inventory are
 * declared here, with the types of nvml.h reduced to what they are
 * (opaque device handle, unsigned counts, a memory struct of three
 * unsigned long longs), so no NVIDIA header is needed to build.
 */
#include "agent_gpu.h"
#include "hf_err.h"
#include "hf_log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;                 /* 0 = NVML_SUCCESS */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

typedef struct nvml_api {
    void *so;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
} nvml_api;

static int nvml_load(nvml_api *n)
{
    memset(n, 0, sizeof *n);
    if (!(n->so = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) {
        hf_debug("NVML not available: %s", dlerror());
        return HF_EUNSUP;
    }
    /* dlsym returns void *; converting through a union keeps -Wpedantic quiet */
#define SYM(field, name) do { union { void *p; __typeof__(n->field) f; } u_; \
        u_.p = dlsym(n->so, name); n->field = u_.f; } while (0)
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(count, "nvmlDeviceGetCount_v2");
    SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
    SYM(name, "nvmlDeviceGetName");
    SYM(memory, "nvmlDeviceGetMemoryInfo");
#undef SYM
    if (!n->init || !n->shutdown || !n->count || !n->handle || !n->name || !n->memory) {
        hf_warn("libnvidia-ml.so.1 lacks expected symbols; ignoring GPUs");
        dlclose(n->so);
        n->so = NULL;
        return HF_EUNSUP;
    }
    if (n->init() != 0) {
        hf_warn("nvmlInit failed; ignoring GPUs");
        dlclose(n->so);
        n->so = NULL;
        return HF_EUNSUP;
    }
    return HF_OK;
}

static void nvml_unload(nvml_api *n)
{
    if (!n->so) return;
    n->shutdown();
    dlclose(n->so);
    n->so = NULL;
}

static json_t *nvml_device(nvml_api *n, unsigned idx)
{
    nvmlDevice_t d;
    char name[96] = "unknown";
    nvmlMemory_t mem = {0, 0, 0};
    if (n->so && n->handle(idx, &d) == 0) {
        if (n->name(d, name, sizeof name) != 0) snprintf(name, sizeof name, "unknown");
        name[sizeof name - 1] = '\0';
        if (n->memory(d, &mem) != 0) mem.total = 0;
    }
    return json_pack("{s:i, s:s, s:I}", "index", (int)idx, "name", name,
                     "memory_mb", (json_int_t)(mem.total >> 20));
}

int agent_gpu_discover(const char *spec, json_t **out, char *err, size_t errlen)
{
    nvml_api n;
    unsigned count = 0;
    json_t *arr = json_array();
    int rc = HF_OK;

    *out = NULL;
    if (!arr) return HF_ENOMEM;
    if (!spec || !strcmp(spec, "none")) goto done;
    int have = nvml_load(&n) == HF_OK;
    if (have && n.count(&count) != 0) count = 0;
    if (!strcmp(spec, "auto")) {
        for (unsigned i = 0; i < count && i < 64; i++) json_array_append_new(arr, nvml_device(&n, i));
    } else {
        const char *p = spec;
        while (*p) {
            char *end;
            long i = strtol(p, &end, 10);
            if (end == p || i < 0 || i >= 64 || (*end && *end != ',')) {
                snprintf(err, errlen, "--gpus: expected auto, none or a list like 0,1 (got '%s')", spec);
                rc = HF_EINVAL;
                break;
            }
            if (have && (unsigned)i >= count)
                hf_warn("--gpus: GPU %ld is not among the %u NVML devices", i, count);
            json_array_append_new(arr, nvml_device(&n, (unsigned)i));
            p = *end ? end + 1 : end;
        }
    }
    if (have) nvml_unload(&n);
done:
    if (rc) json_decref(arr);
    else *out = arr;
    return rc;
}
