/*
 * api_objects.c — the routes of the content-addressed object store
 * (scheduler/store/ckstore.h; docs/scheduler.md, "The checkpoint store" and "Code
 * contexts"): checkpoint uploads (streamed, F_STREAM) and registrations,
 * listings, object downloads, code-context uploads, and the check that an
 * experiment's "context" names a stored object. The route table that
 * names these handlers is in api_routes.c.
 *
 * Invariant: nothing a client sends becomes visible before ckstore has
 * verified its size and SHA-256 and made it durable; refusals answer
 * before a byte of the body is read where the headers suffice.
 *
 * With a token file, a checkpoint is stored only for the agent its
 * attempt was assigned to (sched_ckpt_may_store, docs/protocol.md
 * "Agent tokens"): 403 when the token does not speak for the agent
 * the request names, 409 when the attempt is not (or no longer) that
 * agent's; decided from the headers, so nothing reaches the store.
 */
#include "scheduler/api/api_int.h"
#include "scheduler/api/api_handlers.h"

#include "common/hf_log.h"
#include "hf_err.h"
#include "scheduler/api/metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


#define SHA_HEADER "X-Hyperfarm-Sha256"

static enum MHD_Result no_ckstore(api_call *k)
{
    return api_send_err(k->c, 503, NULL, "this scheduler has no checkpoint store");
}

/* ?step=N&attempt=A, both required; &name=BASENAME (the file the trial
 * wrote) and &agent=ID (the uploading agent) optional, into info.
 * RET 0 or HF_EINVAL with k->e. */
static int ckpt_args(api_call *k, ckstore_info *info)
{
    const char *name = api_query_arg(k, "name");
    if (api_query_int(k->c, "step", 0, INT64_MAX, -1, &info->step, &k->e) ||
        api_query_int(k->c, "attempt", 0, INT32_MAX, -1, &info->attempt, &k->e) ||
        api_query_int(k->c, "agent", 0, INT64_MAX, 0, &info->agent_id, &k->e))
        return HF_EINVAL;
    if (info->step < 0) return hf_jerr_set(&k->e, "step", NULL, "required: the checkpoint's step (an integer >= 0)");
    if (info->attempt < 0) return hf_jerr_set(&k->e, "attempt", NULL, "required: the trial's attempt (an integer >= 0)");
    if (name && !ckstore_name_valid(name))
        return hf_jerr_set(&k->e, "name", NULL, "must be a file name: 1-255 bytes, no '/', not . or ..");
    snprintf(info->name, sizeof info->name, "%s", name ? name : "");
    return 0;
}

/* Content-Length as a byte count. RET 0 or HF_EINVAL. */
static int content_length(struct MHD_Connection *c, int64_t *size)
{
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    int64_t n = 0;
    if (!v || !*v || strlen(v) > 18) return HF_EINVAL;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9') return HF_EINVAL;
        n = n * 10 + (*p - '0');
    }
    *size = n;
    return 0;
}

/* The headers every streamed upload needs: X-Hyperfarm-Sha256 and
 * Content-Length. RET 0 with *sha and *size, or 1 with *ret (an error
 * answer queued). */
static int upload_headers(api_call *k, const char **sha, int64_t *size, enum MHD_Result *ret)
{
    *sha = MHD_lookup_connection_value(k->c, MHD_HEADER_KIND, SHA_HEADER);
    if (!ckstore_hash_valid(*sha))
        *ret = api_send_err(k->c, 400, SHA_HEADER, "required: the body's SHA-256 as 64 lowercase hex characters");
    else if (content_length(k->c, size))
        *ret = api_send_err(k->c, 411, "Content-Length", "required: the body's size in bytes (no chunked upload)");
    else
        return 0;
    return 1;
}

/* Open the upload (k->rq->up) of size bytes named sha; limit names what
 * bounds it in a 413. */
