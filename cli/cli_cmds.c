/*
 * cli_cmds.c — the request/response subcommands: submit, ls, show, logs,
 * kill, pause, resume, agents, export.
 *
 * Each one: parse its positional arguments (ids through cli_parse_id), do
 * its requests through cli_api (which prints failures and picks the exit
 * code), then render as a table, TSV, CSV or JSON. Shapes are those of
 * docs/protocol.md; members the CLI does not know are ignored and absent
 * ones shown as "-", so an older or newer scheduler still renders.
 */
#include "cli.h"
#include "cli_context.h"
#include "cli_fmt.h"
#include "hf_buf.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_time.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t jint(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : json_is_real(v) ? (int64_t)json_real_value(v) : 0;
}

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Member k of o as it may be shown (cli_fmt_clean: one line, no control
 * characters) in buf. RET buf. */
static const char *jtext(char *buf, size_t size, const json_t *o, const char *k)
{
    cli_fmt_clean(buf, size, jstr(o, k));
    return buf;
}

/* ---- submit ---- */

int cli_cmd_submit(cli_ctx *ctx, int argc, char **argv)
{
    json_t *doc = NULL, *resp = NULL;
    int rc;
    const char *path = argv[0];
    (void)argc;

    if ((rc = cli_read_json(ctx, path, &doc))) goto end;
    if (ctx->o.context) {
        char sha[65];
        if ((rc = cli_context_ship(ctx, ctx->o.context, ctx->o.max_context_mb << 20, sha))) goto end;
        json_object_set_new(doc, "context", json_string(sha));
    } else if ((rc = cli_context_from_file(ctx, path, doc))) {
        goto end;   /* "context": DIR in the file, relative to it (experiments/README.md) */
    }
    if ((rc = cli_api(ctx, "POST", "/api/v1/experiments", doc, &resp))) goto end;
    json_t *id = json_object_get(resp, "id");
    if (!json_is_integer(id)) {
        fprintf(ctx->err, "error: the scheduler accepted the experiment but returned no id\n");
        rc = CLI_ERR;
        goto end;
    }
    int64_t eid = json_integer_value(id);
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "%" PRId64 "\n", eid);
    fflush(ctx->out);
    if (!ctx->o.json && !ctx->o.watch && isatty(STDERR_FILENO))
        fprintf(ctx->err, "submitted experiment %" PRId64 "; follow it with: hyperfarm watch %" PRId64 "\n",
                eid, eid);
    if (ctx->o.watch) rc = cli_watch_experiment(ctx, eid);
end:
    json_decref(doc);
    json_decref(resp);
    return rc;
}

/* ---- ls ---- */

static void fmt_best(char *buf, size_t size, const json_t *exp)
{
    json_t *best = json_object_get(exp, "best");
    json_t *v = json_object_get(best, "value");
    if (!json_is_number(v)) { snprintf(buf, size, "-"); return; }
    char num[64];
    cli_fmt_number(num, sizeof num, json_number_value(v));
    snprintf(buf, size, "%s (t%" PRId64 ")", num, jint(best, "trial_id"));
}

static void fmt_objective(char *buf, size_t size, const json_t *exp)
{
    json_t *obj = json_object_get(exp, "objective");
    if (!json_is_object(obj)) {   /* fall back to the submitted file */
        obj = json_object_get(json_object_get(exp, "config"), "objective");
    }
    const char *goal = jstr(obj, "goal");
    snprintf(buf, size, "%s %s", !strncmp(goal, "min", 3) ? "min" : "max", jstr(obj, "metric"));
}

/* Every objective: "min val_loss, min latency_ms" (the API's "objectives"
 * with a list, else the one objective). */
static void fmt_objectives(char *buf, size_t size, const json_t *exp)
{
    const json_t *objs = json_object_get(exp, "objectives"), *o;
    size_t i, n = 0;
    if (json_array_size(objs) < 2) { fmt_objective(buf, size, exp); return; }
    buf[0] = '\0';
    json_array_foreach(objs, i, o) {
        if (n >= size) break;   /* truncated */
        n += (size_t)snprintf(buf + n, size - n, "%s%s %s", i ? ", " : "",
                              !strncmp(jstr(o, "goal"), "min", 3) ? "min" : "max", jstr(o, "metric"));
    }
}

