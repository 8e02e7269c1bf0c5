#!/usr/bin/env bash
# test_fault_diskfull.sh — the store's filesystem fills up.
#
# The database lives on its own 16 MiB tmpfs. After one experiment is
# acknowledged, a filler file takes all the free space and the test keeps
# submitting experiments (about 30 KiB each) until the scheduler answers
# 507. It must then
#   - answer 507 with a JSON {"error": ...} body (never 500, never crash),
#   - keep serving reads (GET of every acknowledged experiment: 200),
#   - keep a consistent database (PRAGMA integrity_check = ok, read-only),
#   - recover by itself when space returns: once the filler is deleted a
#     submission succeeds within 10 s, with no restart;
#   - have lost nothing acknowledged, also after a SIGTERM and a restart;
#   - lose no metric of a trial that reports every 0.2 s through it all (the
#     agent's heartbeats are refused with 507 too; it must re-send).
# Needs mount(2) (root or CAP_SYS_ADMIN) for the tmpfs; where that is not
# available the test is skipped, saying so: an `ulimit -f` limit gives
# EFBIG/SIGXFSZ, not ENOSPC, so it would not test the same path.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl sqlite3

store=$FT_DIR/store
mkdir -p "$store"
mount -t tmpfs -o size=16m,mode=0700 hf-fault-tmpfs "$store" 2>"$FT_DIR/mount.err" ||
  ft_skip "cannot mount a tmpfs here ($(cat "$FT_DIR/mount.err")); run as root to test a full disk"
FT_MOUNTS+=("$store")
FT_DB=$store/hf.db
ft_start_scheduler

big_exp() {   # an experiment of ~30 KiB: many hyperparameters
  jq -cn --arg n "$1" '{name: $n, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1, max_concurrent_trials: 1},
    hyperparameters: ([range(0; 250)] | map({key: "p\(.)_padding_padding_padding_padding_padding", value: {type: "double", min: 0, max: 1}}) | from_entries),
    trial: {command: ["true"], max_restarts: 0}}'
}
acked=()
id=$(ft_submit "$(big_exp first)"); acked+=("$id")
# A trial reporting every 0.2 s while the disk is full: the agent's
# heartbeats get 507 too, and it must keep and re-send what was refused.
ft_start_agent a1 1
texp=$(ft_submit "$(ft_experiment reporter 1 1 0 --epochs 40 --sleep-ms 200)"); acked+=("$texp")
ft_wait 20 "the reporting trial running" bash -c "curl -sf '$FT_URL/api/v1/experiments/$texp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"

# Fill the filesystem (dd stops at ENOSPC).
dd if=/dev/zero of="$store/filler" bs=64k 2>/dev/null
ft_log "filesystem full: $(df -k "$store" | awk 'NR==2 {print $4}') kB free"
got507=0
for ((i = 0; i < 300; i++)); do
  ft_api POST /api/v1/experiments "$(big_exp "fill-$i")"; b=$FT_BODY
  case $FT_STATUS in
    201) acked+=("$(jq -r .id <<<"$b")") ;;
    507) got507=1; break ;;
    *) ft_fail "submission on a full disk answered HTTP $FT_STATUS (want 507): $b" ;;
  esac
done
(( got507 )) || ft_fail "300 submissions on a full filesystem and never a 507"
jq -e '.error | type == "string"' <<<"$b" >/dev/null || ft_fail "507 without a JSON error body: $b"
ft_log "507 after ${#acked[@]} acknowledged experiments: $(jq -c . <<<"$b")"
kill -0 "$SCHED_PID" 2>/dev/null || ft_fail "the scheduler died on a full disk"
for id in "${acked[@]}"; do
  ft_api GET "/api/v1/experiments/$id"
  [[ $FT_STATUS == 200 ]] || ft_fail "GET of acknowledged experiment $id on a full disk -> HTTP $FT_STATUS"
done
ic=$(sqlite3 "file:$FT_DB?mode=ro" 'PRAGMA integrity_check' 2>&1)
[[ $ic == ok ]] || ft_fail "integrity_check while full: $ic"
ft_api POST /api/v1/experiments "$(big_exp still-full)"; b=$FT_BODY
[[ $FT_STATUS == 507 ]] || ft_fail "a second write on the full disk answered $FT_STATUS: $b"

sleep 2     # the trial keeps reporting into a full disk
rm -f "$store/filler"
ft_log "space returned: $(df -k "$store" | awk 'NR==2 {print $4}') kB free"
recovered=0
for ((i = 0; i < 50; i++)); do
  ft_api POST /api/v1/experiments "$(big_exp "after-$i")"; b=$FT_BODY
  if [[ $FT_STATUS == 201 ]]; then acked+=("$(jq -r .id <<<"$b")"); recovered=1; break; fi
  sleep 0.2
done
(( recovered )) || ft_fail "no successful submission within 10 s after space returned (last: HTTP $FT_STATUS $b)"
ft_log "recovered without a restart"
tid=$(ft_trials "$texp" | jq -r '.trials[0].id')
ft_wait 30 "the reporting trial COMPLETED" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid' | jq -e '.state == \"COMPLETED\"' >/dev/null"
n=$(ft_get "/api/v1/trials/$tid/metrics?name=val_acc&limit=1000" | jq '[.metrics[].step] | unique | length')
[[ $n == 40 ]] || ft_fail "the trial that reported through the full disk has $n of 40 epochs' val_acc"
ft_log "the trial reporting through the full disk kept all 40 epochs"

kill -TERM "$SCHED_PID"
ft_wait_gone "$SCHED_PID" 10 || ft_fail "the scheduler did not exit within 10 s of SIGTERM"
ic=$(sqlite3 "$FT_DB" 'PRAGMA integrity_check' 2>&1)
[[ $ic == ok ]] || ft_fail "integrity_check after shutdown: $ic"
ft_start_scheduler
for id in "${acked[@]}"; do
  ft_api GET "/api/v1/experiments/$id"
  [[ $FT_STATUS == 200 ]] || ft_fail "acknowledged experiment $id lost after the restart (HTTP $FT_STATUS)"
done
ft_log "PASS: full disk -> 507, reads served, no corruption, recovered, ${#acked[@]} acknowledged experiments intact"
