/*
 * options.c — the option table of hyperfarm-scheduler (options.h): every
 * setting with its flag, environment variable, default, bounds and help.
 * hf_config (common/hf_config.c) applies defaults, the --config file, the
 * environment and argv in that order.
 */
#include "scheduler/options.h"

#include <string.h>

const char *const options_synopsis = "hyperfarm-scheduler [--listen ADDR:PORT] [--db PATH] [--web DIR] "
                                     "[--token-file F] [--tls-cert F --tls-key F] [--agent-timeout MS] [options]\n"
                                     "       hyperfarm-scheduler --restore SNAPSHOT --db NEW.db [--checkpoint-dir DIR]";

/* The agent provisioner's rows (docs/deploy.md "Slurm";
 * scheduler/provision/provision_opts.c reads them) into tab. RET their number. */
#define PROVISION_ROWS 15
static size_t provision_rows(sched_options *o, hf_cfg_opt *tab)
{
    const hf_cfg_opt t[] = {
        {"provisioner", "HYPERFARM_PROVISIONER", HF_CFG_STR, &o->provisioner, "none", 0, 0,
         "none | slurm: submit agent jobs when queued trials cannot be placed (docs/deploy.md \"Slurm\")"},
        {"provision-scheduler-url", "HYPERFARM_PROVISION_SCHEDULER_URL", HF_CFG_STR, &o->prov_url, NULL, 0, 0,
         "the URL provisioned agents reach this scheduler at (required with --provisioner)"},
        {"provision-agent", "HYPERFARM_PROVISION_AGENT", HF_CFG_STR, &o->prov_agent, "hyperfarm-agent", 0, 0,
         "the agent program a provisioned job runs (a path on the compute nodes, or a name on their PATH)"},
        {"provision-agent-args", "HYPERFARM_PROVISION_AGENT_ARGS", HF_CFG_STR, &o->prov_agent_args, NULL, 0, 0,
         "further arguments of the provisioned agents, blank-separated (e.g. --token-file F --sandbox off)"},
        {"provision-interval-ms", NULL, HF_CFG_INT, &o->prov_interval_ms, "2000", 100, 3600000,
         "ms between the provisioner's passes (list jobs, compare with the queue, submit or cancel)"},
        {"slurm-partition", "HYPERFARM_SLURM_PARTITION", HF_CFG_STR, &o->slurm_partition, NULL, 0, 0,
         "sbatch --partition of agent jobs (default: the cluster's)"},
        {"slurm-account", "HYPERFARM_SLURM_ACCOUNT", HF_CFG_STR, &o->slurm_account, NULL, 0, 0, "sbatch --account of agent jobs"},
        {"slurm-gres", "HYPERFARM_SLURM_GRES", HF_CFG_STR, &o->slurm_gres, NULL, 0, 0,
         "sbatch --gres per agent node, e.g. gpu:4 (an agent then offers that many GPU slots)"},
        {"slurm-cpus", "HYPERFARM_SLURM_CPUS", HF_CFG_INT, &o->slurm_cpus, "1", 1, 100000,
         "CPUs per agent (sbatch --cpus-per-task; the slots of a CPU agent)"},
        {"slurm-mem", "HYPERFARM_SLURM_MEM", HF_CFG_STR, &o->slurm_mem, NULL, 0, 0, "sbatch --mem per agent node, e.g. 16G"},
        {"slurm-max-agents", "HYPERFARM_SLURM_MAX_AGENTS", HF_CFG_INT, &o->slurm_max_agents, "8", 1, 1023,
         "nodes of submitted agent jobs at most, pending and running together"},
        {"slurm-idle-timeout", "HYPERFARM_SLURM_IDLE_TIMEOUT", HF_CFG_INT, &o->slurm_idle_timeout, "300", 1, 604800,
         "seconds a provisioned agent waits without a trial before it exits, giving its allocation back"},
        {"slurm-time", "HYPERFARM_SLURM_TIME", HF_CFG_INT, &o->slurm_time, "0", 0, 5256000,
         "sbatch --time of agent jobs in minutes (0: the partition's limit)"},
        {"slurm-sbatch-args", "HYPERFARM_SLURM_SBATCH_ARGS", HF_CFG_STR, &o->slurm_sbatch_args, NULL, 0, 0,
         "extra sbatch arguments, blank-separated, each passed as one argument (no shell), e.g. --qos=low"},
        {"slurm-job-name", "HYPERFARM_SLURM_JOB_NAME", HF_CFG_STR, &o->slurm_job_name, "hyperfarm-agent", 0, 0,
         "name of agent jobs; squeue --name lists this provisioner's jobs by it (one name per scheduler)"},
    };
    _Static_assert(sizeof t / sizeof t[0] == PROVISION_ROWS, "PROVISION_ROWS");
    memcpy(tab, t, sizeof t);
    return sizeof t / sizeof t[0];
}

