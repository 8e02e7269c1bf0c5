/*
 * cli_repl.c — `hyperfarm replication` and `hyperfarm promote`
 * (cli_repl.h). With several scheduler URLs (--url A,B or HYPERFARM_URL)
 * both commands talk to each URL on its own client, not through the
 * follow set ctx->http shares (hf_follow.h): the status of every
 * scheduler is the point of `replication`, and a promotion must reach the
 * standby it is meant for, never be sent on to the primary.
 */
#include "cli_repl.h"
#include "cli_fmt.h"

#include "hf_err.h"
#include "hf_follow.h"
#include "hf_time.h"

#include <inttypes.h>
#include <string.h>

#define PROMOTE_POLL_MS 250

static int64_t jint(const json_t *o, const char *key) { return (int64_t)json_integer_value(json_object_get(o, key)); }
static const char *jstr(const json_t *o, const char *key, const char *def)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : def;
}

/* Server text made safe to print (cli_fmt_clean), in one of a few
 * rotating buffers so one fprintf may show several. */
static const char *clean(const char *s)
{
    static char bufs[4][512];
    static unsigned k;
    char *b = bufs[k++ % 4];
    cli_fmt_clean(b, sizeof bufs[0], s ? s : "");
    return b;
}

/* A client for exactly this URL (no follow set). RET NULL on OOM. */
static hf_http *client_for(cli_ctx *ctx, const char *url)
{
    hf_http *h = hf_http_new(url, ctx->o.token, (long)ctx->o.timeout_ms, 1);
    if (h && ctx->o.ca_file) hf_http_set_cafile(h, ctx->o.ca_file);
    return h;
}

/* GET /api/v1/replication of url. RET 0 with *out (a JSON object, caller
 * decrefs) or an exit code with the reason in err. */
static int repl_get(cli_ctx *ctx, const char *url, json_t **out, char *err, size_t errlen)
{
    long status = 0;
    json_t *r = NULL;
    hf_http *h = client_for(ctx, url);
    int rc = h ? hf_http_request(h, "GET", "/api/v1/replication", NULL, &status, &r, err, errlen) : HF_ENOMEM;
    hf_http_free(h);
    *out = NULL;
    if (rc) {
        if (rc == HF_ENOMEM) snprintf(err, errlen, "out of memory");
        return rc == HF_ECONN || rc == HF_ETIMEOUT ? CLI_UNREACHABLE : CLI_ERR;
    }
    if (status != 200 || !json_is_object(r)) {
        snprintf(err, errlen, "GET /api/v1/replication: %s (HTTP %ld)", clean(jstr(r, "error", "unexpected response")),
                 status);
        json_decref(r);
        return status == 200 ? CLI_ERR : cli_exit_for_status(status);
    }
    *out = r;
    return CLI_OK;
}

/* One entry of "peers" as text (docs/protocol.md "Replication"); an
 * older scheduler's entry is a bare URL. */
static void print_peer(FILE *o, const json_t *p)
{
    const char *kind = jstr(p, "kind", "");
    if (json_is_string(p)) {
        fprintf(o, "%s\n", clean(json_string_value(p)));
    } else if (!strcmp(kind, "standby")) {
        const char *nm = jstr(p, "name", "");   /* host:port; "" from an older standby */
        fprintf(o, "standby %s%s%s%s: %s, acked lsn %" PRId64 ", last seen %" PRId64 " ms ago\n",
                clean(jstr(p, "address", "?")), *nm ? " (" : "", clean(nm), *nm ? ")" : "", clean(jstr(p, "state", "?")),
                jint(p, "acked_lsn"), jint(p, "last_seen_ms_ago"));
    } else if (!strcmp(kind, "peer")) {
        fprintf(o, "peer %s: ", clean(jstr(p, "url", "?")));
        if (json_is_string(json_object_get(p, "error"))) fprintf(o, "no answer (%s)", clean(jstr(p, "error", "")));
        else fprintf(o, "%s of term %" PRId64, clean(jstr(p, "role", "?")), jint(p, "term"));
        if (json_is_integer(json_object_get(p, "checked_ms_ago")))
            fprintf(o, ", checked %" PRId64 " ms ago", jint(p, "checked_ms_ago"));
        fputc('\n', o);
    } else if (!strcmp(kind, "primary")) {
        fprintf(o, "primary %s%s\n", clean(jstr(p, "url", "?")),
                json_is_true(json_object_get(p, "following")) ? " (following)" : "");
    } else {
        fprintf(o, "%s\n", clean(kind));
    }
}

