/*
 * agent_hb.h — the agent's side of the wire (docs/protocol.md, "Agents"):
 * registration, heartbeats, and validation of the scheduler's replies.
 *
 * An agent_link holds the HTTP client (one curl handle, kept alive) and
 * the agent id. It is used by one thread only (the heartbeat thread).
 * Replies are untrusted input: every assignment is validated on its own, an
 * invalid one becomes a "start_failed" event naming the field, and the
 * others still run.
 */
#ifndef AGENT_HB_H
#define AGENT_HB_H

#include "agent_proc.h"
#include "hf_json.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_VERSION "0.1"
#define AGENT_MAX_ASSIGN 1024   /* assignments or kills per reply */

typedef struct agent_link agent_link;

/* info: {"name", "slots", "gpus", "host"} (stolen; "version" is added).
 * token and cafile may be NULL. RET NULL on OOM. */
agent_link *agent_link_new(const char *url, const char *token, const char *cafile, long timeout_ms,
                           json_t *info);
void agent_link_free(agent_link *l);
int64_t agent_link_id(const agent_link *l);
/* Heartbeat interval the scheduler asked for at registration (0 = none). */
int64_t agent_link_interval(const agent_link *l);

/* POST /api/v1/agents with the trials still running (borrowed).
 * RET 0 (id set); HF_EAUTH (401/403); HF_EHTTP (other status);
 * HF_ECONN/HF_ETIMEOUT; HF_EPARSE (reply without a valid id). err says why. */
int agent_link_register(agent_link *l, const json_t *running, char *err, size_t errlen);

/* Forget the id: the next call must be agent_link_register. The agent does
 * this after losing the scheduler, so a restarted scheduler hears the list
 * of running trials first thing (registration is idempotent by name). */
void agent_link_forget(agent_link *l);

/* POST /api/v1/agents/{id}/heartbeat with body (borrowed).
 * RET 0 with *reply (new reference, an object) on 200; HF_ENOTFOUND on 404
 * (the id is forgotten: register again); HF_EINVAL on 400/413/422 (the
 * scheduler refused this body: retrying it cannot help); HF_EAUTH, HF_EHTTP, HF_ECONN,
 * HF_ETIMEOUT, HF_EPARSE (200 without a JSON object). */
int agent_link_heartbeat(agent_link *l, const json_t *body, json_t **reply, char *err, size_t errlen);

/* The doorbell long-poll (GET /api/v1/agents/{id}/wait): its own HTTP
 * handle, used by the long-poll thread only. The scheduler answers
 * {"pending": true} as soon as an assignment or kill waits for this agent's
 * next heartbeat, else {"pending": false} after wait_ms. */
#define AGENT_POLL_WAIT_MS 25000

typedef struct agent_poll agent_poll;

/* cancel: a flag that aborts a request in progress (shutdown). RET NULL on OOM. */
agent_poll *agent_poll_new(const char *url, const char *token, const char *cafile, long timeout_ms,
                           const atomic_int *cancel);
void agent_poll_free(agent_poll *p);
/* RET 0 with *pending set; HF_ENOTFOUND (404: unknown agent, or a scheduler
 * without the route), HF_EAUTH, HF_EHTTP, HF_ECONN, HF_ETIMEOUT, HF_EPARSE. */
int agent_poll_wait(agent_poll *p, int64_t id, int64_t wait_ms, int *pending, char *err, size_t errlen);

typedef struct agent_killreq {
    int64_t trial_id, attempt, grace_ms;   /* grace_ms < 0: the agent's default */
    char    reason[64];
} agent_killreq;

typedef struct agent_reply {
    agent_spec   **assign;     /* valid assignments, owned */
    size_t         nassign;
    agent_killreq *kill;
    size_t         nkill;
    json_t        *rejected;   /* start_failed events for invalid assignments (array) */
    int64_t        interval_ms;   /* 0 = not given */
} agent_reply;

/* Validate a heartbeat reply. RET 0 (invalid elements are in rejected or
 * skipped with a warning) or HF_EINVAL when the document itself is
 * malformed (e names the field); *out is always safe to free. */
int  agent_reply_parse(const json_t *reply, agent_reply *out, hf_jerr *e);
void agent_reply_free(agent_reply *r);

#endif
