/*
 * logsearch.c — log search over the store (logsearch.h).
 *
 * The pattern is an application SQL function, hf_grep(seq, line), created
 * on the borrowed reader connection for one query and dropped after it,
 * so only matching rows are turned into JSON. Rows are scanned in seq
 * order (one trial: its (trial_id, seq) index; an experiment: the logs
 * table in rowid order, NOT INDEXED, testing trial membership first), and
 * the function notes the last seq it saw not matching: when the time
 * budget interrupts the scan (a progress handler), every row up to
 * max(that, the last row returned) has been looked at, which is the
 * "next" a client resumes after. Figures: docs/protocol.md "Log search".
 *
 * Regexes are PCRE2 (JIT where the library has it), refusing at compile
 * time what is not a regular language or not POSIX ERE (back-references,
 * recursion, lookaround, callouts, verbs: check_constructs), with match
 * and depth limits and a bounded JIT stack, so one line costs at most
 * LOGSEARCH_MATCH_LIMIT steps: a line that reaches the limit ends the
 * search with HF_ETOOBIG. The time budget and the caller's stop callback
 * are checked before every row and by the progress handler, so a scan
 * stops within one bounded match of its deadline or a cancel.
 */
#include "scheduler/api/logsearch.h"

#include "hf_err.h"
#include "hf_time.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One pattern, used by one thread at a time (the match data and the JIT
 * stack are its own). */
struct logsearch_pat {
    int     regex, icase;
    char    needle[LOGSEARCH_MAX_PAT + 1];   /* a substring every match contains ("" = none known) */
    char   *fixed;      /* fixed string (lowercased when icase) */
    size_t  flen;
    pcre2_code          *re;
    pcre2_match_data    *md;
    pcre2_match_context *mc;
    pcre2_jit_stack     *js;   /* NULL: no JIT (the interpreter, with the depth and heap limits) */
};

/* Keep the longer of the best run so far and run[0..n). */
static void keep_run(char *best, const char *run, size_t n)
{
    if (n > strlen(best)) {
        memcpy(best, run, n);
        best[n] = '\0';
    }
}

/* Past the bracket expression that starts at c ('['): the ']' that ends
 * it, or NULL when it is not closed. A ']' first (after an optional '^')
 * is a member; so is an escaped character; POSIX classes [:alpha:]
 * (and [=x=], [.x.]) end at their own ":]". */
static const char *bracket_end(const char *c)
{
    c++;
    if (*c == '^') c++;
    if (*c == ']') c++;
    for (; *c && *c != ']'; c++) {
        if (*c == '\\' && c[1]) c++;
        else if (*c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) {
            const char *e = c + 2;
            while (*e && !(*e == c[1] && e[1] == ']')) e++;
            if (!*e) return NULL;
            c = e + 1;
        }
    }
    return *c ? c : NULL;
}

/* A literal every match of the regex pat must contain: the longest run
 * of plain characters outside groups, brackets and alternation, less a
 * last character made optional by a following * ? or {. "" when the
 * pattern has '|', an escape that is not a one-character class (\x41,
 * \Q...\E, \p{..}: their literal is not worth decoding) or no such run.
 * Only printable ASCII (the index folds ASCII case as LIKE does). */
static void regex_needle(const char *pat, char *best)
{
    char run[LOGSEARCH_MAX_PAT + 1];
    size_t n = 0;
    int depth = 0;
    best[0] = '\0';
    if (strchr(pat, '|')) return;
    for (const char *c = pat; *c; c++) {
        unsigned char ch = (unsigned char)*c;
        if (ch == '\\' && c[1] && !isalnum((unsigned char)c[1]) && (unsigned char)c[1] < 0x80) {
            c++;
            if (depth == 0 && c[1] != '*' && c[1] != '?' && c[1] != '{' && c[1] != '+') { run[n++] = *c; continue; }
            keep_run(best, run, n);
            n = 0;
            continue;
        }
        if (ch == '\\') {   /* \ + a letter or digit: a class such as \w, else give up */
            if (!c[1] || !strchr("dDwWsSbBhHvVAzZG", c[1])) { best[0] = '\0'; return; }
            keep_run(best, run, n);
            n = 0;
            c++;
            continue;
        }
        if (strchr("*?{", ch) && ch) {
            if (n > 0) n--;   /* the previous character is optional */
            keep_run(best, run, n);
            n = 0;
            if (ch == '{') while (c[1] && *c != '}') c++;
            continue;
        }
        if (ch == '[') {
            keep_run(best, run, n);
            n = 0;
            if (!(c = bracket_end(c))) return;
            continue;
        }
        if (ch == '(' || ch == ')') depth += ch == '(' ? 1 : -1;
        if (ch == '+' || ch == '.' || ch == '^' || ch == '$' || ch == '(' || ch == ')' || ch >= 0x80 || depth > 0) {
            keep_run(best, run, n);
            n = 0;
            continue;
        }
        /* an ordinary character; a following quantifier is seen next turn */
        run[n++] = (char)ch;
    }
    keep_run(best, run, n);
}

