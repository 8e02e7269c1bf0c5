/*
 * agent_link.h — the agent's link to the scheduler (docs/protocol.md,
 * "Agents"): registration and heartbeats (agent_link), and the doorbell
 * long-poll (agent_poll). What a heartbeat reply means is agent_assign's
 * business; this module only moves JSON and maps HTTP statuses to HF_E*
 * codes.
 *
 * An agent_link holds the HTTP client (one curl handle, kept alive) and
 * the agent id. It is used by one thread only (the heartbeat thread). An
 * agent_poll has its own handle and is used by the long-poll thread only.
 * Neither retries inside a request: the threads have their own backoff.
 */
#ifndef AGENT_LINK_H
#define AGENT_LINK_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_VERSION "0.1"

typedef struct agent_link agent_link;

/* info: {"name", "slots", "gpus", "host"} (stolen, also on failure;
 * "version" is added). token and cafile may be NULL. RET NULL on OOM. */
agent_link *agent_link_new(const char *url, const char *token, const char *cafile, long timeout_ms,
                           json_t *info);
/* Accepts NULL. */
void agent_link_free(agent_link *l);
int64_t agent_link_id(const agent_link *l);
/* The scheduler URL requests go to now (with several: the one in use;
 * read by the heartbeat thread only, as the link itself). */
const char *agent_link_url(const agent_link *l);
/* Heartbeat interval the scheduler asked for at registration (0 = none). */
int64_t agent_link_interval(const agent_link *l);

/* POST /api/v1/agents with the trials still running (borrowed).
 * RET 0 (id set); HF_EAUTH (401/403); HF_EHTTP (other status);
 * HF_ECONN/HF_ETIMEOUT; HF_EPARSE (reply without a valid id). err says why. */
int agent_link_register(agent_link *l, const json_t *running, char *err, size_t errlen);

/* The checkpoint store the last registration reply named
 * (docs/protocol.md): 1 with its path when it is shared_fs (a directory
 * this agent mounts at the same path), else 0 (upload to the scheduler). */
int agent_link_shared_store(const agent_link *l, char *path, size_t len);
/* The object hashes to list as "cached" at the next registration
 * (borrowed; copied). */
void agent_link_set_cached(agent_link *l, const json_t *cached);

/* Forget the id: the next call must be agent_link_register. The agent does
 * this after losing the scheduler, so a restarted scheduler hears the list
 * of running trials first thing (registration is idempotent by name). */
void agent_link_forget(agent_link *l);

/* The heartbeat interval in force (ms): with several scheduler URLs,
 * requests carry X-Hyperfarm-Lost-Primary after two of them without a
 * primary's answer (docs/agent.md, "Several schedulers"). */
void agent_link_set_interval(agent_link *l, int64_t interval_ms);

/* 1 when the link was given several scheduler URLs (a follow set). */
int agent_link_following(const agent_link *l);

/* POST /api/v1/agents/{id}/heartbeat with body (borrowed).
 * RET 0 with *reply (new reference, an object) on 200; HF_ENOTFOUND on 404
 * (the id is forgotten: register again); HF_ESTATE, without a request,
 * when the URL in use is not the one registered with (the follow set
 * moved: the id is forgotten, register there — a standby's 503 to that
 * registration is an HF_EHTTP like any other, never "unknown agent");
 * HF_EINVAL on 400/413/422 (the
 * scheduler refused this body: retrying it cannot help); HF_EAUTH, HF_EHTTP, HF_ECONN,
 * HF_ETIMEOUT, HF_EPARSE (200 without a JSON object). */
int agent_link_heartbeat(agent_link *l, const json_t *body, json_t **reply, char *err, size_t errlen);

/* The doorbell long-poll (GET /api/v1/agents/{id}/wait?assign=1): its own
 * HTTP handle, used by the long-poll thread only. The scheduler answers
 * {"pending": true} as soon as an assignment or kill waits for this agent's
 * next heartbeat, else {"pending": false} after wait_ms. A "pending"
 * answer carries the new assignments themselves (the push,
 * docs/protocol.md): they count as sent, so the agent starts them without
 * waiting for the heartbeat that would otherwise fetch them; kills still
 * come in heartbeat replies. A scheduler older than the push ignores
 * assign=1 and answers without "assign". */
#define AGENT_POLL_WAIT_MS 25000

typedef struct agent_poll agent_poll;

/* cancel: a flag that aborts a request in progress (shutdown). RET NULL on OOM. */
agent_poll *agent_poll_new(const char *url, const char *token, const char *cafile, long timeout_ms,
                           const atomic_int *cancel);
/* Accepts NULL. */
void agent_poll_free(agent_poll *p);
/* RET 0 with *pending set and *reply the whole answer (the caller frees
 * it; its "assign", when present, is for agent_reply_parse); HF_ENOTFOUND
 * (404: unknown agent, or a scheduler without the route), HF_EAUTH,
 * HF_EHTTP, HF_ECONN, HF_ETIMEOUT, HF_EPARSE (*reply NULL then). */
int agent_poll_wait(agent_poll *p, int64_t id, int64_t wait_ms, int *pending, json_t **reply, char *err,
                    size_t errlen);

#endif
