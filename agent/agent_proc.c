/*
 * agent_proc.c — trial supervisor (see agent_proc.h for the contract).
 *
 * The workload: a handful of trials per agent (one per slot, at most
 * AGENT_MAX_TRIALS), each printing from a few lines per minute to, in the
 * worst case, as fast as a pipe goes. The table of trials is a plain array
 * scanned linearly; the poll set is rebuilt every call. Memory per trial is
 * bounded by two line buffers of AGENT_LINE_MAX bytes; everything else goes
 * into the bounded outbox.
 */
#include "agent_proc.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_metric.h"
#include "hf_buf.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum { TRIAL_RUNNING = 0, TRIAL_STOPPING };

typedef struct agent_trial {
    int64_t  trial_id, attempt, experiment_id, rank, grace_ms;
    pid_t    pid;                 /* also the process group id */
    int      fd[2];               /* stdout, stderr read ends; -1 once closed */
    hf_buf   line[2];             /* partial line per stream */
    size_t   skip[2];             /* bytes dropped of the current over-long line */
    int      state;
    int      reaped;
    int      exit_code, signal;
    int64_t  kill_deadline;       /* monotonic ms, 0 = none */
    int      killed_hard;
    int64_t  reaped_at;           /* monotonic ms */
    int64_t  rate_window;         /* monotonic second of the current rate window */
    uint64_t rate_lines, rate_suppressed;
    uint64_t lines, metrics, bad_metrics;
    char     dir[AGENT_PATH_MAX];
    char     control[AGENT_PATH_MAX];
} agent_trial;

#define AGENT_DONE_KEYS 4096

struct agent_sup {
    agent_outbox *ob;
    char          workdir[AGENT_PATH_MAX];
    char          self_dir[AGENT_PATH_MAX];
    int64_t       grace_ms;
    agent_trial  *t[AGENT_MAX_TRIALS];
    int           n;
    /* (trial, attempt, rank) of the last AGENT_DONE_KEYS ranks that ended
     * here. An assignment can arrive twice (a reply lost with a scheduler
     * restart is re-sent both by re-registration and by the repeated
     * batch); a quick trial may have ended before the copy arrives, and
     * must not run a second time. A real retry always has a new attempt. */
    int64_t       done[AGENT_DONE_KEYS][3];
    unsigned      ndone;
};

static int done_has(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    unsigned n = s->ndone < AGENT_DONE_KEYS ? s->ndone : AGENT_DONE_KEYS;
    for (unsigned i = 0; i < n; i++)
        if (s->done[i][0] == trial_id && s->done[i][1] == attempt && s->done[i][2] == rank) return 1;
    return 0;
}

static void done_add(agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    int64_t *k = s->done[s->ndone++ % AGENT_DONE_KEYS];
    k[0] = trial_id;
    k[1] = attempt;
    k[2] = rank;
}

/* SIGCHLD self-pipe (process-wide; see agent_sup_new). */
static int chld_pipe[2] = {-1, -1};

static void on_sigchld(int sig)
{
    int saved = errno;
    (void)sig;
    if (chld_pipe[1] >= 0) {
        ssize_t r = write(chld_pipe[1], "c", 1);
        (void)r;
    }
    errno = saved;
}

/* ---------------------------------------------------------------- spec */

void agent_spec_free(agent_spec *s)
{
    if (!s) return;
    for (char **p = s->argv; p && *p; p++) free(*p);
    for (char **p = s->env; p && *p; p++) free(*p);
    free(s->argv);
    free(s->env);
    free(s->hostfile);
    free(s);
}

/* A host name or address as Open MPI's host file takes it: letters,
 * digits, '.', '-', '_', ':' (IPv6), 1..255 bytes. Nothing else can reach
 * the file (no spaces, newlines or '#'). */
static int host_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 255 || h[0] == '-') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-'
              || c == '_' || c == ':'))
            return 0;
    }
    return 1;
}

/* "launcher", "hold", "hosts" of an assignment. RET 0 or HF_EINVAL. */
static int parse_launcher(const json_t *a, const char *path, agent_spec *s, hf_jerr *e)
{
    const char *l = NULL;
    json_t *hosts = NULL, *hold = json_object_get(a, "hold");
    char fp[256], ip[256];
    hf_buf b;
    int rc;
    if ((rc = hf_json_get_string(a, path, "launcher", 0, 16, &l, e))) return rc;
    if ((rc = hf_json_get_array(a, path, "hosts", 0, AGENT_MAX_HOSTS, &hosts, e))) return rc;
    if (hold && !json_is_boolean(hold)) return hf_jerr_set(e, path, "hold", "must be a boolean");
    if (!l) {
        if (hosts || json_is_true(hold)) return hf_jerr_set(e, path, "launcher", "required with hosts or hold");
        return 0;
    }
    if (strcmp(l, "mpirun")) return hf_jerr_set(e, path, "launcher", "must be \"mpirun\", got \"%s\"", l);
    s->launcher = 1;
    s->hold = json_is_true(hold);
    if (s->hold) return 0;
    if (!hosts || json_array_size(hosts) == 0)
        return hf_jerr_set(e, path, "hosts", "required (non-empty) for the rank that runs mpirun");
    hf_buf_init(&b, (size_t)AGENT_MAX_HOSTS * 300);
    hf_jpath(fp, sizeof fp, path, "hosts");
    for (size_t i = 0; i < json_array_size(hosts); i++) {
        json_t *h = json_array_get(hosts, i);
        const char *name = NULL;
        int64_t slots = 0;
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_object(h)) { rc = hf_jerr_set(e, ip, NULL, "must be an object"); goto end; }
        if ((rc = hf_json_get_string(h, ip, "host", 1, 255, &name, e))) goto end;
        if (!host_ok(name)) {
            rc = hf_jerr_set(e, ip, "host", "not a host name or address ([A-Za-z0-9._:-])");
            goto end;
        }
        if ((rc = hf_json_get_int(h, ip, "slots", 1, 1, 100000, &slots, e))) goto end;
        if ((rc = hf_buf_printf(&b, "%s slots=%lld\n", name, (long long)slots))) {
            rc = hf_jerr_set(e, ip, NULL, "out of memory");
            goto end;
        }
    }
    if (!(s->hostfile = strndup(b.data ? b.data : "", b.len))) rc = hf_jerr_set(e, path, NULL, "out of memory");
