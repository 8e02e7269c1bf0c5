/*
 * agent_loop.c — the agent daemon: start-up, the main (supervisor) loop,
 * restores and shutdown; the heartbeat and long-poll threads that drive
 * the agent_link are in agent_beat.c, the state they share in
 * agent_loop.h (see agent.h for the threading model).
 *
 * Failure policy: the agent never exits because the scheduler or a trial
 * misbehaves. A failed registration or heartbeat is retried with
 * exponential backoff (from the heartbeat interval up to 5 s, logged on
 * the first failure and then every 30 s); meanwhile trials keep running
 * and their output waits in the bounded outbox. A 404 on heartbeat means
 * the scheduler forgot us (new database): register again, listing the
 * trials still running so they are re-adopted, not duplicated. The agent
 * also registers again after any connection failure or timeout before its
 * next heartbeat (idempotent: same name, same id), so a scheduler that was
 * restarted hears the running list first.
 *
 * Doorbell: a third thread keeps a long-poll open
 * (GET /api/v1/agents/{id}/wait, own HTTP handle); when the scheduler says
 * work is pending it wakes the heartbeat thread, which heartbeats at once
 * and gets the assignments or kills in that reply (the only delivery path).
 *
 * Duplicate-safe heartbeats: every heartbeat carries this process's random
 * "instance" id and a "batch" number. A batch that failed (timeout after
 * the scheduler may have committed it, 5xx, connection lost) is sent again
 * with the same number and the same items, so the scheduler can recognise
 * it and acknowledge it without storing its metrics and logs twice.
 */
#include "agent_loop.h"
#include "agent_gpu.h"
#include "agent_spawn.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define AGENT_FINAL_FLUSH_MS   3000    /* last heartbeat at shutdown */
#define AGENT_MAX_FETCHES      64      /* restores being fetched at once */

static volatile sig_atomic_t got_term;
static int term_fd = -1;

static void on_term(int sig)
{
    int saved = errno;
    got_term = sig;
    if (term_fd >= 0) {
        ssize_t r = write(term_fd, "t", 1);
        (void)r;
    }
    errno = saved;
}

/* ------------------------------------------------------------ start-up */

static int read_token(const char *path, char *out, size_t outlen)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int rc = HF_ENOTFOUND;
    if (!f) {
        hf_error("--token-file %s: %s", path, strerror(errno));
        return HF_EIO;
    }
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        p[strcspn(p, "\r\n")] = '\0';
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\0') continue;
        /* a scheduler's token file: take the agent's line */
        if (!strncmp(p, "user:", 5) || !strncmp(p, "admin:", 6) || !strncmp(p, "viewer:", 7)) continue;
        if (!strncmp(p, "agent:", 6)) p += 6;
        size_t n = strlen(p);
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) p[--n] = '\0';
        char *sp = strrchr(p, ' '), *tab = strrchr(p, '\t');   /* "agent:NAME TOKEN": the token */
        if (tab > sp) sp = tab;
        if (sp) {
            p = sp + 1;
            n = strlen(p);
        }
        if (n == 0 || n >= outlen) continue;
        memcpy(out, p, n + 1);
        rc = HF_OK;
        break;
    }
    fclose(f);
    if (rc) hf_error("--token-file %s: no token (a line 'TOKEN', 'agent:TOKEN' or 'agent:NAME TOKEN')", path);
    return rc;
}

/* The local address used to reach the scheduler (a UDP connect sends nothing). */
static void local_address(const char *url, char *out, size_t outlen)
{
    char host[256] = "", port[16] = "80";
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    if (!strncmp(url, "https", 5)) snprintf(port, sizeof port, "443");
    if (*p == '[') {
        const char *e = strchr(p, ']');
        if (e) {
            snprintf(host, sizeof host, "%.*s", (int)(e - p - 1), p + 1);
            p = e + 1;
        }
    } else {
        size_t n = strcspn(p, ":/");
        snprintf(host, sizeof host, "%.*s", (int)n, p);
        p += n;
    }
    if (*p == ':') snprintf(port, sizeof port, "%.*s", (int)strcspn(p + 1, "/"), p + 1);

    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    snprintf(out, outlen, "127.0.0.1");
    if (getaddrinfo(host, port, &hints, &res) || !res) return;
    int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0
        && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, out, (socklen_t)outlen, NULL, 0, NI_NUMERICHOST);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
}

