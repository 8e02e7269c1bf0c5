/*
 * cli_watch.c — `hyperfarm watch EXP`: follow an experiment until it ends.
 *
 * Polls GET /api/v1/experiments/{id} every --interval-ms. On a terminal the
 * status line is redrawn in place ("\r" + erase line), cut to the terminal
 * width so it never wraps; otherwise (a pipe, a file, CI logs, --plain) a
 * line is printed only when something other than the elapsed time changed,
 * so a log does not fill with identical lines. --json prints each changed
 * EXP_SUMMARY as one compact JSON line.
 *
 * Exit code (docs/cli.md "Exit codes"): 0 when the experiment ended
 * COMPLETED, 1 when it ended FAILED or CANCELED (its end_reason printed).
 *
 * A scheduler that goes away after the first answer (a restart) is waited
 * for up to WATCH_OUTAGE_MS before giving up; one that never answered is
 * reported at once (exit 4).
 */
#include "cli.h"
#include "cli_fmt.h"
#include "hf_err.h"
#include "hf_time.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define WATCH_OUTAGE_MS 60000

static volatile sig_atomic_t watch_interrupted;
static void on_sigint(int sig) { (void)sig; watch_interrupted = 1; }

static int64_t jint(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

int cli_watch_line(char *buf, size_t size, const json_t *exp, int with_bar)
{
    cli_counts c;
    char bar[64] = "", best[160] = "-";
    json_t *b = json_object_get(exp, "best");
    json_t *obj = json_object_get(exp, "objective");
    int64_t max = jint(exp, "max_trials");
    cli_counts_from_json(&c, json_object_get(exp, "counts"));
    if (with_bar) cli_fmt_bar(bar, sizeof bar, &c, max, 24);
    if (json_is_number(json_object_get(b, "value"))) {
        char num[64];
        cli_fmt_number(num, sizeof num, json_number_value(json_object_get(b, "value")));
        snprintf(best, sizeof best, "%s (trial %" PRId64 ")", num, jint(b, "trial_id"));
    }
    int64_t total = max > 0 ? max : cli_counts_done(&c) + c.running + c.queued + c.paused;
    char metric[128], state[32];
    cli_fmt_clean(metric, sizeof metric, jstr(obj, "metric"));
    cli_fmt_clean(state, sizeof state, jstr(exp, "state"));
    return snprintf(buf, size,
                    "exp %" PRId64 " %s%s%s  %" PRId64 "/%" PRId64 " done  %" PRId64 " running  %" PRId64
                    " queued  %" PRId64 " failed  best %s %s",
                    jint(exp, "id"), state, with_bar ? " " : "", bar,
                    cli_counts_done(&c), total, c.running, c.queued + c.paused, c.failed,
                    *metric ? metric : "objective", best);
}

static int term_cols(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10) return ws.ws_col;
    return 100;
}

int cli_watch_tty_line(char *buf, size_t size, const json_t *exp, int64_t elapsed_ms, int cols)
{
    cli_counts c;
    char best[96] = "-", el[32], rest[400], bar[80];
    json_t *b = json_object_get(exp, "best");
    int64_t max = jint(exp, "max_trials");
    cli_counts_from_json(&c, json_object_get(exp, "counts"));
    if (json_is_number(json_object_get(b, "value"))) {
        char num[64];
        cli_fmt_number(num, sizeof num, json_number_value(json_object_get(b, "value")));
        snprintf(best, sizeof best, "%s (t%" PRId64 ")", num, jint(b, "trial_id"));
    }
    cli_fmt_duration(el, sizeof el, elapsed_ms);
    int64_t total = max > 0 ? max : cli_counts_done(&c) + c.running + c.queued + c.paused;
    int n = snprintf(rest, sizeof rest,
                     " %" PRId64 "/%" PRId64 " done  %" PRId64 " running  %" PRId64 " queued  %" PRId64
                     " failed  best %s  %s",
                     cli_counts_done(&c), total, c.running, c.queued + c.paused, c.failed, best, el);
    /* The bar takes what the terminal has left, between 10 and 40 cells. */
    int w = cols - 1 - n - 2;
    if (w > 40) w = 40;
    if (w < 10) w = 10;
    cli_fmt_bar(bar, sizeof bar, &c, max, w);
    return snprintf(buf, size, "%s%s", bar, rest);
}