end:
    hf_buf_free(&b);
    return rc;
}

static int env_name_ok(const char *k)
{
    size_t n = strlen(k);
    if (n == 0 || n > 128 || (k[0] >= '0' && k[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

agent_spec *agent_spec_parse(const json_t *a, const char *path, hf_jerr *e)
{
    agent_spec *s = NULL;
    json_t *argv = NULL, *env = NULL, *gpus = NULL;
    const char *ck = NULL, *cf = NULL;
    char fp[256], why[160];
    int64_t v;

    hf_jerr_clear(e);
    if (!json_is_object(a)) {
        hf_jerr_set(e, path, NULL, "must be an object");
        return NULL;
    }
    if (!(s = calloc(1, sizeof *s))) {
        hf_jerr_set(e, path, NULL, "out of memory");
        return NULL;
    }
    if (hf_json_get_int(a, path, "trial_id", 1, 1, INT64_MAX, &s->trial_id, e)
        || hf_json_get_int(a, path, "attempt", 1, 0, INT32_MAX, &s->attempt, e)
        || hf_json_get_int(a, path, "experiment_id", 0, 0, INT64_MAX, &s->experiment_id, e)
        || hf_json_get_array(a, path, "argv", 1, AGENT_MAX_ARGS, &argv, e)
        || hf_json_get_object(a, path, "env", 0, &env, e)
        || hf_json_get_string(a, path, "checkpoint_dir", 1, AGENT_PATH_MAX / 2, &ck, e)
        || hf_json_get_array(a, path, "gpus", 0, AGENT_MAX_GPUS, &gpus, e))
        goto fail;
    s->slots = 1;
    s->grace_ms = -1;
    if (hf_json_get_int(a, path, "slots", 0, 0, 1 << 20, &s->slots, e)
        || hf_json_get_int(a, path, "rank", 0, 0, 100000, &s->rank, e)
        || hf_json_get_int(a, path, "grace_ms", 0, 0, AGENT_GRACE_MAX_MS, &s->grace_ms, e))
        goto fail;
    if (parse_launcher(a, path, s, e)) goto fail;
    /* copy_checkpoint_from: optional string or null (PBT exploit). */
    json_t *cfj = json_object_get(a, "copy_checkpoint_from");
    if (cfj && !json_is_null(cfj)
        && hf_json_get_string(a, path, "copy_checkpoint_from", 1, AGENT_PATH_MAX / 2, &cf, e))
        goto fail;

    if (agent_fs_check_rel(ck, why, sizeof why)) {
        hf_jerr_set(e, path, "checkpoint_dir", "%s", why);
        goto fail;
    }
    snprintf(s->checkpoint_dir, sizeof s->checkpoint_dir, "%s", ck);
    if (cf && *cf) {
        if (agent_fs_check_rel(cf, why, sizeof why)) {
            hf_jerr_set(e, path, "copy_checkpoint_from", "%s", why);
            goto fail;
        }
        snprintf(s->copy_from, sizeof s->copy_from, "%s", cf);
    }

    size_t na = json_array_size(argv);
    if (na == 0) {
        hf_jerr_set(e, path, "argv", "must not be empty");
        goto fail;
    }
    if (!(s->argv = calloc(na + 1, sizeof *s->argv))) goto oom;
    hf_jpath(fp, sizeof fp, path, "argv");
    for (size_t i = 0; i < na; i++) {
        json_t *x = json_array_get(argv, i);
        char ip[256];
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_string(x)) {
            hf_jerr_set(e, ip, NULL, "must be a string");
            goto fail;
        }
        size_t len = json_string_length(x);
        if (len > AGENT_ARG_MAX || strlen(json_string_value(x)) != len || (i == 0 && len == 0)) {
            hf_jerr_set(e, ip, NULL, i == 0 ? "must be a non-empty string without NUL"
                                            : "must be at most %d bytes without NUL", AGENT_ARG_MAX);
            goto fail;
        }
        if (!(s->argv[i] = strdup(json_string_value(x)))) goto oom;
    }

    size_t ne = env ? json_object_size(env) : 0, k = 0;
    if (ne > AGENT_MAX_ENV) {
        hf_jerr_set(e, path, "env", "more than %d variables", AGENT_MAX_ENV);
        goto fail;
    }
    if (!(s->env = calloc(ne + 1, sizeof *s->env))) goto oom;
    if (env) {
        const char *key;
        json_t *x;
        hf_jpath(fp, sizeof fp, path, "env");
        json_object_foreach(env, key, x) {
            if (!env_name_ok(key)) {
                hf_jerr_set(e, fp, key, "not a valid environment variable name");
                goto fail;
            }
            if (!json_is_string(x) || json_string_length(x) > AGENT_ARG_MAX
                || strlen(json_string_value(x)) != json_string_length(x)) {
                hf_jerr_set(e, fp, key, "must be a string of at most %d bytes without NUL", AGENT_ARG_MAX);
                goto fail;
            }
            size_t len = strlen(key) + json_string_length(x) + 2;
            if (!(s->env[k] = malloc(len))) goto oom;
            snprintf(s->env[k++], len, "%s=%s", key, json_string_value(x));
        }
    }

    hf_jpath(fp, sizeof fp, path, "gpus");
    for (size_t i = 0; gpus && i < json_array_size(gpus); i++) {
        json_t *x = json_array_get(gpus, i);
        char ip[256];
        hf_jpath_index(ip, sizeof ip, fp, i);
        if (!json_is_integer(x) || (v = json_integer_value(x)) < 0 || v >= AGENT_MAX_GPUS) {
            hf_jerr_set(e, ip, NULL, "must be a GPU index between 0 and %d", AGENT_MAX_GPUS - 1);
            goto fail;
        }
        s->gpus[s->ngpus++] = (int)v;
    }
    return s;
oom:
    hf_jerr_set(e, path, NULL, "out of memory");
fail:
    agent_spec_free(s);
    return NULL;
}

/* ---------------------------------------------------------------- supervisor */

agent_sup *agent_sup_new(const char *workdir, const char *self_dir, int64_t grace_ms, agent_outbox *ob)
{
    agent_sup *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->ob = ob;
    s->grace_ms = grace_ms >= 0 ? grace_ms : 10000;
    if (snprintf(s->workdir, sizeof s->workdir, "%s", workdir) >= (int)sizeof s->workdir / 2) goto fail;
    snprintf(s->self_dir, sizeof s->self_dir, "%s", self_dir ? self_dir : "");
    if (chld_pipe[0] < 0) {
        if (pipe2(chld_pipe, O_CLOEXEC | O_NONBLOCK)) goto fail;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigchld;
        sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, NULL);
    }
    return s;
fail:
    free(s);
    return NULL;
}

static void trial_free(agent_trial *t)
{
    if (!t) return;
    for (int i = 0; i < 2; i++) {
        if (t->fd[i] >= 0) close(t->fd[i]);
        hf_buf_free(&t->line[i]);
    }
    free(t);
}

void agent_sup_free(agent_sup *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (!t->reaped) {
            kill(-t->pid, SIGKILL);
            waitpid(t->pid, NULL, 0);
        }
        trial_free(t);
    }
    free(s);
}

int agent_sup_count(const agent_sup *s) { return s->n; }

/* First trial matching; attempt <= 0 and rank < 0 match any. */
static agent_trial *find(const agent_sup *s, int64_t trial_id, int64_t attempt, int64_t rank)
{
    for (int i = 0; i < s->n; i++)
        if (s->t[i]->trial_id == trial_id && (attempt <= 0 || s->t[i]->attempt == attempt)
            && (rank < 0 || s->t[i]->rank == rank))
            return s->t[i];
    return NULL;
}

pid_t agent_sup_pid(const agent_sup *s, int64_t trial_id, int64_t attempt)
{
    agent_trial *t = find(s, trial_id, attempt, -1);
    return t ? t->pid : -1;
}

static void publish_running(agent_sup *s)
{
    json_t *arr = json_array();
    if (!arr) return;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (t->reaped) continue;
        json_array_append_new(arr, json_pack("{s:I, s:I, s:i, s:I}", "trial_id", (json_int_t)t->trial_id,
                                             "attempt", (json_int_t)t->attempt, "pid", (int)t->pid,
                                             "rank", (json_int_t)t->rank));
    }
    agent_outbox_set_running(s->ob, arr);
}

