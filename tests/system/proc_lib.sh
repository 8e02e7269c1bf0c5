# tests/system/proc_lib.sh — the processes a test started, read from /proc.
# Sourced by lib.sh and fault_lib.sh (their cleanup traps end whatever is
# still running below the test's shell); defines functions only.

# Pids of every process below this shell (children, theirs...), read from
# /proc without a subshell of its own in the list; deepest last.
hf_descendants() {
  local d pid line rest ppid i
  local -A kids=()
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    read -r line 2>/dev/null <"$d/stat" || continue
    rest=${line##*) }           # after "pid (comm) ": state ppid ...
    set -- $rest
    [[ $1 == Z || $1 == X ]] && continue
    ppid=$2
    kids[$ppid]+=" $pid"
  done
  local todo=($$) out=()
  for ((i = 0; i < ${#todo[@]}; i++)); do
    for pid in ${kids[${todo[i]}]:-}; do
      [[ $pid == "$BASHPID" ]] && continue
      todo+=("$pid"); out+=("$pid")
    done
  done
  echo "${out[@]}"
}
