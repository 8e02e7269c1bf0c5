/*
 * cli_webhooks.c — `hyperfarm webhooks`: list, add, test and delete the
 * scheduler's webhooks (docs/cli.md; the routes: docs/api.md "webhooks").
 *
 * A thin client like the rest: one request per action, the scheduler's
 * answer rendered. What users may see and do is the scheduler's to decide
 * (docs/api.md "Roles": others' URLs come back cut to scheme://host/...);
 * the CLI prints the URL it is given, through the table's cleaner, since a
 * URL and a delivery error are text someone else wrote.
 */
#include "cli.h"
#include "cli_fmt.h"
#include "hf_err.h"

#include <inttypes.h>
#include <string.h>

static int wh_list(cli_ctx *ctx)
{
    static const char *const head[] = {"ID", "URL", "EXPERIMENT", "EVENTS", "FORMAT", "OWNER",
                                       "DELIVERED", "PENDING", "LAST", "LAST ERROR"};
    json_t *resp = NULL, *h;
    cli_table t;
    size_t i;
    int rc;
    if ((rc = cli_api(ctx, "GET", "/api/v1/webhooks", NULL, &resp))) return rc;
    if (ctx->o.json) {
        cli_print_json(ctx, resp);
        json_decref(resp);
        return CLI_OK;
    }
    cli_table_init(&t, 10, head);
    cli_table_maxw(&t, 1, 60);
    cli_table_maxw(&t, 9, 60);
    for (int c = 6; c <= 8; c++) cli_table_align(&t, c, CLI_ALIGN_RIGHT);
    json_array_foreach(json_object_get(resp, "webhooks"), i, h) {
        char buf[512];
        cli_table_cellf(&t, "%" PRId64, (int64_t)json_integer_value(json_object_get(h, "id")));
        cli_table_cell(&t, json_string_value(json_object_get(h, "url")));
        json_t *x = json_object_get(h, "experiment_id");
        if (json_is_integer(x)) cli_table_cellf(&t, "%" PRId64, (int64_t)json_integer_value(x));
        else cli_table_cell(&t, "all");
        /* ["a","b"] -> "a,b" */
        size_t k, n = 0;
        json_t *f;
        buf[0] = '\0';
        json_array_foreach(json_object_get(h, "events"), k, f) {
            const char *s = json_string_value(f);
            int w = snprintf(buf + n, sizeof buf - n, "%s%s", k ? "," : "", s ? s : "?");
            if (w < 0 || (size_t)w >= sizeof buf - n) break;
            n += (size_t)w;
        }
        cli_table_cell(&t, buf);
        cli_table_cell(&t, json_string_value(json_object_get(h, "format")));
        cli_table_cell(&t, json_string_value(json_object_get(h, "owner")));
        cli_table_cellf(&t, "%" PRId64, (int64_t)json_integer_value(json_object_get(h, "delivered")));
        cli_table_cellf(&t, "%" PRId64, (int64_t)json_integer_value(json_object_get(h, "pending")));
        json_t *ls = json_object_get(h, "last_status");
        if (json_is_integer(ls)) cli_table_cellf(&t, "%" PRId64, (int64_t)json_integer_value(ls));
        else cli_table_cell(&t, NULL);
        cli_table_cell(&t, json_string_value(json_object_get(h, "last_error")));
    }
    if (t.nrows == 0 && !ctx->o.tsv)
        fprintf(ctx->out, "no webhooks; add one with: hyperfarm webhooks add URL\n");
    else cli_table_print(&t, ctx->out, ctx->o.tsv);
    cli_table_free(&t);
    json_decref(resp);
    return CLI_OK;
}

static int wh_add(cli_ctx *ctx, const char *url)
{
    char err[256];
    json_t *events = NULL, *body, *resp = NULL;
    int64_t xid = 0;
    int rc;
    if (ctx->o.experiment && cli_parse_id(ctx->o.experiment, 'e', &xid)) return cli_bad_id(ctx, "experiment", ctx->o.experiment);
    if (cli_webhook_events(ctx->o.events, &events, err, sizeof err)) {
        fprintf(ctx->err, "error: %s\n", err);
        return CLI_USAGE;
    }
    body = json_pack("{sssssO}", "url", url, "format", ctx->o.format, "events", events);
    json_decref(events);
    if (!body) {
        fprintf(ctx->err, "error: --format or URL is not UTF-8 text\n");
        return CLI_USAGE;
    }
    if (xid > 0) json_object_set_new(body, "experiment_id", json_integer(xid));
    if (ctx->o.secret) json_object_set_new(body, "secret", json_string(ctx->o.secret));
    rc = cli_api(ctx, "POST", "/api/v1/webhooks", body, &resp);
    json_decref(body);
    if (rc) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else {
        fprintf(ctx->out, "%" PRId64 "\n", (int64_t)json_integer_value(json_object_get(resp, "id")));
        const char *secret = json_string_value(json_object_get(resp, "secret"));
        if (secret) {
            char clean[300];
            cli_fmt_clean(clean, sizeof clean, secret);
            fprintf(ctx->err, "signing secret (shown once; receivers check X-Hyperfarm-Signature with it): %s\n",
                    clean);
        }
    }
    json_decref(resp);
    return CLI_OK;
}

static int wh_test(cli_ctx *ctx, int64_t id)
{
    char path[96];
    json_t *resp = NULL;
    int rc;
    snprintf(path, sizeof path, "/api/v1/webhooks/%" PRId64 "/test", id);
    if ((rc = cli_api(ctx, "POST", path, NULL, &resp))) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "webhook %" PRId64 ": test delivery %" PRId64 " queued; 'hyperfarm webhooks' shows how it went\n",
                 id, (int64_t)json_integer_value(json_object_get(resp, "delivery")));
    json_decref(resp);
    return CLI_OK;
}

static int wh_delete(cli_ctx *ctx, int64_t id)
{
    char path[96];
    json_t *resp = NULL;
    int rc;
    snprintf(path, sizeof path, "/api/v1/webhooks/%" PRId64, id);
    if ((rc = cli_api(ctx, "DELETE", path, NULL, &resp))) return rc;
    if (ctx->o.json) cli_print_json(ctx, resp);
    else fprintf(ctx->out, "webhook %" PRId64 " deleted\n", id);
    json_decref(resp);
    return CLI_OK;
}

int cli_cmd_webhooks(cli_ctx *ctx, int argc, char **argv)
{
    char verb[16], err[256];
    int64_t id;
    const char *url;
    if (cli_webhook_args(argc, argv, verb, sizeof verb, &id, &url, err, sizeof err)) {
        fprintf(ctx->err, "error: %s\nusage: hyperfarm webhooks [list] | add URL [--experiment EXP] [--events F,F] "
                "[--format json|slack] [--secret S] | test ID | delete ID\n", err);
        return CLI_USAGE;
    }
    if (strcmp(verb, "add") != 0 && (ctx->o.experiment || ctx->o.secret || strcmp(ctx->o.events, "*") ||
                                     strcmp(ctx->o.format, "json"))) {
        fprintf(ctx->err, "error: --experiment, --events, --format and --secret go with 'webhooks add'\n");
        return CLI_USAGE;
    }
    if (!strcmp(verb, "list")) return wh_list(ctx);
    if (!strcmp(verb, "add")) return wh_add(ctx, url);
    if (!strcmp(verb, "test")) return wh_test(ctx, id);
    return wh_delete(ctx, id);
}
