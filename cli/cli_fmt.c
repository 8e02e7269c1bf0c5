/*
 * cli_fmt.c — text rendering for the CLI (see cli_fmt.h).
 *
 * Widths are counted in UTF-8 code points (names and hyperparameter values
 * may hold non-ASCII text); a truncated cell is cut on a code-point
 * boundary and ends with "~" so the reader sees it was cut.
 *
 * Text that users wrote (names, notes, tags, descriptions, errors, log
 * lines, URLs) reaches the terminal only through cli_clean_text, the one
 * cleaner (docs/cli.md, "Text from the scheduler"): escape sequences
 * vanish whole, other control characters become spaces.
 */
#include "cli_fmt.h"
#include "hf_err.h"
#include "hf_json.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_table_init(cli_table *t, int ncols, const char *const *headers)
{
    memset(t, 0, sizeof *t);
    if (ncols <= 0 || ncols > CLI_TABLE_MAX_COLS) return HF_EINVAL;
    t->ncols = ncols;
    for (int i = 0; i < ncols; i++) t->head[i] = headers[i];
    hf_buf_init(&t->cells, CLI_TABLE_MAX_BYTES);
    return HF_OK;
}

void cli_table_free(cli_table *t)
{
    if (!t) return;
    hf_buf_free(&t->cells);
    t->nrows = 0;
}

void cli_table_align(cli_table *t, int col, int align)
{
    if (col >= 0 && col < t->ncols) t->align[col] = align;
}

void cli_table_maxw(cli_table *t, int col, int width)
{
    if (col >= 0 && col < t->ncols) t->maxw[col] = width;
}

/* ---------- the cleaner ---------- */

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0. */
static size_t u8_len(const unsigned char *s, size_t n)
{
    size_t len;
    unsigned cp;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xC2 && s[0] <= 0xDF) { len = 2; cp = s[0] & 0x1F; }
    else if (s[0] >= 0xE0 && s[0] <= 0xEF) { len = 3; cp = s[0] & 0x0F; }
    else if (s[0] >= 0xF0 && s[0] <= 0xF4) { len = 4; cp = s[0] & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* The code point of a well-formed sequence of len bytes. */
static unsigned u8_cp(const unsigned char *s, size_t len)
{
    static const unsigned char lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    unsigned cp = s[0] & lead_mask[len];
    for (size_t i = 1; i < len; i++) cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

/* Skip the escape sequence whose introducer (ESC, or a C1 control of
 * ilen bytes) is at s[i]; kind: '[' CSI, ']' 'P' 'X' '^' '_' control
 * strings, 0 for ESC (the next byte tells). RET the index after the
 * sequence (n: an unfinished one runs to the end of the text). */
static size_t skip_escape(const unsigned char *s, size_t n, size_t i, size_t ilen, int kind)
{
    i += ilen;
    if (!kind) {
        if (i >= n) return n;
        unsigned char c = s[i];
        if (c == '[' || c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') {
            kind = c;
            i++;
        } else {
            while (i < n && s[i] >= 0x20 && s[i] <= 0x2F) i++;   /* intermediates, e.g. ESC ( B */
            return i < n && s[i] >= 0x30 && s[i] <= 0x7E ? i + 1 : i;
        }
    }
    if (kind == '[') {   /* parameters and intermediates, then one final byte */
        while (i < n && s[i] >= 0x20 && s[i] <= 0x3F) i++;
        return i < n && s[i] >= 0x40 && s[i] <= 0x7E ? i + 1 : i;
    }
    for (; i < n; i++) {   /* a control string ends at BEL, ESC \ or ST (U+009C) */
        if (s[i] == 0x07) return i + 1;
        if (s[i] == 0x1B) return i + 1 < n && s[i + 1] == '\\' ? i + 2 : i;
        if (s[i] == 0xC2 && i + 1 < n && s[i + 1] == 0x9C) return i + 2;
    }
    return n;
}

size_t cli_clean_text(char *buf, size_t size, const char *text, size_t len, int flags)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t o = 0, i = 0;
    if (!size) return 0;
    while (text && i < len && s[i]) {
        unsigned char c = s[i];
        const char *put;
        size_t plen = 1, step = 1;
        if (c == 0x1B) {
            i = skip_escape(s, len, i, 1, 0);
            continue;
        }
        if (c < 0x20 || c == 0x7F) {
            put = (flags & CLI_CLEAN_MULTILINE) && (c == '\n' || c == '\t') ? (const char *)&s[i] : " ";
        } else if (c < 0x80) {
            put = (const char *)&s[i];
        } else if (!(step = u8_len(s + i, len - i))) {
            put = "?";   /* not UTF-8: a lone byte may be a C1 control to some terminals */
            step = 1;
        } else {
            unsigned cp = u8_cp(s + i, step);
            if (cp <= 0x9F) {   /* C1 controls; CSI, OSC and the other string introducers start sequences */
                int kind = cp == 0x9B ? '[' : cp == 0x9D ? ']' : cp == 0x90 ? 'P' : cp == 0x98 ? 'X'
                         : cp == 0x9E ? '^' : cp == 0x9F ? '_' : 0;
                i = kind ? skip_escape(s, len, i, step, kind) : i + step;
                continue;
            }
            /* Bidirectional overrides and isolates reorder what follows
             * them on screen: text that reads unlike what it is. */
            if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
                i += step;
                continue;
            }
            put = (const char *)&s[i];
            plen = step;
        }
        if (o + plen + 1 > size) break;   /* never split a character */
        memcpy(buf + o, put, plen);
        o += plen;
        i += step;
    }
    buf[o] = 0;
    return o;
}

