#!/usr/bin/env bash
# test_eco_deploy.sh — the deployment files in deploy/ are valid and agree
# with the real programs (issue 8.3):
#
#   Kubernetes (deploy/k8s): every file parses as YAML (python3-yaml); the
#     objects the guide promises exist (StatefulSet with one replica and a
#     volumeClaimTemplate mounted where the config puts the database,
#     Services, a DaemonSet on GPU nodes asking for nvidia.com/gpu, a Secret,
#     a ConfigMap); every ConfigMap/Secret key a volume names exists; the
#     ConfigMap's scheduler.conf and agent.conf are accepted by the real
#     programs' --config/--print-config and point at the mounted paths; the
#     agent token is one of the scheduler's agent tokens; the checkpoint
#     store (checkpoint-dir) is on the scheduler's PVC and the agents have
#     no shared or per-node persistent volume (no hostPath, PVC or NFS:
#     their work directory is an emptyDir cache); `kubectl
#     kustomize` renders the directory (when kubectl is installed).
#   systemd (deploy/systemd): `systemd-analyze verify` passes (binaries
#     pointed at $HF_BIN), the hardening directives are there, and a
#     scheduler started with exactly the unit's Environment= settings and a
#     token file serves /healthz, refuses a request without a token (401)
#     and accepts the user token; the scheduler's checkpoint store is in
#     its StateDirectory and the agent needs no shared mount.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)
k8s=$root/deploy/k8s
sd=$root/deploy/systemd

