// The engine's layering rule, enforced: no file under engine/ outside engine/transport/
// includes SimGrid, Gloo, NCCL, CUDA or LibTorch headers, and only backends (engine/transport/,
// engine/runtime/, and the TCP and etcd stores in engine/store/tcp_store* and engine/store/etcd/,
// which only real runs use)
// touch OS threads or clocks directly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<std::string> violations(const std::regex& forbidden, const std::vector<std::string>& exempt) {
  std::vector<std::string> out;
  const fs::path engine = fs::path(MERIDIAN_SOURCE_DIR) / "engine";
  for (const auto& entry : fs::recursive_directory_iterator(engine)) {
    if (!entry.is_regular_file()) continue;
    const auto ext = entry.path().extension();
    if (ext != ".h" && ext != ".cc" && ext != ".hpp" && ext != ".cpp") continue;
    const std::string rel = fs::relative(entry.path(), engine).string();
    bool skip = false;
    for (const auto& e : exempt) skip = skip || rel.rfind(e, 0) == 0;
    if (skip) continue;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (const auto c = line.find("//"); c != std::string::npos) line.resize(c);  // code only
      if (std::regex_search(line, forbidden)) out.push_back(rel + ":" + std::to_string(n) + ": " + line);
    }
  }
  return out;
}

TEST(Layering, EngineIncludesNoBackendHeaders) {
  const std::regex forbidden(
      R"(^\s*#\s*include\s*[<"](simgrid/|xbt/|gloo/|nccl|cuda|cublas|torch/|ATen/|c10/))");
  const auto bad = violations(forbidden, {"transport/"});
  for (const auto& b : bad) ADD_FAILURE() << b;
  EXPECT_TRUE(bad.empty());
}

TEST(Layering, OnlyBackendsUseThreadsAndClocks) {
  const std::regex forbidden(R"(std::this_thread|std::chrono::(steady|system|high_resolution)_clock|std::condition_variable)");
  const auto bad = violations(forbidden, {"transport/", "runtime/", "store/tcp_store", "store/etcd/"});
  for (const auto& b : bad) ADD_FAILURE() << b;
  EXPECT_TRUE(bad.empty());
}

TEST(Layering, TheCheckFindsAPlantedViolation) {
  // Guards against a regex that can never match: the same pattern on a known-bad line.
  const std::regex forbidden(R"(^\s*#\s*include\s*[<"](simgrid/|torch/))");
  EXPECT_TRUE(std::regex_search(std::string("#include <torch/torch.h>"), forbidden));
  EXPECT_FALSE(std::regex_search(std::string("#include <vector>"), forbidden));
}

}  // namespace