/* A trial's value of every objective: its "objective" (the first), then
 * each other's last value (a list is ranked by last values), ", "-joined. */
static void fmt_trial_objectives(char *buf, size_t size, const json_t *exp, const json_t *tr)
{
    const json_t *objs = json_object_get(exp, "objectives");
    cli_fmt_json_scalar(buf, size, json_object_get(tr, "objective"));
    for (size_t k = 1; k < json_array_size(objs); k++) {
        char v[64];
        size_t n = strlen(buf);
        cli_fmt_json_scalar(v, sizeof v, json_object_get(json_object_get(tr, "latest"),
                                                         jstr(json_array_get(objs, k), "metric")));
        snprintf(buf + n, size - n, ", %s", v);
    }
}

int cli_cmd_ls(cli_ctx *ctx, int argc, char **argv)
{
    static const char *const head[] = {"ID", "NAME", "STATE", "SEARCHER", "TRIALS", "RUNNING",
                                       "QUEUED", "FAILED", "OBJECTIVE", "BEST", "CREATED"};
    json_t *resp = NULL, *exps, *e;
    cli_table t;
    size_t i;
    int rc;
    int64_t now = hf_wall_ms();
    (void)argc; (void)argv;

    char lpath[512], q[400] = "";
    if (ctx->o.tag) cli_query_escape(q, sizeof q, ctx->o.tag);
    snprintf(lpath, sizeof lpath, "/api/v1/experiments%s%s%s%s", ctx->o.all || ctx->o.tag ? "?" : "",
             ctx->o.all ? "archived=1" : "", ctx->o.all && ctx->o.tag ? "&" : "", ctx->o.tag ? "tag=" : "");
    if (ctx->o.tag) strncat(lpath, q, sizeof lpath - strlen(lpath) - 1);
    if ((rc = cli_api(ctx, "GET", lpath, NULL, &resp))) return rc;
    if (ctx->o.json) { cli_print_json(ctx, resp); json_decref(resp); return CLI_OK; }
    exps = json_object_get(resp, "experiments");
    cli_table_init(&t, 11, head);
    cli_table_maxw(&t, 1, 32);
    for (int c = 4; c <= 7; c++) cli_table_align(&t, c, CLI_ALIGN_RIGHT);
    json_array_foreach(exps, i, e) {
        cli_counts cn;
        char buf[128];
        cli_counts_from_json(&cn, json_object_get(e, "counts"));
        cli_table_cellf(&t, "%" PRId64, jint(e, "id"));
        cli_table_cell(&t, jstr(e, "name"));
        /* docs/cli.md: ls --all marks an archived experiment in its state cell. */
        if (json_is_true(json_object_get(e, "archived"))) cli_table_cellf(&t, "%s (archived)", jstr(e, "state"));
        else cli_table_cell(&t, jstr(e, "state"));
        cli_table_cell(&t, jstr(e, "searcher"));
        int64_t max = jint(e, "max_trials");
        if (max > 0) cli_table_cellf(&t, "%" PRId64 "/%" PRId64, cli_counts_done(&cn), max);
        else cli_table_cellf(&t, "%" PRId64, cli_counts_done(&cn));
        cli_table_cellf(&t, "%" PRId64, cn.running);
        cli_table_cellf(&t, "%" PRId64, cn.queued + cn.paused);
        cli_table_cellf(&t, "%" PRId64, cn.failed);
        fmt_objectives(buf, sizeof buf, e);
        cli_table_cell(&t, buf);
        fmt_best(buf, sizeof buf, e);
        cli_table_cell(&t, buf);
        cli_fmt_ago(buf, sizeof buf, now, jint(e, "created_at"));
        cli_table_cell(&t, buf);
    }
    if (t.nrows == 0 && !ctx->o.tsv && ctx->o.tag)
        fprintf(ctx->out, "no experiment is tagged '%s'\n", ctx->o.tag);
    else if (t.nrows == 0 && !ctx->o.tsv)
        fprintf(ctx->out, "no experiments yet; submit one with: hyperfarm submit FILE\n");
    else cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
    json_decref(resp);
    return CLI_OK;
}

/* ---- show ---- */

