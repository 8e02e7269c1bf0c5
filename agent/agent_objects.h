/*
 * agent_objects.h — the agent's local object cache and its transfers to
 * and from the scheduler's content-addressed store (docs/agent.md,
 * "Checkpoints travel"; docs/scheduler.md, "The checkpoint store").
 *
 * Three files do the work, each with one job:
 *
 *   agent_objcache.c   the files under <workdir>/objects and their LRU
 *                      index (layout, invariants and the bound are in
 *                      agent_objcache.h);
 *   agent_objshared.c  shared_fs mode: objects travel as files through
 *                      the store every agent mounts;
 *   agent_objects.c    this interface: it picks the mode, names the URLs
 *                      and moves the bytes through common/hf_xfer.h (a
 *                      streamed, SHA-256-verified transfer: never a whole
 *                      object in memory).
 *
 * Every function is thread-safe (each transfer has its own HTTP client):
 * the agent's uploader thread and its worker pool share one
 * agent_objects.
 *
 * shared_fs mode (agent_objects_set_shared): the scheduler's store is a
 * directory every agent mounts at the same path; an upload then writes
 * the object straight into <shared>/objects/ab/<sha256> and only
 * registers it with the scheduler (metadata; the scheduler hashes the
 * file before recording it), and a fetch copies (or hard-links) it from
 * there, verifying its hash (agent_objshared.h).
 */
#ifndef AGENT_OBJECTS_H
#define AGENT_OBJECTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_OBJECTS_HASH_LEN 64

typedef struct agent_objects agent_objects;

/* Open (creating <workdir>/objects, ab/ and tmp/ as needed) the cache
 * under workdir, remove what tmp/ holds (left by a crash) and index the
 * cached objects. sched_url: the scheduler's base URL; token: the agent
 * token (NULL = none). cache_max_bytes: the LRU bound (<= 0: unbounded).
 * RET 0 with *out, or HF_E* with a message in err. */
int  agent_objects_open(const char *workdir, const char *sched_url, const char *token, int64_t cache_max_bytes,
                        agent_objects **out, char *err, size_t errlen);
/* Accepts NULL. */
void agent_objects_close(agent_objects *ao);
/* Verify TLS against this CA file (NULL: the system store). Call before
 * any transfer. */
void agent_objects_set_cafile(agent_objects *ao, const char *cafile);
/* shared_fs mode: dir is the scheduler's store as mounted here (NULL or
 * "": the scheduler mode). Thread-safe; takes effect for the next call. */
int  agent_objects_set_shared(agent_objects *ao, const char *dir);

/* Is the object in the local cache (complete and verified)? 1 or 0. */
int  agent_objects_has(agent_objects *ao, const char *sha256);

/* Ensure sha256 (size bytes) is in the cache (downloaded from the
 * scheduler, streamed to a temp file, SHA-256 verified, renamed; or taken
 * from shared_fs), then materialise it at dest_path (hard link, else copy
 * to a temp name + fsync + rename; an existing dest_path is replaced).
 * RET 0, HF_EINVAL (malformed hash), HF_ECORRUPT (hash/size mismatch),
 * HF_ENOTFOUND, HF_EIO, HF_ENOSPC, HF_ECONN/HF_ETIMEOUT/HF_EHTTP/HF_EAUTH
 * (transfer), with a message in err. Thread-safe. */
int  agent_objects_get(agent_objects *ao, const char *sha256, int64_t size, const char *dest_path, char *err,
                       size_t errlen);

/* Hash a local file (streamed): hex SHA-256 and size.
 * RET 0, HF_ENOTFOUND, HF_EIO with a message in err. */
int  agent_objects_hash_file(const char *path, char hex[65], int64_t *size, char *err, size_t errlen);

/* Put the local file path into the cache: hard-linked (else copied) to a
 * temp name, hashed there, renamed to its hash; the file itself is left
 * as it is. A later rewrite of path by rename does not change the cached
 * bytes. OUT hex, size: the object. RET 0, HF_ENOTFOUND, HF_EIO, HF_ENOSPC. */
int  agent_objects_add(agent_objects *ao, const char *path, char hex[65], int64_t *size, char *err, size_t errlen);

/* The agent's id, sent with uploads (placement prefers the uploader). */
void agent_objects_set_agent(agent_objects *ao, int64_t agent_id);
/* A number that changes whenever the set of cached objects changes (for
 * reporting the list only when it changed). */
uint64_t agent_objects_version(agent_objects *ao);

/* Upload the cached object sha256 as a checkpoint of trial (step, attempt,
 * name: the basename the trial wrote) — PUT /api/v1/trials/{id}/checkpoints
 * streamed with X-Hyperfarm-Sha256 (scheduler mode), or written into the
 * shared store and registered with POST (shared_fs mode). One attempt: the
 * caller retries. RET 0; HF_ECORRUPT (the scheduler found other bytes than
 * declared: rebuild the object from the file); HF_ENOTFOUND (no such trial,
 * or the object left the cache); HF_ETOOBIG (over the store's limit);
 * HF_EINVAL (refused: 400); HF_ENOSPC (the store is full); HF_ECONN,
 * HF_ETIMEOUT, HF_EHTTP (5xx), HF_EAUTH; err says which. */
int  agent_objects_upload(agent_objects *ao, const char *sha256, int64_t trial_id, int64_t step, int64_t attempt,
                          const char *name, char *err, size_t errlen);

/* The hashes of the cached objects, most recently used first, at most
 * max of them (a new array; NULL on OOM). */
json_t *agent_objects_list(agent_objects *ao, size_t max);

/* Objects cached and their total bytes now. */
void agent_objects_stats(agent_objects *ao, int64_t *objects, int64_t *bytes);

#endif
