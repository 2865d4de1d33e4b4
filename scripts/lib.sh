# Shell helpers shared by scripts/ (sourced, not run).

# Waits for every pid given; returns the first non-zero exit status among them (0 if none).
wait_all_pids() {
  local status=0 s p
  for p in "$@"; do
    wait "$p"
    s=$?
    if [[ $s -ne 0 && $status -eq 0 ]]; then status=$s; fi
  done
  return "$status"
}
