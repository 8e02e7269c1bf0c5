#!/usr/bin/env bash
# test_eco_deploy_standby.sh — the standby's deployment files agree with the
# real programs (issue 31.5; docs/deploy.md "A standby scheduler"):
#
#   Kubernetes (deploy/k8s-standby, an overlay of deploy/k8s): every file
#     parses (python3-yaml); `kubectl kustomize` renders the base's objects
#     plus the standby's StatefulSet (one replica, its own
#     volumeClaimTemplate, anti-affinity to the primary's pods), headless
#     Service and ConfigMap (when kubectl is installed); the standby's
#     scheduler.conf and the patched primary's scheduler.conf and agent.conf
#     are accepted by the real programs' --config/--print-config, with
#     standby-of/peers naming the other pod's DNS name, and the agents
#     listing both URLs; each peer URL names a Service that exists.
#   systemd (deploy/systemd/hyperfarm-scheduler-standby.service):
#     `systemd-analyze verify` passes, the hardening of the primary's unit is
#     there, it conflicts with the primary's unit, and its ExecStart with a
#     standby.env's settings is a command line the real scheduler accepts
#     (--print-config shows standby-of, peers and failover-after).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)
ov=$root/deploy/k8s-standby
sd=$root/deploy/systemd

py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import yaml' 2>/dev/null; then py=$p; break; fi
done
[[ -n $py ]] || hf_fail "no python3 with the yaml module (apt-get install python3-yaml)"