static int fetch_exp_trials(cli_ctx *ctx, int64_t id, json_t **exp, json_t **trials)
{
    char path[128];
    int rc;
    *exp = *trials = NULL;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64, id);
    if ((rc = cli_api(ctx, "GET", path, NULL, exp))) return rc;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/trials", id);
    if ((rc = cli_api(ctx, "GET", path, NULL, trials))) {
        json_decref(*exp);
        *exp = NULL;
    }
    return rc;
}

static int64_t trial_duration(const json_t *tr, int64_t now)
{
    int64_t s = jint(tr, "started_at"), e = jint(tr, "ended_at");
    if (s <= 0) return -1;
    return (e > 0 ? e : now) - s;
}

/* Is trial id on the front of pareto (GET .../pareto), NULL = none? */
static int on_front(const json_t *pareto, int64_t id)
{
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(pareto, "trials"), i, p) if (jint(p, "trial_id") == id) return 1;
    return 0;
}

/* The trials; with pareto (a multi-objective or constrained experiment's
 * front) a PARETO column marks the front's trials with "*". */
static void trials_table(cli_ctx *ctx, const json_t *exp, const json_t *trials, const json_t *pareto, int64_t now)
{
    /* With a list objective the column names every one: "val_loss, latency_ms". */
    char objs[512] = "OBJECTIVE";
    const char *head[] = {"TRIAL", "STATE", "AGENT", "RESTARTS", "DURATION", objs, "HPARAMS", "PARETO"};
    cli_table t;
    size_t i;
    json_t *tr;
    json_array_foreach(json_object_get(exp, "objectives"), i, tr)
        if (json_array_size(json_object_get(exp, "objectives")) > 1) {
            char m[128];
            cli_fmt_clean(m, sizeof m, jstr(tr, "metric"));   /* the metric's name is the user's */
            snprintf(objs + (i ? strlen(objs) : 0), sizeof objs - (i ? strlen(objs) : 0), "%s%s", i ? ", " : "", m);
        }
    cli_table_init(&t, pareto ? 8 : 7, head);
    cli_table_align(&t, 0, CLI_ALIGN_RIGHT);
    cli_table_align(&t, 3, CLI_ALIGN_RIGHT);
    cli_table_align(&t, 5, CLI_ALIGN_RIGHT);
    if (ctx->out_tty) cli_table_maxw(&t, 6, 80);
    json_array_foreach(json_object_get(trials, "trials"), i, tr) {
        char buf[2048];
        cli_table_cellf(&t, "%" PRId64, jint(tr, "id"));
        cli_table_cell(&t, jstr(tr, "state"));
        cli_table_cell(&t, jstr(tr, "agent"));
        cli_table_cellf(&t, "%" PRId64, jint(tr, "restarts"));
        cli_fmt_duration(buf, sizeof buf, trial_duration(tr, now));
        cli_table_cell(&t, buf);
        fmt_trial_objectives(buf, sizeof buf, exp, tr);   /* every objective of a list */
        cli_table_cell(&t, buf);
        cli_fmt_hparams(buf, sizeof buf, json_object_get(tr, "hparams"));
        cli_table_cell(&t, buf);
        if (pareto) cli_table_cell(&t, on_front(pareto, jint(tr, "id")) ? "*" : "");
    }
    cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
}

/* A list objective or constraints: the front (GET .../pareto), else NULL
 * (also from a scheduler without the route). New reference. */
static json_t *fetch_pareto(cli_ctx *ctx, const json_t *exp)
{
    json_t *cfg = json_object_get(exp, "config"), *out = NULL;
    char path[128];
    if (!json_is_array(json_object_get(cfg, "objective")) && !json_object_get(cfg, "constraints")) return NULL;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/pareto", jint(exp, "id"));
    if (cli_api(ctx, "GET", path, NULL, &out)) return NULL;
    return out;
}

