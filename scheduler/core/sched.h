/*
 * sched.h — the scheduler core: experiments, trials and agents in memory,
 * mirrored in the store, and every operation that changes them (submit,
 * pause/resume/cancel/extend, kill, agent registration, heartbeats, the
 * dispatch pass, the cron tick).
 *
 * Concurrency: one mutex guards the whole core and the store's writer
 * connection (SQLite allows one writer anyway). Every public sched_* call
 * takes it, runs one transaction, and commits before it returns; a reply
 * is only ever built from committed state ("only reply after commit").
 * When a transaction fails (SQLITE_FULL, I/O error), it is rolled back
 * and the in-memory state is rebuilt from the store, so memory never
 * diverges from what is durable.
 *
 * Results: JSON objects built under the lock are new references owned by
 * the caller (deep copies where the core keeps mutating its own).
 * Return codes map to HTTP statuses in api_http.c (api_send_rc): HF_EINVAL 400, HF_ENOTFOUND
 * 404, HF_ESTATE 409, HF_ENOSPC 507, others 500.
 */
#ifndef HF_SCHED_H
#define HF_SCHED_H

#include "hf_json.h"
#include "scheduler/store/store.h"

#include <stdint.h>

typedef struct events_hub events_hub;

typedef struct sched_config {
    int64_t agent_timeout_ms;       /* heartbeat silence before an agent is LOST */
    int64_t heartbeat_ms;           /* interval an idle agent is told to use */
    int64_t heartbeat_fast_ms;      /* interval while it has trials, kills or work queued */
    int64_t heartbeat_rate;         /* heartbeats/s the whole farm may send: both intervals are
                                       at least alive_agents * 1000 / rate ms (0 = no scaling) */
    int64_t assign_timeout_ms;      /* an assignment not started within this fails the attempt */
    int64_t max_log_lines;          /* per trial; further lines are dropped and counted */
    int64_t max_log_line;           /* bytes per line; longer lines are truncated */
    int64_t max_metric_names;       /* distinct metric names per trial */
    int64_t port_base, port_count;  /* range for HYPERFARM_MASTER ports */
    const char *ck_shared_dir;      /* shared_fs checkpoint store as agents mount it (borrowed);
                                       NULL = agents upload to the scheduler */
    int64_t pbt_parent_wait_ms;     /* a PBT child waits this long for its parent's checkpoint
                                       to be stored, then FAILS (never starts without it) */
} sched_config;

void sched_config_defaults(sched_config *c);

typedef struct sched sched;

/* Load everything from st (borrowed; outlives the core), rebuild each
 * experiment's searcher by replay, and give every agent that was alive a
 * fresh grace period of agent_timeout_ms to report back. ev may be NULL. */
int  sched_new(const sched_config *cfg, store *st, events_hub *ev, sched **out, char *err, size_t errlen);
void sched_free(sched *s);

/* Experiments. cfg is borrowed (the core keeps a copy). */
int sched_experiment_submit(sched *s, const json_t *cfg, int64_t *id, hf_jerr *e);
/* with_archived 0: archived experiments are left out. */
int sched_experiment_list(sched *s, int with_archived, json_t **out);
int sched_experiment_get(sched *s, int64_t id, json_t **out);
/* action: "pause" | "resume" | "cancel" | "archive" | "unarchive".
 * *out = EXP_SUMMARY. archive (HF_ESTATE while the experiment runs: see
 * sched_experiment_delete) marks it archived: hidden from the default list;
 * its checkpoints are then dropped by the retention pass (ckretain.h). */
int sched_experiment_action(sched *s, int64_t id, const char *action, json_t **out, hf_jerr *e);
/* Delete experiment id. Refused (HF_ESTATE, e says why) while it runs:
 * it must be COMPLETED, FAILED or CANCELED, or PAUSED, with no trial
 * placed on an agent. One small transaction makes it disappear (gone from
 * the model: every call answers HF_ENOTFOUND for it and its trials, and
 * it is never loaded again) and queues its rows for the purge, which
 * removes its trials, metrics, logs, allocations, checkpoint rows, events
 * and webhooks in bounded transactions from the tick (sched_tick,
 * store/purge.h; docs/scheduler.md "Deleting an experiment") and frees the
 * checkpoint objects they named through the release hook
 * (sched_set_release). RET 0, HF_ENOTFOUND, HF_ESTATE, HF_E* of the store.
 * The delete itself stays in the events table (type DELETED, no
 * experiment id, the user who asked: _as; NULL = the scheduler). */
int sched_experiment_delete(sched *s, int64_t id, hf_jerr *e);
int sched_experiment_delete_as(sched *s, int64_t id, const char *user, hf_jerr *e);
/* body {"max_trials": N} (new total, > current) or {"add_trials": K}. */
int sched_experiment_extend(sched *s, int64_t id, const json_t *body, json_t **out, hf_jerr *e);
int sched_experiment_trials(sched *s, int64_t id, json_t **out);
/* The same document as sched_experiment_trials, already serialized
 * (compact, 15 significant digits, as api_http.c sends JSON): *out is a
 * malloc'ed NUL-terminated string of *len bytes. Built from per-trial
 * cached views, re-serialized only for trials that changed. */
