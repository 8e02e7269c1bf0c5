/*
 * agent_upload.h — the agent's checkpoint uploader (docs/agent.md,
 * "Checkpoints travel"): every checkpoint a trial reports goes into the
 * object cache (agent_objects_add: a hard link, hashed) and up to the
 * scheduler's store (agent_objects_upload), in one background thread at
 * the lowest CPU and I/O priority, so the trainer keeps its speed.
 *
 * Delivery: a report is staged at once (a hard link <workdir>/uploads/N.ckpt
 * plus a small record N.json, taken on the supervisor's thread: a cheap
 * link(2) and a rename, so a trainer that rotates its files right after
 * reporting cannot lose it). The queue is durable: a stop, a kill -9 or a
 * scheduler that is down leaves the records, and the next start reads
 * them back and uploads them once the agent is registered; only the
 * scheduler's acknowledgement (or a drop) removes a record. A failed
 * upload is retried with exponential backoff (1 s doubling to 30 s) for
 * as long as the agent runs; an upload the scheduler refuses as corrupt
 * is rebuilt from the staged file and retried; an object over the store's
 * limit, or for a trial the scheduler does not know, is dropped with an
 * error in the log. At most AGENT_UPLOAD_MAX reports wait; beyond that
 * the oldest of the same trial is dropped (only the newest matters for a
 * resume).
 *
 * Cleanup: a trial directory whose ranks here all exited and whose
 * reported checkpoints are all delivered (or dropped) is removed
 * keep_dirs_ms later (0 = at once), unless a rank of the trial starts here
 * again meanwhile; the object cache keeps its checkpoints.
 *
 * Threading: the agent_upload_note_* calls come from the main thread; the
 * worker is the uploader's own thread; everything shared is under one
 * mutex.
 */
#ifndef AGENT_UPLOAD_H
#define AGENT_UPLOAD_H

#include "agent_objects.h"

#include <stdint.h>

#define AGENT_UPLOAD_MAX 1024

typedef struct agent_upload agent_upload;

/* Read the queue left in <workdir>/uploads by an earlier run (creating the
 * directory; malformed records are logged and removed) and start the
 * uploader thread. ao is borrowed (outlives the uploader); keep_dirs_ms
 * < 0: never remove trial directories. Nothing is uploaded before
 * agent_upload_set_agent names a registered agent. RET NULL on failure. */
agent_upload *agent_upload_new(agent_objects *ao, const char *workdir, int64_t keep_dirs_ms);
/* Stop the thread (an upload in progress finishes first) and free; what
 * still waits stays in <workdir>/uploads for the next start. NULL ok. */
void agent_upload_free(agent_upload *u);
/* The agent's id, sent with uploads (0 = not registered yet). The first
 * id > 0 lets the worker start: call it after agent_objects_set_shared,
 * so no upload goes out before the storage mode is known. */
void agent_upload_set_agent(agent_upload *u, int64_t agent_id);

/* A trial reported the checkpoint file path (absolute) at step. */
void agent_upload_note_checkpoint(agent_upload *u, int64_t trial_id, int64_t attempt, int64_t step, const char *path);
/* The same, but the upload waits until delivered(ctx, after) says the
 * metric report that named the checkpoint reached the scheduler: a stored
 * checkpoint never runs ahead of its epoch's metrics (an agent lost right
 * after the upload would otherwise leave the resumed trial without that
 * epoch's report). after = 0: no wait. */
void agent_upload_note_checkpoint_after(agent_upload *u, int64_t trial_id, int64_t attempt, int64_t step,
                                        const char *path, uint64_t after);
/* The gate for agent_upload_note_checkpoint_after (NULL: none). */
void agent_upload_set_gate(agent_upload *u, int (*delivered)(void *ctx, uint64_t seq), void *ctx);
/* A rank of trial_id started in dir: keep dir. */
void agent_upload_note_start(agent_upload *u, int64_t trial_id, const char *dir);
/* A rank of trial_id exited; others_here: ranks of it still running here. */
void agent_upload_note_exit(agent_upload *u, int64_t trial_id, const char *dir, int others_here);

/* The newest checkpoint (highest step) a rank of trial_id reported here
 * since it last started here, while its directory is kept: OUT its step
 * and path. RET 1, or 0 when there is none. */
int agent_upload_newest(agent_upload *u, int64_t trial_id, int64_t *step, char *path, size_t pathlen);

/* Reports waiting or in progress, and delivered so far. */
void agent_upload_stats(agent_upload *u, int64_t *pending, int64_t *done, int64_t *dropped);

#endif
