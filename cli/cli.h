/*
 * cli.h — the hyperfarm command-line client: shared context, exit codes and
 * the entry points of every subcommand.
 *
 * The CLI is a thin, stateless client of the scheduler's REST API
 * (docs/protocol.md): each subcommand does one to a few HTTP requests and
 * renders the answer either as a human table (default), tab-separated
 * values (--tsv) or the scheduler's JSON (--json, for scripts and jq).
 *
 * Logic lives in cli_*.c modules so the parsing and formatting can be
 * unit-tested without a scheduler (tests/unit/test_cli_*.c); cli/main.c
 * only calls cli_main().
 *
 * Exit codes are a stable contract for scripts (docs/cli.md):
 */
#ifndef HF_CLI_H
#define HF_CLI_H

#include "hf_http.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

enum cli_exit {
    CLI_OK          = 0,  /* success */
    CLI_ERR         = 1,  /* any other failure (server error, I/O, experiment ended CANCELED in watch) */
    CLI_USAGE       = 2,  /* bad usage or bad input (unknown flag, malformed file, 400/413) */
    CLI_NOTFOUND    = 3,  /* no such experiment, trial or route (404) */
    CLI_UNREACHABLE = 4,  /* the scheduler could not be reached (connection refused, timeout, DNS) */
    CLI_AUTH        = 5,  /* missing or wrong token (401/403) */
    CLI_STATE       = 6   /* not allowed in the object's current state (409) */
};

#define CLI_DEFAULT_URL "http://127.0.0.1:8080"

/* Every option any subcommand accepts; hf_config fills the ones that the
 * subcommand's table names. Strings point into argv or the environment. */
typedef struct cli_opts {
    /* global */
    const char *url;        /* --url, $HYPERFARM_URL */
    const char *token;      /* --token, $HYPERFARM_TOKEN */
    const char *ca_file;    /* --ca-file, $HYPERFARM_CA_FILE */
    int64_t     timeout_ms; /* --timeout-ms: per HTTP request */
    int         json;       /* --json: machine-readable output */
    int         tsv;        /* --tsv: tab-separated, with a header line */
    /* per command */
    int         follow;     /* logs -f/--follow */
    int         csv;        /* export --csv */
    int         watch;      /* submit --watch */
    int64_t     interval_ms;/* watch/logs -f poll interval */
    int64_t     tail;       /* logs --tail N (0 = all) */
    int         plain;      /* watch --plain: never redraw in place */
    int         all;        /* ls --all (include ended experiments; default shows all anyway) */
    /* up */
    const char *listen;     /* up --listen ADDR:PORT */
    const char *db;         /* up --db PATH */
    const char *workdir;    /* up --workdir DIR */
    const char *web;        /* up --web DIR */
    int64_t     slots;      /* up --slots N */
} cli_opts;

/* State shared by the subcommands of one invocation. */
typedef struct cli_ctx {
    cli_opts  o;
    hf_http  *http;         /* NULL for commands that need no scheduler */
    FILE     *out;          /* stdout normally; tests pass a memstream */
    FILE     *err;          /* stderr normally */
    int       out_tty;      /* out is a terminal (watch redraws in place) */
    const char *argv0;      /* how we were invoked (locating sibling programs) */
} cli_ctx;

/* Run the CLI with argv as main() received it. RET an enum cli_exit code. */
int cli_main(int argc, char **argv, FILE *out, FILE *err);

/* ---- cli_args.c: small pure parsers (unit-tested) ---- */

/* Parse an experiment or trial id: "7", or with the kind's letter prefix
 * "e7"/"exp7" (kind 'e') or "t7"/"trial7" (kind 't'). RET 0 or HF_EINVAL. */
int cli_parse_id(const char *s, char kind, int64_t *out);

/* Parse the target of `kill`: ("exp"|"experiment", N), ("trial", N), or one
 * word "e7"/"t5". Consumes 1 or 2 words of argv; sets *kind to 'e' or 't'.
 * A bare number is ambiguous and rejected with a hint in err.
 * RET 0 or HF_EINVAL. */
int cli_parse_kill_target(int argc, char **argv, char *kind, int64_t *id, int *used,
                          char *err, size_t errlen);

/* Move global options found before the subcommand after it, so that
 * `hyperfarm --url U ls` and `hyperfarm ls --url U` parse alike. Writes the
 * reordered vector (command first) into out (capacity argc) and returns the
 * index of the command in argv, or -1 when there is none. */
int cli_split_command(int argc, char **argv, char **out, int *outc);

/* ---- cli_up.c helpers ---- */
/* "http://h:p/x" -> "h:p" (port 8080 when absent). RET 0 or HF_EINVAL. */
int cli_up_listen_from_url(const char *url, char *out, size_t size);
/* "h:p" -> "http://h:p" (0.0.0.0 shown as 127.0.0.1). RET 0 or HF_EINVAL. */
int cli_up_url_from_listen(const char *listen, char *out, size_t size);

/* ---- cli_api.c: HTTP with error reporting ---- */

/* Send a request; on any failure print a one-line reason to ctx->err and
 * return the exit code (CLI_UNREACHABLE with the URL and a hint, CLI_NOTFOUND
 * for 404, ...). On success *resp holds the JSON body (caller decrefs). */
int cli_api(cli_ctx *ctx, const char *method, const char *path, const json_t *body,
            json_t **resp);
/* The exit code for an HTTP status (2xx -> CLI_OK). */
int cli_exit_for_status(long status);

/* ---- subcommands (cli_cmds.c, cli_watch.c, cli_up.c, cli_complete.c) ---- */
int cli_cmd_submit(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_ls(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_show(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_watch(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_logs(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_kill(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_pause(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_resume(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_agents(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_export(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_up(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_completion(cli_ctx *ctx, int argc, char **argv);

/* Trials (the array of GET .../trials) as CSV: fixed columns, then hp.<name>
 * for every hyperparameter and best.<metric> for every metric seen in any
 * trial. RET 0 or HF_ETOOBIG (a row over 1 MiB). */
int cli_export_csv(FILE *out, const json_t *trials);
/* The watch status line without the elapsed time (with_bar adds the bar). */
int cli_watch_line(char *buf, size_t size, const json_t *exp, int with_bar);

/* The line redrawn on a terminal: bar sized to cols, counts, best, elapsed. */
int cli_watch_tty_line(char *buf, size_t size, const json_t *exp, int64_t elapsed_ms, int cols);

/* Watch an experiment until it ends (shared by watch and submit --watch). */
int cli_watch_experiment(cli_ctx *ctx, int64_t exp_id);

/* Names of all subcommands, NULL-terminated (completion, help). */
extern const char *const cli_command_names[];

#endif
