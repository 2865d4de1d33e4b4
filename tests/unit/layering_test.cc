// The engine's layering, enforced on the build's own targets (engine/CMakeLists.txt writes the
// core target's files and link libraries to MERIDIAN_LAYERING_DIR). A core file includes only
// core files and the standard library without threads, locks or clocks; it names no thread,
// mutex, condition variable or clock; the core target links no threads. Nothing under engine/
// includes a file of the modes above it (netsim/, trainer/, cli/, analysis/). No file or folder
// is exempt by name: what is core is what the core target holds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = MERIDIAN_SOURCE_DIR;
const fs::path kLayering = MERIDIAN_LAYERING_DIR;

std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// The core target's files, as paths relative to the source tree ("engine/diloco/diloco.cc").
std::set<std::string> core_files() {
  std::set<std::string> out;
  for (const auto& f : lines_of(kLayering / "core_files.txt"))
    out.insert(fs::relative(fs::path(f), kSource).generic_string());
  return out;
}

// Standard headers of threads, locks and waiting: backends' business.
const std::regex kConcurrencyHeader(
    R"(^\s*#\s*include\s*<(thread|mutex|shared_mutex|condition_variable|future|stop_token|semaphore|latch|barrier)>)");
// Names that read a clock, block or start a thread.
const std::regex kConcurrencyName(
    R"(std::(this_thread|thread\b|jthread|mutex|shared_mutex|condition_variable|lock_guard|unique_lock|scoped_lock)|std::chrono::(steady|system|high_resolution)_clock)");
// Libraries of backends and sockets.
const std::regex kBackendHeader(
    R"(^\s*#\s*include\s*<(simgrid/|xbt/|gloo/|nccl|cuda|cublas|torch/|ATen/|c10/|sys/socket|netinet/|arpa/|sys/epoll|netdb))");
const std::regex kProjectInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");
const std::regex kModeInclude(R"re(^\s*#\s*include\s*"(netsim|trainer|cli|analysis)/)re");

// Every problem of one core file (`text` is its content, `rel` its name for messages).
std::vector<std::string> core_violations(const std::string& rel, const std::string& text,
                                         const std::set<std::string>& core) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto c = line.find("//"); c != std::string::npos) line.resize(c);  // code only
    const std::string at = rel + ":" + std::to_string(n) + ": " + line;
    std::smatch m;
    if (std::regex_search(line, kConcurrencyHeader)) out.push_back(at + "  (a thread/lock header)");
    if (std::regex_search(line, kConcurrencyName)) out.push_back(at + "  (threads, locks or clocks)");
    if (std::regex_search(line, kBackendHeader)) out.push_back(at + "  (a backend library)");
    if (std::regex_search(line, m, kProjectInclude) && !core.contains(m[1].str()))
      out.push_back(at + "  (includes " + m[1].str() + ", which is not in meridian_core)");
  }
  return out;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Layering, TheCoreTargetHoldsTheEngineCore) {
  const auto core = core_files();
  // A sanity floor, not a list: the checks below are only as strong as this file list.
  for (const char* f : {"engine/diloco/diloco.cc", "engine/collective/ring_allreduce.cc",
                        "engine/mesh/elastic_mesh.cc", "engine/transport.h", "engine/store.h"})
    EXPECT_TRUE(core.contains(f)) << f << " is not in meridian_core";
}

TEST(Layering, CoreFilesIncludeOnlyTheCoreAndNoThreadsLocksOrClocks) {
  const auto core = core_files();
  ASSERT_FALSE(core.empty());
  for (const auto& rel : core)
    for (const auto& v : core_violations(rel, read_all(kSource / rel), core)) ADD_FAILURE() << v;
}

TEST(Layering, TheCoreLinksNoThreads) {
  for (const auto& lib : lines_of(kLayering / "core_link_libraries.txt")) {
    EXPECT_EQ(lib.find("Threads"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("pthread"), std::string::npos) << lib;
  }
}

TEST(Layering, TheEngineIncludesNoModeAboveIt) {
  for (const auto& entry : fs::recursive_directory_iterator(kSource / "engine")) {
    const auto ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc")) continue;
    std::istringstream in(read_all(entry.path()));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      if (std::regex_search(line, kModeInclude))
        ADD_FAILURE() << fs::relative(entry.path(), kSource).generic_string() << ":" << n << ": "
                      << line;
  }
}

// The mutations: a real core file with one planted line each must fail the check; unchanged it
// passes. Guards against rules that can never match.
TEST(Layering, EachPlantedViolationInACoreFileIsFound) {
  const auto core = core_files();
  const std::string rel = "engine/diloco/diloco.cc";
  const std::string text = read_all(kSource / rel);
  EXPECT_TRUE(core_violations(rel, text, core).empty());
  for (const char* planted :
       {"#include <thread>", "#include <mutex>", "#include <condition_variable>",
        "  const auto t0 = std::chrono::steady_clock::now();", "  std::this_thread::yield();",
        "  std::mutex mu;", "#include \"engine/runtime/thread_runtime.h\"",
        "#include \"engine/store/tcp_store.h\"", "#include \"engine/transport/gloo/gloo_transport.h\"",
        "#include <torch/torch.h>", "#include <sys/socket.h>"}) {
    EXPECT_FALSE(core_violations(rel, text + planted + "\n", core).empty()) << planted;
  }
}

}  // namespace