/* What of PCRE2's syntax a log search refuses: constructs that are no
 * regular language (back-references, recursion, subroutine calls,
 * conditionals), run code (callouts) or change the engine (verbs and
 * option settings), and the other (?...) extensions, none of which POSIX
 * ERE has; (?: is allowed. RET NULL, or the construct's name and *at
 * its byte offset. */
static const char *refused_construct(const char *pat, size_t *at)
{
    for (const char *c = pat; *c; c++) {
        *at = (size_t)(c - pat);
        if (*c == '[') {
            const char *e = bracket_end(c);
            if (!e) return NULL;   /* the compiler says what is wrong */
            c = e;
            continue;
        }
        if (*c == '\\') {
            char d = c[1];
            if (d >= '1' && d <= '9') return "back-references (\\1 .. \\9)";
            if (d == 'g') return "back-references and subroutine calls (\\g)";
            if (d == 'k') return "named back-references (\\k)";
            if (d == 'Q') {   /* \Q...\E: literal text */
                const char *e = strstr(c + 2, "\\E");
                if (!e) return NULL;
                c = e + 1;
                continue;
            }
            if (d) c++;
            continue;
        }
        if (*c == '(' && c[1] == '*') return "verbs and option settings ((*...))";
        if (*c == '(' && c[1] == '?') {
            char d = c[2];
            if (d == ':') continue;
            if (d == '=' || d == '!') return "lookahead ((?=...), (?!...))";
            if (d == '<' && (c[3] == '=' || c[3] == '!')) return "lookbehind ((?<=...), (?<!...))";
            if (d == 'P' && c[3] == '=') return "named back-references ((?P=name))";
            if (d == 'R' || d == '&' || (d == 'P' && c[3] == '>') || isdigit((unsigned char)d) || d == '+' ||
                (d == '-' && isdigit((unsigned char)c[3])))
                return "recursion and subroutine calls ((?R), (?1), (?&name))";
            if (d == '(') return "conditional groups ((?(...)...))";
            if (d == 'C') return "callouts ((?C))";
            if (d == '>') return "atomic groups ((?>...))";
            return "(?...) extensions other than (?:...)";
        }
    }
    return NULL;
}

/* pat in PCRE2's syntax where POSIX ERE (as glibc reads it) means the
 * same: GNU's word-boundary escapes \< and \> and ERE's "{,n}" (up to n)
 * are rewritten; everything else is copied. out holds 4x pat. */
static void ere_to_pcre2(const char *pat, char *out)
{
    char *o = out;
    for (const char *c = pat; *c; c++) {
        if (*c == '[') {
            const char *e = bracket_end(c);
            size_t n = e ? (size_t)(e - c) + 1 : strlen(c);
            memcpy(o, c, n);
            o += n;
            c += n - 1;
            continue;
        }
        if (*c == '\\' && c[1] == '<') { o += sprintf(o, "\\b(?=\\w)"); c++; continue; }
        if (*c == '\\' && c[1] == '>') { o += sprintf(o, "\\b(?<=\\w)"); c++; continue; }
        if (*c == '\\' && c[1]) { *o++ = *c++; *o++ = *c; continue; }
        if (*c == '{' && c[1] == ',' && c > pat) { o += sprintf(o, "{0"); continue; }
        *o++ = *c;
    }
    *o = '\0';
}

