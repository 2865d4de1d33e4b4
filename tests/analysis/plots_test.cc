// Plots and the report on the synthetic run: every figure is drawn to a PNG of the requested
// pixel size (read from the PNG header) and a non-empty SVG, and report.html embeds them.
// Skipped when gnuplot is not installed. Not a check of how the figures look.
#include "analysis/plots.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/report.h"
#include "engine/error.h"
#include "tests/analysis/synthetic_run.h"

namespace meridian::analysis {
namespace {
namespace fs = std::filesystem;

bool have_gnuplot() {
  try {
    find_gnuplot("gnuplot");
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Width and height from the IHDR chunk: 8-byte signature, 4-byte length, "IHDR", then
// big-endian width and height.
std::pair<int, int> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), 24);
  EXPECT_EQ(in.gcount(), 24) << path;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h) + 1, 3), "PNG") << path;
  EXPECT_EQ(std::string(reinterpret_cast<char*>(h) + 12, 4), "IHDR") << path;
  auto be32 = [&](int o) { return (h[o] << 24) | (h[o + 1] << 16) | (h[o + 2] << 8) | h[o + 3]; };
  return {be32(16), be32(20)};
}

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("meridian_plots_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

TEST(Plots, EveryFigureOfOneRun) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed (apt-get install -y gnuplot-nox)";
  const std::string dir = fresh_dir("one");
  testing::write_synthetic_run(dir, {});
  RunPlotOptions options;
  options.plot.width_px = 900;
  options.plot.height_px = 500;
  const auto files = plot_run(load_run(dir), dir + "/plots", options);
  std::set<std::string> names;
  for (const std::string& f : files) {
    names.insert(fs::path(f).filename().string());
    ASSERT_TRUE(fs::exists(f)) << f;
    EXPECT_GT(fs::file_size(f), 5000u) << f;  // an empty pngcairo canvas is ~3 KB
    if (fs::path(f).extension() == ".png") {
      EXPECT_EQ(png_size(f), (std::pair{900, 500})) << f;
    }
  }
  for (const char* n : {"nodes", "allreduce_hist", "allreduce_box", "utilization", "timeline",
                        "bytes", "loss_vs_tokens", "loss_vs_time"}) {
    EXPECT_TRUE(names.count(std::string(n) + ".png")) << n;
    EXPECT_TRUE(names.count(std::string(n) + ".svg")) << n;
  }
  EXPECT_TRUE(fs::exists(dir + "/plots/plots.gp"));
}

// The script names its figures and data relative to its folder, so a plots folder that is
// moved (or committed and checked out elsewhere) redraws with `gnuplot plots.gp` in it.
TEST(Plots, ScriptRedrawsAfterTheFolderMoves) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed (apt-get install -y gnuplot-nox)";
  const std::string dir = fresh_dir("moved");
  testing::write_synthetic_run(dir, {});
  RunPlotOptions options;
  options.plot.svg = false;
  const auto files = plot_run(load_run(dir), dir + "/plots", options);
  ASSERT_FALSE(files.empty());
  std::ifstream in(dir + "/plots/plots.gp");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find(fs::absolute(dir).string()), std::string::npos)
      << "the script names a path outside its folder";

  const fs::path moved = fs::path(fresh_dir("moved_to")) / "plots";
  fs::rename(fs::path(dir) / "plots", moved);
  for (const std::string& f : files) fs::remove(moved / fs::path(f).filename());
  run_gnuplot((moved / "plots.gp").string(), options.plot);
  for (const std::string& f : files) {
    const fs::path redrawn = moved / fs::path(f).filename();
    ASSERT_TRUE(fs::exists(redrawn)) << redrawn;
    EXPECT_GT(fs::file_size(redrawn), 5000u) << redrawn;
  }
  EXPECT_FALSE(fs::exists(fs::path(dir) / "plots")) << "gnuplot wrote into the old folder";
}

TEST(Plots, NoLossNoLossFigures) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("noloss");
  testing::SyntheticOptions o;
  o.with_loss = false;
  testing::write_synthetic_run(dir, o);
  RunPlotOptions options;
  options.plot.svg = false;
  const auto files = plot_run(load_run(dir), dir + "/plots", options);
  EXPECT_EQ(files.size(), 6u);
  for (const std::string& f : files) EXPECT_EQ(fs::path(f).extension(), ".png");
  EXPECT_FALSE(fs::exists(dir + "/plots/loss_vs_tokens.png"));
}

TEST(Plots, SeveralRunsSideBySide) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string a = fresh_dir("int8"), b = fresh_dir("fp32");
  testing::write_synthetic_run(a, {});
  testing::SyntheticOptions o;
  o.codec = "fp32";
  o.H = 100;
  testing::write_synthetic_run(b, o);
  PlotOptions options;
  options.svg = false;
  const auto files = plot_comparison({load_run(a), load_run(b)}, a + "/compare", options);
  ASSERT_EQ(files.size(), 4u);
  for (const std::string& f : files) EXPECT_EQ(png_size(f), (std::pair{1200, 700})) << f;
  // The histogram's data has one column per run, labelled by the run's folder name.
  std::ifstream hist(a + "/compare/data/compare_allreduce_hist.dat");
  std::string header;
  std::getline(hist, header);
  EXPECT_EQ(header, "bin_center_s \"meridian_plots_test_int8\" \"meridian_plots_test_fp32\"");
}

TEST(Plots, TimelineStepMustExist) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("step");
  testing::write_synthetic_run(dir, {});
  const RunData run = load_run(dir);
  EXPECT_EQ(default_timeline_step(run), 3);  // the first joiner recovers during step 3
  RunPlotOptions options;
  options.timeline_step = 99;
  EXPECT_THROW(plot_run(run, dir + "/plots", options), ConfigError);
}

TEST(Plots, MissingGnuplotSaysHowToInstallIt) {
  try {
    find_gnuplot("gnuplot-that-does-not-exist");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install -y gnuplot-nox"), std::string::npos);
  }
}

TEST(Report, SelfContainedHtml) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("report");
  testing::write_synthetic_run(dir, {});
  ReportOptions options;
  const std::string path = write_report(dir, options);
  EXPECT_EQ(path, dir + "/report.html");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string html = text.str();
  std::size_t images = 0;
  for (std::size_t at = 0;
       (at = html.find("src=\"data:image/png;base64,", at)) != std::string::npos; ++at)
    ++images;
  EXPECT_EQ(images, 8u);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("outer-step utilization"), std::string::npos);
  EXPECT_NE(html.find("&quot;codec&quot;: &quot;int8&quot;"), std::string::npos);  // the config
}

TEST(Report, RunThatNeverReachedAnOuterStep) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("empty");
  std::vector<Event> events = testing::synthetic_run({});
  events.resize(3);  // config and two node_started: the run died before any step
  {
    std::ofstream out(dir + "/events.jsonl");
    for (const Event& e : events) out << e.to_json() << "\n";
  }
  EXPECT_TRUE(plot_run(load_run(dir), dir + "/plots", {}).empty());
  std::ifstream in(write_report(dir, {}));
  std::stringstream html;
  html << in.rdbuf();
  EXPECT_NE(html.str().find("No plots: the run has no outer steps."), std::string::npos);
}

TEST(Report, Base64AndEscaping) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\x00\x10", 3)), "/wAQ");
  EXPECT_EQ(html_escape("<a href=\"x\">&</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;");
}

}  // namespace
}  // namespace meridian::analysis