int sched_experiment_trials_text(sched *s, int64_t id, char **out, size_t *len);
/* The k best trials by objective, best first: {"trials": [...]} */
int sched_experiment_top(sched *s, int64_t id, int64_t k, json_t **out);
/* Summary + trials, for the export route; *metric = the objective name. */
int sched_experiment_export(sched *s, int64_t id, json_t **summary, json_t **trials);
/* The Pareto front (sched_pareto.c): {"experiment_id", "objectives",
 * "constraints", "completed", "feasible", "trials": [{"trial_id", "idx",
 * "hparams", "values", "constraints"}]}, best first objective first. */
int sched_experiment_pareto(sched *s, int64_t id, json_t **out);

/* The workflow of issue #17 (docs/scheduler.md "Workflow"). user is the
 * requesting token's user name (auth.h; NULL = none): it is written into
 * every events row the call adds and, at submission, as submitted_by. The
 * calls above are these with user NULL (and no parent). */
/* Submit cfg; parent > 0 records it as a fork of that experiment
 * (HF_ENOTFOUND when there is none). cfg's warm_start is resolved here:
 * an unknown experiment is HF_EINVAL naming warm_start.experiments[i]. */
int sched_experiment_submit_as(sched *s, const json_t *cfg, const char *user, int64_t parent, int64_t *id,
                               hf_jerr *e);
int sched_experiment_action_as(sched *s, int64_t id, const char *action, const char *user, json_t **out,
                               hf_jerr *e);
int sched_experiment_extend_as(sched *s, int64_t id, const json_t *body, const char *user, json_t **out,
                               hf_jerr *e);
int sched_trial_kill_as(sched *s, int64_t id, const char *user, json_t **out, hf_jerr *e);
/* PATCH bodies (expmeta.h): description/tags of an experiment (*out =
 * EXP_SUMMARY), notes of a trial (*out = the trial with its notes). */
int sched_experiment_patch(sched *s, int64_t id, const json_t *body, const char *user, json_t **out, hf_jerr *e);
int sched_trial_patch(sched *s, int64_t id, const json_t *body, const char *user, json_t **out, hf_jerr *e);
/* Owners (docs/api.md "Roles"): the owner of experiment id (is_trial 0)
 * or of trial id's experiment is the user who submitted it; an experiment
 * submitted before users were recorded is owned by SCHED_OWNER_UNKNOWN.
 * Fills *exp_id and owner (cut to len). RET 0 or HF_ENOTFOUND. */
#define SCHED_OWNER_UNKNOWN "default"
int sched_owner_of(sched *s, int64_t id, int is_trial, int64_t *exp_id, char *owner, size_t len);
/* A refused request, as an events row of type REFUSED with user and
 * detail (trial_id 0: none). RET 0 or HF_E* of the store. */
int sched_refused_as(sched *s, int64_t exp_id, int64_t trial_id, const char *user, const char *detail);
/* An operator event from outside the core (the replication log's
 * REPLICATION_DEGRADED, REPLICATION_SYNC, FENCED: docs/scheduler.md
 * "Standby and failover") to be written as an events row (no experiment,
 * no trial, no user) with the time of this call. It never takes the core
 * lock, so it may be called with any lock held: the row is written by the
 * next sched_tick (within CRON_TICK_MS). Type and detail are cut to fit. */
void sched_post_event(sched *s, const char *type, const char *detail);
/* Events dropped because SCHED_POSTED_MAX were already waiting. */
uint64_t sched_posted_dropped(sched *s);
/* sched_experiment_list restricted to experiments tagged tag (NULL = all). */
int sched_experiment_list_tagged(sched *s, int with_archived, const char *tag, json_t **out);

/* Trials. */
int sched_trial_get(sched *s, int64_t id, json_t **out);
int sched_trial_exists(sched *s, int64_t id);
int sched_trial_kill(sched *s, int64_t id, json_t **out, hf_jerr *e);

/* Agents. peer_ip is the connection's address, used when "host" is absent. */
int sched_agent_register(sched *s, const json_t *body, const char *peer_ip, json_t **out, hf_jerr *e);
int sched_agent_heartbeat(sched *s, int64_t agent_id, const json_t *body, json_t **out, hf_jerr *e);
int sched_agent_list(sched *s, json_t **out);
/* sched_agent_register / sched_agent_heartbeat for a request that came
 * with an agent token (docs/protocol.md, "Agent tokens"): holder is the token's holder name, SCHED_SHARED_AGENT_HOLDER
 * for the shared unnamed form, NULL without a token file (no binding is
 * checked: one trusted operator). A named token registers, and speaks for,
 * only the agent of its own name; the shared one only agents not bound to
 * a named token. Refused: HF_EPERM with e naming why (403). Heartbeat items
 * of attempts never assigned to agent_id are not applied: the reply lists
 * them in "refused" (status 409 each), and they are logged with holder. */
