/*
 * cli_ckpt.c — the CLI's checkpoint and storage commands (docs/cli.md):
 * `checkpoints TRIAL` (the stored checkpoints as a table), `download TRIAL
 * [--step N | --best] -o DIR`, `archive EXP` and `delete EXP --yes`.
 *
 * A download goes through common/hf_xfer.h, the one verified transfer:
 * streamed into a temp file in DIR (.NAME.part-XXXXXX) and a SHA-256;
 * only when the size and the hash are the listed ones is the file fsynced
 * and renamed to DIR/NAME, so DIR never holds a partial or wrong
 * checkpoint under its real name. On a terminal (stderr) a progress bar
 * is redrawn at most every 100 ms.
 */
#include "cli.h"
#include "cli_fmt.h"
#include "hf_err.h"
#include "hf_time.h"
#include "hf_xfer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t num(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

static void dump_json(cli_ctx *ctx, const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (s) fprintf(ctx->out, "%s\n", s);
    free(s);
}

/* GET the trial's checkpoints: *list is its "checkpoints" array (a new
 * reference). RET a cli exit code (reported). */
static int fetch_list(cli_ctx *ctx, int64_t tid, json_t **resp, json_t **list)
{
    char path[96];
    snprintf(path, sizeof path, "/api/v1/trials/%" PRId64 "/checkpoints", tid);
    int rc = cli_api(ctx, "GET", path, NULL, resp);
    if (rc) return rc;
    *list = json_object_get(*resp, "checkpoints");
    if (!json_is_array(*list)) {
        fprintf(ctx->err, "error: the scheduler's answer has no \"checkpoints\" array\n");
        return CLI_ERR;
    }
    return CLI_OK;
}

/* Agent id -> name, from GET /api/v1/agents (NULL when unavailable). */
static json_t *agent_names(cli_ctx *ctx)
{
    json_t *resp = NULL, *a, *names = json_object();
    size_t i;
    if (!names || cli_api(ctx, "GET", "/api/v1/agents", NULL, &resp)) { json_decref(resp); return names; }
    json_array_foreach(json_object_get(resp, "agents"), i, a) {
        char k[32];
        snprintf(k, sizeof k, "%" PRId64, num(a, "id"));
        json_object_set(names, k, json_object_get(a, "name"));
    }
    json_decref(resp);
    return names;
}

int cli_cmd_checkpoints(cli_ctx *ctx, int argc, char **argv)
{
    static const char *const head[] = {"STEP", "SIZE", "SHA256", "ATTEMPT", "TIME", "AGENT", "SCORED", "METRICS"};
    json_t *resp = NULL, *list = NULL, *c, *names = NULL;
    int64_t tid, now = hf_wall_ms();
    cli_table t;
    size_t i;
    (void)argc;
    if (cli_parse_id(argv[0], 't', &tid)) {
        fprintf(ctx->err, "error: '%s' is not a trial id (e.g. 17 or t17)\n", argv[0]);
        return CLI_USAGE;
    }
    int rc = fetch_list(ctx, tid, &resp, &list);
    if (rc || ctx->o.json) {
        if (!rc) dump_json(ctx, resp);
        json_decref(resp);
        return rc;
    }
    names = agent_names(ctx);
    cli_table_init(&t, 8, head);
    if (ctx->out_tty) cli_table_maxw(&t, 7, 60);
    cli_table_align(&t, 0, CLI_ALIGN_RIGHT);
    cli_table_align(&t, 1, CLI_ALIGN_RIGHT);
    cli_table_align(&t, 3, CLI_ALIGN_RIGHT);
    json_array_foreach(list, i, c) {
        char size[32], ago[32], agent[32];
        const char *sha = json_string_value(json_object_get(c, "sha256"));
        cli_table_cellf(&t, "%" PRId64, num(c, "step"));
        cli_fmt_bytes(size, sizeof size, num(c, "size"));
        cli_table_cell(&t, size);
        cli_table_cellf(&t, "%.12s", sha ? sha : "-");
        cli_table_cellf(&t, "%" PRId64, num(c, "attempt"));
        cli_fmt_ago(ago, sizeof ago, now, num(c, "time"));
        cli_table_cell(&t, ago);
        snprintf(agent, sizeof agent, "%" PRId64, num(c, "agent_id"));
        const char *an = json_string_value(json_object_get(names, agent));
        cli_table_cell(&t, num(c, "agent_id") > 0 ? (an ? an : agent) : NULL);
        /* * marks the row that scored the objective (download --best). */
        char metrics[1024];
        cli_table_cell(&t, json_is_true(json_object_get(c, "scored")) ? "*" : "");
        cli_fmt_hparams(metrics, sizeof metrics, json_object_get(c, "metrics"));
        cli_table_cell(&t, metrics);
    }
    if (t.nrows == 0 && !ctx->o.tsv) fprintf(ctx->out, "trial %" PRId64 " has no stored checkpoints\n", tid);
    else cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
    json_decref(names);
    json_decref(resp);
    return CLI_OK;
}

