/*
 * agent_context.h — a trial's code context on the agent (docs/agent.md,
 * "Starting a trial"): the gzip'd tar the user shipped with
 * `hyperfarm submit --context` (assignment field "context": {sha256,
 * size}) is fetched through the object cache (agent_objects_get) and
 * unpacked into the trial's working directory before the trial starts.
 *
 * Two parts:
 *
 *   agent_context_unpack  the safe extraction, a pure function of a file
 *                         and a directory (unit-tested with crafted
 *                         archives, fuzzed by tests/fuzz/fuzz_unpack.c);
 *   agent_prep            a worker thread that does the fetch + unpack of
 *                         assignments that carry a context, so the main
 *                         thread keeps reading the other trials' output
 *                         meanwhile (agent.h: it must never block); the
 *                         main thread takes prepared assignments back and
 *                         starts them.
 *
 * The archive is untrusted (any user may upload one, and a scheduler is
 * only as trusted as its store). It is read twice: a first pass checks
 * every header and writes nothing, the second extracts. Refused, with the
 * entry named: anything but regular files and directories (symbolic and
 * hard links, devices, FIFOs, sockets); absolute names; names with a ".."
 * component; names of the agent-owned files in the trial directory
 * (checkpoints/ and everything in it, control.json, hostfile); more than
 * AGENT_CONTEXT_MAX_ENTRIES entries or AGENT_CONTEXT_MAX_BYTES bytes in
 * all; a name longer than AGENT_CONTEXT_MAX_NAME. The extraction itself
 * runs with libarchive's ARCHIVE_EXTRACT_SECURE_NODOTDOT |
 * SECURE_SYMLINKS | SECURE_NOABSOLUTEPATHS, so a symbolic link the trial
 * left in its directory (an earlier attempt) is never followed either.
 * A refused archive writes nothing: every check runs in the first pass.
 */
#ifndef AGENT_CONTEXT_H
#define AGENT_CONTEXT_H

#include "agent_assign.h"
#include "agent_objects.h"

#include <stddef.h>
#include <stdint.h>

#define AGENT_CONTEXT_MAX_ENTRIES 100000                  /* as cli_context.h packs at most */
#define AGENT_CONTEXT_MAX_BYTES   ((int64_t)2 << 30)      /* unpacked bytes in all */
#define AGENT_CONTEXT_MAX_NAME    1024                    /* bytes of one entry's name */

/* Limits of one unpack (tests lower them). */
typedef struct agent_context_limits {
    int64_t max_entries;
    int64_t max_bytes;
} agent_context_limits;

/* Unpack the gzip'd (or plain) tar archive into the existing directory
 * dest (see above). lim NULL: the AGENT_CONTEXT_MAX_* limits. Existing
 * files of the same names are replaced; the rest of dest is left alone.
 * OUT files, bytes (may be NULL): what was written.
 * RET 0; HF_EINVAL (a refused entry: err names it and why), HF_ETOOBIG
 * (over a limit), HF_ECORRUPT (not a readable archive: truncated,
 * corrupt), HF_EIO / HF_ENOSPC (writing), HF_ENOMEM; err says which. */
int agent_context_unpack(const char *archive, const char *dest, const agent_context_limits *lim, int64_t *files,
                         int64_t *bytes, char *err, size_t errlen);

/* ---------- the preparation thread ---------- */

typedef struct agent_prep agent_prep;

/* A prepared assignment, handed back to the main thread. */
typedef struct agent_prep_done {
    agent_spec *spec;        /* owned by the receiver */
    int         rc;          /* 0: ready to start; else why not (err) */
    char        err[512];
    char        note[256];   /* what was done, for the trial's log */
} agent_prep_done;

/* Start the worker. workdir: the agent's (absolute); ao: the object cache
 * (borrowed, must outlive the prep); wake_fd: written (one byte) when an
 * assignment is ready. RET NULL on failure. */
agent_prep *agent_prep_new(const char *workdir, agent_objects *ao, int wake_fd);
/* Stop the worker (the fetch in progress finishes or fails first) and
 * free what is queued. Accepts NULL. */
void agent_prep_free(agent_prep *p);

/* Does the assignment need preparing (it has a context)? */
int agent_prep_needed(const agent_spec *sp);
/* Queue sp (taken). An assignment of the same (trial, attempt, rank) that
 * is queued or being prepared already is dropped (a duplicate delivery).
 * RET 0, HF_EEXIST (duplicate: sp freed), HF_ENOMEM (sp freed). */
int agent_prep_submit(agent_prep *p, agent_spec *sp);
/* A kill for (trial, attempt <= 0: any; trial_id 0: every trial) arrived:
 * a matching assignment not started yet comes back (or is, if it is
 * waiting to be taken) with rc HF_ESTATE instead of being started.
 * RET 1 when one matched. */
int agent_prep_cancel(agent_prep *p, int64_t trial_id, int64_t attempt, const char *reason);
/* Take the prepared assignments: *out (an array of *n to free, each
 * spec to start or report). RET 0 or HF_ENOMEM. */
int agent_prep_take(agent_prep *p, agent_prep_done **out, size_t *n);
/* Assignments queued or being prepared (not yet taken). */
int agent_prep_pending(agent_prep *p);

#endif