static void push_event(agent_sup *s, json_t *ev)
{
    if (!ev || agent_outbox_event(s->ob, ev))
        hf_error("cannot queue a trial event: out of memory");
}

/* A line the agent itself writes into a trial's log. */
static void trial_note(agent_sup *s, agent_trial *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void trial_note(agent_sup *s, agent_trial *t, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    int n = snprintf(msg, sizeof msg, "[hyperfarm-agent] ");
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    agent_outbox_log(s->ob, t->trial_id, t->attempt, hf_wall_ms(), AGENT_STREAM_STDERR, msg, strlen(msg));
}

/* Find prog on the PATH value path; write the full name to out. RET 0 or errno. */
static int path_lookup(const char *prog, const char *path, char *out, size_t outlen)
{
    if (strchr(prog, '/')) {
        snprintf(out, outlen, "%s", prog);
        return 0;
    }
    int err = ENOENT;
    const char *p = path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (*p) {
        const char *e = strchr(p, ':');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        struct stat st;
        if (len == 0) snprintf(out, outlen, "%s", prog);          /* empty entry = cwd */
        else snprintf(out, outlen, "%.*s/%s", (int)len, p, prog);
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(out, X_OK) == 0) return 0;
            err = EACCES;
        }
        if (!e) break;
        p = e + 1;
    }
    return err;
}

