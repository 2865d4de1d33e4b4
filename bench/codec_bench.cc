// Codec throughput on one thread: each codec's encode, decode and decode_add next to memcpy of
// the same fp32 buffer in the same run. Bandwidth is counted over the fp32 bytes (4 per value)
// for every row, memcpy included, so rows compare directly. Not a multi-threaded benchmark.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/codec/codec.h"
#include "engine/core/codec/codec_isa.h"

namespace meridian {
namespace {

std::vector<float> gaussian(std::size_t n) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

void set_fp32_bytes(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(n * sizeof(float)));
}

void BM_Memcpy(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::vector<float> src = gaussian(n);
  std::vector<float> dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_fp32_bytes(state, n);
}

enum class Op { kEncode, kDecode, kDecodeAdd };

void BM_Codec(benchmark::State& state, CodecId id, Op op) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto codec = make_codec(id);
  const std::vector<float> x = gaussian(n);
  std::vector<std::byte> bytes(codec->encoded_bytes(n));
  codec->encode(x, bytes);
  std::vector<float> out(n, 0.0f);
  for (auto _ : state) {
    switch (op) {
      case Op::kEncode:
        codec->encode(x, bytes);
        break;
      case Op::kDecode:
        codec->decode(bytes, out);
        break;
      case Op::kDecodeAdd:
        codec->decode_add(bytes, out);
        break;
    }
    benchmark::DoNotOptimize(bytes.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_fp32_bytes(state, n);
  state.counters["wire_bytes_per_value"] =
      static_cast<double>(codec->encoded_bytes(n)) / static_cast<double>(n);
}

// The ring's use: a 64 MiB bucket from main memory encoded as the ring encodes it, one chunk of
// RingOptions::max_chunk_bytes (4 MiB = 1 Mi values) at a time, each chunk its own codec frame.
void BM_CodecChunked(benchmark::State& state, CodecId id) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::size_t chunk = static_cast<std::size_t>(state.range(1));
  const auto codec = make_codec(id);
  const std::vector<float> x = gaussian(n);
  const std::size_t frame = codec->encoded_bytes(chunk);
  std::vector<std::byte> bytes(frame * ((n + chunk - 1) / chunk));
  for (auto _ : state) {
    for (std::size_t off = 0, k = 0; off < n; off += chunk, ++k) {
      const std::size_t len = std::min(chunk, n - off);
      codec->encode(std::span<const float>(x.data() + off, len),
                    std::span<std::byte>(bytes.data() + k * frame, codec->encoded_bytes(len)));
    }
    benchmark::DoNotOptimize(bytes.data());
    benchmark::ClobberMemory();
  }
  set_fp32_bytes(state, n);
}

// The floor of any encoder that updates one histogram entry per value, as int8 PRIME's bin means
// need: a count-only byte histogram (t[j % tables][code] += 1) of the codes PRIME gives N(0, 1)
// data, with `tables` interleaved sub-tables. One read-modify-write per value and nothing else;
// bandwidth counted over the 4 fp32 bytes each code stands for, so it compares with memcpy.
template <std::size_t kTables>
  requires(8 % kTables == 0)
void BM_HistogramFloor(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto codec = make_codec(CodecId::kInt8Prime);
  std::vector<std::byte> bytes(codec->encoded_bytes(n));
  codec->encode(gaussian(n), bytes);
  std::vector<std::uint8_t> q(n);
  std::memcpy(q.data(), bytes.data() + (bytes.size() - n), n);  // the codes follow the 1 KiB LUT
  std::vector<std::uint64_t> tables(kTables * 256, 0);
  for (auto _ : state) {
    std::uint64_t* t = tables.data();
    const std::uint8_t* c = q.data();
    std::size_t j = 0;
    for (; j + 8 <= n; j += 8) {
#pragma GCC unroll 8  // unrolled by 8 whatever the table count, so loop overhead stays small
      for (std::size_t h = 0; h < 8; ++h) t[(h % kTables) * 256 + c[j + h]] += 1;
    }
    for (; j < n; ++j) t[c[j]] += 1;
    benchmark::DoNotOptimize(t);
    benchmark::ClobberMemory();
  }
  set_fp32_bytes(state, n);
}

#if defined(__x86_64__)
// The core clock, measured as a chain of dependent integer adds (one per cycle on any x86-64
// core): its adds_per_second turns the times per value above into cycles per value, which the
// nominal MHz Google Benchmark prints (from /proc/cpuinfo) does not.
void BM_CoreClock(benchmark::State& state) {
  constexpr std::int64_t kAdds = std::int64_t{1} << 22;
  std::uint64_t chain = 0;
  for (auto _ : state) {
    for (std::int64_t i = 0; i < kAdds; ++i) __asm__ volatile("add $1, %0" : "+r"(chain));
  }
  benchmark::DoNotOptimize(chain);
  state.counters["adds_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(kAdds),
                         benchmark::Counter::kIsRate);
}
#endif

// 1 Mi values (4 MiB: beyond L2, inside L3) and 16 Mi values (64 MiB: main memory).
constexpr std::int64_t kSizes[] = {1 << 20, 1 << 24};

// The fastest repetition besides the median: on a shared machine other jobs only ever slow a
// repetition down, so the minimum of the times is the steadiest comparison between rows. (For
// rate counters such as bytes_per_second this aggregate is the slowest rate: read its times.)
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void register_all() {
  std::vector<benchmark::internal::Benchmark*> all;
  for (std::int64_t n : kSizes) {
    all.push_back(benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Arg(n));
  }
  for (CodecId id : kAllCodecIds) {
    const std::string name(codec_name(id));
    for (auto [op, op_name] : {std::pair{Op::kEncode, "encode"}, std::pair{Op::kDecode, "decode"},
                               std::pair{Op::kDecodeAdd, "decode_add"}}) {
      auto* b = benchmark::RegisterBenchmark((name + "/" + op_name).c_str(), BM_Codec, id, op);
      for (std::int64_t n : kSizes) b->Arg(n);
      all.push_back(b);
    }
    all.push_back(
        benchmark::RegisterBenchmark((name + "/encode_chunked").c_str(), BM_CodecChunked, id)
            ->Args({1 << 24, 1 << 20}));
  }
  for (std::int64_t n : kSizes) {
    all.push_back(benchmark::RegisterBenchmark("int8/histogram_floor/tables:2",
                                               BM_HistogramFloor<2>)->Arg(n));
    all.push_back(benchmark::RegisterBenchmark("int8/histogram_floor/tables:8",
                                               BM_HistogramFloor<8>)->Arg(n));
  }
#if defined(__x86_64__)
  all.push_back(benchmark::RegisterBenchmark("clock/dependent_add", BM_CoreClock));
#endif
  for (auto* b : all) b->ComputeStatistics("min", min_of);
}

}  // namespace
}  // namespace meridian

int main(int argc, char** argv) {
  // --portable / --avx2: cap the kernel set (codec_isa.h); the default is the best the CPU has.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg != "--portable" && arg != "--avx2") continue;
    meridian::set_codec_isa_limit(arg == "--avx2" ? meridian::CodecIsa::kAvx2
                                                  : meridian::CodecIsa::kPortable);
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    --i;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("codec_kernels", meridian::codec_isa_name(meridian::codec_isa()));
  meridian::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
