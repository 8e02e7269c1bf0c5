/*
 * backup_job.c — the backup service (backup.h): one thread "hf-backup"
 * that takes the scheduled snapshots and the ones admins request, so a
 * backup never runs on an HTTP thread (libmicrohttpd binds each
 * connection to one pool thread: a handler that copied a database for a
 * minute would stall every agent connection on that thread — measured:
 * heartbeat p99 from 19 to 180 ms while backups ran in the request).
 *
 * State: one service per process (svc, NULL until backup_service_start),
 * its lock mu guarding the ring of the last BACKUP_JOBS requests and the
 * id counter. At most one request is queued or running at a time; the
 * thread runs it as soon as it is queued (kicked), and the scheduled
 * snapshot when its interval has passed. backup_take's own lock makes a
 * backup that overlaps another one (none here: one thread) HF_ESTATE.
 */
#include "scheduler/store/backup.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct backup_job {
    int64_t       id;            /* 0: free slot */
    int           state;         /* enum backup_state */
    char          dir[4096];
    char          user[64];
    char          err[512];
    int64_t       requested_at, ended_at;   /* ms since the epoch */
    backup_result res;
} backup_job;

typedef struct backup_svc {
    hf_thread      *th;
    const char     *db_path;
    ckstore        *ck;
    char           *dir;         /* scheduled snapshots' directory, or NULL */
    int64_t         interval_ms; /* 0: no schedule */
    int             keep;
    pthread_mutex_t mu;          /* guards jobs and next_id */
    backup_job      jobs[BACKUP_JOBS];
    int64_t         next_id;
} backup_svc;

static backup_svc *_Atomic svc;   /* set before the API may call in, cleared after it stopped */

static const char *const state_names[] = {"queued", "running", "done", "failed"};

/* The queued request, or NULL. Under mu. */
static backup_job *queued_job(backup_svc *b)
{
    for (int i = 0; i < BACKUP_JOBS; i++)
        if (b->jobs[i].id && b->jobs[i].state == BACKUP_QUEUED) return &b->jobs[i];
    return NULL;
}

/* Run the queued request, if any. */
static void run_request(backup_svc *b)
{
    static backup_result res;   /* this thread's only: 4 KiB off its stack */
    char dir[4096], err[512];
    pthread_mutex_lock(&b->mu);
    backup_job *j = queued_job(b);
    int64_t id = j ? j->id : 0;
    if (j) {
        j->state = BACKUP_RUNNING;
        snprintf(dir, sizeof dir, "%s", j->dir);
    }
    pthread_mutex_unlock(&b->mu);
    if (!id) return;
    int rc = backup_take(b->db_path, b->ck, dir, 0, 0, &res, err, sizeof err);
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < BACKUP_JOBS; i++) {
        backup_job *k = &b->jobs[i];
        if (k->id != id) continue;
        k->state = rc ? BACKUP_FAILED : BACKUP_DONE;
        k->ended_at = hf_wall_ms();
        k->res = res;
        snprintf(k->err, sizeof k->err, "%s", rc ? err : "");
    }
    pthread_mutex_unlock(&b->mu);
    if (rc) hf_warn("backup %lld into %s failed: %s", (long long)id, dir, err);
}

static void svc_main(hf_thread *t, void *arg)
{
    backup_svc *b = arg;
    static backup_result res;
    char err[512];
    int64_t next = b->interval_ms ? hf_mono_ms() + b->interval_ms : 0;
    for (;;) {
        int64_t wait = next ? next - hf_mono_ms() : 3600000;
        if (hf_thread_wait(t, wait > 0 ? wait : 0)) break;
        run_request(b);
        if (next && hf_mono_ms() >= next) {
            if (backup_take(b->db_path, b->ck, b->dir, b->keep, 0, &res, err, sizeof err))
                hf_error("scheduled backup into %s failed: %s", b->dir, err);
            next = hf_mono_ms() + b->interval_ms;
        }
    }
}

