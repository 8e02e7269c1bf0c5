#!/usr/bin/env bash
# web/build.sh — vendor the dashboard's npm libraries into web/vendor/.
#
# The scheduler serves web/ as static files (hyperfarm-scheduler --web web)
# and must need no internet, so the few dist files the page loads are copied
# out of web/node_modules (installed by `npm ci`, see scripts/install-deps)
# into web/vendor/ (uPlot, ECharts; marked + DOMPurify render Markdown notes
# safely). Runs offline; `make` calls it. Idempotent: copies only
# when the source is newer.
set -euo pipefail
cd "$(dirname "$0")"

files=(
  node_modules/uplot/dist/uPlot.iife.min.js
  node_modules/uplot/dist/uPlot.min.css
  node_modules/echarts/dist/echarts.min.js
  node_modules/marked/marked.min.js
  node_modules/dompurify/dist/purify.min.js
)

if [[ ! -d node_modules ]]; then
  if [[ -f vendor/echarts.min.js && -f vendor/uPlot.iife.min.js && -f vendor/marked.min.js && -f vendor/purify.min.js ]]; then
    exit 0   # already vendored; nothing to refresh from
  fi
  echo "web/build.sh: web/node_modules missing; run: (cd web && npm ci)  or  scripts/install-deps" >&2
  exit 1
fi

mkdir -p vendor
for f in "${files[@]}"; do
  [[ -f $f ]] || { echo "web/build.sh: $f missing; rerun: (cd web && npm ci)" >&2; exit 1; }
  dst=vendor/$(basename "$f")
  if [[ ! -f $dst || $f -nt $dst ]]; then cp "$f" "$dst"; fi
done
# Licences travel with the copies.
cp -f node_modules/uplot/LICENSE vendor/uPlot.LICENSE 2>/dev/null || true
cp -f node_modules/echarts/LICENSE vendor/echarts.LICENSE 2>/dev/null || true
cp -f node_modules/marked/LICENSE.md vendor/marked.LICENSE 2>/dev/null || true
cp -f node_modules/dompurify/LICENSE vendor/purify.LICENSE 2>/dev/null || true
