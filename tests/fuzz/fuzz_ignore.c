/*
 * fuzz_ignore.c — libFuzzer target for the .hyperfarmignore parser and
 * matcher (cli/cli_ignore.c): the input is the file's text; the rules it
 * parses to are matched against a fixed set of paths (files and
 * directories, deep ones included).
 *
 * Invariants: no crash, leak, out-of-bounds access or runaway time
 * whatever the text (matching is bounded by components x components);
 * a refused file comes with a message naming it; matching is a pure
 * function (the same answer twice).
 */
// FUZZ_SOURCES: common/hf_err.c cli/cli_ignore.c
// FUZZ_LIBS: -lpthread
#include "cli/cli_ignore.h"
#include "hf_err.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const paths[] = {
    "a", "a/b", "a/b/c", "train.py", "pkg/__pycache__", "pkg/__pycache__/x.pyc", "logs/run.log", ".git",
    ".git/objects/ab/cdef", "data/x/y/z/w/v/u/t/s/r/q/p/o/n/m/l/k/j/i/h/g/f/e/d/c/b/a.bin", "[x]", "*", "a b",
    "\\", "!x", "#y", "docs/a.pdf",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_ignore *ig = NULL;
    char err[256] = "";
    int rc = cli_ignore_parse((const char *)data, size, "fuzz", &ig, err, sizeof err);
    if (rc) {
        assert(!ig && strncmp(err, "fuzz", 4) == 0);
        return 0;
    }
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        for (int d = 0; d < 2; d++) {
            int m = cli_ignore_match(ig, paths[i], d);
            assert(m == 0 || m == 1);
            assert(m == cli_ignore_match(ig, paths[i], d));
        }
    cli_ignore_free(ig);
    return 0;
}
