#!/usr/bin/env bash
# Copy the generated dashboards and alert rules into the Helm chart, which takes them as files
# (charts/queuepilot/files/). The rules come from alerts/generated/chart/: the copy with __QP_...__
# tokens that the chart's PrometheusRule template fills from values (job names, runbook URL,
# thresholds, for durations). tests/chart/test_chart_files.py fails when the copies differ.
# Usage: tools/sync-chart-files.sh [--check]   (--check: report differences, change nothing, exit 1 if any)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$root/charts/queuepilot/files"
check=0
[[ "${1:-}" == "--check" ]] && check=1
status=0
sync_dir() {  # sync_dir SRC_DIR DST_DIR PATTERN
  local src="$1" dst="$2" pattern="$3" f name
  mkdir -p "$dst"
  for f in "$dst"/$pattern; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f")"
    if [[ ! -e "$src/$name" ]]; then
      if ((check)); then echo "stale: $f (no $src/$name)"; status=1; else rm -f "$f"; echo "removed $f"; fi
    fi
  done
  for f in "$src"/$pattern; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f")"
    if ! cmp -s "$f" "$dst/$name"; then
      if ((check)); then echo "differs: $dst/$name (from $f)"; status=1; else cp "$f" "$dst/$name"; echo "copied $f"; fi
    fi
  done
}
sync_dir "$root/dashboards/generated" "$chart/dashboards" "*.json"
sync_dir "$root/alerts/generated/chart" "$chart/rules" "*.yaml"
exit $status
