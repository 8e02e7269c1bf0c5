#!/usr/bin/env bash
# test_multiserver_backup.sh — an online backup taken mid-sweep, restored on
# another server, which carries the sweep on (issue 31.1; docs/operations.md
# "Backup and restore"), on the multi-server harness tests/system/netns_lib.sh.
#
# Server "sched" (its database and checkpoint store on its own disk, and a
# second tmpfs mounted at /srv/hf/backup-disk: the backup disk) and agent
# servers a1, a2 run a sweep of fake trials that checkpoint every epoch.
# Mid-sweep (checkpoints stored, trials running), an admin runs
# `hyperfarm backup /srv/hf/backup-disk`. Checks:
#   - the path rules: a relative path (CLI, exit 2), the live database's
#     own directory (400) and a user token (403) are refused;
#   - the snapshot is consistent with the live database: every metric row
#     it holds is the live one with the same seq, and it holds a prefix of
#     them (a point in time); its manifest counts are its own rows';
#   - a second backup links every object the first holds (incremental);
#   - then "sched" loses power. A new server at the same address (a fresh
#     disk: another machine) gets the snapshot's files, runs
#     `hyperfarm-scheduler --restore` (a second restore onto the same
#     database is refused, exit 2), and starts a scheduler on the result:
#     every experiment, trial and metric row of the snapshot is served,
#     every listed checkpoint downloads with its size and hash, and the
#     agents, which kept their trials' reports while it was gone, finish
#     the sweep there: COMPLETED, every trial ending at epoch 8 with the
#     epochs the snapshot held (reports acknowledged after the snapshot
#     went down with the old server: that is a backup's loss window). A
#     trial the snapshot shows running but whose end the old server
#     acknowledged after it (the agent no longer runs it) is lost as on a
#     lost agent and restarts from its newest checkpoint: max_restarts 1
#     (with 0 it failed whenever the machine was slow enough for a running
#     trial to end between the snapshot and the power-off);
#   - trials the restored scheduler creates are numbered from 1,000,000
#     above the snapshot's largest id: the ids the lost server handed out
#     after the snapshot are not reused (an agent remembers them).
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm tests/fake_trial
command -v sqlite3 >/dev/null || netns_skip "sqlite3 (the command-line shell) is required"
netns_setup

BK=/srv/hf/backup-disk
netns_server sched 10.77.0.2
netns_run sched sh -c "mkdir -p $BK && mount -t tmpfs -o size=128m hf-backup-disk $BK" || hf_fail "cannot mount the backup disk"
# The admin token: the test's own token is an admin's here, plus a plain user's.
USER_TOKEN=user-$RANDOM$RANDOM
printf 'admin:%s\nuser:%s\nagent:%s\n' "$HF_TOKEN" "$USER_TOKEN" "$HF_AGENT_TOKEN" | netns_put sched /srv/hf/tokens-admin
netns_start_scheduler --checkpoint-dir /srv/hf/ck --token-file /srv/hf/tokens-admin --agent-timeout 3000
netns_start_agent a1 10.77.0.11 --slots 1
netns_start_agent a2 10.77.0.12 --slots 1
id=$(hf_submit "$(netns_fake_experiment multiserver-backup '{"name": "random", "max_trials": 6, "max_concurrent_trials": 2,
  "seed": 3}' 1 --epochs 8 --sleep-ms 400 --ckpt-bytes 65536)")
export HYPERFARM_URL=$HF_URL HYPERFARM_TOKEN=$HF_TOKEN

# ---- mid-sweep ---------------------------------------------------------------
mid_sweep() {
  local tr
  tr=$(hf_get "/api/v1/experiments/$id/trials")
  jq -e '[.trials[] | select(.state == "COMPLETED")] | length >= 1' <<<"$tr" >/dev/null &&
    jq -e '[.trials[] | select(.state == "RUNNING")] | length >= 1' <<<"$tr" >/dev/null
}
hf_wait_for 60 mid_sweep || hf_fail "the sweep did not reach one completed and one running trial in 60 s"

