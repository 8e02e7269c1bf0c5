# tests/system/netns_lib.sh — real separate "servers" for system tests.
#
# Source it FIRST in a test (it sources lib.sh itself):
#
#     source "$(dirname "$0")/netns_lib.sh"
#     netns_setup                          # hf_setup + the private network
#     netns_start_scheduler                # server "sched", 10.77.0.2
#     netns_start_agent a1 10.77.0.11 --slots 1
#     netns_start_agent a2 10.77.0.12 --slots 1
#     id=$(hf_submit "$json")              # lib.sh helpers talk to the scheduler
#     netns_poweroff a1                    # the server loses power
#
# What a "server" is: a process tree in its own network, mount and pid
# namespaces (`unshare --net --mount --pid --fork --mount-proc`). Its init
# is a small reaper loop (the "holder"); one end of a veth pair is moved
# into its network namespace as eth0 with the server's address, the other
# end is a port of the bridge hfbr0 (10.77.0.1/24). Its disk is a private
# tmpfs at /srv/hf, and it has a private /tmp (shared only when $HF_BIN
# lies under /tmp); the test's own temp dir ($HF_TMP) is covered by an
# empty read-only tmpfs, so a server sees
# nothing another server or the test wrote except what crossed the wire.
# Programs ($HF_BIN, the data sets under /usr/share) are visible to all,
# like software installed on every machine. Commands run inside with
# `nsenter -t INIT -n -m -p -r` (-r: its root, so a chroot stays one). netns_poweroff SIGKILLs the server's init:
# the kernel kills every process of its pid namespace at once, and its
# disk and network interface vanish with the last of them — no goodbye,
# no flush, exactly like pulling the plug.
#
# Isolation from the machine: on first source the test re-executes itself
# inside one outer `unshare --net --mount --pid --fork --mount-proc`, so no
# packet can leave the machine (the outer network namespace has only lo
# and the bridge), and the test's bash is pid 1 there: when it ends, for
# any reason, the kernel kills every server and process it started. The
# scheduler listens on a non-loopback address, so it runs with a token
# file (user and agent tokens, $HF_TOKEN is the user's); curl in the test
# sends it through $CURL_HOME/.curlrc, the CLI through $HYPERFARM_TOKEN.
#
# Where the machine cannot do this (no CAP_SYS_ADMIN, no unshare, nsenter
# or ip, no veth or bridge support), the test exits 77 — tests/run reports
# it as skipped, with the reason. Needs root (or an equivalent user
# namespace setup, not attempted here).
#
# Interface (add, don't change):
#   setup      netns_setup (instead of hf_setup)
#   servers    netns_server NAME IP [DISK_MB] (NAME ≤ 12 chars: the veth
#              is hv-NAME), netns_run NAME CMD... (foreground, inside),
#              netns_spawn NAME LOG CMD... (background; sets NETNS_PID,
#              the command's pid as this test sees it; call it directly,
#              not in $(...)), netns_poweroff NAME, netns_alive NAME,
#              netns_put NAME PATH (stdin to a file on the server's disk)
#   daemons    netns_start_scheduler [ARGS...] (server "sched", 10.77.0.2,
#              --db /srv/hf/hf.db; sets HF_URL HF_PORT HF_SCHED_PID
#              HF_DB (a path inside "sched")),
#              netns_start_agent NAME IP [ARGS...] (a server running an
#              agent with --workdir /srv/hf/work; sets HF_AGENT_PIDS[NAME];
#              $NETNS_AGENT_URL replaces $HF_URL as its scheduler URL);
#              both reuse a server the test started under that name first
#   bodies     netns_fake_experiment NAME SEARCHER_JSON MAX_RESTARTS ARGS...
#              (keeps every checkpoint: the tests inspect the store after the trials end)
#   checks     netns_verify_store STORE_DIR TRIAL... (nothing half-written),
#   variables  NETNS_INIT[NAME] (outer pid of a server's init), NETNS_IP[NAME],
#              HF_TOKEN, HF_AGENT_TOKEN, NETNS_DISK=/srv/hf
# Knobs: HF_NETNS_DISK_MB (default disk size, 256), HF_SCHED_ARGS and
# HF_AGENT_ARGS as in lib.sh.

