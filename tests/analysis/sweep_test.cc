// meridian sweep without a simulator: the grid expansion, the child's command line, and the
// table, with a fake runner that writes a synthetic run per point (or fails on purpose).
#include "analysis/sweep.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
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

// A fake `meridian sim` for the tests below: a synthetic run of `outer_steps` into --out, with
// diloco.H and diloco.codec from the point's --set values.
SweepRunner synthetic_runner(int outer_steps) {
  return [outer_steps](const std::vector<std::string>& args, const std::string&) {
    testing::SyntheticOptions o;
    o.outer_steps = outer_steps;
    for (std::size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i + 1].rfind("diloco.H=", 0) == 0) o.H = std::stoi(args[i + 1].substr(9));
      if (args[i + 1].rfind("diloco.codec=", 0) == 0) o.codec = args[i + 1].substr(13);
    }
    testing::write_synthetic_run(args[3], o);
    return 0;
  };
}

// Options for a sweep of x.yaml into a fresh temporary folder NAME.
SweepOptions fresh_sweep(const std::string& name) {
  const fs::path out = fs::path(::testing::TempDir()) / name;
  fs::remove_all(out);
  SweepOptions options;
  options.scenario = "x.yaml";
  options.out_dir = out.string();
  return options;
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
  EXPECT_EQ(calls[0], (std::vector<std::string>{"sim", "scenarios/x.yaml", "--out",
                                                (out / "diloco.H=50_diloco.codec=fp32").string(),
                                                "--force", "--seed", "9", "--set", "diloco.H=50",
                                                "--set", "diloco.codec=fp32"}));
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

// Issue 21: sweep.md printed raw fractions (0.351342) and bytes as 7.58561e+10.
TEST(Sweep, TheMarkdownTableHasUnits) {
  SweepOptions options = fresh_sweep("meridian_sweep_units_test");
  options.plots = false;
  const fs::path out = options.out_dir;
  std::ostringstream progress;
  const SweepResult r =
      run_sweep(options, {parse_sweep_axis("diloco.H=50")}, synthetic_runner(4), progress);
  const Summary& s = *r.points[0].summary;
  const auto md = lines_of((out / "sweep.md").string());
  ASSERT_EQ(md.size(), 3u);  // header, rule, one point (no command given)
  const std::string& row = md[2];
  EXPECT_EQ(row.find("e+"), std::string::npos) << row;
  char want[64];
  std::snprintf(want, sizeof want, "| %.1f %% |", 100 * s.compute_utilization);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  std::snprintf(want, sizeof want, "| %.1f %% |", 100 * s.mfu);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  // Bytes with an SI prefix, three digits; times in s or min; the DDP factor with an x.
  ASSERT_GT(s.wire_bytes_per_node_per_outer_step, 100e6);
  ASSERT_LT(s.wire_bytes_per_node_per_outer_step, 999e6);
  std::snprintf(want, sizeof want, "| %.0f MB |", s.wire_bytes_per_node_per_outer_step / 1e6);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  std::snprintf(want, sizeof want, "| %#.3g min |", s.simulated_s / 60);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  std::snprintf(want, sizeof want, "| %.0fx |", *s.bandwidth_reduction_vs_ddp);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  std::snprintf(want, sizeof want, "| %#.3g s |", s.inner_step_s);  // e.g. 2.04 s
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  std::snprintf(want, sizeof want, "| %.2f |", s.nodes.mean);
  EXPECT_NE(row.find(want), std::string::npos) << want << " in " << row;
  // The CSV keeps the raw numbers for scripts.
  const auto csv = lines_of((out / "sweep.csv").string());
  std::snprintf(want, sizeof want, ",%.6g,", s.compute_utilization);
  EXPECT_NE(csv[1].find(want), std::string::npos) << csv[1];
}

// Issue 21: a sweep with a bad key ran every point before each failed. Every point is checked
// before the first runs; the error names --set and the point.
TEST(Sweep, ABadPointFailsBeforeAnyPointRuns) {
  SweepOptions options = fresh_sweep("meridian_sweep_check_test");
  options.plots = false;
  const fs::path out = options.out_dir;
  int runs = 0;
  SweepRunner fake = [&](const std::vector<std::string>&, const std::string&) {
    ++runs;
    return 0;
  };
  std::vector<std::string> checked;
  options.check_point = [&](const SweepPoint& p) {
    checked.push_back(p.name);
    for (const auto& [k, v] : p.settings)
      if (k == "diloco.codec" && v == "int4")
        throw ConfigError("x.yaml: diloco.codec: unknown codec 'int4'");
  };
  std::ostringstream progress;
  try {
    run_sweep(options,
              {parse_sweep_axis("diloco.H=50,100"), parse_sweep_axis("diloco.codec=fp32,int4")},
              fake, progress);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("--set: point 'diloco.H=50_diloco.codec=int4'", 0), 0u) << what;
    EXPECT_NE(what.find("--set diloco.H=50 --set diloco.codec=int4"), std::string::npos) << what;
    EXPECT_NE(what.find("unknown codec 'int4'"), std::string::npos) << what;
  }
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(checked, (std::vector<std::string>{"diloco.H=50_diloco.codec=fp32",
                                               "diloco.H=50_diloco.codec=int4"}));
  EXPECT_FALSE(fs::exists(out)) << "nothing written before the check";
}

