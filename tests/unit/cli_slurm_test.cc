// cli/slurm.h: what `meridian train`, `sim --part slurm` and `sweep --part slurm` read from
// Slurm's environment, on environments written here (tests/slurm runs a real Slurm).
#include <gtest/gtest.h>

#include <map>

#include "cli/slurm.h"

namespace meridian::cli::slurm {
namespace {

Env env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// What srun sets for task 2 of a 4-task step on two hosts (srun(1), OUTPUT ENVIRONMENT).
std::map<std::string, std::string> srun_task() {
  return {{"SLURM_JOB_ID", "123456"},
          {"SLURM_STEP_ID", "1"},
          {"SLURM_PROCID", "2"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURMD_NODENAME", "gpu04"},
          {"SLURM_STEP_NODELIST", "gpu[03-04]"},
          {"SLURM_JOB_NODELIST", "gpu[01-04]"}};
}

TEST(SlurmEnv, FirstHostOfAHostList) {
  EXPECT_EQ(first_host("vm"), "vm");
  EXPECT_EQ(first_host("gpu[03-06,9],cpu1"), "gpu03");
  EXPECT_EQ(first_host("gpu[9,03-06]"), "gpu9");
  EXPECT_EQ(first_host("rack[1-2]-n[01-04]"), "rack1-n01");
  EXPECT_EQ(first_host("a,b[1-2]"), "a");
  EXPECT_THROW(first_host(""), ConfigError);
  EXPECT_THROW(first_host("gpu[03-06"), ConfigError);
  EXPECT_THROW(first_host("gpu[x-y]"), ConfigError);
}

TEST(SlurmEnv, ATaskOfAnSrunStep) {
  const std::optional<Task> t = task(env_of(srun_task()));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->job_id, 123456u);
  EXPECT_EQ(t->step_id, 1u);
  EXPECT_EQ(t->rank, 2u);
  EXPECT_EQ(t->tasks, 4u);  // the step's, not the job's 8
  EXPECT_EQ(t->hosts, 2u);
  EXPECT_EQ(t->host, "gpu04");
  EXPECT_EQ(t->first_host, "gpu03");  // the step's first host, not the job's
  EXPECT_EQ(t->restarts, 0u);
  EXPECT_EQ(default_store_port(t->job_id), 15000 + 3456);
  EXPECT_EQ(default_store_port(7), 15007);

  // Outside Slurm, and under sbatch without srun (no SLURM_PROCID): not a task.
  EXPECT_FALSE(task(env_of({})));
  auto batch = srun_task();
  batch.erase("SLURM_PROCID");
  EXPECT_FALSE(task(env_of(batch)));
  // Only the job's variables: the job's task count and host list.
  auto job = srun_task();
  job.erase("SLURM_STEP_NUM_TASKS");
  job.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(task(env_of(job))->tasks, 8u);
  EXPECT_EQ(task(env_of(job))->first_host, "gpu01");
}

TEST(SlurmEnv, AMalformedTaskIsNamed) {
  const auto message = [](std::map<std::string, std::string> vars) {
    try {
      task(env_of(vars));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto v = srun_task();
  v["SLURM_PROCID"] = "two";
  EXPECT_EQ(message(v), "Slurm's SLURM_PROCID is not a non-negative integer: 'two'");
  v = srun_task();
  v["SLURM_PROCID"] = "4";
  EXPECT_EQ(message(v), "Slurm's SLURM_PROCID 4 is not below its 4 tasks");
  v = srun_task();
  v.erase("SLURMD_NODENAME");
  EXPECT_EQ(message(v), "Slurm's SLURMD_NODENAME is not set");
  v = srun_task();
  v.erase("SLURM_STEP_NUM_TASKS");
  v.erase("SLURM_NTASKS");
  EXPECT_EQ(message(v), "Slurm's SLURM_NTASKS is not set");
}

TEST(SlurmEnv, PartsOfAJobArray) {
  const Env none = env_of({});
  Part p = parse_part("--part", "1/3", none);
  EXPECT_EQ(p.index, 1u);
  EXPECT_EQ(p.count, 3u);
  EXPECT_FALSE(owns(p, 0));
  EXPECT_TRUE(owns(p, 1));
  EXPECT_TRUE(owns(p, 4));
  for (const char* bad : {"3/3", "1", "/3", "1/", "-1/3", "1/0", "a/b", ""})
    EXPECT_THROW(parse_part("--part", bad, none), ConfigError) << bad;

  // sbatch --array=1-9:2 (tasks 1,3,5,7,9): task 5 is the third of five.
  p = parse_part("--part", "slurm",
                 env_of({{"SLURM_ARRAY_TASK_ID", "5"},
                         {"SLURM_ARRAY_TASK_MIN", "1"},
                         {"SLURM_ARRAY_TASK_STEP", "2"},
                         {"SLURM_ARRAY_TASK_COUNT", "5"}}));
  EXPECT_EQ(p.index, 2u);
  EXPECT_EQ(p.count, 5u);
  // sbatch --array=0-3 (no _STEP in older Slurm): task 3 of 4.
  p = parse_part("--part", "slurm",
                 env_of({{"SLURM_ARRAY_TASK_ID", "3"},
                         {"SLURM_ARRAY_TASK_MIN", "0"},
                         {"SLURM_ARRAY_TASK_COUNT", "4"}}));
  EXPECT_EQ(p.index, 3u);
  EXPECT_EQ(p.count, 4u);
  EXPECT_THROW(parse_part("--part", "slurm", none), ConfigError);
  // An id off the array's steps (a list like --array=1,7 has no single step): named.
  EXPECT_THROW(parse_part("--part", "slurm",
                          env_of({{"SLURM_ARRAY_TASK_ID", "7"},
                                  {"SLURM_ARRAY_TASK_MIN", "1"},
                                  {"SLURM_ARRAY_TASK_STEP", "1"},
                                  {"SLURM_ARRAY_TASK_COUNT", "2"}})),
               ConfigError);
}

}  // namespace
}  // namespace meridian::cli::slurm