netns_skip() { echo "SKIP: $*"; exit 77; }

# ---- outer namespace: check what is needed, then re-execute inside ----
# unshare makes every mount of the new mount namespace private (so nothing
# mounted here reaches the machine's own namespace) by changing the
# propagation of "/". In a chroot "/" is no mount point and that fails
# with EINVAL (../shared/tools/fresh-debian runs the tests so); there the
# propagation is left unchanged, but only when no mount of the namespace
# is shared (fresh-debian's own `unshare --mount` made them all private),
# else the test is skipped.
netns_probe() {   # extra unshare flags...: "" or the error
  unshare --net --mount --pid --fork --mount-proc "$@" \
    sh -c 'ip link add hfprobe0 type bridge && ip link add hfprobe1 type veth peer name hfprobe2 &&
           mount -t tmpfs hf-probe /mnt' 2>&1
}
if [[ -z ${HF_NETNS_INSIDE:-} ]]; then
  for _p in unshare nsenter ip bridge mount; do
    command -v "$_p" >/dev/null 2>&1 || netns_skip "$_p is not installed (util-linux, iproute2): the multi-server tests need it"
  done
  HF_NETNS_PROP=""
  if ! _err=$(netns_probe); then
    if [[ $_err == *propagation* ]] && ! grep -q ' shared:' /proc/self/mountinfo && netns_probe --propagation unchanged >/dev/null; then
      HF_NETNS_PROP="--propagation unchanged"   # a chroot whose mounts are all private
    else
      netns_skip "cannot create network/mount/pid namespaces, a bridge, a veth pair and a tmpfs here (needs root or CAP_SYS_ADMIN + CAP_NET_ADMIN): ${_err:0:200}"
    fi
  fi
  export HF_NETNS_PROP
  # --kill-child: if the runner's timeout kills unshare, the test's bash
  # (pid 1 inside) gets SIGTERM, runs its cleanup, and takes every server
  # with it when it exits.
  # shellcheck disable=SC2086
  HF_NETNS_INSIDE=1 exec unshare --net --mount --pid --fork --mount-proc $HF_NETNS_PROP --kill-child=SIGTERM \
    bash "$0" "$@"
  netns_skip "cannot execute unshare"
fi

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NETNS_DISK=/srv/hf
NETNS_BRIDGE=hfbr0
declare -gA NETNS_INIT=() NETNS_HOLDER=() NETNS_IP=()
NETNS_PID=""
HF_TOKEN=""
HF_AGENT_TOKEN=""

# hf_setup, then the outer network: lo and the bridge with 10.77.0.1/24
# (the test itself is "the operator's laptop" on the bridge); /srv becomes
# a tmpfs of this namespace (mount points for the servers' disks, nothing
# written to the real /srv); tokens.
netns_setup() {
  hf_setup
  trap 'netns_cleanup $?' EXIT
  ip link set lo up
  ip link add "$NETNS_BRIDGE" type bridge
  ip addr add 10.77.0.1/24 dev "$NETNS_BRIDGE"
  ip link set "$NETNS_BRIDGE" up
  mkdir -p /srv
  mount -t tmpfs -o size=1m,mode=0755 hf-srv /srv
  mkdir -p "$NETNS_DISK"
  HF_TOKEN=u-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  HF_AGENT_TOKEN=a-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  mkdir -p "$HF_TMP/curl"
  printf 'header = "Authorization: Bearer %s"\n' "$HF_TOKEN" >"$HF_TMP/curl/.curlrc"
  export CURL_HOME=$HF_TMP/curl HYPERFARM_TOKEN=$HF_TOKEN
  hf_log "outer namespace ready: bridge $NETNS_BRIDGE 10.77.0.1/24 (pid $$ here)"
}