/* "min val_loss, min latency_ms; latency_ms <= 20" lines of the front's header. */
static void print_pareto_head(cli_ctx *ctx, const json_t *pareto)
{
    size_t i;
    json_t *o;
    char m[256];
    fprintf(ctx->out, "  objectives");
    json_array_foreach(json_object_get(pareto, "objectives"), i, o)
        fprintf(ctx->out, "%s %simize %s", i ? "," : "", !strncmp(jstr(o, "goal"), "min", 3) ? "min" : "max",
                jtext(m, sizeof m, o, "metric"));
    fputc('\n', ctx->out);
    json_array_foreach(json_object_get(pareto, "constraints"), i, o) {
        char lo[64] = "", hi[64] = "";
        cli_fmt_json_scalar(lo, sizeof lo, json_object_get(o, "min"));
        cli_fmt_json_scalar(hi, sizeof hi, json_object_get(o, "max"));
        fprintf(ctx->out, "  constraint %s%s%s%s%s\n", json_is_number(json_object_get(o, "min")) ? lo : "",
                json_is_number(json_object_get(o, "min")) ? " <= " : "", jtext(m, sizeof m, o, "metric"),
                json_is_number(json_object_get(o, "max")) ? " <= " : "",
                json_is_number(json_object_get(o, "max")) ? hi : "");
    }
    fprintf(ctx->out, "  pareto     %zu trial%s on the front (of %" PRId64 " feasible, %" PRId64
            " completed), marked * below\n", json_array_size(json_object_get(pareto, "trials")),
            json_array_size(json_object_get(pareto, "trials")) == 1 ? "" : "s", jint(pareto, "feasible"),
            jint(pareto, "completed"));
}

int cli_cmd_show(cli_ctx *ctx, int argc, char **argv)
{
    json_t *exp = NULL, *trials = NULL, *pareto = NULL;
    int64_t id, now = hf_wall_ms();
    int rc;
    (void)argc;

    if (cli_parse_id(argv[0], 'e', &id)) return cli_bad_id(ctx, "experiment", argv[0]);
    if ((rc = fetch_exp_trials(ctx, id, &exp, &trials))) return rc;
    json_t *events = cli_exp_events(ctx, id);
    pareto = fetch_pareto(ctx, exp);
    if (ctx->o.json) {
        json_t *all = json_pack("{s:O, s:O, s:O}", "experiment", exp, "trials",
                                json_object_get(trials, "trials") ? json_object_get(trials, "trials") : json_null(),
                                "events", events ? events : json_null());
        if (pareto) json_object_set(all, "pareto", pareto);
        cli_print_json(ctx, all);
        json_decref(all);
        goto end;
    }
    if (ctx->o.tsv) {
        trials_table(ctx, exp, trials, pareto, now);
        goto end;
    }
    cli_counts cn;
    char bar[64], buf[512], dur[32], ago[32], name[512], state[64], searcher[64];
    json_t *cfg = json_object_get(exp, "config");
    json_t *scfg = json_object_get(cfg, "searcher");
    cli_counts_from_json(&cn, json_object_get(exp, "counts"));
    int64_t max = jint(exp, "max_trials");
    fprintf(ctx->out, "experiment %" PRId64 "  %s  %s\n", jint(exp, "id"), jtext(name, sizeof name, exp, "name"),
            jtext(state, sizeof state, exp, "state"));
    fprintf(ctx->out, "  searcher   %s", jtext(searcher, sizeof searcher, exp, "searcher"));
    if (max > 0) fprintf(ctx->out, ", max %" PRId64 " trials", max);
    if (jint(scfg, "max_concurrent_trials") > 0)
        fprintf(ctx->out, ", %" PRId64 " at once", jint(scfg, "max_concurrent_trials"));
    fputc('\n', ctx->out);
    fmt_objective(name, sizeof name, exp);
    cli_fmt_clean(buf, sizeof buf, name);   /* the metric's name is the user's */
    if (pareto) print_pareto_head(ctx, pareto);
    else fprintf(ctx->out, "  objective  %simize %s\n", !strncmp(buf, "min", 3) ? "min" : "max", buf + 4);
    /* How a trial's objective is computed (docs/guide.md "The objective"). */
    const char *agg = jstr(json_object_get(exp, "objective"), "aggregate");
    if (!strcmp(agg, "best") || !strcmp(agg, "last"))   /* nothing else reaches the terminal */
        fprintf(ctx->out, "  aggregate  %s (a trial's objective is its %s report)\n", agg, agg);
    cli_fmt_bar(bar, sizeof bar, &cn, max, 30);
    fprintf(ctx->out, "  progress   %s %" PRId64 "/%" PRId64 " done, %" PRId64 " running, %" PRId64
            " queued, %" PRId64 " failed\n", bar, cli_counts_done(&cn),
            max > 0 ? max : cli_counts_done(&cn) + cn.running + cn.queued + cn.paused,
            cn.running, cn.queued + cn.paused, cn.failed);
    int64_t created = jint(exp, "created_at"), ended = jint(exp, "ended_at");
    cli_fmt_ago(ago, sizeof ago, now, created);
    cli_fmt_duration(dur, sizeof dur, created > 0 ? (ended > 0 ? ended : now) - created : -1);
    fprintf(ctx->out, "  created    %s, %s %s\n", ago, ended > 0 ? "ran for" : "running for", dur);
    if (json_is_integer(json_object_get(exp, "checkpoint_bytes"))) {
        char stor[32];
        cli_fmt_bytes(stor, sizeof stor, jint(exp, "checkpoint_bytes"));
        fprintf(ctx->out, "  storage    %s of checkpoints%s\n", stor,
                json_is_true(json_object_get(exp, "archived")) ? " (archived)" : "");
    }
    cli_show_workflow(ctx, exp, events);
    json_t *best = json_object_get(exp, "best");
    if (json_is_object(best)) {
        int64_t bid = jint(best, "trial_id");
        size_t i;
        json_t *tr;
        char num[64], hp[1024] = "", shown[1024];
        cli_fmt_json_scalar(num, sizeof num, json_object_get(best, "value"));
        json_array_foreach(json_object_get(trials, "trials"), i, tr)
            if (jint(tr, "id") == bid) cli_fmt_hparams(hp, sizeof hp, json_object_get(tr, "hparams"));
        cli_fmt_clean(shown, sizeof shown, hp);
        fprintf(ctx->out, "  best       trial %" PRId64 ": %s = %s  %s\n", bid, buf + 4, num, shown);
    } else {
        fprintf(ctx->out, "  best       - (no trial has reported %s yet)\n", buf + 4);
    }
    fputc('\n', ctx->out);
    trials_table(ctx, exp, trials, pareto, now);
end:
    json_decref(events);
    json_decref(exp);
    json_decref(trials);
    json_decref(pareto);
    return CLI_OK;
}

