// Codec registry: ids, names and construction.
#include "engine/codec/codec.h"

#include <atomic>

#include "engine/codec/bf16_codec.h"
#include "engine/codec/codec_isa.h"
#include "engine/codec/fp32_codec.h"
#include "engine/codec/int8_minmax_codec.h"
#include "engine/codec/int8_prime_codec.h"
#include "engine/error.h"

namespace meridian {

std::unique_ptr<Codec> make_codec(CodecId id) {
  switch (id) {
    case CodecId::kFp32:
      return std::make_unique<Fp32Codec>();
    case CodecId::kBf16:
      return std::make_unique<Bf16Codec>();
    case CodecId::kInt8Prime:
      return std::make_unique<Int8PrimeCodec>();
    case CodecId::kInt8MinMax:
      return std::make_unique<Int8MinMaxCodec>();
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
  }
  return "unknown";
}

CodecId parse_codec(std::string_view name) {
  for (CodecId id : kAllCodecIds) {
    if (codec_name(id) == name) return id;
  }
  throw ConfigError("unknown codec '" + std::string(name) +
                    "': expected one of fp32, bf16, int8, int8-minmax");
}

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

std::atomic<bool> avx512_allowed{true};

}  // namespace

CodecIsa codec_isa() {
  static const bool has_avx512 = cpu_has_avx512();
  return has_avx512 && avx512_allowed.load(std::memory_order_relaxed) ? CodecIsa::kAvx512
                                                                       : CodecIsa::kPortable;
}

void set_codec_avx512_allowed(bool allowed) {
  avx512_allowed.store(allowed, std::memory_order_relaxed);
}

}  // namespace meridian
