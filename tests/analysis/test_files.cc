// Test support (see test_files.h).
#include "tests/analysis/test_files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/gnuplot.h"
#include "engine/core/error.h"

namespace meridian::analysis::testing {
namespace fs = std::filesystem;

bool have_gnuplot() {
  try {
    find_gnuplot("gnuplot");
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// 8-byte signature, 4-byte length, "IHDR", then big-endian width and height.
std::pair<int, int> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), 24);
  EXPECT_EQ(in.gcount(), 24) << path;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h) + 1, 3), "PNG") << path;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h) + 12, 4), "IHDR") << path;
  auto be32 = [&](int o) { return (h[o] << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3]; };
  return {be32(16), be32(20)};
}

}  // namespace meridian::analysis::testing
