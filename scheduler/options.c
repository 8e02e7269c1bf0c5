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
    _Static_assert(sizeof t / sizeof t[0] <= OPTIONS_MAX, "raise OPTIONS_MAX");
    memset(tab, 0, OPTIONS_MAX * sizeof *tab);
    memcpy(tab, t, sizeof t);
}
