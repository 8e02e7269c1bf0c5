/*
 * provision_slurm.c — the Slurm backend of the provisioner (provision.h,
 * provision_slurm.h; docs/deploy.md "Slurm"). Each call runs one Slurm
 * program as an argv array through posix_spawnp — never a shell — with
 * stdin from a pipe (sbatch reads the job script there) or /dev/null, and
 * reads at most SLURM_OUT_MAX bytes of its standard output for at most
 * SLURM_CALL_MS; a program that takes longer is killed. What it prints is
 * parsed by provision_slurm_parse.c.
 *
 * A job runs one agent per node: a one-node job execs the agent as its
 * batch script's process (Slurm's SIGTERM reaches it directly), a job of
 * several nodes runs them with srun --ntasks-per-node=1, so a gang trial's
 * ranks land in one allocation. The agent gets --slurm (take CPUs, GPUs,
 * name and work directory from the job; drain on SIGTERM) and
 * --idle-timeout (exit when idle, which ends the job).
 */
#include "scheduler/provision/provision_slurm.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define SLURM_CALL_MS 30000
#define SLURM_ARGV_MAX 64

typedef struct slurm_be {
    const provision_config *cfg;
} slurm_be;

/* ---------- running a program ---------- */

/* Write in[0..inlen) to fd, then close it (a blocking pipe: the script is small). */
static void feed(int fd, const char *in, size_t inlen)
{
    while (inlen > 0) {
        ssize_t w = write(fd, in, inlen);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        in += w;
        inlen -= (size_t)w;
    }
    close(fd);
}

/* Read fd into out (at most max - 1 bytes, NUL-terminated) until EOF or
 * the deadline; what is over max is read and dropped. RET 0 or HF_ETIMEOUT. */
static int drain_out(int fd, char *out, size_t max, size_t *len, int64_t deadline)
{
    char sink[4096];
    *len = 0;
    for (;;) {
        int64_t left = deadline - hf_mono_ms();
        if (left <= 0) return HF_ETIMEOUT;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return HF_ETIMEOUT;
        char *dst = *len + 1 < max ? out + *len : sink;
        size_t room = *len + 1 < max ? max - 1 - *len : sizeof sink;
        ssize_t n = read(fd, dst, room);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (dst != sink) *len += (size_t)n;
    }
    out[*len] = 0;
    return 0;
}

/* Run argv with in on stdin (NULL: /dev/null), its stdout into out (max
 * bytes, NUL-terminated), stderr's first line into err. RET 0 when it
 * exited 0, HF_ECHILD (err says how it ended), HF_ETIMEOUT, HF_EIO. */
static int run_prog(char *const argv[], const char *in, char *out, size_t max, size_t *len, char *err,
                    size_t errlen)
{
    int po[2] = {-1, -1}, pi[2] = {-1, -1}, rc = HF_EIO, status = 0;
    pid_t pid = -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (pipe2(po, O_CLOEXEC) || (in && pipe2(pi, O_CLOEXEC))) { snprintf(err, errlen, "pipe: %s", strerror(errno)); goto end; }
    if (in) posix_spawn_file_actions_adddup2(&fa, pi[0], 0);
    else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, po[1], 1);
    posix_spawn_file_actions_adddup2(&fa, po[1], 2);   /* Slurm's errors go to stderr: keep them for err */
    int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    if (e) { snprintf(err, errlen, "%s: %s", argv[0], strerror(e)); pid = -1; goto end; }
    close(po[1]); po[1] = -1;
    if (in) { close(pi[0]); pi[0] = -1; feed(pi[1], in, strlen(in)); pi[1] = -1; }
    rc = drain_out(po[0], out, max, len, hf_mono_ms() + SLURM_CALL_MS);
    if (rc) { kill(pid, SIGKILL); snprintf(err, errlen, "%s: no answer in %d s, killed", argv[0], SLURM_CALL_MS / 1000); }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    pid = -1;
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        rc = HF_ECHILD;
        size_t l = strcspn(out, "\n");
        snprintf(err, errlen, "%s %s %d: %.*s", argv[0], WIFEXITED(status) ? "exited" : "killed by signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), (int)(l > 300 ? 300 : l), out);
    }
