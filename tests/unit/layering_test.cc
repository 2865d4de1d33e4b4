// The layering, enforced on the build's own targets. The top-level CMakeLists.txt writes every
// library target's folder, files and direct link libraries to MERIDIAN_LAYERING_DIR; this test
// reads them, so no file or folder is exempt by name: what a target is, CMake says.
//
// - Folders are targets: engine/core/ is meridian_core, engine/config/ is meridian_config and
//   each engine/backends/<name>/ is meridian_<name>, file for file.
// - Includes follow the link graph: a file includes only headers of its own target or of targets
//   it links, directly or through others; the link graph has no cycle. A header that no target
//   lists belongs to the target(s) whose folder holds it most closely.
// - The core links no threads; a core file names no thread, mutex, condition variable or clock,
//   and includes no backend library or socket header.
// - A transport backend is named only by the composition layer (cli/compose/).
// Each rule is proved able to fail by planting a violation in a real file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = MERIDIAN_SOURCE_DIR;
const fs::path kLayering = MERIDIAN_LAYERING_DIR;

std::string read_all(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string source_relative(const fs::path& p) { return fs::relative(p, kSource).generic_string(); }

// One library target as CMake has it.
struct Target {
  std::string name;
  std::string home;               // its folder, relative to the source tree
  std::set<std::string> sources;  // relative to the source tree
  std::set<std::string> links;    // direct link libraries that are layered targets
};

// The engine's folders: meridian_core is engine/core, meridian_config engine/config, every other
// target defined under engine/ is engine/backends/<name without meridian_>. (CMake's SOURCE_DIR
// of those is engine/, where their CMakeLists.txt builds them.)
std::string engine_folder(const std::string& name) {
  const std::string short_name = name.substr(std::string("meridian_").size());
  if (short_name == "core" || short_name == "config") return "engine/" + short_name;
  return "engine/backends/" + short_name;
}

std::map<std::string, Target> read_targets() {
  std::map<std::string, Target> out;
  for (const auto& entry : fs::directory_iterator(kLayering)) {
    if (entry.path().extension() != ".txt") continue;
    Target t;
    t.name = entry.path().stem().string();
    std::istringstream in(read_all(entry.path()));
    std::string dir;
    std::vector<std::string> sources, links;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("dir ", 0) == 0) dir = line.substr(4);
      if (line.rfind("src ", 0) == 0 && line.size() > 4) sources.push_back(line.substr(4));
      if (line.rfind("link ", 0) == 0 && line.size() > 5) links.push_back(line.substr(5));
    }
    for (const auto& s : sources) {
      const fs::path p = fs::path(s).is_absolute() ? fs::path(s) : fs::path(dir) / s;
      t.sources.insert(source_relative(p.lexically_normal()));
    }
    for (const auto& l : links)
      if (l.rfind("meridian_", 0) == 0 && l != "meridian_flags") t.links.insert(l);
    t.home = source_relative(dir) == "engine" ? engine_folder(t.name) : source_relative(dir);
    out[t.name] = std::move(t);
  }
  return out;
}

// A target and every target it links, directly or through others.
std::set<std::string> reach(const std::map<std::string, Target>& targets, const std::string& from) {
  std::set<std::string> seen{from};
  std::vector<std::string> todo{from};
  while (!todo.empty()) {
    const auto it = targets.find(todo.back());
    todo.pop_back();
    if (it == targets.end()) continue;
    for (const auto& l : it->second.links)
      if (seen.insert(l).second) todo.push_back(l);
  }
  return seen;
}

// The targets a file belongs to: those that list it; else those whose folder holds it most
// closely (several where targets share a folder, as trainer/ does). Empty: no library's file.
std::set<std::string> owners(const std::map<std::string, Target>& targets,
                             const std::string& file) {
  std::set<std::string> out;
  for (const auto& [name, t] : targets)
    if (t.sources.contains(file)) out.insert(name);
  if (!out.empty()) return out;
  std::size_t best = 0;
  for (const auto& [name, t] : targets) {
    const std::string prefix = t.home + "/";
    if (file.rfind(prefix, 0) != 0 || t.sources.empty()) continue;
    if (prefix.size() > best) out.clear(), best = prefix.size();
    if (prefix.size() == best) out.insert(name);
  }
  return out;
}

