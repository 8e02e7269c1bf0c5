/*
 * cli_ignore.c — .hyperfarmignore rules (see cli_ignore.h for the syntax).
 *
 * A rule is its pattern split into components ("a/STAR-STAR/x.py" -> "a",
 * "**", "x.py"); an unanchored pattern gets a leading "**" so that one matcher
 * serves both kinds. Matching fills a table m[i][j] = "components i.. of
 * the pattern match components j.. of the path", from the ends backwards:
 * "**" matches when the rest matches here or one component later.
 */
#include "cli_ignore.h"

#include "hf_err.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ignore_rule {
    char  **comp;        /* components, owned (one allocation: comp[0]) */
    int     ncomp;
    int     negate;      /* '!': re-include */
    int     dir_only;    /* trailing '/' */
} ignore_rule;

struct cli_ignore {
    ignore_rule *r;
    size_t       n;
};

void cli_ignore_free(cli_ignore *ig)
{
    if (!ig) return;
    for (size_t i = 0; i < ig->n; i++) {
        if (ig->r[i].comp) free(ig->r[i].comp[0]);
        free(ig->r[i].comp);
    }
    free(ig->r);
    free(ig);
}

size_t cli_ignore_count(const cli_ignore *ig) { return ig ? ig->n : 0; }

/* Split pat (modified: '/' become NULs) into components, dropping empty
 * ones ("a//b"); with a leading "**" when !anchored. RET the count, or -1
 * over CLI_IGNORE_MAX_COMPS. */
static int split(char *pat, int anchored, char **comp)
{
    static char any[] = "**";
    int n = 0;
    if (!anchored) comp[n++] = any;
    for (char *p = pat, *tok; (tok = strsep(&p, "/")) != NULL;) {
        if (!*tok) continue;
        if (n >= CLI_IGNORE_MAX_COMPS) return -1;
        comp[n++] = tok;
    }
    return n;
}

/* One line (len bytes, no newline) into a rule. RET 1 when it is a rule, 0
 * when it is blank or a comment, HF_EINVAL / HF_ENOMEM. */
static int parse_line(const char *line, size_t len, ignore_rule *r, char *why, size_t whylen)
{
    char *buf = NULL, *comp[CLI_IGNORE_MAX_COMPS + 1];
    if (len && line[len - 1] == '\r') len--;
    /* trailing blanks, unless the last one is escaped */
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\t') && !(len >= 2 && line[len - 2] == '\\')) len--;
    if (len == 0 || line[0] == '#') return 0;
    memset(r, 0, sizeof *r);
    size_t i = 0;
    if (line[0] == '!') {
        r->negate = 1;
        i = 1;
    } else if (line[0] == '\\' && len > 1 && (line[1] == '#' || line[1] == '!')) {
        i = 1;   /* the backslash goes; fnmatch would drop it too, but be explicit */
    }
    if (len > i && line[len - 1] == '/') {
        r->dir_only = 1;
        len--;
    }
    if (len <= i) {
        snprintf(why, whylen, "empty pattern");
        return HF_EINVAL;
    }
    if (!(buf = strndup(line + i, len - i))) return HF_ENOMEM;
    int anchored = strchr(buf, '/') != NULL;   /* a leading or middle '/' (the trailing one is gone) */
    int n = split(buf, anchored, comp);
    if (n < 0) {
        snprintf(why, whylen, "more than %d path components", CLI_IGNORE_MAX_COMPS);
        free(buf);
        return HF_EINVAL;
    }
    if (n == 0) {
        snprintf(why, whylen, "a pattern of slashes only matches nothing");
        free(buf);
        return HF_EINVAL;
    }
    /* one allocation: the component strings live in buf, comp[0] points
     * at its start (split keeps order; the static "**" is copied in) */
    size_t need = 0;
    for (int k = 0; k < n; k++) need += strlen(comp[k]) + 1;
    char *store = malloc(need);
    r->comp = calloc((size_t)n, sizeof *r->comp);
    if (!store || !r->comp) {
        free(store);
        free(r->comp);
        r->comp = NULL;
        free(buf);
        return HF_ENOMEM;
    }
    char *q = store;
    for (int k = 0; k < n; k++) {
        size_t l = strlen(comp[k]) + 1;
        memcpy(q, comp[k], l);
        r->comp[k] = q;
        q += l;
    }
    r->ncomp = n;
    free(buf);
    return 1;
}

