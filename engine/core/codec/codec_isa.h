// Which instruction set the int8 codec kernels run with: the portable kernels (compiled for the
// build's baseline, x86-64-v3 here), AVX2 or AVX-512 ones chosen at run time from the CPU.
// Not a general CPU-feature library; only engine/core/codec/ and its tests and benchmarks use it.
#pragma once

namespace meridian {

// Ordered: a later set needs everything an earlier one needs.
enum class CodecIsa {
  kPortable,  // the plain C++ kernels, vectorised by the compiler for the build's target
  kAvx2,      // AVX2 + FMA intrinsics for the int8 PRIME encode (sigma and quantise passes);
              // everything else runs the portable kernels (x86-64 builds only)
  kAvx512,    // AVX-512 F/BW/VL/DQ/VBMI kernels (x86-64 builds on CPUs that have them)
};

// The kernels the codecs use now: the best set this build and CPU support (kAvx512 when the CPU
// has AVX-512 F, BW, VL, DQ and VBMI; else kAvx2 when it has AVX2 and FMA; else kPortable), but
// no later than the limit set by set_codec_isa_limit().
CodecIsa codec_isa();

// Process-wide cap for tests and benchmarks (default kAvx512, i.e. no cap): codec_isa() never
// returns a set later than `limit`. All kernel sets produce bit-identical encodings and
// decodings; the cap exists so that each can be tested and timed on one machine. Atomic; change
// it between calls, not while another thread is encoding if that thread must see one kernel set
// throughout.
void set_codec_isa_limit(CodecIsa limit);

// set_codec_isa_limit(allowed ? kAvx512 : kAvx2): false means "no AVX-512" (the AVX2 kernels
// where the CPU has them, else the portable ones).
void set_codec_avx512_allowed(bool allowed);

// "portable", "avx2" or "avx512" (benchmark tables record which kernels ran).
const char* codec_isa_name(CodecIsa isa);

}  // namespace meridian
