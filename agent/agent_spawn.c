/*
 * agent_spawn.c — a trial's files, environment, argv, and fork + exec
 * (see agent_spawn.h for the contract, docs/agent.md "Starting a trial").
 *
 * Split as libuv splits uv_spawn: the parent side (agent_spawn) prepares
 * everything that may allocate or fail with a message before fork; the
 * child side (spawn_child_init) runs between fork and exec and makes
 * async-signal-safe calls only, because the agent has other threads whose
 * locks may be held at the moment of the fork.
 */
#include "agent_spawn.h"
#include "agent_sandbox.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_trial.h"

#include <errno.h>
#include <fcntl.h>
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

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* ------------------------------------------------------------ environment */

/* Does env entry e (NAME=...) have name n? */
static int env_is(const char *e, const char *n)
{
    size_t l = strlen(n);
    return strncmp(e, n, l) == 0 && e[l] == '=';
}

/* The value of name in env, or NULL. */
static const char *env_get(char *const *env, const char *name)
{
    for (size_t i = 0; env[i]; i++)
        if (env_is(env[i], name)) return env[i] + strlen(name) + 1;
    return NULL;
}

/* The agent's own variables a trial inherits (docs/agent.md, "Sandbox"):
 * an allow-list, so that no secret of the agent (its token, its token
 * file's path, HYPERFARM_AGENT_*) reaches a trial, whatever the operator
 * exported. Names ending in '_' are prefixes. */
static const char *const env_allow[] = {
    "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TERM", "SHELL", "LD_LIBRARY_PATH",
    "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "CUDA_HOME",
    "HYPERFARM_URL", "HYPERFARM_CA_FILE", "HYPERFARM_DATA_CACHE", "HYPERFARM_LOG_FORMAT",
    "HYPERFARM_KEEP_OPENBLAS_CORETYPE", "HYPERFARM_DIST_",
    "LC_", "OMP_", "OPENBLAS_", "GOTO_", "MKL_", "BLIS_", "KMP_", "CUDA_", "CUBLAS_", "CUDNN_", "NCCL_",
    "NVIDIA_", "TORCH_", "OMPI_", "PMIX_", "PRTE_", "OPAL_", "UCX_", "ASAN_", "UBSAN_", "LSAN_", "TSAN_", "MSAN_",
    NULL};
/* Words that mark a secret even under an allowed prefix. */
static const char *const env_secret[] = {"TOKEN", "SECRET", "PASSW", "CREDENTIAL", "_KEY", NULL};

/* May the agent's variable e (NAME=...) pass to a trial? */
static int env_allowed(const char *e)
{
    const char *eq = strchr(e, '=');
    if (!eq) return 0;
    size_t n = (size_t)(eq - e);
    int ok = 0;
    for (int i = 0; env_allow[i] && !ok; i++) {
        size_t l = strlen(env_allow[i]);
        ok = env_allow[i][l - 1] == '_' ? n > l && !strncmp(e, env_allow[i], l)
                                         : n == l && !strncmp(e, env_allow[i], l);
    }
    for (int i = 0; env_secret[i] && ok; i++) {
        size_t l = strlen(env_secret[i]);
        for (size_t j = 0; j + l <= n && ok; j++)
            if (!strncmp(e + j, env_secret[i], l)) ok = 0;
    }
    return ok;
}

#define ENV_STRS (4 + HF_TRIAL_MAX_ENV)   /* the sandbox's HOME, USER, LOGNAME, TMPDIR + the contract's */

/* Is e (NAME=...) named in one of the n entries of set? */
static int env_named_in(const char *e, char *const *set, size_t n)
{
    const char *eq = strchr(e, '=');
    for (size_t j = 0; eq && j < n; j++)
        if (strncmp(set[j], e, (size_t)(eq - e) + 1) == 0) return 1;
    return 0;
}