/* A refused upload because the store's disk is full: the agent keeps the
 * checkpoint and its trial runs on (it retries later); make it visible to
 * operators here too (log line, hyperfarm_checkpoint_store_full_total). */
static void store_full(api_call *k, int64_t size)
{
    const char *sha = MHD_lookup_connection_value(k->c, MHD_HEADER_KIND, SHA_HEADER);
    atomic_fetch_add(&metrics.checkpoint_store_full, 1);
    if (size >= 0)
        hf_warn("checkpoint store %s is full: upload of %.12s (%lld bytes) refused with 507, nothing stored",
                   ckstore_dir(k->a->ck), sha ? sha : "?", (long long)size);
    else
        hf_warn("checkpoint store %s is full: upload of %.12s refused with 507, nothing stored",
                   ckstore_dir(k->a->ck), sha ? sha : "?");
}

static enum MHD_Result upload_open(api_call *k, const char *sha, int64_t size, const char *limit)
{
    int rc = ckstore_upload_begin(k->a->ck, sha, size, &k->rq->up);
    if (rc == HF_ETOOBIG)
        return api_send_err(k->c, 413, "Content-Length", "%lld bytes: larger than this store accepts (%s)",
                            (long long)size, limit);
    if (rc == HF_ENOSPC) store_full(k, size);
    if (rc) return api_send_rc(k->c, rc, NULL, "checkpoint");
    k->rq->streamed = 1;
    return MHD_YES;
}

/* The upload's end: commit it. RET 0 with *info, else 1 with *ret. */
static int upload_commit(api_call *k, ckstore_info *info, enum MHD_Result *ret)
{
    char msg[256];
    int rc = ckstore_upload_commit(k->rq->up, info, msg, sizeof msg);
    k->rq->up = NULL;
    if (rc == 0) return 0;
    if (rc == HF_ENOSPC) store_full(k, -1);
    if (rc == HF_ECORRUPT)
        *ret = api_send_err(k->c, 422, strncmp(msg, SHA_HEADER, strlen(SHA_HEADER)) ? "Content-Length" : SHA_HEADER,
                            "%s: nothing was stored", msg);
    else
        *ret = api_send_rc(k->c, rc, NULL, "object");
    return 1;
}

/* An agent token's authority over the checkpoint info names (its trial
 * k->id, attempt, step and uploading agent). RET 0 (info->agent_id = the
 * agent found), or 1 with *ret the 403/404/409. Without a token file there
 * is no agent identity to check (one trusted operator). */
static int ckpt_refused(api_call *k, ckstore_info *info, enum MHD_Result *ret)
{
    if (k->role != AUTH_AGENT) return 0;
    int rc = sched_ckpt_may_store(k->a->s, k->id, info->attempt, info->step, k->user, &info->agent_id, &k->e);
    if (rc == 0) return 0;
    *ret = rc == HF_EPERM ? api_send_jerr(k->c, 403, &k->e) : api_send_rc(k->c, rc, &k->e, "trial");
    return 1;
}

/* The first call of an upload: everything the headers say is checked
 * before a byte of the body is read; then the upload is opened. */
static enum MHD_Result ckpt_put_begin(api_call *k)
{
    int64_t size;
    ckstore_info info = {.step = 0};
    const char *sha;
    enum MHD_Result ret;
    if (ckpt_args(k, &info)) return api_send_jerr(k->c, 400, &k->e);
    if (upload_headers(k, &sha, &size, &ret)) return ret;
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    if (ckpt_refused(k, &info, &ret)) return ret;
    return upload_open(k, sha, size, "--max-checkpoint-mb");
}

