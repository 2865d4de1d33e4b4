// Bucketing of the pseudo-gradient.
#include "engine/core/diloco/buckets.h"

#include <string>

#include "engine/core/error.h"

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

std::vector<Fragment> make_fragments(const std::vector<Bucket>& buckets, int fragments,
                                     int local_ranks) {
  if (fragments < 1)
    throw ConfigError("diloco.fragments must be >= 1, got " + std::to_string(fragments));
  if (buckets.size() < static_cast<std::size_t>(fragments))
    throw ConfigError("diloco.fragments: " + std::to_string(fragments) + " fragments need at " +
                      "least as many buckets (layer groups); the model has " +
                      std::to_string(buckets.size()) + " (diloco.buckets sets their count)");
  std::uint64_t total = 0;
  for (const Bucket& b : buckets) total += b.count;
  const auto p_count = static_cast<std::uint64_t>(fragments);
  std::vector<std::vector<Bucket>> groups(p_count);
  std::uint64_t running = 0;
  std::size_t g = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    groups[g].push_back(buckets[i]);
    running += buckets[i].count;
    const std::size_t left = buckets.size() - i - 1;  // buckets after this one
    const std::size_t groups_after = p_count - g - 1;
    if (groups_after > 0 && (running * p_count >= (g + 1) * total || left == groups_after)) ++g;
  }
  std::vector<Fragment> out;
  for (const std::vector<Bucket>& group : groups) {
    Fragment f;
    f.offset = group.front().offset;
    for (const Bucket& b : group) f.count += b.count;
    f.shards = shard_buckets(group, local_ranks);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace meridian
