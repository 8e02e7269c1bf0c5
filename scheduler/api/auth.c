/*
 * auth.c — token file parsing and constant-time checks (see auth.h).
 */
#include "scheduler/api/auth.h"

#include "hf_err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define AUTH_MAX_TOKENS 1024

struct auth {
    size_t n;
    struct { int role; char tok[AUTH_TOKEN_MAX + 1]; char user[AUTH_NAME_MAX + 1]; } t[AUTH_MAX_TOKENS];
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
    const char *user;
    return auth_check_user(a, token, &user);
}

int auth_check_user(const auth *a, const char *token, const char **user)
{
    int role = AUTH_NONE;
    size_t hit = 0;
    *user = "";
    if (!a || !token || strnlen(token, AUTH_TOKEN_MAX + 1) > AUTH_TOKEN_MAX) return AUTH_NONE;
    for (size_t i = 0; i < a->n; i++) {
        size_t eq = (size_t)auth_equal(a->t[i].tok, token);
        role |= (int)(-eq & (size_t)a->t[i].role);   /* no branch on which token matched */
        hit |= -eq & i;
    }
    /* A token listed under two roles is ambiguous (the file check refuses
     * it): more than one role bit is no role. */
    if (role & (role - 1)) return AUTH_NONE;
    if (role != AUTH_NONE) *user = a->t[hit].user;
    return role;
}

int auth_role_parse(const char *s)
{
    return strcmp(s, "user") == 0    ? AUTH_USER
           : strcmp(s, "agent") == 0 ? AUTH_AGENT
           : strcmp(s, "admin") == 0 ? AUTH_ADMIN
           : strcmp(s, "viewer") == 0 ? AUTH_VIEWER
                                      : AUTH_NONE;
}

const char *auth_role_name(int role)
{
    return role == AUTH_USER ? "user" : role == AUTH_AGENT ? "agent" : role == AUTH_ADMIN ? "admin"
           : role == AUTH_VIEWER ? "viewer" : "none";
}

int auth_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > AUTH_NAME_MAX) return 0;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || strchr("_.@-", *n)))
            return 0;
    return 1;
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
        if (!colon) { snprintf(err, errlen, "line %d: expected role:token or role:name token", lineno); rc = HF_EINVAL; goto end; }
        *colon = 0;
        int role = auth_role_parse(p);
        if (!role) {
            snprintf(err, errlen, "line %d: role must be admin, user, viewer or agent", lineno);
            rc = HF_EINVAL;
            goto end;
        }
        const char *tok = colon + 1, *name = role == AUTH_AGENT ? "agent" : role == AUTH_USER ? "default" : p;
        char *sp = strpbrk(colon + 1, " \t");
        if (sp) {   /* "role:NAME TOKEN" */
            *sp = 0;
            name = colon + 1;
            tok = sp + 1;
            while (*tok == ' ' || *tok == '\t') tok++;
            if (!auth_name_ok(name)) {
                snprintf(err, errlen, "line %d: user name must be 1..%d characters of A-Z a-z 0-9 _ . @ -", lineno,
                         AUTH_NAME_MAX);
                rc = HF_EINVAL;
                goto end;
            }
        }
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
        int dup = 0;   /* the same line again: kept once (the check ORs the index of every match) */
        for (size_t i = 0; i < a->n; i++)
            if (strcmp(a->t[i].tok, tok) == 0) {
                if (a->t[i].role != role || strcmp(a->t[i].user, name) != 0) {
                    snprintf(err, errlen, "line %d: the same token is listed twice (roles or names differ)", lineno);
                    rc = HF_EINVAL;
                    goto end;
                }
                dup = 1;
            }
        if (dup) continue;
        if (a->n >= AUTH_MAX_TOKENS) { snprintf(err, errlen, "more than %d tokens", AUTH_MAX_TOKENS); rc = HF_EINVAL; goto end; }
        a->t[a->n].role = role;
        memcpy(a->t[a->n].tok, tok, tl + 1);
        size_t nl = strnlen(name, AUTH_NAME_MAX);   /* checked by auth_name_ok, or a role word */
        memcpy(a->t[a->n].user, name, nl);
        a->t[a->n].user[nl] = '\0';
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
