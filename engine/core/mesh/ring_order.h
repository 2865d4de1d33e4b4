// Ring order from a measured bandwidth matrix: the directed ring (rank i sends to rank i+1) whose
// slowest link is as fast as possible (bottleneck travelling salesman). Exact up to
// kExactRingOrderMaxNodes nodes, a documented heuristic beyond. Not a bandwidth measurement.
#pragma once

#include <vector>

namespace meridian {

inline constexpr int kExactRingOrderMaxNodes = 16;

// bandwidth_bps[i][j]: measured bandwidth of the link i -> j (the diagonal is ignored).
using BandwidthMatrix = std::vector<std::vector<double>>;

struct RingOrder {
  std::vector<int> order;  // a permutation of 0..n-1 starting with 0; order[k] sends to order[k+1]
  double bottleneck_bps = 0.0;  // the slowest link of the ring (+inf for n <= 1)
  bool exact = false;           // true when `order` is proven optimal
};

// The slowest link of the ring `order` (each element sends to the next, the last to the first).
double ring_bottleneck_bps(const BandwidthMatrix& bandwidth_bps, const std::vector<int>& order);

// Maximises the ring's slowest link.
//  - n <= kExactRingOrderMaxNodes: exact. Binary search over the distinct link bandwidths for the
//    largest threshold whose graph (links >= threshold) has a Hamiltonian cycle; each candidate is
//    first screened by strong connectivity (Boost.Graph strong_components, necessary), then
//    decided by a DP over subsets (O(2^n n^2) bit operations). Among optimal rings the
//    lexicographically smallest order is returned, so a uniform matrix gives 0, 1, ..., n-1.
//  - larger n: heuristic. Greedy "widest next link" tours from every start, then passes of
//    node swaps that raise the bottleneck, until none does (at most n passes). The result is
//    at most the strong-connectivity bound; `exact` is false.
// Throws ConfigError when the matrix is not square or holds a negative or non-finite value.
RingOrder bottleneck_ring_order(const BandwidthMatrix& bandwidth_bps);

}  // namespace meridian
