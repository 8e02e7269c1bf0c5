/*
 * cli_main.c — the CLI's command table, option parsing and dispatch.
 *
 * One table row per subcommand: its synopsis, what it does, examples, and
 * the options it takes beyond the global ones. Options are parsed with
 * common/hf_config (flags, then environment, then defaults), so every
 * command has the same --url/--token/--ca-file/--json/--tsv behaviour and
 * a --help generated from the same table that parses it.
 */
#include "cli.h"
#include "cli_backup.h"
#include "cli_repl.h"
#include "hf_config.h"
#include "hf_err.h"
#include "hf_follow.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CLI_VERSION "0.1"

typedef int (*cli_fn)(cli_ctx *ctx, int argc, char **argv);

/* Which command-specific options a command takes. */
enum {
    OPT_FOLLOW = 1 << 0, OPT_CSV = 1 << 1, OPT_WATCH = 1 << 2, OPT_INTERVAL = 1 << 3,
    OPT_TAIL = 1 << 4, OPT_PLAIN = 1 << 5, OPT_UP = 1 << 6, OPT_NOHTTP = 1 << 7,
    OPT_DOWNLOAD = 1 << 8, OPT_YES = 1 << 9, OPT_ALL = 1 << 10, OPT_TAG = 1 << 11, OPT_EXTEND = 1 << 12,
    OPT_CONTEXT = 1 << 13, OPT_GREP = 1 << 14, OPT_WEBHOOK = 1 << 15, OPT_OBJECTIVE = 1 << 16
};

typedef struct cli_command {
    const char *name;
    cli_fn      fn;
    int         opts;
    int         npos_min, npos_max;
    const char *synopsis;
    const char *about;
    const char *examples;
} cli_command;

