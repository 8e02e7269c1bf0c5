/*
 * cli_insight.c — the commands that look across trials (issue 17):
 * `importance EXP` (fANOVA importance as bars), `compare T1 T2 ...`
 * (trials side by side, differing rows marked) and `logs --grep`
 * (search one trial's or a whole experiment's logs). Each is one to a few
 * GETs of docs/openapi.yaml; the rendering helpers are pure and
 * unit-tested (tests/unit/test_cli_insight.c).
 */
#include "cli.h"
#include "cli_fmt.h"
#include "hf_err.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static void dump_json(cli_ctx *ctx, const json_t *v)
{
    json_dumpf(v, ctx->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', ctx->out);
}

static int id_error(cli_ctx *ctx, const char *s, char kind)
{
    fprintf(ctx->err, "error: '%s' is not %s id (a positive integer, or %c<N>)\n", s,
            kind == 'e' ? "an experiment" : "a trial", kind);
    return CLI_USAGE;
}

/* ---- importance ---- */

int cli_importance_bar(char *buf, size_t size, double v, int width)
{
    static const char *const part[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    size_t n = 0;
    if (size == 0) return HF_EINVAL;
    buf[0] = '\0';
    if (!(v > 0)) v = 0;
    if (v > 1) v = 1;
    int eighths = (int)lround(v * width * 8);
    for (int i = 0; i < eighths / 8; i++) {
        if (n + 4 > size) return HF_ETOOBIG;
        memcpy(buf + n, "█", 3);
        n += 3;
    }
    const char *p = part[eighths % 8];
    size_t pl = strlen(p);
    if (n + pl + 1 > size) return HF_ETOOBIG;
    memcpy(buf + n, p, pl + 1);
    return 0;
}

int cli_cmd_importance(cli_ctx *ctx, int argc, char **argv)
{
    char path[512], q[3 * 64 + 1] = "";
    int64_t id;
    json_t *resp = NULL;
    int rc;
    (void)argc;
    if (cli_parse_id(argv[0], 'e', &id)) return id_error(ctx, argv[0], 'e');
    if (ctx->o.objective) {   /* the scheduler checks it is an objective (400 naming objective) */
        if (!*ctx->o.objective || strlen(ctx->o.objective) > 64) {
            fprintf(ctx->err, "error: --objective: a metric name of 1..64 bytes\n");
            return CLI_USAGE;
        }
        cli_query_escape(q, sizeof q, ctx->o.objective);
    }
    snprintf(path, sizeof path, "/api/v1/experiments/%" PRId64 "/importance%s%s", id, *q ? "?objective=" : "", q);
    if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) return rc;
    json_t *imp = json_object_get(resp, "importance");
    json_t *names = json_object_get(resp, "params");
    if (ctx->o.json) {
        dump_json(ctx, resp);
    } else if (ctx->o.tsv) {
        size_t i;
        json_t *nm;
        fprintf(ctx->out, "param\timportance\n");
        json_array_foreach(names, i, nm) {
            cli_put_text(ctx->out, json_string_value(nm), 0);
            fprintf(ctx->out, "\t%.6f\n", json_number_value(json_object_get(imp, json_string_value(nm))));
        }
    } else {
        int64_t n = json_integer_value(json_object_get(resp, "trials"));
        if (json_array_size(names) == 0) {
            fprintf(ctx->out, "experiment %" PRId64 ": no importance yet (%" PRId64 " completed trial%s; fANOVA "
                    "needs at least 2, and a hyperparameter that varies)\n", id, n, n == 1 ? "" : "s");
        } else {
            const char *ob = json_string_value(json_object_get(resp, "objective"));
            const char *goal = json_string_value(json_object_get(resp, "goal"));
            char obc[72];
            cli_fmt_clean(obc, sizeof obc, ob ? ob : "objective");
            fprintf(ctx->out, "experiment %" PRId64 ": hyperparameter importance for %s%s (fANOVA, %" PRId64
                    " completed trials)\n", id, obc, !goal ? "" : !strcmp(goal, "minimize") ? " (min)" : " (max)",
                    n);
            int w = 0;
            size_t i;
            json_t *nm;
            json_array_foreach(names, i, nm) {
                int l = (int)strlen(json_string_value(nm));
                if (l > w) w = l;
            }
            if (w > 32) w = 32;
            json_array_foreach(names, i, nm) {
                char bar[256], name[40];
                double v = json_number_value(json_object_get(imp, json_string_value(nm)));
                cli_importance_bar(bar, sizeof bar, v, 40);
                cli_fmt_clean(name, sizeof name, json_string_value(nm));
                fprintf(ctx->out, "  %-*.*s  %5.3f  %s\n", w, w, name, v, bar);
            }
        }
    }
    json_decref(resp);
    return CLI_OK;
}

/* ---- compare ---- */

/* Add one row: label, then the value at key in every trial's object
 * (obj_key NULL: the trial itself); mark it when the values differ. */
static void compare_row(cli_table *t, json_t *const *tr, size_t n, const char *obj_key, const char *key,
                        const char *label)
{
    char buf[256];
    const json_t *first = NULL;
    int differ = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = obj_key ? json_object_get(tr[i], obj_key) : tr[i];
        const json_t *v = json_object_get(o, key);
        if (i == 0) first = v;
        else if (!(v == first || (v && first && json_equal((json_t *)v, (json_t *)first)))) differ = 1;
    }
    cli_table_cell(t, differ ? "*" : " ");   /* "" would print as "-" */
    cli_table_cell(t, label);
    for (size_t i = 0; i < n; i++) {
        const json_t *o = obj_key ? json_object_get(tr[i], obj_key) : tr[i];
        cli_fmt_json_scalar(buf, sizeof buf, json_object_get(o, key));
        cli_table_cell(t, buf);
    }
}

