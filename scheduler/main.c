/*
 * main.c — hyperfarm-scheduler: parse the configuration, open and migrate
 * the store, rebuild the core (searchers by replay), start the HTTP API
 * and the cron thread, and run until SIGINT/SIGTERM.
 *
 * Without --token-file every request is accepted, so the scheduler then
 * binds to loopback only, whatever --listen says, and logs that it did.
 *
 * With --standby-of the process is a standby (docs/scheduler.md "Standby
 * and failover"): its database is made a replica first (scheduler/standby/),
 * then the store's readers, the checkpoint store and the API serve in the
 * standby role without the core, and the apply thread follows the primary;
 * no cron, dispatch, retention, webhook delivery or backups. Promotion and
 * fencing end such a process by re-executing it (standby.h). A primary
 * with --peers asks them before the core starts whether it was replaced.
 *
 * The settings are options.c's table; start-up is a sequence of steps
 * over one struct of handles (app), each step logging its own error, and
 * shutdown (app_stop) undoes whatever was started, in reverse order.
 */
#include "hf_config.h"
#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/api/api.h"
#include "scheduler/api/auth.h"
#include "scheduler/store/backup.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/core/cron.h"
#include "scheduler/core/doorbell.h"
#include "scheduler/notify/events.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"
#include "scheduler/notify/webhook.h"
#include "scheduler/options.h"
#include "scheduler/provision/provision.h"
#include "scheduler/provision/provision_opts.h"
#include "scheduler/standby/standby.h"
#include "scheduler/store/repl.h"

#include <ctype.h>
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

/* Everything the scheduler runs; NULL = not started. */
typedef struct app {
    store       *st;
    sched       *s;
    events_hub  *ev;
    auth        *au;
    api         *a;
    cron        *cr;
    doorbell    *bell;
    ckstore     *ck;
    ckretain    *cret;
    webhook_svc *wh;
    int          standby;      /* --standby-of: no core, no cron, no retention, no webhooks, no backups */
    int          shared_fs;
    char         ck_default[4096];
    char         listen_buf[300];
    char         token[AUTH_TOKEN_MAX + 1];   /* --standby-token-file's admin token (standby, peers) */
    char        *urls_buf, *peers_buf;        /* the comma lists, split in place */
    const char  *urls[16], *peers[16];
    int          nurls, npeers;
} app;

/* Log level and format. RET 0, or -1 with a message on stderr. */
static int setup_log(const sched_options *o)
{
    int level;
    if (hf_log_parse_level(o->log_level, &level)) { fprintf(stderr, "hyperfarm-scheduler: bad --log-level\n"); return -1; }
    hf_log_set_level(level);
    if (strcmp(o->log_format, "json") == 0) hf_log_set_format(HF_LOG_JSON);
    else if (strcmp(o->log_format, "text")) {
        fprintf(stderr, "hyperfarm-scheduler: --log-format text|json\n");
        return -1;
    }
    return 0;
}

