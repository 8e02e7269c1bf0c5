#!/usr/bin/env bash
# test_scheduler_web.sh — the scheduler serves its dashboard on its own.
#
#   1. without --web (a systemd unit, a copied binary): GET / is web/'s
#      index.html, and every file of web/ the page loads (its own HTML, CSS
#      and JS, and the vendored libraries) comes back byte for byte with its
#      Content-Type — the binary is run from a directory with no web/ near;
#   2. traversal and encoded paths answer 400, unknown files 404, and the
#      API routes are untouched;
#   3. --web DIR still overrides: a changed copy of web/ is what is served.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)

# The binary alone, away from the checkout.
mkdir -p "$HF_TMP/alone"
cp "$HF_BIN/hyperfarm-scheduler" "$HF_TMP/alone/"
HF_BIN=$HF_TMP/alone hf_start_scheduler

get() {   # URL_PATH OUT: prints "status content-type"
  curl -s --path-as-is -m 5 -o "$2" -w '%{http_code} %{content_type}\n' "$HF_URL$1"
}
read -r code ctype < <(get / "$HF_TMP/index")
[[ $code == 200 && $ctype == text/html* ]] || hf_fail "GET / answered $code $ctype"
cmp -s "$HF_TMP/index" "$root/web/index.html" || hf_fail "GET / is not web/index.html"
n=0
while IFS= read -r f; do
  rel=${f#"$root/web"}
  read -r code ctype < <(get "$rel" "$HF_TMP/got")
  [[ $code == 200 ]] || hf_fail "GET $rel answered $code"
  cmp -s "$HF_TMP/got" "$f" || hf_fail "GET $rel differs from $f"
  case $rel in
    *.js) want=text/javascript ;; *.css) want=text/css ;; *.html) want=text/html ;; *) want="" ;;
  esac
  [[ -z $want || $ctype == $want* ]] || hf_fail "GET $rel: Content-Type $ctype, want $want"
  n=$((n + 1))
done < <(find "$root/web" -type f \( -name '*.html' -o -name '*.css' -o -name '*.js' \) \
           -not -path '*/node_modules/*' | sort)
(( n >= 8 )) || hf_fail "only $n dashboard files found under web/"
# Every file index.html loads is among them.
for src in $(grep -oE '(src|href)="[^"#:]+"' "$root/web/index.html" | sed -E 's/.*="([^"]+)"/\1/'); do
  read -r code _ < <(get "/$src" /dev/null)
  [[ $code == 200 ]] || hf_fail "index.html loads $src, which answers $code"
done
hf_log "ok: the built-in dashboard serves / and all $n files of web/ byte for byte"

for bad in '/../etc/passwd' '/js/../../etc/passwd' '/js/%2e%2e/app.js' '/./index.html'; do
  read -r code _ < <(get "$bad" /dev/null)
  [[ $code == 400 ]] || hf_fail "GET $bad answered $code, want 400"
done
read -r code _ < <(get /no-such-file.js /dev/null)
[[ $code == 404 ]] || hf_fail "GET /no-such-file.js answered $code, want 404"
read -r code _ < <(get /api/v1/experiments "$HF_TMP/list")
[[ $code == 200 ]] && jq -e '.experiments' "$HF_TMP/list" >/dev/null || hf_fail "the API answered $code next to the dashboard"
hf_log "ok: traversal 400, unknown 404, API unchanged"

hf_stop_scheduler
cp -r "$root/web" "$HF_TMP/webcopy"
echo '<!doctype html><title>override</title>' >"$HF_TMP/webcopy/index.html"
hf_start_scheduler --web "$HF_TMP/webcopy"
read -r code _ < <(get / "$HF_TMP/index2")
[[ $code == 200 ]] && grep -q override "$HF_TMP/index2" || hf_fail "--web DIR did not override the built-in dashboard"
hf_log "ok: --web DIR overrides"
hf_log "PASS"
