/*
 * cli_up.c — `hyperfarm up`: a whole farm on one machine, in the foreground.
 *
 * Starts hyperfarm-scheduler, waits until its /healthz answers, starts one
 * hyperfarm-agent pointed at it, prints the dashboard URL, then waits.
 * Ctrl-C (SIGINT) or SIGTERM stops the agent first (it stops its trials)
 * and then the scheduler: SIGTERM, a grace period, then SIGKILL. If either
 * child dies on its own, the other is stopped and `up` exits 1, so a
 * half-farm never lingers.
 *
 * The children's output goes to one log file beside the database
 * (hyperfarm.db -> hyperfarm.log, appended), not to the terminal: a
 * sweep's agent and scheduler log hundreds of lines, which would bury
 * what the user runs in the same terminal (docs/cli.md). The agent's work
 * folder defaults to hyperfarm-work in the database's folder too, so one
 * farm's files sit together.
 *
 * The programs are looked up next to our own executable (bin/), then on
 * PATH. Children get PR_SET_PDEATHSIG so a SIGKILLed `up` does not leave
 * them behind, and run in their own process groups so a terminal's Ctrl-C
 * reaches only us and the shutdown order stays ours.
 */
#include "cli.h"
#include "hf_err.h"
#include "hf_time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define UP_HEALTH_WAIT_MS 15000
#define UP_GRACE_MS       10000

static volatile sig_atomic_t up_stop;
static void on_stop(int sig) { (void)sig; up_stop = 1; }

int cli_up_listen_from_url(const char *url, char *out, size_t size)
{
    const char *p = url;
    if (!strncmp(p, "http://", 7)) p += 7;
    else if (!strncmp(p, "https://", 8)) p += 8;
    else return HF_EINVAL;
    size_t n = strcspn(p, "/?#");
    if (n == 0 || n >= size) return HF_EINVAL;
    memcpy(out, p, n);
    out[n] = '\0';
    if (!strchr(out, ':') || out[n - 1] == ':') {   /* no port given: the scheduler's default */
        if (n + 6 >= size || strchr(out, ':')) return HF_EINVAL;
        strcat(out, ":8080");
    }
    return HF_OK;
}

int cli_up_url_from_listen(const char *listen, char *out, size_t size)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen || !colon[1]) return HF_EINVAL;
    size_t hl = (size_t)(colon - listen);
    if ((hl == 7 && !strncmp(listen, "0.0.0.0", 7)) || (hl == 2 && !strncmp(listen, "[:", 2)))
        return snprintf(out, size, "http://127.0.0.1%s", colon) < (int)size ? HF_OK : HF_EINVAL;
    return snprintf(out, size, "http://%s", listen) < (int)size ? HF_OK : HF_EINVAL;
}

/* Path of a sibling program of our executable, or just name (PATH lookup). */
static void sibling(char *out, size_t size, const char *name)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            int w = snprintf(out, size, "%s/%s", self, name);
            if (w > 0 && (size_t)w < size && access(out, X_OK) == 0) return;
        }
    }
    snprintf(out, size, "%s", name);
}

/* The log file of a database path: its extension (".db") replaced by
 * ".log", or ".log" appended when it has none. RET 0 or HF_ETOOBIG. */
static int up_log_path(char *out, size_t size, const char *db)
{
    const char *slash = strrchr(db, '/'), *dot = strrchr(db, '.');
    size_t stem = dot && dot > (slash ? slash + 1 : db) ? (size_t)(dot - db) : strlen(db);
    int w = snprintf(out, size, "%.*s.log", (int)stem, db);
    return w > 0 && (size_t)w < size ? HF_OK : HF_ETOOBIG;
}

/* The folder of a database path ("." when it has none) + "/" + name. */
static int up_beside_db(char *out, size_t size, const char *db, const char *name)
{
    const char *slash = strrchr(db, '/');
    int w = slash ? snprintf(out, size, "%.*s/%s", (int)(slash - db) + (slash == db), db, name)
                  : snprintf(out, size, "%s", name);
    return w > 0 && (size_t)w < size ? HF_OK : HF_ETOOBIG;
}

/* Start argv[0] in its own process group with stdout and stderr on logfd
 * (when >= 0). RET the pid, or -1 with the reason printed. */
