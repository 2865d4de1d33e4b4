// The ensemble over seeds (analysis/ensemble.h): the seed-list grammar and its errors, the
// distributions against values computed by hand, and its figures and report (analysis/plots.h,
// report.h): the numbers drawn are ensemble.json's, one box per ensemble. Figure tests skip
// without gnuplot.
#include "analysis/ensemble.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/plots.h"
#include "analysis/report.h"
#include "engine/core/error.h"
#include "tests/analysis/test_files.h"

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
  // Each run's within-run IQR: steps {10k, 10k + 1}, p25 at h = 0.25, p75 at h = 0.75: 0.5.
  const auto& iqr = e["metrics"]["allreduce_s_iqr"];
  EXPECT_EQ(iqr["count"], 5);
  EXPECT_NEAR(iqr["median"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(e["runs"][0]["allreduce_s_iqr"].get<double>(), 0.5, 1e-12);
  // The table a person reads has the row.
  EXPECT_NE(ensemble_markdown(e).find("| all-reduce within-run IQR, p75 - p25 (s) | 0.5 |"),
            std::string::npos)
      << ensemble_markdown(e);
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

// ---- figures and report

namespace fs = std::filesystem;
using testing::have_gnuplot;
using testing::read_text;

// DIR/ensemble.json of `seeds` runs, seed k (from 0) with utilization u0 + du k and all-reduce
// times {a0 + 10 k, a0 + 10 k + 1}; `failed` more seeds that did not run.
nlohmann::json write_ensemble(const std::string& dir, int seeds, double u0, double du, double a0,
                              int failed = 0) {
  std::vector<EnsembleRun> runs;
  for (int k = 0; k < seeds; ++k)
    runs.push_back({k + 1, "seed-" + std::to_string(k + 1),
                    run_with(u0 + du * k, {a0 + 10.0 * k, a0 + 10.0 * k + 1})});
  for (int k = 0; k < failed; ++k)
    runs.push_back({seeds + k + 1, "seed-" + std::to_string(seeds + k + 1), std::nullopt});
  const nlohmann::json e = ensemble_json(runs, "x.yaml", "meridian sim x.yaml --seeds");
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "ensemble.json") << e.dump(2) << "\n";
  return e;
}

// A data file's rows (comment lines skipped), as whitespace-separated words.
std::vector<std::vector<std::string>> rows_of(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    rows.emplace_back();
    for (std::string w; words >> w;) rows.back().push_back(w);
  }
  return rows;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

TEST(EnsembleFigures, BoxesAndBandsHoldTheNumbersOfEnsembleJson) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed (apt-get install -y gnuplot-nox)";
  const std::string dir = testing::fresh_dir("meridian_ensemble_figures") + "/usa";
  const nlohmann::json e = write_ensemble(dir, 5, 0.5, 0.1, 10);
  const std::vector<std::string> files =
      plot_ensembles({load_ensemble(dir)}, dir + "/plots", PlotOptions{});
  ASSERT_EQ(files.size(), 4u);
  for (const char* name : {"ensemble_box", "ensemble_allreduce_steps"})
    for (const char* ext : {".png", ".svg"})
      EXPECT_TRUE(fs::exists(dir + "/plots/" + name + ext)) << name << ext;
  EXPECT_EQ(testing::png_size(dir + "/plots/ensemble_box.png"), (std::pair{1200, 700}));

  // One box per panel: x, p5, p25, median, p75, p95, seeds, label; exactly the file's numbers.
  for (const char* key : {"compute_utilization", "mfu", "allreduce_s_p50"}) {
    const auto rows = rows_of(dir + "/plots/data/ensemble_box_" + std::string(key) + ".dat");
    ASSERT_EQ(rows.size(), 1u) << key;
    ASSERT_EQ(rows[0].size(), 8u) << key;
    const auto& m = e["metrics"][key];
    EXPECT_EQ(rows[0][0], "1");
    const char* const columns[] = {"p5", "p25", "median", "p75", "p95"};
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(std::stod(rows[0][c + 1]), m[columns[c]].get<double>()) << key << " " << columns[c];
    EXPECT_EQ(rows[0][6], "5");
    EXPECT_EQ(rows[0][7], "\"usa\"");
  }
  // The hand-computed box of compute utilization over {0.5, ..., 0.9}.
  const auto box = rows_of(dir + "/plots/data/ensemble_box_compute_utilization.dat")[0];
  EXPECT_NEAR(std::stod(box[1]), 0.52, 1e-12);
  EXPECT_NEAR(std::stod(box[2]), 0.6, 1e-12);
  EXPECT_NEAR(std::stod(box[3]), 0.7, 1e-12);
  EXPECT_NEAR(std::stod(box[4]), 0.8, 1e-12);
  EXPECT_NEAR(std::stod(box[5]), 0.88, 1e-12);
  // A dot per seed: seed, compute utilization, MFU, all-reduce median, offset.
  const auto seeds = rows_of(dir + "/plots/data/ensemble_box_seeds_0.dat");
  ASSERT_EQ(seeds.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(seeds[k][0], std::to_string(k + 1));
    EXPECT_EQ(std::stod(seeds[k][3]), e["runs"][k]["allreduce_s_p50"].get<double>());
  }
  // The band: outer step, seeds, p10, p50, p90 of allreduce_s_by_step.
  const auto band = rows_of(dir + "/plots/data/ensemble_allreduce_steps_0.dat");
  ASSERT_EQ(band.size(), 2u);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& st = e["allreduce_s_by_step"][k];
    EXPECT_EQ(band[k][0], std::to_string(k));
    EXPECT_EQ(band[k][1], "5");
    EXPECT_EQ(std::stod(band[k][2]), st["p10"].get<double>());
    EXPECT_EQ(std::stod(band[k][3]), st["p50"].get<double>());
    EXPECT_EQ(std::stod(band[k][4]), st["p90"].get<double>());
  }
  const std::string script = read_text(dir + "/plots/ensemble.gp");
  EXPECT_EQ(count_of(script, "whiskerbars"), 3u * 2);  // a box per panel, PNG and SVG
  EXPECT_NE(script.find("box: p25-p75, line: median, whiskers: p5-p95 over the seeds"),
            std::string::npos);
  EXPECT_NE(script.find("with filledcurves"), std::string::npos);
}

