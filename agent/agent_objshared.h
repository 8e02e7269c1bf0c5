/*
 * agent_objshared.h — the object cache's shared_fs mode (docs/agent.md,
 * "Checkpoints travel"; docs/scheduler.md, "The checkpoint store"): the
 * scheduler's store is a directory every agent mounts at the same path,
 * so objects travel as files, not over HTTP.
 *
 * An upload writes the object straight into <shared>/objects/ab/<sha256>
 * (a temp file in <shared>/tmp, fsync, then a link to the final name, so
 * an existing object is never overwritten); agent_objects then registers
 * it with the scheduler, which hashes the file before recording it. A
 * fetch copies (or hard-links) the object from there into the local
 * cache, verifying its hash. Both are thread-safe.
 */
#ifndef AGENT_OBJSHARED_H
#define AGENT_OBJSHARED_H

#include "agent_objcache.h"

#include <stddef.h>
#include <stdint.h>

/* Put the local file obj (the object sha) into the shared store under
 * shared (a no-op when the object is there already).
 * RET 0 or HF_E* with err. */
int agent_objshared_put(const char *shared, const char *sha, const char *obj, char *err, size_t errlen);

/* Bring sha (size bytes) from the shared store under shared into the
 * cache oc, verified and left pinned. RET 0, HF_ENOTFOUND, HF_ECORRUPT,
 * HF_EIO, HF_ENOSPC with err. */
int agent_objshared_fetch(agent_objcache *oc, const char *shared, const char *sha, int64_t size, char *err,
                          size_t errlen);

#endif