/* Build the child's environment: the allowed part of base (minus names
 * the sandbox, the experiment's env or the contract set), the sandbox's
 * HOME, USER, LOGNAME, TMPDIR (minus names the experiment's env sets), the
 * experiment's env (never a contract name: agent_spec_parse refused those),
 * and the contract's variables, which hf_trial_env alone writes. */
char **agent_spawn_env(char *const *base, const char *self_dir, const agent_spec *sp, const char *ckpt,
                       const char *control, const char *hostfile, const agent_spawn_sbenv *sbe, char ***strs_out,
                       const char **path_out)
{
    size_t nenv = 0, nsp = 0, k = 0, ns = 0, nsb = 0;
    char *pathv = NULL;
    while (base[nenv]) nenv++;
    while (sp->env[nsp]) nsp++;
    char **envp = calloc(nenv + nsp + ENV_STRS + 1, sizeof *envp);
    char **strs = calloc(ENV_STRS, sizeof *strs);
    const char *oldpath = env_get(base, "PATH");
    if (!envp || !strs) goto fail;

    if (sbe) {
        if (asprintf(&strs[ns++], "HOME=%s", sbe->home) < 0) goto fail;
        if (sbe->user && asprintf(&strs[ns++], "USER=%s", sbe->user) < 0) goto fail;
        if (sbe->user && asprintf(&strs[ns++], "LOGNAME=%s", sbe->user) < 0) goto fail;
        if (asprintf(&strs[ns++], "TMPDIR=/tmp") < 0) goto fail;
        nsb = ns;
    }
    /* PATH: the agent's directory first */
    int pw = self_dir && self_dir[0]
                 ? asprintf(&pathv, "%s%s%s", self_dir, oldpath ? ":" : "", oldpath ? oldpath : "")
                 : ((pathv = strdup(oldpath ? oldpath : DEFAULT_PATH)) ? 0 : -1);
    if (pw < 0) {
        pathv = NULL;   /* undefined after a failed asprintf */
        goto fail;
    }
    hf_trial_local loc = {.checkpoint_dir = ckpt, .control_file = control, .hostfile = hostfile,
                          .data_cache = sbe ? (sbe->cache && *sbe->cache ? sbe->cache : "off") : NULL,
                          .path = pathv};
    int nc = hf_trial_env(&sp->trial, &loc, strs + ns);
    if (nc < 0) goto fail;
    ns += (size_t)nc;
    free(pathv);
    pathv = NULL;
    /* the agent's allowed variables, then the sandbox's, each unless a
     * later layer names it */
    for (size_t i = 0; i < nenv + nsb; i++) {
        const char *e = i < nenv ? base[i] : strs[i - nenv];
        if (!strchr(e, '=') || (i < nenv && !env_allowed(e))) continue;
        if (env_named_in(e, sp->env, nsp) || env_named_in(e, strs + nsb, ns - nsb)) continue;
        if (i < nenv && env_named_in(e, strs, nsb)) continue;
        envp[k++] = (char *)e;
    }
    for (size_t j = 0; j < nsp; j++) envp[k++] = sp->env[j];
    for (size_t i = nsb; i < ns; i++) {
        envp[k++] = strs[i];
        if (!strncmp(strs[i], "PATH=", 5)) *path_out = strs[i] + 5;
    }
    envp[k] = NULL;
    *strs_out = strs;
    return envp;
fail:
    free(pathv);
    for (size_t i = 0; strs && i < ENV_STRS; i++) free(strs[i]);
    free(strs);
    free(envp);
    return NULL;
}

/* A trial's share of the CPU for the thread pools of BLAS and OpenMP
 * (agent_spawn.h). */
int agent_spawn_default_threads(long cpus, long slots)
{
    static const char *const names[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"};
    long n = slots > 0 && cpus > slots ? cpus / slots : 1;
    char v[24];
    snprintf(v, sizeof v, "%ld", n);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *cur = getenv(names[i]);
        if (cur && *cur) continue;
        if (setenv(names[i], v, 1)) return -1;
        hf_info("trials get %s=%s (%ld CPUs / %ld slots; set it in the agent's or the trial's environment to "
                "override)", names[i], v, cpus, slots);
    }
    return 0;
}

