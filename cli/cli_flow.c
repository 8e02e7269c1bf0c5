/*
 * cli_flow.c — the experiment-workflow commands (docs/cli.md, issue #17):
 * extend (more trials), fork (a new experiment from an edited file, with
 * its parent recorded), tag / describe (an experiment's tags and Markdown
 * description), note (a trial's Markdown notes), and the lines `show`
 * prints about them. Each is one request; the scheduler validates and
 * names the offending field, which cli_api turns into exit code 2.
 */
#include "cli.h"

#include "hf_err.h"
#include "cli_fmt.h"
#include "hf_time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TEXT_MAX_BYTES (1u << 20)

int cli_tag_args(int argc, char **argv, json_t **add, json_t **remove, char *err, size_t errlen)
{
    *add = json_array();
    *remove = json_array();
    for (int i = 0; i < argc; i++) {
        const char *w = argv[i];
        json_t *to = *add;
        if (w[0] == '+' || w[0] == '-') {
            to = w[0] == '-' ? *remove : *add;
            w++;
        }
        if (!*w) {
            snprintf(err, errlen, "'%s': expected +TAG, -TAG or TAG", argv[i]);
            json_decref(*add);
            json_decref(*remove);
            *add = *remove = NULL;
            return HF_EINVAL;
        }
        json_array_append_new(to, json_string(w));
    }
    return 0;
}

/* PATCH path with body (stolen) and print the answer: --json as is, else
 * what. RET a cli_exit code. */
static int patch_print(cli_ctx *ctx, const char *path, json_t *body, const char *what)
{
    json_t *resp = NULL;
    int rc = cli_api(ctx, "PATCH", path, body, &resp);
    json_decref(body);
    if (rc) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "%s\n", what);
    json_decref(resp);
    return CLI_OK;
}

int cli_cmd_extend(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    char path[128];
    json_t *resp = NULL, *body;
    int rc;
    (void)argc;
    if (cli_parse_id(argv[0], 'e', &id)) return cli_bad_id(ctx, "experiment", argv[0]);
    if (!ctx->o.add_trials == !ctx->o.max_trials) {
        fprintf(ctx->err, "error: extend needs exactly one of --add-trials K or --max-trials N\n"
                          "usage: hyperfarm extend EXP --add-trials K | --max-trials N\n");
        return CLI_USAGE;
    }
    body = ctx->o.add_trials ? json_pack("{sI}", "add_trials", (json_int_t)ctx->o.add_trials)
                             : json_pack("{sI}", "max_trials", (json_int_t)ctx->o.max_trials);
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/extend", id);
    rc = cli_api(ctx, "POST", path, body, &resp);
    json_decref(body);
    if (rc) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "experiment %" PRId64 ": max_trials %" PRId64 " (%s)\n", id,
                 (int64_t)json_integer_value(json_object_get(resp, "max_trials")),
                 json_string_value(json_object_get(resp, "state")) ? json_string_value(json_object_get(resp, "state"))
                                                                   : "?");
    json_decref(resp);
    return CLI_OK;
}

int cli_cmd_fork(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    char path[128];
    json_t *doc = NULL, *resp = NULL;
    int rc;
    (void)argc;
    if (cli_parse_id(argv[0], 'e', &id)) return cli_bad_id(ctx, "experiment", argv[0]);
    if ((rc = cli_read_json(ctx, argv[1], &doc))) goto end;
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/fork", id);
    if ((rc = cli_api(ctx, "POST", path, doc, &resp))) goto end;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "%" PRId64 "\n", (int64_t)json_integer_value(json_object_get(resp, "id")));
end:
    json_decref(doc);
    json_decref(resp);
    return rc;
}

int cli_cmd_tag(cli_ctx *ctx, int argc, char **argv)
{
    int64_t id;
    char path[128], err[160];
    json_t *add, *rm;
    if (cli_parse_id(argv[0], 'e', &id)) return cli_bad_id(ctx, "experiment", argv[0]);
    if (argc < 2) {
        fprintf(ctx->err, "error: tag needs at least one +TAG or -TAG\nusage: hyperfarm tag EXP +TAG -TAG ...\n");
        return CLI_USAGE;
    }
    if (cli_tag_args(argc - 1, argv + 1, &add, &rm, err, sizeof err)) {
        fprintf(ctx->err, "error: %s\n", err);
        return CLI_USAGE;
    }
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64, id);
    json_t *resp = NULL, *body = json_pack("{soso}", "add_tags", add, "remove_tags", rm);
    int rc = cli_api(ctx, "PATCH", path, body, &resp);
    json_decref(body);
    if (rc) return rc;
    if (ctx->o.json) {
        cli_print_json(ctx, resp);
    } else {
        size_t i;
        json_t *t;
        fprintf(ctx->out, "experiment %" PRId64 " tags:", id);
        json_array_foreach(json_object_get(resp, "tags"), i, t) {
            fputc(' ', ctx->out);
            cli_put_text(ctx->out, json_string_value(t), 0);
        }
        fputc('\n', ctx->out);
    }
    json_decref(resp);
    return CLI_OK;
}

