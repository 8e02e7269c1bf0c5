/*
 * sandbox_spawn.c — the trial sandbox's cost through the agent's own spawn
 * code (agent_spawn, agent/agent_sandbox.c; docs/agent.md "Sandbox"),
 * without a scheduler in the way. Driven by bench/sandbox.sh.
 *
 *   sandbox_spawn N                 start /bin/true N times without and N
 *                                   times with the sandbox, alternating;
 *                                   print each side's spawn -> reaped time
 *                                   (mean, median, p90, in ms) and the ratio
 *   sandbox_spawn --run on|off -- PROG ARGS...
 *                                   run one trial through agent_spawn (GPU 0
 *                                   assigned when /dev/nvidia0 exists),
 *                                   relaying its stdout and stderr; exit
 *                                   with its status
 *
 * The helper is $HF_BIN/hyperfarm-agent (default ./bin); bwrap is $BWRAP or
 * bwrap on PATH. The work directory is a fresh directory under /tmp.
 */
#include "agent/agent_assign.h"
#include "agent/agent_sandbox.h"
#include "agent/agent_spawn.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static agent_spec *spec_for(int id, char *const *argv, int gpu)
{
    json_t *a = json_array();
    for (int i = 0; argv[i]; i++) json_array_append_new(a, json_string(argv[i]));
    char ck[64];
    snprintf(ck, sizeof ck, "t/%d/ck", id);
    json_t *j = json_pack("{s:i, s:i, s:s, s:o, s:[]}", "trial_id", id, "attempt", 1, "checkpoint_dir", ck, "argv",
                          a, "gpus");
    if (gpu) json_array_append_new(json_object_get(j, "gpus"), json_integer(0));
    hf_jerr e;
    agent_spec *sp = agent_spec_parse(j, "assign[0]", &e);
    if (!sp) fprintf(stderr, "sandbox_spawn: spec: %s: %s\n", e.field, e.msg);
    json_decref(j);
    return sp;
}

/* Start argv as trial id (sandboxed when sb), relay its output when relay,
 * wait. RET its wait status, or -1. *ms = agent_spawn -> reaped. */
static int run_one(const char *work, const agent_sandbox *sb, int id, char *const *argv, int relay, double *ms)
{
    char err[1024], buf[65536];
    agent_child c;
    int st = -1, gpu = access("/dev/nvidia0", F_OK) == 0;
    agent_spec *sp = spec_for(id, argv, gpu);
    if (!sp) return -1;
    double t0 = now_ms();
    if (agent_spawn(work, NULL, sb, sp, &c, err, sizeof err)) {
        fprintf(stderr, "sandbox_spawn: %s\n", err);
        agent_spec_free(sp);
        return -1;
    }
    for (int open_fds = 2; open_fds > 0;) {
        struct pollfd pf[2] = {{.fd = c.fd[0], .events = POLLIN}, {.fd = c.fd[1], .events = POLLIN}};
        if (poll(pf, 2, 1000) < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            if (c.fd[i] < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t r = read(c.fd[i], buf, sizeof buf);
            if (r > 0 && relay) fwrite(buf, 1, (size_t)r, i ? stderr : stdout);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                close(c.fd[i]);
                c.fd[i] = -1;
                open_fds--;
            }
        }
    }
    waitpid(c.pid, &st, 0);
    *ms = now_ms() - t0;
    agent_spec_free(sp);
    return st;
}

/* rm -rf of the bench's own work directory (a mkdtemp name: no quoting needed). */
static void remove_work(const char *work)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    if (system(cmd) != 0) fprintf(stderr, "sandbox_spawn: could not remove %s\n", work);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    char work[] = "/tmp/hf-sandbox-spawn-XXXXXX", exe[PATH_MAX], rel[PATH_MAX], err[1024];
    const char *hb = getenv("HF_BIN");
    agent_sandbox sb;
    hf_log_init("sandbox_spawn");
    hf_log_set_level(HF_LOG_WARN);
    if (argc < 2) {
        fprintf(stderr, "usage: sandbox_spawn N | sandbox_spawn --run on|off -- PROG ARGS...\n");
        return 2;
    }
    snprintf(rel, sizeof rel, "%s/hyperfarm-agent", hb && *hb ? hb : "bin");
    if (!realpath(rel, exe) || !mkdtemp(work)) {
        fprintf(stderr, "sandbox_spawn: %s: %s\n", rel, strerror(errno));
        return 1;
    }
    agent_sandbox_cfg cfg = {.workdir = work, .self_exe = exe, .bwrap = getenv("BWRAP")};
    if (agent_sandbox_init(&sb, &cfg, err, sizeof err) || agent_sandbox_probe(&sb, err, sizeof err)) {
        fprintf(stderr, "sandbox_spawn: %s\n", err);
        remove_work(work);
        return 1;
    }
    if (!strcmp(argv[1], "--run")) {
        double ms;
        if (argc < 5 || strcmp(argv[3], "--")) return 2;
        int st = run_one(work, strcmp(argv[2], "on") ? NULL : &sb, 1, argv + 4, 1, &ms);
        fprintf(stderr, "sandbox_spawn: sandbox %s: %.1f ms, status %d\n", argv[2], ms, st);
        remove_work(work);
        return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    int n = atoi(argv[1]);
    if (n < 1 || n > 100000) return 2;
    double *t[2] = {calloc((size_t)n, sizeof(double)), calloc((size_t)n, sizeof(double))};
    char *const targv[] = {"/bin/true", NULL};
    for (int i = 0; i < n; i++)
        for (int m = 0; m < 2; m++) {
            int st = run_one(work, m ? &sb : NULL, 2 + i * 2 + m, targv, 0, &t[m][i]);
            if (st != 0) {
                fprintf(stderr, "sandbox_spawn: /bin/true %s the sandbox: status %d\n", m ? "in" : "outside", st);
                remove_work(work);
                return 1;
            }
        }
    double mean[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < n; i++) mean[m] += t[m][i] / n;
        qsort(t[m], (size_t)n, sizeof(double), cmp_d);
        printf("  %s sandbox: mean %7.2f ms, median %7.2f ms, p90 %7.2f ms (%d starts)\n", m ? "with   " : "without",
               mean[m], t[m][n / 2], t[m][(n * 9) / 10], n);
    }
    printf("trial start (agent_spawn -> reaped exit of /bin/true): +%.2f ms with the sandbox (ratio %.1f)\n",
           mean[1] - mean[0], mean[0] > 0 ? mean[1] / mean[0] : 0);
    free(t[0]);
    free(t[1]);
    remove_work(work);
    return 0;
}
