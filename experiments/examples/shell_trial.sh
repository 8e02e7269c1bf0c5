#!/usr/bin/env bash
# shell_trial.sh — a hyperfarm trial written as a plain shell script, with
# no hyperfarm library: it shows the whole trial contract (docs/design.md §4).
#
#   reads     HYPERFARM_HPARAMS      {"x": 0.2, "lr": 0.5, ...} (hparams "x", "lr", "sleep_ms")
#             HYPERFARM_MAX_EPOCHS   the budget the searcher grants (default 5)
#             HYPERFARM_CHECKPOINT_DIR  where checkpoints live (survives restarts)
#   reports   one line per epoch on stdout:
#             HYPERFARM {"epoch": 3, "step": 300, "val_acc": 0.87, "checkpoint": "..."}
#   resumes   from $HYPERFARM_CHECKPOINT_DIR/state (the last finished epoch)
#   stops     on SIGTERM (the agent's stop request; SIGKILL follows after the
#             grace period) or when ../control.json says "should_stop": true:
#             it saves its state and exits 0.
#
# experiments/shell-trial.json ships this folder as the trials' code context
# ("context": "examples") and runs it in the trial's own copy:
#     "command": ["bash", "shell_trial.sh"]
# Outside hyperfarm it runs too: ./shell_trial.sh  (checkpoints in ./)
set -u

ckdir=${HYPERFARM_CHECKPOINT_DIR:-.}
control=${HYPERFARM_CONTROL_FILE:-$ckdir/../control.json}
hparams=${HYPERFARM_HPARAMS:-'{}'}
epochs=${HYPERFARM_MAX_EPOCHS:-5}

# hparam NAME DEFAULT: a top-level number of the flat JSON object.
hparam() {
  local v
  v=$(printf '%s' "$hparams" | sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\(-\{0,1\}[0-9.eE+-]*\).*/\1/p")
  printf '%s' "${v:-$2}"
}
x=$(hparam x 0.5)
lr=$(hparam lr 0.5)
sleep_ms=$(hparam sleep_ms 100)

stop=0
trap 'stop=1' TERM INT

should_stop() {
  (( stop )) && return 0
  [[ -f $control ]] && grep -q '"should_stop": *true' "$control"
}

save() {   # atomic: write, then rename
  printf '%s\n' "$1" >"$ckdir/state.tmp" && mv -f "$ckdir/state.tmp" "$ckdir/state"
}

mkdir -p "$ckdir"
start=0
if [[ -f $ckdir/state ]]; then
  start=$(cat "$ckdir/state")
  echo "resuming after epoch $start"
fi

for (( e = start + 1; e <= epochs; e++ )); do
  # "training": sleep in short slices so a stop request is seen quickly
  for (( t = 0; t < sleep_ms; t += 20 )); do
    should_stop && break
    sleep 0.02
  done
  if should_stop; then
    echo "stop requested: state saved at epoch $((e - 1))"
    exit 0
  fi
  # a made-up objective, best at x = 0.3, improving with epochs
  acc=$(awk -v x="$x" -v lr="$lr" -v e="$e" 'BEGIN { printf "%.6f", 0.9 - (x-0.3)^2 - 0.3*exp(-lr*e) }')
  loss=$(awk -v a="$acc" 'BEGIN { printf "%.6f", 1 - a }')
  save "$e"
  echo "HYPERFARM {\"epoch\": $e, \"step\": $((e * 100)), \"val_acc\": $acc, \"train_loss\": $loss, \"checkpoint\": \"$ckdir/state\"}"
  echo "epoch $e done (x=$x lr=$lr)" >&2
done
exit 0