end:
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pi[i] >= 0) close(pi[i]);
    }
    return rc;
}

/* ---------- the job script ---------- */

/* Append s single-quoted to b (cap bytes). RET 0 or -1 when full. */
static int quote(char *b, size_t cap, size_t *n, const char *s)
{
    if (*n + 3 >= cap) return -1;
    b[(*n)++] = ' ';
    b[(*n)++] = '\'';
    for (; *s; s++) {
        if (*n + 6 >= cap) return -1;
        if (*s == '\'') { memcpy(b + *n, "'\\''", 4); *n += 4; }
        else b[(*n)++] = *s;
    }
    b[(*n)++] = '\'';
    b[*n] = 0;
    return 0;
}

char *slurm_job_script(const provision_config *cfg, int nodes)
{
    size_t cap = 8192, n = 0;
    char *b = malloc(cap), num[32];
    if (!b) return NULL;
    n = (size_t)snprintf(b, cap, "#!/bin/sh\n# hyperfarm agent job (docs/deploy.md \"Slurm\")\nexec");
    int bad = 0;
    if (nodes > 1) {
        bad |= quote(b, cap, &n, "srun");
        bad |= quote(b, cap, &n, "--ntasks-per-node=1");
        bad |= quote(b, cap, &n, "--kill-on-bad-exit=0");
    }
    bad |= quote(b, cap, &n, cfg->agent_cmd);
    bad |= quote(b, cap, &n, "--scheduler");
    bad |= quote(b, cap, &n, cfg->scheduler_url);
    bad |= quote(b, cap, &n, "--slurm");
    bad |= quote(b, cap, &n, "--idle-timeout");
    snprintf(num, sizeof num, "%lld", (long long)cfg->idle_timeout_s);
    bad |= quote(b, cap, &n, num);
    if (cfg->agent_args && *cfg->agent_args) {
        char *copy = strdup(cfg->agent_args), *save = NULL;
        if (!copy) bad = 1;
        for (char *t = copy ? strtok_r(copy, " \t", &save) : NULL; t; t = strtok_r(NULL, " \t", &save))
            bad |= quote(b, cap, &n, t);
        free(copy);
    }
    if (bad || n + 2 >= cap) { free(b); return NULL; }
    b[n++] = '\n';
    b[n] = 0;
    return b;
}

/* ---------- the three calls ---------- */

/* argv of sbatch into av (strings in store, ≤ 16 bytes each). RET argc or -1 when too many. */
static int sbatch_argv(const provision_config *c, int nodes, char *av[SLURM_ARGV_MAX], char store[8][48],
                       char **extra)
{
    int k = 0;
    av[k++] = (char *)c->sbatch;
    av[k++] = "--parsable";
    snprintf(store[0], 48, "--job-name=%s", c->job_name);
    av[k++] = store[0];
    snprintf(store[1], 48, "--nodes=%d", nodes);
    av[k++] = store[1];
    av[k++] = "--ntasks-per-node=1";
    snprintf(store[2], 48, "--cpus-per-task=%lld", (long long)c->cpus);
    av[k++] = store[2];
    if (c->mem) { av[k++] = "--mem"; av[k++] = (char *)c->mem; }
    if (c->gres) { av[k++] = "--gres"; av[k++] = (char *)c->gres; }
    if (c->partition) { av[k++] = "--partition"; av[k++] = (char *)c->partition; }
    if (c->account) { av[k++] = "--account"; av[k++] = (char *)c->account; }
    if (c->time_limit_min > 0) {
        snprintf(store[3], 48, "--time=%lld", (long long)c->time_limit_min);
        av[k++] = store[3];
    }
    /* --sbatch-args: split at blanks, each word one argument (no shell: no quoting) */
    *extra = c->sbatch_args ? strdup(c->sbatch_args) : NULL;
    char *save = NULL;
    for (char *t = *extra ? strtok_r(*extra, " \t", &save) : NULL; t; t = strtok_r(NULL, " \t", &save)) {
        if (k >= SLURM_ARGV_MAX - 1) return -1;
        av[k++] = t;
    }
    av[k] = NULL;
    return k;
}

