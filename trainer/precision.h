// The trainer's matmul precision: the `train.bf16_autocast` setting (true, false, auto) resolved
// against whether the hardware computes bf16 natively. Pure C++ (no LibTorch), so the choice is
// testable with made-up CPUs; not the autocast itself (torch_compat.h) nor any GPU path (the
// trainer runs on the CPU only).
#pragma once

#include <iosfwd>
#include <string>

namespace meridian::trainer {

// What `train.bf16_autocast` asks for. kAuto: bf16 only where the CPU computes it natively.
enum class Bf16Autocast { kOff, kOn, kAuto };

// "false", "true", "auto": the YAML spellings.
const char* bf16_autocast_name(Bf16Autocast setting);

// The CPU facts the choice rests on (x86 CPUID as GCC's __builtin_cpu_supports reads it, with the
// OS's AVX-512 state checked; aarch64 HWCAP2). Tests build their own.
struct CpuFeatures {
  std::string model = "unknown";  // /proc/cpuinfo "model name" (x86) or "unknown"
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // x86 AVX512_BF16: vdpbf16ps, what oneDNN's bf16 GEMMs need
  bool amx_bf16 = false;     // x86 AMX-BF16 tiles
  bool arm_bf16 = false;     // aarch64 FEAT_BF16: bfdot, bfmmla

  // Whether the CPU has bf16 arithmetic; without it bf16 matmuls are emulated by converting to
  // and from fp32 (`small` trained 25x slower than in fp32 on an AVX2 machine, issue 23).
  bool native_bf16() const { return avx512_bf16 || amx_bf16 || arm_bf16; }
};

// This machine's, detected on the first call (thread-safe).
const CpuFeatures& host_cpu_features();

// One line: "AMD EPYC; avx2 avx512f avx512_bf16 -amx_bf16", for logs and result files.
std::string describe(const CpuFeatures& cpu);

struct Bf16Choice {
  bool bf16 = false;  // run the forward pass under bf16 autocast
  std::string note;   // one line for stderr, empty when there is nothing to say
};

// The choice for `setting` on `cpu`:
//   auto  -> bf16 when cpu.native_bf16(), else fp32 with a note saying so;
//   true  -> bf16, with a warning when the CPU lacks native bf16 (it will be slow);
//   false -> fp32.
Bf16Choice resolve_bf16(Bf16Autocast setting, const CpuFeatures& cpu);

// The GEMM kernels this build and CPU run, for benchmark tables: "fp32 oneDNN dnnl_sgemm
// (avx512_core_bf16); bf16 ATen/oneDNN" (oneDNN's ISA as it chose it at run time) or "fp32 ATen
// (...)" when the build had no oneDNN header.
std::string gemm_kernels();

// resolve_bf16 on `cpu`; its note goes to `log` once per process (a run with many workers in
// one process says it once). Thread-safe.
bool bf16_for_training(Bf16Autocast setting, const CpuFeatures& cpu, std::ostream& log);
// The same on this machine, notes to stderr: what TorchWorker and post-training call.
bool bf16_for_training(Bf16Autocast setting);

}  // namespace meridian::trainer