/* The answer to a recorded checkpoint (201), or rc's error. */
static enum MHD_Result ckpt_recorded(api_call *k, int rc, const ckstore_info *info)
{
    if (rc == HF_ECORRUPT)   /* collected between its commit and its row (ckstore_record) */
        return api_send_err(k->c, 503, NULL, "the object was removed meanwhile: upload it again");
    if (rc) return api_send_rc(k->c, rc, &k->e, "trial");
    return api_send_json(k->c, 201, json_pack("{sssIsIsIss}", "sha256", info->sha256, "size", (json_int_t)info->size,
                                              "step", (json_int_t)info->step, "attempt", (json_int_t)info->attempt,
                                              "name", info->name));
}

/* PUT /api/v1/trials/{id}/checkpoints: the body, streamed into the store,
 * becomes visible only once its size and hash are the declared ones and
 * it is durable; then its row is recorded. */
enum MHD_Result api_h_ckpt_put(api_call *k)
{
    ckstore_info info = {.step = 0};
    enum MHD_Result ret;
    if (!k->a->ck) return no_ckstore(k);
    if (k->begin) return ckpt_put_begin(k);
    if (upload_commit(k, &info, &ret)) return ret;
    int rc = ckpt_args(k, &info);
    /* again at the end (the uploader's id; the attempt may have ended meanwhile) */
    if (rc == 0 && ckpt_refused(k, &info, &ret)) return ret;
    if (rc == 0) rc = ckstore_record(k->a->ck, k->id, &info);
    return ckpt_recorded(k, rc, &info);
}

/* POST /api/v1/trials/{id}/checkpoints {sha256, size, step, attempt,
 * name, agent_id}: record an object already in the store. In shared_fs
 * mode the agent wrote it there itself and the store hashes it first;
 * otherwise it was uploaded before (the same bytes of another trial or
 * attempt), so nothing needs to travel again. */
enum MHD_Result api_h_ckpt_register(api_call *k)
{
    static const char *const keys[] = {"sha256", "size", "step", "attempt", "name", "agent_id", NULL};
    ckstore_info info = {.step = 0};
    const char *sha = NULL, *name = NULL;
    int64_t size = 0;
    char msg[256];
    if (!k->a->ck) return no_ckstore(k);
    if (hf_json_only_keys(k->body, "", keys, &k->e) || hf_json_get_string(k->body, "", "sha256", 1, 64, &sha, &k->e) ||
        hf_json_get_int(k->body, "", "size", 1, 0, INT64_MAX, &size, &k->e) ||
        hf_json_get_int(k->body, "", "step", 1, 0, INT64_MAX, &info.step, &k->e) ||
        hf_json_get_int(k->body, "", "attempt", 1, 0, INT32_MAX, &info.attempt, &k->e) ||
        hf_json_get_int(k->body, "", "agent_id", 0, 0, INT64_MAX, &info.agent_id, &k->e) ||
        hf_json_get_string(k->body, "", "name", 0, 255, &name, &k->e))
        return api_send_jerr(k->c, 400, &k->e);
    if (!ckstore_hash_valid(sha)) return api_send_err(k->c, 400, "sha256", "must be 64 lowercase hex characters");
    if (name && !ckstore_name_valid(name))
        return api_send_err(k->c, 400, "name", "must be a file name: 1-255 bytes, no '/', not . or ..");
    snprintf(info.name, sizeof info.name, "%s", name ? name : "");
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    enum MHD_Result ret;
    if (ckpt_refused(k, &info, &ret)) return ret;
    int rc = ckstore_adopt(k->a->ck, sha, size, &info, msg, sizeof msg);
    if (rc == HF_ENOTFOUND) return api_send_err(k->c, 409, "sha256", "%s: upload it first", msg);
    if (rc == HF_ECORRUPT) return api_send_err(k->c, 422, "sha256", "%s: nothing was recorded", msg);
    if (rc == 0) rc = ckstore_record(k->a->ck, k->id, &info);
    return ckpt_recorded(k, rc, &info);
}