/* ---- logs ---- */

static int trial_ended(const char *state)
{
    return !strcmp(state, "COMPLETED") || !strcmp(state, "FAILED") || !strcmp(state, "STOPPED")
        || !strcmp(state, "CANCELED");
}

/* Print one log entry (or queue it in the ring for --tail). */
static void log_emit(cli_ctx *ctx, json_t *entry)
{
    if (ctx->o.json) {
        json_dumpf(entry, ctx->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
        fputc('\n', ctx->out);
    } else if (ctx->out_tty) {   /* docs/cli.md: the trial's bytes, but no escape sequence reaches a terminal */
        cli_put_text(ctx->out, jstr(entry, "line"), CLI_CLEAN_MULTILINE);
        fputc('\n', ctx->out);
    } else {
        fprintf(ctx->out, "%s\n", jstr(entry, "line"));
    }
}

int cli_cmd_logs(cli_ctx *ctx, int argc, char **argv)
{
    char path[160];
    json_t *resp = NULL, *ring = NULL;
    int64_t id, after = 0;
    int rc, first = 1;
    if (ctx->o.grep || ctx->o.experiment) return cli_logs_grep(ctx, argc, argv);
    if (argc != 1) {
        fprintf(ctx->err, "error: logs: expected a TRIAL\nusage: hyperfarm logs TRIAL [-f] [--tail N]\n");
        return CLI_USAGE;
    }

    if (cli_parse_id(argv[0], 't', &id)) return cli_bad_id(ctx, "trial", argv[0]);
    snprintf(path, sizeof path, "/api/v1/trials/%" PRId64, id);
    if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) return rc;   /* 404 -> exit 3 */
    json_decref(resp);
    resp = NULL;
    if (ctx->o.tail > 0) ring = json_array();
    for (;;) {
        /* Drain every page available now. */
        for (;;) {
            json_t *logs, *l;
            size_t i, n;
            snprintf(path, sizeof path, "/api/v1/trials/%" PRId64 "/logs?after=%" PRId64 "&limit=1000",
                     id, after);
            if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) goto end;
            logs = json_object_get(resp, "logs");
            n = json_array_size(logs);
            json_array_foreach(logs, i, l) {
                int64_t seq = jint(l, "seq");
                if (seq > after) after = seq;
                if (ring && first) {
                    json_array_append(ring, l);
                    if ((int64_t)json_array_size(ring) > ctx->o.tail) json_array_remove(ring, 0);
                } else {
                    log_emit(ctx, l);
                }
            }
            json_decref(resp);
            resp = NULL;
            if (n < 1000) break;
        }
        if (ring && first) {
            size_t i;
            json_t *l;
            json_array_foreach(ring, i, l) log_emit(ctx, l);
        }
        first = 0;
        fflush(ctx->out);
        if (!ctx->o.follow) break;
        /* Stop once the trial has ended and its last lines were drained. */
        snprintf(path, sizeof path, "/api/v1/trials/%" PRId64, id);
        if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) goto end;
        int ended = trial_ended(jstr(resp, "state"));
        json_decref(resp);
        resp = NULL;
        if (ended) {
            ctx->o.follow = 0;   /* one more drain, then stop */
            continue;
        }
        hf_sleep_ms(ctx->o.interval_ms);
    }
    rc = CLI_OK;
