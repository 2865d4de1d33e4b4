// meridian sweep without a simulator: the grid expansion, the child's command line, and the
// table, with a fake runner that writes a synthetic run per point (or fails on purpose).
#include "analysis/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "tests/analysis/synthetic_run.h"

namespace meridian::analysis {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Sweep, ParsesAxes) {
  const SweepAxis a = parse_sweep_axis("diloco.H=50,100,500");
  EXPECT_EQ(a.key, "diloco.H");
  EXPECT_EQ(a.values, (std::vector<std::string>{"50", "100", "500"}));
  EXPECT_EQ(parse_sweep_axis("diloco.codec=int8").values, std::vector<std::string>{"int8"});
  EXPECT_THROW(parse_sweep_axis("diloco.H"), ConfigError);
  EXPECT_THROW(parse_sweep_axis("=5"), ConfigError);
  EXPECT_THROW(parse_sweep_axis("diloco.H="), ConfigError);
  EXPECT_THROW(parse_sweep_axis("diloco.H=50,,100"), ConfigError);
  EXPECT_THROW(parse_sweep_axis("diloco.H=50,"), ConfigError);
}

TEST(Sweep, CartesianProductFirstAxisSlowest) {
  const auto points =
      expand_grid({parse_sweep_axis("diloco.H=50,100,500"),
                   parse_sweep_axis("diloco.codec=fp32,int8"), parse_sweep_axis("run.seed=3")});
  ASSERT_EQ(points.size(), 6u);  // 3 x 2 x 1
  EXPECT_EQ(points[0].name, "diloco.H=50_diloco.codec=fp32_run.seed=3");
  EXPECT_EQ(points[1].name, "diloco.H=50_diloco.codec=int8_run.seed=3");
  EXPECT_EQ(points[5].name, "diloco.H=500_diloco.codec=int8_run.seed=3");
  EXPECT_EQ(points[3].settings[0], (std::pair<std::string, std::string>{"diloco.H", "100"}));
  EXPECT_EQ(points[3].settings[1].second, "int8");
  // Unsafe characters in folder names become '-'.
  EXPECT_EQ(expand_grid({parse_sweep_axis("churn.trace=a/b c.csv")})[0].name,
            "churn.trace=a-b-c.csv");
  EXPECT_THROW(expand_grid({parse_sweep_axis("a=1"), parse_sweep_axis("a=2")}), ConfigError);
}

TEST(Sweep, RunsEveryPointAndWritesTheTable) {
  const fs::path out = fs::path(::testing::TempDir()) / "meridian_sweep_test";
  fs::remove_all(out);
  std::vector<std::vector<std::string>> calls;
  // The fake `meridian sim`: reads --out and the --set values, writes a synthetic run there;
  // the point H=500 codec=fp32 fails like a crashed simulator.
  SweepRunner fake = [&](const std::vector<std::string>& args, const std::string& log_path) {
    calls.push_back(args);
    std::ofstream(log_path) << "fake sim\n";
    testing::SyntheticOptions o;
    o.outer_steps = 4;
    std::string dir;
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--out") dir = args[i + 1];
      if (args[i] == "--set" && args[i + 1].rfind("diloco.H=", 0) == 0)
        o.H = std::stoi(args[i + 1].substr(9));
      if (args[i] == "--set" && args[i + 1].rfind("diloco.codec=", 0) == 0)
        o.codec = args[i + 1].substr(13);
    }
    if (o.H == 500 && o.codec == "fp32") return 3;
    testing::write_synthetic_run(dir, o);
    return 0;
  };
  SweepOptions options;
  options.scenario = "scenarios/x.yaml";
  options.out_dir = out.string();
  options.seed = 9;
  options.plots = false;
  options.command = "meridian sweep x.yaml ...";
  std::ostringstream progress;
  const SweepResult r = run_sweep(
      options, {parse_sweep_axis("diloco.H=50,500"), parse_sweep_axis("diloco.codec=fp32,int8")},
      fake, progress);

  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0],
            (std::vector<std::string>{"sim", "scenarios/x.yaml", "--out",
                                      (out / "diloco.H=50_diloco.codec=fp32").string(), "--seed",
                                      "9", "--set", "diloco.H=50", "--set", "diloco.codec=fp32"}));
  EXPECT_EQ(r.failed(), 1);
  EXPECT_NE(progress.str().find("[3/4] diloco.H=500_diloco.codec=fp32 ... FAILED"),
            std::string::npos)
      << progress.str();

  const auto csv = lines_of((out / "sweep.csv").string());
  ASSERT_EQ(csv.size(), 5u);
  EXPECT_EQ(csv[0].rfind("point,diloco.H,diloco.codec,status,compute_utilization,", 0), 0u)
      << csv[0];
  EXPECT_EQ(csv[3].rfind("diloco.H=500_diloco.codec=fp32,500,fp32,failed (exit 3),,,", 0), 0u)
      << csv[3];
  // An ok row carries the numbers of the summary it came from.
  EXPECT_EQ(csv[2].rfind("diloco.H=50_diloco.codec=int8,50,int8,ok,", 0), 0u) << csv[2];
  char mfu[32];
  std::snprintf(mfu, sizeof mfu, "%.6g", r.points[1].summary->mfu);
  EXPECT_NE(csv[2].find(std::string(",") + mfu + ","), std::string::npos) << csv[2];

  const auto md = lines_of((out / "sweep.md").string());
  ASSERT_EQ(md.size(), 8u);  // command, blank, header, rule, 4 points
  EXPECT_EQ(md[0], "Command: `meridian sweep x.yaml ...`");
  EXPECT_EQ(md[2].rfind("| point | diloco.H | diloco.codec | status | compute_utilization |", 0),
            0u);
  EXPECT_EQ(md[3].rfind("|---|---|---|---|--:|", 0), 0u) << md[3];
}

TEST(Sweep, PlotsAgainstEachSweptValue) {
  try {
    find_gnuplot("gnuplot");
  } catch (const ConfigError&) {
    GTEST_SKIP() << "gnuplot not installed";
  }
  const fs::path out = fs::path(::testing::TempDir()) / "meridian_sweep_plot_test";
  fs::remove_all(out);
  SweepRunner fake = [](const std::vector<std::string>& args, const std::string&) {
    testing::SyntheticOptions o;
    o.outer_steps = 4;
    o.H = std::stoi(args[args.size() - 1].substr(9));  // --set diloco.H=N is last
    testing::write_synthetic_run(args[3], o);
    return 0;
  };
  SweepOptions options;
  options.scenario = "x.yaml";
  options.out_dir = out.string();
  options.plot.svg = false;
  std::ostringstream progress;
  const SweepResult r =
      run_sweep(options, {parse_sweep_axis("diloco.H=50,100,200")}, fake, progress);
  ASSERT_EQ(r.files.size(), 3u);  // csv, md, one plot
  EXPECT_EQ(fs::path(r.files[2]).filename(), "sweep_diloco_H.png");
  EXPECT_GT(fs::file_size(r.files[2]), 5000u);
}

}  // namespace
}  // namespace meridian::analysis
