// Bottleneck-TSP ring order: exact subset DP for small rings, greedy + swaps beyond.
#include "engine/core/mesh/ring_order.h"

#include <algorithm>
#include <bit>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/error.h"

namespace meridian {
namespace {

using Mask = std::uint32_t;

void validate(const BandwidthMatrix& bw) {
  const std::size_t n = bw.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (bw[i].size() != n)
      throw ConfigError("ring order: bandwidth matrix row " + std::to_string(i) + " has " +
                        std::to_string(bw[i].size()) + " entries, expected " + std::to_string(n));
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      if (!std::isfinite(bw[i][j]) || bw[i][j] < 0)
        throw ConfigError("ring order: bandwidth[" + std::to_string(i) + "][" + std::to_string(j) +
                          "] must be finite and >= 0");
    }
  }
}

// Adjacency bit masks of the graph of links with bandwidth >= threshold.
std::vector<Mask> threshold_graph(const BandwidthMatrix& bw, double threshold) {
  const int n = static_cast<int>(bw.size());
  std::vector<Mask> adj(n, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j && bw[i][j] >= threshold) adj[i] |= Mask{1} << j;
  return adj;
}

bool strongly_connected(const std::vector<Mask>& adj) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  const int n = static_cast<int>(adj.size());
  Graph g(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (adj[i] >> j & 1) boost::add_edge(i, j, g);
  std::vector<int> component(n);
  return boost::strong_components(g, component.data()) == 1;
}

// The lexicographically smallest Hamiltonian cycle from node 0, or empty if there is none.
// done[mask] has bit v set when, standing at v having visited `mask` (0 and v included), the
// remaining nodes can all be visited and the ring closed back to 0.
std::vector<int> hamiltonian_cycle(const std::vector<Mask>& adj) {
  const int n = static_cast<int>(adj.size());
  const Mask full = (Mask{1} << n) - 1;
  std::vector<Mask> done(std::size_t{1} << n, 0);
  for (int v = 0; v < n; ++v)
    if (adj[v] & 1) done[full] |= Mask{1} << v;
  for (Mask mask = full; mask-- > 1;) {
    if (!(mask & 1)) continue;  // every path starts at node 0
    Mask ok = 0;
    for (Mask vs = mask; vs; vs &= vs - 1) {
      const int v = std::countr_zero(vs);
      for (Mask us = adj[v] & ~mask; us; us &= us - 1) {
        const int u = std::countr_zero(us);
        if (done[mask | Mask{1} << u] >> u & 1) {
          ok |= Mask{1} << v;
          break;
        }
      }
    }
    done[mask] = ok;
  }
  if (!(done[1] & 1)) return {};
  std::vector<int> order{0};
  Mask mask = 1;
  int v = 0;
  while (mask != full) {
    for (Mask us = adj[v] & ~mask; us; us &= us - 1) {
      const int u = std::countr_zero(us);
      if (done[mask | Mask{1} << u] >> u & 1) {
        order.push_back(u);
        mask |= Mask{1} << u;
        v = u;
        break;
      }
    }
  }
  return order;
}

std::vector<double> distinct_link_values(const BandwidthMatrix& bw) {
  std::vector<double> values;
  for (std::size_t i = 0; i < bw.size(); ++i)
    for (std::size_t j = 0; j < bw.size(); ++j)
      if (i != j) values.push_back(bw[i][j]);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

RingOrder exact_order(const BandwidthMatrix& bw) {
  const std::vector<double> values = distinct_link_values(bw);
  // Invariant: values[lo] admits a ring (the complete graph always does); values[hi] does not.
  std::size_t lo = 0, hi = values.size();
  std::vector<int> best = hamiltonian_cycle(threshold_graph(bw, values[0]));
  MERIDIAN_CHECK(!best.empty());
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const auto adj = threshold_graph(bw, values[mid]);
    std::vector<int> cycle;
    if (strongly_connected(adj)) cycle = hamiltonian_cycle(adj);
    if (cycle.empty()) {
      hi = mid;
    } else {
      lo = mid;
      best = std::move(cycle);
    }
  }
  return {best, ring_bottleneck_bps(bw, best), true};
}

std::vector<int> rotate_to_zero(std::vector<int> order) {
  const auto it = std::find(order.begin(), order.end(), 0);
  std::rotate(order.begin(), it, order.end());
  return order;
}

RingOrder heuristic_order(const BandwidthMatrix& bw) {
  const int n = static_cast<int>(bw.size());
  std::vector<int> best;
  double best_bps = -1;
  for (int start = 0; start < n; ++start) {
    std::vector<int> tour{start};
    std::vector<bool> used(n, false);
    used[start] = true;
    for (int k = 1; k < n; ++k) {
      int next = -1;
      for (int u = 0; u < n; ++u)
        if (!used[u] && (next < 0 || bw[tour.back()][u] > bw[tour.back()][next])) next = u;
      used[next] = true;
      tour.push_back(next);
    }
    const double b = ring_bottleneck_bps(bw, tour);
    if (b > best_bps) best_bps = b, best = tour;
  }
  for (int pass = 0; pass < n; ++pass) {
    bool improved = false;
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        std::swap(best[i], best[j]);
        const double b = ring_bottleneck_bps(bw, best);
        if (b > best_bps) {
          best_bps = b;
          improved = true;
        } else {
          std::swap(best[i], best[j]);
        }
      }
    }
    if (!improved) break;
  }
  best = rotate_to_zero(std::move(best));
  return {best, best_bps, false};
}

}  // namespace

double ring_bottleneck_bps(const BandwidthMatrix& bw, const std::vector<int>& order) {
  double slowest = std::numeric_limits<double>::infinity();
  if (order.size() < 2) return slowest;
  for (std::size_t k = 0; k < order.size(); ++k)
    slowest = std::min(slowest, bw[order[k]][order[(k + 1) % order.size()]]);
  return slowest;
}

RingOrder bottleneck_ring_order(const BandwidthMatrix& bandwidth_bps) {
  validate(bandwidth_bps);
  const int n = static_cast<int>(bandwidth_bps.size());
  if (n == 0) return {{}, std::numeric_limits<double>::infinity(), true};
  if (n == 1) return {{0}, std::numeric_limits<double>::infinity(), true};
  if (n <= kExactRingOrderMaxNodes) return exact_order(bandwidth_bps);
  return heuristic_order(bandwidth_bps);
}

}  // namespace meridian