int cli_ignore_parse(const char *text, size_t len, const char *name, cli_ignore **out, char *err, size_t errlen)
{
    cli_ignore *ig = calloc(1, sizeof *ig);
    size_t lineno = 0, cap = 0;
    int rc = HF_ENOMEM;
    *out = NULL;
    if (!ig) goto end;
    if (memchr(text, '\0', len)) {
        snprintf(err, errlen, "%s: contains a NUL byte (not a text file)", name);
        rc = HF_EINVAL;
        goto end;
    }
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        char why[128] = "";
        lineno++;
        if (ll > CLI_IGNORE_MAX_LINE) {
            snprintf(err, errlen, "%s:%zu: line longer than %d bytes", name, lineno, CLI_IGNORE_MAX_LINE);
            rc = HF_EINVAL;
            goto end;
        }
        if (ig->n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            ignore_rule *nr = realloc(ig->r, nc * sizeof *nr);
            if (!nr) goto end;
            ig->r = nr;
            cap = nc;
        }
        int got = parse_line(text + pos, ll, &ig->r[ig->n], why, sizeof why);
        if (got < 0) {
            if (got == HF_EINVAL) snprintf(err, errlen, "%s:%zu: %s", name, lineno, why);
            rc = got;
            goto end;
        }
        if (got == 1 && ++ig->n > CLI_IGNORE_MAX_RULES) {
            snprintf(err, errlen, "%s:%zu: more than %d rules", name, lineno, CLI_IGNORE_MAX_RULES);
            rc = HF_EINVAL;
            goto end;
        }
        pos += ll + 1;
    }
    *out = ig;
    ig = NULL;
    rc = 0;
end:
    if (rc == HF_ENOMEM) snprintf(err, errlen, "%s: out of memory", name);
    cli_ignore_free(ig);
    return rc;
}

/* Do the rule's components match the path's (ns of them)? */
static int rule_match(const ignore_rule *r, char *const *s, int ns)
{
    /* m[i][j]: comp[i..] matches s[j..]; one row kept per i, from the end */
    unsigned char next[CLI_IGNORE_MAX_DEPTH + 1], cur[CLI_IGNORE_MAX_DEPTH + 1];
    for (int j = 0; j <= ns; j++) next[j] = j == ns;
    for (int i = r->ncomp - 1; i >= 0; i--) {
        const char *p = r->comp[i];
        int any = strcmp(p, "**") == 0;
        if (any && i == r->ncomp - 1) {
            /* a trailing "**" (logs/STAR-STAR): everything inside, not the directory itself */
            for (int j = 0; j <= ns; j++) cur[j] = j < ns;
        } else {
            cur[ns] = any ? next[ns] : 0;
            for (int j = ns - 1; j >= 0; j--) {
                if (any) cur[j] = next[j] || cur[j + 1];
                else cur[j] = next[j + 1] && fnmatch(p, s[j], 0) == 0;
            }
        }
        memcpy(next, cur, (size_t)ns + 1);
    }
    return next[0];
}

int cli_ignore_match(const cli_ignore *ig, const char *rel, int is_dir)
{
    char buf[CLI_IGNORE_MAX_LINE * 2], *s[CLI_IGNORE_MAX_DEPTH];
    int ns = 0, excluded = 0;
    if (!ig || !ig->n) return 0;
    if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf) return 0;   /* too long to be named by a rule */
    for (char *p = buf, *tok; (tok = strsep(&p, "/")) != NULL;) {
        if (!*tok) continue;
        if (ns >= CLI_IGNORE_MAX_DEPTH) return 0;
        s[ns++] = tok;
    }
    if (ns == 0) return 0;
    for (size_t i = 0; i < ig->n; i++) {
        const ignore_rule *r = &ig->r[i];
        if (r->negate != excluded) continue;          /* cannot change the verdict */
        if (r->dir_only && !is_dir) continue;
        if (rule_match(r, s, ns)) excluded = !r->negate;
    }
    return excluded;
}
