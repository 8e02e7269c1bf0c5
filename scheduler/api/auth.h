/*
 * auth.h — bearer tokens of the scheduler (docs/design.md §6, docs/protocol.md
 * "Roles", docs/api.md "Roles"). The token file holds one "role:token" per
 * line, role "admin", "user", "viewer" or "agent", several of each allowed;
 * '#' starts a comment line. A line may also name who holds the token
 * (docs/operations.md, "Tokens and users"): "role:NAME TOKEN" (role, colon,
 * a user name, whitespace, the token); a line of the old form "role:TOKEN"
 * names its holder "default" (user tokens), "agent", "admin" or "viewer".
 * A token listed twice with another role or name is refused. Names are
 * 1..64 characters of [A-Za-z0-9_.@-]. A token is
 * compared with every known token in constant time (no early exit, fixed
 * length), so response timing says nothing about how much of a guess was
 * right.
 */
#ifndef HF_AUTH_H
#define HF_AUTH_H

#include <stddef.h>

#define AUTH_TOKEN_MAX 256
#define AUTH_TOKEN_MIN 8
#define AUTH_NAME_MAX  64

enum auth_role { AUTH_NONE = 0, AUTH_USER = 1, AUTH_AGENT = 2, AUTH_ADMIN = 4, AUTH_VIEWER = 8 };

typedef struct auth auth;

/* Parse path. RET 0 with *out, or HF_EINVAL/HF_EIO with err naming the line. */
int  auth_load(const char *path, auth **out, char *err, size_t errlen);
/* The same from text (for tests and the fuzzer). */
int  auth_parse(const char *text, size_t len, auth **out, char *err, size_t errlen);
void auth_free(auth *a);
size_t auth_count(const auth *a);
/* "admin" -> AUTH_ADMIN, ...; AUTH_NONE for anything else. */
int  auth_role_parse(const char *s);
/* "admin", "user", "viewer", "agent", or "none". */
const char *auth_role_name(int role);
/* Role of token (one AUTH_* bit) or AUTH_NONE. */
int  auth_check(const auth *a, const char *token);
/* The same, and *user = the name of the holder of token (a string owned
 * by a, valid until auth_free; "" when the role is AUTH_NONE). The name
 * is selected without branching on which token matched. */
int  auth_check_user(const auth *a, const char *token, const char **user);
/* Is name a valid user name? */
int  auth_name_ok(const char *name);
/* Token out of an "Authorization: Bearer X" value; NULL when malformed. */
const char *auth_bearer(const char *header);
/* Constant-time equality of two NUL-terminated strings of at most AUTH_TOKEN_MAX bytes. */
int  auth_equal(const char *a, const char *b);

#endif