/* The regex half of logsearch_compile: p->re and its matching state. */
static int compile_regex(logsearch_pat *p, const char *pat, int icase, hf_jerr *e)
{
    size_t at;
    const char *what = refused_construct(pat, &at);
    if (what)
        return hf_jerr_set(e, "grep", NULL, "%s are not supported in log search (at byte %zu of '%s')", what, at, pat);
    char tr[4 * LOGSEARCH_MAX_PAT + 1];
    ere_to_pcre2(pat, tr);
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) return HF_ENOMEM;
    pcre2_set_parens_nest_limit(cc, LOGSEARCH_MAX_PAT / 4);
    int err;
    PCRE2_SIZE off;
    /* NO_AUTO_CAPTURE: groups do not capture, so nothing can refer back;
     * NEVER_UTF/UCP: bytes, as regcomp in the C locale. */
    p->re = pcre2_compile((PCRE2_SPTR)tr, PCRE2_ZERO_TERMINATED,
                          PCRE2_NO_AUTO_CAPTURE | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP | PCRE2_NEVER_BACKSLASH_C |
                              PCRE2_DOLLAR_ENDONLY | (icase ? PCRE2_CASELESS : 0),
                          &err, &off, cc);
    pcre2_compile_context_free(cc);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return hf_jerr_set(e, "grep", NULL, "bad regular expression '%s': %s", pat, (const char *)msg);
    }
    uint32_t refs = 0;
    pcre2_pattern_info(p->re, PCRE2_INFO_BACKREFMAX, &refs);
    if (refs)   /* refused_construct let none through; kept as a second lock */ return hf_jerr_set(e, "grep", NULL, "back-references are not supported in log search");
    p->md = pcre2_match_data_create(1, NULL);
    p->mc = pcre2_match_context_create(NULL);
    if (!p->md || !p->mc) return HF_ENOMEM;
    pcre2_set_match_limit(p->mc, LOGSEARCH_MATCH_LIMIT);
    pcre2_set_depth_limit(p->mc, LOGSEARCH_DEPTH_LIMIT);
    pcre2_set_heap_limit(p->mc, LOGSEARCH_HEAP_LIMIT_KIB);
    if (pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE) == 0) {
        p->js = pcre2_jit_stack_create(32 * 1024, LOGSEARCH_JIT_STACK, NULL);
        if (!p->js) return HF_ENOMEM;
        pcre2_jit_stack_assign(p->mc, NULL, p->js);
    }
    return 0;
}

int logsearch_compile(const char *pat, int regex, int icase, logsearch_pat **out, hf_jerr *e)
{
    *out = NULL;
    if (!pat || !*pat) return hf_jerr_set(e, "grep", NULL, "required: a string or, with regex=1, a regular expression");
    size_t n = strlen(pat);
    if (n > LOGSEARCH_MAX_PAT)
        return hf_jerr_set(e, "grep", NULL, "pattern too long: %zu bytes, at most %d", n, LOGSEARCH_MAX_PAT);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)pat[i] < 0x20 || pat[i] == 0x7f)
            return hf_jerr_set(e, "grep", NULL, "control character at byte %zu", i);
    logsearch_pat *p = calloc(1, sizeof *p);
    if (!p) return HF_ENOMEM;
    p->regex = regex;
    p->icase = icase;
    if (regex) {
        int rc = compile_regex(p, pat, icase, e);
        if (rc) {
            logsearch_pat_free(p);
            return rc;
        }
        regex_needle(pat, p->needle);
    } else {
        int ascii = 1;
        for (size_t i = 0; i < n; i++) ascii &= (unsigned char)pat[i] < 0x80 && pat[i] != '%' && pat[i] != '_';
        if (ascii) memcpy(p->needle, pat, n + 1);
        p->fixed = strdup(pat);
        if (!p->fixed) { free(p); return HF_ENOMEM; }
        p->flen = n;
        if (icase)
            for (size_t i = 0; i < n; i++) p->fixed[i] = (char)tolower((unsigned char)p->fixed[i]);
    }
    *out = p;
    return 0;
}