const std::regex kProjectInclude(R"re(^\s*#\s*include\s*"([^"]+)")re");

// Every include of `text` (the file `rel`, which belongs to `from`) that leaves what `from`
// reaches.
std::vector<std::string> include_violations(const std::map<std::string, Target>& targets,
                                            const std::set<std::string>& from,
                                            const std::string& rel, const std::string& text) {
  std::set<std::string> allowed;
  for (const auto& f : from) allowed.merge(reach(targets, f));
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::smatch m;
    if (!std::regex_search(line, m, kProjectInclude)) continue;
    const std::string header = m[1].str();
    if (!fs::exists(kSource / header)) continue;  // generated, or beside the file
    const auto of = owners(targets, header);
    if (of.empty()) continue;  // an executable's header: no library's business
    if (std::none_of(of.begin(), of.end(), [&](const auto& o) { return allowed.contains(o); }))
      out.push_back(rel + ":" + std::to_string(n) + ": " + line + "  (" + *of.begin() +
                    " is not linked by " + *from.begin() + ")");
  }
  return out;
}

// Every file of an engine target lies in its folder, and every source file in that folder is
// one of the target's (`in_folder`: the .h and .cc files found there).
std::vector<std::string> folder_violations(const Target& t,
                                           const std::set<std::string>& in_folder) {
  std::vector<std::string> out;
  for (const auto& s : t.sources)
    if (s.rfind(t.home + "/", 0) != 0) out.push_back(s + " is " + t.name + "'s, outside " + t.home);
  for (const auto& f : in_folder)
    if (!t.sources.contains(f))
      out.push_back(f + " lies in " + t.home + " but is not " + t.name + "'s");
  return out;
}

std::set<std::string> code_files_under(const std::string& folder) {
  std::set<std::string> out;
  if (!fs::exists(kSource / folder)) return out;
  for (const auto& e : fs::recursive_directory_iterator(kSource / folder)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".h" || ext == ".cc")) out.insert(source_relative(e.path()));
  }
  return out;
}

bool is_engine_target(const Target& t) { return t.home.rfind("engine/", 0) == 0; }

TEST(Layering, EveryEngineFolderIsOneTarget) {
  const auto targets = read_targets();
  ASSERT_TRUE(targets.contains("meridian_core")) << "no layering/meridian_core.txt";
  std::set<std::string> folders;
  for (const auto& [name, t] : targets) {
    if (!is_engine_target(t) || t.sources.empty()) continue;  // an umbrella (meridian_engine)
    folders.insert(t.home);
    for (const auto& v : folder_violations(t, code_files_under(t.home))) ADD_FAILURE() << v;
  }
  // And no folder of engine/ holds code that is no target's.
  for (const auto& top : {"engine", "engine/backends"})
    for (const auto& e : fs::directory_iterator(kSource / top)) {
      const std::string rel = source_relative(e.path());
      if (!e.is_directory() || rel == "engine/backends") continue;
      if (!code_files_under(rel).empty() && !folders.contains(rel))
        ADD_FAILURE() << rel << " holds code but is no target's folder";
    }
}

TEST(Layering, EveryIncludeFollowsTheLinkGraph) {
  const auto targets = read_targets();
  int files = 0;
  for (const auto& [name, t] : targets)
    for (const auto& rel : t.sources) {
      if (!fs::exists(kSource / rel)) continue;  // generated
      ++files;
      for (const auto& v : include_violations(targets, {name}, rel, read_all(kSource / rel)))
        ADD_FAILURE() << v;
    }
  // Headers no target lists (the modes name their .cc files only): checked as their folder's.
  for (const auto& folder : {"netsim", "trainer", "analysis", "cli/emulation", "cli/compose"})
    for (const auto& rel : code_files_under(folder)) {
      const auto of = owners(targets, rel);
      if (of.empty() || targets.at(*of.begin()).sources.contains(rel)) continue;  // checked above
      ++files;
      for (const auto& v : include_violations(targets, of, rel, read_all(kSource / rel)))
        ADD_FAILURE() << v;
    }
  EXPECT_GT(files, 100) << "too few files checked: is the layering folder complete?";
}

TEST(Layering, TheLinkGraphHasNoCycle) {
  const auto targets = read_targets();
  for (const auto& [name, t] : targets)
    for (const auto& l : t.links)
      EXPECT_FALSE(reach(targets, l).contains(name))
          << name << " links " << l << ", which links it back";
}

// Transports are chosen in one place: outside their own folders, only the composition layer
// (cli/compose/) includes a transport backend's header (tests and benchmarks aside).
const std::regex kTransportInclude(R"re(^\s*#\s*include\s*"engine/backends/(gloo|nccl|inproc)/)re");

std::vector<std::string> transport_violations(const std::string& rel, const std::string& text) {
  std::vector<std::string> out;
  if (rel.rfind("cli/compose/", 0) == 0 || rel.rfind("engine/backends/", 0) == 0) return out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (std::regex_search(line, kTransportInclude))
      out.push_back(rel + ":" + std::to_string(n) + ": " + line +
                    "  (a transport is named only in cli/compose/)");
  return out;
}