TEST(EnsembleFigures, SeveralEnsemblesABoxAndABandEach) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string root = testing::fresh_dir("meridian_ensemble_compare");
  const nlohmann::json a = write_ensemble(root + "/a", 5, 0.8, 0.01, 200);
  const nlohmann::json b = write_ensemble(root + "/b", 3, 0.7, 0.02, 400);
  std::vector<EnsembleData> ens = {load_ensemble(root + "/a"), load_ensemble(root + "/b")};
  ens[0].label = "USA";
  ens[1].label = "global";
  PlotOptions options;
  options.svg = false;
  const auto files = plot_ensembles(ens, root + "/cmp", options);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(fs::path(files[0]).filename(), "compare_ensemble_box.png");
  EXPECT_EQ(fs::path(files[1]).filename(), "compare_ensemble_allreduce_steps.png");
  const auto rows = rows_of(root + "/cmp/data/compare_ensemble_box_mfu.dat");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][7], "\"USA\"");
  EXPECT_EQ(rows[1][0], "2");
  EXPECT_EQ(std::stod(rows[1][3]), b["metrics"]["mfu"]["median"].get<double>());
  EXPECT_EQ(rows[1][6], "3");
  const std::string script = read_text(root + "/cmp/compare_ensemble.gp");
  EXPECT_NE(script.find("set xtics ('USA' 1, 'global' 2)"), std::string::npos) << script;
  EXPECT_EQ(count_of(script, "whiskerbars"), 3u * 2);  // two boxes in each of three panels
  EXPECT_NE(script.find("title 'global: p10-p90 over the seeds'"), std::string::npos);
  EXPECT_EQ(rows_of(root + "/cmp/data/compare_ensemble_allreduce_steps_1.dat").size(), 2u);
}

// As for one run's all-reduce box (issue 21): seeds that all give the same value draw their
// dots and the value, not a flat box.
TEST(EnsembleFigures, SeedsAllAlikeDrawTheValueNotAFlatBox) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = testing::fresh_dir("meridian_ensemble_flat");
  write_ensemble(dir, 3, 0.8, 0.0, 100);
  PlotOptions options;
  options.svg = false;
  plot_ensembles({load_ensemble(dir)}, dir + "/plots", options);
  const std::string script = read_text(dir + "/plots/ensemble.gp");
  EXPECT_NE(script.find("'all 3 seeds: 80'"), std::string::npos) << script;
  EXPECT_NE(script.find("'all 3 seeds: 40'"), std::string::npos) << script;  // MFU = u / 2
  EXPECT_EQ(count_of(script, "whiskerbars"), 1u);  // only the all-reduce medians differ
}