/* Does env entry e (NAME=...) have name n? */
static int env_is(const char *e, const char *n)
{
    size_t l = strlen(n);
    return strncmp(e, n, l) == 0 && e[l] == '=';
}

/* The agent-controlled names that the scheduler's env cannot override. */
static const char *const agent_env[] = {"HYPERFARM_CHECKPOINT_DIR", "HYPERFARM_CONTROL_FILE",
                                        "HYPERFARM_ATTEMPT", "HYPERFARM_HOSTFILE", "CUDA_VISIBLE_DEVICES",
                                        "PATH", NULL};

static int env_agent_owned(const char *e)
{
    for (int i = 0; agent_env[i]; i++)
        if (env_is(e, agent_env[i])) return 1;
    return 0;
}

/* Build the child's environment: the agent's own, minus names the spec or
 * the agent set, plus the spec's env, plus the agent's variables. The
 * strings in *strs are owned (free each, then the arrays). */
static char **build_env(const agent_sup *s, const agent_spec *sp, const char *ckpt, const char *control,
                        const char *hostfile, char ***strs_out, const char **path_out)
{
    size_t nenv = 0, nsp = 0, k = 0, ns = 0;
    while (environ[nenv]) nenv++;
    while (sp->env[nsp]) nsp++;
    char **envp = calloc(nenv + nsp + 8, sizeof *envp);
    char **strs = calloc(8, sizeof *strs);
    char gpus[AGENT_MAX_GPUS * 4 + 1] = "";
    const char *oldpath = getenv("PATH");
    if (!envp || !strs) goto fail;

    for (size_t i = 0; i < nenv; i++) {
        const char *e = environ[i];
        const char *eq = strchr(e, '=');
        int shadowed = env_agent_owned(e);
        for (size_t j = 0; j < nsp && !shadowed && eq; j++)
            shadowed = strncmp(sp->env[j], e, (size_t)(eq - e) + 1) == 0;
        if (!shadowed) envp[k++] = environ[i];
    }
    for (size_t j = 0; j < nsp; j++)
        if (!env_agent_owned(sp->env[j])) envp[k++] = sp->env[j];

    for (int i = 0, n = 0; i < sp->ngpus; i++)
        n += snprintf(gpus + n, sizeof gpus - (size_t)n, "%s%d", i ? "," : "", sp->gpus[i]);
    if (asprintf(&strs[ns++], "HYPERFARM_CHECKPOINT_DIR=%s", ckpt) < 0) goto fail;
    if (asprintf(&strs[ns++], "HYPERFARM_CONTROL_FILE=%s", control) < 0) goto fail;
    if (asprintf(&strs[ns++], "HYPERFARM_ATTEMPT=%lld", (long long)sp->attempt) < 0) goto fail;
    if (asprintf(&strs[ns++], "CUDA_VISIBLE_DEVICES=%s", gpus) < 0) goto fail;
    if (hostfile && asprintf(&strs[ns++], "HYPERFARM_HOSTFILE=%s", hostfile) < 0) goto fail;
    if (s->self_dir[0]) {
        if (asprintf(&strs[ns++], "PATH=%s%s%s", s->self_dir, oldpath ? ":" : "", oldpath ? oldpath : "") < 0)
            goto fail;
    } else if (asprintf(&strs[ns++], "PATH=%s", oldpath ? oldpath : "/usr/local/bin:/usr/bin:/bin") < 0)
        goto fail;
    *path_out = strs[ns - 1] + 5;
    for (size_t i = 0; i < ns; i++) envp[k++] = strs[i];
    envp[k] = NULL;
    *strs_out = strs;
    return envp;
fail:
    for (size_t i = 0; strs && i < 8; i++) free(strs[i]);
    free(strs);
    free(envp);
    return NULL;
}

/* argv of an mpirun-launcher rank 0 with every "{hostfile}" replaced by
 * the host file's path (NULL-terminated, strings owned; free with
 * argv_free). RET NULL on OOM or an argument over AGENT_ARG_MAX. */
static char **argv_subst(char *const *argv, const char *hostfile)
{
    static const char tok[] = "{hostfile}";
    size_t n = 0, tl = sizeof tok - 1, hl = strlen(hostfile);
    while (argv[n]) n++;
    char **out = calloc(n + 1, sizeof *out);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        hf_buf b;
        const char *p = argv[i], *q;
        hf_buf_init(&b, AGENT_ARG_MAX + 1);
        int rc = 0;
        while (!rc && (q = strstr(p, tok))) {
            rc = hf_buf_add(&b, p, (size_t)(q - p));
            if (!rc) rc = hf_buf_add(&b, hostfile, hl);
            p = q + tl;
        }
        if (!rc) rc = hf_buf_add(&b, p, strlen(p) + 1);
        if (rc || !(out[i] = strdup(b.data))) {
            hf_buf_free(&b);
            for (size_t k = 0; k < i; k++) free(out[k]);
            free(out);
            return NULL;
        }
        hf_buf_free(&b);
    }
    return out;
}

static void argv_free(char **v)
{
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
}

