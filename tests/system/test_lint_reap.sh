#!/usr/bin/env bash
# test_lint_reap.sh — the two guards of the suite catch what they are for.
#
# scripts/lint (`make lint`), run on a small fake tree beside a copy of
# itself: a circle of three files calling each other (two of them in a
# room folder) is reported with its files and the symbols that close it,
# while a table of function pointers naming a file is no call; a file
# over 800 lines, a function over 100, a folder over 40 sources and a
# pthread_create in code are each reported (one in a comment or a string
# is not); an object whose source is gone is ignored; a clean tree passes.
#
# tests/reap (tests/run runs every test under it): a command that leaves
# a process behind — in the background, disowned, or double-forked into
# its own session — fails with 98 and the leftovers are listed and
# killed; a clean command keeps its status (0, 77, or its failure), and
# a failing command that also leaks keeps its own failure status.
source "$(dirname "$0")/lib.sh"
command -v nm >/dev/null && command -v ctags >/dev/null || { echo "SKIP: nm or ctags missing"; exit 77; }
hf_setup

# ---- lint on a fake tree
F=$HF_TMP/tree
mkdir -p "$F/scripts"
cp "$HF_REPO/scripts/lint" "$F/scripts/lint"
for m in common scheduler agent trainer cli; do
  mkdir -p "$F/$m" "$F/build/rel/$m"
  echo "int ${m}_x(void) { return 1; }" >"$F/$m/x.c"
done
mkdir -p "$F/scheduler/core" "$F/build/rel/scheduler/core"
printf 'int b(int);\nint a(int n) { return n ? b(n - 1) : 0; }\n' >"$F/scheduler/core/a.c"
printf 'int c(int);\nint b(int n) { return n ? c(n - 1) : 0; }\n' >"$F/scheduler/core/b.c"
printf 'int a(int);\nint c(int n) { return n ? a(n - 1) : 0; }\n' >"$F/scheduler/c.c"
# an ops table naming a function of a file that calls back: data, not a call
printf 'int ops_use(void);\nint ops_f(void) { return ops_use(); }\nint (*const ops[])(void) = {ops_f};\n' >"$F/trainer/ops.c"
printf 'extern int (*const ops[])(void);\nint ops_use(void) { return 0; }\nint g(void) { return ops[0] != 0; }\n' >"$F/trainer/user.c"
cp "$F/common/x.c" "$F/cli/gone.c"
build() {
  local c
  for c in $(cd "$F" && find common scheduler agent trainer cli -name '*.c'); do
    cc -c -o "$F/build/rel/${c%.c}.o" "$F/$c" || hf_fail "cc $c"
  done
}
build
rm "$F/cli/gone.c"   # its object stays: stale, ignored
out=$("$F/scripts/lint" 2>&1) && hf_fail "lint passed a tree with a circle: $out"
grep -q "^circles: scheduler/: 3 files depend on each other: scheduler/c.c scheduler/core/a.c scheduler/core/b.c" <<<"$out" ||
  hf_fail "lint did not report the circle a -> b -> c -> a: $out"
grep -q "scheduler/c.c -> scheduler/core/a.c: a" <<<"$out" || hf_fail "lint did not name the symbol that closes the circle: $out"
grep -q "trainer/" <<<"$(grep '^circles' <<<"$out")" && hf_fail "lint took an ops table for a call: $out"
grep -q "cli/gone" <<<"$out" && hf_fail "lint read a stale object: $out"
hf_log "ok: lint reports the circle and its symbols, not the ops table, not a stale object"
rm "$F/scheduler/c.c" "$F/build/rel/scheduler/c.o"
out=$("$F/scripts/lint" 2>&1) || hf_fail "lint failed a clean tree: $out"
hf_log "ok: a clean tree passes"

{
  echo '/* pthread_create( in a comment */'
  echo 'static const char *s = "pthread_create(";'
  echo 'int f(void)'
  echo '{'
  for ((i = 0; i < 98; i++)); do echo '    s++;'; done
  echo '    return pthread_create(0, 0, 0, 0);'
  echo '}'
  for ((i = 0; i < 700; i++)); do echo '/* filler */'; done
} >"$F/agent/big.c"
for ((i = 0; i < 41; i++)); do echo "int w$i;" >"$F/cli/w$i.h"; done
out=$("$F/scripts/lint" 2>&1) && hf_fail "lint passed a tree over its limits: $out"
grep -q "^sizes: agent/big.c: 804 lines (limit 800)" <<<"$out" || hf_fail "no 'file over 800 lines': $out"
grep -q "^sizes: agent/big.c:3: function f is 102 lines (limit 100)" <<<"$out" || hf_fail "no 'function over 100 lines': $out"
grep -q "^sizes: cli/: 42 sources (limit 40)" <<<"$out" || hf_fail "no 'folder over 40 sources': $out"
[[ $(grep -c '^threads: agent/big.c:' <<<"$out") == 1 ]] && grep -q '^threads: agent/big.c:103: pthread_create' <<<"$out" ||
  hf_fail "expected exactly the pthread_create in code (line 103), not the comment or string: $out"
hf_log "ok: lint reports sizes and a bare pthread_create (not one in a comment or string)"

# ---- reap
reap=$HF_REPO/tests/reap
set +e
"$reap" --grace 1 bash -c 'sleep 300 & disown; (setsid sleep 301 &); exit 0' >"$HF_TMP/r1" 2>&1; rc1=$?
"$reap" bash -c 'exit 0' >"$HF_TMP/r2" 2>&1; rc2=$?
"$reap" bash -c 'exit 77' >/dev/null 2>&1; rc3=$?
"$reap" --grace 1 bash -c 'sleep 302 & exit 3' >"$HF_TMP/r4" 2>&1; rc4=$?
set -e
(( rc1 == 98 )) || hf_fail "a leaking command: reap exit $rc1, expected 98: $(cat "$HF_TMP/r1")"
[[ $(grep -c 'LEAKED .* sleep 30[01]' "$HF_TMP/r1") == 2 ]] || hf_fail "the two leftovers are not listed: $(cat "$HF_TMP/r1")"
(( rc2 == 0 && rc3 == 77 )) || hf_fail "clean commands: reap exit $rc2 and $rc3, expected 0 and 77"
[[ ! -s $HF_TMP/r2 ]] || hf_fail "reap printed for a clean command: $(cat "$HF_TMP/r2")"
(( rc4 == 3 )) && grep -q 'LEAKED .* sleep 302' "$HF_TMP/r4" || hf_fail "failing and leaking: exit $rc4 (want 3), $(cat "$HF_TMP/r4")"
for p in /proc/[0-9]*; do
  grep -qx 'sleep' "$p/comm" 2>/dev/null && grep -q 'sleep.30[012]' "$p/cmdline" 2>/dev/null &&
    hf_fail "a leftover survived reap: ${p#/proc/} $(tr '\0' ' ' <"$p/cmdline")"
done
hf_log "ok: reap fails and kills leftovers (98), keeps a clean or failing command's status"
hf_log "PASS"