/* TEXT, or "-": all of stdin, as a JSON string ("" = null: clear). */
static int text_arg(cli_ctx *ctx, const char *arg, json_t **out)
{
    hf_buf b;
    int rc = 0;
    if (strcmp(arg, "-")) {
        *out = *arg ? json_string(arg) : json_null();
        if (!*out) fprintf(ctx->err, "error: the text is not valid UTF-8\n");
        return *out ? CLI_OK : CLI_USAGE;
    }
    hf_buf_init(&b, TEXT_MAX_BYTES);
    if ((rc = cli_read_file(ctx, "-", &b)) == 0) {
        *out = b.len ? json_stringn(b.data, b.len) : json_null();
        if (!*out) { fprintf(ctx->err, "error: stdin is not valid UTF-8 text\n"); rc = CLI_USAGE; }
    }
    hf_buf_free(&b);
    return rc;
}

/* note / describe: PATCH the trial's notes (kind 't') or the experiment's
 * description (kind 'e') with TEXT or stdin. */
static int set_markdown(cli_ctx *ctx, char **argv, char kind)
{
    int64_t id;
    char path[128], msg[96];
    json_t *text;
    int rc;
    int trial = kind == 't';
    if (cli_parse_id(argv[0], kind, &id)) return cli_bad_id(ctx, trial ? "trial" : "experiment", argv[0]);
    if ((rc = text_arg(ctx, argv[1], &text))) return rc;
    snprintf(path, sizeof path, "/api/v1/%s/%" PRId64, trial ? "trials" : "experiments", id);
    snprintf(msg, sizeof msg, "%s %" PRId64 ": %s %s", trial ? "trial" : "experiment", id,
             trial ? "notes" : "description", json_is_null(text) ? "cleared" : "saved");
    return patch_print(ctx, path, json_pack("{so}", trial ? "notes" : "description", text), msg);
}

int cli_cmd_note(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return set_markdown(ctx, argv, 't');
}

int cli_cmd_describe(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc;
    return set_markdown(ctx, argv, 'e');
}

json_t *cli_exp_events(cli_ctx *ctx, int64_t id)
{
    char path[128];
    json_t *resp = NULL;
    FILE *keep = ctx->err, *null = fopen("/dev/null", "w");
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/events?limit=200", id);
    if (null) ctx->err = null;   /* an older scheduler has no such route: show without it */
    if (cli_api(ctx, "GET", path, NULL, &resp)) resp = NULL;
    ctx->err = keep;
    if (null) fclose(null);
    json_t *ev = json_incref(json_object_get(resp, "events"));
    json_decref(resp);
    return ev;
}

void cli_show_workflow(cli_ctx *ctx, const json_t *exp, const json_t *events)
{
    char buf[1024], ago[32];
    const char *by = json_string_value(json_object_get(exp, "submitted_by"));
    const json_t *tags = json_object_get(exp, "tags"), *t;
    const char *desc = json_string_value(json_object_get(exp, "description"));
    int64_t parent = json_integer_value(json_object_get(exp, "parent_experiment"));
    size_t i;
    int64_t now = hf_wall_ms();
    if (by) { cli_fmt_clean(buf, sizeof buf, by); fprintf(ctx->out, "  submitted  by %s\n", buf); }
    if (parent > 0) fprintf(ctx->out, "  forked     from experiment %" PRId64 "\n", parent);
    if (json_array_size(tags)) {
        fprintf(ctx->out, "  tags      ");
        json_array_foreach(tags, i, t) {
            cli_fmt_clean(buf, sizeof buf, json_string_value(t));
            fprintf(ctx->out, " %s", buf);
        }
        fputc('\n', ctx->out);
    }
    const json_t *ws = json_object_get(exp, "warm_start");
    if (ws)
        fprintf(ctx->out, "  warm start %" PRId64 " earlier trials observed, %" PRId64 " configurations enqueued\n",
                (int64_t)json_integer_value(json_object_get(ws, "observed")),
                (int64_t)json_integer_value(json_object_get(ws, "enqueued")));
    if (desc && *desc) {
        /* The Markdown as written, line by line, indented and cleaned. */
        const char *p = desc;
        int lines = 0;
        fprintf(ctx->out, "  description\n");
        while (*p && lines < 20) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            char line[512];
            snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
            cli_fmt_clean(buf, sizeof buf, line);
            fprintf(ctx->out, "    %s\n", buf);
            lines++;
            p = e ? e + 1 : p + n;
        }
        if (*p) fprintf(ctx->out, "    …\n");
    }
    int header = 0;
    json_array_foreach(events, i, t) {
        const char *u = json_string_value(json_object_get(t, "user"));
        if (!u) continue;
        if (!header++) fprintf(ctx->out, "  by users\n");
        char who[80], what[300];
        cli_fmt_clean(who, sizeof who, u);
        const char *ty = json_string_value(json_object_get(t, "type")), *de = json_string_value(json_object_get(t, "detail"));
        snprintf(what, sizeof what, "%s %s", ty ? ty : "", de ? de : "");
        cli_fmt_clean(buf, sizeof buf, what);
        cli_fmt_ago(ago, sizeof ago, now, json_integer_value(json_object_get(t, "time")));
        int64_t tid = json_integer_value(json_object_get(t, "trial_id"));
        if (tid > 0) fprintf(ctx->out, "    %-9s %-12s trial %" PRId64 ": %s\n", ago, who, tid, buf);
        else fprintf(ctx->out, "    %-9s %-12s %s\n", ago, who, buf);
    }
}