/* The text form of one scheduler's replication status. */
static void print_status(cli_ctx *ctx, const json_t *r)
{
    FILE *o = ctx->out;
    const json_t *sb = json_object_get(r, "standby"), *peers = json_object_get(r, "peers");
    fprintf(o, "role      %s\n", clean(jstr(r, "role", "?")));
    fprintf(o, "term      %" PRId64 "\n", jint(r, "term"));
    fprintf(o, "lsn       %" PRId64 "\n", jint(r, "lsn"));
    fprintf(o, "state     %s (mode %s)\n", clean(jstr(r, "state", "?")), clean(jstr(r, "mode", "?")));
    if (json_is_string(json_object_get(r, "primary"))) fprintf(o, "primary   %s\n", clean(jstr(r, "primary", "")));
    if (json_object_get(r, "applied_lsn"))
        fprintf(o, "applied   lsn %" PRId64 ", lag %" PRId64 " ms\n", jint(r, "applied_lsn"), jint(r, "lag_ms"));
    if (json_is_object(sb))
        fprintf(o, "standby   %s, acked lsn %" PRId64 ", lag %" PRId64 " lsn / %" PRId64 " ms, last seen %" PRId64
                   " ms ago\n",
                json_is_true(json_object_get(sb, "connected")) ? "connected" : "not connected",
                jint(sb, "acked_lsn"), jint(sb, "lag_lsn"), jint(sb, "lag_ms"), jint(sb, "last_seen_ms_ago"));
    else if (!strcmp(jstr(r, "role", ""), "primary")) fprintf(o, "standby   none\n");
    for (size_t i = 0; i < json_array_size(peers); i++) {
        fprintf(o, "%s ", i ? "         " : "peers    ");
        print_peer(o, json_array_get(peers, i));
    }
}

/* `replication` with several URLs: every scheduler's status. */
static int replication_all(cli_ctx *ctx, hf_follow *f)
{
    json_t *all = json_array();
    int rc = CLI_UNREACHABLE, answered = 0;
    for (size_t i = 0; i < hf_follow_count(f); i++) {
        char url[HF_FOLLOW_URL_MAX + 1], err[512] = "";
        json_t *r = NULL;
        hf_follow_url(f, i, url, sizeof url);
        int one = repl_get(ctx, url, &r, err, sizeof err);
        if (one == CLI_OK) answered = 1;
        else if (rc == CLI_UNREACHABLE) rc = one;
        if (ctx->o.json) {
            json_array_append_new(all, json_pack("{s:s, s:O?, s:s?}", "url", url, "replication", r,
                                                 "error", one ? err : NULL));
        } else {
            fprintf(ctx->out, "%s== %s\n", i ? "\n" : "", url);
            if (r) print_status(ctx, r);
            else fprintf(ctx->out, "error     %s\n", err);
        }
        json_decref(r);
    }
    if (ctx->o.json) {
        json_t *o = json_pack("{s:O}", "schedulers", all);
        cli_print_json(ctx, o);
        json_decref(o);
    }
    json_decref(all);
    return answered ? CLI_OK : rc;
}

int cli_cmd_replication(cli_ctx *ctx, int argc, char **argv)
{
    (void)argc; (void)argv;
    hf_follow *f = hf_http_follow(ctx->http);
    if (f) return replication_all(ctx, f);
    json_t *r = NULL;
    int rc = cli_api(ctx, "GET", "/api/v1/replication", NULL, &r);
    if (rc) return rc;
    if (ctx->o.json) cli_print_json(ctx, r);
    else print_status(ctx, r);
    json_decref(r);
    return CLI_OK;
}