netns_cleanup() {
  local rc=${1:-0} n
  set +e
  for n in "${!NETNS_INIT[@]}"; do netns_poweroff "$n" >/dev/null 2>&1; done
  umount /srv 2>/dev/null
  hf_cleanup "$rc"
}

# The pid of a child of PID (the first one listed), empty when none yet.
netns_child_of() {
  local c
  c=$(cat "/proc/$1/task/$1/children" 2>/dev/null) || return 0
  echo "${c%% *}"
}

# NAME IP [DISK_MB]: start a server (see the header) and wait until it is
# on the network.
netns_server() {
  local name=$1 ip=$2 mb=${3:-${HF_NETNS_DISK_MB:-256}} holder init i
  [[ ${#name} -le 12 && $name =~ ^[a-z0-9-]+$ ]] || hf_fail "netns_server: bad server name '$name'"
  [[ -z ${NETNS_INIT[$name]:-} ]] || hf_fail "netns_server: server $name is already up"
  # The init: reaps orphans (bash reaps every child on SIGCHLD), ignores
  # the signals an init ignores, never exits on its own.
  # shellcheck disable=SC2086
  unshare --net --mount --pid --fork --mount-proc ${HF_NETNS_PROP:-} \
    bash -c 'trap "" TERM INT HUP; while :; do sleep 5; done' "hf-server-$name" \
    </dev/null >/dev/null 2>&1 &
  holder=$!
  disown "$holder"   # its SIGKILL at power-off is no job report
  init=""
  for ((i = 0; i < 100; i++)); do
    init=$(netns_child_of "$holder")
    [[ -n $init ]] && tr '\0' ' ' <"/proc/$init/cmdline" 2>/dev/null | grep -q "hf-server-$name" && break
    init=""
    sleep 0.05
  done
  [[ -n $init ]] || hf_fail "server $name: its namespace holder did not start"
  NETNS_HOLDER[$name]=$holder
  NETNS_INIT[$name]=$init
  NETNS_IP[$name]=$ip
  # network: veth pair, eth0 inside with the address, the other end on the bridge
  ip link add "hv-$name" type veth peer name eth0 netns "$init" || hf_fail "server $name: veth"
  ip link set "hv-$name" master "$NETNS_BRIDGE" up
  nsenter -t "$init" -n sh -c "ip link set lo up && ip addr add $ip/24 dev eth0 && ip link set eth0 up" \
    || hf_fail "server $name: cannot configure $ip"
  # disks: private /srv/hf and /tmp (unless the programs live under /tmp);
  # the test's temp dir hidden
  local privtmp=1
  [[ $(readlink -f "$HF_BIN") == /tmp/* ]] && privtmp=0
  nsenter -t "$init" -m -r --wd=/ sh -c "mount -t tmpfs -o size=${mb}m,mode=0755 hf-disk-$name $NETNS_DISK &&
      if [ $privtmp = 1 ]; then mount -t tmpfs -o size=64m,mode=1777 hf-tmp-$name /tmp; fi &&
      if [ -d '$HF_TMP' ]; then mount -t tmpfs -o size=4k,ro hf-hidden '$HF_TMP'; fi" \
    || hf_fail "server $name: cannot mount its disk"
  hf_wait_for 10 netns_link_ready "$name" || hf_fail "server $name: its link did not come up (eth0 and bridge port hv-$name)"
  hf_log "server $name up: $ip, init pid $init, disk ${mb} MiB at $NETNS_DISK"
}

# NAME: eth0 inside is up and the bridge forwards on its port.
netns_link_ready() {
  nsenter -t "${NETNS_INIT[$1]}" -n ip -o link show eth0 | grep -q 'state UP' &&
    bridge link show dev "hv-$1" | grep -q 'state forwarding'
}

netns_alive() { [[ -n ${NETNS_INIT[$1]:-} ]] && hf_alive "${NETNS_INIT[$1]}"; }

# NAME CMD...: run CMD inside server NAME (its network, mounts and pids),
# in the foreground, from / of its filesystem.
netns_run() {
  local name=$1; shift
  netns_alive "$name" || hf_fail "netns_run: server $name is not up"
  nsenter -t "${NETNS_INIT[$name]}" -n -m -p -r --wd=/ "$@"
}

# NAME PATH: copy stdin to PATH on server NAME's filesystem (provisioning).
netns_put() {
  netns_run "$1" sh -c 'umask 077; mkdir -p "$(dirname "$1")" && cat >"$1"' sh "$2"
}

# NAME LOG CMD...: start CMD inside server NAME in the background, output
# appended to LOG (a file of this test: the server's console). Sets
# NETNS_PID to CMD's pid as this test sees it (nsenter forks to enter the
# pid namespace; the pid is that child's).
netns_spawn() {
  local name=$1 log=$2 ns i; shift 2
  netns_alive "$name" || hf_fail "netns_spawn: server $name is not up"
  nsenter -t "${NETNS_INIT[$name]}" -n -m -p -r --wd=/ "$@" </dev/null >>"$log" 2>&1 &
  ns=$!
  disown "$ns"
  NETNS_PID=""
  for ((i = 0; i < 100; i++)); do
    NETNS_PID=$(netns_child_of "$ns")
    [[ -n $NETNS_PID ]] && break
    hf_alive "$ns" || break
    sleep 0.02
  done
  [[ -n $NETNS_PID ]] || hf_fail "netns_spawn: $* did not start in server $name (see $log)"
  hf_track "$ns"
}

# NAME: the server loses power. SIGKILL of its init kills every process
# of its pid namespace at once; its disk and eth0 go with them.
netns_poweroff() {
  local name=$1 init=${NETNS_INIT[$1]:-} holder=${NETNS_HOLDER[$1]:-}
  [[ -n $init ]] || return 0
  kill -KILL "$init" 2>/dev/null
  hf_wait_for 10 bash -c "! kill -0 $holder 2>/dev/null" || hf_log "warning: server $name's holder $holder still there"
  # The kernel tears the namespace down asynchronously; delete the bridge
  # port now so the name can be reused.
  ip link del "hv-$name" 2>/dev/null || true
  unset "NETNS_INIT[$name]" "NETNS_HOLDER[$name]"
  unset "HF_AGENT_PIDS[$name]"
  [[ $name == "${NETNS_SCHED:-}" ]] && HF_SCHED_PID=""
  hf_log "server $name powered off"
  return 0
}

# [ARGS...]: server "sched" (10.77.0.2) running the scheduler on port 8080
# with its database (and the checkpoint store beside it) on its own disk,
# authentication on. A test may start the server itself first (netns_server
# sched 10.77.0.2) to prepare its disk; it is reused.
netns_start_scheduler() {
  NETNS_SCHED=sched
  netns_alive sched || netns_server sched 10.77.0.2
  printf 'user:%s\nagent:%s\n' "$HF_TOKEN" "$HF_AGENT_TOKEN" | netns_put sched "$NETNS_DISK/tokens"
  HF_PORT=8080
  HF_URL=http://10.77.0.2:$HF_PORT
  HF_DB=$NETNS_DISK/hf.db
  # shellcheck disable=SC2086
  netns_spawn sched "$HF_TMP/scheduler.log" "$HF_BIN/hyperfarm-scheduler" --listen "10.77.0.2:$HF_PORT" \
    --db "$HF_DB" --token-file "$NETNS_DISK/tokens" ${HF_SCHED_ARGS:-} "$@"
  HF_SCHED_PID=$NETNS_PID
  hf_wait_http "$HF_URL/healthz" 15 || hf_fail "scheduler did not answer $HF_URL/healthz in 15 s"
  hf_log "scheduler pid $HF_SCHED_PID on $HF_URL (server sched)"
}

# NAME IP [ARGS...]: a new server NAME at IP running an agent (work
# directory on its own disk, agent token); waits until it registered. The
# agent talks to $NETNS_AGENT_URL when set (e.g. a proxy inside its
# server that the test started with netns_server first), else to $HF_URL.
netns_start_agent() {
  local name=$1 ip=$2; shift 2
  netns_alive "$name" || netns_server "$name" "$ip"
  printf 'agent:%s\n' "$HF_AGENT_TOKEN" | netns_put "$name" "$NETNS_DISK/agent-token"
  # shellcheck disable=SC2086
  netns_spawn "$name" "$HF_TMP/agent-$name.log" "$HF_BIN/hyperfarm-agent" --scheduler "${NETNS_AGENT_URL:-$HF_URL}" --name "$name" \
    --gpus none --workdir "$NETNS_DISK/work" --token-file "$NETNS_DISK/agent-token" ${HF_AGENT_ARGS:-} "$@"
  HF_AGENT_PIDS[$name]=$NETNS_PID
  hf_log "agent $name pid $NETNS_PID on server $name ($ip) (args: $*)"
  hf_wait_for 15 hf_agent_registered "$name" || hf_fail "agent $name did not register in 15 s"
}

# NAME SEARCHER_JSON MAX_RESTARTS FAKE_TRIAL_ARGS...: print an experiment
# running tests/progs/fake_trial with those arguments, objective val_acc,
# hyperparameters x (uniform 0..1) and lr (log 0.01..1).
netns_fake_experiment() {
  local name=$1 searcher=$2 restarts=$3
  shift 3
  jq -n --args '$ARGS.positional' -- "$HF_BIN/tests/fake_trial" "$@" |
    jq -c --arg n "$name" --argjson s "$searcher" --argjson r "$restarts" '{
      name: $n, objective: {metric: "val_acc", goal: "maximize"}, searcher: $s,
      hyperparameters: {x: {type: "double", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1}},
      trial: {command: ., max_restarts: $r},
      checkpoint_policy: {keep_latest: 100000, keep_best_trials: 100000}}'
}

# STORE_DIR TRIAL...: nothing half-written in the scheduler's checkpoint
# store (server "sched", directory STORE_DIR there): every checkpoint the
# API lists for the TRIALs downloads with its listed size and hashes to
# its name, every object file on the scheduler's disk hashes to its name,
# and tmp/ is empty. Fails the test otherwise.
netns_verify_store() {
  local dir=$1 t row sha size listed=0 bad left n
  shift
  for t in "$@"; do
    for row in $(hf_get "/api/v1/trials/$t/checkpoints" | jq -c '.checkpoints[] | {sha256, size}'); do
      sha=$(jq -r .sha256 <<<"$row"); size=$(jq -r .size <<<"$row")
      curl -fsS -m 10 -o "$HF_TMP/obj" "$HF_URL/api/v1/checkpoints/$sha" || hf_fail "cannot download listed object $sha"
      [[ "$(stat -c %s "$HF_TMP/obj")/$(sha256sum "$HF_TMP/obj" | cut -d' ' -f1)" == "$size/$sha" ]] ||
        hf_fail "listed object $sha downloads with another size or hash"
      listed=$((listed + 1))
    done
  done
  (( listed >= 1 )) || hf_fail "the store lists no checkpoint of trials $*"
  bad=$(netns_run sched sh -c 'cd "$1" && for f in objects/*/*; do
          [ -f "$f" ] || continue; h=$(sha256sum "$f" | cut -d" " -f1); [ "$h" = "${f##*/}" ] || echo "$f"; done' sh "$dir")
  [[ -z $bad ]] || hf_fail "objects in the store whose content does not match their name: $bad"
  # An upload whose connection was cut mid-body is removed when the
  # scheduler sees the connection end: at once when the peer closes it,
  # at the latest after --request-timeout (15 s) when it just stops.
  local t
  for t in $(seq 40); do
    left=$(netns_run sched sh -c 'ls -A "$1/tmp" 2>/dev/null' sh "$dir")
    [[ -z $left ]] && break
    sleep 0.5
  done
  [[ -z $left ]] || hf_fail "temp files left in the store after 20 s: $left"
  n=$(netns_run sched sh -c 'ls "$1"/objects/*/* | wc -l' sh "$dir")
  hf_log "ok: $listed listed checkpoints download complete; $n object files in $dir, each hashing to its name; tmp/ empty"
}

