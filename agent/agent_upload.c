/*
 * agent_upload.c — the checkpoint uploader thread, "hf-upload" (see
 * agent_upload.h).
 *
 * State under u->mu: a FIFO of jobs (one per reported checkpoint) and a
 * list of trial directories (one per trial seen here) with their running
 * ranks and the time their last rank exited. The worker takes the first
 * job whose retry time has come, works on it without the lock, and puts
 * it back (failed, with a later retry time) or drops it; then it removes
 * the directories that are due.
 *
 * The queue on disk (<workdir>/uploads/, docs/agent.md "Checkpoints
 * travel"): job N is N.json (its record: trial, attempt, step, path, and
 * sha256/size once hashed) and N.ckpt (a hard link to the reported file,
 * when the link could be made). N.ckpt is linked before N.json is renamed
 * into place (written to N.json.tmp first), and on delivery or drop N.json
 * is unlinked before N.ckpt, so a record always names bytes of its own
 * step: a record without its link falls back to the trial's path only when
 * no link could ever be made. At start the records are read back in N
 * order; leftovers (*.tmp, a .ckpt without its record) are removed. A
 * stop keeps both files: only the scheduler's acknowledgement (or a drop)
 * removes them. The main thread writes records without fsync (a rename is
 * atomic against a killed process); the worker rewrites a record with
 * fsync once its first attempt failed, i.e. when it has to wait (against
 * a lost machine), so an upload that goes through at once costs no fsync.
 */
#include "agent_upload.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_json.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RETRY_FIRST_MS 1000
#define GATE_POLL_MS    20      /* re-check of a report not yet delivered */
#define RETRY_MAX_MS   30000
#define MAX_DIRS       4096
#define RECORD_MAX     16384          /* bytes of one N.json read back */

typedef struct up_job {
    int64_t trial_id, attempt, step;
    int64_t seq;                      /* N of uploads/N.json and N.ckpt */
    char    path[2048];               /* the file the trial reported */
    char    staged[2048];             /* uploads/N.ckpt, its hard link; "" = none */
    char    sha[AGENT_OBJECTS_HASH_LEN + 1];   /* "" until it is in the cache */
    int64_t size;
    int64_t next_mono, backoff;
    int     tries;
    int     synced;                   /* its record on disk is fsynced and current */
    uint64_t after;                   /* outbox seq of its metric report; uploaded once delivered (0 = now) */
} up_job;

typedef struct up_dir {
    int64_t trial_id;
    char    dir[2048];
    int     running;                  /* ranks of the trial running here */
    int64_t exited_mono;              /* when the last one exited, 0 = running or never */
    int64_t newest_step;              /* the newest checkpoint a rank reported here, -1 = none */
    char    newest_path[2048];
} up_dir;

struct agent_upload {
    agent_objects  *ao;
    char            dir[1900];        /* <workdir>/uploads */
    int64_t         keep_ms;
    hf_thread      *th;               /* "hf-upload" */
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             stop;
    up_job        **q;
    size_t          nq;
    up_dir         *dirs;
    size_t          ndirs;
    int             busy_trial_set;   /* the worker holds a job of busy_trial */
    int64_t         busy_trial;
    int64_t         done, dropped;
    int64_t         next_seq;         /* N of the next job (under mu) */
    int             ready;            /* registered: the worker may upload */
    int           (*delivered)(void *ctx, uint64_t seq);   /* the gate (agent_upload_set_gate) */
    void           *gate_ctx;
};

/* ---------- jobs ---------- */

/* uploads/N.<ext> of job j. */
static void job_file(const agent_upload *u, const up_job *j, const char *ext, char *out, size_t len)
{
    snprintf(out, len, "%s/%lld.%s", u->dir, (long long)j->seq, ext);
}

/* Write j's record atomically (N.json.tmp, renamed to N.json); sync: fsync
 * the file and the directory too. RET 0 or HF_E*. */