void cli_put_text(FILE *f, const char *s, int flags)
{
    char small[1024];
    size_t len = s ? strlen(s) : 0;
    /* The cleaned text is never longer than the text ('?' replaces one
     * byte): one buffer, so no escape sequence is cut in two. */
    char *buf = len < sizeof small ? small : malloc(len + 1);
    if (!buf) {
        fputs("(text not shown: out of memory)", f);
        return;
    }
    cli_clean_text(buf, len + 1, s, len, flags);
    fputs(buf, f);
    if (buf != small) free(buf);
}

int cli_table_cell(cli_table *t, const char *raw)
{
    if (t->overflow) return HF_ETOOBIG;
    size_t rn = raw ? strlen(raw) : 0;
    char small[1024], *big = NULL;
    char *s = rn < sizeof small ? small : (big = malloc(rn + 1));
    if (!s) return HF_ENOMEM;
    cli_clean_text(s, rn + 1, raw, rn, 0);   /* widths are counted on what is shown */
    if (!*s) strcpy(s, "-");
    size_t n = strlen(s);
    if (t->cells.len + n + 1 > t->cells.max) {
        t->overflow = 1;
        free(big);
        return HF_ETOOBIG;
    }
    int rc = hf_buf_add(&t->cells, s, n + 1);   /* keep the NUL as separator */
    free(big);
    if (rc) return rc;
    if (++t->row_open == t->ncols) {
        t->row_open = 0;
        t->nrows++;
    }
    return HF_OK;
}

int cli_table_cellf(cli_table *t, const char *fmt, ...)
{
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return cli_table_cell(t, tmp);
}

/* Code points in s (continuation bytes 10xxxxxx are not counted). */
static int u8_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

/* Byte length of the first `cps` code points of s. */
static size_t u8_prefix(const char *s, int cps)
{
    size_t i = 0;
    int seen = 0;
    for (; s[i]; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (seen == cps) break;
            seen++;
        }
    }
    return i;
}

/* Cell text as shown: truncated to maxw code points (last one "~"). */
static void cell_view(const char *s, int maxw, const char **p, size_t *len, int *trunc)
{
    *p = s;
    *trunc = 0;
    if (maxw > 1 && u8_width(s) > maxw) {
        *len = u8_prefix(s, maxw - 1);
        *trunc = 1;
    } else {
        *len = strlen(s);
    }
}

/* Control characters (tabs, newlines, escape sequences from a hostile
 * name) become spaces: a cell never moves the cursor or breaks a row. */
static void put_clean(FILE *f, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        fputc(ch < 0x20 || ch == 0x7f ? ' ' : ch, f);
    }
}

