/*
 * cli_repl.h — `hyperfarm replication` and `hyperfarm promote`
 * (docs/cli.md "Several scheduler URLs"): the standby scheduler seen from
 * the command line (docs/scheduler.md, standby).
 */
#ifndef HF_CLI_REPL_H
#define HF_CLI_REPL_H

#include "cli.h"

/* GET /api/v1/replication of the scheduler (of each one, when --url names
 * several) and print role, term, lsn, state and the standby's lag
 * (--json: the API's answer; several: {"schedulers": [{"url", "replication"
 * or null, "error" or null}]}). RET CLI_OK when one answered, else the
 * first failure's exit code (CLI_UNREACHABLE when none answered). */
int cli_cmd_replication(cli_ctx *ctx, int argc, char **argv);

/* POST /api/v1/replication/promote to the standby: --url's, or with
 * several URLs the first whose GET /api/v1/replication says "standby";
 * then wait (up to CLI_PROMOTE_WAIT_MS) until it answers as the primary of
 * the new term. RET CLI_OK; CLI_STATE (409: it is not a standby, or no
 * standby among the URLs); CLI_AUTH; CLI_NOTFOUND (a scheduler without
 * replication); CLI_UNREACHABLE; CLI_ERR (it did not come back as primary). */
int cli_cmd_promote(cli_ctx *ctx, int argc, char **argv);

#define CLI_PROMOTE_WAIT_MS 30000

#endif
