/*
 * agent_prep.c — preparing assignments on the agent's worker pool (see
 * agent_prep.h).
 *
 * Each submitted assignment becomes an item on p->items (queued or
 * running) and one pool job. The job checks for a kill, fetches the
 * restore (when asked), fetches and unpacks the context (when asked),
 * then moves the outcome to p->done and wakes the main loop. A kill
 * marks the item: a queued one then does no work, a running one is
 * reported as killed when its work ends (a transfer is not interrupted).
 * At agent_prep_free the pool is stopped with HF_POOL_CANCEL: a queued
 * job is dropped (job_drop frees it), a running one finishes first.
 *
 * The context's archive is fetched into <workdir>/context-tmp/ (a hard
 * link to the verified cache file, one name per trial, attempt and rank),
 * unpacked and removed.
 */
#include "agent_prep.h"

#include "agent_context.h"
#include "agent_fs.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_pool.h"
#include "hf_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct prep_item {
    agent_prep       *p;
    agent_spec       *spec;
    unsigned          what;           /* AGENT_PREP_* */
    int               canceled;       /* under p->mu */
    char              reason[64];
    struct prep_item *next;
} prep_item;

struct agent_prep {
    char             workdir[AGENT_PATH_MAX];
    char             tmpdir[AGENT_PATH_MAX];
    agent_objects   *ao;
    int              wake_fd;
    hf_pool         *pool;
    pthread_mutex_t  mu;              /* guards items and done */
    prep_item       *items;           /* queued or running */
    agent_prep_done *done;            /* ready to be taken */
    size_t           ndone, capdone;
};

int agent_prep_needed(const agent_spec *sp) { return sp->context_sha[0] != '\0'; }

static int same(const agent_spec *a, const agent_spec *b)
{
    return a->trial_id == b->trial_id && a->attempt == b->attempt && a->rank == b->rank;
}

/* ---------- the work ---------- */

/* The restore checkpoint into <workdir>/<checkpoint_dir>/<name> (from the
 * cache when it is there: a hard link, no copy). RET 0 with note, or HF_E*
 * with err. */
static int restore(agent_prep *p, const agent_spec *sp, char *note, size_t notelen, char *err, size_t errlen)
{
    char dir[2 * AGENT_PATH_MAX], dest[3 * AGENT_PATH_MAX], why[1024] = "";
    int64_t t0 = hf_mono_ms();
    hf_info("trial %lld attempt %lld: fetching checkpoint %s (%.12s, %lld bytes, step %lld of trial %lld)",
            (long long)sp->trial_id, (long long)sp->attempt, sp->restore_name, sp->restore_sha,
            (long long)sp->restore_size, (long long)sp->restore_step, (long long)sp->restore_trial);
    snprintf(dir, sizeof dir, "%s/%s", p->workdir, sp->checkpoint_dir);
    snprintf(dest, sizeof dest, "%s/%s", dir, sp->restore_name);
    int rc = agent_fs_mkdirs(dir);
    if (rc) snprintf(why, sizeof why, "cannot create %.900s: %s", dir, hf_strerror(rc));
    else rc = agent_objects_get(p->ao, sp->restore_sha, sp->restore_size, dest, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "cannot restore checkpoint %s (step %lld of trial %lld): %s", sp->restore_name,
                 (long long)sp->restore_step, (long long)sp->restore_trial, why);
        return rc;
    }
    snprintf(note, notelen, "restored checkpoint %s (step %lld of trial %lld, sha256 %.16s, %lld bytes) in %lld ms",
             sp->restore_name, (long long)sp->restore_step, (long long)sp->restore_trial, sp->restore_sha,
             (long long)sp->restore_size, (long long)(hf_mono_ms() - t0));
    return 0;
}