TEST(Layering, OnlyTheCompositionLayerNamesATransport) {
  int files = 0;
  for (const auto& folder : {"engine", "netsim", "trainer", "analysis", "cli"})
    for (const auto& rel : code_files_under(folder)) {
      ++files;
      for (const auto& v : transport_violations(rel, read_all(kSource / rel))) ADD_FAILURE() << v;
    }
  EXPECT_GT(files, 100);
  const std::string planted = "#include \"engine/backends/gloo/gloo_transport.h\"\n";
  EXPECT_FALSE(transport_violations("cli/train/cmd_train_node.cc", planted).empty());
  EXPECT_FALSE(transport_violations("netsim/simulation.cc", planted).empty());
  EXPECT_TRUE(transport_violations("cli/compose/real_node.cc", planted).empty());
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

// Every problem of one core file beyond its includes (`text` is its content, `rel` its name).
std::vector<std::string> core_violations(const std::string& rel, const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto c = line.find("//"); c != std::string::npos) line.resize(c);  // code only
    const std::string at = rel + ":" + std::to_string(n) + ": " + line;
    if (std::regex_search(line, kConcurrencyHeader)) out.push_back(at + "  (a thread/lock header)");
    if (std::regex_search(line, kConcurrencyName))
      out.push_back(at + "  (threads, locks or clocks)");
    if (std::regex_search(line, kBackendHeader)) out.push_back(at + "  (a backend library)");
  }
  return out;
}

TEST(Layering, TheCoreTargetHoldsTheEngineCore) {
  const auto core = read_targets().at("meridian_core");
  // A sanity floor, not a list: the checks below are only as strong as this file list.
  for (const char* f :
       {"engine/core/diloco/diloco.cc", "engine/core/collective/ring_allreduce.cc",
        "engine/core/mesh/elastic_mesh.cc", "engine/core/transport.h", "engine/core/store.h"})
    EXPECT_TRUE(core.sources.contains(f)) << f << " is not in meridian_core";
  EXPECT_TRUE(core.links.empty()) << "the core links " << *core.links.begin();
}

TEST(Layering, CoreFilesNameNoThreadsLocksClocksOrBackendLibraries) {
  const auto core = read_targets().at("meridian_core");
  for (const auto& rel : core.sources)
    for (const auto& v : core_violations(rel, read_all(kSource / rel))) ADD_FAILURE() << v;
}

TEST(Layering, TheCoreLinksNoThreads) {
  std::istringstream in(read_all(kLayering / "meridian_core.txt"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("link ", 0) != 0) continue;
    EXPECT_EQ(line.find("Threads"), std::string::npos) << line;
    EXPECT_EQ(line.find("pthread"), std::string::npos) << line;
  }
}

// The mutations: a real file with one planted line each must fail its check; unchanged it
// passes. Guards against rules that can never match.
TEST(Layering, EachPlantedViolationIsFound) {
  const auto targets = read_targets();
  const auto check = [&](const std::string& target, const std::string& rel,
                         const std::string& planted) {
    const std::string text = read_all(kSource / rel);
    EXPECT_TRUE(include_violations(targets, {target}, rel, text).empty()) << rel;
    EXPECT_FALSE(include_violations(targets, {target}, rel, text + planted + "\n").empty())
        << planted << " in " << rel;
  };
  const std::string core = "engine/core/diloco/diloco.cc";
  for (const char* planted : {"#include \"engine/backends/runtime_thread/thread_runtime.h\"",
                              "#include \"engine/backends/store_tcp/tcp_store.h\"",
                              "#include \"engine/config/run_file.h\"", "#include \"netsim/wan.h\""})
    check("meridian_core", core, planted);
  check("meridian_inproc", "engine/backends/inproc/inproc_transport.cc",
        "#include \"engine/backends/store_tcp/tcp_store.h\"");
  if (targets.contains("meridian_netsim"))
    check("meridian_netsim", "netsim/sim_transport.cc", "#include \"analysis/summary.h\"");
  if (targets.contains("meridian_trainer") && targets.contains("meridian_netsim"))
    check("meridian_trainer", "trainer/data.cc", "#include \"netsim/wan.h\"");
  if (targets.contains("meridian_trainer"))
    check("meridian_analysis", "analysis/summary.cc", "#include \"trainer/torch_worker.h\"");

  const std::string text = read_all(kSource / core);
  EXPECT_TRUE(core_violations(core, text).empty());
  for (const char* planted :
       {"#include <thread>", "#include <mutex>", "#include <condition_variable>",
        "  const auto t0 = std::chrono::steady_clock::now();", "  std::this_thread::yield();",
        "  std::mutex mu;", "#include <torch/torch.h>", "#include <sys/socket.h>"})
    EXPECT_FALSE(core_violations(core, text + planted + "\n").empty()) << planted;

  // A file of the core's folder that the core does not list, and one it lists elsewhere.
  auto t = targets.at("meridian_core");
  auto folder = code_files_under(t.home);
  EXPECT_TRUE(folder_violations(t, folder).empty());
  folder.insert("engine/core/diloco/stray.cc");
  EXPECT_FALSE(folder_violations(t, folder).empty());
  folder.erase("engine/core/diloco/stray.cc");
  t.sources.insert("engine/backends/inproc/inproc_transport.cc");
  EXPECT_FALSE(folder_violations(t, folder).empty());
}

}  // namespace