enum MHD_Result api_h_ckpt_list(api_call *k)
{
    json_t *out = NULL;
    if (!k->a->ck) return no_ckstore(k);
    if (!sched_trial_exists(k->a->s, k->id)) return api_no_such_trial(k);
    int rc = ckstore_list(k->a->ck, k->id, &out);
    if (rc) return api_send_rc(k->c, rc, &k->e, "trial");
    return api_send_json(k->c, 200, out);
}

/* GET /api/v1/checkpoints/{sha256} and GET /api/v1/objects/{sha256} (any
 * object of the store: checkpoints and code contexts; agents fetch with
 * this one): the object's bytes, sent from its file. */
enum MHD_Result api_h_ckpt_get(api_call *k)
{
    int fd = -1;
    int64_t size = 0;
    if (!k->a->ck) return no_ckstore(k);
    int rc = ckstore_open_object(k->a->ck, k->key, &fd, &size);
    if (rc == HF_EINVAL) return api_send_err(k->c, 400, "sha256", "not a SHA-256 (64 lowercase hex characters)");
    if (rc == HF_ENOTFOUND) return api_send_err(k->c, 404, NULL, "no such object %s", k->key);
    if (rc) return api_send_rc(k->c, rc, NULL, "checkpoint");
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)size, fd);
    if (!r) { close(fd); return MHD_NO; }
    const api_hdr h[] = {
        {"Content-Type", "application/octet-stream"},
        {SHA_HEADER, k->key},
        {"Cache-Control", "private, max-age=31536000, immutable"},   /* content-addressed */
        {NULL, NULL},
    };
    return api_queue(k->c, 200, r, h);
}

/* ---------- handlers: code contexts (docs/scheduler.md, "Code contexts") ---------- */

#define CONTEXT_MAX_BYTES ((int64_t)1 << 30)   /* code, not data sets: 1 GiB at most */

/* PUT /api/v1/contexts: a gzip'd tar of the user's code, streamed into the
 * store like a checkpoint upload (same checks, same guarantees), then
 * recorded as an uploaded context. */
enum MHD_Result api_h_ctx_put(api_call *k)
{
    ckstore_info info = {.step = 0};
    const char *sha;
    int64_t size;
    enum MHD_Result ret;
    if (!k->a->ck) return no_ckstore(k);
    if (k->begin) {
        if (upload_headers(k, &sha, &size, &ret)) return ret;
        if (size > CONTEXT_MAX_BYTES)
            return api_send_err(k->c, 413, "Content-Length", "%lld bytes: a context is at most %lld bytes",
                                (long long)size, (long long)CONTEXT_MAX_BYTES);
        return upload_open(k, sha, size, "--max-checkpoint-mb");
    }
    if (upload_commit(k, &info, &ret)) return ret;
    int rc = ckstore_context_record(k->a->ck, info.sha256, info.size);
    if (rc) return api_send_rc(k->c, rc, NULL, "context");
    return api_send_json(k->c, 201, json_pack("{sssI}", "sha256", info.sha256, "size", (json_int_t)info.size));
}

/* An experiment's "context" must name an object the store has (its form
 * is experiment_parse's to check). RET 0, or 1 with *ret. */
int api_exp_context_missing(api_call *k, enum MHD_Result *ret)
{
    const char *sha = json_string_value(json_object_get(k->body, "context"));
    int fd = -1;
    int64_t size;
    if (!sha || !ckstore_hash_valid(sha)) return 0;
    if (!k->a->ck) {
        *ret = api_send_err(k->c, 422, "context", "this scheduler has no object store to take a context from");
        return 1;
    }
    int rc = ckstore_open_object(k->a->ck, sha, &fd, &size);
    if (rc == 0) {
        close(fd);
        return 0;
    }
    if (rc == HF_ENOTFOUND)
        *ret = api_send_err(k->c, 422, "context", "no context %s in the store: upload it first (PUT /api/v1/contexts)",
                            sha);
    else
        *ret = api_send_rc(k->c, rc, NULL, "context");
    return 1;
}
