/*
 * fuzz_slurm.c — libFuzzer target for what the Slurm provisioner reads
 * back from sbatch --parsable and squeue (provision_slurm_parse.c). Their
 * output is untrusted: the parsers must never read past the buffer, keep
 * at most max jobs, and return only job ids of digits that fit.
 */
// FUZZ_SOURCES: scheduler/provision/provision_slurm_parse.c common/hf_err.c
// FUZZ_LIBS: -ljansson
#include "hf_err.h"
#include "scheduler/provision/provision_slurm.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_id(const char *id)
{
    size_t n = strlen(id);
    assert(n > 0 && n < PROV_JOB_ID_MAX);
    for (size_t i = 0; i < n; i++) assert(id[i] >= '0' && id[i] <= '9');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so ASan sees any read past the end */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    char id[PROV_JOB_ID_MAX];
    if (slurm_parse_sbatch(buf, size, id, sizeof id) == 0) check_id(id);
    prov_job jobs[8];
    int n = -1, bad = -1;
    int rc = slurm_parse_squeue(buf, size, jobs, 8, &n, &bad);
    assert(rc == 0 || rc == HF_ETOOBIG);
    assert(n >= 0 && n <= 8 && bad >= 0);
    for (int i = 0; i < n; i++) {
        check_id(jobs[i].id);
        assert(jobs[i].nodes >= 1 && jobs[i].nodes <= 99999);
        assert(jobs[i].state == PROV_PENDING || jobs[i].state == PROV_RUNNING);
    }
    free(buf);
    return 0;
}
