// What a `meridian` command learns from Slurm's environment (https://slurm.schedmd.com/srun.html
// and sbatch.html, "OUTPUT ENVIRONMENT VARIABLES"): a task of an `srun` step (`meridian train`
// takes its node id, its peers and its store from it) and a task of a job array (`meridian sim
// --seeds ... --part slurm` and `meridian sweep --part slurm` run their share of the runs).
// Header-only; reads the environment through a function so that tests can give their own.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "engine/core/error.h"

namespace meridian::cli::slurm {

// A variable of the environment (nullopt when unset).
using Env = std::function<std::optional<std::string>(const std::string& name)>;

inline Env process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

// A variable that must hold a non-negative integer; ConfigError naming it otherwise.
inline std::uint64_t integer(const Env& env, const std::string& name) {
  const std::optional<std::string> v = env(name);
  if (!v) throw ConfigError("Slurm's " + name + " is not set");
  if (v->empty() || v->find_first_not_of("0123456789") != std::string::npos || v->size() > 18)
    throw ConfigError("Slurm's " + name + " is not a non-negative integer: '" + *v + "'");
  return std::stoull(*v);
}

// The first host of a Slurm host list: "vm" -> "vm", "gpu[03-06,9],cpu1" -> "gpu03",
// "rack[1-2]-n[01-04]" -> "rack1-n01" (the first value of each bracket, its zero padding kept).
// ConfigError for an empty list or an unclosed bracket.
inline std::string first_host(const std::string& list) {
  std::string host;
  for (std::size_t i = 0; i < list.size() && list[i] != ','; ++i) {
    if (list[i] != '[') {
      host += list[i];
      continue;
    }
    const std::size_t close = list.find(']', i);
    if (close == std::string::npos)
      throw ConfigError("Slurm host list '" + list + "': a '[' is not closed");
    const std::string range = list.substr(i + 1, close - i - 1);
    const std::string first = range.substr(0, range.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError("Slurm host list '" + list + "': '[" + range + "]' is not a range");
    host += first;
    i = close;
  }
  if (host.empty()) throw ConfigError("Slurm host list '" + list + "' names no host");
  return host;
}

// The port a run's embedded store takes when no --serve-store is given: 15000 + the last four
// digits of the job id (PyTorch Lightning's rule for its SLURM environment), so that every task
// of the step computes the same one without talking. Two runs of one job at the same time need
// --serve-store.
inline std::uint16_t default_store_port(std::uint64_t job_id) {
  return static_cast<std::uint16_t>(15000 + job_id % 10000);
}

// One task of an `srun` step.
struct Task {
  std::uint64_t job_id = 0;
  std::uint64_t step_id = 0;
  std::uint64_t rank = 0;      // SLURM_PROCID: 0 .. tasks-1
  std::uint64_t tasks = 0;     // SLURM_STEP_NUM_TASKS (else SLURM_NTASKS)
  std::uint64_t hosts = 1;     // SLURM_STEP_NUM_NODES (else SLURM_JOB_NUM_NODES)
  std::string host;            // SLURMD_NODENAME: the host this task runs on
  std::string first_host;      // the step's first host (task 0's under Slurm's distributions)
  std::uint64_t restarts = 0;  // SLURM_RESTART_COUNT: a requeued job's count
};

// The task this process is, when it was started by `srun` (SLURM_PROCID and SLURM_JOB_ID set);
// nullopt outside Slurm. ConfigError naming the variable when one is malformed or missing.
inline std::optional<Task> task(const Env& env) {
  if (!env("SLURM_PROCID") || !env("SLURM_JOB_ID")) return std::nullopt;
  Task t;
  t.job_id = integer(env, "SLURM_JOB_ID");
  t.rank = integer(env, "SLURM_PROCID");
  t.step_id = env("SLURM_STEP_ID") ? integer(env, "SLURM_STEP_ID") : 0;
  t.tasks = integer(env, env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS");
  if (t.rank >= t.tasks)
    throw ConfigError("Slurm's SLURM_PROCID " + std::to_string(t.rank) + " is not below its " +
                      std::to_string(t.tasks) + " tasks");
  const char* hosts = env("SLURM_STEP_NUM_NODES") ? "SLURM_STEP_NUM_NODES" : "SLURM_JOB_NUM_NODES";
  if (env(hosts)) t.hosts = integer(env, hosts);
  const std::optional<std::string> host = env("SLURMD_NODENAME");
  if (!host || host->empty()) throw ConfigError("Slurm's SLURMD_NODENAME is not set");
  t.host = *host;
  const std::optional<std::string> list =
      env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST");
  if (!list) throw ConfigError("Slurm's SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) is not set");
  t.first_host = first_host(*list);
  if (env("SLURM_RESTART_COUNT")) t.restarts = integer(env, "SLURM_RESTART_COUNT");
  return t;
}

// One share of a job's runs: runs number index, index + count, index + 2 count, ... of a list.
struct Part {
  std::uint64_t index = 0;
  std::uint64_t count = 1;
};

// `--part I/N` (0 <= I < N), or `--part slurm`: this task's share of a job array
// (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT: `sbatch --array=0-3` or `--array=1-9:2` alike).
inline Part parse_part(const std::string& option, const std::string& text, const Env& env) {
  Part p;
  if (text == "slurm") {
    if (!env("SLURM_ARRAY_TASK_ID"))
      throw ConfigError(option +
                        " slurm: not a task of a Slurm job array (SLURM_ARRAY_TASK_ID is "
                        "not set; submit with `sbatch --array=0-N`)");
    const std::uint64_t id = integer(env, "SLURM_ARRAY_TASK_ID");
    const std::uint64_t min = integer(env, "SLURM_ARRAY_TASK_MIN");
    const std::uint64_t step =
        env("SLURM_ARRAY_TASK_STEP") ? integer(env, "SLURM_ARRAY_TASK_STEP") : 1;
    p.count = integer(env, "SLURM_ARRAY_TASK_COUNT");
    if (step == 0 || id < min || (id - min) % step != 0 || (id - min) / step >= p.count)
      throw ConfigError(option + " slurm: array task " + std::to_string(id) +
                        " is not one of the array's " + std::to_string(p.count) + " from " +
                        std::to_string(min) + " in steps of " + std::to_string(step));
    p.index = (id - min) / step;
    return p;
  }
  const std::size_t slash = text.find('/');
  const auto number = [&](const std::string& s) -> std::uint64_t {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      throw ConfigError(option + ": expected I/N (0 <= I < N) or slurm, got '" + text + "'");
    return std::stoull(s);
  };
  if (slash == std::string::npos)
    throw ConfigError(option + ": expected I/N (0 <= I < N) or slurm, got '" + text + "'");
  p.index = number(text.substr(0, slash));
  p.count = number(text.substr(slash + 1));
  if (p.count == 0 || p.index >= p.count)
    throw ConfigError(option + ": expected I/N with 0 <= I < N, got '" + text + "'");
  return p;
}

// Whether run number k (0-based, in the list's order) is this part's.
inline bool owns(const Part& p, std::size_t k) { return k % p.count == p.index; }

}  // namespace meridian::cli::slurm