static void start_failed(agent_sup *s, const agent_spec *sp, const char *msg)
{
    hf_warn("trial %lld attempt %lld: start failed: %s", (long long)sp->trial_id, (long long)sp->attempt, msg);
    done_add(s, sp->trial_id, sp->attempt, sp->rank);
    push_event(s, json_pack("{s:I, s:I, s:I, s:s, s:I, s:s}", "trial_id", (json_int_t)sp->trial_id,
                            "attempt", (json_int_t)sp->attempt, "rank", (json_int_t)sp->rank,
                            "type", "start_failed", "time", (json_int_t)hf_wall_ms(), "error", msg));
}

int agent_sup_start(agent_sup *s, const agent_spec *sp, char *err, size_t errlen)
{
    char ckpt[AGENT_PATH_MAX], dir[AGENT_PATH_MAX], control[AGENT_PATH_MAX], prog[AGENT_PATH_MAX];
    char hostfile[AGENT_PATH_MAX];
    char why[512], **envp = NULL, **strs = NULL, **argv = NULL;
    const char *path = NULL;
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1};
    int rc = HF_OK, copy_rc = HF_OK;
    agent_trial *t = NULL;
    pid_t pid;

    err[0] = '\0';
    if (find(s, sp->trial_id, sp->attempt, sp->rank)) return HF_EEXIST;
    if (done_has(s, sp->trial_id, sp->attempt, sp->rank)) {
        hf_info("trial %lld attempt %lld rank %lld already ran here: duplicate assignment ignored",
                (long long)sp->trial_id, (long long)sp->attempt, (long long)sp->rank);
        return HF_EEXIST;
    }
    for (int i = 0; i < s->n; i++) {
        agent_trial *old = s->t[i];
        if (old->trial_id != sp->trial_id || old->attempt >= sp->attempt || old->reaped) continue;
        /* The scheduler re-placed this trial: its older attempt must not go on. */
        hf_warn("trial %lld: attempt %lld assigned while attempt %lld still runs; killing the old one",
                (long long)sp->trial_id, (long long)sp->attempt, (long long)old->attempt);
        agent_sup_kill(s, old->trial_id, old->attempt, 0, "superseded");
    }
    if (s->n >= AGENT_MAX_TRIALS) {
        snprintf(err, errlen, "more than %d trials on this agent", AGENT_MAX_TRIALS);
        rc = HF_ETOOBIG;
        goto fail;
    }
    if (agent_fs_check_rel(sp->checkpoint_dir, why, sizeof why)) {
        snprintf(err, errlen, "checkpoint_dir: %s", why);
        rc = HF_EINVAL;
        goto fail;
    }
    if (snprintf(ckpt, sizeof ckpt, "%s/%s", s->workdir, sp->checkpoint_dir) >= (int)sizeof ckpt) {
        snprintf(err, errlen, "checkpoint_dir: path too long");
        rc = HF_EINVAL;
        goto fail;
    }
    memcpy(dir, ckpt, sizeof dir);
    *strrchr(dir, '/') = '\0';      /* ckpt always has the workdir's '/' */
    if (snprintf(control, sizeof control, "%s/control.json", dir) >= (int)sizeof control) {
        snprintf(err, errlen, "checkpoint_dir: path too long");
        rc = HF_EINVAL;
        goto fail;
    }
    if ((rc = agent_fs_mkdirs(ckpt))) {
        snprintf(err, errlen, "mkdir %s: %s", ckpt, hf_strerror(rc));
        goto fail;
    }
    if (sp->copy_from[0]) {
        char src[AGENT_PATH_MAX];
        if (snprintf(src, sizeof src, "%s/%s", s->workdir, sp->copy_from) >= (int)sizeof src) {
            snprintf(why, sizeof why, "path too long");
            copy_rc = HF_EINVAL;
        } else if (strcmp(src, ckpt) != 0) copy_rc = agent_fs_copy_tree(src, ckpt, why, sizeof why);
    }
    if ((rc = agent_fs_write_control(control, 0, NULL))) {
        snprintf(err, errlen, "write %s: %s", control, hf_strerror(rc));
        goto fail;
    }
    hostfile[0] = '\0';
    if (sp->launcher && !sp->hold && sp->hostfile) {
        if (snprintf(hostfile, sizeof hostfile, "%s/hostfile", dir) >= (int)sizeof hostfile) {
            snprintf(err, errlen, "checkpoint_dir: path too long");
            rc = HF_EINVAL;
            goto fail;
        }
        if ((rc = agent_fs_write_file(hostfile, sp->hostfile, strlen(sp->hostfile)))) {
            snprintf(err, errlen, "write %s: %s", hostfile, hf_strerror(rc));
            goto fail;
        }
        if (!(argv = argv_subst(sp->argv, hostfile))) {
            snprintf(err, errlen, "argv: out of memory or an argument over %d bytes", AGENT_ARG_MAX);
            rc = HF_ENOMEM;
            goto fail;
        }
    }
    if (!(envp = build_env(s, sp, ckpt, control, hostfile[0] ? hostfile : NULL, &strs, &path))) {
        snprintf(err, errlen, "out of memory");
        rc = HF_ENOMEM;
        goto fail;
    }
    int perr = sp->hold ? 0 : path_lookup(sp->argv[0], path, prog, sizeof prog);
    if (sp->hold) snprintf(prog, sizeof prog, "(holding %lld slots for mpirun)", (long long)sp->slots);
    if (perr) {
        snprintf(err, errlen, "execvp %s: %s", sp->argv[0], strerror(perr));
        rc = HF_ECHILD;
        goto fail;
    }
    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        rc = HF_EIO;
        goto fail;
    }
    pid_t parent = getpid();
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        rc = HF_ECHILD;
        goto fail;
    }
    if (pid == 0) {
        /* Child: async-signal-safe calls only (the agent has other threads). */
        sigset_t all;
        struct sigaction dfl;
        int code = 0;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < 65; sig++) sigaction(sig, &dfl, NULL);
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out[1], 1) < 0 || dup2(errp[1], 2) < 0) code = errno;
        else if (chdir(dir)) code = errno;
        if (!code && sp->hold) {
            /* A holder: no program, so no exec closes the agent's fds
             * (sockets, pipes): close them all, which also closes the
             * exec-error pipe (= success), then wait for the SIGTERM that
             * releases the slots. */
#ifdef SYS_close_range
            if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
#endif
                for (int fd = 3; fd < 65536; fd++) close(fd);
            for (;;) pause();
        }
        if (!code) {
            execve(prog, argv ? argv : sp->argv, envp);
            code = errno;
        }
        ssize_t w = write(ep[1], &code, sizeof code);
        (void)w;
        _exit(127);
    }
    setpgid(pid, pid);     /* also in the parent: no race with an early kill */
    close(out[1]);
    close(errp[1]);
    close(ep[1]);
    out[1] = errp[1] = ep[1] = -1;
    int code = 0;
    ssize_t r;
    while ((r = read(ep[0], &code, sizeof code)) < 0 && errno == EINTR) {}
    close(ep[0]);
    ep[0] = -1;
    if (r > 0) {
        waitpid(pid, NULL, 0);
        snprintf(err, errlen, "execvp %s: %s", sp->argv[0], strerror(code));
        rc = HF_ECHILD;
        goto fail;
    }

    if (!(t = calloc(1, sizeof *t))) {
        /* Cannot supervise what we started: stop it. */
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(err, errlen, "out of memory");
        rc = HF_ENOMEM;
        goto fail;
    }
    t->trial_id = sp->trial_id;
    t->attempt = sp->attempt;
    t->experiment_id = sp->experiment_id;
    t->rank = sp->rank;
    t->grace_ms = sp->grace_ms;
    t->pid = pid;
    t->fd[0] = out[0];
    t->fd[1] = errp[0];
    out[0] = errp[0] = -1;
    for (int i = 0; i < 2; i++) {
        fcntl(t->fd[i], F_SETFL, fcntl(t->fd[i], F_GETFL) | O_NONBLOCK);
        hf_buf_init(&t->line[i], AGENT_LINE_MAX);
    }
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    snprintf(t->control, sizeof t->control, "%s", control);
    s->t[s->n++] = t;
    hf_info("trial %lld attempt %lld started: pid %d, %s, cwd %s", (long long)t->trial_id,
            (long long)t->attempt, (int)pid, prog, dir);
    push_event(s, json_pack("{s:I, s:I, s:I, s:s, s:I, s:i}", "trial_id", (json_int_t)t->trial_id,
                            "attempt", (json_int_t)t->attempt, "rank", (json_int_t)t->rank, "type", "started",
                            "time", (json_int_t)hf_wall_ms(), "pid", (int)pid));
    char one_line[512] = "";
    for (size_t i = 0, k = 0; sp->hostfile && sp->hostfile[i] && k + 3 < sizeof one_line; i++) {
        if (sp->hostfile[i] != '\n') one_line[k++] = sp->hostfile[i];
        else if (sp->hostfile[i + 1]) one_line[k++] = ',', one_line[k++] = ' ';
        one_line[k] = '\0';
    }
    if (sp->hold)
        trial_note(s, t, "rank %lld: holding %lld slot(s) on this agent for the mpirun started by rank 0",
                   (long long)sp->rank, (long long)sp->slots);
    else if (hostfile[0])
        trial_note(s, t, "mpirun launcher: host file %s (HYPERFARM_HOSTFILE): %s", hostfile, one_line);
    if (sp->copy_from[0] && copy_rc)
        trial_note(s, t, "copy_checkpoint_from %s failed (%s); the trial starts without it",
                   sp->copy_from, why);
    else if (sp->copy_from[0])
        trial_note(s, t, "checkpoint copied from %s", sp->copy_from);
    publish_running(s);
    goto end;
