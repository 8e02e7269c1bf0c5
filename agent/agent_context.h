/*
 * agent_context.h — a trial's code context on the agent (docs/agent.md,
 * "Starting a trial"): the gzip'd tar the user shipped with
 * `hyperfarm submit --context` (assignment field "context": {sha256,
 * size}) is fetched through the object cache (agent_prep.h, on the
 * agent's worker pool) and unpacked into the trial's working directory
 * before the trial starts. This module is the safe extraction, a pure
 * function of a file and a directory (unit-tested with crafted archives,
 * fuzzed by tests/fuzz/fuzz_unpack.c).
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

#endif
