/*
 * agent_sup.h — the trial supervisor: the table of trial processes on this
 * agent. It starts them (agent_spawn), captures their output line by line,
 * parses metric lines, stops them on request and reports how they ended.
 * Everything it learns goes into an agent_outbox (see agent_outbox.h) for
 * the heartbeat thread to ship.
 *
 * Threading: an agent_sup belongs to one thread (the agent's main loop);
 * only the outbox it writes to is shared. agent_sup_poll() is the loop's
 * body: one poll(2) over every trial's stdout/stderr pipe, a self-pipe
 * written by the SIGCHLD handler, and an optional extra fd of the caller.
 *
 * Trials are keyed by (trial, attempt, rank). A trial is stopped by
 * writing control.json (should_stop), SIGTERM to its process group, and
 * SIGKILL to the group when the grace period ends. When the leader exits,
 * the rest of its group is SIGKILLed too, and "exited" is reported once
 * the pipes are closed (at most AGENT_DRAIN_MS later).
 *
 * Output: lines are at most AGENT_LINE_MAX bytes; a longer line is
 * truncated to that size and ends with a note saying how many bytes were
 * dropped (an over-long metric line is therefore not parsed). Each trial
 * may ship AGENT_LOG_RATE log lines per second; lines over that are
 * counted and replaced by one note per second. Metric lines that parse are
 * shipped as metrics (not as log lines); malformed ones are shipped as log
 * lines followed by a note with the parser's reason.
 */
#ifndef AGENT_SUP_H
#define AGENT_SUP_H

#include "agent_assign.h"
#include "agent_outbox.h"
#include "agent_sandbox.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AGENT_MAX_TRIALS  256
#define AGENT_LINE_MAX    16384
#define AGENT_LOG_RATE    2000          /* log lines per second per trial */
#define AGENT_DRAIN_MS    2000          /* wait for pipe EOF after the leader exits */

typedef struct agent_sup agent_sup;

/* workdir: absolute, existing directory for trial files. self_dir: the
 * directory prepended to PATH (NULL = none). grace_ms: default grace
 * period (< 0 = 10 s). The outbox stays owned by the caller and must
 * outlive the sup. Installs a SIGCHLD handler (one supervisor per process).
 * RET NULL on failure. */
agent_sup *agent_sup_new(const char *workdir, const char *self_dir, int64_t grace_ms,
                         agent_outbox *ob);
/* Run the trials started from now on in sandbox sb (borrowed: it must
 * outlive the sup; NULL: no sandbox, the default). */
void agent_sup_set_sandbox(agent_sup *s, const agent_sandbox *sb);
/* Frees memory and closes pipes; trials still running are SIGKILLed.
 * Accepts NULL. */
void agent_sup_free(agent_sup *s);

/* What the supervisor tells the agent's checkpoint uploader
 * (agent_upload.h), from the main thread; every callback may be NULL.
 * on_checkpoint: a metric line of the trial named a checkpoint file (path
 * absolute: a relative one is resolved against the trial's working
 * directory); step: the report's step, else its epoch, else -1.
 * on_start / on_exit: a rank of the trial started or was reaped; dir: the
 * trial's working directory. */
typedef struct agent_sup_hooks {
    void *ctx;
    void (*on_checkpoint)(void *ctx, int64_t trial_id, int64_t attempt, int64_t step, const char *path);
    void (*on_start)(void *ctx, int64_t trial_id, const char *dir);
    void (*on_exit)(void *ctx, int64_t trial_id, const char *dir, int others_here);
} agent_sup_hooks;

/* Install hooks (copied). */
void agent_sup_set_hooks(agent_sup *s, const agent_sup_hooks *h);

/* Start a trial (one rank of it). On failure a "start_failed" event with
 * the reason is queued as well. An older attempt of the same trial still
 * running here is SIGKILLed first (the scheduler re-placed the trial).
 * RET 0; HF_EEXIST if this trial attempt and rank runs or already ran here
 * (nothing done); HF_ETOOBIG (too many trials), or an error of agent_spawn
 * (HF_EINVAL bad path, HF_ECHILD fork/exec failed, ...) with a message in err. */
int agent_sup_start(agent_sup *s, const agent_spec *spec, char *err, size_t errlen);

/* Report that an assignment could not start (a "start_failed" event with
 * msg; a later copy of it is ignored like one that ran). For what failed
 * before agent_sup_start (preparing its code context, agent_context.h). */
void agent_sup_start_failed(agent_sup *s, const agent_spec *sp, const char *msg);
/* Does this trial attempt and rank run here, or did it run here? */
int agent_sup_known(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank);

/* Ask a trial to stop, every rank of it on this agent: control file,
 * SIGTERM to each process group, SIGKILL after grace_ms (< 0 = the trial's
 * grace from its assignment, else the agent default). attempt <= 0 matches
 * any attempt. RET 0 or HF_ENOTFOUND. */
int agent_sup_kill(agent_sup *s, int64_t trial_id, int64_t attempt, int64_t grace_ms,
                   const char *reason);
/* agent_sup_kill for every trial. */
void agent_sup_kill_all(agent_sup *s, int64_t grace_ms, const char *reason);

/* Wait up to timeout_ms for output, exits or extra_fd (-1 = none) becoming
 * readable; read and ship output, reap exited trials, enforce grace
 * deadlines. RET 1 when extra_fd is readable, else 0. */
int agent_sup_poll(agent_sup *s, int timeout_ms, int extra_fd);

/* Trials currently supervised (running or being stopped). */
int agent_sup_count(const agent_sup *s);
/* Reports queued so far that carry their trial's "prompt_metric" (the
 * objective a searcher may stop the trial on): the main loop heartbeats
 * at once when it grows, instead of at the next interval. */
uint64_t agent_sup_prompt_reports(const agent_sup *s);
/* pid of a supervised trial attempt, or -1. */
pid_t agent_sup_pid(const agent_sup *s, int64_t trial_id, int64_t attempt);

#endif