/* Every key of member obj_key over the trials, in first-seen order. */
static json_t *union_keys(json_t *const *tr, size_t n, const char *obj_key)
{
    json_t *seen = json_object(), *keys = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(tr[i], obj_key), k, v)
            if (!json_object_get(seen, k)) {
                json_object_set_new(seen, k, json_true());
                json_array_append_new(keys, json_string(k));
            }
    }
    json_decref(seen);
    return keys;
}

int cli_compare_table(cli_table *t, json_t *const *tr, size_t n, char (*heads)[32])
{
    static const char *const fixed[] = {"experiment_id", "state", "objective", "restarts", "exit_code", "agent"};
    const char *head[CLI_TABLE_MAX_COLS];
    char label[160];
    if (n < 1 || n > CLI_COMPARE_MAX) return HF_EINVAL;
    head[0] = "";
    head[1] = "";
    for (size_t i = 0; i < n; i++) {   /* the table keeps the header pointers: heads outlives it */
        snprintf(heads[i], 32, "trial %" PRId64, (int64_t)json_integer_value(json_object_get(tr[i], "id")));
        head[i + 2] = heads[i];
    }
    int rc = cli_table_init(t, (int)n + 2, head);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) cli_table_align(t, (int)i + 2, CLI_ALIGN_RIGHT);
    for (size_t f = 0; f < sizeof fixed / sizeof fixed[0]; f++) compare_row(t, tr, n, NULL, fixed[f], fixed[f]);
    const char *groups[] = {"hparams", "best", "latest"};
    const char *prefix[] = {"hp.", "best.", "latest."};
    for (int g = 0; g < 3; g++) {
        json_t *keys = union_keys(tr, n, groups[g]);
        size_t i;
        json_t *k;
        json_array_foreach(keys, i, k) {
            /* A best says which way it was taken (the trial's "goals"). */
            const char *goal = NULL;
            for (size_t j = 0; j < n && g == 1 && !goal; j++)
                goal = json_string_value(json_object_get(json_object_get(tr[j], "goals"), json_string_value(k)));
            snprintf(label, sizeof label, "%s%s%s", prefix[g], json_string_value(k),
                     !goal ? "" : !strcmp(goal, "minimize") ? " (min)" : " (max)");
            compare_row(t, tr, n, groups[g], json_string_value(k), label);
        }
        json_decref(keys);
    }
    return t->overflow ? HF_ETOOBIG : 0;
}

