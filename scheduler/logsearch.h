/*
 * logsearch.h — searching captured trial logs for a fixed string or a
 * POSIX extended regular expression (GET /trials/{id}/logs?grep= and
 * GET /experiments/{id}/logs?grep=, docs/protocol.md "Log search").
 *
 * The match runs inside SQLite, as an application function on a pooled
 * read-only connection (store_reader_get), so rows that do not match never
 * leave the pager: a scan of the whole experiment in rowid (seq) order,
 * answered oldest first. Bounds: the pattern is at most LOGSEARCH_MAX_PAT
 * bytes, at most LOGSEARCH_MAX_LIMIT matches per answer, and one answer
 * scans for at most LOGSEARCH_BUDGET_MS; an answer cut by the limit or the
 * time budget says "truncated": true and "next" (the last seq scanned) to
 * continue with after=next.
 */
#ifndef HF_LOGSEARCH_H
#define HF_LOGSEARCH_H

#include "hf_json.h"
#include "scheduler/store.h"

#include <stdint.h>

#define LOGSEARCH_MAX_PAT   256
#define LOGSEARCH_MAX_LIMIT 10000
#define LOGSEARCH_DEFAULT_LIMIT 1000
#define LOGSEARCH_BUDGET_MS 10000

typedef struct logsearch_pat logsearch_pat;

/* Compile a pattern.
 * IN  pat (NUL-terminated, what ?grep= gave), regex (1: POSIX ERE, 0: a
 *     fixed string), icase (1: ignore ASCII case).
 * OUT *out (free with logsearch_pat_free).
 * RET 0, or HF_EINVAL with e naming "grep" (empty, longer than
 *     LOGSEARCH_MAX_PAT, a control byte, or the regex compiler's message),
 *     HF_ENOMEM. */
int  logsearch_compile(const char *pat, int regex, int icase, logsearch_pat **out, hf_jerr *e);
void logsearch_pat_free(logsearch_pat *p);
/* The literal every match contains, used to ask the trigram index
 * (schema/0009_insight.sql) for candidate rows; "" when none is known. */
const char *logsearch_needle(const logsearch_pat *p);
/* Does line[0..len) match? (pure; tests and fuzzing) */
int  logsearch_match(const logsearch_pat *p, const char *line, size_t len);

/* Matches among the logs of one trial (trial_id > 0) or of every trial of
 * experiment exp_id (trial_id 0), with seq > after, oldest first, at most
 * limit. *out = {"logs": [{seq, trial_id, stream, line, time}...],
 * "next": seq, "truncated": bool, "scanned": rows the pattern was tried
 * on, "indexed": whether the trigram index chose the rows, "ms"}.
 * budget_ms 0 = LOGSEARCH_BUDGET_MS. RET 0 or HF_EDB / HF_ENOMEM. */
int  logsearch_run(store *st, int64_t trial_id, int64_t exp_id, const logsearch_pat *p, int64_t after,
                   int64_t limit, int64_t budget_ms, json_t **out);

#endif