static int exp_ended(const char *state)
{
    return !strcmp(state, "COMPLETED") || !strcmp(state, "CANCELED") || !strcmp(state, "FAILED");
}

/* A list objective: every objective and the Pareto front's trials with
 * each one's values (docs/search.md "Multi-objective search"). */
static void print_front(cli_ctx *ctx, const json_t *exp)
{
    const json_t *objs = json_object_get(exp, "objectives"), *o, *p;
    json_t *front = NULL;
    char path[96], m[256], line[1024];
    size_t i, n = 0;
    if (json_array_size(objs) < 2) return;
    json_array_foreach(objs, i, o) {
        if (n >= sizeof line) break;   /* truncated */
        cli_fmt_clean(m, sizeof m, jstr(o, "metric"));
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %s", i ? ", " : "",
                              !strncmp(jstr(o, "goal"), "min", 3) ? "min" : "max", m);
    }
    fprintf(ctx->out, "objectives: %s\n", line);
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/pareto", jint(exp, "id"));
    if (cli_api(ctx, "GET", path, NULL, &front) != CLI_OK) return;
    const json_t *pts = json_object_get(front, "trials");
    fprintf(ctx->out, "pareto front: %zu trial%s\n", json_array_size(pts), json_array_size(pts) == 1 ? "" : "s");
    json_array_foreach(pts, i, p) {
        size_t k;
        const json_t *v;
        n = 0;
        json_array_foreach(json_object_get(p, "values"), k, v) {
            char num[64];
            if (n >= sizeof line) break;   /* truncated */
            cli_fmt_json_scalar(num, sizeof num, v);
            cli_fmt_clean(m, sizeof m, jstr(json_array_get(objs, k), "metric"));
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%s = %s", k ? ", " : "", m, num);
        }
        fprintf(ctx->out, "  trial %" PRId64 ": %s\n", jint(p, "trial_id"), n ? line : "-");
    }
    json_decref(front);
}

/* Final words: state, duration, counts and the best trial's hyperparameters. */
static void print_summary(cli_ctx *ctx, const json_t *exp)
{
    cli_counts c;
    char dur[32];
    int64_t created = jint(exp, "created_at"), ended = jint(exp, "ended_at");
    json_t *b = json_object_get(exp, "best");
    cli_counts_from_json(&c, json_object_get(exp, "counts"));
    cli_fmt_duration(dur, sizeof dur, created > 0 && ended >= created ? ended - created : -1);
    fprintf(ctx->out, "experiment %" PRId64 " %s in %s: %" PRId64 " trials (%" PRId64 " completed, %" PRId64
            " stopped early, %" PRId64 " failed, %" PRId64 " canceled)\n",
            jint(exp, "id"), jstr(exp, "state"), dur, cli_counts_done(&c), c.completed, c.stopped,
            c.failed, c.canceled);
    /* Why it ended (docs/scheduler.md "End states"), unless it just finished. */
    const char *why = jstr(exp, "end_reason");
    if (*why && strcmp(why, "search finished")) {
        char shown[512];
        cli_fmt_clean(shown, sizeof shown, why);
        fprintf(ctx->out, "reason: %s\n", shown);
    }
    if (!json_is_object(b)) {
        fprintf(ctx->out, "no trial reported the objective\n");
        return;
    }
    char path[96], num[64], hp[1024] = "", shown[1024], metric[256];
    json_t *tr = NULL;
    int64_t tid = jint(b, "trial_id");
    snprintf(path, sizeof path, "/api/v1/trials/%" PRId64, tid);
    if (cli_api(ctx, "GET", path, NULL, &tr) == CLI_OK)
        cli_fmt_hparams(hp, sizeof hp, json_object_get(tr, "hparams"));
    cli_fmt_json_scalar(num, sizeof num, json_object_get(b, "value"));
    cli_fmt_clean(shown, sizeof shown, hp);
    cli_fmt_clean(metric, sizeof metric, jstr(json_object_get(exp, "objective"), "metric"));
    fprintf(ctx->out, "best trial %" PRId64 ": %s = %s  %s\n", tid, *metric ? metric : "objective", num, shown);
    json_decref(tr);
    print_front(ctx, exp);
}

