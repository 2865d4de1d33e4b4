// Codec: how a chunk of fp32 values travels on the wire. Reduction is always in fp32; a codec
// only encodes and decodes. Not a compressor of arbitrary bytes, and not thread-shared state:
// codecs are stateless and may be used from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace meridian {

enum class CodecId : std::uint8_t {
  kFp32 = 0,
  kBf16 = 1,
  kInt8Prime = 2,   // PRIME: per-chunk RMS sigma, 256 bins over +-3 sigma, table of bin means
  kInt8MinMax = 3,  // PCCL: per-chunk min/max affine 8-bit
  kFp4 = 4,         // Streaming DiLoCo: 4-bit float E3M0, one fp32 scale per 32 values
  kTopk = 5,        // SparseLoCo: top-k per 4096 values, b-bit codes into a table (sparse)
};

// Every codec id, in id order: for registries, tests and benchmarks that cover them all.
inline constexpr CodecId kAllCodecIds[] = {CodecId::kFp32,       CodecId::kBf16,
                                           CodecId::kInt8Prime,  CodecId::kInt8MinMax,
                                           CodecId::kFp4,        CodecId::kTopk};
// The dense codecs, whose encodings the ring all-reduce sums (every codec but topk).
inline constexpr CodecId kRingCodecIds[] = {CodecId::kFp32, CodecId::kBf16, CodecId::kInt8Prime,
                                            CodecId::kInt8MinMax, CodecId::kFp4};

// Parameters of the codecs that take any: topk's density (kept values per value, in (0, 1]) and
// value bits (1 to 8). The defaults are SparseLoCo's operating point (arXiv 2508.15706: 1-3 %
// density, 2-bit values).
struct CodecParams {
  double topk_density = 0.02;
  int topk_bits = 2;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual CodecId id() const = 0;
  virtual std::string_view name() const = 0;
  // True when decode(encode(x)) == x bit for bit.
  virtual bool lossless() const = 0;
  // Exact size of the encoding of `count` values (a pure function of count).
  virtual std::size_t encoded_bytes(std::size_t count) const = 0;
  // Encodes `in` into `out`; out.size() must equal encoded_bytes(in.size()).
  virtual void encode(std::span<const float> in, std::span<std::byte> out) const = 0;
  // out = decode(in); in.size() must equal encoded_bytes(out.size()). Throws ProtocolError if
  // the encoding's own metadata is invalid (e.g. a non-finite scale).
  virtual void decode(std::span<const std::byte> in, std::span<float> out) const = 0;
  // acc += decode(in), in fp32. Same preconditions and errors as decode().
  virtual void decode_add(std::span<const std::byte> in, std::span<float> acc) const = 0;

  // The ring's paths (engine/core/collective): the same results as encode / decode / decode_add,
  // also extending `crc` (CRC-32C, engine/core/util/crc32c.h) over the encoded bytes and returning
  // it. `backup`, when not empty (same size as the values), first receives the values'
  // previous contents, so the caller can undo the change. The caller checks the returned CRC
  // afterwards and undoes the change if it is wrong, so a decoder may see corrupt bytes (it
  // must only throw ProtocolError on them). These defaults walk the data once per step; a
  // codec with a fused walk overrides them (fp32).
  virtual std::uint32_t encode_crc(std::span<const float> in, std::span<std::byte> out,
                                   std::uint32_t crc) const;
  virtual std::uint32_t decode_crc(std::span<const std::byte> in, std::span<float> out,
                                   std::span<float> backup, std::uint32_t crc) const;
  virtual std::uint32_t decode_add_crc(std::span<const std::byte> in, std::span<float> acc,
                                       std::span<float> backup, std::uint32_t crc) const;
  // The reduce-scatter's step for a codec that encodes in place (encodes_in_place(): the sums
  // are the payload of the message that forwards them): decode_add_crc, and over the sums as
  // they are written, their bytes' CRC-32C extended from `out_crc` (returned there) and how many
  // are not finite (`non_finite`). The default walks the sums twice more; fp32 fuses the walks.
  virtual std::uint32_t decode_add_crc_forward(std::span<const std::byte> in, std::span<float> acc,
                                               std::span<float> backup, std::uint32_t crc,
                                               std::uint32_t& out_crc,
                                               std::uint64_t& non_finite) const;
  // True when the encoding of values is their own bytes (fp32): the ring may then send the
  // values in place, after a separate header message ("Split messages").
  virtual bool encodes_in_place() const { return false; }
  // True when a sum of encodings is not an encoding of the sum (top-k: each rank keeps other
  // indices). The ring all-reduce refuses such a codec; DiLoCo all-gathers its pieces instead.
  virtual bool sparse() const { return false; }
  // Values encoded as one unit: encoding consecutive runs of whole blocks one by one gives the
  // same bytes (apart from per-encoding prefixes) as encoding them together. 1 for the
  // element-wise codecs; topk selects per chunk of 4096 values, so the all-gather cuts its
  // pieces at multiples of that and a piece's selection is the whole buffer's.
  virtual std::size_t block_values() const { return 1; }
};

// The codec for `id` (with `params` where it takes any); throws ConfigError for an unknown id or
// a parameter out of range.
std::unique_ptr<Codec> make_codec(CodecId id, const CodecParams& params = {});
// Parses "fp32", "bf16", "int8" (PRIME), "int8-minmax", "fp4", "topk"; throws ConfigError naming
// the choices.
CodecId parse_codec(std::string_view name);
std::string_view codec_name(CodecId id);
// The names of every codec in id order, comma-separated: "fp32, bf16, int8, int8-minmax, fp4,
// topk".
std::string codec_choices();

}  // namespace meridian