/* -------------------------------------------------------------- main loop */

/* A random id for this process run (heartbeat "instance"). */
static void make_instance(char *out, size_t outlen)
{
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        v = ((uint64_t)hf_wall_ms() << 20) ^ (uint64_t)getpid() ^ (uint64_t)hf_mono_us();
    if (fd >= 0) close(fd);
    snprintf(out, outlen, "%016llx", (unsigned long long)v);
}

/* Start an assignment, or hand it to the preparation thread first when
 * it carries a code context (agent_context.h); sp is taken. */
static void start_or_prepare(agent *ag, agent_spec *sp)
{
    char err[1024];
    if (agent_prep_needed(sp) && !agent_sup_known(ag->sup, sp->trial_id, sp->attempt, sp->rank)) {
        if (agent_prep_submit(ag->prep, sp) == HF_EEXIST)
            hf_debug("trial %lld attempt %lld: being prepared already", (long long)sp->trial_id,
                     (long long)sp->attempt);
        return;
    }
    if (agent_sup_start(ag->sup, sp, err, sizeof err) == HF_EEXIST)
        hf_debug("trial %lld attempt %lld already runs here", (long long)sp->trial_id, (long long)sp->attempt);
    agent_spec_free(sp);
}

/* Start what the preparation thread finished (or report why not). */
static void handle_prepared(agent *ag)
{
    agent_prep_done *d = NULL;
    size_t n = 0;
    char err[1024];
    if (!ag->prep) return;   /* shut down */
    agent_prep_take(ag->prep, &d, &n);
    for (size_t i = 0; i < n; i++) {
        agent_spec *sp = d[i].spec;
        if (d[i].rc) {
            agent_sup_start_failed(ag->sup, sp, d[i].err);
        } else {
            char note[300];
            int len = snprintf(note, sizeof note, "[hyperfarm-agent] %s", d[i].note);
            hf_info("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, d[i].note);
            agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note,
                             len < (int)sizeof note ? (size_t)len : sizeof note - 1);
            agent_sup_start(ag->sup, sp, err, sizeof err);
        }
        agent_spec_free(sp);
    }
    free(d);
}

/* ------------------------------------------------------------ restores */

static void start_failed_event(agent *ag, const agent_spec *sp, const char *why)
{
    agent_outbox_event(ag->ob, json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                                         "attempt", (json_int_t)sp->attempt, "rank", (json_int_t)sp->rank,
                                         "type", "start_failed", "time", (json_int_t)hf_wall_ms(), "error", why));
}

/* The fetch thread: the checkpoint into <workdir>/<checkpoint_dir>/<name>
 * (from the cache when it is there: a hard link, no copy). */
static void *fetch_main(void *arg)
{
    fetch_job *f = arg;
    agent *ag = f->ag;
    const agent_spec *sp = f->sp;
    char dir[2 * AGENT_PATH_MAX], dest[3 * AGENT_PATH_MAX];
    char err[1024] = "";
    snprintf(dir, sizeof dir, "%s/%s", ag->workdir, sp->checkpoint_dir);
    snprintf(dest, sizeof dest, "%s/%s", dir, sp->restore_name);
    int rc = agent_fs_mkdirs(dir);
    if (rc) snprintf(err, sizeof err, "cannot create %.900s: %s", dir, hf_strerror(rc));
    else rc = agent_objects_get(ag->objs, sp->restore_sha, sp->restore_size, dest, err, sizeof err);
    pthread_mutex_lock(&ag->mu);
    f->rc = rc;
    snprintf(f->err, sizeof f->err, "%s", err);
    f->done = 1;
    pthread_mutex_unlock(&ag->mu);
    ssize_t w = write(ag->wake[1], "f", 1);
    (void)w;
    return NULL;
}