static int slurm_submit(void *be, int nodes, char *id, size_t idlen, char *err, size_t errlen)
{
    slurm_be *b = be;
    char *av[SLURM_ARGV_MAX], store[8][48], *extra = NULL, out[4096];
    size_t len;
    int rc = HF_EINVAL;
    char *script = slurm_job_script(b->cfg, nodes);
    if (!script) { snprintf(err, errlen, "the job script is too long"); goto end; }
    if (sbatch_argv(b->cfg, nodes, av, store, &extra) < 0) { snprintf(err, errlen, "--slurm-sbatch-args: too many words"); goto end; }
    if ((rc = run_prog(av, script, out, sizeof out, &len, err, errlen))) goto end;
    /* sbatch may print warnings before the id: the id is the last line */
    size_t s = len;
    while (s > 0 && (out[s - 1] == '\n' || out[s - 1] == '\r')) s--;
    while (s > 0 && out[s - 1] != '\n') s--;
    if ((rc = slurm_parse_sbatch(out + s, len - s, id, idlen)))
        snprintf(err, errlen, "sbatch --parsable printed no job id: %.200s", out);
end:
    free(script);
    free(extra);
    return rc;
}

static int slurm_cancel(void *be, const char *id, char *err, size_t errlen)
{
    slurm_be *b = be;
    char out[4096];
    size_t len;
    char *av[] = {(char *)b->cfg->scancel, (char *)id, NULL};
    return run_prog(av, NULL, out, sizeof out, &len, err, errlen);
}

static int slurm_list(void *be, prov_job *jobs, int max, int *n, char *err, size_t errlen)
{
    slurm_be *b = be;
    char name[160];
    size_t len;
    int bad, rc;
    char *out = malloc(SLURM_OUT_MAX);
    if (!out) return HF_ENOMEM;
    snprintf(name, sizeof name, "--name=%s", b->cfg->job_name);
    char *av[] = {(char *)b->cfg->squeue, "--noheader", "--format=%i|%T|%D", name, NULL};
    *n = 0;
    if ((rc = run_prog(av, NULL, out, SLURM_OUT_MAX, &len, err, errlen))) goto end;
    rc = slurm_parse_squeue(out, len, jobs, max, n, &bad);
    if (bad) hf_warn("provision: squeue printed %d line(s) that are not ID|STATE|NODES (skipped)", bad);
    if (rc) snprintf(err, errlen, "squeue lists more than %d jobs named %s", max, b->cfg->job_name);
end:
    free(out);
    return rc;
}

static void slurm_free(void *be) { free(be); }

const prov_ops slurm_ops = {"slurm", slurm_submit, slurm_cancel, slurm_list, slurm_free};

void *slurm_backend_new(const provision_config *cfg, char *err, size_t errlen)
{
    if (!cfg->scheduler_url || strncmp(cfg->scheduler_url, "http", 4)) {
        snprintf(err, errlen, "--provision-scheduler-url: the http(s):// URL agents reach this scheduler at");
        return NULL;
    }
    if (!cfg->job_name || !*cfg->job_name || strlen(cfg->job_name) > 32 || strpbrk(cfg->job_name, " \t\n,|")) {
        snprintf(err, errlen, "--slurm-job-name: 1 to 32 characters without blanks, ',' or '|'");
        return NULL;
    }
    slurm_be *b = calloc(1, sizeof *b);
    if (!b) { snprintf(err, errlen, "out of memory"); return NULL; }
    b->cfg = cfg;
    return b;
}
