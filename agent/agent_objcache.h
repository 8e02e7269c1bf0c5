/*
 * agent_objcache.h — the agent's local object cache: the files under
 * <workdir>/objects and their index (docs/agent.md, "Checkpoints
 * travel"). agent_objects.h is the cache's public face and moves objects
 * to and from the scheduler; this module only keeps files and their order.
 *
 * Layout under <workdir>/objects:
 *
 *   ab/abcdef...   one file per cached object, named by the lowercase hex
 *                  SHA-256 of its bytes
 *   tmp/           downloads and ingests in progress (emptied at open)
 *
 * Invariants: a file under ab/ exists only complete and verified (its
 * bytes hashed to its name, it was fsynced and renamed into place); a
 * trial's copy of an object is a hard link to the cache file (else a
 * copy), so evicting the cache entry never touches a trial's files.
 *
 * Bound: at most max_bytes; after an insertion the least recently used
 * objects are removed (the newest one and pinned objects are kept even
 * above the bound). The order survives restarts: a use touches the file's
 * mtime. Every function is thread-safe (one mutex guards the index; files
 * are written outside it and entered after their rename).
 */
#ifndef AGENT_OBJCACHE_H
#define AGENT_OBJCACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct agent_objcache agent_objcache;

/* Open (creating objects/, objects/tmp as needed) the cache under
 * workdir, empty tmp/, index ab/. max_bytes <= 0: unbounded.
 * RET 0 with *out, or HF_E* with a message in err. */
int  agent_objcache_open(const char *workdir, int64_t max_bytes, agent_objcache **out, char *err, size_t errlen);
/* Accepts NULL. */
void agent_objcache_close(agent_objcache *oc);

/* The cache file of sha (whether it exists or not). */
void agent_objcache_path(const agent_objcache *oc, const char *sha, char *out, size_t len);
/* A fresh name under tmp/ (not created). */
void agent_objcache_tmp_path(agent_objcache *oc, const char *tag, char *out, size_t len);

/* Is sha cached (indexed and its file there)? Marks it used; pin: also
 * pin it against eviction (undo with agent_objcache_unpin). OUT *size
 * (may be NULL). RET 1 or 0 (not cached: nothing pinned). */
int  agent_objcache_touch(agent_objcache *oc, const char *sha, int pin, int64_t *size);
void agent_objcache_unpin(agent_objcache *oc, const char *sha);

/* The verified file tmp (size bytes hashing to sha, fsynced) becomes the
 * object sha, left pinned when pin. RET 0 or HF_E* (tmp is gone either
 * way). */
int  agent_objcache_publish(agent_objcache *oc, const char *tmp, const char *sha, int64_t size, int pin);
/* Bring the file src in: hard-linked (else copied) under tmp/, hashed
 * there, published under its hash (src is left as it is). want: the
 * expected hash (NULL: whatever it is), want_size (< 0: any). OUT hex,
 * size (may be NULL). RET 0, HF_ENOTFOUND (no src), HF_ECORRUPT (not the
 * wanted object), HF_EIO, HF_ENOSPC; err says which. */
int  agent_objcache_ingest(agent_objcache *oc, const char *src, const char *want, int64_t want_size, int pin,
                           char hex[65], int64_t *size, char *err, size_t errlen);
/* Materialise the cached (pinned) object sha at dest: a hard link, else a
 * copy to a temp name + fsync + rename; an existing dest is replaced.
 * RET 0 or HF_E* with err. */
int  agent_objcache_place(agent_objcache *oc, const char *sha, const char *dest, char *err, size_t errlen);

/* Copy src to a temp file beside dst, fsync, rename over dst, fsync the
 * directory (nothing left behind on error). RET 0 or HF_E*. */
int  agent_objcache_copy_file(const char *src, const char *dst);
/* Hash a local file (streamed). RET 0, HF_ENOTFOUND, HF_EIO with err. */
int  agent_objcache_hash_file(const char *path, char hex[65], int64_t *size, char *err, size_t errlen);

/* The hashes, most recently used first, at most max (a new array; NULL
 * on OOM); a number that changes whenever objects come or go; counts. */
json_t  *agent_objcache_list(agent_objcache *oc, size_t max);
uint64_t agent_objcache_version(agent_objcache *oc);
void     agent_objcache_stats(agent_objcache *oc, int64_t *objects, int64_t *bytes);

#endif