/* The code context: fetch, unpack. RET 0 with note, or HF_E* with err. */
static int context(agent_prep *p, const agent_spec *sp, char *note, size_t notelen, char *err, size_t errlen)
{
    char dir[AGENT_PATH_MAX], tmp[AGENT_PATH_MAX], why[400];
    int64_t t0 = hf_mono_ms(), files = 0, bytes = 0;
    int rc;
    if (snprintf(dir, sizeof dir, "%s/%s", p->workdir, sp->checkpoint_dir) >= (int)sizeof dir ||
        snprintf(tmp, sizeof tmp, "%s/%lld-%lld-%lld.tar.gz", p->tmpdir, (long long)sp->trial_id,
                 (long long)sp->attempt, (long long)sp->rank) >= (int)sizeof tmp) {
        snprintf(err, errlen, "code context: path too long");
        return HF_EINVAL;
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';                      /* the trial's directory (agent_spawn.h) */
    if ((rc = agent_fs_mkdirs(dir))) {
        snprintf(err, errlen, "code context: mkdir %.300s: %s", dir, hf_strerror(rc));
        return rc;
    }
    if ((rc = agent_objects_get(p->ao, sp->context_sha, sp->context_size, tmp, why, sizeof why))) {
        snprintf(err, errlen, "code context %.12s: cannot fetch it: %s", sp->context_sha, why);
        unlink(tmp);
        return rc;
    }
    rc = agent_context_unpack(tmp, dir, NULL, &files, &bytes, why, sizeof why);
    unlink(tmp);
    if (rc) {
        snprintf(err, errlen, "code context %.12s refused: %s", sp->context_sha, why);
        return rc;
    }
    snprintf(note, notelen, "code context %.12s: %lld files, %lld bytes unpacked into the trial's directory in "
             "%lld ms", sp->context_sha, (long long)files, (long long)bytes, (long long)(hf_mono_ms() - t0));
    return 0;
}

/* ---------- the items ---------- */

/* Unlink it from p->items (under mu). */
static void item_unlink(agent_prep *p, prep_item *it)
{
    for (prep_item **pp = &p->items; *pp; pp = &(*pp)->next)
        if (*pp == it) {
            *pp = it->next;
            return;
        }
}

/* Append d to the done list (under mu). On OOM the spec is dropped
 * (logged): the scheduler's assignment timeout takes it back. */
static void done_push(agent_prep *p, agent_prep_done *d)
{
    if (p->ndone == p->capdone) {
        size_t nc = p->capdone ? p->capdone * 2 : 8;
        agent_prep_done *nd = realloc(p->done, nc * sizeof *nd);
        if (!nd) {
            hf_error("trial %lld: out of memory after preparing it; dropped", (long long)d->spec->trial_id);
            agent_spec_free(d->spec);
            return;
        }
        p->done = nd;
        p->capdone = nc;
    }
    p->done[p->ndone++] = *d;
}

static void killed(agent_prep_done *d, const prep_item *it)
{
    d->rc = HF_ESTATE;
    d->restore_failed = 0;
    snprintf(d->err, sizeof d->err, "stopped before it started (%s)", it->reason);
}

/* The pool job of one assignment. */
static void job_run(hf_pool *pool, void *arg)
{
    prep_item *it = arg;
    agent_prep *p = it->p;
    agent_prep_done *d = calloc(1, sizeof *d);
    (void)pool;
    pthread_mutex_lock(&p->mu);
    int canceled = it->canceled;
    pthread_mutex_unlock(&p->mu);
    if (d && !canceled) {
        if (it->what & AGENT_PREP_RESTORE) {
            d->rc = restore(p, it->spec, d->restore_note, sizeof d->restore_note, d->err, sizeof d->err);
            d->restore_failed = d->rc != 0;
        }
        if (d->rc == 0 && (it->what & AGENT_PREP_CONTEXT))
            d->rc = context(p, it->spec, d->note, sizeof d->note, d->err, sizeof d->err);
    }
    pthread_mutex_lock(&p->mu);
    item_unlink(p, it);
    if (!d) {
        hf_error("trial %lld: out of memory while preparing it; dropped", (long long)it->spec->trial_id);
        agent_spec_free(it->spec);
    } else {
        d->spec = it->spec;
        if (it->canceled && (d->rc == 0 || canceled)) killed(d, it);
        done_push(p, d);
    }
    pthread_mutex_unlock(&p->mu);
    free(d);
    free(it);
    if (p->wake_fd >= 0) {
        ssize_t r = write(p->wake_fd, "p", 1);
        (void)r;
    }
}

/* A cancelling stop found the job queued: it never runs. */
static void job_drop(hf_pool *pool, void *arg)
{
    prep_item *it = arg;
    (void)pool;
    pthread_mutex_lock(&it->p->mu);
    item_unlink(it->p, it);
    pthread_mutex_unlock(&it->p->mu);
    agent_spec_free(it->spec);
    free(it);
}

/* ---------- the interface ---------- */

agent_prep *agent_prep_new(const char *workdir, agent_objects *ao, int wake_fd)
{
    agent_prep *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->ao = ao;
    p->wake_fd = wake_fd;
    if (snprintf(p->workdir, sizeof p->workdir, "%s", workdir) >= (int)sizeof p->workdir / 2 ||
        snprintf(p->tmpdir, sizeof p->tmpdir, "%s/context-tmp", workdir) >= (int)sizeof p->tmpdir ||
        agent_fs_mkdirs(p->tmpdir)) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    if (!(p->pool = hf_pool_new("hf-prep", AGENT_PREP_WORKERS, AGENT_PREP_QUEUE))) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return NULL;
    }
    return p;
}