static const cli_command commands[] = {
    {"up", cli_cmd_up, OPT_UP | OPT_NOHTTP, 0, 0,
     "hyperfarm up [--listen ADDR:PORT] [--db PATH] [--slots N] [--workdir DIR]",
     "Start a scheduler and one local agent (a farm on this laptop), print the\n"
     "dashboard URL, and stay in the foreground until Ctrl-C, which stops both.\n"
     "Their logs go to one file beside the database (hyperfarm.db -> hyperfarm.log),\n"
     "the agent's work folder is hyperfarm-work beside it too (unless --workdir).",
     "  hyperfarm up\n  hyperfarm up --listen 127.0.0.1:9090 --db /tmp/farm.db --slots 2\n"},
    {"submit", cli_cmd_submit, OPT_WATCH | OPT_INTERVAL | OPT_PLAIN | OPT_CONTEXT, 1, 1,
     "hyperfarm submit FILE|- [--watch] [--context DIR [--max-context-mb N]]",
     "Submit an experiment file (docs/guide.md, experiments/; '-' reads stdin). Prints the new\n"
     "experiment's id on stdout. An invalid file is reported with the offending\n"
     "field path and exit code 2; nothing is stored.\n"
     "With --context DIR, DIR (minus what DIR/.hyperfarmignore excludes) is packed,\n"
     "uploaded once (skipped when the scheduler has it) and every trial starts in an\n"
     "unpacked copy of it, so \"command\": [\"python3\", \"train.py\"] runs on any agent.",
     "  hyperfarm submit experiments/fmnist-mlp-random.json\n"
     "  id=$(hyperfarm submit sweep.json) && hyperfarm watch $id\n"
     "  hyperfarm submit sweep.json --watch\n"
     "  hyperfarm submit sweep.json --context . --watch\n"},
    {"ls", cli_cmd_ls, OPT_ALL | OPT_TAG, 0, 0,
     "hyperfarm ls [--all] [--tag T] [--json|--tsv]",
     "List experiments: id, name, state, searcher, progress, best objective\n"
     "(--all: archived ones too; --tag T: only those tagged T).",
     "  hyperfarm ls\n  hyperfarm ls --tag baseline\n"
     "  hyperfarm ls --json | jq '.experiments[] | select(.state==\"ACTIVE\") | .id'\n"},
    {"show", cli_cmd_show, 0, 1, 1,
     "hyperfarm show EXP [--json|--tsv]",
     "Show one experiment: summary, every trial with its hyperparameters, state,\n"
     "agent and objective, and the best trial.",
     "  hyperfarm show 3\n  hyperfarm show e3 --tsv | cut -f1,2,7\n"},
    {"watch", cli_cmd_watch, OPT_INTERVAL | OPT_PLAIN, 1, 1,
     "hyperfarm watch EXP [--interval-ms N] [--plain]",
     "Follow an experiment until it ends: a progress bar of done/running/queued/\n"
     "failed trials, the best objective so far and the elapsed time. Redraws in\n"
     "place on a terminal, prints one line per change otherwise. Exit code 0 when\n"
     "the experiment COMPLETED, 1 when it was CANCELED.",
     "  hyperfarm watch 3\n  hyperfarm watch 3 --plain > progress.txt\n"},
    {"logs", cli_cmd_logs, OPT_FOLLOW | OPT_INTERVAL | OPT_TAIL | OPT_GREP, 0, 1,
     "hyperfarm logs TRIAL [-f|--follow] [--tail N] | logs TRIAL|--experiment EXP --grep PATTERN [--regex] [-i]",
     "Print a trial's captured stdout/stderr. With -f keep printing new lines\n"
     "until the trial ends. With --grep print only the lines that contain PATTERN\n"
     "(--regex: a POSIX extended regular expression; -i/--ignore-case), of one\n"
     "trial or, with --experiment, of every trial of an experiment (prefixed tN:).",
     "  hyperfarm logs 17\n  hyperfarm logs t17 -f\n  hyperfarm logs 17 --tail 20\n"
     "  hyperfarm logs --experiment 3 --grep 'loss is NaN'\n"
     "  hyperfarm logs t17 --grep 'lr=0\\.0+1' --regex -i\n"},
    {"kill", cli_cmd_kill, 0, 1, 2,
     "hyperfarm kill exp N | kill trial N | kill eN | kill tN",
     "Cancel an experiment (all its trials) or one trial. A bare number is\n"
     "refused because experiment and trial ids overlap.",
     "  hyperfarm kill trial 17\n  hyperfarm kill exp 3\n  hyperfarm kill t17\n"},
    {"pause", cli_cmd_pause, 0, 1, 1,
     "hyperfarm pause EXP",
     "Pause an experiment: no new trials are placed, running ones are stopped\n"
     "(with a checkpoint) and requeued as PAUSED.",
     "  hyperfarm pause 3\n"},
    {"resume", cli_cmd_resume, 0, 1, 1,
     "hyperfarm resume EXP",
     "Resume a paused experiment (exit 6 when it is already ACTIVE).",
     "  hyperfarm resume 3\n"},
    {"agents", cli_cmd_agents, 0, 0, 0,
     "hyperfarm agents [--json|--tsv]",
     "List agents: name, state, slots, GPUs, running trials, last heartbeat.",
     "  hyperfarm agents\n"},
    {"export", cli_cmd_export, OPT_CSV, 1, 1,
     "hyperfarm export EXP --csv|--json",
     "Export every trial of an experiment with its hyperparameters and best\n"
     "metrics, as CSV (one column per hyperparameter and metric) or JSON.",
     "  hyperfarm export 3 --csv > sweep3.csv\n  hyperfarm export 3 --json | jq '.trials | length'\n"},
    {"checkpoints", cli_cmd_checkpoints, 0, 1, 1,
     "hyperfarm checkpoints TRIAL [--json|--tsv]",
     "List a trial's checkpoints kept by the scheduler's store: step, size, SHA-256\n"
     "(short), attempt, when it was stored and the agent that uploaded it.",
     "  hyperfarm checkpoints 17\n  hyperfarm checkpoints t17 --json | jq '.checkpoints[-1].sha256'\n"},
    {"download", cli_cmd_download, OPT_DOWNLOAD, 1, 1,
     "hyperfarm download TRIAL [--step N | --best] -o DIR",
     "Download a trial's newest checkpoint (the one at step N, or with --best the\n"
     "one that scored the trial's objective) into DIR, streamed to a temp file,\n"
     "SHA-256 verified, then renamed; a progress bar on a terminal. Exit code 3\n"
     "when the trial has no such checkpoint.",
     "  hyperfarm download 17 --best -o ./best\n  hyperfarm download t17 --step 120 -o /tmp/ck\n"},
    {"archive", cli_cmd_archive, 0, 1, 1,
     "hyperfarm archive EXP",
     "Archive an ended (or paused) experiment: its summary and trials stay, all\n"
     "its checkpoints are deleted, and it is hidden from 'ls' (shown by 'ls --all').",
     "  hyperfarm archive 3\n"},
    {"delete", cli_cmd_delete, OPT_YES, 1, 1,
     "hyperfarm delete EXP --yes",
     "Delete an ended (or paused) experiment with its trials, metrics, logs,\n"
     "events and checkpoints. Needs --yes. Exit code 6 while it still runs.",
     "  hyperfarm delete 3 --yes\n"},
    {"extend", cli_cmd_extend, OPT_EXTEND, 1, 1,
     "hyperfarm extend EXP --add-trials K | --max-trials N",
     "Continue an experiment with more trials: K more, or up to N in all. A\n"
     "COMPLETED experiment becomes ACTIVE again and its searcher goes on.",
     "  hyperfarm extend 3 --add-trials 20\n  hyperfarm extend e3 --max-trials 100\n"},
    {"fork", cli_cmd_fork, 0, 2, 2,
     "hyperfarm fork EXP EDITED.json|-",
     "Submit an edited copy of an experiment's file as a new experiment that\n"
     "records EXP as its parent. Prints the new id. Get the file to edit with\n"
     "hyperfarm show EXP --json | jq .experiment.config.",
     "  hyperfarm show 3 --json | jq '.experiment.config | .searcher.max_trials = 50' > f.json\n"
     "  hyperfarm fork 3 f.json\n"},
    {"tag", cli_cmd_tag, 0, 1, 1 + 64,
     "hyperfarm tag EXP +TAG|-TAG|TAG ...",
     "Add (+TAG or TAG) and remove (-TAG) tags of an experiment; prints its tags.\n"
     "A tag is 1..64 characters of A-Z a-z 0-9 _ . : / = + -.",
     "  hyperfarm tag 3 +baseline -draft\n  hyperfarm ls --tag baseline\n"},
    {"note", cli_cmd_note, 0, 2, 2,
     "hyperfarm note TRIAL TEXT|-",
     "Set a trial's notes (Markdown; '-' reads them from stdin; \"\" clears them).",
     "  hyperfarm note t17 'diverged after epoch 3: lr too high'\n  hyperfarm note 17 - < notes.md\n"},
    {"describe", cli_cmd_describe, 0, 2, 2,
     "hyperfarm describe EXP TEXT|-",
     "Set an experiment's description (Markdown; '-' reads stdin; \"\" clears it).",
     "  hyperfarm describe 3 'Baseline: **Adam**, cosine schedule'\n  hyperfarm describe 3 - < README.md\n"},
    {"importance", cli_cmd_importance, OPT_OBJECTIVE, 1, 1,
     "hyperfarm importance EXP [--objective METRIC] [--json|--tsv]",
     "Which hyperparameters mattered: fANOVA importance over the experiment's\n"
     "completed trials (as Optuna's FanovaImportanceEvaluator), largest first,\n"
     "as bars that sum to 1; ranked by the first objective, or by METRIC, another\n"
     "objective of a list.",
     "  hyperfarm importance 3\n  hyperfarm importance 3 --tsv | head -2\n"
     "  hyperfarm importance 4 --objective latency\n"},
    {"compare", cli_cmd_compare, 0, 2, CLI_COMPARE_MAX,
     "hyperfarm compare T1 T2 [T3...] [--json|--tsv]",
     "Trials side by side: state, objective, every hyperparameter, best and latest\n"
     "metric; rows where the trials differ are marked with '*'.",
     "  hyperfarm compare 17 21\n  hyperfarm compare t3 t4 t9 --tsv\n"},
    {"webhooks", cli_cmd_webhooks, OPT_WEBHOOK, 0, 2,
     "hyperfarm webhooks [list] | add URL [--experiment EXP] [--events F,F] [--format json|slack] [--secret S]"
     " | test ID | delete ID",
     "Webhooks on experiment and trial state changes (docs/api.md \"Roles\" says who\n"
     "may do what): list them with their deliveries; add one (all experiments, or\n"
     "one with --experiment; --events filters such as trial.FAILED,experiment.*;\n"
     "prints its id, and on stderr the signing secret when the scheduler made it);\n"
     "test one (a webhook.test delivery through the real outbox); delete one.",
     "  hyperfarm webhooks add https://hooks.example.com/hf --events 'experiment.*,trial.FAILED'\n"
     "  hyperfarm webhooks add https://hooks.slack.com/services/T/B/X --format slack --experiment 3\n"
     "  hyperfarm webhooks\n  hyperfarm webhooks test 1\n  hyperfarm webhooks delete 1\n"},
    {"backup", cli_cmd_backup, 0, 1, 1,
     "hyperfarm backup DIR [--json]",
     "Take an online snapshot of the scheduler's database and checkpoint store into\n"
     "DIR/hf-<time>, while sweeps run (admin token only). DIR is a directory on the\n"
     "SCHEDULER's server (e.g. a mounted backup disk), not on this machine: an\n"
     "absolute path that exists there and is not the live database's directory.\n"
     "Objects an earlier snapshot in DIR holds are linked, not copied. Prints the\n"
     "snapshot's path when it is done; restore it with hyperfarm-scheduler --restore\n"
     "(docs/operations.md).",
     "  hyperfarm backup /mnt/backup/hyperfarm\n"
     "  hyperfarm backup /mnt/backup/hyperfarm --json | jq .duration_ms\n"},
    {"replication", cli_cmd_replication, 0, 0, 0,
     "hyperfarm replication [--json]",
     "Show the scheduler's replication status (docs/scheduler.md, standby): its role\n"
     "(primary, standby or fenced), term, last committed lsn, state (none,\n"
     "catching_up, sync, async, degraded) and the standby's lag. With several URLs\n"
     "(--url A,B) every scheduler's status, one section each.",
     "  hyperfarm replication\n"
     "  hyperfarm --url http://sched-a:8080,http://sched-b:8080 replication --json\n"},
    {"promote", cli_cmd_promote, 0, 0, 0,
     "hyperfarm promote [--url STANDBY]",
     "Promote a standby scheduler to primary now (admin token only), then wait until\n"
     "it answers as the primary of the new term. With several URLs, the first that\n"
     "says it is a standby. A primary refuses (exit 6).",
     "  hyperfarm promote --url http://sched-b:8080\n"
     "  HYPERFARM_URL=http://sched-a:8080,http://sched-b:8080 hyperfarm promote\n"},
    {"completion", cli_cmd_completion, OPT_NOHTTP, 1, 1,
     "hyperfarm completion bash",
     "Print a bash completion script.",
     "  source <(hyperfarm completion bash)\n"
     "  hyperfarm completion bash > /etc/bash_completion.d/hyperfarm\n"},
    {NULL, NULL, 0, 0, 0, NULL, NULL, NULL}
};