void logsearch_pat_free(logsearch_pat *p)
{
    if (!p) return;
    pcre2_match_data_free(p->md);
    pcre2_match_context_free(p->mc);
    pcre2_jit_stack_free(p->js);
    pcre2_code_free(p->re);
    free(p->fixed);
    free(p);
}

/* ASCII case-insensitive memmem; needle already lowercase. */
static int find_icase(const char *h, size_t hl, const char *nd, size_t nl)
{
    if (nl > hl) return 0;
    unsigned char c0 = (unsigned char)nd[0];
    unsigned char C0 = (unsigned char)toupper(c0);
    for (size_t i = 0; i + nl <= hl; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c != c0 && c != C0) continue;
        size_t k = 1;
        while (k < nl && tolower((unsigned char)h[i + k]) == (unsigned char)nd[k]) k++;
        if (k == nl) return 1;
    }
    return 0;
}

int logsearch_match(const logsearch_pat *p, const char *line, size_t len)
{
    if (p->regex) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)line, len, 0, 0, p->md, p->mc);
        if (rc >= 0) return 1;
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        return HF_ETOOBIG;   /* match, depth, heap or JIT stack limit: the line costs too much */
    }
    if (p->icase) return find_icase(line, len, p->fixed, p->flen);
    return memmem(line, len, p->fixed, p->flen) != NULL;
}

typedef struct scan {
    const logsearch_pat *p;
    const logsearch_query *q;
    int64_t after;         /* where this call started */
    int64_t last_row;      /* newest seq returned */
    int64_t last_miss;     /* newest seq seen that did not match */
    int64_t scanned;
    int64_t deadline;      /* hf_mono_ms */
    int64_t limited_seq;   /* the row whose match reached a limit, or 0 */
    int     timed_out, stopped;
} scan;

/* Should the scan end now? Past the deadline (once a row was decided, so
 * that every answer makes progress), or the caller's stop says so. Sets
 * timed_out / stopped. */
static int scan_over(scan *s)
{
    if (s->stopped || s->timed_out || s->limited_seq) return 1;
    if (s->q->stop && s->q->stop(s->q->stop_arg)) return s->stopped = 1;
    if (hf_mono_ms() < s->deadline) return 0;
    if (s->last_miss <= s->after && s->last_row <= s->after) return 0;   /* decide one row first: progress */
    return s->timed_out = 1;
}

/* hf_grep(seq, line): 1 when line matches. Once the scan is over it
 * answers 0 for every row without looking (and without counting it as
 * seen) and interrupts the statement. */
static void fn_grep(sqlite3_context *cx, int argc, sqlite3_value **v)
{
    (void)argc;
    scan *s = sqlite3_user_data(cx);
    if (scan_over(s)) {
        sqlite3_interrupt(sqlite3_context_db_handle(cx));
        sqlite3_result_int(cx, 0);
        return;
    }
    const char *line = (const char *)sqlite3_value_text(v[1]);
    int n = sqlite3_value_bytes(v[1]);
    s->scanned++;
    int m = line ? logsearch_match(s->p, line, (size_t)n) : 0;
    if (m < 0) {
        s->limited_seq = sqlite3_value_int64(v[0]);
        sqlite3_interrupt(sqlite3_context_db_handle(cx));
        m = 0;
    } else if (!m) {
        s->last_miss = sqlite3_value_int64(v[0]);
    }
    sqlite3_result_int(cx, m);
}

/* Between rows that never reach hf_grep (other trials' rows, index
 * probes): the same checks. */
static int on_progress(void *arg)
{
    return scan_over(arg);
}

