# Sourced by run.sh and detection.sh: `nodes_for N` prints the network.nodes list of
# scenarios/intellect1-scale.yaml at N nodes (a multiple of 16): the 16-node base in
# intellect1-global's proportions plus Sydney, times N / 16.
nodes_for() {
  local k=$(($1 / 16))
  echo "[{site: us-east, count: $((3 * k))}, {site: us-west, count: $((2 * k))}," \
       "{site: us-nw, count: $((2 * k))}, {site: eu-west, count: $((3 * k))}," \
       "{site: eu-cent, count: $((2 * k))}, {site: ap-tokyo, count: $((1 * k))}," \
       "{site: ap-seoul, count: $((1 * k))}, {site: ap-sydney, count: $((2 * k))}]"
}