static void put_tsv(FILE *f, const char *s) { put_clean(f, s, strlen(s)); }

void cli_fmt_clean(char *buf, size_t size, const char *s)
{
    cli_clean_text(buf, size, s, s ? strlen(s) : 0, 0);
}

void cli_table_print(const cli_table *t, FILE *f, int tsv)
{
    int width[CLI_TABLE_MAX_COLS];
    const char **rows = NULL;
    size_t ncells = t->nrows * (size_t)t->ncols;

    if (ncells && !(rows = malloc(ncells * sizeof *rows))) return;
    const char *p = t->cells.data;
    for (size_t i = 0; i < ncells; i++) {
        rows[i] = p;
        p += strlen(p) + 1;
    }
    if (tsv) {
        for (int c = 0; c < t->ncols; c++) {
            if (c) fputc('\t', f);
            put_tsv(f, t->head[c]);
        }
        fputc('\n', f);
        for (size_t r = 0; r < t->nrows; r++) {
            for (int c = 0; c < t->ncols; c++) {
                if (c) fputc('\t', f);
                put_tsv(f, rows[r * t->ncols + c]);
            }
            fputc('\n', f);
        }
        goto end;
    }
    for (int c = 0; c < t->ncols; c++) width[c] = u8_width(t->head[c]);
    for (size_t r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            int w = u8_width(rows[r * t->ncols + c]);
            if (t->maxw[c] > 1 && w > t->maxw[c]) w = t->maxw[c];
            if (w > width[c]) width[c] = w;
        }
    for (size_t r = 0; r <= t->nrows; r++) {
        for (int c = 0; c < t->ncols; c++) {
            const char *s = r == 0 ? t->head[c] : rows[(r - 1) * t->ncols + c];
            const char *v;
            size_t len;
            int trunc, last = c == t->ncols - 1;
            cell_view(s, r == 0 ? 0 : t->maxw[c], &v, &len, &trunc);
            int w = u8_width(s);
            if (trunc) w = t->maxw[c];
            int pad = width[c] - w;
            if (c) fputs("  ", f);
            if (t->align[c] == CLI_ALIGN_RIGHT)
                for (int i = 0; i < pad; i++) fputc(' ', f);
            put_clean(f, v, len);
            if (trunc) fputc('~', f);
            if (t->align[c] == CLI_ALIGN_LEFT && !last)
                for (int i = 0; i < pad; i++) fputc(' ', f);
        }
        fputc('\n', f);
    }
    if (t->overflow) fprintf(f, "(output truncated: more rows than fit in %u bytes)\n", CLI_TABLE_MAX_BYTES);
end:
    free(rows);
}