static int job_save(const agent_upload *u, const up_job *j, int sync)
{
    char rec[2000], tmp[2010];
    int fd = -1, rc = HF_ENOMEM;
    json_t *o = json_pack("{sIsIsIss}", "trial", (json_int_t)j->trial_id, "attempt", (json_int_t)j->attempt, "step",
                          (json_int_t)j->step, "path", j->path);
    if (o && j->sha[0]) {
        json_object_set_new(o, "sha256", json_string(j->sha));
        json_object_set_new(o, "size", json_integer(j->size));
    }
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!txt) return rc;
    job_file(u, j, "json", rec, sizeof rec);
    snprintf(tmp, sizeof tmp, "%s.tmp", rec);
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) { rc = hf_err_from_errno(errno); goto end; }
    if ((rc = hf_file_write_all(fd, txt, strlen(txt)))) goto end;
    if (sync && fsync(fd) != 0) { rc = hf_err_from_errno(errno); goto end; }
    close(fd);
    fd = -1;
    if (rename(tmp, rec) != 0) { rc = hf_err_from_errno(errno); goto end; }
    if (sync) hf_file_fsync_dir(u->dir);
    rc = 0;
end:
    if (fd >= 0) close(fd);
    if (rc) unlink(tmp);
    free(txt);
    return rc;
}

/* Delivered or dropped: its record first, then its staged link (see the
 * file comment), then the job. */
static void job_discard(const agent_upload *u, up_job *j)
{
    char f[2200];
    if (!j) return;
    job_file(u, j, "json", f, sizeof f);
    unlink(f);
    if (j->staged[0]) unlink(j->staged);
    free(j);
}

static int pending_for(const agent_upload *u, int64_t trial_id)
{
    if (u->busy_trial_set && u->busy_trial == trial_id) return 1;
    for (size_t i = 0; i < u->nq; i++)
        if (u->q[i]->trial_id == trial_id) return 1;
    return 0;
}

void agent_upload_set_gate(agent_upload *u, int (*delivered)(void *ctx, uint64_t seq), void *ctx)
{
    pthread_mutex_lock(&u->mu);
    u->delivered = delivered;
    u->gate_ctx = ctx;
    pthread_mutex_unlock(&u->mu);
}

static up_dir *dir_find(agent_upload *u, int64_t trial_id);

void agent_upload_note_checkpoint(agent_upload *u, int64_t trial_id, int64_t attempt, int64_t step, const char *path)
{
    agent_upload_note_checkpoint_after(u, trial_id, attempt, step, path, 0);
}

