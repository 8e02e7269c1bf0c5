/*
 * cli_context.h — packing a directory of user code into a code context
 * (docs/cli.md, "Shipping your code"): the gzip'd tar that
 * `hyperfarm submit EXP --context DIR` uploads and every trial's working
 * directory starts from (docs/agent.md, "Starting a trial").
 *
 * What goes in: every regular file and directory under DIR that
 * DIR/.hyperfarmignore (cli_ignore.h) does not exclude. A symbolic link
 * whose target (resolved) is a regular file inside DIR is packed as a copy
 * of that file; any other link (leaving DIR, dangling, or naming a
 * directory) is an error naming it, since the agent unpacks regular files
 * and directories only; sockets, FIFOs and devices are skipped with a
 * warning.
 *
 * The archive is deterministic: entries in byte order of their names
 * (depth first, a directory before its contents), modification times,
 * owners and group ids zeroed, no user or group names, permissions
 * reduced to 0755 (directories and files with any execute bit) or 0644,
 * no time stamp in the gzip header; the same tree gives the same SHA-256
 * wherever and whenever it is packed, so an unchanged context is uploaded
 * once.
 *
 * It is written to a temp file while its SHA-256 is computed, never held
 * in memory: memory is bounded by the entry list (names and sizes), not
 * by the data.
 */
#ifndef HF_CLI_CONTEXT_H
#define HF_CLI_CONTEXT_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>

#define CLI_CONTEXT_MAX_ENTRIES 100000   /* files and directories (agent_context.h takes as many) */
#define CLI_CONTEXT_MAX_DEPTH   128      /* directory levels below DIR */
#define CLI_CONTEXT_DEFAULT_MB  64       /* --max-context-mb */

typedef struct cli_context_opts {
    int64_t     max_bytes;   /* cap on the total size of the packed files; <= 0: no cap */
    const char *tmpdir;      /* where the archive is written; NULL: $TMPDIR, else /tmp */
    FILE       *progress;    /* a terminal to redraw a progress line on, or NULL */
    FILE       *warn;        /* skipped files are named here (NULL: silent) */
} cli_context_opts;

typedef struct cli_context_result {
    char    path[PATH_MAX];  /* the archive (a temp file: the caller unlinks it) */
    char    sha256[65];      /* lowercase hex SHA-256 of the archive */
    int64_t size;            /* archive bytes */
    int64_t files, dirs;     /* entries packed */
    int64_t bytes;           /* total size of the packed files */
} cli_context_result;

/* Pack dir (see above) into a new temp file.
 * RET 0 with *res; HF_ETOOBIG (above o->max_bytes or CLI_CONTEXT_MAX_ENTRIES:
 *     err names the total and the biggest files; nothing is written);
 *     HF_EINVAL (dir is no directory, a link that cannot be packed, a bad
 *     .hyperfarmignore, a file that changed while being packed);
 *     HF_ENOTFOUND (no dir); HF_EIO; HF_ENOMEM. err says which, naming the path.
 *     On failure no temp file is left. */
int cli_context_pack(const char *dir, const cli_context_opts *o, cli_context_result *res, char *err, size_t errlen);

/* `submit --context DIR`: pack dir (cap max_bytes), HEAD /api/v1/contexts/
 * {sha256} and, unless the scheduler has it, PUT /api/v1/contexts (a
 * progress line on a terminal). Reports on ctx->err; the temp file is
 * removed in every case.
 * RET CLI_OK with sha256 filled, or the exit code (CLI_USAGE for a context
 * refused here, with nothing uploaded; the HTTP mapping of cli_api). */
struct cli_ctx;
int cli_context_ship(struct cli_ctx *ctx, const char *dir, int64_t max_bytes, char sha256[65]);

/* `submit FILE` without --context: a "context" in the file that is not a
 * SHA-256 names a directory, relative to FILE's own directory (to the
 * current one for "-") unless absolute; it is shipped as by --context
 * (cap --max-context-mb) and replaced by its SHA-256 in doc
 * (experiments/README.md, docs/cli.md "Shipping your code").
 * RET CLI_OK (nothing to do, or shipped), CLI_USAGE for a context that is
 * no directory, or cli_context_ship's code. */
int cli_context_from_file(struct cli_ctx *ctx, const char *file, json_t *doc);

#endif