#define SCHED_SHARED_AGENT_HOLDER "agent"
int sched_agent_register_as(sched *s, const json_t *body, const char *peer_ip, const char *holder, json_t **out,
                            hf_jerr *e);
int sched_agent_heartbeat_as(sched *s, int64_t agent_id, const json_t *body, const char *holder, json_t **out,
                             hf_jerr *e);
/* May holder speak for agent_id (heartbeat, GET /agents/{id}/wait)?
 * RET 0, HF_ENOTFOUND (unknown agent) or HF_EPERM, with e. */
int sched_agent_may_speak(sched *s, int64_t agent_id, const char *holder, hf_jerr *e);
/* May a checkpoint of trial_id (attempt, step) be stored for the agent
 * token holder (docs/protocol.md, "Agent tokens")? *agent_id: the
 * uploader the request names (0 = none named), set to the agent found.
 * The attempt must have been assigned to that agent, and either still run
 * there or have reported a checkpoint at that step while it ran. RET 0,
 * HF_ENOTFOUND (no trial), HF_EPERM (403: not this token's agent) or
 * HF_ESTATE (409), with e; a refusal is logged and recorded as an event. */
int sched_ckpt_may_store(sched *s, int64_t trial_id, int64_t attempt, int64_t step, const char *holder,
                         int64_t *agent_id, hf_jerr *e);

/* Doorbell (GET /agents/{id}/wait): ring(ctx, agent_id) is called, under
 * the core lock and after the commit, for every agent that got a new
 * assignment or kill in a transaction (not for the agent whose heartbeat
 * reply carries it). ring NULL = none. It must not call into the core. */
void sched_set_doorbell(sched *s, void (*ring)(void *ctx, int64_t agent_id), void *ctx);
/* Has agent_id an assignment or a kill waiting for its next heartbeat?
 * RET 0 or HF_ENOTFOUND (unknown agent). */
int sched_agent_pending(sched *s, int64_t agent_id, int *pending);
/* Push (GET /agents/{id}/wait?assign=1, docs/protocol.md): take agent_id's
 * assignments not yet sent, as the objects a heartbeat reply's "assign"
 * holds, into *assign (a new array, maybe empty); they count as sent from
 * now. Nothing is written to the store (no COMMIT on this path): after a
 * restart they are sent again, and one the agent does not list as running
 * SCHED_PUSH_RESEND_MS after the push goes out again in a heartbeat reply
 * (a lost reply costs a delay, not the attempt). Kills still travel only
 * in heartbeat replies. Only committed placements go out (an open group
 * commit is ended first). RET 0, HF_ENOTFOUND or HF_ENOMEM. */
int sched_agent_take_assign(sched *s, int64_t agent_id, json_t **assign);
#define SCHED_PUSH_RESEND_MS 1000

/* Cron: expire silent agents, time out unacknowledged assignments, run a
 * dispatch pass; then, in a transaction of its own, one batch of the
 * purge of deleted experiments (sched_experiment_delete, store/purge.h):
 * at most SCHED_PURGE_ROWS rows, SCHED_PURGE_BYTES bytes of row data (the
 * bound of its replication frame) and SCHED_PURGE_US of work, to which
 * its COMMIT adds a few milliseconds (the pages it dirtied go to the WAL):
 * about 10 ms under the core lock per tick. Called every ~100 ms by
 * cron.c. */
#define SCHED_PURGE_ROWS  10000
#define SCHED_PURGE_BYTES (4 << 20)
#define SCHED_PURGE_US    8000
void sched_tick(sched *s);
/* The purge deleted checkpoint rows: release(ctx, hashes, n) is called,
 * without the core lock, once their deletion is committed and durable,
 * so that the objects no other row names are freed (main.c passes
 * ckretain_release). NULL (the default): they stay until the start-up
 * collection of unnamed objects (ckretain.h). It must not call into the
 * core. */
#define SCHED_HASH_LEN 64   /* hex characters of a SHA-256 (CKSTORE_HASH_LEN) */
void sched_set_release(sched *s, void (*release)(void *ctx, const char (*hashes)[SCHED_HASH_LEN + 1], size_t n),
                       void *ctx);
/* The burst of a submission is placed in chunks (docs/scheduler.md, "Cold
 * dispatch"): kick(ctx) is called, under the core lock, after a commit
 * whose pass stopped at a chunk's end; the thread it wakes then calls
 * sched_dispatch_more, which places the rest a chunk per transaction,
 * letting the threads queued for the core lock in between (each chunk's
 * agents are rung at its commit). kick NULL (the default): a pass places
 * everything at once. kick must not call into the core. */
void sched_set_kick(sched *s, void (*kick)(void *ctx), void *ctx);
void sched_dispatch_more(sched *s);

/* Gauges for /metrics. */
typedef struct sched_stats {
    int64_t trials_by_state[8];
    int64_t queued;
    int64_t agents_alive, agents_lost;
    int64_t experiments_active;
    int64_t experiments_purging;   /* deleted, rows still being removed */
    double  max_heartbeat_lag_s;
} sched_stats;
extern const char *const sched_trial_state_names[8];
void sched_get_stats(sched *s, sched_stats *out);

#endif