void options_table(sched_options *o, hf_cfg_opt tab[OPTIONS_MAX])
{
    const hf_cfg_opt t[] = {
        {"listen", "HYPERFARM_LISTEN", HF_CFG_STR, &o->listen, "127.0.0.1:8080", 0, 0, "address:port to serve on (port 0: any)"},
        {"db", "HYPERFARM_DB", HF_CFG_STR, &o->db, "./hyperfarm.db", 0, 0, "SQLite database file"},
        {"checkpoint-dir", "HYPERFARM_CHECKPOINT_DIR", HF_CFG_STR, &o->ck_dir, NULL, 0, 0,
         "directory of the checkpoint store (default: the --db file's name + .checkpoints)"},
        {"checkpoint-storage", "HYPERFARM_CHECKPOINT_STORAGE", HF_CFG_STR, &o->ck_storage, "scheduler", 0, 0,
         "scheduler: agents upload checkpoints to this store; shared_fs: --checkpoint-dir is an absolute path "
         "every agent mounts at the same place, and agents write objects there themselves"},
        {"checkpoint-gc-grace", "HYPERFARM_CHECKPOINT_GC_GRACE", HF_CFG_INT, &o->ck_grace, "3600", 0, 31536000,
         "seconds an object no row names is left alone before the start-up garbage collection removes it"},
        {"max-checkpoint-mb", "HYPERFARM_MAX_CHECKPOINT_MB", HF_CFG_INT, &o->max_ck_mb, "8192", 1, 1048576,
         "largest checkpoint the store accepts, in MiB (a larger upload is refused before it is read)"},
        {"synchronous", "HYPERFARM_SYNCHRONOUS", HF_CFG_STR, &o->synchronous, "full", 0, 0,
         "full: every acknowledged write is fsynced (survives a power cut); normal: fsync at WAL checkpoints "
         "only, faster, a power cut may lose the last acknowledged writes (docs/scheduler.md, \"Durability\")"},
        {"backup-dir", "HYPERFARM_BACKUP_DIR", HF_CFG_STR, &o->backup_dir, NULL, 0, 0,
         "absolute directory on this server (e.g. a mounted backup disk) for scheduled snapshots"},
        {"backup-interval", "HYPERFARM_BACKUP_INTERVAL", HF_CFG_INT, &o->backup_interval, "0", 0, 31536000,
         "seconds between scheduled snapshots into --backup-dir (0: none)"},
        {"backup-keep", "HYPERFARM_BACKUP_KEEP", HF_CFG_INT, &o->backup_keep, "7", 1, 100000,
         "scheduled snapshots kept in --backup-dir (the oldest are removed)"},
        {"backup-rate-mb", "HYPERFARM_BACKUP_RATE_MB", HF_CFG_INT, &o->backup_rate_mb, "32", 0, 1048576,
         "MiB/s a backup writes at most (0: no limit), leaving the disk to the heartbeats' fsyncs"},
        {"restore", NULL, HF_CFG_STR, &o->restore, NULL, 0, 0,
         "restore the snapshot directory SNAPSHOT into a new --db and --checkpoint-dir, verified, and exit"},
        {"standby-of", "HYPERFARM_STANDBY_OF", HF_CFG_STR, &o->standby_of, NULL, 0, 0,
         "run as a read-only standby of the primary at URL[,URL...]: replicate its database and checkpoint "
         "store, serve reads, take over on promotion (docs/scheduler.md, \"Standby and failover\")"},
        {"standby-token-file", "HYPERFARM_STANDBY_TOKEN_FILE", HF_CFG_STR, &o->standby_token_file, NULL, 0, 0,
         "file whose first admin token this scheduler presents to its primary and peers (default: the first "
         "admin token of --token-file)"},
        {"peers", "HYPERFARM_PEERS", HF_CFG_STR, &o->peers, NULL, 0, 0,
         "URL[,URL...] of the other schedulers of this cluster: a primary that finds one of them primary with a "
         "higher term steps down to its standby (fencing)"},
        {"failover-after", "HYPERFARM_FAILOVER_AFTER", HF_CFG_INT, &o->failover_after, "10", 0, 3600,
         "a standby promotes itself after this many seconds without its primary, if a majority of the live "
         "agents lost it too (0: manual promotion only)"},
        {"replication", "HYPERFARM_REPLICATION", HF_CFG_STR, &o->replication, "sync", 0, 0,
         "sync: with a standby in sync, a write is answered once the standby holds it; async: never wait (loss "
         "window: the lag) (docs/scheduler.md, \"Replication\")"},
        {"standby-timeout", "HYPERFARM_STANDBY_TIMEOUT", HF_CFG_INT, &o->standby_timeout, "5", 1, 3600,
         "seconds without the standby (or of one write's wait) before the primary degrades to not waiting"},
        {"repl-buffer-mb", "HYPERFARM_REPL_BUFFER_MB", HF_CFG_INT, &o->repl_buffer_mb, "64", 1, 65536,
         "MiB of recent changesets kept for a standby that falls behind (older: it bootstraps again)"},
        {"web", "HYPERFARM_WEB", HF_CFG_STR, &o->web, NULL, 0, 0, "serve the dashboard from DIR instead of the copy built into the binary (development)"},
        {"token-file", "HYPERFARM_TOKEN_FILE", HF_CFG_STR, &o->token_file, NULL, 0, 0,
         "file of role:token or role:name token lines (admin|user|viewer|agent); without it: loopback only, no auth"},
        {"webhook-allow-private", "HYPERFARM_WEBHOOK_ALLOW_PRIVATE", HF_CFG_BOOL, &o->wh_allow_private, "0", 0, 0,
         "let webhooks target loopback, private, link-local and this machine's addresses (never the scheduler's "
         "own port)"},
        {"tls-cert", "HYPERFARM_TLS_CERT", HF_CFG_STR, &o->tls_cert, NULL, 0, 0, "PEM certificate: serve HTTPS"},
        {"tls-key", "HYPERFARM_TLS_KEY", HF_CFG_STR, &o->tls_key, NULL, 0, 0, "PEM private key for --tls-cert"},
        {"agent-timeout", "HYPERFARM_AGENT_TIMEOUT", HF_CFG_INT, &o->agent_timeout, "10000", 200, 3600000,
         "ms without heartbeat before an agent is LOST (also the re-registration grace after a restart)"},
        {"heartbeat-ms", NULL, HF_CFG_INT, &o->hb_ms, "1000", 50, 60000, "heartbeat interval told to idle agents"},
        {"heartbeat-fast-ms", NULL, HF_CFG_INT, &o->hb_fast_ms, "250", 20, 60000,
         "heartbeat interval told to agents with trials, kills or queued work"},
        {"heartbeat-rate", NULL, HF_CFG_INT, &o->hb_rate, "1000", 0, 1000000,
         "heartbeats/s all agents together may send: intervals grow to agents*1000/rate ms (0: fixed)"},
        {"threads", NULL, HF_CFG_INT, &o->threads, "4", 1, 256, "HTTP thread pool size"},
        {"max-conns-per-ip", "HYPERFARM_MAX_CONNS_PER_IP", HF_CFG_INT, &o->max_conns_per_ip, "1024", 0, 65536,
         "connections one client address may hold open (0: no limit); raise it for many agents behind one NAT address"},
        {"request-timeout", "HYPERFARM_REQUEST_TIMEOUT", HF_CFG_INT, &o->request_timeout, "15", 1, 3600,
         "seconds a connection may sit idle: a request whose headers or body stop arriving, or keep-alive "
         "between requests (parked agent long-polls and event streams are exempt)"},
        {"header-timeout", "HYPERFARM_HEADER_TIMEOUT", HF_CFG_INT, &o->header_timeout, "10", 1, 3600,
         "seconds a connection has, from its accept or the end of its previous request, to send a complete "
         "request header, however it trickles"},
        {"min-body-rate", "HYPERFARM_MIN_BODY_RATE", HF_CFG_INT, &o->min_body_rate, "1024", 0, 1073741824,
         "bytes/s a request body must average, from the end of its headers, once --header-timeout "
         "seconds have passed (0: no minimum)"},
        {"max-log-lines", NULL, HF_CFG_INT, &o->max_log_lines, "100000", 0, 100000000, "log lines kept per trial"},
        {"log-level", "HYPERFARM_LOG_LEVEL", HF_CFG_STR, &o->log_level, "info", 0, 0, "debug|info|warn|error"},
        {"log-format", "HYPERFARM_LOG_FORMAT", HF_CFG_STR, &o->log_format, "text", 0, 0, "text|json"},
        {"config", "HYPERFARM_CONFIG", HF_CFG_STR, &o->config, NULL, 0, 0, "file of name = value lines"},
        {"print-config", NULL, HF_CFG_BOOL, &o->print_config, "0", 0, 0, "print the effective configuration and exit"},
        HF_CFG_END,
    };
    _Static_assert(sizeof t / sizeof t[0] + PROVISION_ROWS <= OPTIONS_MAX, "raise OPTIONS_MAX");
    memset(tab, 0, OPTIONS_MAX * sizeof *tab);
    memcpy(tab, t, sizeof t - sizeof t[0]);   /* all but HF_CFG_END: the provisioner's rows follow */
    provision_rows(o, tab + sizeof t / sizeof t[0] - 1);   /* and the memset's zeros end the table */
}