end:
    json_decref(resp);
    json_decref(ring);
    return rc;
}

/* ---- kill, pause, resume ---- */

static int post_exp_action(cli_ctx *ctx, int64_t id, const char *action)
{
    char path[160];
    json_t *resp = NULL;
    int rc;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/%s", id, action);
    if ((rc = cli_api(ctx, "POST", path, NULL, &resp))) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "experiment %" PRId64 ": %s\n", id, *jstr(resp, "state") ? jstr(resp, "state") : "ok");
    json_decref(resp);
    return CLI_OK;
}

int cli_cmd_kill(cli_ctx *ctx, int argc, char **argv)
{
    char kind, err[256], path[160];
    int64_t id;
    int used, rc;
    json_t *resp = NULL;

    if (cli_parse_kill_target(argc, argv, &kind, &id, &used, err, sizeof err) || used != argc) {
        fprintf(ctx->err, "error: %s\nusage: hyperfarm kill exp N | kill trial N | kill eN | kill tN\n",
                used != argc && used ? "too many arguments" : err);
        return CLI_USAGE;
    }
    if (kind == 'e') return post_exp_action(ctx, id, "cancel");
    snprintf(path, sizeof path, "/api/v1/trials/%" PRId64 "/kill", id);
    if ((rc = cli_api(ctx, "POST", path, NULL, &resp))) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "trial %" PRId64 ": kill requested (state %s)\n", id,
                 *jstr(resp, "state") ? jstr(resp, "state") : "?");
    json_decref(resp);
    return CLI_OK;
}

/* The scheduler answers a pause of a PAUSED or a resume of an ACTIVE
 * experiment with 200 (the API is idempotent for retries); the CLI tells a
 * user that nothing happened: exit 6 (docs/cli.md "Exit codes"). The state
 * is read first; a change between the read and the POST is the scheduler's
 * to judge. */
static int pause_or_resume(cli_ctx *ctx, const char *arg, const char *action, const char *already)
{
    char path[128];
    int64_t id;
    json_t *exp = NULL;
    int rc;
    if (cli_parse_id(arg, 'e', &id)) return cli_bad_id(ctx, "experiment", arg);
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64, id);
    if ((rc = cli_api(ctx, "GET", path, NULL, &exp))) return rc;
    int same = !strcmp(jstr(exp, "state"), already);
    json_decref(exp);
    if (same) {
        fprintf(ctx->err, "error: experiment %" PRId64 " is already %s; only %s experiment can be %sd\n", id, already,
                !strcmp(action, "pause") ? "an ACTIVE" : "a PAUSED", action);
        return CLI_STATE;
    }
    return post_exp_action(ctx, id, action);
}

int cli_cmd_pause(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return pause_or_resume(ctx, argv[0], "pause", "PAUSED");
}

int cli_cmd_resume(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return pause_or_resume(ctx, argv[0], "resume", "ACTIVE");
}

/* ---- agents ---- */

/* First present integer member among keys (schedulers may name it either way). */
static int64_t jint_any(const json_t *o, const char *const *keys)
{
    for (; *keys; keys++) {
        json_t *v = json_object_get(o, *keys);
        if (json_is_integer(v)) return json_integer_value(v);
        if (json_is_array(v)) return (int64_t)json_array_size(v);
    }
    return -1;
}

