// The bf16-or-fp32 choice (issue 23): `auto` trains in fp32 on a CPU without native bf16 (with
// a note) and in bf16 where the CPU has it; explicit settings are followed, `true` with a
// warning where it will be slow. Made-up CPUs; the host's detection is checked against
// /proc/cpuinfo.
#include "trainer/precision.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/events/json.h"
#include "trainer/model_config.h"
#include "trainer/run_config.h"

namespace meridian::trainer {
namespace {

// The machine: AVX2 and FMA, no AVX-512 (bf16 autocast there: 35.8 vs 885 tokens/s).
CpuFeatures avx2_cpu() {
  CpuFeatures c;
  c.model = "AVX2 test CPU";
  c.avx2 = true;
  return c;
}

CpuFeatures avx512_bf16_cpu() {
  CpuFeatures c = avx2_cpu();
  c.model = "AVX512_BF16 test CPU";
  c.avx512f = true;
  c.avx512_bf16 = true;
  return c;
}

TEST(Precision, SmallTrainsInFp32OnACpuWithoutBf16) {
  const TrainConfig t = load_named_config("small").train;
  EXPECT_EQ(t.bf16_autocast, Bf16Autocast::kAuto);
  const Bf16Choice c = resolve_bf16(t.bf16_autocast, avx2_cpu());
  EXPECT_FALSE(c.bf16);
  EXPECT_TRUE(resolve_bf16(t.bf16_autocast, avx512_bf16_cpu()).bf16);
  EXPECT_EQ(load_named_config("intellect1-10b").train.bf16_autocast, Bf16Autocast::kAuto);
}

TEST(Precision, AutoWithoutNativeBf16IsFp32WithANote) {
  const Bf16Choice c = resolve_bf16(Bf16Autocast::kAuto, avx2_cpu());
  EXPECT_FALSE(c.bf16);
#if defined(__x86_64__)
  EXPECT_EQ(c.note,
            "meridian: this CPU has no native bf16 (no AVX512_BF16/AMX-BF16); training in fp32 "
            "(train.bf16_autocast: auto)");
#endif
  EXPECT_EQ(c.note.find('\n'), std::string::npos);  // one line
  // AVX-512 alone (Skylake-X, Ice Lake) does not compute bf16 either.
  CpuFeatures avx512 = avx2_cpu();
  avx512.avx512f = true;
  EXPECT_FALSE(resolve_bf16(Bf16Autocast::kAuto, avx512).bf16);
}

TEST(Precision, AutoWithNativeBf16IsBf16Silently) {
  CpuFeatures amx = avx2_cpu(), arm;
  amx.amx_bf16 = true;
  arm.arm_bf16 = true;
  for (const CpuFeatures& cpu : {avx512_bf16_cpu(), amx, arm}) {
    SCOPED_TRACE(describe(cpu));
    const Bf16Choice c = resolve_bf16(Bf16Autocast::kAuto, cpu);
    EXPECT_TRUE(c.bf16);
    EXPECT_EQ(c.note, "");
  }
}

TEST(Precision, ExplicitTrueIsFollowedWithAWarningWhereItIsSlow) {
  const Bf16Choice slow = resolve_bf16(Bf16Autocast::kOn, avx2_cpu());
  EXPECT_TRUE(slow.bf16);
  EXPECT_NE(slow.note.find("warning"), std::string::npos) << slow.note;
  EXPECT_NE(slow.note.find("slower than fp32"), std::string::npos) << slow.note;
  EXPECT_EQ(slow.note.find('\n'), std::string::npos);
  const Bf16Choice fast = resolve_bf16(Bf16Autocast::kOn, avx512_bf16_cpu());
  EXPECT_TRUE(fast.bf16);
  EXPECT_EQ(fast.note, "");
}

// Many workers in one process (train-diloco, the simulator) print the note once.
TEST(Precision, TheNoteIsPrintedOncePerProcess) {
  std::ostringstream log;
  for (int worker = 0; worker < 3; ++worker)
    EXPECT_FALSE(bf16_for_training(Bf16Autocast::kAuto, avx2_cpu(), log));
  EXPECT_EQ(log.str(), resolve_bf16(Bf16Autocast::kAuto, avx2_cpu()).note + "\n");
  EXPECT_TRUE(bf16_for_training(Bf16Autocast::kAuto, avx512_bf16_cpu(), log));
  EXPECT_EQ(log.str(), resolve_bf16(Bf16Autocast::kAuto, avx2_cpu()).note + "\n");
}

TEST(Precision, ExplicitFalseIsFp32Silently) {
  for (const CpuFeatures& cpu : {avx2_cpu(), avx512_bf16_cpu()}) {
    const Bf16Choice c = resolve_bf16(Bf16Autocast::kOff, cpu);
    EXPECT_FALSE(c.bf16);
    EXPECT_EQ(c.note, "");
  }
}

TEST(Precision, DescribeNamesTheModelAndEachFlag) {
  EXPECT_EQ(describe(avx512_bf16_cpu())
                .rfind("AVX512_BF16 test CPU; avx2 avx512f avx512_bf16 -amx_bf16", 0),
            0u)
      << describe(avx512_bf16_cpu());
  EXPECT_NE(describe(avx2_cpu()).find("avx2 -avx512f -avx512_bf16 -amx_bf16"), std::string::npos)
      << describe(avx2_cpu());
}

// The host's detection agrees with the kernel's view of the CPU (x86 Linux).
TEST(Precision, HostDetectionAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = line.substr(line.find(':') + 1) + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no x86 flags line in /proc/cpuinfo";
  auto has = [&](const char* f) {
    return flags.find(" " + std::string(f) + " ") != std::string::npos;
  };
  const CpuFeatures& h = host_cpu_features();
  EXPECT_EQ(h.avx2, has("avx2"));
  EXPECT_EQ(h.avx512f, has("avx512f"));
  EXPECT_EQ(h.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(h.amx_bf16, has("amx_bf16"));
  EXPECT_NE(h.model, "");
}

class Bf16Yaml : public ::testing::Test {
 protected:
  // The setting read from `train: {bf16_autocast: <value>}`, or the ConfigError's text.
  std::string read(const std::string& value, Bf16Autocast* out) {
    path_ = (std::filesystem::temp_directory_path() /
             ("meridian_bf16_config_" + std::to_string(::getpid()) + ".yaml"))
                .string();
    std::ofstream(path_) << "model:\n  layers: 2\ntrain:\n  bf16_autocast: " << value << "\n";
    try {
      *out = load_trainer_config(path_).train.bf16_autocast;
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(Bf16Yaml, AcceptsTrueFalseAndAutoAndNamesABadValue) {
  Bf16Autocast s = Bf16Autocast::kOff;
  EXPECT_EQ(read("auto", &s), "");
  EXPECT_EQ(s, Bf16Autocast::kAuto);
  EXPECT_EQ(read("true", &s), "");
  EXPECT_EQ(s, Bf16Autocast::kOn);
  EXPECT_EQ(read("false", &s), "");
  EXPECT_EQ(s, Bf16Autocast::kOff);
  const std::string msg = read("fast", &s);
  EXPECT_NE(msg.find("key 'train.bf16_autocast': expected true, false or auto, got 'fast'"),
            std::string::npos)
      << msg;
  EXPECT_STREQ(bf16_autocast_name(Bf16Autocast::kAuto), "auto");
  EXPECT_STREQ(bf16_autocast_name(Bf16Autocast::kOn), "true");
  EXPECT_STREQ(bf16_autocast_name(Bf16Autocast::kOff), "false");
}

// The config record says what this machine trains in, the setting it came from, and the CPU.
TEST(Precision, TheConfigRecordEchoesTheResolvedChoice) {
  const config::RunFile f = config::parse_run_file("model: small\n", "emu.yaml");
  const std::string json = trainer_config_json(trainer_config(f), f.data).str();
  const bool native = host_cpu_features().native_bf16();
  EXPECT_NE(json.find(std::string("\"bf16_autocast\":") + (native ? "true" : "false")),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"bf16_autocast_setting\":\"auto\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"cpu\":" + json_quote(describe(host_cpu_features()))), std::string::npos)
      << json;
}

// Benchmarks print this next to their numbers: it names the fp32 GEMM library and, for oneDNN,
// the ISA it chose.
TEST(Precision, GemmKernelsNameTheLibraries) {
  const std::string k = gemm_kernels();
  EXPECT_EQ(k.rfind("fp32: ", 0), 0u) << k;
  EXPECT_NE(k.find("bf16 autocast: "), std::string::npos) << k;
  const CpuFeatures& cpu = host_cpu_features();
  if (k.find("oneDNN dnnl_sgemm") != std::string::npos && cpu.avx512_bf16 && !cpu.amx_bf16) {
    EXPECT_NE(k.find("ISA avx512_core_bf16"), std::string::npos) << k;
  }
}

TEST(Precision, ConfigsWithoutTheKeyStayFp32) {
  EXPECT_EQ(load_named_config("tiny").train.bf16_autocast, Bf16Autocast::kOff);
}

}  // namespace
}  // namespace meridian::trainer