const char *const cli_command_names[] = {
    "up", "submit", "ls", "show", "watch", "logs", "kill", "pause", "resume",
    "agents", "export", "checkpoints", "download", "archive", "delete", "extend", "fork", "tag", "note", "describe",
    "importance", "compare", "webhooks", "backup", "replication", "promote", "completion", "help", "version", NULL
};

static const cli_command *find_command(const char *name)
{
    for (const cli_command *c = commands; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

/* Build the option table of one command into opts (capacity 24). */
static void build_opts(hf_cfg_opt *opts, cli_opts *o, int which)
{
    int n = 0;
#define ADD(...) opts[n++] = (hf_cfg_opt){__VA_ARGS__}
    if (!(which & OPT_NOHTTP) || (which & OPT_UP)) {
        ADD("url", "HYPERFARM_URL", HF_CFG_STR, &o->url, CLI_DEFAULT_URL, 0, -1,
            "scheduler URL, or a comma-separated list: a primary and its standby (writes follow the primary)");
        ADD("token", "HYPERFARM_TOKEN", HF_CFG_STR, &o->token, NULL, 0, -1,
            "user token (Authorization: Bearer)");
        ADD("ca-file", "HYPERFARM_CA_FILE", HF_CFG_STR, &o->ca_file, NULL, 0, -1,
            "CA bundle to verify an https:// scheduler");
        ADD("timeout-ms", NULL, HF_CFG_INT, &o->timeout_ms, "10000", 100, 600000,
            "per-request timeout");
    }
    if (!(which & OPT_NOHTTP)) {
        ADD("json", NULL, HF_CFG_BOOL, &o->json, "false", 0, -1, "print JSON (for scripts)");
        ADD("tsv", NULL, HF_CFG_BOOL, &o->tsv, "false", 0, -1, "print tab-separated values with a header");
    }
    if (which & OPT_FOLLOW)
        ADD("follow", NULL, HF_CFG_BOOL, &o->follow, "false", 0, -1, "(-f) keep printing until the trial ends");
    if (which & OPT_TAIL)
        ADD("tail", NULL, HF_CFG_INT, &o->tail, "0", 0, 1000000, "print only the last N lines (0 = all)");
    if (which & OPT_GREP) {
        ADD("grep", NULL, HF_CFG_STR, &o->grep, NULL, 0, -1, "print only lines containing PATTERN");
        ADD("experiment", NULL, HF_CFG_STR, &o->experiment, NULL, 0, -1, "search every trial of experiment EXP");
        ADD("regex", NULL, HF_CFG_BOOL, &o->regex, "false", 0, -1, "PATTERN is a POSIX extended regex");
        ADD("ignore-case", NULL, HF_CFG_BOOL, &o->icase, "false", 0, -1, "(-i) ignore ASCII case");
        ADD("limit", NULL, HF_CFG_INT, &o->limit, "0", 0, 100000000, "print at most N matches (0 = all)");
    }
    if (which & OPT_OBJECTIVE)
        ADD("objective", NULL, HF_CFG_STR, &o->objective, NULL, 0, -1,
            "rank by this objective of a list (default: the first)");
    if (which & OPT_CSV)
        ADD("csv", NULL, HF_CFG_BOOL, &o->csv, "false", 0, -1, "CSV output");
    if (which & OPT_WATCH)
        ADD("watch", NULL, HF_CFG_BOOL, &o->watch, "false", 0, -1, "then watch it until it ends");
    if (which & OPT_INTERVAL)
        ADD("interval-ms", NULL, HF_CFG_INT, &o->interval_ms, "1000", 50, 3600000, "poll interval");
    if (which & OPT_TAG)
        ADD("tag", NULL, HF_CFG_STR, &o->tag, NULL, 0, -1, "only experiments with this tag");
    if (which & OPT_EXTEND) {
        ADD("add-trials", NULL, HF_CFG_INT, &o->add_trials, "0", 0, 1000000, "this many more trials");
        ADD("max-trials", NULL, HF_CFG_INT, &o->max_trials, "0", 0, 1000000, "the new total of trials");
    }
    if (which & OPT_PLAIN)
        ADD("plain", NULL, HF_CFG_BOOL, &o->plain, "false", 0, -1, "one line per change, never redraw");
    if (which & OPT_ALL)
        ADD("all", NULL, HF_CFG_BOOL, &o->all, "false", 0, -1, "archived experiments too");
    if (which & OPT_DOWNLOAD) {
        ADD("step", NULL, HF_CFG_INT, &o->step, "-1", -1, INT64_MAX, "the checkpoint at this step (default: the newest)");
        ADD("best", NULL, HF_CFG_BOOL, &o->best, "false", 0, -1, "the checkpoint that scored the trial's objective");
        ADD("output", NULL, HF_CFG_STR, &o->output, NULL, 0, -1, "(-o) folder to write the checkpoint into");
    }
    if (which & OPT_YES)
        ADD("yes", NULL, HF_CFG_BOOL, &o->yes, "false", 0, -1, "confirm: delete for good");
    if (which & OPT_CONTEXT) {
        ADD("context", NULL, HF_CFG_STR, &o->context, NULL, 0, -1,
            "pack DIR (minus DIR/.hyperfarmignore) as the trials' code and set \"context\"");
        ADD("max-context-mb", NULL, HF_CFG_INT, &o->max_context_mb, "64", 1, 1024,
            "refuse a context whose files add up to more MiB");
    }
    if (which & OPT_WEBHOOK) {
        ADD("experiment", NULL, HF_CFG_STR, &o->experiment, NULL, 0, -1, "add: only this experiment's changes");
        ADD("events", NULL, HF_CFG_STR, &o->events, "*", 0, -1,
            "add: comma-separated filters (*, experiment.*, trial.FAILED, ...)");
        ADD("format", NULL, HF_CFG_STR, &o->format, "json", 0, -1, "add: json or slack");
        ADD("secret", NULL, HF_CFG_STR, &o->secret, NULL, 0, -1,
            "add: the HMAC signing secret (default: the scheduler makes one)");
    }
    if (which & OPT_UP) {
        ADD("listen", NULL, HF_CFG_STR, &o->listen, NULL, 0, -1,
            "scheduler address (default: host:port of --url)");
        ADD("db", NULL, HF_CFG_STR, &o->db, "hyperfarm.db", 0, -1, "SQLite database file");
        ADD("slots", NULL, HF_CFG_INT, &o->slots, "0", 0, 4096, "agent slots (0 = number of CPUs)");
        ADD("workdir", NULL, HF_CFG_STR, &o->workdir, NULL, 0, -1,
            "agent work directory (default hyperfarm-work next to the db)");
        ADD("web", NULL, HF_CFG_STR, &o->web, NULL, 0, -1, "dashboard directory (default: found next to the programs)");
    }
#undef ADD
    opts[n] = (hf_cfg_opt)HF_CFG_END;
}

static void print_command_help(FILE *f, const cli_command *c, cli_opts *o)
{
    hf_cfg_opt opts[24];
    build_opts(opts, o, c->opts);
    hf_config_usage(f, c->synopsis, opts);
    fprintf(f, "\n%s\n\nexamples:\n%s", c->about, c->examples);
}

static void print_help(FILE *f)
{
    fprintf(f,
        "hyperfarm — client of a hyperfarm scheduler (hyperparameter sweeps)\n\n"
        "usage: hyperfarm [--url URL] [--token T] COMMAND [ARGS] [--json|--tsv]\n\n"
        "commands:\n");
    static const char *const summary[] = {
        "start a scheduler and a local agent (a farm on this machine)",
        "submit an experiment file, print its id",
        "list experiments",
        "one experiment: summary, trials, best trial",
        "follow an experiment live until it ends",
        "print, follow (-f) or search (--grep) logs",
        "cancel an experiment or a trial (kill exp N | kill trial N)",
        "pause an experiment",
        "resume a paused experiment",
        "list agents",
        "export an experiment's trials as CSV or JSON",
        "list a trial's stored checkpoints",
        "download a trial's checkpoint, verified",
        "archive an experiment (drops its checkpoints)",
        "delete an experiment and everything of it",
        "continue an experiment with more trials",
        "a new experiment from an edited copy of one's file",
        "add or remove an experiment's tags",
        "set a trial's notes (Markdown)",
        "set an experiment's description (Markdown)",
        "which hyperparameters mattered (fANOVA importance as bars)",
        "trials side by side, differences marked",
        "list, add, test or delete webhooks",
        "online snapshot of the scheduler's stores (admin)",
        "role, term, LSN and standby lag of each scheduler",
        "promote a standby scheduler to primary (admin)",
        "print a bash completion script",
    };
    /* One summary per row of commands[] (and its NULL end). */
    _Static_assert(sizeof summary / sizeof summary[0] + 1 == sizeof commands / sizeof commands[0],
                   "a command without a summary line");
    int i = 0;
    for (const cli_command *c = commands; c->name; c++, i++)
        fprintf(f, "  %-11s %s\n", c->name, summary[i]);
    fprintf(f,
        "  help CMD    help of one command (same as CMD --help)\n"
        "  version     print the version\n\n"
        "environment: HYPERFARM_URL (default %s), HYPERFARM_TOKEN, HYPERFARM_CA_FILE\n"
        "exit codes: 0 ok, 1 error, 2 bad usage or input, 3 not found,\n"
        "            4 scheduler unreachable, 5 unauthorized, 6 wrong state\n\n"
        "  hyperfarm up                 # a scheduler and an agent on this machine\n"
        "  hyperfarm submit experiments/fmnist-mlp-random.json\n"
        "  hyperfarm watch 1\n",
        CLI_DEFAULT_URL);
}

/* No command, "version" or "help": answer here. RET 1 with *rc when
 * answered, else 0 (vec, *vecc: the split command line). */
static int answer_meta(int argc, char **argv, char **vec, int *vecc, cli_opts *o, FILE *out, FILE *err, int *rc)
{
    const cli_command *c;
    if (cli_split_command(argc, argv, vec, vecc) < 0) {
        int asked = 0;
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--version")) {
                fprintf(out, "hyperfarm %s\n", CLI_VERSION);
                *rc = CLI_OK;
                return 1;
            }
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) asked = 1;
        print_help(asked ? out : err);
        *rc = asked ? CLI_OK : CLI_USAGE;
        return 1;
    }
    if (!strcmp(vec[0], "version")) {
        fprintf(out, "hyperfarm %s\n", CLI_VERSION);
        *rc = CLI_OK;
        return 1;
    }
    if (strcmp(vec[0], "help")) return 0;
    *rc = CLI_USAGE;
    if (*vecc > 1 && (c = find_command(vec[1]))) {
        print_command_help(out, c, o);
        *rc = CLI_OK;
    } else if (*vecc > 1) {
        fprintf(err, "error: unknown command '%s'\n", vec[1]);
    } else {
        print_help(out);
        *rc = CLI_OK;
    }
    return 1;
}

