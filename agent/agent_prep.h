/*
 * agent_prep.h — what the agent does for an assignment before it starts
 * the trial (docs/agent.md, "Starting a trial"), off the main thread: the
 * checkpoint it resumes from ("restore": fetched through the object cache
 * into <workdir>/<checkpoint_dir>/<name>) and its code context ("context":
 * fetched and unpacked into the trial's directory, agent_context.h).
 *
 * The work runs on one small pool of worker threads (common/hf_pool.h,
 * AGENT_PREP_WORKERS threads named "hf-prep", at most AGENT_PREP_QUEUE
 * assignments waiting), one job per assignment, so a large restore or
 * context takes one worker and never delays another trial's start behind
 * it; the main thread keeps reading the trials' output meanwhile (agent.h:
 * it must never block). Finished assignments are handed back to the main
 * thread (agent_prep_take), which starts them or reports why not, and the
 * main loop is woken through wake_fd.
 *
 * Threading: submit, cancel, take and pending come from the main thread;
 * the jobs run on the pool; one mutex guards the list of assignments in
 * progress and the list of finished ones.
 */
#ifndef AGENT_PREP_H
#define AGENT_PREP_H

#include "agent_assign.h"
#include "agent_objects.h"

#include <stddef.h>
#include <stdint.h>

#define AGENT_PREP_WORKERS 4      /* restores and contexts prepared at once */
#define AGENT_PREP_QUEUE   256    /* assignments waiting for a worker */

/* What to prepare (agent_prep_submit). */
enum {
    AGENT_PREP_RESTORE = 1,       /* fetch sp's restore checkpoint */
    AGENT_PREP_CONTEXT = 2,       /* fetch and unpack sp's code context */
};

typedef struct agent_prep agent_prep;

/* A prepared assignment, handed back to the main thread. */
typedef struct agent_prep_done {
    agent_spec *spec;              /* owned by the receiver */
    int         rc;                /* 0: ready to start; else why not (err) */
    int         restore_failed;    /* rc is the restore's (else the context's, or a kill: HF_ESTATE) */
    char        err[1600];
    char        restore_note[512]; /* the restore done, for the trial's log ("" = none) */
    char        note[256];         /* the context unpacked, for the trial's log ("" = none) */
} agent_prep_done;

/* Start the pool. workdir: the agent's (absolute); ao: the object cache
 * (borrowed, must outlive the prep); wake_fd: written (one byte) when an
 * assignment is ready. RET NULL on failure. */
agent_prep *agent_prep_new(const char *workdir, agent_objects *ao, int wake_fd);
/* Stop the pool: assignments still queued are dropped, the ones in
 * progress finish (a transfer finishes or fails first); free everything
 * not taken. Accepts NULL. */
void agent_prep_free(agent_prep *p);

/* Does the assignment carry a code context? */
int agent_prep_needed(const agent_spec *sp);
/* Queue sp (taken unless HF_ETOOBIG) for what (AGENT_PREP_* flags). An
 * assignment of the same (trial, attempt, rank) that is queued, being
 * prepared or waiting to be taken is dropped (a duplicate delivery).
 * RET 0; HF_EEXIST (duplicate: sp freed); HF_ENOMEM (sp freed);
 * HF_ETOOBIG (AGENT_PREP_QUEUE assignments wait already: sp is still the
 * caller's, to report). */
int agent_prep_submit(agent_prep *p, agent_spec *sp, unsigned what);
/* A kill for (trial, attempt <= 0: any; trial_id 0: every trial) arrived:
 * a matching assignment not started yet comes back (or is, if it is
 * waiting to be taken) with rc HF_ESTATE instead of being started.
 * RET 1 when one matched. */
int agent_prep_cancel(agent_prep *p, int64_t trial_id, int64_t attempt, const char *reason);
/* Take the prepared assignments: *out (an array of *n to free, each
 * spec to start or report). RET 0. */
int agent_prep_take(agent_prep *p, agent_prep_done **out, size_t *n);
/* Assignments queued or being prepared or not yet taken. */
int agent_prep_pending(agent_prep *p);

#endif
