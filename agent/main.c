/*
 * main.c — hyperfarm-agent: options (one table, hf_config), then agent_run().
 *
 *   hyperfarm-agent --scheduler URL [--name NAME] [--slots N] [--gpus auto|none|0,1,..]
 *                   [--workdir DIR] [--token-file F] [--ca-file F] [--heartbeat-ms N]
 *                   [--grace-ms N] [--log-level L] [--log-format text|json] [--config F]
 *                   [--sandbox on|off] [--sandbox-bind PATH[:ro]]... [--trial-user USER]
 *                   [--print-config]
 */
#include "agent.h"
#include "agent_sandbox.h"
#include "agent_slurm.h"
#include "hf_config.h"
#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    agent_cfg c;
    char err[512];
    int npos = 0, lvl = HF_LOG_INFO;
    memset(&c, 0, sizeof c);
    hf_cfg_opt opts[] = {
        {"scheduler", "HYPERFARM_URL", HF_CFG_STR, &c.scheduler, "http://127.0.0.1:8080", 0, -1, "scheduler base URL, or a comma-separated list (primary and standby: docs/agent.md)"},
        {"name", "HYPERFARM_AGENT_NAME", HF_CFG_STR, &c.name, NULL, 0, -1, "agent name (default: host name)"},
        {"slots", "HYPERFARM_AGENT_SLOTS", HF_CFG_INT, &c.slots, "0", 0, 4096, "trial slots (0: one per GPU, else one per CPU)"},
        {"gpus", "HYPERFARM_AGENT_GPUS", HF_CFG_STR, &c.gpus, "auto", 0, -1, "auto | none | list of indices 0,1,.."},
        {"workdir", "HYPERFARM_AGENT_WORKDIR", HF_CFG_STR, &c.workdir, AGENT_DEFAULT_WORKDIR, 0, -1, "directory for trial files and checkpoints"},
        {"token-file", "HYPERFARM_AGENT_TOKEN_FILE", HF_CFG_STR, &c.token_file, NULL, 0, -1, "file with the agent token ('TOKEN' or 'agent:TOKEN')"},
        {"ca-file", "HYPERFARM_CA_FILE", HF_CFG_STR, &c.ca_file, NULL, 0, -1, "CA certificate to verify an https scheduler"},
        {"advertise-host", "HYPERFARM_AGENT_HOST", HF_CFG_STR, &c.host, NULL, 0, -1, "address reported to the scheduler (default: the one used to reach it)"},
        {"heartbeat-ms", "HYPERFARM_HEARTBEAT_MS", HF_CFG_INT, &c.heartbeat_ms, "0", 0, 3600000, "heartbeat interval (0: as the scheduler says)"},
        {"grace-ms", "HYPERFARM_GRACE_MS", HF_CFG_INT, &c.grace_ms, "10000", 0, 3600000, "default SIGTERM->SIGKILL grace period"},
        {"http-timeout-ms", NULL, HF_CFG_INT, &c.http_timeout_ms, "5000", 100, 600000, "timeout of one request to the scheduler"},
        {"max-log-lines", NULL, HF_CFG_INT, &c.max_log_lines, "20000", 100, 10000000, "log lines buffered while the scheduler is unreachable"},
        {"max-log-mb", NULL, HF_CFG_INT, &c.max_log_mb, "8", 1, 4096, "log bytes buffered (MiB) while the scheduler is unreachable"},
        {"max-metrics", NULL, HF_CFG_INT, &c.max_metrics, "200000", 1000, 100000000, "metric reports buffered while the scheduler is unreachable"},
        {"cache-mb", "HYPERFARM_AGENT_CACHE_MB", HF_CFG_INT, &c.cache_mb, "10240", 1, 100000000, "object cache bound (MiB): checkpoints and contexts by hash, least recently used removed first"},
        {"checkpoint-upload", "HYPERFARM_CHECKPOINT_UPLOAD", HF_CFG_BOOL, &c.checkpoint_upload, "true", 0, -1, "upload the checkpoints trials report to the scheduler's store (--no-checkpoint-upload: they stay on this disk only, as before issue 15; a trial moved elsewhere then starts from scratch)"},
        {"keep-trial-dirs-s", NULL, HF_CFG_INT, &c.keep_trial_dirs_s, "600", -1, 100000000, "remove a finished trial's directory this many seconds after it exited, once its checkpoints are uploaded (-1: never)"},
        {"sandbox", "HYPERFARM_AGENT_SANDBOX", HF_CFG_STR, &c.sandbox, "on", 0, -1, "on | off: run each trial in a bubblewrap sandbox that shows it only the system, its own directory and the --sandbox-bind paths (docs/agent.md, Sandbox)"},
        {"sandbox-bind", "HYPERFARM_AGENT_SANDBOX_BIND", HF_CFG_STR, &c.sandbox_bind, NULL, 0, -1, "host path trials see, PATH or PATH:ro (data sets, code); repeatable, or a comma-separated list"},
        {"trial-user", "HYPERFARM_AGENT_TRIAL_USER", HF_CFG_STR, &c.trial_user, "nobody", 0, -1, "when the agent runs as root: the unprivileged user trials run as"},
        {"bwrap", "HYPERFARM_AGENT_BWRAP", HF_CFG_STR, &c.bwrap, "bwrap", 0, -1, "the bubblewrap program (on PATH, else /usr/bin/bwrap)"},
        {"slurm", "HYPERFARM_AGENT_SLURM", HF_CFG_BOOL, &c.slurm, "false", 0, -1, "inside a Slurm job: offer exactly the job's CPUs and GPUs, name this agent slurm-JOB-NODE, work in $TMPDIR, and drain on SIGTERM (trials requeued without a restart; docs/agent.md \"Inside a Slurm job\")"},
        {"idle-timeout", "HYPERFARM_AGENT_IDLE_TIMEOUT", HF_CFG_INT, &c.idle_timeout_s, "0", 0, 31536000, "exit after this many seconds without a trial (0: never); a Slurm job then ends and gives its allocation back"},
        {"log-level", "HYPERFARM_LOG_LEVEL", HF_CFG_STR, &c.log_level, "info", 0, -1, "debug | info | warn | error"},
        {"log-format", "HYPERFARM_LOG_FORMAT", HF_CFG_STR, &c.log_format, "text", 0, -1, "text | json"},
        {"config", "HYPERFARM_AGENT_CONFIG", HF_CFG_STR, &c.config, NULL, 0, -1, "config file of 'name = value' lines"},
        {"print-config", NULL, HF_CFG_BOOL, &c.print_config, "false", 0, -1, "print the effective configuration as JSON and exit"},
        HF_CFG_END
    };
    const char *synopsis = "hyperfarm-agent --scheduler URL [--name NAME] [--slots N] [--gpus auto|none|0,1,..] "
                           "[--workdir DIR] [--token-file F] [options]";

    /* inside a trial's sandbox: become the trial (agent_sandbox.h) */
    if (argc > 1 && !strcmp(argv[1], "--sandbox-exec")) return agent_sandbox_exec_main(argc, argv);
    hf_log_init("hyperfarm-agent");
    /* --sandbox-bind may be given several times: the flags, joined with
     * ',', replace the config file's and the environment's list */
    static char *binds;   /* lives as long as c */
    size_t blen = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--sandbox-bind") && i + 1 < argc) v = argv[i + 1];
        else if (!strncmp(argv[i], "--sandbox-bind=", 15)) v = argv[i] + 15;
        if (!v) continue;
        char *nb = realloc(binds, blen + strlen(v) + 2);
        if (!nb) { fprintf(stderr, "hyperfarm-agent: out of memory\n"); return 1; }
        binds = nb;
        blen += (size_t)sprintf(binds + blen, "%s%s", blen ? "," : "", v);
    }
    int rc = hf_config_parse(opts, argc, argv, &npos, err, sizeof err);
    if (binds) c.sandbox_bind = binds;
    if (rc == 1) return hf_config_usage(stdout, synopsis, opts), 0;
    if (rc) return fprintf(stderr, "hyperfarm-agent: %s\n", err), 2;
    if (npos > 0) {
        fprintf(stderr, "hyperfarm-agent: unexpected argument '%s' (see --help)\n", argv[1]);
        return 2;
    }
    if (hf_log_parse_level(c.log_level, &lvl)) {
        fprintf(stderr, "hyperfarm-agent: --log-level: expected debug, info, warn or error, got '%s'\n", c.log_level);
        return 2;
    }
    if (strcmp(c.log_format, "text") && strcmp(c.log_format, "json")) {
        fprintf(stderr, "hyperfarm-agent: --log-format: expected text or json, got '%s'\n", c.log_format);
        return 2;
    }
    if (strcmp(c.sandbox, "on") && strcmp(c.sandbox, "off")) {
        fprintf(stderr, "hyperfarm-agent: --sandbox: expected on or off, got '%s'\n", c.sandbox);
        return 2;
    }
    if (strncmp(c.scheduler, "http://", 7) && strncmp(c.scheduler, "https://", 8)) {
        fprintf(stderr, "hyperfarm-agent: --scheduler: expected an http:// or https:// URL, got '%s'\n", c.scheduler);
        return 2;
    }
    hf_log_set_level(lvl);
    hf_log_set_format(strcmp(c.log_format, "json") ? HF_LOG_TEXT : HF_LOG_JSON);
    if (c.print_config) {
        hf_config_print(stdout, opts);
        hf_config_free(opts);
        return 0;
    }
    static agent_slurm_bufs sb;   /* lives as long as c */
    if (c.slurm && agent_slurm_apply(&c, &sb, err, sizeof err)) return fprintf(stderr, "hyperfarm-agent: %s\n", err), 2;
    rc = agent_run(&c);
    hf_config_free(opts);
    if (rc) {
        fprintf(stderr, "hyperfarm-agent: %s\n", hf_strerror(rc));
        return 1;
    }
    return 0;
}