int backup_service_start(const char *db_path, ckstore *ck, const char *dir, int64_t interval_s, int keep)
{
    if (svc) return HF_ESTATE;
    backup_svc *b = calloc(1, sizeof *b);
    if (!b) return HF_ENOMEM;
    pthread_mutex_init(&b->mu, NULL);
    b->db_path = db_path;
    b->ck = ck;
    b->dir = dir ? strdup(dir) : NULL;
    b->interval_ms = dir ? interval_s * 1000 : 0;
    b->keep = keep;
    b->next_id = 1;
    backup_cancel(0);
    if ((dir && !b->dir) || hf_thread_start(&b->th, "hf-backup", svc_main, b)) {
        free(b->dir);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return HF_ENOMEM;
    }
    svc = b;
    return 0;
}

void backup_service_stop(void)
{
    backup_svc *b = svc;
    if (!b) return;
    backup_cancel(1);            /* a backup in progress ends at its next slice */
    hf_thread_stop_join(b->th);
    backup_cancel(0);
    svc = NULL;
    free(b->dir);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

int backup_request(const char *dir, const char *user, int64_t *id, char *err, size_t errlen)
{
    backup_svc *b = svc;
    if (!b) {
        snprintf(err, errlen, "backups are not available in this process");
        return HF_EUNSUP;
    }
    int rc = backup_check_dir(dir, b->db_path, b->ck ? ckstore_dir(b->ck) : NULL, err, errlen);
    if (rc) return rc;
    pthread_mutex_lock(&b->mu);
    backup_job *slot = NULL, *oldest = NULL;
    for (int i = 0; i < BACKUP_JOBS && rc == 0; i++) {
        backup_job *k = &b->jobs[i];
        if (k->id && (k->state == BACKUP_QUEUED || k->state == BACKUP_RUNNING)) {
            snprintf(err, errlen, "backup %lld is %s: one at a time", (long long)k->id, state_names[k->state]);
            rc = HF_ESTATE;
        } else if (!k->id && !slot) {
            slot = k;
        } else if (k->id && (!oldest || k->id < oldest->id)) {
            oldest = k;
        }
    }
    if (rc == 0) {
        if (!slot) slot = oldest;
        memset(slot, 0, sizeof *slot);
        slot->id = *id = b->next_id++;
        slot->state = BACKUP_QUEUED;
        slot->requested_at = hf_wall_ms();
        snprintf(slot->dir, sizeof slot->dir, "%s", dir);
        snprintf(slot->user, sizeof slot->user, "%s", user ? user : "");
    }
    pthread_mutex_unlock(&b->mu);
    if (rc == 0) hf_thread_kick(b->th);
    return rc;
}

int backup_job_json(int64_t id, json_t **out)
{
    backup_svc *b = svc;
    int rc = HF_ENOTFOUND;
    *out = NULL;
    if (!b) return HF_EUNSUP;
    pthread_mutex_lock(&b->mu);
    for (int i = 0; i < BACKUP_JOBS; i++) {
        const backup_job *k = &b->jobs[i];
        if (k->id != id || id == 0) continue;
        *out = json_pack("{sIsssssssIso}", "id", (json_int_t)k->id, "state", state_names[k->state], "dir", k->dir,
                         "user", k->user, "requested_at", (json_int_t)k->requested_at, "ended_at",
                         k->ended_at ? json_integer(k->ended_at) : json_null());
        if (*out && k->state == BACKUP_FAILED) json_object_set_new(*out, "error", json_string(k->err));
        if (*out && k->state == BACKUP_DONE) {
            const backup_result *r = &k->res;
            json_t *res = json_pack("{sssIsIsIsIsIsIsI}", "snapshot", r->snapshot, "db_bytes", (json_int_t)r->db_bytes,
                                    "objects", (json_int_t)r->objects, "objects_copied", (json_int_t)r->objects_copied,
                                    "objects_linked", (json_int_t)r->objects_linked, "objects_missing",
                                    (json_int_t)r->objects_missing, "bytes_copied", (json_int_t)r->bytes_copied,
                                    "duration_ms", (json_int_t)r->duration_ms);
            json_object_update(*out, res);
            json_decref(res);
        }
        rc = *out ? 0 : HF_ENOMEM;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}
