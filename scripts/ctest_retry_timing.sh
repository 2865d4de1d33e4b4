#!/usr/bin/env bash
# Runs ctest once; if tests failed and every one of them carries the label `timing` (their outcome
# depends on thread or process scheduling; README "Tests" names them), reruns only those once
# and says which needed the retry. Any other failure fails at once, without a retry.
# Not a flakiness hider: a test fails the suite when it fails twice, or once without `timing`.
#
# usage: scripts/ctest_retry_timing.sh BUILD_DIR [ctest arguments...]   (from the repository root)
set -uo pipefail

if [[ $# -lt 1 || "$1" == --help || "$1" == -h ]]; then
  sed -n '2,8p' "$0" >&2
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
build=$1
shift
cd "$build" || exit 2
ctest --output-on-failure "$@" && exit 0

failed_log=Testing/Temporary/LastTestsFailed.log
if [[ ! -s $failed_log ]]; then
  echo "ctest failed without a list of failed tests ($build/$failed_log): not retrying" >&2
  exit 1
fi
# Names of the failed tests, and of every test labelled `timing` (ctest -N lists "Test #N: NAME";
# -FA leaves out the fixture setups ctest would add for them, such as the soak runs of tests/soak).
mapfile -t failed < <(cut -d: -f2- "$failed_log")
mapfile -t timing < <(ctest -N -L '^timing$' -FA '.*' | sed -n 's/^ *Test *#[0-9]*: //p')
declare -A is_timing=()
for t in "${timing[@]}"; do is_timing[$t]=1; done
others=()
for t in "${failed[@]}"; do [[ -n ${is_timing[$t]:-} ]] || others+=("$t"); done
if [[ ${#others[@]} -gt 0 ]]; then
  echo "FAILED (not labelled timing, no retry):" >&2
  printf '  %s\n' "${others[@]}" >&2
  exit 1
fi
echo "RETRYING once (labelled timing, failed the first time):" >&2
printf '  %s\n' "${failed[@]}" >&2
if ctest --output-on-failure --rerun-failed "$@"; then
  echo "NEEDED A RETRY (timing-dependent, passed the second time):" >&2
  printf '  %s\n' "${failed[@]}" >&2
  exit 0
fi
echo "FAILED TWICE (labelled timing):" >&2
cut -d: -f2- "$failed_log" | sed 's/^/  /' >&2
exit 1
