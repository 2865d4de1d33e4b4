// Which instruction set the int8 codec kernels run with: the portable kernels (compiled for the
// build's baseline, x86-64-v3 here) or AVX-512 ones chosen at run time when the CPU has them.
// Not a general CPU-feature library; only engine/codec/ and its tests and benchmarks use it.
#pragma once

namespace meridian {

enum class CodecIsa {
  kPortable,  // the plain C++ kernels, vectorised by the compiler for the build's target
  kAvx512,    // AVX-512 F/BW/VL/DQ/VBMI kernels (x86-64 builds on CPUs that have them)
};

// The kernels the codecs use now: kAvx512 when this is an x86-64 build, the CPU supports
// AVX-512 F, BW, VL, DQ and VBMI, and set_codec_avx512_allowed(false) is not in effect.
CodecIsa codec_isa();

// Process-wide switch for tests and benchmarks (default true): false makes every codec run its
// portable kernels. Both kernel sets produce bit-identical encodings and decodings; the switch
// exists so that both can be tested and timed on one machine. Atomic; flip it between calls,
// not while another thread is encoding if that thread must see one kernel set throughout.
void set_codec_avx512_allowed(bool allowed);

}  // namespace meridian
