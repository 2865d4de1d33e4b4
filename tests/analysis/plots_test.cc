// Plots and the report on the synthetic run: every figure is drawn to a PNG of the requested
// pixel size (read from the PNG header) and a non-empty SVG, and report.html embeds them.
// Skipped when gnuplot is not installed. Not a check of how the figures look.
#include "analysis/plots.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "analysis/report.h"
#include "engine/core/error.h"
#include "tests/analysis/synthetic_run.h"
#include "tests/analysis/test_files.h"

namespace meridian::analysis {
namespace {
namespace fs = std::filesystem;

using testing::have_gnuplot;
using testing::png_size;
using testing::read_text;

std::string fresh_dir(const std::string& name) {
  return testing::fresh_dir("meridian_plots_test_" + name);
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

// One figure's section of a generated script (from "# ---- NAME" to the next section).
std::string section(const std::string& script, const std::string& name) {
  const std::string mark = "# ---- " + name + "\n";
  const auto at = script.find(mark);
  if (at == std::string::npos) return "";
  const auto end = script.find("# ---- ", at + mark.size());
  return script.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// The synthetic run with every outer step's (slowest) all-reduce time replaced.
RunData run_with_allreduce(const std::string& dir, const std::function<double(int)>& time_s) {
  testing::write_synthetic_run(dir, {});
  RunData run = load_run(dir);
  for (std::size_t k = 0; k < run.summary.steps.size(); ++k)
    run.summary.steps[k].allreduce_s = time_s(static_cast<int>(k));
  return run;
}

// Issue 21: the bins of a run whose all-reduce times differ only in the fourth digit were
// labelled "515" each (bin centres printed with three digits, used as the tic labels).
TEST(Plots, HistogramBinsAreDistinctOnANumericAxis) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("bins");
  const RunData run = run_with_allreduce(dir, [](int k) { return 515.061 + 0.0001 * k; });
  RunPlotOptions options;
  options.plot.svg = false;
  plot_run(run, dir + "/plots", options);
  std::ifstream in(dir + "/plots/data/allreduce_hist.dat");
  std::string line;
  std::getline(in, line);  // header
  std::set<std::string> centres;
  int bins = 0;
  for (; std::getline(in, line); ++bins) centres.insert(line.substr(0, line.find(' ')));
  EXPECT_EQ(bins, 6);  // 12 steps / 2
  EXPECT_EQ(centres.size(), 6u) << "bin centres printed alike";
  const std::string hist = section(read_text(dir + "/plots/plots.gp"), "allreduce_hist");
  EXPECT_EQ(hist.find("xtic("), std::string::npos) << "labels from rounded strings";
  EXPECT_NE(hist.find("with boxes"), std::string::npos);
  // Tics every 0.0002 s (range 0.0011 s / 6 -> 0.00018 -> 0.0002): four decimals.
  EXPECT_NE(hist.find("set format x '%.4f'"), std::string::npos) << hist;
}

// Issue 21: when every outer step took the same time the box plot was a flat, wide line.
TEST(Plots, EqualAllReduceTimesDrawDotsAndTheValueNotAFlatBox) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("flat");
  const RunData run = run_with_allreduce(dir, [](int) { return 515.0; });
  RunPlotOptions options;
  options.plot.svg = false;
  plot_run(run, dir + "/plots", options);
  const std::string box = section(read_text(dir + "/plots/plots.gp"), "allreduce_box");
  EXPECT_EQ(box.find("with boxplot"), std::string::npos) << box;
  EXPECT_NE(box.find("with points"), std::string::npos) << box;
  EXPECT_NE(box.find("'all 12 outer steps: 515 s'"), std::string::npos) << box;
  // Nearly equal (within 0.1 %, a flat line on an axis from 0): the range in the label.
  const std::string dir3 = fresh_dir("nearlyflat");
  plot_run(run_with_allreduce(dir3, [](int k) { return 515.0604 + 0.0001 * (k % 3); }),
           dir3 + "/plots", options);
  const std::string box3 = section(read_text(dir3 + "/plots/plots.gp"), "allreduce_box");
  EXPECT_EQ(box3.find("with boxplot"), std::string::npos) << box3;
  EXPECT_NE(box3.find("'all 12 outer steps: 515.0604 to 515.0606 s'"), std::string::npos) << box3;
  // A run whose times vary keeps its box.
  const std::string dir2 = fresh_dir("notflat");
  plot_run(run_with_allreduce(dir2, [](int k) { return 500.0 + k; }), dir2 + "/plots", options);
  EXPECT_NE(section(read_text(dir2 + "/plots/plots.gp"), "allreduce_box").find("with boxplot"),
            std::string::npos);
}

// Every `set key` of a script is `off` or outside the plot area.
void expect_legends_outside(const std::string& script_path) {
  std::istringstream script(read_text(script_path));
  int keys = 0;
  for (std::string line; std::getline(script, line);) {
    if (line.rfind("set key", 0) != 0) continue;
    ++keys;
    const bool outside = line == "set key off" || line.find(" below") != std::string::npos ||
                         line.find(" outside") != std::string::npos;
    EXPECT_TRUE(outside) << script_path << ": " << line;
  }
  EXPECT_GT(keys, 0) << script_path;
}

// Issue 21: in bytes.png the legend covered the bars; in the utilization plot the dashed
// series ran through the legend.
TEST(Plots, LegendsAreOutsideTheData) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string a = fresh_dir("keys_a"), b = fresh_dir("keys_b");
  testing::write_synthetic_run(a, {});
  testing::SyntheticOptions o;
  o.H = 100;
  testing::write_synthetic_run(b, o);
  RunPlotOptions options;
  options.plot.svg = false;
  plot_run(load_run(a), a + "/plots", options);
  plot_comparison({load_run(a), load_run(b)}, a + "/compare", options.plot);
  expect_legends_outside(a + "/plots/plots.gp");
  expect_legends_outside(a + "/compare/compare.gp");
}

// Issue 21: the last outer step's point sat on the right border of the utilization plot.
TEST(Plots, TheLastPointIsInsideTheXRange) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("border");
  testing::write_synthetic_run(dir, {});
  RunPlotOptions options;
  options.plot.svg = false;
  plot_run(load_run(dir), dir + "/plots", options);
  const std::string script = read_text(dir + "/plots/plots.gp");
  for (const auto& [figure, data] : std::vector<std::pair<std::string, std::string>>{
           {"utilization", "utilization_0.dat"}, {"nodes", "nodes_0.dat"}}) {
    double last_x = 0;
    std::ifstream in(dir + "/plots/data/" + data);
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') last_x = std::max(last_x, std::stod(line));
    const std::string sec = section(script, figure);
    const auto at = sec.find("set xrange [0:");
    ASSERT_NE(at, std::string::npos) << figure;
    const double x_max = std::stod(sec.substr(at + 14));
    EXPECT_GT(x_max, last_x * 1.02) << figure;
    EXPECT_LT(x_max, last_x * 1.1) << figure;
  }
}

