// Top-k codec: chunked selection (nth_element on indices), a 2^b-entry table of bin means per
// chunk, and an LSB-first bit stream of (index, code) entries. Decoding validates the whole
// payload before it writes a value.
#include "engine/core/codec/topk_codec.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace meridian {
namespace {

constexpr std::size_t kChunk = TopkCodec::kChunkValues;
constexpr int kLog2Chunk = 12;
static_assert(std::size_t{1} << kLog2Chunk == kChunk);
static_assert(TopkCodec::kIndexBits == kLog2Chunk);

std::size_t packed_bytes(std::size_t entries, int bits) {
  return (entries * static_cast<std::size_t>(TopkCodec::kIndexBits + bits) + 7) / 8;
}

std::size_t record_bytes(std::size_t entries, int bits) {
  return (std::size_t{1} << bits) * sizeof(float) + packed_bytes(entries, bits);
}

// LSB-first bit writer: fields of at most 24 bits gathered in a 64-bit accumulator, whole bytes
// flushed; flush() writes the last partial byte (its unused high bits 0).
class BitWriter {
 public:
  explicit BitWriter(std::span<std::byte> out) : out_(out) {}
  void put(std::uint32_t value, int bits) {
    acc_ |= static_cast<std::uint64_t>(value) << held_;
    held_ += bits;
    for (; held_ >= 8; held_ -= 8, acc_ >>= 8) out_[at_++] = static_cast<std::byte>(acc_ & 0xFF);
  }
  void flush() {
    if (held_ > 0) out_[at_++] = static_cast<std::byte>(acc_ & 0xFF);
    held_ = 0;
    acc_ = 0;
  }

 private:
  std::span<std::byte> out_;
  std::uint64_t acc_ = 0;
  int held_ = 0;
  std::size_t at_ = 0;
};

// LSB-first bit reader of fields of at most 24 bits; never reads past `in`.
class BitReader {
 public:
  explicit BitReader(std::span<const std::byte> in) : in_(in) {}
  std::uint32_t get(int bits) {
    for (; held_ < bits && at_ < in_.size(); held_ += 8)
      acc_ |= static_cast<std::uint64_t>(std::to_integer<unsigned>(in_[at_++])) << held_;
    const auto v = static_cast<std::uint32_t>(acc_ & ((std::uint64_t{1} << bits) - 1));
    acc_ >>= bits;
    held_ -= bits;
    return v;
  }

 private:
  std::span<const std::byte> in_;
  std::uint64_t acc_ = 0;
  int held_ = 0;
  std::size_t at_ = 0;
};

// What the encoder makes of a value: NaN is 0, +-inf is +-FLT_MAX, so every table is finite.
float sanitized(float x) { return std::isnan(x) ? 0.0f : std::clamp(x, -FLT_MAX, FLT_MAX); }

}  // namespace

TopkCodec::TopkCodec(double density, int bits) : bits_(bits) {
  if (!(density > 0 && density <= 1))
    throw ConfigError("topk codec: density must be in (0, 1], got " + std::to_string(density));
  if (bits < 1 || bits > 8)
    throw ConfigError("topk codec: value bits must be in [1, 8], got " + std::to_string(bits));
  k_ = std::clamp<std::size_t>(static_cast<std::size_t>(std::lround(density * kChunk)), 1, kChunk);
}

std::size_t TopkCodec::kept(std::size_t len) const {
  if (len == kChunk) return k_;
  if (len == 0) return 0;
  return std::clamp<std::size_t>((k_ * len + kChunk / 2) / kChunk, 1, len);
}

std::size_t TopkCodec::encoded_bytes(std::size_t count) const {
  std::size_t bytes = kPrefixBytes + (count / kChunk) * record_bytes(k_, bits_);
  if (const std::size_t tail = count % kChunk; tail > 0) bytes += record_bytes(kept(tail), bits_);
  return bytes;
}