fail:
    start_failed(s, sp, err);
end:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (errp[i] >= 0) close(errp[i]);
        if (ep[i] >= 0) close(ep[i]);
    }
    for (int i = 0; strs && i < 8; i++) free(strs[i]);
    free(strs);
    free(envp);
    argv_free(argv);
    return rc;
}

static void trial_stop(agent_sup *s, agent_trial *t, int64_t grace_ms, const char *reason)
{
    if (t->reaped) return;
    if (grace_ms < 0) grace_ms = t->grace_ms >= 0 ? t->grace_ms : s->grace_ms;
    if (grace_ms > AGENT_GRACE_MAX_MS) grace_ms = AGENT_GRACE_MAX_MS;
    int64_t deadline = hf_mono_ms() + grace_ms;
    if (t->state == TRIAL_STOPPING) {
        if (deadline < t->kill_deadline) t->kill_deadline = deadline;   /* a second kill may hurry */
        return;
    }
    t->state = TRIAL_STOPPING;
    t->kill_deadline = deadline;
    int rc = agent_fs_write_control(t->control, 1, reason);
    if (rc) hf_warn("trial %lld: cannot write %s: %s", (long long)t->trial_id, t->control, hf_strerror(rc));
    hf_info("trial %lld attempt %lld rank %lld: stopping (%s), SIGTERM to group %d, grace %lld ms",
            (long long)t->trial_id, (long long)t->attempt, (long long)t->rank, reason, (int)t->pid,
            (long long)grace_ms);
    trial_note(s, t, "stop requested (%s): SIGTERM, SIGKILL after %lld ms", reason, (long long)grace_ms);
    if (grace_ms == 0) {
        kill(-t->pid, SIGKILL);
        t->killed_hard = 1;
    } else kill(-t->pid, SIGTERM);
}