// Issue 21: per-node figures said "node 0..13" where the scenario names the hosts.
TEST(Plots, NodesAreNamedByTheirHosts) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("hosts");
  std::vector<Event> events = testing::synthetic_run({});
  // The config record of a simulated run names the platform's hosts; nodes 0-3 start on the
  // hosts with start: true, in order (the joiners, 4 and 5, carry no host here).
  {
    std::string config = events[0].to_json();
    const std::string platform =
        R"("platform":{"hosts":[{"host":"us-east-0","start":true},{"host":"spare-0","start":false},)"
        R"({"host":"eu-west-0","start":true},{"host":"ap-tokyo-0","start":true},)"
        R"({"host":"us-west-0","start":true}]},)";
    config.insert(config.find("\"config\":{") + 10, platform);
    std::ofstream out(dir + "/events.jsonl");
    out << config << "\n";
    for (std::size_t i = 1; i < events.size(); ++i) out << events[i].to_json() << "\n";
  }
  const RunData run = load_run(dir);
  std::vector<std::string> labels;
  for (const NodeStats& n : run.summary.per_node) labels.push_back(node_label(n));
  EXPECT_EQ(labels, (std::vector<std::string>{"us-east-0", "eu-west-0", "ap-tokyo-0", "us-west-0",
                                              "node 4", "node 5"}));
  RunPlotOptions options;
  options.plot.svg = false;
  plot_run(run, dir + "/plots", options);
  const std::string bytes = read_text(dir + "/plots/data/bytes.dat");
  EXPECT_NE(bytes.find("\"eu-west-0\" "), std::string::npos) << bytes;
  EXPECT_EQ(bytes.find("\"node 1\""), std::string::npos) << bytes;
  EXPECT_NE(section(read_text(dir + "/plots/plots.gp"), "timeline").find("'ap-tokyo-0'"),
            std::string::npos);
  // The report's node table has a host column (empty for the joiners).
  const std::string html = report_html(run, {});
  EXPECT_NE(html.find("<th class=\"l\">host</th>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>2</td><td class=\"l\">ap-tokyo-0</td>"), std::string::npos);
  EXPECT_NE(html.find("<tr><td>4</td><td class=\"l\"></td>"), std::string::npos);
}