static void setup_signals(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The token file, or without one loopback only (o->listen may be
 * rewritten to 127.0.0.1:PORT, kept in p->listen_buf). RET 0 or -1. */
static int setup_auth(app *p, sched_options *o)
{
    char host[256], err[512];
    int port;
    if (api_parse_listen(o->listen, host, sizeof host, &port)) {
        hf_error("--listen %s: expected ADDR:PORT", o->listen);
        return -1;
    }
    if (o->token_file) {
        if (auth_load(o->token_file, &p->au, err, sizeof err)) { hf_error("token file: %s", err); return -1; }
        struct stat sb;
        if (stat(o->token_file, &sb) == 0 && (sb.st_mode & 077))
            hf_warn("token file %s is readable by group/others; chmod 600 it", o->token_file);
        hf_info("auth: %zu tokens from %s", auth_count(p->au), o->token_file);
    } else if (!api_is_loopback(host)) {
        hf_warn("no --token-file: refusing to serve %s without authentication; listening on 127.0.0.1 only", host);
        snprintf(p->listen_buf, sizeof p->listen_buf, "127.0.0.1:%d", port);
        o->listen = p->listen_buf;
    } else {
        hf_info("no --token-file: authentication off, loopback only");
    }
    return 0;
}

/* --checkpoint-dir's default: the --db file's name + .checkpoints. */
static void default_ck_dir(app *p, sched_options *o)
{
    if (o->ck_dir) return;
    snprintf(p->ck_default, sizeof p->ck_default, "%s.checkpoints", o->db);
    o->ck_dir = p->ck_default;
}

/* --restore SNAPSHOT: a new --db and --checkpoint-dir from it. RET the exit status. */
static int run_restore(app *p, sched_options *o)
{
    char err[1024];
    default_ck_dir(p, o);
    int rc = backup_restore(o->restore, o->db, o->ck_dir, err, sizeof err);
    if (rc) {
        hf_error("restore of %s: %s", o->restore, err);
        return rc == HF_EEXIST ? 2 : 1;
    }
    fprintf(stdout, "hyperfarm-scheduler: restored %s into --db %s --checkpoint-dir %s\n", o->restore, o->db,
            o->ck_dir);
    return 0;
}

/* Split the comma list s (copied into *buf) into at most 16 URLs. RET the count. */
static int split_urls(const char *s, char **buf, const char **out)
{
    int n = 0;
    if (!s || !(*buf = strdup(s))) return 0;
    for (char *save = NULL, *t = strtok_r(*buf, ", ", &save); t && n < 16; t = strtok_r(NULL, ", ", &save))
        out[n++] = t;
    return n;
}

/* The first admin token of the token file path into p->token. RET 0 or -1. */
static int first_admin_token(app *p, const char *path)
{
    char line[1024];
    FILE *f = path ? fopen(path, "r") : NULL;
    int rc = -1;
    if (!f) return -1;
    while (rc && fgets(line, sizeof line, f)) {
        char *t = line + strspn(line, " \t");
        if (strncmp(t, "admin:", 6)) continue;
        t += 6;
        char *sp = strpbrk(t, " \t");   /* "admin:NAME TOKEN" */
        if (sp) t = sp + strspn(sp, " \t");
        t[strcspn(t, " \t\r\n")] = 0;
        if (*t && strlen(t) <= AUTH_TOKEN_MAX) {
            snprintf(p->token, sizeof p->token, "%s", t);
            rc = 0;
        }
    }
    fclose(f);
    return rc;
}

/* --standby-of, --peers and the token they present. RET 0 or -1. */
static int setup_replication(app *p, const sched_options *o)
{
    p->nurls = split_urls(o->standby_of, &p->urls_buf, p->urls);
    p->npeers = split_urls(o->peers, &p->peers_buf, p->peers);
    p->standby = o->standby_of && *o->standby_of;   /* "": a promoted standby's re-exec (standby.c) */
    if (p->standby && !p->nurls) { hf_error("--standby-of: expected URL[,URL...]"); return -1; }
    if (!p->standby && !p->npeers) return 0;
    const char *tf = o->standby_token_file ? o->standby_token_file : o->token_file;
    if (tf && first_admin_token(p, tf)) {
        hf_error("%s: no admin token for the %s", tf, p->standby ? "primary (--standby-of)" : "peers (--peers)");
        return -1;
    }
    return 0;
}

/* A standby's store: the database (made a replica first: bootstrap when
 * needed) and the checkpoint store, read-only for the API; no retention,
 * no webhook delivery, no backups (docs/scheduler.md "Standby and failover"). */
static int setup_standby_store(app *p, sched_options *o, char *const *argv, int argc)
{
    char err[512];
    default_ck_dir(p, o);
    standby_config sc = {.urls = p->urls, .nurls = p->nurls, .token = p->token[0] ? p->token : NULL,
                         .db = o->db, .ck_dir = o->ck_dir, .failover_after_s = o->failover_after,
                         .argv = argv, .argc = argc};
    if (hf_file_mkdir_durable(o->ck_dir)) { hf_error("cannot create --checkpoint-dir %s", o->ck_dir); return -1; }
    int rc = standby_prepare(&sc, &stop_flag, err, sizeof err);
    if (rc) { hf_error("standby: %s", err); return -1; }
    if (store_open(o->db, &p->st, err, sizeof err)) { hf_error("store: %s", err); return -1; }
    if (ckstore_open(o->ck_dir, o->db, o->max_ck_mb << 20, &p->ck, err, sizeof err)) { hf_error("%s", err); return -1; }
    ckstore_set_shared(p->ck, strcmp(o->ck_storage, "shared_fs") == 0);
    return 0;
}

/* What a standby calls itself in its stream requests (name=): host:port,
 * so that the primary lists two standbys behind one address apart. */
static void standby_name(char *out, size_t len, int port)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "standby");
    for (char *c = host; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '.' && *c != '-') *c = '-';
    char tail[16];
    int tl = snprintf(tail, sizeof tail, ":%d", port);
    snprintf(out, len, "%.*s%s", (int)(len - 1 - (size_t)tl), host, tail);
}