int agent_sup_kill(agent_sup *s, int64_t trial_id, int64_t attempt, int64_t grace_ms, const char *reason)
{
    int found = 0;
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        if (t->trial_id != trial_id || (attempt > 0 && t->attempt != attempt)) continue;
        found = 1;
        trial_stop(s, t, grace_ms, reason ? reason : "stop");
    }
    return found ? HF_OK : HF_ENOTFOUND;
}

void agent_sup_kill_all(agent_sup *s, int64_t grace_ms, const char *reason)
{
    for (int i = 0; i < s->n; i++) agent_sup_kill(s, s->t[i]->trial_id, s->t[i]->attempt, grace_ms, reason);
}

/* ------------------------------------------------------------- output */

static void ship_line(agent_sup *s, agent_trial *t, int stream, char *line, size_t len, size_t dropped)
{
    int64_t now = hf_wall_ms();
    hf_metric_report rep;
    hf_jerr je;

    while (len > 0 && line[len - 1] == '\r') len--;
    t->lines++;
    if (!dropped && stream == AGENT_STREAM_STDOUT && hf_metric_is_line(line, len)) {
        int rc = hf_metric_parse(line, len, &rep, &je);
        if (rc == HF_OK) {
            t->metrics++;
            if (agent_outbox_metric(s->ob, t->trial_id, t->attempt, now, &rep))
                hf_error("cannot queue a metric: out of memory");
            return;
        }
        t->bad_metrics++;
        agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, line, len);
        trial_note(s, t, "metric line ignored: %s%s%s", je.field, je.field[0] ? ": " : "", je.msg);
        return;
    }
    /* rate limit per trial per second (metric lines are not counted) */
    int64_t sec = hf_mono_ms() / 1000;
    if (sec != t->rate_window) {
        if (t->rate_suppressed)
            trial_note(s, t, "%llu lines suppressed (more than %d lines/s)",
                       (unsigned long long)t->rate_suppressed, AGENT_LOG_RATE);
        t->rate_window = sec;
        t->rate_lines = t->rate_suppressed = 0;
    }
    if (++t->rate_lines > AGENT_LOG_RATE) {
        t->rate_suppressed++;
        return;
    }
    if (dropped) {
        char note[96];
        int n = snprintf(note, sizeof note, " [hyperfarm-agent: line truncated, %zu bytes dropped]", dropped);
        /* the line buffer has room for the note: its max is the line bound, the
         * text is copied into a local buffer to stay within it */
        char *tmp = malloc(len + (size_t)n + 1);
        if (tmp) {
            memcpy(tmp, line, len);
            memcpy(tmp + len, note, (size_t)n + 1);
            agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, tmp, len + (size_t)n);
            free(tmp);
            return;
        }
    }
    agent_outbox_log(s->ob, t->trial_id, t->attempt, now, stream, line, len);
}

/* Feed n bytes of stream i into the line splitter. */
static void feed(agent_sup *s, agent_trial *t, int i, const char *p, size_t n)
{
    hf_buf *b = &t->line[i];
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t chunk = nl ? (size_t)(nl - p) : n;
        if (t->skip[i] == 0) {
            size_t room = AGENT_LINE_MAX - b->len;
            size_t take = chunk < room ? chunk : room;
            hf_buf_add(b, p, take);     /* cannot fail: within max, memory reserved below */
            if (chunk > take) t->skip[i] += chunk - take;
        } else t->skip[i] += chunk;
        if (!nl) break;
        ship_line(s, t, i, b->data ? b->data : (char *)"", b->len, t->skip[i]);
        hf_buf_reset(b);
        t->skip[i] = 0;
        p = nl + 1;
        n -= chunk + 1;
    }
}

/* Read what is available on stream i (bounded per call for fairness). */
static void drain(agent_sup *s, agent_trial *t, int i)
{
    char buf[65536];
    for (int rounds = 0; rounds < 4 && t->fd[i] >= 0; rounds++) {
        ssize_t r = read(t->fd[i], buf, sizeof buf);
        if (r > 0) {
            feed(s, t, i, buf, (size_t)r);
            if ((size_t)r < sizeof buf) break;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        /* EOF or error: flush a last unterminated line */
        if (t->line[i].len > 0 || t->skip[i] > 0)
            ship_line(s, t, i, t->line[i].data ? t->line[i].data : (char *)"", t->line[i].len, t->skip[i]);
        hf_buf_free(&t->line[i]);
        t->skip[i] = 0;
        close(t->fd[i]);
        t->fd[i] = -1;
    }
}

static void reap(agent_sup *s, agent_trial *t)
{
    siginfo_t si;
    int st;
    /* Look without reaping first: while the leader is a zombie its pid (the
     * group id) cannot be reused, so the group kill below cannot hit a
     * stranger. Then SIGKILL whatever the trial left in its group, and reap. */
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)t->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != t->pid) return;
    kill(-t->pid, SIGKILL);
    if (waitpid(t->pid, &st, 0) != t->pid) return;
    t->reaped = 1;
    t->reaped_at = hf_mono_ms();
    if (WIFEXITED(st)) {
        t->exit_code = WEXITSTATUS(st);
        t->signal = 0;
    } else {
        t->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        t->exit_code = 128 + t->signal;
    }
    publish_running(s);
}