TEST(EnsembleFigures, AFileFromBeforeTheFiguresSaysToRerun) {
  const std::string dir = testing::fresh_dir("meridian_ensemble_old");
  nlohmann::json e = write_ensemble(dir, 2, 0.8, 0.1, 10);
  e.erase("allreduce_s_by_step");
  std::ofstream(fs::path(dir) / "ensemble.json") << e.dump(2);
  const std::string error = error_of([&] { load_ensemble(dir); });
  EXPECT_NE(error.find(dir + "/ensemble.json: written before ensembles had figures"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("rerun"), std::string::npos) << error;
}

std::string folder_error(const std::string& path) {
  return error_of([&] { folder_kind(path); });
}

TEST(EnsembleFigures, AFolderIsARunAnEnsembleOrAnErrorThatNamesIt) {
  const std::string root = testing::fresh_dir("meridian_ensemble_kinds");
  fs::create_directories(root + "/run");
  std::ofstream(root + "/run/events.jsonl") << "\n";
  write_ensemble(root + "/ens", 2, 0.8, 0.1, 10);
  fs::create_directories(root + "/neither");
  std::ofstream(root + "/neither/notes.txt") << "mine\n";
  EXPECT_EQ(folder_kind(root + "/run"), FolderKind::kRun);
  EXPECT_EQ(folder_kind(root + "/run/events.jsonl"), FolderKind::kRun);
  EXPECT_EQ(folder_kind(root + "/ens"), FolderKind::kEnsemble);
  EXPECT_EQ(folder_error(root + "/neither"),
            root +
                "/neither: neither a run (no events.jsonl, no node-<ID>/events.jsonl) nor an "
                "ensemble of `meridian sim --seeds` (no ensemble.json)");
  EXPECT_EQ(folder_error(root + "/missing"), root + "/missing: no such file or folder");
}

TEST(EnsembleReport, TableFiguresAndALinkPerSeed) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string root = testing::fresh_dir("meridian_ensemble_report");
  const std::string dir = root + "/ens";
  write_ensemble(dir, 5, 0.5, 0.1, 10, 1);
  fs::create_directories(dir + "/seed-2");
  std::ofstream(dir + "/seed-2/report.html") << "<html></html>\n";
  const std::string path = write_ensemble_report(dir, {});
  EXPECT_EQ(path, dir + "/report.html");
  const std::string html = read_text(path);
  EXPECT_NE(html.find("<h1>Meridian ensemble report: ens</h1>"), std::string::npos);
  // ensemble.md's table: the same rows, the same numbers.
  EXPECT_NE(html.find("<td class=\"l\">compute utilization</td><td>70.0 %</td><td>52.0 % &ndash; "
                      "88.0 %</td><td>50.0 %</td><td>90.0 %</td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("pooled (10 steps)"), std::string::npos);
  EXPECT_EQ(count_of(html, "src=\"data:image/png;base64,"), 2u);
  EXPECT_NE(html.find("<figure id=\"ensemble_box\">"), std::string::npos);
  EXPECT_NE(html.find("<figure id=\"ensemble_allreduce_steps\">"), std::string::npos);
  EXPECT_EQ(count_of(html, "src=\""), 2u);  // nothing else loaded
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // A link per seed: its report where it has one, else its folder; the failed seed says so.
  EXPECT_NE(html.find("<a href=\"seed-1/\">"), std::string::npos);
  EXPECT_NE(html.find("<a href=\"seed-2/report.html\">"), std::string::npos);
  EXPECT_NE(html.find("<td>6</td><td class=\"l\">failed</td>"), std::string::npos);
  EXPECT_NE(html.find("1 of 6 seeds failed"), std::string::npos);

  // Written elsewhere, the links lead from there.
  ReportOptions options;
  options.output = root + "/page.html";
  options.label = "USA";
  const std::string moved = read_text(write_ensemble_report(dir, options));
  EXPECT_NE(moved.find("<a href=\"ens/seed-1/\">"), std::string::npos);
  EXPECT_NE(moved.find("Meridian ensemble report: USA"), std::string::npos);
}

}  // namespace
}  // namespace meridian::analysis