/* A standby's API (read-only: the role gate answers 503 for writes and for
 * the routes that need the core, which a standby does not run) and its
 * apply loop. */
static int setup_standby_api(app *p, const sched_options *o, char *const *argv, int argc)
{
    char err[512];
    /* The role first: repl_start then only reads term, lsn and cluster (a
     * 1 MiB ring that never fills: a standby serves no stream). */
    repl_config rc = {.mode = REPL_SYNC, .standby_timeout_s = 5, .buffer_bytes = 1 << 20};
    repl_set_role(REPL_STANDBY);
    if (repl_start(store_db(p->st), &rc, err, sizeof err)) { hf_error("%s", err); return -1; }
    repl_set_primary_hint(p->urls[0]);
    repl_set_vote_hook(failover_vote);
    if (!(p->ev = events_new())) { hf_error("out of memory"); return -1; }
    api_config ac = {.listen = o->listen, .web_dir = o->web, .tls_cert = o->tls_cert, .tls_key = o->tls_key,
                     .threads = (int)o->threads, .max_conns_per_ip = (int)o->max_conns_per_ip,
                     .request_timeout_s = (int)o->request_timeout, .header_timeout_s = (int)o->header_timeout,
                     .min_body_rate = o->min_body_rate > 0 ? (int)o->min_body_rate : -1, .ck = p->ck};
    if (api_start(&ac, NULL, p->st, p->ev, p->au, &p->a, err, sizeof err)) { hf_error("api: %s", err); return -1; }
    standby_config sc = {.urls = p->urls, .nurls = p->nurls, .token = p->token[0] ? p->token : NULL,
                         .db = o->db, .ck_dir = o->ck_dir, .failover_after_s = o->failover_after,
                         .argv = argv, .argc = argc};
    standby_name(sc.name, sizeof sc.name, api_port(p->a));
    if (standby_start(&sc)) { hf_error("cannot start the standby's apply thread"); return -1; }
    hf_info("standby of %s (%d URL%s): read-only; automatic promotion %s", p->urls[0], p->nurls,
            p->nurls > 1 ? "s" : "", o->failover_after ? "on" : "off (--failover-after 0)");
    return 0;
}

/* A primary with --peers: step down now if a peer is primary of a higher
 * term (does not return then), and keep checking every 2 s. RET 0 or -1. */
static int setup_peers(app *p, const sched_options *o, char *const *argv, int argc)
{
    if (!p->npeers) return 0;
    peers_config pc = {.urls = p->peers, .nurls = p->npeers, .token = p->token[0] ? p->token : NULL,
                       .db = o->db, .argv = argv, .argc = argc};
    peers_check_once(&pc);
    if (peers_start(&pc)) { hf_error("cannot start the peer-check thread"); return -1; }
    return 0;
}

/* The backup service: requested snapshots (POST /api/v1/backups) and the
 * scheduled ones (--backup-dir, --backup-interval). RET 0 or -1. */
static int setup_backup(const sched_options *o, ckstore *ck)
{
    char err[512];
    if (o->backup_interval && !o->backup_dir) { hf_error("--backup-interval needs --backup-dir"); return -1; }
    if (o->backup_interval && backup_check_dir(o->backup_dir, o->db, o->ck_dir, err, sizeof err)) {
        hf_error("--backup-dir: %s", err);
        return -1;
    }
    backup_set_rate(o->backup_rate_mb << 20);
    if (backup_service_start(o->db, ck, o->backup_interval ? o->backup_dir : NULL, o->backup_interval,
                             (int)o->backup_keep)) {
        hf_error("cannot start the backup thread");
        return -1;
    }
    if (o->backup_interval)
        hf_info("backups: every %lld s into %s, keeping %lld", (long long)o->backup_interval, o->backup_dir,
                (long long)o->backup_keep);
    return 0;
}