int cli_cmd_agents(cli_ctx *ctx, int argc, char **argv)
{
    static const char *const head[] = {"ID", "NAME", "STATE", "HOST", "SLOTS", "GPUS", "RUNNING",
                                       "LAST HEARTBEAT"};
    static const char *const k_seen[] = {"last_heartbeat", "last_heartbeat_at", "last_seen", "heartbeat_at", NULL};
    static const char *const k_run[] = {"running", "running_trials", "n_running", NULL};
    static const char *const k_slots_used[] = {"slots_used", "used_slots", NULL};
    json_t *resp = NULL, *a;
    cli_table t;
    size_t i;
    int rc;
    int64_t now = hf_wall_ms();
    (void)argc; (void)argv;

    if ((rc = cli_api(ctx, "GET", "/api/v1/agents", NULL, &resp))) return rc;
    if (ctx->o.json) { cli_print_json(ctx, resp); json_decref(resp); return CLI_OK; }
    cli_table_init(&t, 8, head);
    for (int c = 4; c <= 6; c++) cli_table_align(&t, c, CLI_ALIGN_RIGHT);
    json_array_foreach(json_object_get(resp, "agents"), i, a) {
        char buf[64];
        int64_t used = jint_any(a, k_slots_used), run = jint_any(a, k_run);
        cli_table_cellf(&t, "%" PRId64, jint(a, "id"));
        cli_table_cell(&t, jstr(a, "name"));
        cli_table_cell(&t, jstr(a, "state"));
        cli_table_cell(&t, jstr(a, "host"));
        if (used >= 0) cli_table_cellf(&t, "%" PRId64 "/%" PRId64, used, jint(a, "slots"));
        else cli_table_cellf(&t, "%" PRId64, jint(a, "slots"));
        cli_table_cellf(&t, "%zu", json_array_size(json_object_get(a, "gpus")));
        if (run >= 0) cli_table_cellf(&t, "%" PRId64, run);
        else cli_table_cell(&t, "-");
        cli_fmt_ago(buf, sizeof buf, now, jint_any(a, k_seen));
        cli_table_cell(&t, buf);
    }
    if (t.nrows == 0 && !ctx->o.tsv)
        fprintf(ctx->out, "no agents registered; start one with: hyperfarm-agent --scheduler %s\n",
                hf_http_base(ctx->http));
    else cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
    json_decref(resp);
    return CLI_OK;
}

/* ---- export ---- */

/* Add every key of obj (an object) to the ordered set keys. */
static void collect_keys(json_t *keys, const json_t *obj)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) json_object_set_new(keys, k, json_true());
}

/* Shortest text that reads back as exactly v (%.15g, else %.17g). */
static void fmt_exact(char *buf, size_t size, double v)
{
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, size, "%.17g", v);
}

static int csv_cell(hf_buf *row, int first, const char *s)
{
    if (!first && hf_buf_add(row, ",", 1)) return HF_ETOOBIG;
    return cli_csv_field(row, s);
}