/* ---- download ---- */

/* The progress bar of a download on a terminal (stderr). */
typedef struct bar {
    FILE   *tty;
    int64_t got, want;
    int64_t last_draw;
} bar;

static void draw_bar(bar *d, int final)
{
    int64_t now = hf_mono_ms();
    if (!final && now - d->last_draw < 100) return;
    d->last_draw = now;
    char a[32], b[32], line[34];
    int w = 30, filled = d->want > 0 ? (int)(d->got * w / d->want) : w;
    if (filled > w) filled = w;
    line[0] = '[';
    for (int i = 0; i < w; i++) line[i + 1] = i < filled ? '#' : '.';
    line[w + 1] = ']';
    line[w + 2] = 0;
    cli_fmt_bytes(a, sizeof a, d->got);
    cli_fmt_bytes(b, sizeof b, d->want);
    fprintf(d->tty, "\r%s %3d%%  %s / %s\033[K%s", line, d->want > 0 ? (int)(d->got * 100 / d->want) : 100, a, b,
            final ? "\n" : "");
    fflush(d->tty);
}

static void on_progress(void *ud, int64_t got, int64_t total)
{
    bar *d = ud;
    d->got = got;
    d->want = total;
    draw_bar(d, 0);
}

/* The row to fetch: the one marked "scored" (best), else the newest at
 * step (step < 0: the newest of all). */
static json_t *pick_row(const json_t *list, int64_t step, int best)
{
    json_t *pick = NULL, *c;
    size_t i;
    json_array_foreach(list, i, c)
        if (best ? json_is_true(json_object_get(c, "scored")) : step < 0 || num(c, "step") == step) pick = c;
    return pick;
}

/* A safe file name for the row: its reported basename, else ckpt-STEP.hfck. */
static void file_name(const json_t *row, char *out, size_t len)
{
    const char *n = json_string_value(json_object_get(row, "name"));
    char shown[256];
    /* A name the cleaner would change (control characters, escapes, not
     * UTF-8) is no file name either. */
    if (n && *n && strlen(n) < 200 && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..") && n[0] != '.' &&
        cli_clean_text(shown, sizeof shown, n, strlen(n), 0) == strlen(n) && !strcmp(shown, n))
        snprintf(out, len, "%s", n);
    else
        snprintf(out, len, "ckpt-%012" PRId64 ".hfck", num(row, "step"));
}

/* Download the object sha (size bytes) to dst through hf_xfer (streamed,
 * verified, fsynced, renamed; nothing left on error). RET a cli exit code
 * (reported). */
static int fetch_object(cli_ctx *ctx, const char *sha, int64_t size, const char *dst, bar *pb)
{
    char path[160], err[1024];
    long status = 0;
    json_t *resp = NULL, *none = NULL;
    hf_xfer_opts o = {.progress = pb ? on_progress : NULL, .progress_ud = pb};
    snprintf(path, sizeof path, "/api/v1/checkpoints/%s", sha);
    int rc = hf_xfer_get(ctx->http, path, sha, size, dst, &o, &status, &resp, err, sizeof err);
    if (pb && rc == 0) draw_bar(pb, 1);
    else if (pb) fputc('\n', ctx->err);
    if (rc == 0) return CLI_OK;
    if (status && (status < 200 || status >= 300)) {
        rc = cli_api_answer(ctx, "GET", path, status, resp, &none);   /* takes resp */
        json_decref(none);
        return rc;
    }
    json_decref(resp);
    if (!status && (rc == HF_ECONN || rc == HF_ETIMEOUT)) return cli_transport_error(ctx, rc, err);
    fprintf(ctx->err, "error: %s%s\n", err, rc == HF_ECORRUPT ? "; nothing was written" : "");
    return CLI_ERR;
}