TEST(Sweep, ProgressLineCountsPointsAndEstimatesTheRest) {
  EXPECT_EQ(sweep_progress_line(0, 6, 0), "sweep: 0/6 points done, ETA ?");
  EXPECT_EQ(sweep_progress_line(2, 6, 20), "sweep: 2/6 points done, ETA 40 s");
  EXPECT_EQ(sweep_progress_line(1, 6, 30), "sweep: 1/6 points done, ETA 2 min 30 s");
  EXPECT_EQ(sweep_progress_line(1, 3, 4000), "sweep: 1/3 points done, ETA 2 h 13 min");
  EXPECT_EQ(sweep_progress_line(6, 6, 60), "sweep: 6/6 points done, finished");
  // run_sweep reports before the first point and after each.
  SweepOptions options = fresh_sweep("meridian_sweep_progress_test");
  options.plots = false;
  std::vector<std::pair<std::size_t, std::size_t>> calls;
  options.on_progress = [&](std::size_t done, std::size_t total, double elapsed_s) {
    EXPECT_GE(elapsed_s, 0.0);
    calls.push_back({done, total});
  };
  std::ostringstream progress;
  run_sweep(options, {parse_sweep_axis("diloco.H=50,100")}, synthetic_runner(2), progress);
  EXPECT_EQ(calls, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 2}, {1, 2}, {2, 2}}));
}

