/*
 * agent_assign.h — what the agent accepts from the scheduler: a heartbeat
 * reply (docs/protocol.md, "Agents") validated into assignments
 * (agent_spec) and kill requests (agent_killreq).
 *
 * Replies are untrusted input: every assignment is validated on its own,
 * field by field (bounded sizes, relative paths checked by agent_fs, argv
 * and env entries without NUL, environment names [A-Za-z_][A-Za-z0-9_]*
 * and none of the trial contract's, whose typed fields hf_trial_decode
 * checks);
 * an invalid one becomes a "start_failed" event naming the field, and the
 * others still run. An agent_spec that parsed is safe to start as is.
 *
 * Pure functions, no I/O: the heartbeat thread parses, the main thread
 * starts what was parsed (agent_sup_start).
 */
#ifndef AGENT_ASSIGN_H
#define AGENT_ASSIGN_H

#include "agent_fs.h"
#include "hf_json.h"
#include "hf_trial.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_MAX_GPUS     HF_TRIAL_MAX_GPUS
#define AGENT_MAX_ARGS     1024
#define AGENT_MAX_ENV      256
#define AGENT_ARG_MAX      (64 * 1024)   /* bytes per argument or env value */
#define AGENT_GRACE_MAX_MS (3600 * 1000)
#define AGENT_MAX_HOSTS    1024          /* entries of an mpirun host file */
#define AGENT_MAX_ASSIGN   1024          /* assignments or kills per reply */

/* One assignment, validated. */
typedef struct agent_spec {
    /* The trial contract's fields (common/hf_trial.h): what agent_spawn
     * writes as the trial's HYPERFARM_* variables. trial.hparams is owned. */
    hf_trial_vars trial;
    int64_t trial_id, attempt, experiment_id;   /* copies of trial.*, for the agent's bookkeeping */
    int64_t rank;                         /* worker rank of a multi-worker trial (0) */
    int64_t grace_ms;                     /* this trial's grace period, < 0 = agent default */
    char    prompt_metric[65];            /* "prompt_metric" (a metric name, "" = none): a metric line
                                             with it sends a heartbeat at once (the searcher may stop
                                             the trial on that report) */
    char  **argv;                         /* NULL-terminated, owned */
    char  **env;                          /* "NAME=value", NULL-terminated, owned: the experiment's
                                             trial.env, never a name of the contract
                                             (hf_trial_env_reserved: refused) */
    char    checkpoint_dir[AGENT_PATH_MAX];   /* relative to workdir */
    char    copy_from[AGENT_PATH_MAX];        /* relative, "" = none (PBT) */
    char    context_sha[65];                  /* "context": the code to unpack first, "" = none */
    int64_t context_size;                     /* its bytes */
    int64_t slots;
    /* "launcher": "mpirun" (issue 8.2). Rank 0 (hold == 0) gets the
     * placement as hostfile text ("host slots=N" lines, validated), writes
     * it to <trial dir>/hostfile, exports HYPERFARM_HOSTFILE and replaces
     * "{hostfile}" in argv with its path. Other ranks (hold == 1) start no
     * program: a placeholder process holds the slots (reported running
     * like any trial) until the scheduler's kill releases it. */
    int     launcher;                     /* 1 = mpirun */
    int     hold;
    char   *hostfile;                     /* owned; NULL unless launcher && !hold */
    /* "restore" (docs/protocol.md): a stored checkpoint to fetch into
     * checkpoint_dir/restore_name before the start (agent_objects_get). */
    int     has_restore;
    char    restore_sha[65];
    int64_t restore_size, restore_step, restore_trial;
    char    restore_name[256];                /* a plain file name: no '/', not . or .. */
} agent_spec;

/* Validate one element of a heartbeat reply's "assign" array.
 * IN  a: the element (borrowed); path: its name in errors, e.g. "assign[0]".
 * RET a new spec (free with agent_spec_free), or NULL with e naming the
 *     offending field. */
agent_spec *agent_spec_parse(const json_t *a, const char *path, hf_jerr *e);
/* Accepts NULL. */
void agent_spec_free(agent_spec *s);

typedef struct agent_killreq {
    int64_t trial_id, attempt, grace_ms;   /* attempt 0: any; grace_ms < 0: the agent's default */
    char    reason[64];
} agent_killreq;

typedef struct agent_reply {
    agent_spec   **assign;     /* valid assignments, owned */
    size_t         nassign;
    agent_killreq *kill;
    size_t         nkill;
    json_t        *rejected;   /* start_failed events for invalid assignments (array, owned) */
    int64_t        interval_ms;   /* 0 = not given */
    int64_t        report_gap_ms; /* least gap of report-triggered heartbeats; 0 = not given */
} agent_reply;

/* Validate a heartbeat reply (borrowed).
 * OUT out: the valid assignments and kills; an invalid assignment that
 *     names its trial_id and attempt becomes an event in out->rejected,
 *     other invalid elements are skipped with a warning.
 * RET 0, or HF_EINVAL when the document itself is malformed (e names the
 *     field). *out is always safe to pass to agent_reply_free. */
int  agent_reply_parse(const json_t *reply, agent_reply *out, hf_jerr *e);
/* Frees what out owns and zeroes it; accepts NULL. */
void agent_reply_free(agent_reply *r);

#endif
