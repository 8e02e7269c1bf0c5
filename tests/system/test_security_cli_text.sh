#!/usr/bin/env bash
# test_security_cli_text.sh — text that users wrote never drives the
# terminal of whoever reads it with the CLI (issue 27 point 5; docs/cli.md
# "Text from the scheduler").
#
# An experiment whose name, description and a hyperparameter value hold
# escape sequences (clear screen, window title, OSC 8 link, C1 CSI,
# a right-to-left override), and a trial that prints escape sequences:
#   - `show` (before: the name's sequences went out raw), `ls`, `agents`
#     and `watch --plain` print none of them, but the readable text;
#   - `logs` to a pipe gives the trial's bytes as they are (it is the
#     trial's own output: docs/cli.md), and to a terminal (script(1))
#     strips the sequences.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent
hf_setup
command -v script >/dev/null || hf_fail "script(1) (bsdutils) is needed"

hf_start_scheduler
hf_start_agent t1 --slots 1

jq -n '{
  name: "evil\u001b[2J\u001b]0;owned\u0007name\u009b31m\u202e",
  description: "line one \u001b]8;;http://x.invalid\u001b\\link\u001b]8;;\u001b\\\nline two \u001b[5mblink",
  objective: {metric: "acc", goal: "maximize"},
  searcher: {name: "grid", max_trials: 1},
  hyperparameters: {opt: {type: "categorical", values: ["a\u001b[31mdam"]}},
  trial: {command: ["sh", "-c", "printf '\''before \\033]0;title\\007after \\033[2Jcleared\\n'\''"], max_restarts: 0}
}' >"$HF_TMP/evil.json"
id=$(hf_cli submit "$HF_TMP/evil.json")
[[ $id =~ ^[0-9]+$ ]] || hf_fail "submit printed '$id'"
hf_wait_experiment "$id" 60
tid=$(hf_get "/api/v1/experiments/$id/trials" | jq -r '.trials[0].id')

has_control() {   # FILE: any ESC, C1 CSI/OSC (UTF-8) or RLO?
  LC_ALL=C grep -qP '\x1b|\xc2[\x80-\x9f]|\xe2\x80\xae' "$1"
}
for cmd in "show $id" "ls" "agents" "watch --plain $id"; do
  # shellcheck disable=SC2086
  hf_cli $cmd >"$HF_TMP/out" 2>&1 || hf_fail "hyperfarm $cmd failed: $(cat "$HF_TMP/out")"
  ! has_control "$HF_TMP/out" || hf_fail "hyperfarm $cmd printed control sequences: $(od -c "$HF_TMP/out" | head -20)"
  hf_log "ok: hyperfarm $cmd prints no control sequence"
done
hf_cli show "$id" >"$HF_TMP/show"
grep -q 'evilname' "$HF_TMP/show" || hf_fail "show lost the name's text: $(cat "$HF_TMP/show")"
grep -q 'line one link' "$HF_TMP/show" && grep -q 'line two blink' "$HF_TMP/show" \
  || hf_fail "show lost the description's text: $(cat "$HF_TMP/show")"

hf_cli logs "$tid" >"$HF_TMP/raw"
has_control "$HF_TMP/raw" || hf_fail "logs to a pipe should be the trial's bytes: $(od -c "$HF_TMP/raw" | head)"
# On a terminal: script(1) gives the CLI one. A machine without a devpts
# mount (a chroot, as CI's fresh root is) gets a private devpts instance in
# a mount namespace of its own, when root may make one.
on_tty() {
  if script -qec true /dev/null >/dev/null 2>&1 </dev/null; then
    script -qec "$1" /dev/null </dev/null
  elif [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
    unshare --mount sh -c 'mkdir -p /dev/pts && mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts &&
      mount --bind /dev/pts/ptmx /dev/ptmx && script -qec "$0" /dev/null </dev/null' "$1"
  else
    hf_fail "no pseudo-terminal here (script: $(script -qec true /dev/null 2>&1 </dev/null | head -1))"
  fi
}
on_tty "$HF_BIN/hyperfarm --url $HF_URL logs $tid" >"$HF_TMP/tty"
grep -q 'before after cleared' "$HF_TMP/tty" || hf_fail "logs on a terminal: $(od -c "$HF_TMP/tty" | head)"
! has_control "$HF_TMP/tty" || hf_fail "logs on a terminal printed control sequences: $(od -c "$HF_TMP/tty" | head)"
hf_log "ok: logs are raw to a pipe, cleaned on a terminal"
hf_log "PASS"