/* ------------------------------------------------------------- argv */

/* Find prog on the PATH value path, skipping the directories a sandbox
 * does not show (sb NULL: none); write the full name to out. RET 0 or
 * errno (EXDEV: a name with a '/' outside the sandbox). */
static int path_lookup(const char *prog, const char *path, const agent_sandbox *sb, const char *dir, char *out,
                       size_t outlen)
{
    if (strchr(prog, '/')) {
        snprintf(out, outlen, "%s", prog);
        return sb && !agent_sandbox_visible(sb, prog, dir) ? EXDEV : 0;
    }
    int err = ENOENT;
    const char *p = path ? path : DEFAULT_PATH;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        struct stat st;
        if (len == 0) snprintf(out, outlen, "%s", prog);          /* empty entry = cwd */
        else snprintf(out, outlen, "%.*s/%s", (int)len, p, prog);
        if (sb && !agent_sandbox_visible(sb, out, dir)) { /* not inside: a host-only PATH entry */
        } else if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(out, X_OK) == 0) return 0;
            err = EACCES;
        }
        if (!e) break;
        p = e + 1;
    }
    return err;
}

static void argv_free(char **v)
{
    for (char **p = v; p && *p; p++) free(*p);
    free(v);
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
            argv_free(out);
            return NULL;
        }
        hf_buf_free(&b);
    }
    return out;
}

/* ------------------------------------------------------------- files */

/* The trial's paths (c->dir, c->control, ckpt) and files: the checkpoint
 * directory, the PBT copy (its failure goes to c->copy_rc), control.json
 * (should_stop false: a stale stop of an earlier attempt must not stop a
 * restart) and, for rank 0 of an mpirun-launcher trial, the host file.
 * RET 0 or an HF_E* code with a message in err. */
static int spawn_files(const char *workdir, const agent_spec *sp, agent_child *c, char *ckpt, size_t ckptlen,
                       char *err, size_t errlen)
{
    char why[512];
    int rc;
    if (agent_fs_check_rel(sp->checkpoint_dir, why, sizeof why)) {
        snprintf(err, errlen, "checkpoint_dir: %s", why);
        return HF_EINVAL;
    }
    if (snprintf(ckpt, ckptlen, "%s/%s", workdir, sp->checkpoint_dir) >= (int)ckptlen) goto too_long;
    snprintf(c->dir, sizeof c->dir, "%s", ckpt);
    *strrchr(c->dir, '/') = '\0';      /* ckpt always has the workdir's '/' */
    if (snprintf(c->control, sizeof c->control, "%s/control.json", c->dir) >= (int)sizeof c->control)
        goto too_long;
    if ((rc = agent_fs_mkdirs(ckpt))) {
        snprintf(err, errlen, "mkdir %s: %s", ckpt, hf_strerror(rc));
        return rc;
    }
    if (sp->copy_from[0]) {
        char src[AGENT_PATH_MAX];
        if (snprintf(src, sizeof src, "%s/%s", workdir, sp->copy_from) >= (int)sizeof src) {
            snprintf(c->copy_err, sizeof c->copy_err, "path too long");
            c->copy_rc = HF_EINVAL;
        } else if (strcmp(src, ckpt) != 0)
            c->copy_rc = agent_fs_copy_tree(src, ckpt, c->copy_err, sizeof c->copy_err);
    }
    if ((rc = agent_fs_write_control(c->control, 0, NULL))) {
        snprintf(err, errlen, "write %s: %s", c->control, hf_strerror(rc));
        return rc;
    }
    if (sp->launcher && !sp->hold && sp->hostfile) {
        if (snprintf(c->hostfile, sizeof c->hostfile, "%s/hostfile", c->dir) >= (int)sizeof c->hostfile) {
            c->hostfile[0] = '\0';
            goto too_long;
        }
        if ((rc = agent_fs_write_file(c->hostfile, sp->hostfile, strlen(sp->hostfile)))) {
            snprintf(err, errlen, "write %s: %s", c->hostfile, hf_strerror(rc));
            return rc;
        }
    }
    return HF_OK;
too_long:
    snprintf(err, errlen, "checkpoint_dir: path too long");
    return HF_EINVAL;
}