int cli_cmd_download(cli_ctx *ctx, int argc, char **argv)
{
    json_t *resp = NULL, *list = NULL;
    int64_t tid;
    char name[256], dst[PATH_MAX];
    bar pb = {.tty = ctx->err};
    int rc;
    (void)argc;
    if (cli_parse_id(argv[0], 't', &tid)) {
        fprintf(ctx->err, "error: '%s' is not a trial id (e.g. 17 or t17)\n", argv[0]);
        return CLI_USAGE;
    }
    if (!ctx->o.output || !*ctx->o.output || strlen(ctx->o.output) > PATH_MAX - 300) {
        fprintf(ctx->err, "error: download: -o DIR is required (the folder to write the checkpoint into)\n");
        return CLI_USAGE;
    }
    if (ctx->o.best && ctx->o.step >= 0) {
        fprintf(ctx->err, "error: download: choose one of --step and --best\n");
        return CLI_USAGE;
    }
    if ((rc = fetch_list(ctx, tid, &resp, &list))) goto end;
    json_t *row = pick_row(list, ctx->o.step, ctx->o.best);
    const char *sha = json_string_value(json_object_get(row, "sha256"));
    if (!row || !sha || strlen(sha) != 64) {
        char steps[512] = "";
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c)
            snprintf(steps + strlen(steps), sizeof steps - strlen(steps), "%s%" PRId64, i ? ", " : "", num(c, "step"));
        if (ctx->o.best)
            fprintf(ctx->err, "error: trial %" PRId64 " has no stored checkpoint that scored its objective "
                    "(no checkpoint at the step of that report%s; stored steps: %s)\n", tid,
                    json_is_integer(json_object_get(resp, "scored_step")) ? "" : ", or no objective yet",
                    steps[0] ? steps : "none");
        else if (ctx->o.step >= 0)
            fprintf(ctx->err, "error: trial %" PRId64 " has no stored checkpoint at step %" PRId64 " (stored steps: %s)\n",
                    tid, ctx->o.step, steps[0] ? steps : "none");
        else fprintf(ctx->err, "error: trial %" PRId64 " has no stored checkpoints\n", tid);
        rc = CLI_NOTFOUND;
        goto end;
    }
    if (mkdir(ctx->o.output, 0755) != 0 && errno != EEXIST) {
        fprintf(ctx->err, "error: cannot create %s: %s\n", ctx->o.output, strerror(errno));
        rc = CLI_ERR;
        goto end;
    }
    file_name(row, name, sizeof name);
    snprintf(dst, sizeof dst, "%s/%s", ctx->o.output, name);
    int64_t size = num(row, "size");
    rc = fetch_object(ctx, sha, size, dst, !ctx->o.json && isatty(STDERR_FILENO) ? &pb : NULL);
    if (rc == CLI_OK) {
        char shown[32];
        cli_fmt_bytes(shown, sizeof shown, size);
        if (ctx->o.json) {
            json_t *o = json_pack("{sssIsIss}", "path", dst, "step", (json_int_t)num(row, "step"), "size",
                                  (json_int_t)size, "sha256", sha);
            dump_json(ctx, o);
            json_decref(o);
        } else {
            fprintf(ctx->out, "%s  step %" PRId64 ", %s, sha256 %.12s (verified)\n", dst, num(row, "step"), shown, sha);
        }
    }
end:
    json_decref(resp);
    return rc;
}

/* ---- archive and delete ---- */

/* METHOD on experiment argv0's path (+ suffix); on success print the
 * answer (--json) or msg with the experiment id and its checkpoint bytes.
 * RET a cli exit code. */
static int exp_request(cli_ctx *ctx, const char *arg, const char *method, const char *suffix, const char *msg,
                       int need_yes)
{
    int64_t id;
    char path[96], bytes[32];
    json_t *resp = NULL;
    if (cli_parse_id(arg, 'e', &id)) {
        fprintf(ctx->err, "error: '%s' is not an experiment id (e.g. 3 or e3)\n", arg);
        return CLI_USAGE;
    }
    if (need_yes && !ctx->o.yes) {
        fprintf(ctx->err, "error: this deletes experiment %" PRId64 " with its trials, metrics, logs and checkpoints "
                "for good; run again with --yes\n", id);
        return CLI_USAGE;
    }
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "%s", id, suffix);
    int rc = cli_api(ctx, method, path, NULL, &resp);
    if (rc == CLI_OK && ctx->o.json) dump_json(ctx, resp);
    else if (rc == CLI_OK) {
        cli_fmt_bytes(bytes, sizeof bytes, num(resp, "checkpoint_bytes"));
        fprintf(ctx->out, msg, id, bytes);
        fputc('\n', ctx->out);
    }
    json_decref(resp);
    return rc;
}

int cli_cmd_archive(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return exp_request(ctx, argv[0], "POST", "/archive",
                       "archived experiment %" PRId64 ": checkpoints dropped (%s left), hidden from 'hyperfarm ls' "
                       "(see 'hyperfarm ls --all')", 0);
}

int cli_cmd_delete(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return exp_request(ctx, argv[0], "DELETE", "", "deleted experiment %" PRId64 " (%s of checkpoints freed)", 1);
}
