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

#include "hf_buf.h"
#include "hf_http.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

enum cli_exit {
    CLI_OK          = 0,  /* success */
    CLI_ERR         = 1,  /* any other failure (server error, I/O, experiment ended CANCELED or FAILED in watch) */
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
    int         all;        /* ls --all: archived experiments too */
    int64_t     step;       /* download --step N (-1 = the newest) */
    int         best;       /* download --best: the checkpoint that scored the objective */
    const char *output;     /* download -o/--output DIR */
    int         yes;        /* delete --yes */
    const char *tag;        /* ls --tag T */
    int64_t     add_trials; /* extend --add-trials K */
    int64_t     max_trials; /* extend --max-trials N */
    const char *grep;       /* logs --grep PATTERN */
    const char *experiment; /* logs --experiment EXP (search every trial's logs) */
    int         regex;      /* logs --regex: PATTERN is a POSIX extended regex */
    int         icase;      /* logs --ignore-case */
    int64_t     limit;      /* logs --limit N matches (0 = all) */
    const char *objective;  /* importance --objective METRIC (default: the first) */
    /* up */
    const char *listen;     /* up --listen ADDR:PORT */
    const char *db;         /* up --db PATH */
    const char *workdir;    /* up --workdir DIR */
    const char *web;        /* up --web DIR */
    int64_t     slots;      /* up --slots N */
    /* submit --context */
    const char *context;    /* submit --context DIR: ship DIR as the trials' code */
    int64_t     max_context_mb; /* submit --max-context-mb */
    /* webhooks add (--experiment is logs' experiment above) */
    const char *events;     /* --events LIST: comma-separated filters */
    const char *format;     /* --format json|slack */
    const char *secret;     /* --secret S (default: the scheduler makes one) */
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

/* The words of `webhooks`: none or "list", "add URL", "test ID", "delete
 * ID". Sets verb, and *url or *id for the verbs that take one.
 * RET 0, or HF_EINVAL naming what is wrong in err. */
int cli_webhook_args(int argc, char **argv, char *verb, size_t verblen, int64_t *id, const char **url,
                     char *err, size_t errlen);
/* "trial.FAILED, experiment.*" -> a JSON array of the filters (new
 * reference; the scheduler judges their names). RET 0, or HF_EINVAL (an
 * empty or over-long filter, or none) with err. */
int cli_webhook_events(const char *list, json_t **out, char *err, size_t errlen);

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
/* A request that got no answer (rc, err from hf_http): print the reason
 * (with the unreachable hint). RET the exit code. */
int cli_transport_error(cli_ctx *ctx, int rc, const char *err);
/* An answer (status, r: its JSON body, taken): *resp = r on 2xx, else the
 * error printed as cli_api does. RET the exit code. */
int cli_api_answer(cli_ctx *ctx, const char *method, const char *path, long status, json_t *r, json_t **resp);
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
/* cli_webhooks.c: webhooks [list] | add URL | test ID | delete ID. */
int cli_cmd_webhooks(cli_ctx *ctx, int argc, char **argv);
/* cli_ckpt.c: checkpoints TRIAL, download TRIAL, archive EXP, delete EXP. */
int cli_cmd_checkpoints(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_download(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_archive(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_delete(cli_ctx *ctx, int argc, char **argv);
/* The workflow commands (cli_flow.c, docs/cli.md): extend, fork, tag, note, describe. */
int cli_cmd_extend(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_fork(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_tag(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_note(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_describe(cli_ctx *ctx, int argc, char **argv);

/* Shared by the commands (cli_io.c, which calls no command): --json output, a whole file or
 * stdin ("-") into b (bounded by b's limit). RET a cli_exit code. */
void cli_print_json(cli_ctx *ctx, const json_t *v);
/* "error: 'S' is not an experiment/a trial id ..." (what "experiment" or
 * "trial"); RET CLI_USAGE. */
int  cli_bad_id(cli_ctx *ctx, const char *what, const char *s);
int  cli_read_file(cli_ctx *ctx, const char *path, hf_buf *b);
/* The JSON object in file path ("-" = stdin) into *doc (syntax only; the
 * scheduler validates). RET a cli_exit code; an error is printed. */
int  cli_read_json(cli_ctx *ctx, const char *path, json_t **doc);
/* For ls and show: s percent-encoded for a query string into out (cut at
 * size; cli_io.c); then, in cli_flow.c, the experiment's events (NULL when
 * they cannot be had) and the show lines for description, tags, parent, submitter, warm
 * start and the events users caused. */
void    cli_query_escape(char *out, size_t size, const char *s);
json_t *cli_exp_events(cli_ctx *ctx, int64_t id);
void    cli_show_workflow(cli_ctx *ctx, const json_t *exp, const json_t *events);
/* "+a -b c" -> add [a, c], remove [b] (a JSON array each, new references).
 * RET 0, or HF_EINVAL naming the bad word in err. */
int cli_tag_args(int argc, char **argv, json_t **add, json_t **remove, char *err, size_t errlen);

/* ---- cli_insight.c: importance, compare, logs --grep (issue 17) ---- */
int cli_cmd_importance(cli_ctx *ctx, int argc, char **argv);
int cli_cmd_compare(cli_ctx *ctx, int argc, char **argv);
/* logs with --grep or --experiment (cli_cmd_logs hands over). */
int cli_logs_grep(cli_ctx *ctx, int argc, char **argv);
/* A horizontal bar of v in [0,1] over width cells (UTF-8 eighth blocks).
 * RET 0 or HF_ETOOBIG / HF_EINVAL. */
int cli_importance_bar(char *buf, size_t size, double v, int width);
/* Percent-encode s for a query string (unreserved characters kept). RET 0 or HF_ETOOBIG. */
int cli_url_escape(char *out, size_t size, const char *s);
#define CLI_COMPARE_MAX 22   /* trials side by side: CLI_TABLE_MAX_COLS less a marker and a label column */
struct cli_table;
/* The comparison table of n trial objects (GET /trials/{id}): a row per
 * field, hyperparameter (hp.*), best and latest metric, a '*' in the
 * first column where the trials differ. heads[n] hold the column titles
 * and must outlive t. RET 0, HF_EINVAL (n outside 1..CLI_COMPARE_MAX),
 * HF_ETOOBIG. */
int cli_compare_table(struct cli_table *t, json_t *const *tr, size_t n, char (*heads)[32]);

/* Trials (the array of GET .../trials) as CSV: fixed columns, with a list
 * objective (exp's "objectives"; exp may be NULL) objective.<metric> for each
 * (the first: the trial's objective, the others their last value), then
 * hp.<name> for every hyperparameter and best.<metric> for every metric seen
 * in any trial. RET 0 or HF_ETOOBIG (a row over 1 MiB). */
int cli_export_csv(FILE *out, const json_t *exp, const json_t *trials);
/* The watch status line without the elapsed time (with_bar adds the bar). */
int cli_watch_line(char *buf, size_t size, const json_t *exp, int with_bar);

/* The line redrawn on a terminal: bar sized to cols, counts, best, elapsed. */
int cli_watch_tty_line(char *buf, size_t size, const json_t *exp, int64_t elapsed_ms, int cols);

/* Watch an experiment until it ends (shared by watch and submit --watch). */
int cli_watch_experiment(cli_ctx *ctx, int64_t exp_id);

/* Names of all subcommands, NULL-terminated (completion, help). */
extern const char *const cli_command_names[];

#endif
