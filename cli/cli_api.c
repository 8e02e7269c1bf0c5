/*
 * cli_api.c — one HTTP request to the scheduler with every failure turned
 * into one line on stderr and an exit code (cli.h).
 *
 * The unreachable message names the URL and says how to fix it, since that
 * is the first thing a new user meets ("is the scheduler running? where?").
 */
#include "cli.h"
#include "cli_fmt.h"
#include "hf_err.h"

#include <string.h>

int cli_exit_for_status(long status)
{
    if (status >= 200 && status < 300) return CLI_OK;
    switch (status) {
    case 400: case 413: case 422: return CLI_USAGE;
    case 401: case 403: return CLI_AUTH;
    case 404: case 410: return CLI_NOTFOUND;
    case 409: return CLI_STATE;
    case 502: case 503: case 504: return CLI_UNREACHABLE;
    default: return CLI_ERR;
    }
}

int cli_transport_error(cli_ctx *ctx, int rc, const char *err)
{
    if ((rc == HF_ECONN || rc == HF_ETIMEOUT) && hf_http_follow(ctx->http)) {
        fprintf(ctx->err,
                "error: cannot reach a hyperfarm scheduler at any of %s (the last, %s: %s)\n"
                "hint: check that one of them runs ('hyperfarm replication' shows each one's role)\n",
                ctx->o.url, hf_http_base(ctx->http), rc == HF_ETIMEOUT ? "timed out" : err);
        return CLI_UNREACHABLE;
    }
    if (rc == HF_ECONN || rc == HF_ETIMEOUT) {
        fprintf(ctx->err,
                "error: cannot reach the hyperfarm scheduler at %s (%s)\n"
                "hint: start one with 'hyperfarm up', or point the CLI at yours with "
                "HYPERFARM_URL=http://HOST:PORT or --url\n",
                hf_http_base(ctx->http), rc == HF_ETIMEOUT ? "timed out" : err);
        return CLI_UNREACHABLE;
    }
    fprintf(ctx->err, "error: %s\n", err);
    return CLI_ERR;
}

int cli_api(cli_ctx *ctx, const char *method, const char *path, const json_t *body, json_t **resp)
{
    char err[512];
    long status = 0;
    json_t *r = NULL;

    *resp = NULL;
    int rc = hf_http_request(ctx->http, method, path, body, &status, &r, err, sizeof err);
    if (rc) return cli_transport_error(ctx, rc, err);
    return cli_api_answer(ctx, method, path, status, r, resp);
}

int cli_api_answer(cli_ctx *ctx, const char *method, const char *path, long status, json_t *r, json_t **resp)
{
    *resp = NULL;
    int code = cli_exit_for_status(status);
    if (code != CLI_OK) {
        /* The scheduler's words may quote what a user sent: cleaned. */
        char msg_buf[1024], field_buf[256];
        const char *msg = json_string_value(json_object_get(r, "error"));
        const char *field = json_string_value(json_object_get(r, "field"));
        if (msg) msg = (cli_fmt_clean(msg_buf, sizeof msg_buf, msg), msg_buf);
        if (field) field = (cli_fmt_clean(field_buf, sizeof field_buf, field), field_buf);
        if (field && *field) fprintf(ctx->err, "error: %s: %s\n", field, msg ? msg : "rejected");
        else fprintf(ctx->err, "error: %s %s: %s (HTTP %ld)\n", method, path,
                     msg ? msg : "unexpected response", status);
        const char *role = json_string_value(json_object_get(r, "role"));
        if (status == 503 && role && (!strcmp(role, "standby") || !strcmp(role, "fenced"))) {
            const char *p = json_string_value(json_object_get(r, "primary"));
            if (p) p = (cli_fmt_clean(field_buf, sizeof field_buf, p), field_buf);
            fprintf(ctx->err, "hint: %s is a %s scheduler (read-only); the primary is %s: add it to --url or "
                    "HYPERFARM_URL (a comma-separated list)\n", hf_http_base(ctx->http), role, p ? p : "unknown");
        }
        if (code == CLI_AUTH)
            fprintf(ctx->err, "hint: set HYPERFARM_TOKEN (or --token) to a user token of the scheduler's token file\n");
        json_decref(r);
        return code;
    }
    *resp = r;
    return CLI_OK;
}
