/*
 * api_h_backup.c — the backup routes (api_h_backup.h), admins only:
 *
 *   POST /api/v1/backups {"dir": "/mnt/backup"}: queue an online snapshot
 *     into dir, a path on the scheduler's server, checked at once by
 *     backup_check_dir (absolute, no "." or "..", an existing directory,
 *     not the live database's own directory, not inside the checkpoint
 *     store). 202 {"id", "state": "queued", "dir"}; 400/404 field "dir";
 *     409 while another requested backup is queued or running; 503 when
 *     the process runs no backup service.
 *   GET /api/v1/backups/{id}: how it went (backup_job_json): state
 *     queued|running|done|failed, and when done the snapshot's path,
 *     sizes, objects copied/linked and duration; when failed the error.
 *
 * The backup itself runs on the backup service's thread "hf-backup"
 * (scheduler/store/backup_job.c), never here: libmicrohttpd binds each
 * connection to one pool thread, so a handler that copied the database
 * would stall every agent connection on its thread.
 */
#include "scheduler/api/api_h_backup.h"

#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/api/auth.h"
#include "scheduler/store/backup.h"

enum MHD_Result api_h_backup_take(api_call *k)
{
    char err[1024];
    const char *dir = NULL;
    json_error_t je;
    int64_t id = 0;
    if (k->role != AUTH_ADMIN) return api_send_err(k->c, 403, NULL, "backups are for admins");
    if (json_unpack_ex(k->body, &je, 0, "{s:s}", "dir", &dir))
        return api_send_err(k->c, 400, "dir", "expected {\"dir\": \"/absolute/path/on/the/scheduler\"}");
    int rc = backup_request(dir, k->user, &id, err, sizeof err);
    if (rc) {
        unsigned status = rc == HF_EINVAL ? 400 : rc == HF_ENOTFOUND ? 404 : rc == HF_ESTATE ? 409 : 503;
        return api_send_err(k->c, status, status == 400 || status == 404 ? "dir" : NULL, "%s", err);
    }
    hf_info("backup %lld into %s requested by %s", (long long)id, dir, k->user);
    return api_send_json(k->c, 202, json_pack("{sIssss}", "id", (json_int_t)id, "state", "queued", "dir", dir));
}

enum MHD_Result api_h_backup_get(api_call *k)
{
    json_t *out = NULL;
    if (k->role != AUTH_ADMIN) return api_send_err(k->c, 403, NULL, "backups are for admins");
    int rc = backup_job_json(k->id, &out);
    if (rc == HF_ENOTFOUND) return api_send_err(k->c, 404, "id", "no backup %lld (the last 16 are kept)", (long long)k->id);
    if (rc) return api_send_err(k->c, rc == HF_EUNSUP ? 503 : 500, NULL, "%s", hf_strerror(rc));
    return api_send_json(k->c, 200, out);
}
