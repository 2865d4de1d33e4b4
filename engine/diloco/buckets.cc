// Bucketing of the pseudo-gradient.
#include "engine/diloco/buckets.h"

#include <string>

#include "engine/error.h"

namespace meridian {

std::vector<Bucket> make_buckets(const std::vector<std::uint64_t>& boundaries,
                                 std::uint64_t parameter_count) {
  if (boundaries.size() < 2 || boundaries.front() != 0 || boundaries.back() != parameter_count)
    throw ConfigError("bucket_boundaries must start at 0 and end at parameter_count (" +
                      std::to_string(parameter_count) + ")");
  std::vector<Bucket> out;
  for (std::size_t i = 0; i + 1 < boundaries.size(); ++i) {
    if (boundaries[i + 1] < boundaries[i])
      throw ConfigError("bucket_boundaries decrease at index " + std::to_string(i + 1));
    const std::uint64_t n = boundaries[i + 1] - boundaries[i];
    if (n > 0) out.push_back({static_cast<std::uint32_t>(i), boundaries[i], n});
  }
  return out;
}

std::vector<std::vector<Bucket>> shard_buckets(const std::vector<Bucket>& buckets,
                                               int local_ranks) {
  if (local_ranks < 1)
    throw ConfigError("local_ranks must be >= 1, got " + std::to_string(local_ranks));
  const auto l = static_cast<std::uint64_t>(local_ranks);
  std::vector<std::vector<Bucket>> shards(local_ranks);
  for (const Bucket& b : buckets) {
    for (std::uint64_t k = 0; k < l; ++k) {
      const std::uint64_t begin = k * b.count / l;
      const std::uint64_t end = (k + 1) * b.count / l;
      if (end > begin) shards[k].push_back({b.index, b.offset + begin, end - begin});
    }
  }
  return shards;
}

}  // namespace meridian
