#!/usr/bin/env bash
# Renders a run's report.html and checks it in headless Chromium: every image loads, no console
# errors, no external resources; saves screenshots to look at. Exit 77 (ctest SKIP) when
# chromium or node is not installed.
#
# usage: scripts/report_screenshot.sh MERIDIAN_BINARY RUN_DIR [WORK_DIR [BANNER]]
#   Copies RUN_DIR/events.jsonl (an ensemble's ensemble.json, when RUN_DIR has one) into
#   WORK_DIR (default: a new temporary folder), runs `meridian report` there, and writes
#   WORK_DIR/report-first-screen.png and report-full.png.
#   BANNER: the run-end banner the page must show on its first screen (an interrupted run);
#   without it the page must show none.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
meridian=${1:?usage: report_screenshot.sh MERIDIAN_BINARY RUN_DIR [WORK_DIR [BANNER]]}
run_dir=${2:?usage: report_screenshot.sh MERIDIAN_BINARY RUN_DIR [WORK_DIR [BANNER]]}
work=${3:-$(mktemp -d)}

chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "SKIP: chromium is not installed (apt-get install -y chromium)"
  exit 77
fi
if ! command -v node > /dev/null; then
  echo "SKIP: node is not installed (apt-get install -y nodejs)"
  exit 77
fi

rm -rf "$work/run"
mkdir -p "$work/run"
if [ -f "$run_dir/ensemble.json" ]; then
  cp "$run_dir/ensemble.json" "$work/run/ensemble.json"
else
  cp "$run_dir/events.jsonl" "$work/run/events.jsonl"
fi
"$meridian" report "$work/run"
node "$here/report_check.mjs" "$chromium" "$work/run/report.html" "$work/report" ${4+"$4"}
