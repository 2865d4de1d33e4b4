// How the pseudo-gradient is cut for the all-reduce: one bucket per layer group (the worker's
// bucket_boundaries), and with L local ranks each bucket split into L near-equal pieces, piece k
// reduced by local rank k's ring. Pure index arithmetic; no data is touched here.
#pragma once

#include <cstdint>
#include <vector>

namespace meridian {

struct Bucket {
  std::uint32_t index = 0;   // bucket number within the outer step (layer group)
  std::uint64_t offset = 0;  // first element in the flat parameter vector
  std::uint64_t count = 0;   // elements (> 0)
};

// Buckets from cumulative boundaries [0, b1, ..., parameter_count]. Empty groups are skipped
// (their index is not reused). Throws ConfigError when the boundaries do not start at 0, end at
// parameter_count, or decrease.
std::vector<Bucket> make_buckets(const std::vector<std::uint64_t>& boundaries,
                                 std::uint64_t parameter_count);

// Shard k's pieces of every bucket: bucket b of n elements gives shard k the elements
// [offset + k*n/L, offset + (k+1)*n/L) (integer division; the pieces cover the bucket exactly);
// empty pieces are dropped. Throws ConfigError when local_ranks < 1.
std::vector<std::vector<Bucket>> shard_buckets(const std::vector<Bucket>& buckets, int local_ranks);

// Streaming DiLoCo's fragments: P contiguous runs of whole buckets (layer groups) of near-equal
// element counts, each cut into the local ranks' shards as shard_buckets() cuts a model.
struct Fragment {
  std::uint64_t offset = 0;                 // first element in the flat parameter vector
  std::uint64_t count = 0;                  // elements (the fragment's buckets, contiguous)
  std::vector<std::vector<Bucket>> shards;  // per local rank
};

// Fragment p closes after the bucket that brings the running element count to at least
// (p + 1) * total / P, or earlier when the buckets left are only enough for one per fragment
// left. Throws ConfigError when there are fewer buckets than fragments (a bucket is never cut:
// a layer is synced whole) or fragments < 1.
std::vector<Fragment> make_fragments(const std::vector<Bucket>& buckets, int fragments,
                                     int local_ranks);

}  // namespace meridian