TEST(Plots, AHostOnNodeStartedWins) {
  const auto e = parse_event_line(
      R"({"t":0,"node":7,"type":"node_started","initial":false,"host":"eu-cent-1"})", "test");
  EXPECT_EQ(e.as<NodeStartedRecord>()->host, "eu-cent-1");
  NodeStats n;
  n.node = 7;
  EXPECT_EQ(node_label(n), "node 7");
  n.host = "eu-cent-1";
  EXPECT_EQ(node_label(n), "eu-cent-1");
}

// --pdf, --title, --label: PDFs beside the PNGs, the title above every figure, the label in
// the legends instead of the folder's name.
TEST(Plots, PdfTitleAndLabel) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string a = fresh_dir("pdf_a"), b = fresh_dir("pdf_b");
  testing::write_synthetic_run(a, {});
  testing::write_synthetic_run(b, {});
  RunData ra = load_run(a), rb = load_run(b);
  ra.label = "DiLoCo int8";
  rb.label = "second run";
  PlotOptions options;
  options.svg = false;
  options.pdf = true;
  options.title = "Figure 3: it's a test";
  const auto files = plot_comparison({ra, rb}, a + "/compare", options);
  ASSERT_EQ(files.size(), 8u);  // four figures, PNG and PDF
  int pdfs = 0;
  for (const std::string& f : files) {
    if (fs::path(f).extension() != ".pdf") continue;
    ++pdfs;
    std::ifstream in(f, std::ios::binary);
    char magic[5] = {};
    in.read(magic, 5);
    EXPECT_EQ(std::string(magic, 5), "%PDF-") << f;
    EXPECT_GT(fs::file_size(f), 5000u) << f;
  }
  EXPECT_EQ(pdfs, 4);
  const std::string script = read_text(a + "/compare/compare.gp");
  EXPECT_NE(script.find("title 'Figure 3: it''s a test'"), std::string::npos);
  EXPECT_NE(script.find("'DiLoCo int8'"), std::string::npos);
  std::ifstream hist(a + "/compare/data/compare_allreduce_hist.dat");
  std::string header;
  std::getline(hist, header);
  EXPECT_EQ(header, "bin_center_s \"DiLoCo int8\" \"second run\"");
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

TEST(Report, LabelAndTitle) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed";
  const std::string dir = fresh_dir("report_label");
  testing::write_synthetic_run(dir, {});
  ReportOptions options;
  options.label = "INTELLECT-1 <global>";
  options.plots.plot.title = "Figure 2";
  const std::string html = read_text(write_report(dir, options));
  EXPECT_NE(html.find("<h1>Meridian run report: INTELLECT-1 &lt;global&gt;</h1>"),
            std::string::npos);
  EXPECT_NE(read_text(dir + "/plots/plots.gp").find("title 'Figure 2'"), std::string::npos);
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
