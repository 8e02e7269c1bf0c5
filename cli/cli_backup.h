/*
 * cli_backup.h — `hyperfarm backup DIR` (docs/cli.md "backup"): ask the
 * scheduler for an online snapshot into DIR, a directory on the
 * scheduler's own server.
 */
#ifndef HF_CLI_BACKUP_H
#define HF_CLI_BACKUP_H

#include "cli.h"

/* POST /api/v1/backups {"dir": DIR}, poll GET /api/v1/backups/{id} until
 * it is done, and print the snapshot's path (--json: the final answer).
 * RET a CLI exit code (1 when the backup failed, with its reason). */
int cli_cmd_backup(cli_ctx *ctx, int argc, char **argv);

#endif