static pid_t spawn(cli_ctx *ctx, char *const argv[], int logfd)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(ctx->err, "error: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);   /* parent died before prctl */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (logfd >= 0 && (dup2(logfd, STDOUT_FILENO) < 0 || dup2(logfd, STDERR_FILENO) < 0)) _exit(127);
        if (logfd > STDERR_FILENO) close(logfd);
        execvp(argv[0], argv);
        fprintf(stderr, "hyperfarm up: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* Stop one child: SIGTERM to its group, wait up to the grace, then SIGKILL. */
static void stop_child(pid_t pid, const char *what, FILE *err)
{
    int st;
    if (pid <= 0) return;
    kill(-pid, SIGTERM);
    kill(pid, SIGTERM);
    for (int64_t t0 = hf_mono_ms(); hf_mono_ms() - t0 < UP_GRACE_MS;) {
        if (waitpid(pid, &st, WNOHANG) == pid) return;
        hf_sleep_ms(50);
    }
    fprintf(err, "hyperfarm up: %s did not stop in %d s, killing it\n", what, UP_GRACE_MS / 1000);
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
}

static int healthy(hf_http *h)
{
    long status = 0;
    json_t *r = NULL;
    char err[256];
    int rc = hf_http_request(h, "GET", "/healthz", NULL, &status, &r, err, sizeof err);
    json_decref(r);
    return rc == 0 && status == 200;
}

static void describe_exit(FILE *f, const char *what, int st)
{
    if (WIFEXITED(st)) fprintf(f, "hyperfarm up: %s exited with status %d\n", what, WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) fprintf(f, "hyperfarm up: %s was killed by signal %d\n", what, WTERMSIG(st));
}

/* The dashboard folder for the scheduler's --web: --web, else
 * bin/hyperfarm -> ../web when run from a checkout (sched is our sibling
 * scheduler's path), else "" (none). */
static void up_web_dir(const cli_ctx *ctx, const char *sched, char *web, size_t size)
{
    const char *slash = strrchr(sched, '/');
    struct stat sb;
    char idx[PATH_MAX + 16];
    web[0] = '\0';
    if (ctx->o.web) {
        snprintf(web, size, "%s", ctx->o.web);
        return;
    }
    if (!slash) return;
    snprintf(web, size, "%.*s/../web", (int)(slash - sched), sched);
    snprintf(idx, sizeof idx, "%s/index.html", web);
    if (stat(idx, &sb) != 0) web[0] = '\0';
}

/* Wait until the scheduler *spid (the program sched, listening on listen)
 * answers url/healthz. RET 0 when it does; -1 when it exited (*spid = -1,
 * why printed), did not answer within UP_HEALTH_WAIT_MS (printed), or a
 * signal asked us to stop. */
static int up_wait_scheduler(cli_ctx *ctx, hf_http *h, pid_t *spid, const char *sched, const char *listen,
                             const char *url, const char *logpath)
{
    int st;
    int64_t t0 = hf_mono_ms();
    while (!healthy(h)) {
        if (waitpid(*spid, &st, WNOHANG) == *spid) {
            describe_exit(ctx->err, "the scheduler", st);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                fprintf(ctx->err, "error: %s could not be run: build it with 'make' or put it on PATH\n", sched);
            else
                fprintf(ctx->err, "error: the scheduler did not start (is %s in use? try --listen); its log: %s\n",
                        listen, logpath);
            *spid = -1;
            return -1;
        }
        if (up_stop) return -1;
        if (hf_mono_ms() - t0 > UP_HEALTH_WAIT_MS) {
            fprintf(ctx->err, "error: the scheduler did not answer %s/healthz within %d s\n", url,
                    UP_HEALTH_WAIT_MS / 1000);
            return -1;
        }
        hf_sleep_ms(100);
    }
    return 0;
}

/* What is up, where, and what to try next (on ctx->out). */
static void up_banner(cli_ctx *ctx, const char *url, const char *name, const char *slots, const char *workdir,
                      const char *logpath)
{
    /* another address than the CLI's default: the hint must name it */
    int other = strcmp(url, CLI_DEFAULT_URL) != 0;
    fprintf(ctx->out,
            "hyperfarm is up\n"
            "  dashboard  %s/\n"
            "  API        %s/api/v1   (export HYPERFARM_URL=%s)\n"
            "  database   %s\n"
            "  agent      %s, %s slots, work dir %s\n"
            "  logs       %s (scheduler and agent)\n"
            "try: %s%s%shyperfarm submit experiments/fmnist-mlp-random.json --watch\n"
            "Ctrl-C stops the agent and the scheduler.\n",
            url, url, url, ctx->o.db, name, slots, workdir, logpath, other ? "export HYPERFARM_URL=" : "",
            other ? url : "", other ? "; " : "");
    fflush(ctx->out);
}

int cli_cmd_up(cli_ctx *ctx, int argc, char **argv)
{
    char listen[256], url[300], sched[PATH_MAX], agent[PATH_MAX], web[PATH_MAX] = "";
    char workdir[PATH_MAX], slots[32], name[128] = "local", logpath[PATH_MAX];
    pid_t spid = -1, apid = -1;
    hf_http *h = NULL;
    int rc = CLI_ERR, st, logfd = -1;
    struct sigaction sa, old_int, old_term;
    (void)argc; (void)argv;

    if (ctx->o.listen) snprintf(listen, sizeof listen, "%s", ctx->o.listen);
    else if (cli_up_listen_from_url(ctx->o.url, listen, sizeof listen)) {
        fprintf(ctx->err, "error: cannot derive a listen address from '%s'; use --listen ADDR:PORT\n", ctx->o.url);
        return CLI_USAGE;
    }
    if (cli_up_url_from_listen(listen, url, sizeof url)) {
        fprintf(ctx->err, "error: --listen '%s' is not ADDR:PORT\n", listen);
        return CLI_USAGE;
    }
    if (!(h = hf_http_new(url, ctx->o.token, 1000, 0))) return CLI_ERR;
    if (healthy(h)) {
        fprintf(ctx->err, "error: a scheduler already answers at %s; use it (HYPERFARM_URL=%s) or pick "
                "another address with --listen\n", url, url);
        rc = CLI_STATE;
        goto end;
    }
    sibling(sched, sizeof sched, "hyperfarm-scheduler");
    sibling(agent, sizeof agent, "hyperfarm-agent");
    up_web_dir(ctx, sched, web, sizeof web);
    if (ctx->o.workdir) snprintf(workdir, sizeof workdir, "%s", ctx->o.workdir);
    else if (up_beside_db(workdir, sizeof workdir, ctx->o.db, "hyperfarm-work")) {
        fprintf(ctx->err, "error: --db '%s': path too long\n", ctx->o.db);
        rc = CLI_USAGE;
        goto end;
    }
    if (up_log_path(logpath, sizeof logpath, ctx->o.db)) {
        fprintf(ctx->err, "error: --db '%s': path too long\n", ctx->o.db);
        rc = CLI_USAGE;
        goto end;
    }
    if ((logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0) {
        fprintf(ctx->err, "error: cannot open the log file %s: %s\n", logpath, strerror(errno));
        goto end;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(slots, sizeof slots, "%lld", (long long)(ctx->o.slots > 0 ? ctx->o.slots : ncpu > 0 ? ncpu : 1));
    if (gethostname(name, sizeof name - 1) != 0) snprintf(name, sizeof name, "local");

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    up_stop = 0;

    char *sargv[] = {sched, "--listen", listen, "--db", (char *)ctx->o.db,
                     web[0] ? "--web" : NULL, web, NULL};
    if ((spid = spawn(ctx, sargv, logfd)) < 0) goto restore;
    if (up_wait_scheduler(ctx, h, &spid, sched, listen, url, logpath)) goto stop;
    char *aargv[] = {agent, "--scheduler", url, "--name", name, "--slots", slots, "--workdir", workdir,
                     NULL};
    if ((apid = spawn(ctx, aargv, logfd)) < 0) goto stop;
    up_banner(ctx, url, name, slots, workdir, logpath);
    rc = CLI_OK;
    while (!up_stop) {
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p == spid || p == apid) {
            describe_exit(ctx->err, p == spid ? "the scheduler" : "the agent", st);
            fprintf(ctx->err, "hyperfarm up: see its log: %s\n", logpath);
            if (p == spid) spid = -1;
            else apid = -1;
            rc = CLI_ERR;
            break;
        }
        hf_sleep_ms(200);
    }
    if (up_stop) fprintf(ctx->err, "hyperfarm up: stopping the agent and the scheduler\n");
stop:
    stop_child(apid, "the agent", ctx->err);
    stop_child(spid, "the scheduler", ctx->err);
restore:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
end:
    if (logfd >= 0) close(logfd);
    hf_http_free(h);
    return rc;
}