# ---- Kubernetes ------------------------------------------------------------
py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import yaml' 2>/dev/null; then py=$p; break; fi
done
[[ -n $py ]] || hf_fail "no python3 with the yaml module (apt-get install python3-yaml)"
# all documents of all files, as one JSON array (null documents dropped)
"$py" - "$k8s"/*.yaml >"$HF_TMP/k8s.json" <<'EOF' || hf_fail "deploy/k8s: YAML does not parse"
import json, sys, yaml
docs = []
for path in sys.argv[1:]:
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if d is not None:
                d["_file"] = path.rsplit("/", 1)[-1]
                docs.append(d)
json.dump(docs, sys.stdout)
EOF
hf_log "ok: deploy/k8s: $(jq length "$HF_TMP/k8s.json") YAML documents parse"
K() { jq "$@" "$HF_TMP/k8s.json"; }
K -e '[.[] | select(.kind == "StatefulSet")] | length == 1' >/dev/null || hf_fail "want one StatefulSet"
K -e '[.[] | select(.kind == "DaemonSet")] | length == 1' >/dev/null || hf_fail "want one DaemonSet"
for kind in Service Secret ConfigMap; do
  K -e --arg k "$kind" '[.[] | select(.kind == $k)] | length >= 1' >/dev/null || hf_fail "no $kind"
done
K -e 'all(.[] | select(.kind != "Kustomization"); (.apiVersion | type == "string") and (.metadata.name | type == "string"))' >/dev/null \
  || hf_fail "a document lacks apiVersion or metadata.name"
sts=$(K -c '.[] | select(.kind == "StatefulSet")')
ds=$(K -c '.[] | select(.kind == "DaemonSet")')
jq -e '.spec.replicas == 1' >/dev/null <<<"$sts" || hf_fail "the scheduler StatefulSet must have exactly 1 replica (one SQLite writer)"
pvc=$(jq -er '.spec.volumeClaimTemplates[0].metadata.name' <<<"$sts") || hf_fail "StatefulSet has no volumeClaimTemplate"
data_mount=$(jq -er --arg v "$pvc" '.spec.template.spec.containers[0].volumeMounts[] | select(.name == $v) | .mountPath' <<<"$sts") \
  || hf_fail "the PVC '$pvc' is not mounted in the scheduler container"
svc_name=$(jq -r '.spec.serviceName' <<<"$sts")
K -e --arg n "$svc_name" 'any(.[]; .kind == "Service" and .metadata.name == $n)' >/dev/null \
  || hf_fail "StatefulSet serviceName '$svc_name' has no Service"
jq -e '.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] >= 1' >/dev/null <<<"$ds" \
  || hf_fail "the agent DaemonSet does not ask for nvidia.com/gpu"
jq -e '.spec.template.spec.nodeSelector | length >= 1' >/dev/null <<<"$ds" || hf_fail "the agent DaemonSet has no nodeSelector"
hf_log "ok: StatefulSet (1 replica, PVC '$pvc' at $data_mount), Services, GPU DaemonSet, Secret, ConfigMap"

# every configMap/secret key a volume names exists
cm_keys() { K -r --arg n "$1" '.[] | select(.kind == "ConfigMap" and .metadata.name == $n) | .data | keys[]'; }
sec_keys() { K -r --arg n "$1" '.[] | select(.kind == "Secret" and .metadata.name == $n) | ((.stringData // {}) + (.data // {})) | keys[]'; }
while IFS=$'\t' read -r type name key; do
  if [[ $type == configMap ]]; then keys=$(cm_keys "$name"); else keys=$(sec_keys "$name"); fi
  grep -qx -- "$key" <<<"$keys" || hf_fail "a volume uses $type $name key '$key', which does not exist"
done < <(K -r '.[] | select(.kind == "StatefulSet" or .kind == "DaemonSet") | .spec.template.spec.volumes[]
  | (if .configMap then ["configMap", .configMap.name, .configMap.items[].key]
     elif .secret then ["secret", .secret.secretName, .secret.items[].key] else empty end) | @tsv')
hf_log "ok: volumes name existing ConfigMap/Secret keys"

# mountPath + "/" + item path of the volume (in workload W) that holds KEY
mounted_path() {  # WORKLOAD_JSON KEY
  jq -er --arg k "$2" '.spec.template.spec as $s
    | [$s.volumes[] | select((.configMap.items // .secret.items // [])[]?.key == $k)][0] as $v
    | ($v.configMap.items // $v.secret.items)[] | select(.key == $k) | .path as $p
    | $s.containers[0].volumeMounts[] | select(.name == $v.name) | .mountPath + "/" + $p' <<<"$1"
}
K -r '.[] | select(.kind == "ConfigMap") | .data["scheduler.conf"]' >"$HF_TMP/scheduler.conf"
K -r '.[] | select(.kind == "ConfigMap") | .data["agent.conf"]' >"$HF_TMP/agent.conf"
env -u HYPERFARM_LISTEN -u HYPERFARM_DB -u HYPERFARM_TOKEN_FILE \
  "$HF_BIN/hyperfarm-scheduler" --config "$HF_TMP/scheduler.conf" --print-config >"$HF_TMP/s.json" \
  || hf_fail "hyperfarm-scheduler rejects the ConfigMap's scheduler.conf"
jq -e --arg m "$data_mount/" '.db | startswith($m)' >/dev/null <"$HF_TMP/s.json" \
  || hf_fail "scheduler.conf db '$(jq -r .db <"$HF_TMP/s.json")' is not on the PVC ($data_mount)"
want=$(mounted_path "$sts" tokens) || hf_fail "the Secret's tokens key is not mounted in the scheduler"
hf_assert_eq "$(jq -r '."token-file"' <"$HF_TMP/s.json")" "$want" "scheduler.conf token-file is the mounted Secret"
want=$(mounted_path "$sts" scheduler.conf) || hf_fail "scheduler.conf is not mounted"
jq -e --arg w "$want" '.spec.template.spec.containers[0].env[] | select(.name == "HYPERFARM_CONFIG") | .value == $w' \
  >/dev/null <<<"$sts" || hf_fail "HYPERFARM_CONFIG does not name the mounted scheduler.conf ($want)"
jq -e --arg m "$data_mount/" '."checkpoint-dir" | strings | startswith($m)' >/dev/null <"$HF_TMP/s.json" \
  || hf_fail "scheduler.conf checkpoint-dir '$(jq -r '."checkpoint-dir"' <"$HF_TMP/s.json")' is not on the PVC ($data_mount)"
hf_log "ok: scheduler.conf accepted by hyperfarm-scheduler --print-config; db and checkpoint store on the PVC, token file from the Secret"
jq -e 'all(.spec.template.spec.volumes[]; .hostPath == null and .persistentVolumeClaim == null and .nfs == null)' \
  >/dev/null <<<"$ds" || hf_fail "the agent DaemonSet mounts a hostPath, PVC or NFS volume: agents must need no shared or per-node volume"
jq -e '(.spec.template.spec.volumes[] | select(.name == "work") | .emptyDir) != null' >/dev/null <<<"$ds" \
  || hf_fail "the agent's work volume is not an emptyDir (a local cache)"
jq -e '.spec.volumeClaimTemplates == null' >/dev/null <<<"$ds" || hf_fail "the agent DaemonSet claims volumes"
hf_log "ok: agents use no shared or node volume (work dir: emptyDir cache)"

env -u HYPERFARM_URL -u HYPERFARM_AGENT_WORKDIR -u HYPERFARM_AGENT_TOKEN_FILE \
  "$HF_BIN/hyperfarm-agent" --config "$HF_TMP/agent.conf" --print-config >"$HF_TMP/a.json" \
  || hf_fail "hyperfarm-agent rejects the ConfigMap's agent.conf"
want=$(mounted_path "$ds" agent-token) || hf_fail "the Secret's agent-token is not mounted in the agent"
hf_assert_eq "$(jq -r '."token-file"' <"$HF_TMP/a.json")" "$want" "agent.conf token-file is the mounted Secret"
work=$(jq -er '.spec.template.spec.containers[0].volumeMounts[] | select(.name == "work") | .mountPath' <<<"$ds")
hf_assert_eq "$(jq -r .workdir <"$HF_TMP/a.json")" "$work" "agent.conf workdir is the hostPath mount"
svc_host=$(jq -r '.scheduler' <"$HF_TMP/a.json" | sed -E 's#^https?://([^.:/]+).*#\1#')
K -e --arg n "$svc_host" 'any(.[]; .kind == "Service" and .metadata.name == $n and any(.spec.ports[]; .port == 8080))' \
  >/dev/null || hf_fail "agent.conf scheduler URL names '$svc_host', not a Service on port 8080"
hf_log "ok: agent.conf accepted by hyperfarm-agent --print-config; scheduler URL is the Service"

# the agent's token is one of the scheduler's agent tokens
atok=$(K -r '.[] | select(.kind == "Secret") | .stringData["agent-token"]' | sed -n 's/^agent://p' | head -1)
[[ -n $atok ]] || hf_fail "Secret agent-token is not an 'agent:TOKEN' line"
K -r '.[] | select(.kind == "Secret") | .stringData.tokens' | grep -qx "agent:$atok" \
  || hf_fail "the agent token is not in the scheduler's token file"
hf_log "ok: the agents' token is an agent token of the scheduler"

if command -v kubectl >/dev/null; then
  kubectl kustomize "$k8s" >"$HF_TMP/rendered.yaml" 2>"$HF_TMP/kustomize.err" \
    || hf_fail "kubectl kustomize deploy/k8s: $(cat "$HF_TMP/kustomize.err")"
  hf_log "ok: kubectl kustomize renders $(grep -c '^kind:' "$HF_TMP/rendered.yaml") objects"
else
  hf_log "note: kubectl not installed: kustomize rendering not checked"
fi

# ---- systemd ---------------------------------------------------------------
for u in hyperfarm-scheduler hyperfarm-agent; do
  f=$sd/$u.service
  [[ -f $f ]] || hf_fail "missing $f"
  for d in NoNewPrivileges=yes ProtectSystem=strict Restart=on-failure StateDirectory= EnvironmentFile= \
           LoadCredential= CapabilityBoundingSet= ProtectKernelModules=yes PrivateTmp=yes; do
    grep -q "^$d" "$f" || hf_fail "$u.service lacks $d"
  done
  sed "s#/usr/local/bin/#$HF_BIN/#" "$f" >"$HF_TMP/$u.service"
done
grep -q '^DynamicUser=yes' "$sd/hyperfarm-scheduler.service" || hf_fail "scheduler unit: no DynamicUser"
grep -q '^User=' "$sd/hyperfarm-agent.service" || hf_fail "agent unit: no dedicated User"
ckd=$(sed -n 's/^Environment=HYPERFARM_CHECKPOINT_DIR=//p' "$sd/hyperfarm-scheduler.service")
state=/var/lib/$(sed -n 's/^StateDirectory=//p' "$sd/hyperfarm-scheduler.service")
[[ $ckd == "$state"/* ]] || hf_fail "scheduler unit: HYPERFARM_CHECKPOINT_DIR '$ckd' is not in its StateDirectory $state"
! grep -Eq '^(RequiresMountsFor|BindPaths|BindReadOnlyPaths)=' "$sd/hyperfarm-agent.service" \
  || hf_fail "agent unit: depends on a mount; agents must need no shared volume"
hf_log "ok: systemd: checkpoint store in the scheduler's StateDirectory ($ckd), no shared mount for the agent"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$HF_TMP/hyperfarm-scheduler.service" "$HF_TMP/hyperfarm-agent.service" \
    >"$HF_TMP/verify.out" 2>&1 || hf_fail "systemd-analyze verify: $(cat "$HF_TMP/verify.out")"
  hf_log "ok: systemd-analyze verify passes for both units"
else
  hf_log "note: systemd-analyze not installed: units not verified"
fi

# Start the scheduler the way the unit does: its Environment= settings,
# paths moved into the temp dir, the token file as the credential.
unit_env() { sed -n 's/^Environment=//p' "$1"; }
printf 'user:u-secret\nagent:a-secret\n' >"$HF_TMP/tokens"
port=$(hf_free_port)
(
  while IFS= read -r kv; do export "${kv?}"; done < <(unit_env "$sd/hyperfarm-scheduler.service")
  export HYPERFARM_LISTEN=127.0.0.1:$port HYPERFARM_DB=$HF_TMP/unit.db HYPERFARM_WEB=$root/web \
    HYPERFARM_CHECKPOINT_DIR=$HF_TMP/unit.checkpoints
  exec "$HF_BIN/hyperfarm-scheduler" --token-file "$HF_TMP/tokens"
) >"$HF_TMP/unit-scheduler.log" 2>&1 &
pid=$!
hf_track "$pid"
HF_URL=http://127.0.0.1:$port
hf_wait_http "$HF_URL/healthz" 15 || hf_fail "scheduler with the unit's environment did not start"
code=$(curl -s -o /dev/null -w '%{http_code}' "$HF_URL/api/v1/experiments")
hf_assert_eq "$code" 401 "unit-configured scheduler refuses a request without a token"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer u-secret' "$HF_URL/api/v1/experiments")
hf_assert_eq "$code" 200 "and accepts the user token"
head -1 "$HF_TMP/unit-scheduler.log" | jq -e . >/dev/null 2>&1 \
  || hf_fail "the unit sets HYPERFARM_LOG_FORMAT=json but the log is not JSON: $(head -1 "$HF_TMP/unit-scheduler.log")"
hf_log "ok: logs are JSON lines (HYPERFARM_LOG_FORMAT=json from the unit)"
hf_kill_pid "$pid"
hf_log "PASS"