int cli_export_csv(FILE *out, const json_t *exp, const json_t *trials)
{
    const json_t *objs = json_array_size(json_object_get(exp, "objectives")) > 1 ? json_object_get(exp, "objectives")
                                                                                 : NULL;
    static const char *const fixed[] = {"trial_id", "state", "agent", "restarts", "exit_code",
                                        "started_at", "ended_at", "duration_s", "objective"};
    json_t *hkeys = json_object(), *mkeys = json_object(), *tr, *v;
    const char *k;
    size_t i;
    hf_buf row;
    int rc = HF_OK;

    hf_buf_init(&row, 1u << 20);
    json_array_foreach((json_t *)trials, i, tr) {
        collect_keys(hkeys, json_object_get(tr, "hparams"));
        collect_keys(mkeys, json_object_get(tr, "best"));
    }
    for (size_t c = 0; c < sizeof fixed / sizeof fixed[0]; c++) rc |= csv_cell(&row, c == 0, fixed[c]);
    for (size_t o = 0; o < json_array_size(objs); o++) {
        char name[300];
        snprintf(name, sizeof name, "objective.%s", jstr(json_array_get(objs, o), "metric"));
        rc |= csv_cell(&row, 0, name);
    }
    json_object_foreach(hkeys, k, v) {
        char name[300];
        snprintf(name, sizeof name, "hp.%s", k);
        rc |= csv_cell(&row, 0, name);
    }
    json_object_foreach(mkeys, k, v) {
        char name[300];
        snprintf(name, sizeof name, "best.%s", k);
        rc |= csv_cell(&row, 0, name);
    }
    fprintf(out, "%s\n", row.data ? row.data : "");
    json_array_foreach((json_t *)trials, i, tr) {
        char buf[1024];
        int64_t s = jint(tr, "started_at"), e = jint(tr, "ended_at");
        hf_buf_reset(&row);
        snprintf(buf, sizeof buf, "%" PRId64, jint(tr, "id"));
        rc |= csv_cell(&row, 1, buf);
        rc |= csv_cell(&row, 0, jstr(tr, "state"));
        rc |= csv_cell(&row, 0, jstr(tr, "agent"));
        snprintf(buf, sizeof buf, "%" PRId64, jint(tr, "restarts"));
        rc |= csv_cell(&row, 0, buf);
        json_t *ec = json_object_get(tr, "exit_code");
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(ec));
        rc |= csv_cell(&row, 0, json_is_integer(ec) ? buf : "");
        snprintf(buf, sizeof buf, "%" PRId64, s);
        rc |= csv_cell(&row, 0, s > 0 ? buf : "");
        snprintf(buf, sizeof buf, "%" PRId64, e);
        rc |= csv_cell(&row, 0, e > 0 ? buf : "");
        snprintf(buf, sizeof buf, "%.3f", (double)(e - s) / 1000.0);
        rc |= csv_cell(&row, 0, s > 0 && e > 0 ? buf : "");
        json_t *obj = json_object_get(tr, "objective");
        fmt_exact(buf, sizeof buf, json_number_value(obj));
        rc |= csv_cell(&row, 0, json_is_number(obj) ? buf : "");
        for (size_t o = 0; o < json_array_size(objs); o++) {
            json_t *ov = o == 0 ? obj : json_object_get(json_object_get(tr, "latest"),
                                                         jstr(json_array_get(objs, o), "metric"));
            fmt_exact(buf, sizeof buf, json_number_value(ov));
            rc |= csv_cell(&row, 0, json_is_number(ov) ? buf : "");
        }
        json_object_foreach(hkeys, k, v) {
            json_t *h = json_object_get(json_object_get(tr, "hparams"), k);
            if (json_is_real(h)) fmt_exact(buf, sizeof buf, json_real_value(h));
            else if (h) cli_fmt_json_scalar(buf, sizeof buf, h);
            else buf[0] = '\0';
            rc |= csv_cell(&row, 0, buf);
        }
        json_object_foreach(mkeys, k, v) {
            json_t *m = json_object_get(json_object_get(tr, "best"), k);
            if (json_is_number(m)) fmt_exact(buf, sizeof buf, json_number_value(m));
            else buf[0] = '\0';
            rc |= csv_cell(&row, 0, buf);
        }
        fprintf(out, "%s\n", row.data ? row.data : "");
    }
    hf_buf_free(&row);
    json_decref(hkeys);
    json_decref(mkeys);
    return rc ? HF_ETOOBIG : HF_OK;
}

int cli_cmd_export(cli_ctx *ctx, int argc, char **argv)
{
    json_t *exp = NULL, *trials = NULL;
    int64_t id;
    int rc;
    (void)argc;

    if (ctx->o.csv && ctx->o.json) {
        fprintf(ctx->err, "error: choose one of --csv and --json\n");
        return CLI_USAGE;
    }
    if (cli_parse_id(argv[0], 'e', &id)) return cli_bad_id(ctx, "experiment", argv[0]);
    if ((rc = fetch_exp_trials(ctx, id, &exp, &trials))) return rc;
    json_t *list = json_object_get(trials, "trials");
    if (ctx->o.json) {
        json_t *all = json_pack("{s:O, s:O}", "experiment", exp, "trials", list ? list : json_null());
        cli_print_json(ctx, all);
        json_decref(all);
    } else if (cli_export_csv(ctx->out, exp, list)) {
        fprintf(ctx->err, "error: a CSV row exceeded 1 MiB\n");
        rc = CLI_ERR;
    }
    json_decref(exp);
    json_decref(trials);
    return rc;
}
