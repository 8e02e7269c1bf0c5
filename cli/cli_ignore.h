/*
 * cli_ignore.h — the rules of a context directory's .hyperfarmignore
 * (docs/cli.md, "Shipping your code"), a subset of .gitignore that means
 * the same thing wherever it overlaps:
 *
 *   - one pattern a line; blank lines and lines starting with '#' are
 *     skipped; "\#" and "\!" start a pattern with a literal '#' or '!';
 *     trailing blanks are dropped, a trailing CR too (CRLF files);
 *   - '!' re-includes what an earlier pattern excluded; the last pattern
 *     that matches a path decides. As in git, nothing inside an excluded
 *     directory can be re-included: the packer does not enter it;
 *   - a trailing '/' matches directories only;
 *   - a pattern with a '/' at its start or in its middle is anchored at the
 *     context's root ("/build", "docs/x.pdf"); one without matches a name
 *     at any depth ("*.pyc", "__pycache__/");
 *   - within a path component, '*', '?' and '[...]' are fnmatch(3) globs
 *     (they never match '/'); a whole component "**" matches any number of
 *     components, zero included; "logs/STAR-STAR" (everything under logs,
 *     not logs itself),
 *     "a/STAR-STAR/b" (b anywhere under a; STAR-STAR is "**", which
 *     cannot be written in a C comment before a slash).
 *
 * Input is untrusted (a file in someone's repository, and the fuzz target
 * tests/fuzz/fuzz_ignore.c): at most CLI_IGNORE_MAX_RULES rules of at most
 * CLI_IGNORE_MAX_LINE bytes and CLI_IGNORE_MAX_COMPS components each;
 * matching is dynamic programming over (pattern, path) components, so its
 * cost is bounded by their product, whatever the "**" count.
 */
#ifndef HF_CLI_IGNORE_H
#define HF_CLI_IGNORE_H

#include <stddef.h>

#define CLI_IGNORE_MAX_RULES 10000
#define CLI_IGNORE_MAX_LINE  4096
#define CLI_IGNORE_MAX_COMPS 64      /* components of one pattern */
#define CLI_IGNORE_MAX_DEPTH 256     /* components of a path that can match */

typedef struct cli_ignore cli_ignore;

/* Parse the text (len bytes) of a .hyperfarmignore; name is used in errors.
 * RET 0 with *out (free with cli_ignore_free), HF_EINVAL with a message in
 * err naming the line (a NUL byte, a line or pattern over the limits, too
 * many rules), or HF_ENOMEM. */
int  cli_ignore_parse(const char *text, size_t len, const char *name, cli_ignore **out, char *err, size_t errlen);
/* Accepts NULL. */
void cli_ignore_free(cli_ignore *ig);
/* Rules parsed (comments and blank lines not counted). */
size_t cli_ignore_count(const cli_ignore *ig);

/* Is rel excluded? rel: a path relative to the context's root, components
 * separated by single '/', no leading "./" or '/'; is_dir: rel is a
 * directory. ig NULL: nothing is excluded. RET 1 excluded, 0 included. */
int cli_ignore_match(const cli_ignore *ig, const char *rel, int is_dir);

#endif
