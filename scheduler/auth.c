/*
 * auth.c — token file parsing and constant-time checks (see auth.h).
 */
#include "scheduler/auth.h"

#include "hf_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define AUTH_MAX_TOKENS 1024

struct auth {
    size_t n;
    struct { int role; char tok[AUTH_TOKEN_MAX + 1]; } t[AUTH_MAX_TOKENS];
};

int auth_equal(const char *a, const char *b)
{
    /* Walk a fixed AUTH_TOKEN_MAX+1 bytes of each, stopping at nothing. */
    unsigned char diff = 0;
    size_t ea = 0, eb = 0;   /* reached the end */
    for (size_t i = 0; i <= AUTH_TOKEN_MAX; i++) {
        unsigned char ca = ea ? 0 : (unsigned char)a[i];
        unsigned char cb = eb ? 0 : (unsigned char)b[i];
        diff |= ca ^ cb;
        ea |= ca == 0;
        eb |= cb == 0;
    }
    return diff == 0;
}

int auth_check(const auth *a, const char *token)
{
    int role = AUTH_NONE;
    if (!a || !token || strnlen(token, AUTH_TOKEN_MAX + 1) > AUTH_TOKEN_MAX) return AUTH_NONE;
    for (size_t i = 0; i < a->n; i++) {
        int eq = auth_equal(a->t[i].tok, token);
        role |= eq ? a->t[i].role : 0;   /* no branch on which token matched */
    }
    /* A token listed for both roles is ambiguous; the file check refuses it. */
    return role == (AUTH_USER | AUTH_AGENT) ? AUTH_NONE : role;
}

const char *auth_bearer(const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return NULL;
    h += 7;
    while (*h == ' ') h++;
    return *h ? h : NULL;
}

int auth_parse(const char *text, size_t len, auth **out, char *err, size_t errlen)
{
    *out = NULL;
    auth *a = calloc(1, sizeof *a);
    if (!a) return HF_ENOMEM;
    size_t pos = 0;
    int lineno = 0, rc = 0;
    while (pos < len) {
        char line[AUTH_TOKEN_MAX + 64];
        size_t e = pos;
        while (e < len && text[e] != '\n') e++;
        size_t n = e - pos;
        lineno++;
        if (n >= sizeof line) {
            snprintf(err, errlen, "line %d: longer than %zu bytes", lineno, sizeof line - 1);
            rc = HF_EINVAL;
            goto end;
        }
        memcpy(line, text + pos, n);
        line[n] = 0;
        pos = e + 1;
        while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *colon = strchr(p, ':');
        if (!colon) { snprintf(err, errlen, "line %d: expected role:token", lineno); rc = HF_EINVAL; goto end; }
        *colon = 0;
        int role = strcmp(p, "user") == 0 ? AUTH_USER : strcmp(p, "agent") == 0 ? AUTH_AGENT : 0;
        if (!role) { snprintf(err, errlen, "line %d: role must be user or agent", lineno); rc = HF_EINVAL; goto end; }
        const char *tok = colon + 1;
        size_t tl = strlen(tok);
        if (tl < AUTH_TOKEN_MIN || tl > AUTH_TOKEN_MAX) {
            snprintf(err, errlen, "line %d: token must be %d..%d characters", lineno, AUTH_TOKEN_MIN, AUTH_TOKEN_MAX);
            rc = HF_EINVAL;
            goto end;
        }
        for (const char *c = tok; *c; c++)
            if (*c <= ' ' || *c == 127) {
                snprintf(err, errlen, "line %d: token contains whitespace or control characters", lineno);
                rc = HF_EINVAL;
                goto end;
            }
        for (size_t i = 0; i < a->n; i++)
            if (strcmp(a->t[i].tok, tok) == 0 && a->t[i].role != role) {
                snprintf(err, errlen, "line %d: the same token is listed for both roles", lineno);
                rc = HF_EINVAL;
                goto end;
            }
        if (a->n >= AUTH_MAX_TOKENS) { snprintf(err, errlen, "more than %d tokens", AUTH_MAX_TOKENS); rc = HF_EINVAL; goto end; }
        a->t[a->n].role = role;
        memcpy(a->t[a->n].tok, tok, tl + 1);
        a->n++;
    }
    if (a->n == 0) { snprintf(err, errlen, "no tokens"); rc = HF_EINVAL; goto end; }
    *out = a;
    a = NULL;
end:
    free(a);
    return rc;
}

int auth_load(const char *path, auth **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: %s", path, strerror(errno)); return HF_EIO; }
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    int too_big = !feof(f);
    fclose(f);
    if (!buf) return HF_ENOMEM;
    int rc;
    if (too_big) {
        snprintf(err, errlen, "%s: larger than 1 MiB", path);
        rc = HF_EINVAL;
    } else {
        char e2[200] = "";
        rc = auth_parse(buf, n, out, e2, sizeof e2);
        if (rc) snprintf(err, errlen, "%s: %s", path, e2);
    }
    free(buf);
    return rc;
}

void auth_free(auth *a) { free(a); }
size_t auth_count(const auth *a) { return a ? a->n : 0; }