int cli_watch_experiment(cli_ctx *ctx, int64_t exp_id)
{
    char path[96], line[512], last[512] = "", err[512];
    int redraw = ctx->out_tty && !ctx->o.plain && !ctx->o.json;
    int seen = 0, rc = CLI_OK, drawn = 0;
    int64_t outage_since = 0;
    struct sigaction sa, old_int, old_term;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    watch_interrupted = 0;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64, exp_id);
    while (!watch_interrupted) {
        json_t *exp = NULL;
        long status = 0;
        int hrc = hf_http_request(ctx->http, "GET", path, NULL, &status, &exp, err, sizeof err);
        if ((hrc == HF_ECONN || hrc == HF_ETIMEOUT) && seen) {
            int64_t now = hf_mono_ms();
            if (!outage_since) {
                outage_since = now;
                if (drawn) fputc('\n', ctx->out);
                drawn = 0;
                fprintf(ctx->err, "scheduler at %s unreachable; retrying for up to %ds\n",
                        hf_http_base(ctx->http), WATCH_OUTAGE_MS / 1000);
            }
            if (now - outage_since < WATCH_OUTAGE_MS) {
                hf_sleep_ms(ctx->o.interval_ms);
                continue;
            }
        }
        if (hrc || status != 200) {
            json_decref(exp);
            if (drawn) fputc('\n', ctx->out);
            drawn = 0;
            /* Let cli_api say why, with the right exit code. */
            rc = cli_api(ctx, "GET", path, NULL, &exp);
            json_decref(exp);
            if (rc == CLI_OK) continue;   /* it came back between the two requests */
            goto end;
        }
        seen = 1;
        outage_since = 0;
        const char *state = jstr(exp, "state");
        int ended = exp_ended(state);
        if (ctx->o.json) {
            char *s = json_dumps(exp, JSON_COMPACT | JSON_PRESERVE_ORDER);
            cli_watch_line(line, sizeof line, exp, 0);
            if (s && strcmp(line, last)) fprintf(ctx->out, "%s\n", s);
            free(s);
        } else if (redraw) {
            int64_t created = jint(exp, "created_at"), endt = jint(exp, "ended_at");
            int cols = term_cols();
            cli_watch_tty_line(line, sizeof line, exp,
                               created > 0 ? (endt > 0 ? endt : hf_wall_ms()) - created : -1, cols);
            fprintf(ctx->out, "\r\033[K%.*s", cols - 1, line);
            drawn = 1;
        } else {
            char el[32];
            int64_t created = jint(exp, "created_at"), endt = jint(exp, "ended_at");
            cli_watch_line(line, sizeof line, exp, 0);
            if (strcmp(line, last)) {
                cli_fmt_duration(el, sizeof el,
                                 created > 0 ? (endt > 0 ? endt : hf_wall_ms()) - created : -1);
                fprintf(ctx->out, "%s  elapsed %s\n", line, el);
            }
        }
        cli_watch_line(last, sizeof last, exp, 0);
        fflush(ctx->out);
        if (ended) {
            if (drawn) fputc('\n', ctx->out);
            drawn = 0;
            if (!ctx->o.json) print_summary(ctx, exp);
            rc = !strcmp(state, "COMPLETED") ? CLI_OK : CLI_ERR;
            json_decref(exp);
            goto end;
        }
        json_decref(exp);
        for (int64_t slept = 0; slept < ctx->o.interval_ms && !watch_interrupted; slept += 50)
            hf_sleep_ms(ctx->o.interval_ms - slept < 50 ? ctx->o.interval_ms - slept : 50);
    }
    if (drawn) fputc('\n', ctx->out);
    fprintf(ctx->err, "interrupted; the experiment keeps running (hyperfarm watch %" PRId64 " to follow it again)\n",
            exp_id);
    rc = 130;
end:
    fflush(ctx->out);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return rc;
}

int cli_cmd_watch(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    (void)argc;
    if (cli_parse_id(argv[0], 'e', &id)) {
        fprintf(ctx->err, "error: '%s' is not an experiment id (a positive integer, or e<N>)\n", argv[0]);
        return CLI_USAGE;
    }
    return cli_watch_experiment(ctx, id);
}
