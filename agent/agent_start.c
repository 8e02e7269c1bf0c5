/*
 * agent_start.c — the agent's start-up (agent_loop.h): the configuration
 * turned into a running set of modules before any thread starts. The
 * work directory, the agent token (from --token-file), the GPUs and
 * slots, the name and the address advertised to the scheduler; then the
 * outbox, the supervisor with its sandbox (probed here, so a machine where
 * bwrap cannot work fails at start with the reason, not at each trial),
 * the object cache, the checkpoint uploader with its hooks into the
 * supervisor, the preparation pool and the HTTP handles.
 */
#include "agent_loop.h"
#include "agent_gpu.h"
#include "agent_spawn.h"
#include "hf_err.h"
#include "hf_follow.h"
#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* The local address used to reach the scheduler (a UDP connect sends
 * nothing); with several URLs (docs/agent.md), the first one's. */
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
        size_t n = strcspn(p, ":/,");
        snprintf(host, sizeof host, "%.*s", (int)n, p);
        p += n;
    }
    if (*p == ':') snprintf(port, sizeof port, "%.*s", (int)strcspn(p + 1, "/,"), p + 1);

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

/* ------------------------------------------------------------ hooks */

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

/* ------------------------------------------------------------ the sandbox, the modules */

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

/* See agent_loop.h. The work directory is created and made absolute;
 * the agent binary's directory is where trials find the helpers. */
int agent_start_up(agent *ag, const agent_cfg *cfg)
{
    char workdir[AGENT_PATH_MAX], self_dir[AGENT_PATH_MAX] = "", token[512] = "", host[256], name[256], err[512];
    json_t *gpus = NULL, *info = NULL;
    int rc;

    if (hf_follow_is_list(cfg->scheduler) && (rc = hf_follow_check(cfg->scheduler, err, sizeof err))) {
        hf_error("--scheduler %s: %s", cfg->scheduler ? cfg->scheduler : "", err);
        goto end;
    }
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
        hf_error("cannot start the preparation pool (restores, code contexts) under %s", workdir);
        rc = HF_ENOMEM;
        goto end;
    }
    hf_info("hyperfarm-agent %s: name %s, %lld slots, %zu GPUs, workdir %s, scheduler %s, host %s",
            AGENT_VERSION, name, (long long)slots, json_array_size(gpus), workdir, cfg->scheduler, host);
end:
    memset(token, 0, sizeof token);
    json_decref(info);
    json_decref(gpus);
    return rc;
}