// Issue 21: the sweep plot over codecs joined the categories fp32 and int8 with a line.
TEST(Sweep, CategoriesAreDotsNotLines) {
  try {
    find_gnuplot("gnuplot");
  } catch (const ConfigError&) {
    GTEST_SKIP() << "gnuplot not installed";
  }
  SweepOptions options = fresh_sweep("meridian_sweep_categories_test");
  options.plot.svg = false;
  const fs::path out = options.out_dir;
  std::ostringstream progress;
  run_sweep(options,
            {parse_sweep_axis("diloco.H=50,100"), parse_sweep_axis("diloco.codec=fp32,int8")},
            synthetic_runner(4), progress);
  std::ifstream in(out / "plots" / "sweep.gp");
  std::stringstream text;
  text << in.rdbuf();
  const std::string script = text.str();
  const auto codec = script.find("# ---- sweep_diloco_codec");
  ASSERT_NE(codec, std::string::npos);
  const std::string numeric = script.substr(0, codec), categorical = script.substr(codec);
  EXPECT_NE(numeric.find("with linespoints"), std::string::npos);  // H: a numeric axis
  EXPECT_EQ(categorical.find("linespoints"), std::string::npos) << categorical;
  EXPECT_EQ(categorical.find("with lines"), std::string::npos) << categorical;
  EXPECT_NE(categorical.find("with points"), std::string::npos);
  EXPECT_NE(categorical.find("set xtics ('fp32' 0, 'int8' 1)"), std::string::npos);
  // Legends below the plots, not over the data.
  EXPECT_EQ(script.find("set key bottom left"), std::string::npos);
  EXPECT_NE(script.find("set key below"), std::string::npos);
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

// An emulation sweep: each point's validation loss against the modelled clock and tokens, side
// by side, and the table's validation and time-to-target columns. The fake runner adds an
// `evaluation` record after every outer_step record of the synthetic run (val_loss falling by
// 0.5 per outer step from 6, faster with a larger H) and the run file's target loss.
TEST(Sweep, EmulationSweepsDrawTheValidationCurvesSideBySide) {
  try {
    find_gnuplot("gnuplot");
  } catch (const ConfigError&) {
    GTEST_SKIP() << "gnuplot not installed";
  }
  SweepRunner fake = [](const std::vector<std::string>& args, const std::string&) {
    testing::SyntheticOptions o;
    o.outer_steps = 6;
    o.H = std::stoi(args[args.size() - 1].substr(9));
    testing::write_synthetic_run(args[3], o);
    const fs::path events = fs::path(args[3]) / "events.jsonl";
    std::ostringstream out;
    for (const std::string& line : lines_of(events.string())) {
      nlohmann::json e = nlohmann::json::parse(line);
      if (e["type"] == "config") e["config"]["trainer"]["target_loss"] = 4.6;
      out << e.dump() << "\n";
      if (e["type"] == "outer_step" && e["node"] == 0) {
        const double loss = 6.0 - 0.5 * e["outer_step"].get<double>() * (o.H == 100 ? 1.5 : 1.0);
        out << nlohmann::json{{"t", e["t"]}, {"node", 0}, {"type", "evaluation"},
                              {"outer_step", e["outer_step"]}, {"val_loss", loss}}
                   .dump()
            << "\n";
      }
    }
    std::ofstream(events) << out.str();
    return 0;
  };
  SweepOptions options = fresh_sweep("meridian_sweep_val_curves_test");
  options.plot.svg = true;
  std::ostringstream progress;
  const SweepResult r = run_sweep(options, {parse_sweep_axis("diloco.H=50,100")}, fake, progress);
  ASSERT_EQ(r.failed(), 0);
  const fs::path out = options.out_dir;
  ASSERT_TRUE(fs::exists(out / "plots" / "val_loss_curves.svg"));
  const auto data = lines_of((out / "plots" / "data" / "val_loss_curves.dat").string());
  int points = 0, blocks = 0;
  for (const std::string& l : data) {
    blocks += l.rfind("# diloco.H=", 0) == 0;
    points += !l.empty() && l[0] != '#';
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(points, 12);  // 6 outer steps per point
  std::ifstream in(out / "plots" / "sweep.gp");
  std::stringstream script;
  script << in.rdbuf();
  EXPECT_NE(script.str().find("Validation loss vs modelled time"), std::string::npos);
  EXPECT_NE(script.str().find("target 4.6"), std::string::npos);
  // H = 50 first reaches 4.6 at outer step 3 (6 - 0.5 * 3 = 4.5), H = 100 at 2 (6 - 0.75 * 2).
  ASSERT_EQ(r.points.size(), 2u);
  ASSERT_TRUE(r.points[0].summary->target_reached.has_value());
  EXPECT_EQ(r.points[0].summary->target_reached->outer_step, 3);
  ASSERT_TRUE(r.points[1].summary->target_reached.has_value());
  EXPECT_EQ(r.points[1].summary->target_reached->outer_step, 2);
  const auto csv = lines_of((out / "sweep.csv").string());
  EXPECT_NE(csv[0].find(",val_loss,time_to_target_s,tokens_to_target"), std::string::npos)
      << csv[0];
}

}  // namespace
}  // namespace meridian::analysis
