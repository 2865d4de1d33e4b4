// The ensemble over seeds (analysis/ensemble.h): the seed-list grammar and its errors, and the
// distributions against values computed by hand.
#include "analysis/ensemble.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/error.h"

namespace meridian::analysis {
namespace {

// The ConfigError's message, "" when there is none.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string error_of(const std::string& seeds) {
  return error_of([&] { parse_seed_list("--seeds", seeds); });
}

TEST(Ensemble, SeedLists) {
  EXPECT_EQ(parse_seed_list("--seeds", "1-5"), (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(parse_seed_list("--seeds", "7"), (std::vector<std::int64_t>{7}));
  EXPECT_EQ(parse_seed_list("--seeds", "1-3,10"), (std::vector<std::int64_t>{1, 2, 3, 10}));
  EXPECT_EQ(parse_seed_list("--seeds", "9,2"), (std::vector<std::int64_t>{9, 2}));
}

TEST(Ensemble, SeedListErrorsNameTheProblem) {
  EXPECT_EQ(error_of("3,1,2-4"), "--seeds: seed 3 is listed twice");
  EXPECT_EQ(error_of("5-2"), "--seeds: range '5-2' runs backwards (write 2-5)");
  EXPECT_EQ(error_of("a-3"),
            "--seeds: expected seeds as N, A-B or a comma list (e.g. 1-20), got 'a'");
  EXPECT_EQ(error_of(""), "--seeds: no seed given");
  EXPECT_EQ(error_of("1-20000"), "--seeds: more than 10000 seeds");
  EXPECT_EQ(error_of("1,,2"),
            "--seeds: expected seeds as N, A-B or a comma list (e.g. 1-20), got ''");
}

Summary run_with(double utilization, std::vector<double> allreduce) {
  Summary s;
  s.compute_utilization = utilization;
  s.outer_step_utilization = utilization;
  s.mfu = utilization / 2;
  s.simulated_s = 100;
  s.allreduce_s = distribution(allreduce);
  for (double a : allreduce) {
    OuterStepStats st;
    st.outer_step = static_cast<std::int64_t>(s.steps.size());
    st.allreduce_s = a;
    s.steps.push_back(st);
  }
  return s;
}

TEST(Ensemble, MediansIntervalsAndThePooledSteps) {
  std::vector<EnsembleRun> runs;
  // Five seeds: utilization 0.5 .. 0.9; one failed seed is listed but not counted.
  for (int k = 0; k < 5; ++k)
    runs.push_back({k + 1, "seed-" + std::to_string(k + 1),
                    run_with(0.5 + 0.1 * k, {10.0 * (k + 1), 10.0 * (k + 1) + 1})});
  runs.push_back({6, "seed-6", std::nullopt});
  const nlohmann::json e = ensemble_json(runs, "x.yaml", "meridian sim x.yaml --seeds 1-6");

  EXPECT_EQ(e["seeds"], nlohmann::json({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e["runs"][5]["status"], "failed");
  const auto& u = e["metrics"]["compute_utilization"];
  EXPECT_EQ(u["count"], 5);
  EXPECT_NEAR(u["median"].get<double>(), 0.7, 1e-12);
  // Type-7 percentiles of {0.5, 0.6, 0.7, 0.8, 0.9}: p5 at h = 0.2, p95 at h = 3.8.
  EXPECT_NEAR(u["p5"].get<double>(), 0.52, 1e-12);
  EXPECT_NEAR(u["p95"].get<double>(), 0.88, 1e-12);
  EXPECT_NEAR(u["min"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(u["max"].get<double>(), 0.9, 1e-12);
  // The quartiles the box plots draw: h = 1 and h = 3.
  EXPECT_NEAR(u["p25"].get<double>(), 0.6, 1e-12);
  EXPECT_NEAR(u["p75"].get<double>(), 0.8, 1e-12);
  // Per-run all-reduce medians 10.5, 20.5, ..., 50.5.
  EXPECT_NEAR(e["metrics"]["allreduce_s_p50"]["median"].get<double>(), 30.5, 1e-12);
  // Pooled: the ten steps 10, 11, 20, 21, ..., 50, 51.
  const auto& p = e["allreduce_s_pooled"];
  EXPECT_EQ(p["count"], 10);
  EXPECT_NEAR(p["p50"].get<double>(), 30.5, 1e-12);
  EXPECT_NEAR(p["mean"].get<double>(), 30.5, 1e-12);
  // Per outer step across the seeds: step 0 holds {10, 20, 30, 40, 50} (p10 at h = 0.4, p90 at
  // h = 3.6), step 1 the same plus one.
  const auto& by_step = e["allreduce_s_by_step"];
  ASSERT_EQ(by_step.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(by_step[k]["outer_step"], k);
    EXPECT_EQ(by_step[k]["count"], 5);
    EXPECT_NEAR(by_step[k]["p10"].get<double>(), 14.0 + k, 1e-12);
    EXPECT_NEAR(by_step[k]["p50"].get<double>(), 30.0 + k, 1e-12);
    EXPECT_NEAR(by_step[k]["p90"].get<double>(), 46.0 + k, 1e-12);
  }

  const std::string md = ensemble_markdown(e);
  EXPECT_NE(md.find("over 6 seeds (5 ran)"), std::string::npos) << md;
  EXPECT_NE(md.find("| compute utilization | 70.0 % | 52.0 % – 88.0 % | 50.0 % | 90.0 % |"),
            std::string::npos)
      << md;
}

// A seed whose run has fewer outer steps (stopped, or churn) counts only where it has them: the
// band at a step is over the seeds that reached it, and says how many.
TEST(Ensemble, EachOuterStepIsOverTheSeedsThatReachedIt) {
  const std::vector<EnsembleRun> runs = {{1, "seed-1", run_with(0.8, {10, 12, 14})},
                                         {2, "seed-2", run_with(0.8, {20})},
                                         {3, "seed-3", run_with(0.8, {30, 32})}};
  const nlohmann::json by_step = ensemble_json(runs, "x.yaml", "c")["allreduce_s_by_step"];
  ASSERT_EQ(by_step.size(), 3u);
  EXPECT_EQ(by_step[0]["count"], 3);
  EXPECT_NEAR(by_step[0]["p50"].get<double>(), 20, 1e-12);
  EXPECT_EQ(by_step[1]["count"], 2);
  EXPECT_NEAR(by_step[1]["p10"].get<double>(), 14, 1e-12);  // 12 + 0.1 x (32 - 12)
  EXPECT_EQ(by_step[2]["count"], 1);
  EXPECT_EQ(by_step[2]["p10"], by_step[2]["p90"]);
  EXPECT_NEAR(by_step[2]["p90"].get<double>(), 14, 1e-12);
}

}  // namespace
}  // namespace meridian::analysis
