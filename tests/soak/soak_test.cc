// Checks of one short churn soak (label `soak`): the ctest fixture soak_<store>_run ran
// scripts/soak/soak.py into MERIDIAN_SOAK_DIR; these tests read its files. Not a soak driver
// (the soak runs once, its four checks are separate so that only the stall bound is `timing`).
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = MERIDIAN_SOAK_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json summary() {
  const std::string text = read_file(kDir / "summary.json");
  const json s = json::parse(text, nullptr, false);
  if (s.is_discarded() || !s.is_object() || !s["churn"].is_object())
    ADD_FAILURE() << kDir / "summary.json"
                  << " holds no churn phase (did the soak run?): " << text;
  return s;
}

// outer step -> CRC-32C -> the nodes that applied the step with that checksum, from every
// node-<ID>/checksums.tsv of a phase (read here, not taken from the driver's summary).
std::map<long, std::map<std::string, std::vector<int>>> checksums(const fs::path& phase) {
  std::map<long, std::map<std::string, std::vector<int>>> out;
  if (!fs::exists(phase)) return out;
  for (const auto& d : fs::directory_iterator(phase)) {
    const std::string name = d.path().filename().string();
    if (name.rfind("node-", 0) != 0) continue;
    const int node = std::stoi(name.substr(5));
    std::istringstream in(read_file(d.path() / "checksums.tsv"));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      long step = -1, epoch = -1;
      int members = 0;
      std::string crc;
      if (f >> step >> epoch >> members >> crc) out[step][crc].push_back(node);
    }
  }
  return out;
}

TEST(MERIDIAN_SOAK_SUITE, ChecksumsAgreeAtEveryOuterStep) {
  for (const char* phase : {"baseline", "churn"}) {
    const auto by_step = checksums(kDir / phase);
    ASSERT_FALSE(by_step.empty()) << phase << ": no node applied an outer step";
    int shared = 0;
    for (const auto& [step, crcs] : by_step) {
      std::size_t nodes = 0;
      std::string seen;
      for (const auto& [crc, ids] : crcs) {
        nodes += ids.size();
        seen += " " + crc + " on " + std::to_string(ids.size()) + " node(s)";
      }
      shared += nodes >= 2;
      EXPECT_EQ(crcs.size(), 1u) << phase << ": outer step " << step << " diverged:" << seen;
    }
    EXPECT_GT(shared, 0) << phase << ": no outer step was reported by two nodes";
  }
}

TEST(MERIDIAN_SOAK_SUITE, NodesWereKilledAndJoined) {
  const json c = summary()["churn"];
  EXPECT_GE(c.value("kills", 0), 1) << c.dump();
  EXPECT_GE(c.value("spawns", 0), 1) << c.dump();
  // A join: a node spawned during the churn (an id above the initial nodes') that applied an
  // outer step, so it was admitted and recovered the run's state.
  const int initial = summary()["config"].value("initial", 0);
  std::map<int, bool> joined;
  for (const auto& [step, crcs] : checksums(kDir / "churn"))
    for (const auto& [crc, ids] : crcs)
      for (int id : ids)
        if (id > initial) joined[id] = true;
  EXPECT_GE(joined.size(), 1u) << "no spawned node applied an outer step";
  EXPECT_EQ(c.value("joins", -1), static_cast<int>(joined.size()));
}

TEST(MERIDIAN_SOAK_SUITE, ProgressAfterTheChurn) {
  const json c = summary()["churn"];
  EXPECT_GT(c.value("outer_steps", 0), 0) << c.dump();
  ASSERT_TRUE(c["steps_after_churn"].is_number()) << "the soak did not reach its quiet tail";
  EXPECT_GE(c["steps_after_churn"].get<int>(), 1) << "no outer step once the churn stopped";
}

// No stall waits out a timeout: every wait on a dead node must end with its lease (4 s here),
// so a gap between outer steps may not reach the run's shortest other timeout (the ring's 15 s;
// before issue 36's fixes stalls of 30 s were the recovery timeout) unless the nodes killed in
// the 5 s before it or while it lasted explain it (a joiner the last round admitted, killed a
// moment after the stall began, held up a 16 s one with no kill before it): the mesh finds
// admitted dead joiners one round at a time, each
// at the cost of at most the epoch's connect bound (twice the lease) and a retried round
// (`lease_bound_s` of the stall: kills x (2 dead_after_s + round) + round). Three joiners
// killed just before a stall made one of 15.6 s (issue 36's open defect), no wait of it a
// ring or recovery timeout. Issue 36's goal is stricter,
// dead_after_s + one round (summary.json's stall_goal_s, reported by the soak and in
// results/soak/, not asserted). `timing`: a loaded machine stretches rounds and process starts.
TEST(MERIDIAN_SOAK_SUITE, TimingNoStallWaitsOutATimeout) {
  const json s = summary();
  ASSERT_TRUE(s["stall_timeout_bound_s"].is_number()) << "no baseline round time: " << s.dump();
  const double timeout_bound = s["stall_timeout_bound_s"].get<double>();
  ASSERT_FALSE(s["churn"]["longest_stalls"].empty()) << s.dump();
  for (const json& st : s["churn"]["longest_stalls"])
    EXPECT_LT(st["s"].get<double>(), std::max(timeout_bound, st["lease_bound_s"].get<double>()))
        << "stall of " << st["s"] << " s, starting " << st["starts_s"]
        << " s into the churn, with " << st["kills"] << " kills, after " << st["after"].dump()
        << ", during " << st.value("during", json::array()).dump();
  std::cout << "longest stall " << s["churn"]["longest_stall_s"] << " s; issue 36's goal "
            << s["stall_goal_s"] << " s (dead_after_s + one round): "
            << (s.value("stall_within_goal", false) ? "met" : "not met") << std::endl;
}

}  // namespace
