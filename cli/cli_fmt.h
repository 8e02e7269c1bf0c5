/*
 * cli_fmt.h — text rendering for the CLI: aligned tables, tab-separated
 * values, CSV fields, durations, relative times, numbers, hyperparameter
 * summaries and the progress bar of `watch`.
 *
 * Every function writes into a caller-supplied bounded buffer or FILE and
 * never allocates without bound: a table holds at most CLI_TABLE_MAX_COLS
 * columns and keeps its cells in one hf_buf with a hard maximum, so a
 * scheduler that answers with a million trials costs memory proportional
 * to what is shown, not more than CLI_TABLE_MAX_BYTES.
 */
#ifndef HF_CLI_FMT_H
#define HF_CLI_FMT_H

#include "hf_buf.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CLI_TABLE_MAX_COLS  24
#define CLI_TABLE_MAX_BYTES (16u << 20)

enum { CLI_ALIGN_LEFT = 0, CLI_ALIGN_RIGHT = 1 };

typedef struct cli_table {
    int     ncols;
    const char *head[CLI_TABLE_MAX_COLS];
    int     align[CLI_TABLE_MAX_COLS];
    int     maxw[CLI_TABLE_MAX_COLS];   /* truncate cells wider than this (0 = never) */
    size_t  nrows;
    hf_buf  cells;                      /* NUL-separated cells, row-major */
    int     row_open;                   /* cells added to the current row */
    int     overflow;                   /* a cell was dropped: cells hit the bound */
} cli_table;

/* Columns given as header strings (kept as pointers: use literals).
 * RET 0 or HF_EINVAL when there are too many. */
int  cli_table_init(cli_table *t, int ncols, const char *const *headers);
void cli_table_free(cli_table *t);
void cli_table_align(cli_table *t, int col, int align);
void cli_table_maxw(cli_table *t, int col, int width);
/* Append one cell to the current row (the row ends after ncols cells).
 * NULL is shown as "-". RET 0 or HF_ETOOBIG. */
int  cli_table_cell(cli_table *t, const char *s);
int  cli_table_cellf(cli_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print aligned columns separated by two spaces, header first; or with tsv
 * tab-separated cells, no padding, no truncation (a tab or newline inside a
 * cell becomes a space). */
void cli_table_print(const cli_table *t, FILE *f, int tsv);

/* "850ms", "12s", "3m05s", "1h02m", "2d03h". Negative -> "-". */
void cli_fmt_duration(char *buf, size_t size, int64_t ms);
/* Text that users wrote, made safe for a terminal (docs/cli.md "Text from
 * the scheduler"): escape sequences (ESC [ ... / ESC ] ... BEL or ST /
 * ESC x, and their C1 forms U+009B, U+009D, ...) are removed whole, other
 * C1 controls and bidirectional overrides (U+202A-E, U+2066-9) removed, C0
 * controls and DEL become spaces — except newline and tab with
 * CLI_CLEAN_MULTILINE — and bytes that are not UTF-8 become '?'. Reads at
 * most len bytes of text (stops at a NUL; NULL is ""), writes at most
 * size - 1 bytes and a NUL, never splitting a character. RET the length
 * written. */
#define CLI_CLEAN_MULTILINE 1
size_t cli_clean_text(char *buf, size_t size, const char *text, size_t len, int flags);
/* cli_clean_text of all of s, written to f (no length limit). */
void cli_put_text(FILE *f, const char *s, int flags);
/* cli_clean_text of s on one line (newlines and tabs become spaces), cut
 * to size: server text printed outside a table never moves the cursor. */
void cli_fmt_clean(char *buf, size_t size, const char *s);
/* "just now", "5s ago", "3m ago", "2h ago", "3d ago"; t <= 0 -> "-". */
void cli_fmt_ago(char *buf, size_t size, int64_t now_ms, int64_t t_ms);
/* A byte count for people: "512 B", "1.5 KiB", "12.3 MiB", "2.00 GiB"
 * (1024-based; three significant digits from KiB on). Negative -> "-". */
void cli_fmt_bytes(char *buf, size_t size, int64_t bytes);
/* A metric or objective value: up to 4 significant digits, integers plain. */
void cli_fmt_number(char *buf, size_t size, double v);
/* Any JSON scalar as text: numbers through cli_fmt_number, strings as is,
 * null as "-", objects/arrays compact JSON. */
void cli_fmt_json_scalar(char *buf, size_t size, const json_t *v);
/* "lr=0.01 hidden=128 optimizer=adam" from an object; "" for NULL. */
void cli_fmt_hparams(char *buf, size_t size, const json_t *hparams);

/* Counts of an experiment, as in EXP_SUMMARY.counts. */
typedef struct cli_counts {
    int64_t queued, running, completed, failed, stopped, canceled, paused;
} cli_counts;

/* Read EXP_SUMMARY.counts (absent members are 0). */
void    cli_counts_from_json(cli_counts *c, const json_t *counts);
int64_t cli_counts_done(const cli_counts *c);    /* completed + stopped + failed + canceled */
/* "[#########>>>.........]": width cells between the brackets; '#' done,
 * '>' running, '.' the rest of total (total <= 0: the sum of the counts). */
void cli_fmt_bar(char *buf, size_t size, const cli_counts *c, int64_t total, int width);

/* Append s to b as one CSV field (RFC 4180: quoted when it holds a comma,
 * quote, CR or LF; quotes doubled). RET 0 or HF_ETOOBIG. */
int cli_csv_field(hf_buf *b, const char *s);

#endif