set +e
"$HF_BIN/hyperfarm" backup relative/dir 2>"$HF_TMP/err"; rc=$?
set -e
hf_assert_eq "$rc" 2 "backup to a relative path: exit 2 ($(cat "$HF_TMP/err"))"
st=$(curl -sS -o "$HF_TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"dir": "/srv/hf"}' "$HF_URL/api/v1/backups")
hf_assert_eq "$st" 400 "backup into the live database's directory: $(cat "$HF_TMP/body")"
st=$(curl -q -sS -o "$HF_TMP/body" -w '%{http_code}' -H "Authorization: Bearer $USER_TOKEN" -H 'Content-Type: application/json' \
  -d "{\"dir\": \"$BK\"}" "$HF_URL/api/v1/backups")
hf_assert_eq "$st" 403 "backup with a user token: $(cat "$HF_TMP/body")"

snap=$("$HF_BIN/hyperfarm" backup "$BK" 2>"$HF_TMP/backup.err") || hf_fail "backup failed: $(cat "$HF_TMP/backup.err")"
hf_log "backup: $snap ($(cat "$HF_TMP/backup.err"))"
state=$(hf_get "/api/v1/experiments/$id" | jq -r .state)
hf_assert_eq "$state" ACTIVE "the sweep was running during the backup"

# The snapshot against the live database (read beside the running scheduler).
q() { netns_run sched sqlite3 -readonly "$1" "$2"; }
snap_max=$(q "$snap/hyperfarm.db" 'SELECT coalesce(max(seq),0) FROM metrics')
snap_rows=$(q "$snap/hyperfarm.db" 'SELECT count(*) FROM metrics')
hf_assert_eq "$snap_rows" "$snap_max" "the snapshot's metric rows are seq 1..max (no hole)"
(( snap_rows >= 1 )) || hf_fail "the snapshot holds no metric row"
q "$snap/hyperfarm.db" 'SELECT seq,trial_id,name,step,value FROM metrics ORDER BY seq' >"$HF_TMP/snap.metrics"
q /srv/hf/hf.db "SELECT seq,trial_id,name,step,value FROM metrics WHERE seq <= $snap_max ORDER BY seq" >"$HF_TMP/live.metrics"
cmp -s "$HF_TMP/snap.metrics" "$HF_TMP/live.metrics" || hf_fail "the snapshot's metrics differ from the live ones up to seq $snap_max"
man=$(netns_run sched cat "$snap/manifest.json")
for t in experiments trials metrics checkpoints; do
  hf_assert_eq "$(jq -r ".counts.$t" <<<"$man")" "$(q "$snap/hyperfarm.db" "SELECT count(*) FROM $t")" "manifest count of $t"
done
hf_assert_eq "$(jq -r .db.sha256 <<<"$man")" "$(netns_run sched sha256sum "$snap/hyperfarm.db" | cut -c1-64)" "manifest's database SHA-256"
nck=$(jq -r .counts.checkpoints <<<"$man")
(( nck >= 1 )) || hf_fail "the snapshot holds no checkpoint: $man"
hf_log "ok: snapshot consistent with the live database: $snap_rows metric rows, $nck checkpoints, $(jq -c .objects <<<"$man")"
snap_trials=$(q "$snap/hyperfarm.db" "SELECT id || ':' || (SELECT count(*) FROM metrics m WHERE m.trial_id = t.id) FROM trials t ORDER BY id" | tr '\n' ' ')
snap_epochs=$(q "$snap/hyperfarm.db" "SELECT trial_id || ':' || group_concat(epoch) FROM (SELECT DISTINCT trial_id, epoch
  FROM metrics WHERE name = 'val_acc' ORDER BY trial_id, epoch) GROUP BY trial_id" | tr '\n' ' ')

snap2=$("$HF_BIN/hyperfarm" backup "$BK" --json) || hf_fail "second backup failed"
jq -e --argjson n "$(jq .objects.count <<<"$man")" '.objects_linked >= $n and .objects_copied == .objects - .objects_linked' \
  <<<"$snap2" >/dev/null || hf_fail "the second backup did not link the first one's objects: $snap2"
hf_log "ok: second backup incremental: $(jq -c '{objects, objects_copied, objects_linked}' <<<"$snap2")"

# ---- the server is lost; another one restores the snapshot -----------------
netns_run sched tar -C "$(dirname "$snap")" -cf - "$(basename "$snap")" >"$HF_TMP/snap.tar"
netns_poweroff sched
hf_log "sched powered off; restoring $(basename "$snap") on a new server"
netns_server sched 10.77.0.2
# The new machine took the old one's address: its neighbours forget the old
# MAC, as a gratuitous ARP from the new machine would make them do.
ip neigh flush all
for a in a1 a2; do netns_run "$a" ip neigh flush all; done
netns_put sched /srv/hf/snap.tar <"$HF_TMP/snap.tar"
netns_run sched tar -C /srv/hf -xf /srv/hf/snap.tar
R=/srv/hf/$(basename "$snap")
netns_run sched "$HF_BIN/hyperfarm-scheduler" --restore "$R" --db /srv/hf/hf.db --checkpoint-dir /srv/hf/ck \
  >"$HF_TMP/restore.out" 2>&1 || hf_fail "restore failed: $(cat "$HF_TMP/restore.out")"
set +e
netns_run sched "$HF_BIN/hyperfarm-scheduler" --restore "$R" --db /srv/hf/hf.db --checkpoint-dir /srv/hf/ck >"$HF_TMP/restore2.out" 2>&1
rc=$?
set -e
hf_assert_eq "$rc" 2 "a second restore onto the same database is refused ($(tail -1 "$HF_TMP/restore2.out"))"
printf 'admin:%s\nagent:%s\n' "$HF_TOKEN" "$HF_AGENT_TOKEN" | netns_put sched /srv/hf/tokens-admin
netns_start_scheduler --checkpoint-dir /srv/hf/ck --token-file /srv/hf/tokens-admin --agent-timeout 3000

got_trials=""
for t in $(hf_get "/api/v1/experiments/$id/trials" | jq -r '.trials[].id'); do
  n=$(hf_get "/api/v1/trials/$t/metrics?limit=100000" | jq '.metrics | length')
  got_trials+="$t:$n "
done
# Served right after the start: the agents may already have added reports, so each count is at least the snapshot's.
for pair in $snap_trials; do
  t=${pair%%:*}; want=${pair##*:}
  have=$(hf_get "/api/v1/trials/$t/metrics?limit=100000" | jq '.metrics | length')
  (( have >= want )) || hf_fail "trial $t: $have metric rows served after the restore, the snapshot had $want"
done
hf_log "ok: every trial of the snapshot is served with its metrics (snapshot $snap_trials; served $got_trials)"
# shellcheck disable=SC2046
netns_verify_store /srv/hf/ck $(q "$R/hyperfarm.db" 'SELECT DISTINCT trial_id FROM checkpoints')

hf_wait_experiment "$id" 120
trials=$(hf_get "/api/v1/experiments/$id/trials")
jq -e '(.trials | length) == 6 and all(.trials[]; .state == "COMPLETED")' <<<"$trials" >/dev/null ||
  hf_fail "the sweep did not finish on the restored scheduler: $(jq -c '[.trials[] | {id, state, agent}]' <<<"$trials")"
# A trial finished before the snapshot keeps every epoch; one that reported
# after it has lost those reports with the old server (acknowledged after
# the snapshot: not in it) but keeps the snapshot's and ends at epoch 8.
# A trial restarted after the restore (its end was acknowledged after the
# snapshot) resumes after the newest checkpoint it can get, which may be
# ahead of every report the snapshot holds (the agent keeps its own newer
# copy, "kept its own checkpoint" in its log): its later epochs' reports
# went down with the old server, so for it only the snapshot's epochs and
# COMPLETED (above) are required: none at all when the snapshot held none
# and the kept checkpoint was its last step (attempt 2 resumes at the end
# and reports nothing; seen in CI, a trial started just before the backup).
restarted=""
for t in $(jq -r '.trials[].id' <<<"$trials"); do
  e=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=1000" | jq -c '[.metrics[].epoch] | unique')
  had=$(tr ' ' '\n' <<<"$snap_epochs" | sed -n "s/^$t:\(.*\)/[\1]/p")
  again=false
  if [[ $(jq -r --argjson t "$t" '.trials[] | select(.id == $t) | .restarts' <<<"$trials") != 0 ]]; then
    again=true; restarted+="$t:$e "
  fi
  jq -e --argjson had "${had:-[]}" --argjson again "$again" '(($had - .) == []) and ($again or max == 8)' <<<"$e" >/dev/null ||
    hf_fail "trial $t reported epochs $e (the snapshot held ${had:-none})"
  [[ $had == "[1,2,3,4,5,6,7,8]" ]] && hf_assert_eq "$e" "$had" "trial $t, finished before the snapshot, kept every epoch"
done
# Ids the lost server may have handed out after the snapshot are never
# handed out again (agents may still hold them): every trial the restored
# scheduler created is numbered from 1,000,000 above the snapshot's largest.
snap_max_trial=$(q "$R/hyperfarm.db" 'SELECT coalesce(max(id),0) FROM trials')
for t in $(jq -r '.trials[].id' <<<"$trials"); do
  [[ " $snap_trials" == *" $t:"* ]] && continue   # a trial of the snapshot
  (( t > snap_max_trial + 1000000 )) || hf_fail "trial $t, created after the restore, is not above the id gap (snapshot's largest $snap_max_trial)"
done
hf_log "ok: the sweep finished on the restored scheduler ($(jq -r '[.trials[].agent] | unique | join(" and ")' <<<"$trials"); trials $(jq -r '[.trials[].id] | join(" ")' <<<"$trials"); restarted after the restore: ${restarted:-none})"
hf_log "PASS"