int cli_main(int argc, char **argv, FILE *out, FILE *err)
{
    cli_ctx ctx;
    hf_cfg_opt opts[24];
    char msg[512];
    char **vec = NULL;
    int vecc = 0, npos = 0, rc = CLI_USAGE;
    const cli_command *c;

    memset(&ctx, 0, sizeof ctx);
    ctx.out = out;
    ctx.err = err;
    ctx.out_tty = out == stdout && isatty(STDOUT_FILENO);
    ctx.argv0 = argc > 0 ? argv[0] : "hyperfarm";

    if (!(vec = calloc((size_t)argc + 1, sizeof *vec))) return CLI_ERR;
    if (answer_meta(argc, argv, vec, &vecc, &ctx.o, out, err, &rc)) goto end;
    if (!(c = find_command(vec[0]))) {
        fprintf(err, "error: unknown command '%s' (see 'hyperfarm --help')\n", vec[0]);
        goto end;
    }
    /* Short flags hf_config does not know. */
    for (int i = 1; i < vecc; i++)
        if (!strcmp(vec[i], "-f") && (c->opts & OPT_FOLLOW)) vec[i] = (char *)"--follow";
        else if (!strcmp(vec[i], "-o") && (c->opts & OPT_DOWNLOAD)) vec[i] = (char *)"--output";
        else if (!strcmp(vec[i], "-i") && (c->opts & OPT_GREP)) vec[i] = (char *)"--ignore-case";
    build_opts(opts, &ctx.o, c->opts);
    int prc = hf_config_parse(opts, vecc, vec, &npos, msg, sizeof msg);
    if (prc == 1) {
        print_command_help(out, c, &ctx.o);
        rc = CLI_OK;
        goto end;
    }
    if (prc) {
        fprintf(err, "error: %s\nusage: %s\n", msg, c->synopsis);
        goto end;
    }
    if (npos < c->npos_min || npos > c->npos_max) {
        fprintf(err, "error: %s: expected %s%d argument%s, got %d\nusage: %s\n", c->name,
                c->npos_min == c->npos_max ? "" : "at most ", c->npos_max,
                c->npos_max == 1 ? "" : "s", npos, c->synopsis);
        goto end;
    }
    if (ctx.o.json && ctx.o.tsv) {
        fprintf(err, "error: --json and --tsv exclude each other\n");
        goto end;
    }
    if (!(c->opts & OPT_NOHTTP)) {
        if (hf_follow_is_list(ctx.o.url) ? hf_follow_check(ctx.o.url, msg, sizeof msg) != 0
                                         : strncmp(ctx.o.url, "http://", 7) && strncmp(ctx.o.url, "https://", 8)) {
            if (hf_follow_is_list(ctx.o.url)) fprintf(err, "error: --url '%s': %s\n", ctx.o.url, msg);
            else fprintf(err, "error: scheduler URL '%s' must start with http:// or https://\n", ctx.o.url);
            goto end;
        }
        if (!(ctx.http = hf_http_new(ctx.o.url, ctx.o.token, (long)ctx.o.timeout_ms, 2))) {
            fprintf(err, "error: cannot create the HTTP client\n");
            rc = CLI_ERR;
            goto end;
        }
        if (ctx.o.ca_file) hf_http_set_cafile(ctx.http, ctx.o.ca_file);
    }
    rc = c->fn(&ctx, npos, vec + 1);
    /* Output that did not reach its file (a full disk, a closed pipe) is a
     * failure, not a success (exit 1, docs/cli.md "Exit codes"). */
    if ((fflush(out) || ferror(out)) && rc == CLI_OK) {
        fprintf(err, "error: cannot write the output: %s\n", strerror(errno));
        rc = CLI_ERR;
    }
end:
    hf_http_free(ctx.http);
    free(vec);
    return rc;
}