void agent_upload_note_checkpoint_after(agent_upload *u, int64_t trial_id, int64_t attempt, int64_t step,
                                        const char *path, uint64_t after)
{
    up_job *j = calloc(1, sizeof *j);
    if (!j) { hf_error("checkpoint %s of trial %lld: out of memory: not uploaded", path, (long long)trial_id); return; }
    j->after = after;
    j->trial_id = trial_id;
    j->attempt = attempt;
    j->step = step < 0 ? 0 : step;
    snprintf(j->path, sizeof j->path, "%s", path);
    pthread_mutex_lock(&u->mu);
    j->seq = u->next_seq++;
    pthread_mutex_unlock(&u->mu);
    /* a cheap link(2) now, so the trial may replace its file meanwhile */
    job_file(u, j, "ckpt", j->staged, sizeof j->staged);
    unlink(j->staged);
    if (link(path, j->staged) != 0) {
        hf_warn("checkpoint %s of trial %lld: cannot link it into %s (%s): it is read from its path when uploaded",
                path, (long long)trial_id, u->dir, strerror(errno));
        j->staged[0] = 0;
    }
    int rc = job_save(u, j, 0);
    if (rc) hf_warn("checkpoint %s of trial %lld: cannot write its upload record in %s (%s): an agent restart "
                    "before it is uploaded loses it", path, (long long)trial_id, u->dir, hf_strerror(rc));
    pthread_mutex_lock(&u->mu);
    up_dir *d = dir_find(u, trial_id);
    if (d && j->step >= d->newest_step) {
        d->newest_step = j->step;
        snprintf(d->newest_path, sizeof d->newest_path, "%s", path);
    }
    if (u->nq >= AGENT_UPLOAD_MAX) {
        /* full: drop this trial's oldest waiting report, else the oldest of all */
        size_t k = 0;
        for (size_t i = 0; i < u->nq; i++)
            if (u->q[i]->trial_id == trial_id) { k = i; break; }
        hf_warn("upload queue full: dropping checkpoint %s of trial %lld", u->q[k]->path, (long long)u->q[k]->trial_id);
        job_discard(u, u->q[k]);
        memmove(&u->q[k], &u->q[k + 1], (u->nq - k - 1) * sizeof *u->q);
        u->nq--;
        u->dropped++;
    }
    u->q[u->nq++] = j;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

/* ---------- trial directories ---------- */

static up_dir *dir_find(agent_upload *u, int64_t trial_id)
{
    for (size_t i = 0; i < u->ndirs; i++)
        if (u->dirs[i].trial_id == trial_id) return &u->dirs[i];
    return NULL;
}

int agent_upload_newest(agent_upload *u, int64_t trial_id, int64_t *step, char *path, size_t pathlen)
{
    pthread_mutex_lock(&u->mu);
    up_dir *d = dir_find(u, trial_id);
    int found = d && d->newest_step >= 0;
    if (found) {
        *step = d->newest_step;
        snprintf(path, pathlen, "%s", d->newest_path);
    }
    pthread_mutex_unlock(&u->mu);
    return found;
}

void agent_upload_note_start(agent_upload *u, int64_t trial_id, const char *dir)
{
    pthread_mutex_lock(&u->mu);
    up_dir *d = dir_find(u, trial_id);
    if (!d && u->ndirs < MAX_DIRS) {
        d = &u->dirs[u->ndirs++];
        memset(d, 0, sizeof *d);
        d->trial_id = trial_id;
        d->newest_step = -1;
    }
    if (d) {
        snprintf(d->dir, sizeof d->dir, "%s", dir);
        d->running++;
        d->exited_mono = 0;
    }
    pthread_mutex_unlock(&u->mu);
}

void agent_upload_note_exit(agent_upload *u, int64_t trial_id, const char *dir, int others_here)
{
    (void)dir;
    pthread_mutex_lock(&u->mu);
    up_dir *d = dir_find(u, trial_id);
    if (d) {
        d->running = others_here;
        if (!others_here) d->exited_mono = hf_mono_ms();
    }
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        hf_warn("removing %s: %s", path, strerror(errno));
    (void)type;
    return 0;
}

/* Remove the directories that are due (called by the worker, unlocked
 * for the removal itself). */
static void sweep_dirs(agent_upload *u)
{
    char dir[2048];
    for (;;) {
        dir[0] = 0;
        pthread_mutex_lock(&u->mu);
        int64_t now = hf_mono_ms();
        for (size_t i = 0; i < u->ndirs; i++) {
            up_dir *d = &u->dirs[i];
            if (d->running || !d->exited_mono || u->keep_ms < 0 || now - d->exited_mono < u->keep_ms) continue;
            if (pending_for(u, d->trial_id)) continue;
            snprintf(dir, sizeof dir, "%s", d->dir);
            hf_info("trial %lld is over here and its checkpoints are uploaded: removing %s (the object cache "
                    "keeps them)", (long long)d->trial_id, dir);
            u->dirs[i] = u->dirs[--u->ndirs];
            break;
        }
        pthread_mutex_unlock(&u->mu);
        if (!dir[0]) return;
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* ---------- the worker ---------- */

/* Lowest CPU and I/O priority for this thread (Linux: per thread). */
static void lower_priority(void)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (setpriority(PRIO_PROCESS, (id_t)tid, 19) != 0) hf_debug("uploader: setpriority: %s", strerror(errno));
#ifdef SYS_ioprio_set
    /* IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_IDLE = 3 (<< 13) */
    if (syscall(SYS_ioprio_set, 1, (int)tid, 3 << 13) != 0) hf_debug("uploader: ioprio_set: %s", strerror(errno));
#endif
}

/* One attempt at job j. RET 0 done, 1 retry later, -1 drop. */
static int work(agent_upload *u, up_job *j)
{
    char err[1024], name[256];
    int64_t size = 0;
    int rc = 0;
    if (!j->sha[0]) {
        const char *src = j->staged[0] ? j->staged : j->path;
        rc = agent_objects_add(u->ao, src, j->sha, &size, err, sizeof err);
        if (rc == HF_ENOTFOUND) {
            hf_warn("checkpoint %s of trial %lld is gone before it was uploaded: %s", j->path, (long long)j->trial_id, err);
            return -1;
        }
        if (rc) {
            j->sha[0] = 0;
            hf_warn("checkpoint %s of trial %lld: %s; retrying", j->path, (long long)j->trial_id, err);
            return 1;
        }
        j->size = size;
        j->synced = 0;       /* the record gains the hash when it next waits */
    }
    const char *base = strrchr(j->path, '/');
    snprintf(name, sizeof name, "%.255s", base ? base + 1 : j->path);
    int64_t t0 = hf_mono_ms();
    rc = agent_objects_upload(u->ao, j->sha, j->trial_id, j->step, j->attempt, name, err, sizeof err);
    if (rc == 0) {
        hf_info("checkpoint %s of trial %lld (step %lld) uploaded as %.12s in %lld ms", name, (long long)j->trial_id,
                (long long)j->step, j->sha, (long long)(hf_mono_ms() - t0));
        return 0;
    }
    if (rc == HF_ECORRUPT || (rc == HF_ENOTFOUND && strstr(err, "no longer in the cache"))) {
        /* the scheduler saw other bytes, or the cache lost it: from the file again */
        hf_warn("%s; hashing the file again", err);
        j->sha[0] = 0;
        return ++j->tries > 5 ? -1 : 1;
    }
    if (rc == HF_ENOTFOUND || rc == HF_ETOOBIG || rc == HF_EINVAL) {
        hf_error("%s: checkpoint %s not uploaded", err, j->path);
        return -1;
    }
    hf_warn("%s; retrying", err);
    return 1;
}

/* The uploader thread: stopped through u->stop under u->mu (its own cv,
 * which the note_* calls signal too). */
static void worker(hf_thread *t, void *arg)
{
    agent_upload *u = arg;
    (void)t;
    lower_priority();
    pthread_mutex_lock(&u->mu);
    while (!u->stop) {
        int64_t now = hf_mono_ms(), wait = 1000;
        up_job *j = NULL;
        for (size_t i = 0; u->ready && i < u->nq; i++) {
            if (u->q[i]->next_mono > now) {
                if (u->q[i]->next_mono - now < wait) wait = u->q[i]->next_mono - now;
                continue;
            }
            if (u->q[i]->after && u->delivered && !u->delivered(u->gate_ctx, u->q[i]->after)) {
                if (wait > GATE_POLL_MS) wait = GATE_POLL_MS;   /* its metric report is still on the way */
                continue;
            }
            u->q[i]->after = 0;
            j = u->q[i];
            memmove(&u->q[i], &u->q[i + 1], (u->nq - i - 1) * sizeof *u->q);
            u->nq--;
            break;
        }
        if (!j) {
            pthread_mutex_unlock(&u->mu);
            sweep_dirs(u);
            pthread_mutex_lock(&u->mu);
            if (!u->stop) {
                struct timespec ts = hf_deadline(CLOCK_REALTIME, wait);
                pthread_cond_timedwait(&u->cv, &u->mu, &ts);
            }
            continue;
        }
        u->busy_trial_set = 1;
        u->busy_trial = j->trial_id;
        pthread_mutex_unlock(&u->mu);
        int r = work(u, j);
        /* it waits: make its record durable (with its hash, so a restart
         * skips the hashing while the cache holds the object) */
        if (r > 0 && !j->synced) j->synced = job_save(u, j, 1) == 0;
        pthread_mutex_lock(&u->mu);
        u->busy_trial_set = 0;
        if (r > 0 && u->nq < AGENT_UPLOAD_MAX) {
            j->backoff = j->backoff ? j->backoff * 2 : RETRY_FIRST_MS;
            if (j->backoff > RETRY_MAX_MS) j->backoff = RETRY_MAX_MS;
            j->next_mono = hf_mono_ms() + j->backoff;
            u->q[u->nq++] = j;
            continue;
        }
        if (r == 0) u->done++;
        else u->dropped++;
        pthread_mutex_unlock(&u->mu);
        job_discard(u, j);
        pthread_mutex_lock(&u->mu);
    }
    pthread_mutex_unlock(&u->mu);
}

/* ---------- the queue read back at start ---------- */

/* Job from record file rec (uploads/N.json): RET the job (staged set when
 * N.ckpt exists), or NULL with a message in err (a malformed record). */
static up_job *job_load(const agent_upload *u, int64_t seq, const char *rec, char *err, size_t errlen)
{
    static const char *const keys[] = {"trial", "attempt", "step", "path", "sha256", "size", NULL};
    struct stat sb;
    json_error_t je;
    hf_jerr e = {0};
    const char *path = NULL, *sha = NULL;
    up_job *j = NULL;
    json_t *o = NULL;
    if (stat(rec, &sb) != 0 || sb.st_size > RECORD_MAX) {
        snprintf(err, errlen, "unreadable or larger than %d bytes", RECORD_MAX);
        return NULL;
    }
    if (!(o = json_load_file(rec, JSON_REJECT_DUPLICATES, &je))) {
        snprintf(err, errlen, "not JSON: %s (line %d)", je.text, je.line);
        return NULL;
    }
    if (!(j = calloc(1, sizeof *j))) { snprintf(err, errlen, "out of memory"); goto end; }
    j->seq = seq;
    j->size = 0;
    if (hf_json_only_keys(o, "", keys, &e) || hf_json_get_int(o, "", "trial", 1, 1, INT64_MAX, &j->trial_id, &e) ||
        hf_json_get_int(o, "", "attempt", 1, 0, INT32_MAX, &j->attempt, &e) ||
        hf_json_get_int(o, "", "step", 1, 0, INT64_MAX, &j->step, &e) ||
        hf_json_get_string(o, "", "path", 1, sizeof j->path - 1, &path, &e) ||
        hf_json_get_string(o, "", "sha256", 0, AGENT_OBJECTS_HASH_LEN, &sha, &e) ||
        hf_json_get_int(o, "", "size", 0, 0, INT64_MAX, &j->size, &e)) {
        snprintf(err, errlen, "%.200s: %.200s", e.field[0] ? e.field : "record", e.msg);
        goto fail;
    }
    if (path[0] != '/') { snprintf(err, errlen, "path: must be absolute"); goto fail; }
    if (sha && (strlen(sha) != AGENT_OBJECTS_HASH_LEN || strspn(sha, "0123456789abcdef") != AGENT_OBJECTS_HASH_LEN)) {
        snprintf(err, errlen, "sha256: must be 64 lowercase hex characters");
        goto fail;
    }
    snprintf(j->path, sizeof j->path, "%s", path);
    if (sha) snprintf(j->sha, sizeof j->sha, "%s", sha);
    job_file(u, j, "ckpt", j->staged, sizeof j->staged);
    if (lstat(j->staged, &sb) != 0 || !S_ISREG(sb.st_mode)) j->staged[0] = 0;
    j->synced = 1;
    goto end;
fail:
    free(j);
    j = NULL;
end:
    json_decref(o);
    return j;
}

static int job_cmp(const void *a, const void *b)
{
    const up_job *x = *(up_job *const *)a, *y = *(up_job *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* "N.ext" with N a decimal >= 0: RET N, else -1. */
static int64_t seq_of(const char *name, const char *ext)
{
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || dot - name > 18 || strcmp(dot + 1, ext)) return -1;
    int64_t n = 0;
    for (const char *p = name; p < dot; p++) {
        if (*p < '0' || *p > '9') return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* Read the queue left in u->dir by an earlier run (see the file comment).
 * RET 0 or HF_E* (the directory cannot be made or read). */
static int queue_load(agent_upload *u)
{
    char f[2300], err[600];
    struct dirent *de;
    if (mkdir(u->dir, 0755) != 0 && errno != EEXIST) return hf_err_from_errno(errno);
    DIR *d = opendir(u->dir);
    if (!d) return hf_err_from_errno(errno);
    while ((de = readdir(d)) != NULL) {
        int64_t seq = seq_of(de->d_name, "json");
        if (seq < 0) continue;
        if (seq >= u->next_seq) u->next_seq = seq + 1;
        snprintf(f, sizeof f, "%s/%s", u->dir, de->d_name);
        up_job *j = job_load(u, seq, f, err, sizeof err);
        if (!j) {
            hf_error("upload record %s: %s: removed (its checkpoint is not uploaded)", f, err);
            unlink(f);
            continue;
        }
        if (u->nq >= AGENT_UPLOAD_MAX) {
            hf_warn("upload record %s: more than %d waiting: dropped", f, AGENT_UPLOAD_MAX);
            job_discard(u, j);
            continue;
        }
        u->q[u->nq++] = j;
    }
    /* leftovers: half-written records, links whose record is gone */
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
        int64_t seq = seq_of(de->d_name, "ckpt");
        size_t n = strlen(de->d_name);
        int tmp = n > 9 && !strcmp(de->d_name + n - 9, ".json.tmp");
        if (seq < 0 && !tmp) continue;
        if (seq >= 0) {
            snprintf(f, sizeof f, "%s/%lld.json", u->dir, (long long)seq);
            if (access(f, F_OK) == 0) continue;
        }
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    qsort(u->q, u->nq, sizeof *u->q, job_cmp);
    if (u->nq)
        hf_info("%zu checkpoints reported before this start are not uploaded yet: uploading them once registered "
                "(%s)", u->nq, u->dir);
    return 0;
}

agent_upload *agent_upload_new(agent_objects *ao, const char *workdir, int64_t keep_dirs_ms)
{
    agent_upload *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->ao = ao;
    u->keep_ms = keep_dirs_ms;
    u->q = calloc(AGENT_UPLOAD_MAX, sizeof *u->q);
    u->dirs = calloc(MAX_DIRS, sizeof *u->dirs);
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    int rc = HF_ENOMEM;
    if (u->q && u->dirs && snprintf(u->dir, sizeof u->dir, "%s/uploads", workdir) < (int)sizeof u->dir &&
        (rc = queue_load(u)))
        hf_error("checkpoint upload queue %s: %s", u->dir, hf_strerror(rc));
    if (rc || hf_thread_start(&u->th, "hf-upload", worker, u)) {
        for (size_t i = 0; u->q && i < u->nq; i++) free(u->q[i]);
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->cv);
        free(u->q);
        free(u->dirs);
        free(u);
        return NULL;
    }
    return u;
}

void agent_upload_free(agent_upload *u)
{
    if (!u) return;
    pthread_mutex_lock(&u->mu);
    u->stop = 1;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
    hf_thread_stop_join(u->th);
    if (u->nq) hf_warn("uploader stopped with %zu checkpoints not uploaded: kept in %s for the next start", u->nq, u->dir);
    for (size_t i = 0; i < u->nq; i++) free(u->q[i]);   /* their files stay: the queue on disk */
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u->q);
    free(u->dirs);
    free(u);
}

void agent_upload_set_agent(agent_upload *u, int64_t agent_id)
{
    agent_objects_set_agent(u->ao, agent_id);
    pthread_mutex_lock(&u->mu);
    if (agent_id > 0) u->ready = 1;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

void agent_upload_stats(agent_upload *u, int64_t *pending, int64_t *done, int64_t *dropped)
{
    pthread_mutex_lock(&u->mu);
    *pending = (int64_t)u->nq + u->busy_trial_set;
    *done = u->done;
    *dropped = u->dropped;
    pthread_mutex_unlock(&u->mu);
}