/* Is the file sp's restore would be written to the trial's own checkpoint,
 * reported here at a later step than the restore's? The store lags behind
 * the newest report while its upload is under way, and a trial that is
 * continued at once (an ASHA promotion, a restart) on the agent that ran
 * it would get an older checkpoint written over its newer file of the same
 * name (a program that keeps one file, say checkpoint.pt) and train those
 * epochs again. Then the local file is kept and nothing is fetched. */
static int restore_older_than_local(agent *ag, const agent_spec *sp, int64_t *local_step)
{
    char path[2048], dest[3 * AGENT_PATH_MAX];
    struct stat a, b;
    if (sp->restore_trial != sp->trial_id || !agent_upload_newest(ag->up, sp->trial_id, local_step, path, sizeof path))
        return 0;
    snprintf(dest, sizeof dest, "%s/%s/%s", ag->workdir, sp->checkpoint_dir, sp->restore_name);
    return *local_step > sp->restore_step && stat(path, &a) == 0 && stat(dest, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Fetch sp's restore in the background; sp is taken. A duplicate of an
 * assignment being fetched is dropped. */
static void fetch_start(agent *ag, agent_spec *sp)
{
    int n = 0;
    for (fetch_job *f = ag->fetches; f; f = f->next, n++)
        if (f->sp->trial_id == sp->trial_id && f->sp->attempt == sp->attempt && f->sp->rank == sp->rank) {
            agent_spec_free(sp);
            return;
        }
    fetch_job *f = n < AGENT_MAX_FETCHES ? calloc(1, sizeof *f) : NULL;
    if (!f) {
        start_failed_event(ag, sp, "cannot fetch its checkpoint: too many restores in progress");
        agent_spec_free(sp);
        return;
    }
    f->ag = ag;
    f->sp = sp;
    f->t0 = hf_mono_ms();
    if (pthread_create(&f->th, NULL, fetch_main, f)) {
        start_failed_event(ag, sp, "cannot fetch its checkpoint: no thread");
        agent_spec_free(sp);
        free(f);
        return;
    }
    hf_info("trial %lld attempt %lld: fetching checkpoint %s (%.12s, %lld bytes, step %lld of trial %lld)",
            (long long)sp->trial_id, (long long)sp->attempt, sp->restore_name, sp->restore_sha,
            (long long)sp->restore_size, (long long)sp->restore_step, (long long)sp->restore_trial);
    f->next = ag->fetches;
    ag->fetches = f;
}

/* A kill for a trial whose restore is being fetched: it does not start. */
static int fetch_cancel(agent *ag, int64_t trial_id, int64_t attempt)
{
    int hit = 0;
    pthread_mutex_lock(&ag->mu);
    for (fetch_job *f = ag->fetches; f; f = f->next)
        if (f->sp->trial_id == trial_id && (attempt <= 0 || f->sp->attempt == attempt)) f->canceled = hit = 1;
    pthread_mutex_unlock(&ag->mu);
    return hit;
}

/* Start (or fail) the trials whose fetch ended; all = wait for every one. */
static void fetch_reap(agent *ag, int all, int stopping)
{
    for (fetch_job **pp = &ag->fetches; *pp;) {
        fetch_job *f = *pp;
        pthread_mutex_lock(&ag->mu);
        int done = f->done;
        pthread_mutex_unlock(&ag->mu);
        if (!done && !all) { pp = &f->next; continue; }
        pthread_join(f->th, NULL);
        *pp = f->next;
        agent_spec *sp = f->sp;
        if (f->rc) {
            char why[1600];
            snprintf(why, sizeof why, "cannot restore checkpoint %s (step %lld of trial %lld): %s", sp->restore_name,
                     (long long)sp->restore_step, (long long)sp->restore_trial, f->err);
            hf_error("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, why);
            start_failed_event(ag, sp, why);
        } else if (f->canceled || stopping) {
            start_failed_event(ag, sp, stopping ? "agent shutting down" : "killed before it started");
        } else {
            char note[512];
            int n = snprintf(note, sizeof note, "[hyperfarm-agent] restored checkpoint %s (step %lld of trial %lld, "
                             "sha256 %.16s, %lld bytes) in %lld ms", sp->restore_name, (long long)sp->restore_step,
                             (long long)sp->restore_trial, sp->restore_sha, (long long)sp->restore_size,
                             (long long)(hf_mono_ms() - f->t0));
            agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note, (size_t)n);
            start_or_prepare(ag, sp);   /* its code context next, if any; sp is taken */
            sp = NULL;
        }
        agent_spec_free(sp);
        free(f);
    }
}

/* The uploader's gate: has the metric report up to seq been delivered? */
static int gate_delivered(void *ctx, uint64_t seq) { return agent_outbox_metrics_delivered(ctx, seq); }

/* Hooks of the supervisor into the uploader. */
static void hook_checkpoint(void *ctx, int64_t trial_id, int64_t attempt, int64_t step, const char *path)
{
    if (!((agent *)ctx)->cfg->checkpoint_upload) return;   /* --no-checkpoint-upload */
    agent *ag = ctx;   /* after its report (just queued by the supervisor) reached the scheduler */
    agent_upload_note_checkpoint_after(ag->up, trial_id, attempt, step, path, agent_outbox_last_seq(ag->ob));
}
static void hook_start(void *ctx, int64_t trial_id, const char *dir)
{
    agent_upload_note_start(((agent *)ctx)->up, trial_id, dir);
}
static void hook_exit(void *ctx, int64_t trial_id, const char *dir, int others)
{
    agent_upload_note_exit(((agent *)ctx)->up, trial_id, dir, others);
}

static void handle_inbox(agent *ag, int stopping)
{
    agent_reply *items;
    size_t n;

    pthread_mutex_lock(&ag->mu);
    items = ag->inbox;
    n = ag->ninbox;
    ag->inbox = NULL;
    ag->ninbox = ag->capinbox = 0;
    pthread_mutex_unlock(&ag->mu);

    for (size_t i = 0; i < n; i++) {
        agent_reply *r = &items[i];
        for (size_t k = 0; k < r->nkill; k++) {
            agent_killreq *kr = &r->kill[k];
            if (agent_sup_kill(ag->sup, kr->trial_id, kr->attempt, kr->grace_ms, kr->reason) == HF_ENOTFOUND &&
                !fetch_cancel(ag, kr->trial_id, kr->attempt) &&
                (!ag->prep || !agent_prep_cancel(ag->prep, kr->trial_id, kr->attempt, kr->reason)))
                hf_info("kill for trial %lld attempt %lld: not running here", (long long)kr->trial_id,
                        (long long)kr->attempt);
        }
        for (size_t k = 0; k < r->nassign; k++) {
            agent_spec *sp = r->assign[k];
            if (stopping) {
                /* shutting down: say so instead of starting it */
                agent_outbox_event(ag->ob, json_pack("{s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                                                     "attempt", (json_int_t)sp->attempt, "type", "start_failed",
                                                     "time", (json_int_t)hf_wall_ms(), "error", "agent shutting down"));
                continue;
            }
            r->assign[k] = NULL;   /* taken */
            int64_t local_step = 0;
            if (sp->has_restore && restore_older_than_local(ag, sp, &local_step)) {
                char note[512];
                int nn = snprintf(note, sizeof note, "[hyperfarm-agent] kept its own checkpoint %s of step %lld here "
                                  "(the store's newest, step %lld, is older: its upload was under way)",
                                  sp->restore_name, (long long)local_step, (long long)sp->restore_step);
                hf_info("trial %lld attempt %lld: %s", (long long)sp->trial_id, (long long)sp->attempt, note + 18);
                agent_outbox_log(ag->ob, sp->trial_id, sp->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, note,
                                 (size_t)nn < sizeof note ? (size_t)nn : sizeof note - 1);
                start_or_prepare(ag, sp);
            } else if (sp->has_restore) {
                fetch_start(ag, sp);   /* then start_or_prepare (fetch_reap) */
            } else {
                start_or_prepare(ag, sp);
            }
        }
        agent_reply_free(r);
    }
    free(items);
    handle_prepared(ag);
}

static void urge(agent *ag, int report)
{
    pthread_mutex_lock(&ag->mu);
    if (report) ag->report_urgent = 1;
    else ag->urgent = 1;
    pthread_cond_signal(&ag->cv);
    pthread_mutex_unlock(&ag->mu);
}

/* SIGTERM/SIGINT stop gracefully (through the wake pipe); SIGPIPE must not
 * kill us. */
static void install_signals(agent *ag)
{
    struct sigaction sa;
    term_fd = ag->wake[1];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* The trials' sandbox (docs/agent.md "Sandbox"): one per process, set up
 * and probed at start-up, so that a machine where bwrap is missing or
 * cannot create namespaces fails here with the reason, not at each trial.
 * RET 0 or an HF_E* code (logged). */
static agent_sandbox sandbox;

static int sandbox_start(agent_sup *sup, const agent_cfg *cfg, const char *workdir)
{
    char exe[AGENT_PATH_MAX], err[1024];
    int rc;
    if (!strcmp(cfg->sandbox, "off")) {
        hf_warn("--sandbox off: trials run as this agent's user and can read its token file, its configuration "
                "and every trial's files (docs/agent.md, Sandbox)");
        return HF_OK;
    }
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        hf_error("--sandbox on: cannot find the agent's own binary (/proc/self/exe): %s", strerror(errno));
        return HF_EIO;
    }
    exe[n] = '\0';
    agent_sandbox_cfg sc = {.workdir = workdir, .self_exe = exe, .token_file = cfg->token_file,
                            .config = cfg->config, .binds = cfg->sandbox_bind, .trial_user = cfg->trial_user,
                            .bwrap = cfg->bwrap};
    if ((rc = agent_sandbox_init(&sandbox, &sc, err, sizeof err)) || (rc = agent_sandbox_probe(&sandbox, err, sizeof err))) {
        hf_error("%s", err);
        return rc;
    }
    agent_sup_set_sandbox(sup, &sandbox);
    hf_info("trials run in a sandbox (%s%s%s, %d extra paths, data cache %s)", sandbox.bwrap,
            sandbox.drop ? " as user " : " in a user namespace", sandbox.drop ? sandbox.user : "", sandbox.nbinds,
            sandbox.cache[0] ? sandbox.cache : "off");
    return HF_OK;
}

/* Everything before the threads start: the work directory (created, made
 * absolute), the agent binary's directory, the token, GPUs, slots, name
 * and advertised host; then the outbox, supervisor, wake pipe, HTTP
 * handles and signal handlers. RET 0 or an HF_E* code (logged). */
static int start_up(agent *ag, const agent_cfg *cfg)
{
    char workdir[AGENT_PATH_MAX], self_dir[AGENT_PATH_MAX] = "", token[512] = "", host[256], name[256], err[512];
    json_t *gpus = NULL, *info = NULL;
    int rc;

    if ((rc = agent_fs_mkdirs(cfg->workdir)) || !realpath(cfg->workdir, workdir)) {
        hf_error("--workdir %s: cannot create or resolve: %s", cfg->workdir, rc ? hf_strerror(rc) : strerror(errno));
        rc = rc ? rc : HF_EIO;
        goto end;
    }
    ssize_t sl = readlink("/proc/self/exe", self_dir, sizeof self_dir - 1);
    if (sl > 0) {
        self_dir[sl] = '\0';
        char *slash = strrchr(self_dir, '/');
        if (slash) *slash = '\0';
    } else self_dir[0] = '\0';
    if (cfg->token_file && (rc = read_token(cfg->token_file, token, sizeof token))) goto end;
    if ((rc = agent_gpu_discover(cfg->gpus, &gpus, err, sizeof err))) {
        hf_error("%s", err);
        goto end;
    }
    int64_t slots = cfg->slots;
    if (slots <= 0) {
        slots = (int64_t)json_array_size(gpus);
        if (slots == 0) slots = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
    }
    agent_spawn_default_threads(sysconf(_SC_NPROCESSORS_ONLN), (long)slots);
    if (cfg->name && *cfg->name) snprintf(name, sizeof name, "%s", cfg->name);
    else if (gethostname(name, sizeof name)) snprintf(name, sizeof name, "agent");
    name[sizeof name - 1] = '\0';
    if (cfg->host && *cfg->host) snprintf(host, sizeof host, "%s", cfg->host);
    else local_address(cfg->scheduler, host, sizeof host);

    agent_outbox_limits lim = {.max_log_lines = (size_t)cfg->max_log_lines,
                               .max_log_bytes = (size_t)cfg->max_log_mb << 20,
                               .max_metrics = (size_t)cfg->max_metrics};
    info = json_pack("{s:s, s:I, s:O, s:s}", "name", name, "slots", (json_int_t)slots, "gpus", gpus, "host", host);
    if (!(ag->ob = agent_outbox_new(&lim))
        || !(ag->sup = agent_sup_new(workdir, self_dir[0] ? self_dir : NULL, cfg->grace_ms, ag->ob))
        || pipe2(ag->wake, O_CLOEXEC | O_NONBLOCK)) {
        hf_error("cannot initialise the agent: out of memory or descriptors");
        rc = HF_ENOMEM;
        goto end;
    }
    if ((rc = sandbox_start(ag->sup, cfg, workdir))) goto end;
    snprintf(ag->workdir, sizeof ag->workdir, "%s", workdir);
    if ((rc = agent_objects_open(workdir, cfg->scheduler, token[0] ? token : NULL, cfg->cache_mb << 20, &ag->objs, err,
                                 sizeof err))) {
        hf_error("%s", err);
        goto end;
    }
    agent_objects_set_cafile(ag->objs, cfg->ca_file);
    if (!(ag->up = agent_upload_new(ag->objs, workdir, cfg->keep_trial_dirs_s < 0 ? -1 : cfg->keep_trial_dirs_s * 1000))) {
        hf_error("cannot start the checkpoint uploader");
        rc = HF_ENOMEM;
        goto end;
    }
    agent_upload_set_gate(ag->up, gate_delivered, ag->ob);
    agent_sup_set_hooks(ag->sup, &(agent_sup_hooks){.ctx = ag, .on_checkpoint = hook_checkpoint,
                                                   .on_start = hook_start, .on_exit = hook_exit});
    ag->link = agent_link_new(cfg->scheduler, token[0] ? token : NULL, cfg->ca_file, (long)cfg->http_timeout_ms,
                              info);
    info = NULL;   /* owned (or freed) by agent_link_new */
    ag->poll = agent_poll_new(cfg->scheduler, token[0] ? token : NULL, cfg->ca_file, (long)cfg->http_timeout_ms,
                              &ag->cancel);
    if (!ag->link || !ag->poll) {
        hf_error("cannot initialise the HTTP client");
        rc = HF_ENOMEM;
        goto end;
    }
    if (!(ag->prep = agent_prep_new(workdir, ag->objs, ag->wake[1]))) {
        hf_error("cannot start the context preparation thread under %s", workdir);
        rc = HF_ENOMEM;
        goto end;
    }
    install_signals(ag);
    hf_info("hyperfarm-agent %s: name %s, %lld slots, %zu GPUs, workdir %s, scheduler %s, host %s",
            AGENT_VERSION, name, (long long)slots, json_array_size(gpus), workdir, cfg->scheduler, host);
end:
    memset(token, 0, sizeof token);
    json_decref(info);
    json_decref(gpus);
    return rc;
}

/* The main loop: supervise trials and start or stop what the heartbeat
 * thread received, until a signal stopped every trial; then give the
 * heartbeat thread up to AGENT_FINAL_FLUSH_MS to deliver the exit events. */
static void serve(agent *ag)
{
    int stopping = 0;
    int64_t stop_started = 0;
    agent_outbox_stats prev;
    agent_outbox_get_stats(ag->ob, &prev);
    uint64_t prompt_prev = 0;
    for (;;) {
        if (agent_sup_poll(ag->sup, 200, ag->wake[0])) {
            char junk[64];
            while (read(ag->wake[0], junk, sizeof junk) > 0) {}
        }
        if (got_term && !stopping) {
            stopping = 1;
            stop_started = hf_mono_ms();
            hf_info("signal %d: stopping %d trials (grace %lld ms) and exiting", (int)got_term,
                    agent_sup_count(ag->sup), (long long)ag->cfg->grace_ms);
            agent_sup_kill_all(ag->sup, -1, "agent shutdown");
            agent_prep_cancel(ag->prep, 0, 0, "agent shutdown");
        }
        handle_inbox(ag, stopping);
        fetch_reap(ag, 0, stopping);
        /* a trial started or ended: tell the scheduler soon */
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events > 0 && (st.events != prev.events || st.sent_events != prev.sent_events)) urge(ag, 0);
        prev = st;
        /* a report a searcher may stop the trial on (its prompt_metric):
         * deliver it now, so the stop comes back in this heartbeat's reply
         * (docs/agent.md), at most once per the scheduler's report_gap_ms */
        uint64_t prompt = agent_sup_prompt_reports(ag->sup);
        if (prompt != prompt_prev) urge(ag, 1);
        prompt_prev = prompt;
        if (stopping && agent_sup_count(ag->sup) == 0 && !ag->fetches && agent_prep_pending(ag->prep) == 0) break;
    }

    /* last heartbeat(s): deliver the exit events */
    int64_t t0 = hf_mono_ms();
    while (hf_mono_ms() - t0 < AGENT_FINAL_FLUSH_MS) {
        urge(ag, 0);   /* at least one; then 20 ms apart until they are delivered */
        agent_outbox_stats st;
        agent_outbox_get_stats(ag->ob, &st);
        if (st.events == 0 && st.metrics == 0) break;
        hf_sleep_ms(20);
    }
    hf_info("stopped after %lld ms", (long long)(hf_mono_ms() - stop_started));
}

/* Stop and join the threads that started (hb, pt: NULL = not started),
 * answer what is left in the inbox, and free everything. */
static void shut_down(agent *ag, pthread_t *hb, pthread_t *pt)
{
    if (hb || pt) {
        pthread_mutex_lock(&ag->mu);
        ag->stop = 1;
        atomic_store(&ag->cancel, 1);
        pthread_cond_signal(&ag->cv);
        pthread_cond_broadcast(&ag->pcv);
        pthread_mutex_unlock(&ag->mu);
        if (hb) pthread_join(*hb, NULL);
        if (pt) pthread_join(*pt, NULL);
    }
    term_fd = -1;
    agent_prep_free(ag->prep);   /* joins the thread: nothing is started past here */
    ag->prep = NULL;
    handle_inbox(ag, 1);
    fetch_reap(ag, 1, 1);
    agent_upload_free(ag->up);     /* before the supervisor: its hooks name the uploader */
    agent_sup_free(ag->sup);
    agent_objects_close(ag->objs);
    agent_link_free(ag->link);
    agent_poll_free(ag->poll);
    agent_outbox_free(ag->ob);
    for (int i = 0; i < 2; i++)
        if (ag->wake[i] >= 0) close(ag->wake[i]);
    pthread_mutex_destroy(&ag->mu);
    pthread_cond_destroy(&ag->cv);
    pthread_cond_destroy(&ag->pcv);
}

int agent_run(const agent_cfg *cfg)
{
    agent ag;
    pthread_t hb, pt;
    int hb_started = 0, poll_started = 0, rc;

    memset(&ag, 0, sizeof ag);
    ag.cfg = cfg;
    ag.wake[0] = ag.wake[1] = -1;
    pthread_mutex_init(&ag.mu, NULL);
    pthread_cond_init(&ag.cv, NULL);
    pthread_cond_init(&ag.pcv, NULL);
    atomic_init(&ag.cancel, 0);
    make_instance(ag.instance, sizeof ag.instance);
    ag.interval_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 1000;
    ag.report_gap_ms = AGENT_URGENT_GAP_MS;

    if ((rc = start_up(&ag, cfg))) goto end;
    if (pthread_create(&hb, NULL, agent_hb_main, &ag)) {
        hf_error("cannot start the heartbeat thread");
        rc = HF_ENOMEM;
        goto end;
    }
    hb_started = 1;
    if (pthread_create(&pt, NULL, agent_poll_main, &ag)) {
        hf_error("cannot start the long-poll thread");
        rc = HF_ENOMEM;
        goto end;
    }
    poll_started = 1;
    serve(&ag);
end:
    shut_down(&ag, hb_started ? &hb : NULL, poll_started ? &pt : NULL);
    return rc;
}