int cli_cmd_compare(cli_ctx *ctx, int argc, char **argv)
{
    json_t *tr[CLI_COMPARE_MAX] = {0};
    int rc = CLI_OK;
    size_t n = 0;
    if (argc < 2 || argc > CLI_COMPARE_MAX) {
        fprintf(ctx->err, "error: compare: give 2 to %d trial ids\nusage: hyperfarm compare T1 T2 [T3...]\n",
                CLI_COMPARE_MAX);
        return CLI_USAGE;
    }
    for (int i = 0; i < argc; i++) {
        int64_t id;
        char path[96];
        if (cli_parse_id(argv[i], 't', &id)) {
            rc = id_error(ctx, argv[i], 't');
            goto end;
        }
        snprintf(path, sizeof path, "/api/v1/trials/%" PRId64, id);
        if ((rc = cli_api(ctx, "GET", path, NULL, &tr[n]))) goto end;
        json_object_del(tr[n], "events");   /* not compared; keeps --json small */
        json_object_del(tr[n], "checkpoints");
        n++;
    }
    if (ctx->o.json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) json_array_append(arr, tr[i]);
        json_t *doc = json_pack("{so}", "trials", arr);
        dump_json(ctx, doc);
        json_decref(doc);
        goto end;
    }
    cli_table t;
    char heads[CLI_COMPARE_MAX][32];
    if (cli_compare_table(&t, tr, n, heads)) {
        fprintf(ctx->err, "error: cannot build the comparison table\n");
        rc = CLI_ERR;
        goto end;
    }
    cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
    if (!ctx->o.tsv) fprintf(ctx->out, "(* = the trials differ)\n");
end:
    for (size_t i = 0; i < n; i++) json_decref(tr[i]);
    return rc;
}

/* ---- logs --grep ---- */

int cli_url_escape(char *out, size_t size, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-_.~", c);
        if (n + (plain ? 1 : 3) + 1 > size) return HF_ETOOBIG;
        if (plain) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
    return 0;
}

int cli_logs_grep(cli_ctx *ctx, int argc, char **argv)
{
    char pat[1024], path[1400];
    int64_t id, after = 0, printed = 0;
    int exp = ctx->o.experiment != NULL, rc = CLI_OK;
    json_t *resp = NULL;
    if (exp == (argc == 1)) {
        fprintf(ctx->err, "error: logs: give a TRIAL or --experiment EXP, not %s\n"
                "usage: hyperfarm logs TRIAL|--experiment EXP --grep PATTERN [--regex] [--ignore-case]\n",
                exp ? "both" : "neither");
        return CLI_USAGE;
    }
    if (!ctx->o.grep) {
        fprintf(ctx->err, "error: logs --experiment needs --grep PATTERN\n");
        return CLI_USAGE;
    }
    if (ctx->o.follow) {
        fprintf(ctx->err, "error: logs: --grep and --follow exclude each other\n");
        return CLI_USAGE;
    }
    const char *ids = exp ? ctx->o.experiment : argv[0];
    if (cli_parse_id(ids, exp ? 'e' : 't', &id)) return id_error(ctx, ids, exp ? 'e' : 't');
    if (cli_url_escape(pat, sizeof pat, ctx->o.grep)) {
        fprintf(ctx->err, "error: --grep: pattern too long\n");
        return CLI_USAGE;
    }
    int64_t want = ctx->o.limit > 0 ? ctx->o.limit : INT64_MAX;
    for (;;) {
        int64_t page = want - printed < 10000 ? want - printed : 10000;
        snprintf(path, sizeof path, "/api/v1/%s/%" PRId64 "/logs?grep=%s&regex=%d&icase=%d&after=%" PRId64
                 "&limit=%" PRId64, exp ? "experiments" : "trials", id, pat, ctx->o.regex, ctx->o.icase, after, page);
        if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) goto end;
        size_t i;
        json_t *l;
        json_array_foreach(json_object_get(resp, "logs"), i, l) {
            if (ctx->o.json) {
                json_dumpf(l, ctx->out, JSON_COMPACT | JSON_PRESERVE_ORDER);
                fputc('\n', ctx->out);
            } else {
                /* docs/cli.md: the trial's bytes, cleaned when they go to a terminal. */
                const char *line = json_string_value(json_object_get(l, "line"));
                if (exp) fprintf(ctx->out, "t%" PRId64 ": ", (int64_t)json_integer_value(json_object_get(l, "trial_id")));
                if (ctx->out_tty) cli_put_text(ctx->out, line, CLI_CLEAN_MULTILINE);
                else fputs(line ? line : "", ctx->out);
                fputc('\n', ctx->out);
            }
            printed++;
        }
        int more = json_is_true(json_object_get(resp, "truncated"));
        int64_t next = json_integer_value(json_object_get(resp, "next"));
        json_decref(resp);
        resp = NULL;
        if (!more || printed >= want || next <= after) break;
        after = next;
    }
    fflush(ctx->out);
    /* docs/cli.md: an empty result is said, on stderr, so that stdout stays
     * the matches alone for pipes; it is not an error (exit 0). */
    if (printed == 0) fprintf(ctx->err, "0 matches\n");
end:
    json_decref(resp);
    return rc;
}
