/*
 * logsearch.h — searching captured trial logs for a fixed string or a
 * regular expression in POSIX ERE syntax, matched by PCRE2 (GET
 * /trials/{id}/logs?grep= and GET /experiments/{id}/logs?grep=,
 * docs/protocol.md "Log search"). The HTTP server runs searches on the
 * search pool (logpool.h), never on its own threads.
 *
 * The match runs inside SQLite, as an application function on a pooled
 * read-only connection (store_reader_get), so rows that do not match never
 * leave the pager: a scan of the whole experiment in rowid (seq) order,
 * answered oldest first. Bounds: the pattern is at most LOGSEARCH_MAX_PAT
 * bytes, at most LOGSEARCH_MAX_LIMIT matches per answer, and one answer
 * scans for at most LOGSEARCH_BUDGET_MS; an answer cut by the limit or the
 * time budget says "truncated": true and "next" (the last seq scanned) to
 * continue with after=next. One line's match costs at most
 * LOGSEARCH_MATCH_LIMIT backtracking steps (PCRE2's match limit; depth,
 * heap and JIT stack bounded too); constructs that are no regular
 * language (back-references, recursion, lookaround...) are refused when
 * the pattern is compiled.
 */
#ifndef HF_LOGSEARCH_H
#define HF_LOGSEARCH_H

#include "hf_json.h"
#include "scheduler/store/store.h"

#include <stdint.h>

#define LOGSEARCH_MAX_PAT   256
#define LOGSEARCH_MATCH_LIMIT 1000000      /* PCRE2 match limit: steps per line */
#define LOGSEARCH_DEPTH_LIMIT 10000        /* PCRE2 depth limit (the interpreter) */
#define LOGSEARCH_HEAP_LIMIT_KIB 16384     /* PCRE2 heap limit (the interpreter's backtracking frames) */
#define LOGSEARCH_JIT_STACK (1 << 20)      /* bytes of JIT stack per pattern */
#define LOGSEARCH_MAX_LIMIT 10000
#define LOGSEARCH_DEFAULT_LIMIT 1000
#define LOGSEARCH_BUDGET_MS 10000

typedef struct logsearch_pat logsearch_pat;

/* Compile a pattern.
 * IN  pat (NUL-terminated, what ?grep= gave), regex (1: POSIX ERE, 0: a
 *     fixed string), icase (1: ignore ASCII case).
 * OUT *out (free with logsearch_pat_free).
 * RET 0, or HF_EINVAL with e naming "grep" (empty, longer than
 *     LOGSEARCH_MAX_PAT, a control byte, a refused construct named with
 *     its byte offset, or the regex compiler's message), HF_ENOMEM. */
int  logsearch_compile(const char *pat, int regex, int icase, logsearch_pat **out, hf_jerr *e);
void logsearch_pat_free(logsearch_pat *p);
/* The literal every match contains, used to ask the trigram index
 * (schema/0009_insight.sql) for candidate rows; "" when none is known. */
const char *logsearch_needle(const logsearch_pat *p);
/* Does line[0..len) match? RET 1, 0, or HF_ETOOBIG when the match
 * reached a limit (undecided). Uses p's match data: one thread at a time. */
int  logsearch_match(const logsearch_pat *p, const char *line, size_t len);

/* One search: where, from where, how many, until when, and whether the
 * caller still wants it. */
typedef struct logsearch_query {
    int64_t trial_id;     /* > 0: this trial's logs */
    int64_t exp_id;       /* trial_id 0: every trial of this experiment */
    int64_t after, limit; /* seq > after; at most limit matches */
    int64_t deadline_ms;  /* hf_mono_ms() at which the scan stops (truncated); 0: LOGSEARCH_BUDGET_MS from now */
    int   (*stop)(void *arg);   /* NULL, or called between rows (often, cheap): nonzero ends the search */
    void   *stop_arg;
} logsearch_query;

/* Matches among the logs of one trial (q->trial_id > 0) or of every trial
 * of experiment q->exp_id, with seq > q->after, oldest first, at most
 * q->limit. *out = {"logs": [{seq, trial_id, stream, line, time}...],
 * "next": seq, "truncated": bool, "scanned": rows the pattern was tried
 * on, "indexed": whether the trigram index chose the rows, "ms"}. The scan
 * stops within one line's match of q->deadline_ms or of q->stop saying so.
 * RET 0; HF_ETOOBIG with e naming "grep" and the line's seq (a line
 * reached the match limit); HF_ECONN (q->stop ended it: no answer);
 * HF_EDB / HF_ENOMEM. */
int  logsearch_run(store *st, const logsearch_pat *p, const logsearch_query *q, json_t **out, hf_jerr *e);

#endif
