// Internal helpers shared by the codec implementations: block iteration shaped for GCC's -O2
// vectoriser and unaligned little-endian loads/stores. Not part of the Codec interface; only
// engine/core/codec/*.cc include it.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 warns about the deliberately undefined upper halves inside its own intrinsic headers
// (_mm512_undefined_*) once they are inlined; the warning is about the header, not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace meridian::codec_detail {

static_assert(std::endian::native == std::endian::little,
              "codec encodings are little-endian and copied byte for byte");

// GCC 12 at -O2 vectorises with its "very cheap" cost model, which rejects any loop that would
// need a scalar epilogue or a runtime alias check (checked with -fopt-info-vec: a plain loop
// over n elements stays scalar). So every kernel is an always-inline function over `len`
// elements taking __restrict pointers, run by for_each_block(): full blocks with a compile-time
// length (after inlining the trip count is a constant and the loop vectorises with no epilogue)
// and one tail call with the remainder (scalar, < kBlock elements).
inline constexpr std::size_t kBlock = 64;

#define MERIDIAN_ALWAYS_INLINE __attribute__((always_inline))

// AVX-512 (AVX2) variants of a kernel are the same always-inline C++ (or intrinsics) compiled
// inside a function carrying MERIDIAN_TARGET_AVX512 (MERIDIAN_TARGET_AVX2), called only when
// codec_isa() (codec_isa.h) says kAvx512 (kAvx2). MERIDIAN_CODEC_AVX512 is 1 where both exist
// (x86-64 with GCC or Clang). prefer-vector-width=512: without it GCC's generic tuning
// vectorises with 256-bit vectors.
// Clang (14) rejects AVX-512 vector code in a function that only its target attribute enables
// and does not know prefer-vector-width, so under clang these kernels exist only in translation
// units compiled for AVX-512 (the checking tree adds the flags where the machine has it;
// tests/fuzz/README.md).
#if defined(__x86_64__) && defined(__GNUC__) && (!defined(__clang__) || defined(__AVX512VBMI__))
#define MERIDIAN_CODEC_AVX512 1
#if defined(__clang__)
#define MERIDIAN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))
#else
#define MERIDIAN_TARGET_AVX512                                                       \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,"            \
                        "prefer-vector-width=512")))
#endif
#define MERIDIAN_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define MERIDIAN_CODEC_AVX512 0
#endif

#if MERIDIAN_CODEC_AVX512
// 16 floats loaded into a register and kept there. Without the empty asm GCC folds the load into
// every instruction that uses the value; in the AVX-512 min-max pass that made three
// instructions read each line, two of them masked (vminps/vmaxps mem{k}), and the pass ran at
// 213–231 ps per value from main memory against 92 with this load (49 against 36–42 in L3). In
// the PRIME sigma pass (a masked move from memory) it gained ~6 % from main memory.
MERIDIAN_TARGET_AVX512 MERIDIAN_ALWAYS_INLINE inline __m512i load_in_register(const float* p) {
  __m512i u = _mm512_loadu_si512(p);
  __asm__("" : "+v"(u));
  return u;
}
#endif

// Calls body(begin, len) over [0, n): len == kLen except for the last call.
template <std::size_t kLen = kBlock, typename Body>
MERIDIAN_ALWAYS_INLINE inline void for_each_block(std::size_t n, Body&& body) {
  std::size_t i = 0;
  for (; i + kLen <= n; i += kLen) body(i, kLen);
  if (i < n) body(i, n - i);
}

// How far ahead a streaming pass over fp32 data prefetches it: 8 KiB. From main memory one read
// stream ran at about 2/3 of the read bandwidth a memcpy reaches (the hardware prefetchers alone
// keep too few lines in flight): this took the PRIME sigma pass from ~130 to ~105 ps per value
// and the min-max encode's two passes from ~360 to ~300 (results/bench/codec.md). Not in the
// PRIME quantise pass, which is bound by its instructions, not by memory (no gain measured).
inline constexpr std::size_t kPrefetchValues = 2048;

// Prefetches the block kPrefetchValues ahead of x[i], if it is inside x[0, n).
MERIDIAN_ALWAYS_INLINE inline void prefetch_ahead(const float* x, std::size_t i, std::size_t n) {
  if (i + kPrefetchValues + kBlock <= n) {
    for (std::size_t j = 0; j < kBlock; j += 16) __builtin_prefetch(x + i + kPrefetchValues + j);
  }
}

// True for finite values; false for NaN and +-inf. Branch-free so it vectorises.
MERIDIAN_ALWAYS_INLINE inline bool is_finite(float x) { return std::fabs(x) <= FLT_MAX; }

// x if finite, else 0 (NaN and +-inf). A bit mask, not a select: GCC 12 does not vectorise the
// select form inside the fully unrolled lane loops used for reductions.
MERIDIAN_ALWAYS_INLINE inline float finite_or_zero(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>((u & 0x7FFFFFFFu) < 0x7F800000u);
  return std::bit_cast<float>(u & keep);
}

// NaN becomes 0; everything else is unchanged. Branch-free.
MERIDIAN_ALWAYS_INLINE inline float nan_to_zero(float x) { return x == x ? x : 0.0f; }

// The 8-bit code of t: clamped to [0, 255] (NaN to 0), then rounded to nearest, ties to even (the
// default rounding mode, which the engine never changes). Clamping before rounding is measurably
// faster than after (GCC 12 emits a shorter vector sequence), and std::nearbyint vectorises to
// vroundps where __builtin_roundevenf does not.
MERIDIAN_ALWAYS_INLINE inline std::uint8_t to_code(float t) {
  t = t > 0.0f ? t : 0.0f;
  t = t < 255.0f ? t : 255.0f;
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(std::nearbyint(t)));
}

MERIDIAN_ALWAYS_INLINE inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

MERIDIAN_ALWAYS_INLINE inline void store_f32(std::byte* p, float v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace meridian::codec_detail