/* The store, the checkpoint store and its retention, the webhooks. */
static int setup_store(app *p, sched_options *o)
{
    char err[512];
    int rc;
    int sync;
    if (store_sync_parse(o->synchronous, &sync)) { hf_error("--synchronous %s: expected full or normal", o->synchronous); return -1; }
    if (store_open(o->db, &p->st, err, sizeof err)) { hf_error("store: %s", err); return -1; }
    if (store_set_sync(p->st, sync)) { hf_error("store: cannot set synchronous=%s", o->synchronous); return -1; }
    repl_config rcf = {.standby_timeout_s = (int)o->standby_timeout, .buffer_bytes = o->repl_buffer_mb << 20};
    err[0] = 0;   /* the replication log (docs/scheduler.md "Replication") */
    if (repl_mode_parse(o->replication, &rcf.mode) || repl_start(store_db(p->st), &rcf, err, sizeof err)) {
        hf_error("%s", err[0] ? err : "--replication: expected sync or async");
        return -1;
    }
    if (sync == STORE_SYNC_NORMAL)
        hf_warn("--synchronous normal: a power cut may lose the last acknowledged writes (docs/scheduler.md)");
    default_ck_dir(p, o);
    p->shared_fs = strcmp(o->ck_storage, "shared_fs") == 0;
    if (!p->shared_fs && strcmp(o->ck_storage, "scheduler")) {
        hf_error("--checkpoint-storage %s: expected scheduler or shared_fs", o->ck_storage);
        return -1;
    }
    if (p->shared_fs && o->ck_dir == p->ck_default) {
        hf_error("--checkpoint-storage shared_fs needs --checkpoint-dir: the path every agent mounts");
        return -1;
    }
    if (p->shared_fs && o->ck_dir[0] != '/') {
        hf_error("--checkpoint-dir %s: shared_fs needs an absolute path (agents use it as is)", o->ck_dir);
        return -1;
    }
    if (ckstore_open(o->ck_dir, o->db, o->max_ck_mb << 20, &p->ck, err, sizeof err)) { hf_error("%s", err); return -1; }
    ckstore_set_shared(p->ck, p->shared_fs);
    int64_t ck_objects, ck_bytes;
    ckstore_stats(p->ck, &ck_objects, &ck_bytes);
    hf_info("checkpoint store (%s) %s: %lld objects, %lld bytes", o->ck_storage, o->ck_dir, (long long)ck_objects,
            (long long)ck_bytes);
    if ((rc = ckretain_open(p->ck, o->db, 2000, o->ck_grace * 1000, &p->cret, err, sizeof err)) ||
        (rc = ckretain_start(p->cret))) {
        hf_error("checkpoint retention: %s", rc == HF_ENOMEM ? "cannot start its thread" : err);
        return -1;
    }
    if (webhook_open(o->db, &p->wh, err, sizeof err)) { hf_error("%s", err); return -1; }
    return 0;
}

/* The purge of a deleted experiment removed checkpoint rows (sched.h):
 * their objects go when no other row names them. */
static void release_objects(void *ctx, const char (*hashes)[SCHED_HASH_LEN + 1], size_t n)
{
    ckretain_release(ctx, hashes, n);
}

/* The core (loaded from the store), its doorbell, the API and the cron. */
static int setup_core(app *p, const sched_options *o)
{
    char err[512];
    sched_config sc;
    p->ev = events_new();
    sched_config_defaults(&sc);
    sc.agent_timeout_ms = o->agent_timeout;
    sc.heartbeat_ms = o->hb_ms;
    sc.heartbeat_fast_ms = o->hb_fast_ms;
    sc.heartbeat_rate = o->hb_rate;
    sc.max_log_lines = o->max_log_lines;
    sc.ck_shared_dir = p->shared_fs ? o->ck_dir : NULL;
    if (sc.assign_timeout_ms < 3 * o->agent_timeout) sc.assign_timeout_ms = 3 * o->agent_timeout;
    if (!p->ev || sched_new(&sc, p->st, p->ev, &p->s, err, sizeof err)) { hf_error("core: %s", err); return -1; }
    if (!(p->bell = doorbell_new())) { hf_error("out of memory"); return -1; }
    sched_set_doorbell(p->s, ring_agent, p->bell);
    sched_set_release(p->s, release_objects, p->cret);
    api_config ac = {.listen = o->listen, .web_dir = o->web, .tls_cert = o->tls_cert, .tls_key = o->tls_key,
                     .threads = (int)o->threads, .bell = p->bell, .max_conns_per_ip = (int)o->max_conns_per_ip,
                     .request_timeout_s = (int)o->request_timeout, .header_timeout_s = (int)o->header_timeout,
                     .min_body_rate = o->min_body_rate > 0 ? (int)o->min_body_rate : -1, .ck = p->ck, .cr = p->cret,
                     .wh = p->wh};
    if (api_start(&ac, p->s, p->st, p->ev, p->au, &p->a, err, sizeof err)) { hf_error("api: %s", err); return -1; }
    webhook_set_policy(p->wh, o->wh_allow_private, api_port(p->a));
    if (!(p->cr = cron_start(p->s, p->ev, p->bell))) { hf_error("cannot start the cron thread"); return -1; }
    return 0;
}

