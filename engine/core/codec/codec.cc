// Codec registry: ids, names and construction.
#include "engine/core/codec/codec.h"

#include <algorithm>
#include <atomic>

#include "engine/core/codec/bf16_codec.h"
#include "engine/core/codec/codec_isa.h"
#include "engine/core/codec/fp32_codec.h"
#include "engine/core/codec/fp4_codec.h"
#include "engine/core/codec/int8_minmax_codec.h"
#include "engine/core/codec/int8_prime_codec.h"
#include "engine/core/codec/topk_codec.h"
#include "engine/core/error.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/util/finite.h"

namespace meridian {

namespace {

void keep(std::span<const float> values, std::span<float> backup) {
  if (!backup.empty()) std::copy(values.begin(), values.end(), backup.begin());
}

}  // namespace

std::uint32_t Codec::encode_crc(std::span<const float> in, std::span<std::byte> out,
                                std::uint32_t crc) const {
  encode(in, out);
  return crc32c(out, crc);
}

std::uint32_t Codec::decode_crc(std::span<const std::byte> in, std::span<float> out,
                                std::span<float> backup, std::uint32_t crc) const {
  keep(out, backup);
  decode(in, out);
  return crc32c(in, crc);
}

std::uint32_t Codec::decode_add_crc(std::span<const std::byte> in, std::span<float> acc,
                                    std::span<float> backup, std::uint32_t crc) const {
  keep(acc, backup);
  decode_add(in, acc);
  return crc32c(in, crc);
}

std::uint32_t Codec::decode_add_crc_forward(std::span<const std::byte> in, std::span<float> acc,
                                            std::span<float> backup, std::uint32_t crc,
                                            std::uint32_t& out_crc,
                                            std::uint64_t& non_finite) const {
  crc = decode_add_crc(in, acc, backup, crc);
  out_crc = crc32c(std::as_bytes(acc), out_crc);
  non_finite = count_non_finite(acc);
  return crc;
}

std::unique_ptr<Codec> make_codec(CodecId id, const CodecParams& params) {
  switch (id) {
    case CodecId::kFp32:
      return std::make_unique<Fp32Codec>();
    case CodecId::kBf16:
      return std::make_unique<Bf16Codec>();
    case CodecId::kInt8Prime:
      return std::make_unique<Int8PrimeCodec>();
    case CodecId::kInt8MinMax:
      return std::make_unique<Int8MinMaxCodec>();
    case CodecId::kFp4:
      return std::make_unique<Fp4Codec>();
    case CodecId::kTopk:
      return std::make_unique<TopkCodec>(params.topk_density, params.topk_bits);
  }
  throw ConfigError("codec '" + std::string(codec_name(id)) + "' is not built into this engine");
}

std::string_view codec_name(CodecId id) {
  switch (id) {
    case CodecId::kFp32:
      return "fp32";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kInt8Prime:
      return "int8";
    case CodecId::kInt8MinMax:
      return "int8-minmax";
    case CodecId::kFp4:
      return "fp4";
    case CodecId::kTopk:
      return "topk";
  }
  return "unknown";
}

std::string codec_choices() {
  std::string names;
  for (CodecId id : kAllCodecIds) (names += names.empty() ? "" : ", ") += codec_name(id);
  return names;
}

CodecId parse_codec(std::string_view name) {
  for (CodecId id : kAllCodecIds) {
    if (codec_name(id) == name) return id;
  }
  throw ConfigError("unknown codec '" + std::string(name) + "': expected one of " +
                    codec_choices());
}

namespace {

// The best kernel set this build can run on this CPU.
CodecIsa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vbmi"))
    return CodecIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CodecIsa::kAvx2;
#endif
  return CodecIsa::kPortable;
}

std::atomic<CodecIsa> isa_limit{CodecIsa::kAvx512};

}  // namespace

CodecIsa codec_isa() {
  static const CodecIsa best = cpu_isa();
  const CodecIsa limit = isa_limit.load(std::memory_order_relaxed);
  return static_cast<int>(limit) < static_cast<int>(best) ? limit : best;
}

void set_codec_isa_limit(CodecIsa limit) { isa_limit.store(limit, std::memory_order_relaxed); }

void set_codec_avx512_allowed(bool allowed) {
  set_codec_isa_limit(allowed ? CodecIsa::kAvx512 : CodecIsa::kAvx2);
}

const char* codec_isa_name(CodecIsa isa) {
  switch (isa) {
    case CodecIsa::kPortable:
      return "portable";
    case CodecIsa::kAvx2:
      return "avx2";
    case CodecIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace meridian
