/*
 * api_h_agent.c — the agent routes (api_handlers.h; docs/protocol.md):
 * list, register, heartbeat and the long-poll /wait (api_stream.c). With
 * a token file an agent token is bound to the agent it registered
 * (docs/protocol.md "Agent tokens"); a refused binding is a 403.
 */
#include "scheduler/api/api_handlers.h"

#include "hf_err.h"
#include "scheduler/api/auth.h"

/* ---------- handlers: agents ---------- */

enum MHD_Result api_h_agent_list(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_list(k->a->s, &out);
    return api_reply(k, rc, "agent", 200, out);
}

/* The holder of an agent token, for the core's binding checks
 * (sched.h, sched_agent_register_as; docs/protocol.md "Agent tokens"); NULL without a token file. A
 * refusal of the binding (HF_EPERM) is a 403 naming why. */
static const char *agent_holder_of(const api_call *k) { return k->role == AUTH_AGENT ? k->user : NULL; }

static enum MHD_Result agent_reply(api_call *k, int rc, unsigned status, json_t *out)
{
    if (rc == HF_EPERM) return api_send_jerr(k->c, 403, &k->e);
    return api_reply(k, rc, "agent", status, out);
}

enum MHD_Result api_h_agent_register(api_call *k)
{
    char ip[64];
    json_t *out = NULL;
    int rc = sched_agent_register_as(k->a->s, k->body, api_peer_ip(k->c, ip, sizeof ip), agent_holder_of(k), &out, &k->e);
    return agent_reply(k, rc, 201, out);
}

enum MHD_Result api_h_agent_heartbeat(api_call *k)
{
    json_t *out = NULL;
    int rc = sched_agent_heartbeat_as(k->a->s, k->id, k->body, agent_holder_of(k), &out, &k->e);
    return agent_reply(k, rc, 200, out);
}

enum MHD_Result api_h_agent_wait(api_call *k)
{
    if (k->role == AUTH_AGENT) {
        int rc = sched_agent_may_speak(k->a->s, k->id, k->user, &k->e);
        if (rc) return agent_reply(k, rc, 200, NULL);
    }
    return api_stream_wait(k->a, k->c, k->id, k->rq);
}