void cli_fmt_duration(char *buf, size_t size, int64_t ms)
{
    if (ms < 0) { snprintf(buf, size, "-"); return; }
    int64_t s = ms / 1000;
    if (ms < 1000) snprintf(buf, size, "%" PRId64 "ms", ms);
    else if (s < 60) snprintf(buf, size, "%" PRId64 "s", s);
    else if (s < 3600) snprintf(buf, size, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
    else if (s < 86400) snprintf(buf, size, "%" PRId64 "h%02" PRId64 "m", s / 3600, (s % 3600) / 60);
    else snprintf(buf, size, "%" PRId64 "d%02" PRId64 "h", s / 86400, (s % 86400) / 3600);
}

void cli_fmt_bytes(char *buf, size_t size, int64_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 0) { snprintf(buf, size, "-"); return; }
    if (bytes < 1024) { snprintf(buf, size, "%" PRId64 " B", bytes); return; }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) { v /= 1024; u++; }
    if (v >= 999.5 && u < 5) { v /= 1024; u++; }   /* "1000 KiB" reads worse than "0.98 MiB" */
    snprintf(buf, size, v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

void cli_fmt_ago(char *buf, size_t size, int64_t now_ms, int64_t t_ms)
{
    if (t_ms <= 0) { snprintf(buf, size, "-"); return; }
    int64_t s = (now_ms - t_ms) / 1000;
    if (s < 1) snprintf(buf, size, "just now");
    else if (s < 60) snprintf(buf, size, "%" PRId64 "s ago", s);
    else if (s < 3600) snprintf(buf, size, "%" PRId64 "m ago", s / 60);
    else if (s < 86400) snprintf(buf, size, "%" PRId64 "h ago", s / 3600);
    else snprintf(buf, size, "%" PRId64 "d ago", s / 86400);
}

void cli_fmt_number(char *buf, size_t size, double v)
{
    if (!isfinite(v)) { snprintf(buf, size, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); return; }
    if (v == floor(v) && fabs(v) < 1e15) { snprintf(buf, size, "%.0f", v); return; }
    snprintf(buf, size, "%.4g", v);
}

void cli_fmt_json_scalar(char *buf, size_t size, const json_t *v)
{
    if (!size) return;
    buf[0] = '\0';
    if (!v || json_is_null(v)) { snprintf(buf, size, "-"); return; }
    switch (json_typeof(v)) {
    case JSON_STRING: snprintf(buf, size, "%s", json_string_value(v)); break;
    case JSON_INTEGER: snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: cli_fmt_number(buf, size, json_real_value(v)); break;
    case JSON_TRUE: snprintf(buf, size, "true"); break;
    case JSON_FALSE: snprintf(buf, size, "false"); break;
    default: {
        char *s = hf_json_dump(v);
        snprintf(buf, size, "%s", s ? s : "?");
        free(s);
    }
    }
}

void cli_fmt_hparams(char *buf, size_t size, const json_t *hparams)
{
    const char *k;
    json_t *v;
    size_t off = 0;
    if (!size) return;
    buf[0] = '\0';
    if (!json_is_object(hparams)) return;
    json_object_foreach((json_t *)hparams, k, v) {
        char val[256];
        cli_fmt_json_scalar(val, sizeof val, v);
        int n = snprintf(buf + off, size - off, "%s%s=%s", off ? " " : "", k, val);
        if (n < 0 || (size_t)n >= size - off) {   /* cut: end with "..." when room */
            if (size > 4) memcpy(buf + size - 4, "...", 4);
            return;
        }
        off += (size_t)n;
    }
}

static int64_t count_of(const json_t *counts, const char *key)
{
    json_t *v = json_object_get(counts, key);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

void cli_counts_from_json(cli_counts *c, const json_t *counts)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(counts)) return;
    c->queued = count_of(counts, "queued") + count_of(counts, "assigned");
    c->running = count_of(counts, "running");
    c->completed = count_of(counts, "completed");
    c->failed = count_of(counts, "failed");
    c->stopped = count_of(counts, "stopped");
    c->canceled = count_of(counts, "canceled");
    c->paused = count_of(counts, "paused");
}

int64_t cli_counts_done(const cli_counts *c)
{
    return c->completed + c->stopped + c->failed + c->canceled;
}

void cli_fmt_bar(char *buf, size_t size, const cli_counts *c, int64_t total, int width)
{
    int64_t done = cli_counts_done(c), run = c->running;
    int64_t sum = done + run + c->queued + c->paused;
    if (total <= 0 || total < sum) total = sum;
    if (width < 1) width = 1;
    if ((size_t)width + 3 > size) width = size > 3 ? (int)size - 3 : 0;
    int nd = total > 0 ? (int)(done * width / total) : 0;
    int nr = total > 0 ? (int)((done + run) * width / total) - nd : 0;
    if (run > 0 && nr == 0 && nd < width) nr = 1;   /* running work is always visible */
    size_t o = 0;
    if (size < 3) { if (size) buf[0] = '\0'; return; }
    buf[o++] = '[';
    for (int i = 0; i < width; i++) buf[o++] = i < nd ? '#' : i < nd + nr ? '>' : '.';
    buf[o++] = ']';
    buf[o] = '\0';
}

int cli_csv_field(hf_buf *b, const char *s)
{
    if (!s) s = "";
    if (!strpbrk(s, ",\"\r\n")) return hf_buf_addstr(b, s);
    int rc = hf_buf_add(b, "\"", 1);
    for (const char *p = s; !rc && *p; p++)
        rc = *p == '"' ? hf_buf_add(b, "\"\"", 2) : hf_buf_add(b, p, 1);
    return rc ? rc : hf_buf_add(b, "\"", 1);
}