/* ------------------------------------------------------------- fork */

/* What the child needs between fork and exec, prepared by the parent. */
typedef struct child_args {
    pid_t              parent;
    int                out, err, ep;   /* write ends: stdout, stderr, exec-error pipe */
    const char        *dir, *prog;
    char *const       *argv, *const *envp;
    int                hold;
    int                sandbox;   /* prog is bwrap (agent_sandbox.h) */
    int                argsfd;    /* bwrap's --args descriptor, -1 = none */
} child_args;

/* The child after fork: never returns. Async-signal-safe calls only (the
 * agent has other threads). An errno that prevents the exec is written to
 * the exec-error pipe; a successful exec closes it (close-on-exec), which
 * the parent reads as success. */
static void spawn_child_init(const child_args *a) __attribute__((noreturn));
static void spawn_child_init(const child_args *a)
{
    sigset_t all;
    struct sigaction dfl;
    int code = 0;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < 65; sig++) sigaction(sig, &dfl, NULL);
    sigemptyset(&all);
    if (a->sandbox) {
        /* bwrap does not forward signals: blocked here, the SIGTERM sent
         * to the trial's group leaves bwrap running until the trial (whose
         * helper unblocks it) exits; a dead agent SIGKILLs bwrap, and
         * --die-with-parent everything inside (agent_sandbox.h). */
        sigaddset(&all, SIGTERM);
        sigaddset(&all, SIGINT);
        sigaddset(&all, SIGHUP);
        sigaddset(&all, SIGQUIT);
    }
    sigprocmask(SIG_SETMASK, &all, NULL);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, a->sandbox ? SIGKILL : SIGTERM);
    if (a->argsfd >= 0 && fcntl(a->argsfd, F_SETFD, 0) < 0) code = errno;   /* bwrap reads it */
    if (getppid() != a->parent) _exit(127);   /* the agent died before prctl */
    int nul = open("/dev/null", O_RDONLY);
    if (code) {
    } else if (nul < 0 || dup2(nul, 0) < 0 || dup2(a->out, 1) < 0 || dup2(a->err, 2) < 0) code = errno;
    else if (chdir(a->dir)) code = errno;
    if (!code && a->hold) {
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
        execve(a->prog, a->argv, a->envp);
        code = errno;
    }
    ssize_t w = write(a->ep, &code, sizeof code);
    (void)w;
    _exit(127);
}

/* fork, spawn_child_init in the child, and wait in the parent for the exec
 * (or its failure) on the exec-error pipe. a's fds are filled here.
 * RET 0 with c->pid and c->fd set, or HF_EIO/HF_ECHILD with err. */
static int spawn_fork(child_args *a, const agent_spec *sp, agent_child *c, char *err, size_t errlen)
{
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1};
    int rc = HF_OK, code = 0;
    ssize_t r;
    pid_t pid;

    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || pipe2(ep, O_CLOEXEC)) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        rc = HF_EIO;
        goto end;
    }
    a->parent = getpid();
    a->out = out[1];
    a->err = errp[1];
    a->ep = ep[1];
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        rc = HF_ECHILD;
        goto end;
    }
    if (pid == 0) spawn_child_init(a);
    setpgid(pid, pid);     /* also in the parent: no race with an early kill */
    close(out[1]);
    close(errp[1]);
    close(ep[1]);
    out[1] = errp[1] = ep[1] = -1;
    while ((r = read(ep[0], &code, sizeof code)) < 0 && errno == EINTR) {}
    if (r > 0) {
        waitpid(pid, NULL, 0);
        snprintf(err, errlen, "execvp %s: %s", sp->argv[0], strerror(code));
        rc = HF_ECHILD;
        goto end;
    }
    c->pid = pid;
    c->fd[0] = out[0];
    c->fd[1] = errp[0];
    out[0] = errp[0] = -1;
    for (int i = 0; i < 2; i++) fcntl(c->fd[i], F_SETFL, fcntl(c->fd[i], F_GETFL) | O_NONBLOCK);
end:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0) close(out[i]);
        if (errp[i] >= 0) close(errp[i]);
        if (ep[i] >= 0) close(ep[i]);
    }
    return rc;
}

int agent_spawn(const char *workdir, const char *self_dir, const agent_sandbox *sb, const agent_spec *sp,
                agent_child *c, char *err, size_t errlen)
{
    char ckpt[AGENT_PATH_MAX], **envp = NULL, **strs = NULL, **argv = NULL, **sbargv = NULL, **sbshort = NULL;
    int argsfd = -1;
    const char *path = NULL;
    int rc;

    memset(c, 0, sizeof *c);
    c->pid = -1;
    c->fd[0] = c->fd[1] = -1;
    err[0] = '\0';
    if ((rc = spawn_files(workdir, sp, c, ckpt, sizeof ckpt, err, errlen))) goto end;
    if (sb && !sp->hold && (rc = agent_sandbox_own(sb, c->dir, err, errlen))) goto end;
    if (c->hostfile[0] && !(argv = argv_subst(sp->argv, c->hostfile))) {
        snprintf(err, errlen, "argv: out of memory or an argument over %d bytes", AGENT_ARG_MAX);
        rc = HF_ENOMEM;
        goto end;
    }
    agent_spawn_sbenv sbe = {.home = c->dir, .user = sb && sb->drop ? sb->user : NULL,
                             .cache = sb ? sb->cache : NULL};
    if (!(envp = agent_spawn_env(environ, self_dir, sp, ckpt, c->control, c->hostfile[0] ? c->hostfile : NULL,
                                 sb && !sp->hold ? &sbe : NULL, &strs, &path))) {
        snprintf(err, errlen, "out of memory");
        rc = HF_ENOMEM;
        goto end;
    }
    int perr = sp->hold ? 0 : path_lookup(sp->argv[0], path, sb, c->dir, c->prog, sizeof c->prog);
    if (sp->hold) snprintf(c->prog, sizeof c->prog, "(holding %lld slots for mpirun)", (long long)sp->slots);
    if (perr == EXDEV) {
        snprintf(err, errlen, "execvp %s: outside the trial sandbox (docs/agent.md, Sandbox): the agent must "
                 "bind its directory with --sandbox-bind", sp->argv[0]);
        rc = HF_ECHILD;
        goto end;
    }
    if (perr) {
        snprintf(err, errlen, "execvp %s: %s%s", sp->argv[0], strerror(perr),
                 sb && perr == ENOENT ? " (looked up on the PATH entries the trial sandbox shows)" : "");
        rc = HF_ECHILD;
        goto end;
    }
    child_args a = {.dir = c->dir, .prog = c->prog, .argv = argv ? argv : sp->argv, .envp = envp,
                    .hold = sp->hold, .argsfd = -1};
    if (sb && !sp->hold) {
        if (!(sbargv = agent_sandbox_argv(sb, c->dir, c->prog, a.argv)) ||
            !(sbshort = agent_sandbox_argv_fd(sbargv, &argsfd))) {
            snprintf(err, errlen, "sandbox: out of memory or descriptors");
            rc = HF_ENOMEM;
            goto end;
        }
        a.prog = sbshort[0];
        a.argv = sbshort;
        a.argsfd = argsfd;
        a.sandbox = 1;
        c->sandboxed = 1;
    }
    rc = spawn_fork(&a, sp, c, err, errlen);
end:
    if (argsfd >= 0) close(argsfd);
    agent_sandbox_argv_free(sbshort);
    agent_sandbox_argv_free(sbargv);
    for (int i = 0; strs && i < ENV_STRS; i++) free(strs[i]);
    free(strs);
    free(envp);
    argv_free(argv);
    return rc;
}
