/*
 * api_h_provision.h — the provisioner's route (docs/protocol.md,
 * "Provisioner"): GET /api/v1/provisioner answers its kind, its jobs
 * (pending, running, the last released) and its counters
 * (scheduler/provision/provision.h).
 */
#ifndef HF_API_H_PROVISION_H
#define HF_API_H_PROVISION_H

#include "scheduler/api/api_int.h"

/* GET /api/v1/provisioner. */
enum MHD_Result api_h_provision_get(api_call *k);

#endif