# ---- Kubernetes ----------------------------------------------------------------
"$py" - "$ov"/*.yaml >"$HF_TMP/ov.json" <<'EOF' || hf_fail "deploy/k8s-standby: YAML does not parse"
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
K() { jq "$@" "$HF_TMP/ov.json"; }
sts=$(K -c '.[] | select(.kind == "StatefulSet")')
jq -e '.metadata.name == "hyperfarm-scheduler-standby" and .spec.replicas == 1 and (.spec.volumeClaimTemplates | length == 1)' \
  <<<"$sts" >/dev/null || hf_fail "the standby StatefulSet: one replica and its own volumeClaimTemplate: $(jq -c '.spec | {replicas, volumeClaimTemplates}' <<<"$sts")"
jq -e '.spec.template.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector.matchLabels["app.kubernetes.io/component"] == "scheduler"' \
  <<<"$sts" >/dev/null || hf_fail "the standby is not kept off the primary's node (podAntiAffinity)"
hf_log "ok: standby StatefulSet: 1 replica, own PVC, not on the primary's node"

conf() {   # OBJECT-NAME KEY: a ConfigMap's key from the overlay's files
  K -r --arg n "$1" --arg k "$2" '.[] | select(.kind == "ConfigMap" and .metadata.name == $n) | .data[$k]'
}
conf hyperfarm-standby-config scheduler.conf >"$HF_TMP/standby.conf"
conf hyperfarm-config scheduler.conf >"$HF_TMP/primary.conf"
conf hyperfarm-config agent.conf >"$HF_TMP/agent.conf"
for f in standby primary agent; do [[ -s $HF_TMP/$f.conf ]] || hf_fail "deploy/k8s-standby has no $f configuration"; done
printf 'agent:a-secret\n' >"$HF_TMP/agent-token"
sc=$("$HF_BIN/hyperfarm-scheduler" --config "$HF_TMP/standby.conf" --print-config 2>&1) ||
  hf_fail "the standby's scheduler.conf is refused: $sc"
pc=$("$HF_BIN/hyperfarm-scheduler" --config "$HF_TMP/primary.conf" --print-config 2>&1) ||
  hf_fail "the primary's patched scheduler.conf is refused: $pc"
ac=$("$HF_BIN/hyperfarm-agent" --config "$HF_TMP/agent.conf" --print-config 2>&1) ||
  hf_fail "the patched agent.conf is refused: $ac"
P=http://hyperfarm-scheduler-0.hyperfarm-scheduler-headless.hyperfarm.svc:8080
S=http://hyperfarm-scheduler-standby-0.hyperfarm-scheduler-standby.hyperfarm.svc:8080
jq -e --arg p "$P" '.["standby-of"] == $p and (.peers | tostring | contains($p))' <<<"$sc" >/dev/null ||
  hf_fail "the standby's config: standby-of/peers are not the primary's pod: $(jq -c '{"standby-of", peers}' <<<"$sc")"
jq -e --arg s "$S" '(.peers | tostring | contains($s)) and (.["standby-of"] == null)' <<<"$pc" >/dev/null ||
  hf_fail "the primary's config: peers is not the standby's pod: $(jq -c '{"standby-of", peers}' <<<"$pc")"
jq -e --arg p "$P" --arg s "$S" '.scheduler | tostring | contains($p) and contains($s)' <<<"$ac" >/dev/null ||
  hf_fail "the agents do not list both schedulers: $(jq -c .scheduler <<<"$ac")"
hf_log "ok: the standby follows $P, the primary's peer is $S, the agents know both"

if command -v kubectl >/dev/null; then
  kubectl kustomize "$ov" >"$HF_TMP/rendered.yaml" 2>"$HF_TMP/kustomize.err" ||
    hf_fail "kubectl kustomize deploy/k8s-standby: $(cat "$HF_TMP/kustomize.err")"
  "$py" -c 'import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)' \
    "$HF_TMP/rendered.yaml" >"$HF_TMP/rendered.json"
  R() { jq "$@" "$HF_TMP/rendered.json"; }
  R -e '[.[] | select(.kind == "StatefulSet") | .metadata.name] | sort == ["hyperfarm-scheduler", "hyperfarm-scheduler-standby"]' >/dev/null ||
    hf_fail "rendered: want the primary's and the standby's StatefulSets"
  for svc in hyperfarm-scheduler-headless hyperfarm-scheduler-standby; do
    R -e --arg n "$svc" '[.[] | select(.kind == "Service" and .metadata.name == $n and .spec.clusterIP == "None" and .spec.publishNotReadyAddresses == true)] | length == 1' \
      >/dev/null || hf_fail "rendered: headless Service $svc with publishNotReadyAddresses (a pod's peer must resolve before it is ready)"
  done
  R -e --arg p "$P" '[.[] | select(.kind == "ConfigMap" and .metadata.name == "hyperfarm-config") | .data["agent.conf"] | contains($p)] == [true]' \
    >/dev/null || hf_fail "rendered: the agents' config was not patched"
  hf_log "ok: kubectl kustomize renders $(R length) objects: both StatefulSets, headless Services, patched configs"
else
  hf_log "note: kubectl not installed: kustomize rendering not checked"
fi

# ---- systemd ---------------------------------------------------------------------
u=$sd/hyperfarm-scheduler-standby.service
[[ -f $u ]] || hf_fail "missing $u"
while IFS= read -r d; do
  grep -qxF -- "$d" "$u" || hf_fail "the standby unit lacks the primary unit's $d"
done < <(grep -E '^(NoNewPrivileges|ProtectSystem|PrivateTmp|ProtectKernelModules|DynamicUser|StateDirectory|LoadCredential|Restart|MemoryDenyWriteExecute|SystemCallFilter|CapabilityBoundingSet)=' \
           "$sd/hyperfarm-scheduler.service")
grep -q '^Conflicts=hyperfarm-scheduler.service' "$u" || hf_fail "the standby unit does not conflict with the primary's"
sed "s#/usr/local/bin/#$HF_BIN/#" "$u" >"$HF_TMP/standby.service"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$HF_TMP/standby.service" >"$HF_TMP/verify.out" 2>&1 ||
    hf_fail "systemd-analyze verify: $(cat "$HF_TMP/verify.out")"
  hf_log "ok: systemd-analyze verify passes for the standby unit"
fi
# ExecStart as systemd would expand it: %d the credentials, ${VAR} from the environment.
exec_line=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$HF_TMP/standby.service" | sed 's/^ExecStart=//; s/\\$//' | tr -d '\n')
printf 'user:u-secret\nadmin:a-secret\n' >"$HF_TMP/tokens"
(
  while IFS= read -r kv; do export "${kv?}"; done < <(sed -n 's/^Environment=//p' "$u")
  export HYPERFARM_PRIMARY_URL=http://sched-a.example:8080 HYPERFARM_FAILOVER_AFTER=7
  line=${exec_line//%d/$HF_TMP}
  line=${line//\$\{HYPERFARM_PRIMARY_URL\}/$HYPERFARM_PRIMARY_URL}
  line=${line//\$\{HYPERFARM_FAILOVER_AFTER\}/$HYPERFARM_FAILOVER_AFTER}
  # shellcheck disable=SC2086
  exec $line --print-config
) >"$HF_TMP/unit.json" 2>&1 || hf_fail "the standby unit's command line is refused: $(cat "$HF_TMP/unit.json")"
jq -e '.["standby-of"] == "http://sched-a.example:8080" and (.peers | tostring | contains("sched-a")) and .["failover-after"] == 7' \
  "$HF_TMP/unit.json" >/dev/null || hf_fail "the unit's command line: $(jq -c '{"standby-of", peers, "failover-after"}' "$HF_TMP/unit.json")"
hf_log "ok: the standby unit's ExecStart is accepted: $(jq -c '{"standby-of", peers, "failover-after"}' "$HF_TMP/unit.json")"
hf_log "PASS"
