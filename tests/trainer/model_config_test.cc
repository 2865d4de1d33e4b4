// Model configs: every shipped YAML loads, parameter counts and FLOPs per token match the
// closed-form formulas (and INTELLECT-1's published 10B numbers), bad files are refused.
#include "trainer/model_config.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"

namespace meridian::trainer {
namespace {

// Closed form, written independently of parameter_layout().
std::uint64_t formula_params(const ModelConfig& m) {
  const std::uint64_t d = m.hidden, V = m.vocab, f = m.ffn, L = m.layers;
  const std::uint64_t kv = static_cast<std::uint64_t>(m.kv_heads) * (d / m.heads);
  const std::uint64_t per_layer = 2 * d + 2 * d * d + 2 * d * kv + 3 * d * f;
  return 2 * V * d + d + L * per_layer;
}

TEST(ModelConfig, Intellect1TenBillionMatchesTheReport) {
  const auto m = load_named_config("intellect1-10b").model;
  EXPECT_EQ(m.layers, 42);
  EXPECT_EQ(m.head_dim(), 128);
  EXPECT_EQ(parameter_count(m), 10'211'381'248ull);
  EXPECT_EQ(non_embedding_parameter_count(m), 9'686'044'672ull);
  // 6 * 9,686,044,672 + 12 * 42 * 32 * 128 * 8192, exactly representable in a double.
  EXPECT_EQ(flops_per_token(m), 75'027'701'760.0);
  EXPECT_NEAR(flops_per_token(m), 7.50e10, 0.01e10);  // intellect1.md §2.1
}

TEST(ModelConfig, EveryShippedConfigMatchesTheClosedForm) {
  for (const char* name : {"tiny", "small", "150m", "1b", "intellect1-10b"}) {
    SCOPED_TRACE(name);
    const auto m = load_named_config(name).model;
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(parameter_count(m), formula_params(m));
    const double expect_flops =
        6.0 * static_cast<double>(formula_params(m) - std::uint64_t(m.vocab) * m.hidden) +
        12.0 * m.layers * m.heads * m.head_dim() * m.seq_len;
    EXPECT_EQ(flops_per_token(m), expect_flops);
  }
  const auto small = load_named_config("small").model;
  EXPECT_GE(parameter_count(small), 10'000'000u);
  EXPECT_LE(parameter_count(small), 20'000'000u);
  const auto m150 = parameter_count(load_named_config("150m").model);
  EXPECT_NEAR(static_cast<double>(m150), 150e6, 10e6);
}

TEST(ModelConfig, LayoutIsContiguousAndGroupedByLayer) {
  const auto m = load_named_config("tiny").model;
  const auto layout = parameter_layout(m);
  std::uint64_t next = 0;
  for (const auto& p : layout) {
    EXPECT_EQ(p.offset, next) << p.name;
    next += p.numel;
  }
  EXPECT_EQ(next, parameter_count(m));
  EXPECT_EQ(layout.front().name, "tok_embeddings.weight");
  EXPECT_EQ(layout.back().name, "output.weight");
  const auto b = group_boundaries(m);
  ASSERT_EQ(b.size(), static_cast<std::size_t>(m.layers + 3));  // layers + 2 groups
  EXPECT_EQ(b.front(), 0u);
  EXPECT_EQ(b[1], std::uint64_t(m.vocab) * m.hidden);
  EXPECT_EQ(b.back(), parameter_count(m));
  for (std::size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

class BadConfig : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             ("meridian_bad_config_" + std::to_string(::getpid()) + ".yaml"))
                .string();
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

std::string error_of(const std::string& path) {
  try {
    load_trainer_config(path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(BadConfig, UnknownKeyIsNamed) {
  const auto msg = error_of(write("model:\n  layers: 2\n  hiddn: 64\n"));
  EXPECT_NE(msg.find("unknown key 'model.hiddn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path_), std::string::npos) << msg;
}

TEST_F(BadConfig, WrongTypeAndInconsistentShapesAreNamed) {
  auto msg = error_of(write("model:\n  layers: two\n"));
  EXPECT_NE(msg.find(":2: key 'model.layers': expected a positive integer, got 'two'"),
            std::string::npos)
      << msg;
  msg = error_of(write("model:\n  heads: 4\n  kv_heads: 3\n"));
  EXPECT_NE(msg.find("kv_heads"), std::string::npos) << msg;
  msg = error_of(write("model:\n  layers: 2\ntrain:\n  batch: 0\n"));
  EXPECT_NE(msg.find("train.batch"), std::string::npos) << msg;
  msg = error_of(write("modle:\n  layers: 2\n"));
  EXPECT_NE(msg.find("unknown key 'modle'"), std::string::npos) << msg;
}

TEST(ModelConfig, MissingNamedConfigListsTheAvailableOnes) {
  try {
    load_named_config("nonexistent-model");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny"), std::string::npos) << e.what();
  }
}

// Found by the run_config fuzz target: a name with a NUL byte named the configs folder itself,
// and reading a folder escaped as std::ios_base::failure. Both are ConfigErrors now.
TEST(ModelConfig, ANameWithANulByteOrAFolderIsAConfigError) {
  const auto message = [](auto load) {
    try {
      load();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  EXPECT_NE(message([] { load_named_config(std::string("tiny\0x", 6)); }).find("NUL byte"),
            std::string::npos);
  EXPECT_NE(message([] { load_trainer_config(config_dir()); }).find("not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace meridian::trainer
