/*
 * provision_slurm.h — the Slurm backend of the provisioner (provision.h):
 * sbatch --parsable to submit, squeue to list, scancel to cancel, each run
 * as an argv array (posix_spawn, no shell), its output read up to a bound
 * and parsed as untrusted input (tests/fuzz/fuzz_slurm.c).
 */
#ifndef HF_PROVISION_SLURM_H
#define HF_PROVISION_SLURM_H

#include "scheduler/provision/provision.h"

#include <stddef.h>

#define SLURM_OUT_MAX (256 * 1024)   /* bytes of a program's output read at most */

extern const prov_ops slurm_ops;

/* A Slurm backend for cfg (borrowed). RET NULL on a bad setting (err). */
void *slurm_backend_new(const provision_config *cfg, char *err, size_t errlen);

/* sbatch --parsable's output "JOBID[;CLUSTER]\n" (buf of len bytes, not
 * NUL-terminated): the decimal job id into id. RET 0 or HF_EPARSE. */
int slurm_parse_sbatch(const char *buf, size_t len, char *id, size_t idlen);

/* squeue --noheader --format=%i|%T|%D lines (buf of len bytes): up to max
 * jobs into jobs, *n of them; states PENDING/CONFIGURING are PROV_PENDING,
 * RUNNING/COMPLETING PROV_RUNNING, any other line is skipped (ended).
 * A malformed line is skipped and counted in *bad. RET 0 or HF_ETOOBIG
 * when more than max jobs are listed (the first max are kept). */
int slurm_parse_squeue(const char *buf, size_t len, prov_job *jobs, int max, int *n, int *bad);

/* The batch script for a job: "#!/bin/sh" and an exec of the agent, each
 * argument single-quoted (a ' inside is written '\''). A job of several
 * nodes starts one agent per node with srun. RET a malloc'ed string or NULL. */
char *slurm_job_script(const provision_config *cfg, int nodes);

#endif