int logsearch_run(store *sto, const logsearch_pat *p, const logsearch_query *q, json_t **out, hf_jerr *e)
{
    static const char *const q_trial =
        "SELECT seq,trial_id,stream,line,time FROM logs WHERE trial_id=?1 AND seq>?2 AND hf_grep(seq,line) "
        "ORDER BY seq LIMIT ?3";
    static const char *const q_exp =
        "SELECT seq,trial_id,stream,line,time FROM logs NOT INDEXED WHERE seq>?2 AND trial_id IN "
        "(SELECT id FROM trials WHERE experiment_id=?1) AND hf_grep(seq,line) ORDER BY seq LIMIT ?3";
    /* With a needle of 3+ characters: only the rows the trigram index
     * (schema/0009_insight.sql) says contain it, in rowid order (CROSS
     * JOIN: the index drives, else the planner walks logs_trial and sorts). */
    static const char *const q_exp_fts =
        "SELECT l.seq,l.trial_id,l.stream,l.line,l.time FROM logs_fts f CROSS JOIN logs l ON l.seq=f.rowid "
        "WHERE f.line LIKE ?4 AND f.rowid>?2 AND l.trial_id IN (SELECT id FROM trials WHERE experiment_id=?1) "
        "AND hf_grep(l.seq,l.line) ORDER BY f.rowid LIMIT ?3";
    int64_t t0 = hf_mono_ms(), after = q->after, limit = q->limit;
    scan s = {.p = p, .q = q, .after = after, .last_row = after, .last_miss = after,
              .deadline = q->deadline_ms > 0 ? q->deadline_ms : t0 + LOGSEARCH_BUDGET_MS};
    *out = NULL;
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    int64_t last_row = after, n = 0;
    json_t *arr = json_array();
    if (!arr) { rc = HF_ENOMEM; goto end; }
    if (sqlite3_create_function(db, "hf_grep", 2, SQLITE_UTF8, &s, fn_grep, NULL, NULL) != SQLITE_OK) goto end;
    sqlite3_progress_handler(db, 1000, on_progress, &s);
    int indexed = q->trial_id <= 0 && strlen(p->needle) >= 3;
    if (sqlite3_prepare_v2(db, q->trial_id > 0 ? q_trial : indexed ? q_exp_fts : q_exp, -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, q->trial_id > 0 ? q->trial_id : q->exp_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    if (indexed) {
        char like[LOGSEARCH_MAX_PAT + 3];
        snprintf(like, sizeof like, "%%%s%%", p->needle);
        sqlite3_bind_text(st, 4, like, -1, SQLITE_TRANSIENT);
    }
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *stream = (const char *)sqlite3_column_text(st, 2);
        const char *line = (const char *)sqlite3_column_text(st, 3);
        last_row = s.last_row = sqlite3_column_int64(st, 0);
        json_t *l = json_string(line ? line : "");
        json_array_append_new(arr, json_pack("{sIsIsssosI}", "seq", (json_int_t)last_row, "trial_id",
                                             (json_int_t)sqlite3_column_int64(st, 1), "stream", stream ? stream : "",
                                             "line", l ? l : json_string("?"),
                                             "time", (json_int_t)sqlite3_column_int64(st, 4)));
        n++;
    }
    if (s.stopped) { rc = HF_ECONN; goto end; }
    if (s.limited_seq) {
        rc = hf_jerr_set(e, "grep", NULL,
                         "pattern too costly: matching it against the line seq %lld took more than %d steps "
                         "(nested repetition such as (a+)* backtracks exponentially); simplify it, or continue "
                         "after=%lld",
                         (long long)s.limited_seq, LOGSEARCH_MATCH_LIMIT, (long long)s.limited_seq);
        rc = HF_ETOOBIG;
        goto end;
    }
    if (src != SQLITE_DONE && !(src == SQLITE_INTERRUPT && s.timed_out)) { rc = store_rc(src); goto end; }
    int truncated = s.timed_out || n >= limit;
    /* Complete scan: next = the newest row looked at; cut by the limit:
     * the last row returned; cut by time: everything up to the newer of
     * the last returned and the last missed has been looked at. */
    int64_t next = n >= limit && !s.timed_out ? last_row : (last_row > s.last_miss ? last_row : s.last_miss);
    *out = json_pack("{sOsIsbsIsbsI}", "logs", arr, "next", (json_int_t)next, "truncated", truncated, "scanned",
                     (json_int_t)s.scanned, "indexed", indexed, "ms", (json_int_t)(hf_mono_ms() - t0));
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    sqlite3_finalize(st);
    sqlite3_progress_handler(db, 0, NULL, NULL);
    sqlite3_create_function(db, "hf_grep", 2, SQLITE_UTF8, NULL, NULL, NULL, NULL);
    store_reader_put(sto, db);
    return rc;
}

const char *logsearch_needle(const logsearch_pat *p)
{
    return p->needle;
}