/* The standby to promote: the only URL, or the first of several whose
 * status says standby. RET CLI_OK with url set, or an exit code (said). */
static int pick_standby(cli_ctx *ctx, char *url, size_t len)
{
    hf_follow *f = hf_http_follow(ctx->http);
    if (!f) {
        snprintf(url, len, "%s", hf_http_base(ctx->http));
        return CLI_OK;
    }
    int rc = CLI_UNREACHABLE;
    for (size_t i = 0; i < hf_follow_count(f); i++) {
        char err[512];
        json_t *r = NULL;
        hf_follow_url(f, i, url, len);
        int one = repl_get(ctx, url, &r, err, sizeof err);
        int standby = one == CLI_OK && !strcmp(jstr(r, "role", ""), "standby");
        json_decref(r);
        if (standby) return CLI_OK;
        if (one == CLI_OK) rc = CLI_STATE;
        else if (rc == CLI_UNREACHABLE && one != CLI_UNREACHABLE) rc = one;
    }
    fprintf(ctx->err, "error: promote: %s among %s\n",
            rc == CLI_STATE ? "no standby" : "no scheduler answered", ctx->o.url);
    return rc;
}

/* After a 202: poll url until it answers as primary of term >= term. */
static int wait_primary(cli_ctx *ctx, const char *url, int64_t term)
{
    int64_t end = hf_mono_ms() + CLI_PROMOTE_WAIT_MS;
    json_t *r = NULL;
    char err[512] = "no answer yet";
    while (hf_mono_ms() < end) {
        if (repl_get(ctx, url, &r, err, sizeof err) == CLI_OK && !strcmp(jstr(r, "role", ""), "primary")
            && jint(r, "term") >= term) {
            if (ctx->o.json) cli_print_json(ctx, r);
            else fprintf(ctx->out, "%s is the primary of term %" PRId64 "\n", url, jint(r, "term"));
            json_decref(r);
            return CLI_OK;
        }
        json_decref(r);
        r = NULL;
        hf_sleep_ms(PROMOTE_POLL_MS);
    }
    fprintf(ctx->err, "error: promote: %s was promoted (term %" PRId64 ") but did not answer as the primary in %d s"
            " (last: %s)\n", url, term, CLI_PROMOTE_WAIT_MS / 1000, err);
    return CLI_ERR;
}

int cli_cmd_promote(cli_ctx *ctx, int argc, char **argv)
{
    char url[HF_FOLLOW_URL_MAX + 1], err[512];
    long status = 0;
    json_t *r = NULL;
    (void)argc; (void)argv;
    int rc = pick_standby(ctx, url, sizeof url);
    if (rc) return rc;
    hf_http *h = client_for(ctx, url);
    if (!h) return CLI_ERR;
    /* a POST: hf_http sends it again only when no connection was made */
    rc = hf_http_request(h, "POST", "/api/v1/replication/promote", NULL, &status, &r, err, sizeof err);
    hf_http_free(h);
    if (rc) {
        fprintf(ctx->err, "error: cannot reach %s: %s\n", url, err);
        return rc == HF_ECONN || rc == HF_ETIMEOUT ? CLI_UNREACHABLE : CLI_ERR;
    }
    if (status != 202 && status != 200) {
        fprintf(ctx->err, "error: promote %s: %s (HTTP %ld)\n", url, clean(jstr(r, "error", "unexpected response")),
                status);
        if (status == 409) fprintf(ctx->err, "hint: only a standby can be promoted; 'hyperfarm replication' shows roles\n");
        json_decref(r);
        return cli_exit_for_status(status);
    }
    int64_t term = jint(r, "term");
    json_decref(r);
    fprintf(ctx->err, "promoting %s to the primary of term %" PRId64 "...\n", url, term);
    return wait_primary(ctx, url, term);
}
