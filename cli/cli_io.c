/*
 * cli_io.c — the small helpers every command shares: --json output, the
 * "not an id" usage error, reading a whole file or stdin (bounded by the
 * scheduler's body limit), reading a JSON document, and percent-encoding
 * for a query string.
 *
 * The bottom of the CLI's call graph: the command files (cli_cmds.c,
 * cli_flow.c, cli_webhooks.c, cli_insight.c) call in here, and nothing here
 * calls a command, so no two command files need each other for these.
 */
#include "cli.h"

#include "hf_buf.h"
#include "hf_err.h"
#include "hf_json.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SUBMIT_MAX_BYTES (1u << 20)   /* the scheduler's body limit for users */

void cli_print_json(cli_ctx *ctx, const json_t *v)
{
    json_dumpf(v, ctx->out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', ctx->out);
}

int cli_bad_id(cli_ctx *ctx, const char *what, const char *s)
{
    fprintf(ctx->err, "error: '%s' is not %s id (a positive integer%s)\n", s,
            what[0] == 'e' ? "an experiment" : "a trial", what[0] == 'e' ? ", or e<N>" : ", or t<N>");
    return CLI_USAGE;
}

int cli_read_file(cli_ctx *ctx, const char *path, hf_buf *b)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    char chunk[8192];
    size_t n;
    int rc = CLI_OK;
    if (!f) {
        fprintf(ctx->err, "error: cannot open %s: %s\n", path, strerror(errno));
        return errno == ENOENT ? CLI_NOTFOUND : CLI_USAGE;
    }
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (hf_buf_add(b, chunk, n)) {
            fprintf(ctx->err, "error: %s is larger than %u bytes (the scheduler's limit)\n", path,
                    SUBMIT_MAX_BYTES);
            rc = CLI_USAGE;
            break;
        }
    }
    if (!rc && ferror(f)) {
        fprintf(ctx->err, "error: reading %s: %s\n", path, strerror(errno));
        rc = CLI_ERR;
    }
    if (f != stdin) fclose(f);
    return rc;
}

int cli_read_json(cli_ctx *ctx, const char *path, json_t **doc)
{
    hf_buf b;
    hf_jerr je;
    int rc;
    *doc = NULL;
    hf_buf_init(&b, SUBMIT_MAX_BYTES);
    if ((rc = cli_read_file(ctx, path, &b)) == 0) {
        hf_jerr_clear(&je);
        if (hf_json_parse(b.data, b.len, HF_JSON_MAX_DEPTH, 1, doc, &je)) {
            fprintf(ctx->err, "error: %s: %s\n", path, je.msg);
            rc = CLI_USAGE;
        }
    }
    hf_buf_free(&b);
    return rc;
}

void cli_query_escape(char *out, size_t size, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    if (!size) return;
    for (; *s && n + 4 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-_.~", c)) {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = 0;
}
