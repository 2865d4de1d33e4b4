// CPU feature detection and the bf16-or-fp32 choice (no LibTorch). Detection is x86 CPUID via
// GCC's builtins and aarch64 HWCAP2; other targets report no native bf16.
#include "trainer/precision.h"

#include <fstream>
#include <iostream>
#include <mutex>
#include <set>

#if MERIDIAN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

#if defined(__x86_64__) && defined(__clang__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace meridian::trainer {
namespace {

// The native-bf16 features this build can detect, as a user would search for them.
#if defined(__aarch64__)
constexpr const char* kNativeBf16Names = "FEAT_BF16";
#else
constexpr const char* kNativeBf16Names = "AVX512_BF16/AMX-BF16";
#endif

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

CpuFeatures detect() {
  CpuFeatures f;
  f.model = cpu_model_name();
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#if defined(__clang__)
  // Clang 14 (the fuzz tree's compiler) does not know "amx-bf16": the same CPUID bit
  // (leaf 7, EDX bit 22) read directly.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  f.amx_bf16 = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && ((edx >> 22) & 1) != 0;
#else
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
#elif defined(__aarch64__) && defined(__linux__) && defined(HWCAP2_BF16)
  f.arm_bf16 = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#endif
  return f;
}

}  // namespace

const char* bf16_autocast_name(Bf16Autocast setting) {
  switch (setting) {
    case Bf16Autocast::kOff:
      return "false";
    case Bf16Autocast::kOn:
      return "true";
    case Bf16Autocast::kAuto:
      return "auto";
  }
  return "?";
}

const CpuFeatures& host_cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string describe(const CpuFeatures& cpu) {
  std::string flags;
  auto flag = [&](const char* name, bool on) {
    flags += (flags.empty() ? "" : " ") + std::string(on ? "" : "-") + name;
  };
  flag("avx2", cpu.avx2);
  flag("avx512f", cpu.avx512f);
  flag("avx512_bf16", cpu.avx512_bf16);
  flag("amx_bf16", cpu.amx_bf16);
#if defined(__aarch64__)
  flag("bf16", cpu.arm_bf16);
#endif
  return cpu.model + "; " + flags;
}

Bf16Choice resolve_bf16(Bf16Autocast setting, const CpuFeatures& cpu) {
  Bf16Choice c;
  const bool native = cpu.native_bf16();
  switch (setting) {
    case Bf16Autocast::kOff:
      break;
    case Bf16Autocast::kAuto:
      c.bf16 = native;
      if (!native)
        c.note = std::string("meridian: this CPU has no native bf16 (no ") + kNativeBf16Names +
                 "); training in fp32 (train.bf16_autocast: auto)";
      break;
    case Bf16Autocast::kOn:
      c.bf16 = true;
      if (!native)
        c.note = std::string(
                     "meridian: warning: train.bf16_autocast is true but this CPU has no "
                     "native bf16 (no ") +
                 kNativeBf16Names +
                 "); bf16 autocast will be far slower than fp32 (25x on an AVX2 machine); set it "
                 "to auto";
      break;
  }
  return c;
}

std::string gemm_kernels() {
  const std::string bf16 = "; bf16 autocast: ATen's oneDNN bf16 ops";
#if MERIDIAN_HAVE_DNNL
  const char* isa = "below avx2";
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx2:
      isa = "avx2";
      break;
    case dnnl_cpu_isa_avx2_vnni:
      isa = "avx2_vnni";
      break;
    case dnnl_cpu_isa_avx512_core:
      isa = "avx512_core";
      break;
    case dnnl_cpu_isa_avx512_core_vnni:
      isa = "avx512_core_vnni";
      break;
    case dnnl_cpu_isa_avx512_core_bf16:
      isa = "avx512_core_bf16";
      break;
    case dnnl_cpu_isa_avx512_core_amx:
      isa = "avx512_core_amx";
      break;
    default:
      break;
  }
  return std::string("fp32: oneDNN dnnl_sgemm, ISA ") + isa + bf16;
#else
  return "fp32: ATen (built without the oneDNN header)" + bf16;
#endif
}

bool bf16_for_training(Bf16Autocast setting, const CpuFeatures& cpu, std::ostream& log) {
  const Bf16Choice c = resolve_bf16(setting, cpu);
  if (!c.note.empty()) {
    static std::mutex mu;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mu);
    if (said.insert(c.note).second) log << c.note << "\n";
  }
  return c.bf16;
}

bool bf16_for_training(Bf16Autocast setting) {
  return bf16_for_training(setting, host_cpu_features(), std::cerr);
}

}  // namespace meridian::trainer
