// The top-k codec of SparseLoCo (arXiv 2508.15706): per chunk of 4096 values only the k largest in
// magnitude travel, each as a 12-bit index within its chunk and a b-bit code into a table of
// 2^b fp32 values sent with the chunk. What is not sent decodes to 0. A sum of encodings is not
// an encoding (k entries per rank select different indices), so this codec is not carried by the
// ring all-reduce: DiLoCo all-gathers the sparse pieces instead (ring_all_gather_sum,
// engine/core/collective/README.md "Sparse pieces"), and keeps what a round did not send in a
// per-node error-feedback buffer (engine/core/diloco/README.md, "Sparse outer steps").
#pragma once

#include <cstdint>

#include "engine/core/codec/codec.h"

namespace meridian {

// Payload of `count` values: a 4-byte prefix, then one record per chunk of 4096 values (the last
// chunk may be shorter, L values).
//   prefix: k (u16, values kept per full chunk), bits (u8, b), log2 of the chunk length (u8, 12).
//           A decoder with other parameters rejects the payload (ProtocolError naming both).
//   record: 2^b fp32 table values, then k_L entries of (12-bit index, b-bit code) packed
//           LSB-first into ceil(k_L (12 + b) / 8) bytes, the last byte's unused bits 0.
// k_L = k for a full chunk, else round(k L / 4096) clamped to [1, L] (a pure function of L).
//
// Encoding a chunk: the k_L entries of largest |x| (ties go to the lower index), listed by
// ascending index; NaN is taken as 0 and +-inf as +-FLT_MAX (as a node's outer loop never sends
// either, this only keeps every payload valid). Their codes cut [min, max] of the kept values into
// 2^b equal bins (q = floor((x - min) / (max - min) 2^b), the top edge in the last bin); table[q]
// is the mean of the kept values in bin q (computed in double, rounded to fp32), or the bin's
// centre when no value fell in it. So every kept value decodes to its bin's mean: |x^ - x| < (max -
// min) / 2^b, and the sum of the kept values is preserved up to fp32 rounding.
// Decode validates the prefix, that every table value is finite and that indices ascend
// strictly within the chunk: a corrupt payload raises ProtocolError before anything is written.
class TopkCodec final : public Codec {
 public:
  static constexpr std::size_t kChunkValues = 4096;
  static constexpr int kIndexBits = 12;
  static constexpr std::size_t kPrefixBytes = 4;

  // density in (0, 1] (k = round(density 4096), at least 1), bits in [1, 8]; ConfigError
  // otherwise.
  explicit TopkCodec(double density = CodecParams{}.topk_density,
                     int bits = CodecParams{}.topk_bits);

  CodecId id() const override { return CodecId::kTopk; }
  std::string_view name() const override { return "topk"; }
  bool lossless() const override { return false; }
  bool sparse() const override { return true; }
  std::size_t block_values() const override { return kChunkValues; }
  std::size_t encoded_bytes(std::size_t count) const override;
  void encode(std::span<const float> in, std::span<std::byte> out) const override;
  void decode(std::span<const std::byte> in, std::span<float> out) const override;
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const override;

  std::size_t k() const { return k_; }
  int bits() const { return bits_; }
  // Values kept in a chunk of `len` values (len <= 4096).
  std::size_t kept(std::size_t len) const;

 private:
  // Validates `in` (prefix, tables, indices), then calls begin() and put(i, value) for every
  // kept entry.
  template <typename Begin, typename Put>
  void walk(std::span<const std::byte> in, std::size_t count, Begin begin, Put put) const;

  std::size_t k_;
  int bits_;
};

}  // namespace meridian
