/*
 * main.c — hyperfarm-scheduler: parse the configuration, open and migrate
 * the store, rebuild the core (searchers by replay), start the HTTP API
 * and the cron thread, and run until SIGINT/SIGTERM.
 *
 * Without --token-file every request is accepted, so the scheduler then
 * binds to loopback only, whatever --listen says, and logs that it did.
 */
#include "hf_config.h"
#include "hf_err.h"
#include "hf_log.h"
#include "scheduler/api/api.h"
#include "scheduler/api/auth.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/core/cron.h"
#include "scheduler/core/doorbell.h"
#include "scheduler/notify/events.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "scheduler/notify/webhook.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static volatile sig_atomic_t stop_flag;

static void ring_agent(void *ctx, int64_t agent_id) { doorbell_ring(ctx, agent_id); }

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

int main(int argc, char **argv)
{
    const char *listen = NULL, *db = NULL, *web = NULL, *token_file = NULL, *tls_cert = NULL, *tls_key = NULL;
    const char *log_level = NULL, *log_format = NULL, *config = NULL, *ck_dir = NULL, *ck_storage = NULL;
    int64_t agent_timeout = 0, hb_ms = 0, hb_fast_ms = 0, hb_rate = 0, threads = 0, max_log_lines = 0;
    int64_t max_conns_per_ip = 0, request_timeout = 0, max_ck_mb = 0, ck_grace = 0;
    int64_t header_timeout = 0, min_body_rate = 0;
    int print_config = 0, wh_allow_private = 0;
    hf_cfg_opt opts[] = {
        {"listen", "HYPERFARM_LISTEN", HF_CFG_STR, &listen, "127.0.0.1:8080", 0, 0, "address:port to serve on (port 0: any)"},
        {"db", "HYPERFARM_DB", HF_CFG_STR, &db, "./hyperfarm.db", 0, 0, "SQLite database file"},
        {"checkpoint-dir", "HYPERFARM_CHECKPOINT_DIR", HF_CFG_STR, &ck_dir, NULL, 0, 0,
         "directory of the checkpoint store (default: the --db file's name + .checkpoints)"},
        {"checkpoint-storage", "HYPERFARM_CHECKPOINT_STORAGE", HF_CFG_STR, &ck_storage, "scheduler", 0, 0,
         "scheduler: agents upload checkpoints to this store; shared_fs: --checkpoint-dir is an absolute path "
         "every agent mounts at the same place, and agents write objects there themselves"},
        {"checkpoint-gc-grace", "HYPERFARM_CHECKPOINT_GC_GRACE", HF_CFG_INT, &ck_grace, "3600", 0, 31536000,
         "seconds an object no row names is left alone before the start-up garbage collection removes it"},
        {"max-checkpoint-mb", "HYPERFARM_MAX_CHECKPOINT_MB", HF_CFG_INT, &max_ck_mb, "8192", 1, 1048576,
         "largest checkpoint the store accepts, in MiB (a larger upload is refused before it is read)"},
        {"web", "HYPERFARM_WEB", HF_CFG_STR, &web, NULL, 0, 0, "serve the dashboard from DIR instead of the copy built into the binary (development)"},
        {"token-file", "HYPERFARM_TOKEN_FILE", HF_CFG_STR, &token_file, NULL, 0, 0,
         "file of role:token or role:name token lines (admin|user|viewer|agent); without it: loopback only, no auth"},
        {"webhook-allow-private", "HYPERFARM_WEBHOOK_ALLOW_PRIVATE", HF_CFG_BOOL, &wh_allow_private, "0", 0, 0,
         "let webhooks target loopback, private, link-local and this machine's addresses (never the scheduler's "
         "own port)"},
        {"tls-cert", "HYPERFARM_TLS_CERT", HF_CFG_STR, &tls_cert, NULL, 0, 0, "PEM certificate: serve HTTPS"},
        {"tls-key", "HYPERFARM_TLS_KEY", HF_CFG_STR, &tls_key, NULL, 0, 0, "PEM private key for --tls-cert"},
        {"agent-timeout", "HYPERFARM_AGENT_TIMEOUT", HF_CFG_INT, &agent_timeout, "10000", 200, 3600000,
         "ms without heartbeat before an agent is LOST (also the re-registration grace after a restart)"},
        {"heartbeat-ms", NULL, HF_CFG_INT, &hb_ms, "1000", 50, 60000, "heartbeat interval told to idle agents"},
        {"heartbeat-fast-ms", NULL, HF_CFG_INT, &hb_fast_ms, "250", 20, 60000,
         "heartbeat interval told to agents with trials, kills or queued work"},
        {"heartbeat-rate", NULL, HF_CFG_INT, &hb_rate, "1000", 0, 1000000,
         "heartbeats/s all agents together may send: intervals grow to agents*1000/rate ms (0: fixed)"},
        {"threads", NULL, HF_CFG_INT, &threads, "4", 1, 256, "HTTP thread pool size"},
        {"max-conns-per-ip", "HYPERFARM_MAX_CONNS_PER_IP", HF_CFG_INT, &max_conns_per_ip, "1024", 0, 65536,
         "connections one client address may hold open (0: no limit); raise it for many agents behind one NAT address"},
        {"request-timeout", "HYPERFARM_REQUEST_TIMEOUT", HF_CFG_INT, &request_timeout, "15", 1, 3600,
         "seconds a connection may sit idle: a request whose headers or body stop arriving, or keep-alive "
         "between requests (parked agent long-polls and event streams are exempt)"},
        {"header-timeout", "HYPERFARM_HEADER_TIMEOUT", HF_CFG_INT, &header_timeout, "10", 1, 3600,
         "seconds a connection has, from its accept or the end of its previous request, to send a complete "
         "request header, however it trickles"},
        {"min-body-rate", "HYPERFARM_MIN_BODY_RATE", HF_CFG_INT, &min_body_rate, "1024", 0, 1073741824,
         "bytes/s a request body must average, from the end of its headers, once --header-timeout "
         "seconds have passed (0: no minimum)"},
        {"max-log-lines", NULL, HF_CFG_INT, &max_log_lines, "100000", 0, 100000000, "log lines kept per trial"},
        {"log-level", "HYPERFARM_LOG_LEVEL", HF_CFG_STR, &log_level, "info", 0, 0, "debug|info|warn|error"},
        {"log-format", "HYPERFARM_LOG_FORMAT", HF_CFG_STR, &log_format, "text", 0, 0, "text|json"},
        {"config", "HYPERFARM_CONFIG", HF_CFG_STR, &config, NULL, 0, 0, "file of name = value lines"},
        {"print-config", NULL, HF_CFG_BOOL, &print_config, "0", 0, 0, "print the effective configuration and exit"},
        HF_CFG_END,
    };
    const char *synopsis = "hyperfarm-scheduler [--listen ADDR:PORT] [--db PATH] [--web DIR] [--token-file F] "
                           "[--tls-cert F --tls-key F] [--agent-timeout MS] [options]";
    char err[512];
    int npos = 0, rc, level, ret = 1;
    store *st = NULL;
    sched *s = NULL;
    events_hub *ev = NULL;
    auth *au = NULL;
    api *a = NULL;
    cron *cr = NULL;
    doorbell *bell = NULL;
    ckstore *ck = NULL;
    ckretain *cret = NULL;
    webhook_svc *wh = NULL;
    char ck_default[4096];

    hf_log_init("hyperfarm-scheduler");
    rc = hf_config_parse(opts, argc, argv, &npos, err, sizeof err);
    if (rc == 1) { hf_config_usage(stdout, synopsis, opts); hf_config_free(opts); return 0; }
    if (rc) { fprintf(stderr, "hyperfarm-scheduler: %s\n", err); hf_config_free(opts); return 2; }
    if (npos) { fprintf(stderr, "hyperfarm-scheduler: unexpected argument '%s'\n", argv[1]); goto end; }
    if (hf_log_parse_level(log_level, &level)) { fprintf(stderr, "hyperfarm-scheduler: bad --log-level\n"); goto end; }
    hf_log_set_level(level);
    if (strcmp(log_format, "json") == 0) hf_log_set_format(HF_LOG_JSON);
    else if (strcmp(log_format, "text")) { fprintf(stderr, "hyperfarm-scheduler: --log-format text|json\n"); goto end; }
    if (print_config) { hf_config_print(stdout, opts); ret = 0; goto end; }

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    char host[256], listen_buf[300];
    int port;
    if (api_parse_listen(listen, host, sizeof host, &port)) {
        hf_error("--listen %s: expected ADDR:PORT", listen);
        goto end;
    }
    if (token_file) {
        if ((rc = auth_load(token_file, &au, err, sizeof err))) { hf_error("token file: %s", err); goto end; }
        struct stat sb;
        if (stat(token_file, &sb) == 0 && (sb.st_mode & 077))
            hf_warn("token file %s is readable by group/others; chmod 600 it", token_file);
        hf_info("auth: %zu tokens from %s", auth_count(au), token_file);
    } else if (!api_is_loopback(host)) {
        hf_warn("no --token-file: refusing to serve %s without authentication; listening on 127.0.0.1 only", host);
        snprintf(listen_buf, sizeof listen_buf, "127.0.0.1:%d", port);
        listen = listen_buf;
    } else {
        hf_info("no --token-file: authentication off, loopback only");
    }

    if ((rc = store_open(db, &st, err, sizeof err))) { hf_error("store: %s", err); goto end; }
    if (!ck_dir) {
        snprintf(ck_default, sizeof ck_default, "%s.checkpoints", db);
        ck_dir = ck_default;
    }
    int shared_fs = strcmp(ck_storage, "shared_fs") == 0;
    if (!shared_fs && strcmp(ck_storage, "scheduler")) {
        hf_error("--checkpoint-storage %s: expected scheduler or shared_fs", ck_storage);
        goto end;
    }
    if (shared_fs && ck_dir == ck_default) {
        hf_error("--checkpoint-storage shared_fs needs --checkpoint-dir: the path every agent mounts");
        goto end;
    }
    if (shared_fs && ck_dir[0] != '/') {
        hf_error("--checkpoint-dir %s: shared_fs needs an absolute path (agents use it as is)", ck_dir);
        goto end;
    }
    if ((rc = ckstore_open(ck_dir, db, max_ck_mb << 20, &ck, err, sizeof err))) { hf_error("%s", err); goto end; }
    ckstore_set_shared(ck, shared_fs);
    int64_t ck_objects, ck_bytes;
    ckstore_stats(ck, &ck_objects, &ck_bytes);
    hf_info("checkpoint store (%s) %s: %lld objects, %lld bytes", ck_storage, ck_dir, (long long)ck_objects,
            (long long)ck_bytes);
    if ((rc = ckretain_open(ck, db, 2000, ck_grace * 1000, &cret, err, sizeof err)) || (rc = ckretain_start(cret))) {
        hf_error("checkpoint retention: %s", rc == HF_ENOMEM ? "cannot start its thread" : err);
        goto end;
    }
    if ((rc = webhook_open(db, &wh, err, sizeof err))) { hf_error("%s", err); goto end; }
    ev = events_new();
    sched_config sc;
    sched_config_defaults(&sc);
    sc.agent_timeout_ms = agent_timeout;
    sc.heartbeat_ms = hb_ms;
    sc.heartbeat_fast_ms = hb_fast_ms;
    sc.heartbeat_rate = hb_rate;
    sc.max_log_lines = max_log_lines;
    sc.ck_shared_dir = shared_fs ? ck_dir : NULL;
    if (sc.assign_timeout_ms < 3 * agent_timeout) sc.assign_timeout_ms = 3 * agent_timeout;
    if (!ev || (rc = sched_new(&sc, st, ev, &s, err, sizeof err))) { hf_error("core: %s", err); goto end; }
    if (!(bell = doorbell_new())) { hf_error("out of memory"); goto end; }
    sched_set_doorbell(s, ring_agent, bell);
    api_config ac = {.listen = listen, .web_dir = web, .tls_cert = tls_cert, .tls_key = tls_key, .threads = (int)threads,
                     .bell = bell, .max_conns_per_ip = (int)max_conns_per_ip,
                     .request_timeout_s = (int)request_timeout, .header_timeout_s = (int)header_timeout,
                     .min_body_rate = min_body_rate > 0 ? (int)min_body_rate : -1, .ck = ck, .cr = cret, .wh = wh};
    if ((rc = api_start(&ac, s, st, ev, au, &a, err, sizeof err))) { hf_error("api: %s", err); goto end; }
    webhook_set_policy(wh, wh_allow_private, api_port(a));
    if (!(cr = cron_start(s, ev, bell))) { hf_error("cannot start the cron thread"); goto end; }
    hf_info("listening on %s://%s:%d (db %s, schema v%d%s%s)", tls_cert ? "https" : "http",
            strchr(listen, '[') ? "[::]" : (api_parse_listen(listen, host, sizeof host, &port), host), api_port(a), db,
            store_version(st), web ? ", web " : ", built-in dashboard", web ? web : "");
    /* A line tests and scripts can wait for. */
    fprintf(stdout, "hyperfarm-scheduler: ready on port %d\n", api_port(a));
    fflush(stdout);
    while (!stop_flag) pause();
    hf_info("shutting down");
    ret = 0;
end:
    cron_stop(cr);
    if (s) sched_set_doorbell(s, NULL, NULL);
    events_close_all(ev);
    api_stop(a);   /* answers parked long-polls first */
    sched_free(s);
    doorbell_free(bell);
    events_free(ev);
    ckretain_close(cret);
    ckstore_close(ck);
    webhook_close(wh);
    store_close(st);
    auth_free(au);
    hf_config_free(opts);
    return ret;
}