static void finish(agent_sup *s, int idx)
{
    agent_trial *t = s->t[idx];
    for (int i = 0; i < 2; i++)
        if (t->fd[i] >= 0) {
            drain(s, t, i);
            if (t->fd[i] >= 0) {
                /* a grandchild outside the group still holds the pipe */
                if (t->line[i].len) ship_line(s, t, i, t->line[i].data, t->line[i].len, t->skip[i]);
                close(t->fd[i]);
                t->fd[i] = -1;
            }
        }
    if (t->rate_suppressed)
        trial_note(s, t, "%llu lines suppressed (more than %d lines/s)",
                   (unsigned long long)t->rate_suppressed, AGENT_LOG_RATE);
    hf_info("trial %lld attempt %lld exited: code %d signal %d%s (%llu lines, %llu metrics, %llu bad)",
            (long long)t->trial_id, (long long)t->attempt, t->exit_code, t->signal,
            t->killed_hard ? ", SIGKILLed after the grace period" : "", (unsigned long long)t->lines,
            (unsigned long long)t->metrics, (unsigned long long)t->bad_metrics);
    push_event(s, json_pack("{s:I, s:I, s:I, s:s, s:I, s:i, s:i}", "trial_id", (json_int_t)t->trial_id,
                            "attempt", (json_int_t)t->attempt, "rank", (json_int_t)t->rank, "type", "exited",
                            "time", (json_int_t)hf_wall_ms(), "exit_code", t->exit_code,
                            "signal", t->signal));
    done_add(s, t->trial_id, t->attempt, t->rank);
    trial_free(t);
    s->t[idx] = s->t[--s->n];
    s->t[s->n] = NULL;
    publish_running(s);
}

int agent_sup_poll(agent_sup *s, int timeout_ms, int extra_fd)
{
    struct pollfd pf[2 * AGENT_MAX_TRIALS + 2];
    agent_trial *owner[2 * AGENT_MAX_TRIALS + 2];
    int which[2 * AGENT_MAX_TRIALS + 2];
    int np = 0, ret = 0;
    int64_t now = hf_mono_ms();

    /* wake up in time for the earliest grace deadline or drain timeout */
    for (int i = 0; i < s->n; i++) {
        agent_trial *t = s->t[i];
        int64_t due = -1;
        if (!t->reaped && t->state == TRIAL_STOPPING && !t->killed_hard) due = t->kill_deadline;
        if (t->reaped) due = t->reaped_at + AGENT_DRAIN_MS;
        if (due >= 0) {
            int64_t w = due - now;
            if (w < 0) w = 0;
            if (w < timeout_ms) timeout_ms = (int)w;
        }
    }
    pf[np] = (struct pollfd){.fd = chld_pipe[0], .events = POLLIN};
    owner[np++] = NULL;
    int extra_idx = -1;
    if (extra_fd >= 0) {
        extra_idx = np;
        pf[np] = (struct pollfd){.fd = extra_fd, .events = POLLIN};
        owner[np++] = NULL;
    }
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < 2; k++)
            if (s->t[i]->fd[k] >= 0) {
                pf[np] = (struct pollfd){.fd = s->t[i]->fd[k], .events = POLLIN};
                owner[np] = s->t[i];
                which[np++] = k;
            }
    int r = poll(pf, (nfds_t)np, timeout_ms < 0 ? 0 : timeout_ms);
    if (r < 0 && errno != EINTR) hf_warn("poll: %s", strerror(errno));
    if (r > 0) {
        if (pf[0].revents) {
            char junk[256];
            while (read(chld_pipe[0], junk, sizeof junk) > 0) {}
        }
        if (extra_idx >= 0 && pf[extra_idx].revents) ret = 1;
        for (int i = 0; i < np; i++)
            if (owner[i] && pf[i].revents) drain(s, owner[i], which[i]);
    }
    now = hf_mono_ms();
    for (int i = s->n - 1; i >= 0; i--) {
        agent_trial *t = s->t[i];
        if (!t->reaped) reap(s, t);
        if (!t->reaped && t->state == TRIAL_STOPPING && !t->killed_hard && now >= t->kill_deadline) {
            hf_warn("trial %lld attempt %lld: grace period over, SIGKILL to group %d",
                    (long long)t->trial_id, (long long)t->attempt, (int)t->pid);
            trial_note(s, t, "grace period over: SIGKILL");
            kill(-t->pid, SIGKILL);
            t->killed_hard = 1;
        }
        if (t->reaped && ((t->fd[0] < 0 && t->fd[1] < 0) || now >= t->reaped_at + AGENT_DRAIN_MS))
            finish(s, i);
    }
    return ret;
}