void agent_prep_free(agent_prep *p)
{
    if (!p) return;
    hf_pool_free(p->pool);          /* queued jobs dropped, running ones finish */
    for (size_t i = 0; i < p->ndone; i++) agent_spec_free(p->done[i].spec);
    free(p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Is sp queued, in progress or waiting to be taken? Under mu. */
static int is_dup(agent_prep *p, const agent_spec *sp)
{
    for (prep_item *it = p->items; it; it = it->next)
        if (same(it->spec, sp)) return 1;
    for (size_t i = 0; i < p->ndone; i++)
        if (same(p->done[i].spec, sp)) return 1;
    return 0;
}

int agent_prep_submit(agent_prep *p, agent_spec *sp, unsigned what)
{
    prep_item *it = calloc(1, sizeof *it);
    int rc = it ? 0 : HF_ENOMEM;
    pthread_mutex_lock(&p->mu);
    if (rc == 0 && is_dup(p, sp)) rc = HF_EEXIST;
    if (rc == 0) {
        *it = (prep_item){.p = p, .spec = sp, .what = what, .next = p->items};
        p->items = it;
        /* Under mu: a job that runs at once must find its item listed. */
        rc = hf_pool_submit(p->pool, NULL, job_run, job_drop, it, 0);
        if (rc) p->items = it->next;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc) free(it);
    if (rc && rc != HF_ETOOBIG) agent_spec_free(sp);
    return rc == HF_ESTATE ? HF_ENOMEM : rc;
}

static int cancel_one(const agent_spec *sp, int64_t trial_id, int64_t attempt)
{
    return sp && (trial_id <= 0 || sp->trial_id == trial_id) && (attempt <= 0 || sp->attempt == attempt);
}

int agent_prep_cancel(agent_prep *p, int64_t trial_id, int64_t attempt, const char *reason)
{
    int n = 0;
    pthread_mutex_lock(&p->mu);
    for (prep_item *it = p->items; it; it = it->next)
        if (cancel_one(it->spec, trial_id, attempt)) {
            it->canceled = 1;
            snprintf(it->reason, sizeof it->reason, "%s", reason ? reason : "kill");
            n++;
        }
    for (size_t i = 0; i < p->ndone; i++) {
        agent_prep_done *d = &p->done[i];
        if (d->rc == 0 && cancel_one(d->spec, trial_id, attempt)) {
            d->rc = HF_ESTATE;
            snprintf(d->err, sizeof d->err, "stopped before it started (%s)", reason ? reason : "kill");
            n++;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return n > 0;
}

int agent_prep_take(agent_prep *p, agent_prep_done **out, size_t *n)
{
    pthread_mutex_lock(&p->mu);
    *out = p->done;
    *n = p->ndone;
    p->done = NULL;
    p->ndone = p->capdone = 0;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int agent_prep_pending(agent_prep *p)
{
    pthread_mutex_lock(&p->mu);
    int n = (int)p->ndone;
    for (prep_item *it = p->items; it; it = it->next) n++;
    pthread_mutex_unlock(&p->mu);
    return n;
}
