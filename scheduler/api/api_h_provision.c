/*
 * api_h_provision.c — GET /api/v1/provisioner (api_h_provision.h): the
 * provisioner's state as provision_state_json builds it, under its own
 * lock; "provisioner": "none" when the scheduler provisions nothing.
 */
#include "scheduler/api/api_h_provision.h"

#include "hf_err.h"
#include "scheduler/provision/provision.h"

enum MHD_Result api_h_provision_get(api_call *k)
{
    json_t *out = provision_state_json();
    return api_reply(k, out ? 0 : HF_ENOMEM, "provisioner", 200, out);
}
