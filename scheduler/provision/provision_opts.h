/*
 * provision_opts.h — start the provisioner (provision.h) from the
 * scheduler's settings (scheduler/options.h).
 */
#ifndef HF_PROVISION_OPTS_H
#define HF_PROVISION_OPTS_H

#include "scheduler/options.h"

#include <stdint.h>

typedef struct sched sched;

/* Start the provisioner --provisioner names (none: nothing). Logs its
 * own error. RET 0 or -1. Stop it with provision_stop (provision.h). */
int provision_setup(const sched_options *o, sched *s);

/* The GPUs per node a GRES list asks for ("gpu:4", "gpu:a100:2,shard:1"):
 * into *gpus, 0 when it names none. RET 0 or -1 when malformed. */
int provision_gres_gpus(const char *gres, int64_t *gpus);

#endif
