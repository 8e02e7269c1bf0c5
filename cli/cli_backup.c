/*
 * cli_backup.c — `hyperfarm backup DIR` (cli_backup.h). The scheduler
 * writes the snapshot on its own filesystem, so DIR names a directory on
 * the scheduler's server (e.g. a mounted backup disk), not on the machine
 * running the CLI; the scheduler checks it (absolute, existing, not the
 * live database's directory) and only an admin token may ask. The backup
 * runs on the scheduler's backup thread: POST /api/v1/backups queues it
 * (202 with its id) and this polls GET /api/v1/backups/{id} until it is
 * done or failed, however long it takes.
 */
#include "cli_backup.h"

#include "hf_err.h"

#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#define POLL_MS 300

static int64_t jint_of(const json_t *o, const char *key) { return (int64_t)json_integer_value(json_object_get(o, key)); }

/* Print a finished backup (done: the snapshot; failed: the error). RET the exit code. */
static int print_result(cli_ctx *ctx, const json_t *job)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    if (ctx->o.json) cli_print_json(ctx, job);
    if (state && strcmp(state, "done") == 0) {
        if (!ctx->o.json) {
            fprintf(ctx->out, "%s\n", json_string_value(json_object_get(job, "snapshot")));
            fprintf(ctx->err, "database %" PRId64 " bytes; %" PRId64 " objects (%" PRId64 " copied, %" PRId64
                    " linked from the previous snapshot, %" PRId64 " missing); %" PRId64 " ms\n",
                    jint_of(job, "db_bytes"), jint_of(job, "objects"), jint_of(job, "objects_copied"),
                    jint_of(job, "objects_linked"), jint_of(job, "objects_missing"), jint_of(job, "duration_ms"));
        }
        return CLI_OK;
    }
    fprintf(ctx->err, "error: backup %" PRId64 " failed: %s\n", jint_of(job, "id"),
            json_string_value(json_object_get(job, "error")) ? json_string_value(json_object_get(job, "error"))
                                                              : "(no reason given)");
    return CLI_ERR;
}

int cli_cmd_backup(cli_ctx *ctx, int argc, char **argv)
{
    json_t *resp = NULL, *body;
    char path[64];
    (void)argc;
    if (argv[0][0] != '/') {
        fprintf(ctx->err, "error: backup: DIR must be an absolute path on the scheduler's server, got '%s'\n",
                argv[0]);
        return CLI_USAGE;
    }
    body = json_pack("{ss}", "dir", argv[0]);
    int rc = cli_api(ctx, "POST", "/api/v1/backups", body, &resp);
    json_decref(body);
    if (rc) return rc;
    snprintf(path, sizeof path, "/api/v1/backups/%" PRId64, jint_of(resp, "id"));
    for (;;) {
        const char *state = json_string_value(json_object_get(resp, "state"));
        if (state && (strcmp(state, "done") == 0 || strcmp(state, "failed") == 0)) break;
        json_decref(resp);
        resp = NULL;
        usleep(POLL_MS * 1000);
        if ((rc = cli_api(ctx, "GET", path, NULL, &resp))) return rc;
    }
    rc = print_result(ctx, resp);
    json_decref(resp);
    return rc;
}
