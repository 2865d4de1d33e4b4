#!/usr/bin/env bash
# Runs one libFuzzer target as ctest does and passes on its output without the per-input lines
# (NEW, REDUCE, pulse, NEW_FUNC and the recommended dictionary): thousands of them would push a
# finding's report out of any log that keeps only the head and tail of a test's output.
# The target's exit status is the script's.
#
# usage: tests/fuzz/run_quiet.sh TARGET [libFuzzer arguments...]
set -uo pipefail
if [[ $# -lt 1 || "$1" == --help || "$1" == -h ]]; then
  sed -n '2,7p' "$0" >&2
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
"$@" 2>&1 | grep -Ev '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)|^[[:space:]]+NEW_FUNC\[|^"[^"]*" # Uses: '
exit "${PIPESTATUS[0]}"