void TopkCodec::encode(std::span<const float> in, std::span<std::byte> out) const {
  MERIDIAN_CHECK_EQ(out.size(), encoded_bytes(in.size()));
  std::fill(out.begin(), out.end(), std::byte{0});
  const std::uint16_t k16 = static_cast<std::uint16_t>(k_);
  std::memcpy(out.data(), &k16, 2);
  out[2] = static_cast<std::byte>(bits_);
  out[3] = static_cast<std::byte>(kLog2Chunk);
  const std::size_t bins = std::size_t{1} << bits_;
  std::vector<std::uint16_t> order(kChunk);
  std::vector<std::uint64_t> keys(kChunk);
  std::vector<std::uint32_t> mag(kChunk);
  constexpr int kBinShift = 20;  // 31-bit magnitudes -> 2048 bins
  std::vector<std::uint32_t> hist(std::size_t{1} << (31 - kBinShift));
  std::vector<std::uint32_t> codes(kChunk);
  std::vector<double> sum(bins);
  std::vector<std::size_t> n(bins);
  std::size_t at = kPrefixBytes;
  for (std::size_t base = 0; base < in.size(); base += kChunk) {
    const std::size_t len = std::min(kChunk, in.size() - base);
    const std::size_t k = kept(len);
    float x[kChunk];
    std::transform(in.begin() + base, in.begin() + base + len, x, sanitized);
    // The k entries of largest |x|, ties to the lower index, then in index order. |x|'s bits
    // order as the magnitudes do (x finite). A histogram of their top 11 bits finds the bin that
    // holds the k-th largest: every entry above it is kept, and the rest of k come from that bin
    // by a selection on 64-bit keys (|x|'s bits above the complement of the index, so that a
    // descending order of keys is the order wanted). Two passes and a small selection instead of
    // a selection over the whole chunk (2.5x its rate here, results/bench/codec.md).
    std::fill(hist.begin(), hist.end(), 0u);
    for (std::size_t j = 0; j < len; ++j) {
      mag[j] = std::bit_cast<std::uint32_t>(x[j]) & 0x7FFFFFFFu;
      ++hist[mag[j] >> kBinShift];
    }
    std::size_t above = 0, bin = hist.size() - 1;
    for (; above + hist[bin] < k; --bin) above += hist[bin];
    std::size_t kept_above = 0, candidates = 0;
    for (std::size_t j = 0; j < len; ++j) {
      const std::size_t b = mag[j] >> kBinShift;
      if (b > bin) {
        order[kept_above++] = static_cast<std::uint16_t>(j);
      } else if (b == bin) {
        keys[candidates++] = static_cast<std::uint64_t>(mag[j]) << 32 | (0xFFFFFFFFu - j);
      }
    }
    const std::size_t need = k - above;
    std::nth_element(keys.begin(), keys.begin() + (need - 1), keys.begin() + candidates,
                     std::greater<std::uint64_t>());
    for (std::size_t j = 0; j < need; ++j)
      order[kept_above + j] = static_cast<std::uint16_t>(0xFFFFFFFFu - (keys[j] & 0xFFFFFFFFu));
    std::sort(order.begin(), order.begin() + k);
    float lo = x[order[0]], hi = lo;
    for (std::size_t j = 1; j < k; ++j) {
      lo = std::min(lo, x[order[j]]);
      hi = std::max(hi, x[order[j]]);
    }
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(n.begin(), n.end(), 0);
    const double width = static_cast<double>(hi) - lo;
    for (std::size_t j = 0; j < k; ++j) {
      const double v = x[order[j]];
      std::size_t q = 0;
      if (width > 0) {
        const double pos = (v - lo) / width * static_cast<double>(bins);
        q = pos >= 0 ? std::min(bins - 1, static_cast<std::size_t>(pos)) : 0;
      }
      codes[j] = static_cast<std::uint32_t>(q);
      sum[q] += v;
      ++n[q];
    }
    for (std::size_t q = 0; q < bins; ++q) {
      const float t = n[q] > 0 ? static_cast<float>(sum[q] / static_cast<double>(n[q]))
                               : static_cast<float>(lo + (q + 0.5) * width / bins);
      std::memcpy(out.data() + at + q * sizeof(float), &t, sizeof t);
    }
    BitWriter w(out.subspan(at + bins * sizeof(float), packed_bytes(k, bits_)));
    for (std::size_t j = 0; j < k; ++j) {
      w.put(order[j], kIndexBits);
      w.put(codes[j], bits_);
    }
    w.flush();
    at += record_bytes(k, bits_);
  }
}

template <typename Begin, typename Put>
void TopkCodec::walk(std::span<const std::byte> in, std::size_t count, Begin begin, Put put) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(count));
  std::uint16_t k16;
  std::memcpy(&k16, in.data(), 2);
  const int bits = std::to_integer<int>(in[2]), log2_chunk = std::to_integer<int>(in[3]);
  if (k16 != k_ || bits != bits_ || log2_chunk != kLog2Chunk)
    throw ProtocolError("topk codec: the payload keeps " + std::to_string(k16) + " values of " +
                        std::to_string(bits) + " bits per chunk of 2^" +
                        std::to_string(log2_chunk) + ", this node " + std::to_string(k_) +
                        " values of " + std::to_string(bits_) + " bits per chunk of 2^" +
                        std::to_string(kLog2Chunk) + " (diloco.topk_density, topk_bits differ)");
  const std::size_t bins = std::size_t{1} << bits_;
  // Two passes: validate every record, then hand out the values, so that a corrupt payload
  // changes nothing.
  for (int apply = 0; apply < 2; ++apply) {
    if (apply) begin();
    std::size_t at = kPrefixBytes;
    for (std::size_t base = 0; base < count; base += kChunk) {
      const std::size_t len = std::min(kChunk, count - base), k = kept(len);
      float table[256];
      std::memcpy(table, in.data() + at, bins * sizeof(float));
      if (!apply)
        for (std::size_t q = 0; q < bins; ++q)
          if (!std::isfinite(table[q]))
            throw ProtocolError("topk codec: chunk " + std::to_string(base / kChunk) +
                                " has a non-finite table value (bin " + std::to_string(q) + ")");
      BitReader r(in.subspan(at + bins * sizeof(float), packed_bytes(k, bits_)));
      std::int64_t previous = -1;
      for (std::size_t j = 0; j < k; ++j) {
        const std::uint32_t index = r.get(kIndexBits), code = r.get(bits_);
        if (!apply && (static_cast<std::int64_t>(index) <= previous || index >= len))
          throw ProtocolError("topk codec: chunk " + std::to_string(base / kChunk) + " entry " +
                              std::to_string(j) + " has index " + std::to_string(index) +
                              " (indices must ascend within the chunk's " + std::to_string(len) +
                              " values)");
        previous = index;
        if (apply) put(base + index, table[code]);
      }
      at += record_bytes(k, bits_);
    }
  }
}

void TopkCodec::decode(std::span<const std::byte> in, std::span<float> out) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(out.size()));
  walk(
      in, out.size(), [&] { std::fill(out.begin(), out.end(), 0.0f); },
      [&](std::size_t i, float v) { out[i] = v; });
}

void TopkCodec::decode_add(std::span<const std::byte> in, std::span<float> acc) const {
  MERIDIAN_CHECK_EQ(in.size(), encoded_bytes(acc.size()));
  walk(
      in, acc.size(), [] {}, [&](std::size_t i, float v) { acc[i] += v; });
}

}  // namespace meridian