/* Stop and free whatever p holds, in reverse order of start. */
static void app_stop(app *p)
{
    peers_stop();
    standby_stop();
    provision_stop();   /* before the core it queries */
    cron_stop(p->cr);
    if (p->s) sched_set_doorbell(p->s, NULL, NULL);
    if (p->s) sched_set_release(p->s, NULL, NULL);
    events_close_all(p->ev);
    api_stop(p->a);   /* answers parked long-polls first */
    backup_service_stop();   /* after the API (its handlers queue backups), before the stores */
    sched_free(p->s);
    doorbell_free(p->bell);
    events_free(p->ev);
    ckretain_close(p->cret);
    ckstore_close(p->ck);
    webhook_close(p->wh);
    store_close(p->st);
    auth_free(p->au);
    free(p->urls_buf);
    free(p->peers_buf);
}

int main(int argc, char **argv)
{
    sched_options o;
    hf_cfg_opt opts[OPTIONS_MAX];
    static app p;   /* static: zeroed, and its buffers stay off the stack */
    char err[512], host[256];
    int npos = 0, port, ret = 1;

    memset(&o, 0, sizeof o);
    options_table(&o, opts);
    hf_log_init("hyperfarm-scheduler");
    int rc = hf_config_parse(opts, argc, argv, &npos, err, sizeof err);
    if (rc == 1) { hf_config_usage(stdout, options_synopsis, opts); hf_config_free(opts); return 0; }
    if (rc) { fprintf(stderr, "hyperfarm-scheduler: %s\n", err); hf_config_free(opts); return 2; }
    if (npos) { fprintf(stderr, "hyperfarm-scheduler: unexpected argument '%s'\n", argv[1]); goto end; }
    if (setup_log(&o)) goto end;
    if (o.print_config) { hf_config_print(stdout, opts); ret = 0; goto end; }
    if (o.restore) { ret = run_restore(&p, &o); goto end; }
    setup_signals();
    if (setup_auth(&p, &o) || setup_replication(&p, &o)) goto end;
    if (p.standby) {
        if (setup_standby_store(&p, &o, argv, argc) || setup_standby_api(&p, &o, argv, argc)) goto end;
    } else if (setup_store(&p, &o) || setup_peers(&p, &o, argv, argc) || setup_backup(&o, p.ck) ||
               setup_core(&p, &o) || provision_setup(&o, p.s)) {
        goto end;
    }
    hf_info("listening on %s://%s:%d (db %s, schema v%d%s%s)", o.tls_cert ? "https" : "http",
            strchr(o.listen, '[') ? "[::]" : (api_parse_listen(o.listen, host, sizeof host, &port), host),
            api_port(p.a), o.db, store_version(p.st), o.web ? ", web " : ", built-in dashboard", o.web ? o.web : "");
    /* A line tests and scripts can wait for. */
    fprintf(stdout, "hyperfarm-scheduler: ready on port %d\n", api_port(p.a));
    fflush(stdout);
    /* Not pause(): SIGTERM may be handled on any of the threads (each
     * has it unblocked), leaving this one asleep, and a signal between
     * the test and pause() would be lost the same way. A nap of 200 ms
     * notices the flag whichever thread set it (test_fault_leaks once
     * waited 30 s under valgrind for a scheduler that never stopped). */
    while (!stop_flag) hf_sleep_ms(200);
    hf_info("shutting down");
    ret = 0;
end:
    app_stop(&p);
    hf_config_free(opts);
    return ret;
}
