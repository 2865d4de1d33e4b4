// Test support for netsim: run a simulation in a forked child (SimGrid's engine can be created
// once per process) and read its events back as JSON. Not for use outside tests/netsim.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/transport.h"

namespace meridian::netsim::testing {

// Epoch 1 of `members` for `rank`, waiting at most `timeout_s` for them to arrive (a ring test's
// one epoch; every other field at its default).
inline EpochSpec ring_epoch(int rank, const std::vector<std::int64_t>& members, double timeout_s) {
  EpochSpec spec;
  spec.epoch = 1;
  spec.rank = rank;
  spec.members = members;
  spec.timeout_s = timeout_s;
  return spec;
}

// Runs `body` in a child process; returns its exit status (0 = body returned normally).
inline int run_in_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
      code = 3;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/meridian_netsim_" + std::to_string(getpid()) + "_" +
         name;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<nlohmann::json> read_events(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline std::vector<nlohmann::json> of_type(const std::vector<nlohmann::json>& events,
                                           const std::string& type) {
  std::vector<nlohmann::json> out;
  for (auto& e : events)
    if (e["type"] == type) out.push_back(e);
  return out;
}

}  // namespace meridian::netsim::testing
