// The figures: each writes its data files under OUT/data/ and appends a section to OUT/plots.gp
// (or compare.gp), then gnuplot runs once per script. Figures that compare runs take a list
// of runs; a single run's plots use the same code with a list of one.
#include "analysis/plots.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/error.h"

namespace meridian::analysis {
namespace fs = std::filesystem;

namespace {

// Eight colours that stay distinct in print and for the common colour-blindnesses.
const char* const kColors[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                               "#e69f00", "#56b4e9", "#000000", "#f0e442"};
const char* color(std::size_t i) { return kColors[i % 8]; }

std::ofstream open_data(const fs::path& path) {
  std::ofstream out(path);
  if (!out) throw ConfigError(path.string() + ": cannot write (is the folder writable?)");
  out.precision(10);
  return out;
}

// Context shared by one script's figures.
struct Script {
  fs::path dir;
  std::ostringstream text;
  std::vector<std::string> files;
  PlotOptions options;

  // A data file: where it is written, and how the script (run in `dir`) names it.
  fs::path data(const std::string& name) const { return dir / "data" / name; }
  static std::string ref(const std::string& name) { return gp_quote("data/" + name); }
  void figure(const std::string& name, const std::string& body, int panels = 1) {
    gp_figure(text, dir.string(), name, body, options, options.height_px, files, panels);
  }
};

double run_span_s(const RunData& r) { return r.summary.run_end_s - r.summary.run_start_s; }

// x tics every 1, 2 or 5 × 10^k, about six over [lo, hi], with as many decimals as the step
// needs: gnuplot's default (%g, six digits) prints 515.0612 and 515.0614 both as 515.061.
std::string tics_for(double lo, double hi) {
  const double raw = (hi - lo) / 6;
  if (!(raw > 0) || !std::isfinite(raw)) return "set xtics nomirror\n";
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5   ? mag
                      : raw / mag < 3.5 ? 2 * mag
                      : raw / mag < 7.5 ? 5 * mag
                                        : 10 * mag;
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  std::ostringstream t;
  t.precision(15);
  t << "set xtics " << std::ceil(lo / step) * step << ", " << step << " nomirror\n"
    << "set format x '%." << decimals << "f'\n";
  return t.str();
}

// An x range from 0 that leaves the last point off the right border.
std::string xrange_to(double max_x) {
  std::ostringstream r;
  r.precision(10);
  r << "set xrange [0:" << (max_x > 0 ? max_x * 1.04 : 1.0) << "]\n";
  return r.str();
}

// ---- figures shared by one run and several

void fig_nodes(Script& sc, const std::vector<const RunData*>& runs, const std::string& name) {
  std::ostringstream plot;
  std::int64_t max_nodes = 0;
  double max_x = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Summary& s = runs[i]->summary;
    if (s.steps.empty()) continue;
    const std::string file = name + "_" + std::to_string(i) + ".dat";
    auto out = open_data(sc.data(file));
    out << "# inner_step active_nodes (participants of the outer step starting there)\n";
    const double H = static_cast<double>(s.metrics.H);
    for (const OuterStepStats& st : s.steps) {
      out << static_cast<double>(st.outer_step) * H << " " << st.participants << "\n";
      max_nodes = std::max(max_nodes, st.participants);
    }
    max_x = std::max(max_x, static_cast<double>(s.steps.back().outer_step + 1) * H);
    out << static_cast<double>(s.steps.back().outer_step + 1) * H << " "
        << s.steps.back().participants << "\n";
    plot << (plot.tellp() > 0 ? ", " : "plot ") << Script::ref(file)
         << " using 1:2 with steps lw 2.5 lc rgb '" << color(i) << "' title "
         << gp_quote(runs[i]->label);
  }
  if (plot.tellp() == 0) return;
  std::ostringstream body;
  body << "set title 'Active nodes over training'\n"
       << "set xlabel 'inner step'\nset ylabel 'active nodes (participants of the outer step)'\n"
       << "set yrange [0:" << max_nodes + 1 << "]\n"
       << (max_nodes <= 20 ? "set ytics 1\n" : "") << "set grid\n"
       << kKeyOutside << "\n"
       << xrange_to(max_x) << plot.str() << "\n";
  sc.figure(name, body.str());
}

// The all-reduce times per outer step of every run in one histogram, over [lo, hi]; `most` is
// the most outer steps of any run.
void allreduce_histogram(Script& sc, const std::vector<const RunData*>& runs,
                         const std::string& prefix, double lo, double hi, std::size_t most) {
  // Histogram: the same bins for every run, on a numeric time axis (bin labels rounded to a
  // few digits all read the same when the times differ in the fourth digit: 515.061, 515.47),
  // the runs' bars side by side in each bin.
  int bins = static_cast<int>(std::clamp<std::size_t>(most / 2, 5, 20));
  if (hi - lo <= 1e-6 * std::max(1.0, std::abs(hi))) {  // one value: in the middle bin
    const double pad = std::max(std::abs(hi) * 0.05, 1e-3);
    lo -= pad;
    hi += pad;
    bins |= 1;
  }
  const double width = (hi - lo) / bins;
  const double bar = width / static_cast<double>(runs.size());
  int max_count = 0;
  {
    auto out = open_data(sc.data(prefix + "allreduce_hist.dat"));
    out.precision(12);
    out << "bin_center_s";
    for (const RunData* r : runs) out << " \"" << r->label << "\"";
    out << "\n";
    std::vector<std::vector<int>> counts(runs.size(), std::vector<int>(bins, 0));
    for (std::size_t i = 0; i < runs.size(); ++i)
      for (const OuterStepStats& st : runs[i]->summary.steps) {
        int& c =
            counts[i][std::clamp(static_cast<int>((st.allreduce_s - lo) / width), 0, bins - 1)];
        max_count = std::max(max_count, ++c);
      }
    for (int b = 0; b < bins; ++b) {
      out << lo + (b + 0.5) * width;
      for (std::size_t i = 0; i < runs.size(); ++i) out << " " << counts[i][b];
      out << "\n";
    }
  }
  std::ostringstream hist;
  hist.precision(12);
  hist << "set title 'All-reduce time per outer step (slowest node): histogram'\n"
       << "set xlabel 'all-reduce time per outer step [s]'\n"
       << "set ylabel 'outer steps'\nset style fill solid 0.85 border -1\n"
       << "set boxwidth " << bar * 0.9 << " absolute\n"
       << "set xrange [" << lo - 0.25 * width << ":" << hi + 0.25 * width << "]\n"
       << tics_for(lo, hi) << "set grid ytics\n"
       << (runs.size() > 1 ? std::string(kKeyOutside) : std::string("set key off")) << "\n"
       << "set yrange [0:" << max_count * 1.15 + 0.5 << "]\n"
       << (max_count <= 10 ? "set ytics 1\n" : "") << "plot ";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const double shift = (static_cast<double>(i) - (runs.size() - 1) / 2.0) * bar;
    hist << (i ? ", " : "") << Script::ref(prefix + "allreduce_hist.dat") << " using ($1 + "
         << shift << "):" << i + 2 << " with boxes lc rgb '" << color(i) << "' title columnheader("
         << i + 2 << ")";
  }
  sc.figure(prefix + "allreduce_hist", hist.str() + "\n");
}

void allreduce_box(Script& sc, const std::vector<const RunData*>& runs, const std::string& prefix) {
  // Box plot: one box per run (quartiles, whiskers at 1.5 IQR), every outer step as a dot beside
  // it, spread sideways by a fixed low-discrepancy offset so that equal values stay visible. A
  // run whose steps all took (nearly) the same time has no box (it would be a flat line): its
  // dots and a label with the value.
  std::ostringstream box, tics, labels;
  box << "set title 'All-reduce time per outer step (slowest node): distribution'\n"
      << "set ylabel 'all-reduce time per outer step [s]'\nset xlabel 'run'\n"
      << "set style fill solid 0.5 border -1\nset style boxplot nooutliers\n"
      << "set boxwidth 0.5\nset grid ytics\nset key off\nset yrange [0:*]\n"
      << "set xrange [0.4:" << runs.size() + 0.6 << "]\n";
  std::ostringstream plot;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& steps = runs[i]->summary.steps;
    if (steps.empty()) continue;
    const std::string file = prefix + "allreduce_box_" + std::to_string(i) + ".dat";
    auto out = open_data(sc.data(file));
    out << "# slowest node's outer_step.allreduce_s, one outer step per line\n";
    out << "# columns: allreduce_s, sideways offset of its dot\n";
    double v_lo = INFINITY, v_hi = -INFINITY;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const double spread = std::fmod(static_cast<double>(k) * 0.6180339887, 1.0) - 0.5;
      out << steps[k].allreduce_s << " " << 0.36 + 0.2 * spread << "\n";
      v_lo = std::min(v_lo, steps[k].allreduce_s);
      v_hi = std::max(v_hi, steps[k].allreduce_s);
    }
    // On a y axis from 0, a spread under 0.1 % of the value draws as a flat line too.
    const bool constant = v_hi - v_lo <= 1e-3 * std::abs(v_hi);
    tics << (tics.tellp() > 0 ? ", " : "") << gp_quote(runs[i]->label) << " " << i + 1;
    plot << (plot.tellp() > 0 ? ", " : "plot ");
    if (constant) {
      char text[128];
      if (v_hi == v_lo)
        std::snprintf(text, sizeof text, "all %zu outer steps: %.6g s", steps.size(), v_hi);
      else
        std::snprintf(text, sizeof text, "all %zu outer steps: %.7g to %.7g s", steps.size(), v_lo,
                      v_hi);
      labels << "set label " << i + 1 << " " << gp_quote(text) << " at " << i + 1 << ", first "
             << v_hi << " center offset 0,1.2\n";
    } else {
      plot << Script::ref(file) << " using (" << i + 1 << "):1 with boxplot lc rgb '" << color(i)
           << "', ";
    }
    // Beside the box; without one, centred where it would be.
    plot << Script::ref(file) << " using (" << i + 1 << (constant ? " + 2 * ($2 - 0.36)" : " + $2")
         << "):1 with points pt 7 ps 0.5 lc rgb '"
         << (constant ? color(i) : "#60" + std::string(color(i) + 1)) << "'";
  }
  box << "set xtics (" << tics.str() << ")\n" << labels.str() << plot.str() << "\n";
  sc.figure(prefix + "allreduce_box", box.str());
}

void fig_allreduce(Script& sc, const std::vector<const RunData*>& runs, const std::string& prefix) {
  double lo = INFINITY, hi = -INFINITY;
  std::size_t most = 0;
  for (const RunData* r : runs) {
    for (const OuterStepStats& st : r->summary.steps) {
      lo = std::min(lo, st.allreduce_s);
      hi = std::max(hi, st.allreduce_s);
    }
    most = std::max(most, r->summary.steps.size());
  }
  if (most == 0) return;
  allreduce_histogram(sc, runs, prefix, lo, hi, most);
  allreduce_box(sc, runs, prefix);
}

// The two forms of compute utilization, as legends name them, and their legend colour (a grey
// that no series has).
const char* const kFormReport = "T_inner/(T_inner+T_allreduce)";
const char* const kFormWall = "inner compute/step wall time";
const char* const kFormColor = "#808080";

void fig_utilization(Script& sc, const std::vector<const RunData*>& runs, const std::string& name) {
  double span = 0;
  for (const RunData* r : runs) span = std::max(span, run_span_s(*r));
  const TimeUnit u = time_unit_for(span);
  std::ostringstream util, mfu;
  double max_x = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Summary& s = runs[i]->summary;
    if (s.steps.empty()) continue;
    const std::string file = name + "_" + std::to_string(i) + ".dat";
    auto out = open_data(sc.data(file));
    out << "# time_" << u.name << " outer_step_utilization_pct compute_utilization_pct mfu_pct\n";
    auto pct = [](double v) { return std::isfinite(v) ? v * 100.0 : NAN; };
    for (const OuterStepStats& st : s.steps) {
      max_x = std::max(max_x, (st.t_end_s - s.run_start_s) / u.divisor_s);
      out << (st.t_end_s - s.run_start_s) / u.divisor_s << " " << pct(st.utilization) << " "
          << pct(st.compute_utilization) << " " << pct(st.mfu) << "\n";
    }
    const std::string f = Script::ref(file);
    // One run: a legend entry per form. Several: one per run (its colour), and the two forms
    // once, in grey, after them (a legend of runs x forms would not fit under the plot).
    const bool one = runs.size() == 1;
    const char* style = s.steps.size() > 100 ? "lines lw 1.5" : "linespoints pt 7 ps 0.6";
    util << (util.tellp() > 0 ? ", " : "plot ") << f << " using 1:2 with " << style << " lc rgb '"
         << color(i) << "' title " << gp_quote(one ? kFormReport : runs[i]->label) << ", " << f
         << " using 1:3 with lines dt 2 lc rgb '" << color(i) << "' "
         << (one ? "title " + gp_quote(kFormWall) : "notitle");
    // No MFU without GPUs and a peak (a real run on CPUs): no series rather than an empty one.
    const bool has_mfu = std::any_of(s.steps.begin(), s.steps.end(), [](const OuterStepStats& st) {
      return std::isfinite(st.mfu);
    });
    if (has_mfu)
      mfu << (mfu.tellp() > 0 ? ", " : "plot ") << f << " using 1:4 with " << style << " lc rgb '"
          << color(i) << "' title " << gp_quote(runs[i]->label);
  }
  if (util.tellp() == 0) return;
  if (runs.size() > 1)
    util << ", NaN with linespoints pt 7 ps 0.6 lc rgb '" << kFormColor << "' title "
         << gp_quote(kFormReport) << ", NaN with lines dt 2 lc rgb '" << kFormColor << "' title "
         << gp_quote(kFormWall);
  const bool any_mfu = mfu.tellp() > 0;
  std::ostringstream body;
  body << "set grid\n"
       << kKeyOutside << "\n"
       << "set xlabel 'time since start [" << u.name << "]'\n"
       << xrange_to(max_x)
       << "set title 'Compute utilization per outer step'\nset ylabel 'utilization [%]'\n"
       << "set yrange [0:105]\n"
       << util.str() << "\n";
  if (any_mfu)
    body << "set title 'MFU per outer step'\nset ylabel 'model FLOPs utilization [%]'\n"
         << "set yrange [0:*]\n"
         << mfu.str() << "\n";
  sc.figure(name, body.str(), any_mfu ? 2 : 1);
}

// ---- one-run figures

struct Interval {
  double from_s, to_s;
};

void fig_timeline(Script& sc, const RunData& run, std::int64_t step) {
  const Summary& s = run.summary;
  double t0 = INFINITY, t1 = -INFINITY;
  std::map<std::int64_t, std::vector<Interval>> compute, allreduce_agg, allreduce_bucket, outer_opt,
      recovery;
  std::map<std::int64_t, double> recovery_open;
  for (const EventRecord& e : run.events) {
    if (const auto* r = e.as<InnerStepsRecord>(); r && r->outer_step == step) {
      compute[e.node].push_back({r->start_s, r->start_s + r->compute_s});
      t0 = std::min(t0, r->start_s);
    } else if (const auto* r = e.as<AllreduceRecord>(); r && r->outer_step == step) {
      (r->bucket < 0 ? allreduce_agg : allreduce_bucket)[e.node].push_back(
          {r->start_s, r->start_s + r->elapsed_s});
      t1 = std::max(t1, r->start_s + r->elapsed_s);
    } else if (const auto* r = e.as<OuterStepRecord>(); r && r->outer_step == step) {
      outer_opt[e.node].push_back({e.t_s - r->outer_opt_s, e.t_s});
      t1 = std::max(t1, e.t_s);
    } else if (e.as<RecoveryStartedRecord>()) {
      recovery_open[e.node] = e.t_s;
    } else if (const auto* r = e.as<RecoveryFinishedRecord>()) {
      recovery[e.node].push_back({e.t_s - r->elapsed_s, e.t_s});
      recovery_open.erase(e.node);
    }
  }
  if (!std::isfinite(t0) || !std::isfinite(t1) || t1 <= t0) return;
  for (const auto& [node, from] : recovery_open) recovery[node].push_back({from, t1});
  for (auto& [node, iv] : allreduce_agg) allreduce_bucket[node] = iv;  // aggregated wins

  // Rows: nodes alive at some point in the window, by id.
  std::vector<const NodeStats*> rows;
  for (const NodeStats& n : s.per_node)
    if (n.alive_s > 0 && n.start_s < t1 && n.end_s > t0) rows.push_back(&n);
  if (rows.empty()) return;
  const TimeUnit u = time_unit_for(t1 - t0);
  const std::string file = "timeline.dat";
  auto out = open_data(sc.data(file));
  const char* names[] = {"idle", "compute", "all-reduce", "outer optimizer", "recovery"};
  const char* colors[] = {"#d9d9d9", "#009e73", "#0072b2", "#cc79a7", "#e69f00"};
  int blocks = 0;
  std::vector<int> used;
  for (int kind = 0; kind < 5; ++kind) {
    std::ostringstream block;
    for (std::size_t y = 0; y < rows.size(); ++y) {
      const NodeStats& n = *rows[y];
      std::vector<Interval> ivs;
      if (kind == 0) ivs.push_back({n.start_s, n.end_s});
      const auto* m = kind == 1   ? &compute
                      : kind == 2 ? &allreduce_bucket
                      : kind == 3 ? &outer_opt
                                  : &recovery;
      if (kind > 0)
        if (auto it = m->find(n.node); it != m->end()) ivs = it->second;
      const double h = kind == 0 ? 0.4 : 0.3;
      for (const Interval& iv : ivs) {
        const double a = std::max(iv.from_s, t0), b = std::min(iv.to_s, t1);
        if (b <= a) continue;
        const double xa = (a - t0) / u.divisor_s, xb = (b - t0) / u.divisor_s;
        block << (xa + xb) / 2 << " " << y << " " << xa << " " << xb << " " << y - h << " " << y + h
              << "\n";
      }
    }
    if (block.tellp() == 0) continue;
    if (blocks++) out << "\n\n";
    out << "# " << names[kind] << "\n" << block.str();
    used.push_back(kind);
  }
  std::ostringstream body, tics;
  for (std::size_t y = 0; y < rows.size(); ++y)
    tics << (y ? ", " : "") << gp_quote(node_label(*rows[y])) << " " << y;
  body << "set title 'Per-node timeline of outer step " << step << "'\n"
       << "set xlabel 'time since the step''s first inner step [" << u.name << "]'\n"
       << "set ylabel 'node'\nset ytics (" << tics.str() << ")\n"
       << "set yrange [" << rows.size() - 0.4 << ":-0.6]\n"
       << "set xrange [0:" << (t1 - t0) / u.divisor_s << "]\nset grid xtics\n"
       << "set key outside right top vertical\nplot ";
  for (std::size_t i = 0; i < used.size(); ++i)
    body << (i ? ", " : "") << Script::ref(file) << " index " << i
         << " using 1:2:3:4:5:6 with boxxyerror fs solid 1.0 noborder lc rgb '" << colors[used[i]]
         << "' title '" << names[used[i]] << "'";
  sc.figure("timeline", body.str() + "\n");
}

void fig_bytes(Script& sc, const RunData& run) {
  const Summary& s = run.summary;
  std::ostringstream rows;
  for (const NodeStats& n : s.per_node) {
    if (n.bytes_sent <= 0 && n.bytes_received <= 0) continue;
    const double bw =
        n.allreduce_record_s > 0 ? n.bytes_sent * 8.0 / n.allreduce_record_s / 1e6 : NAN;
    rows << "\"" << node_label(n) << "\" " << n.bytes_sent / 1e9 << " " << n.bytes_received / 1e9
         << " " << bw << "\n";
  }
  if (rows.tellp() == 0) return;
  {
    auto out = open_data(sc.data("bytes.dat"));
    out << "# node GB_sent GB_received send_bandwidth_Mbps (bytes_sent / time in all-reduce)\n"
        << rows.str();
  }
  const std::string f = Script::ref("bytes.dat");
  std::ostringstream body;
  body << "set style data histograms\n"
       << "set style histogram clustered gap 1\nset style fill solid 0.85 border -1\n"
       << "set grid ytics\nset xtics rotate by -45 nomirror\nset yrange [0:*]\n"
       << "set title 'All-reduce bytes per node (whole run)'\nset ylabel 'data [GB]'\n"
       << kKeyOutside << "\n"
       << "plot " << f << " using 2:xtic(1) lc rgb '" << color(0) << "' title 'sent', " << f
       << " using 3 lc rgb '" << color(1) << "' title 'received'\n"
       << "set title 'All-reduce send bandwidth per node'\n"
       << "set ylabel 'bytes sent / time in all-reduce [Mb/s]'\nset key off\n"
       << "plot " << f << " using 4:xtic(1) lc rgb '" << color(2) << "'\n";
  sc.figure("bytes", body.str(), 2);
}

void fig_loss(Script& sc, const RunData& run) {
  const Summary& s = run.summary;
  const TimeUnit u = time_unit_for(run_span_s(run));
  std::ostringstream rows;
  bool any_val = false;
  double max_x[2] = {0, 0};  // tokens, time
  for (const OuterStepStats& st : s.steps) {
    if (!st.loss) continue;
    any_val = any_val || st.val_loss.has_value();
    max_x[0] = std::max(max_x[0], st.cumulative_tokens);
    max_x[1] = std::max(max_x[1], (st.t_end_s - s.run_start_s) / u.divisor_s);
    rows << st.cumulative_tokens << " " << (st.t_end_s - s.run_start_s) / u.divisor_s << " "
         << *st.loss << " " << std::exp(*st.loss) << " ";
    if (st.val_loss)
      rows << *st.val_loss << " " << std::exp(*st.val_loss) << "\n";
    else
      rows << "NaN NaN\n";
  }
  if (rows.tellp() == 0) return;
  {
    auto out = open_data(sc.data("loss.dat"));
    out << "# tokens time_" << u.name
        << " loss perplexity val_loss val_perplexity (means over the step's nodes)\n"
        << rows.str();
  }
  const std::string f = Script::ref("loss.dat");
  // Validation (held-out split, emulation's `evaluation` records) next to training, when present.
  auto series = [&](int col, int loss_col, const char* color_hex) {
    std::ostringstream p;
    p << "plot " << f << " using " << col << ":" << loss_col
      << " with linespoints pt 7 ps 0.5 lc rgb '" << color_hex << "' title 'training'";
    if (any_val)
      p << ", " << f << " using " << col << ":" << loss_col + 2
        << " with linespoints pt 5 ps 0.5 dt 2 lc rgb '" << color(2) << "' title 'validation'";
    return p.str();
  };
  auto body = [&](const std::string& x_label, int col, const std::string& fmt) {
    std::ostringstream b;
    b << "set grid\n"
      << (any_val ? std::string(kKeyOutside) + "\n" : "set key off\n") << fmt
      << xrange_to(max_x[col - 1]) << "set xlabel " << gp_quote(x_label) << "\n"
      << "set title 'Loss'\nset ylabel 'loss [nats/token]'\n"
      << series(col, 3, color(0)) << "\n"
      << "set title 'Perplexity'\nset ylabel 'perplexity = exp(loss)'\nset logscale y\n"
      << series(col, 4, color(1)) << "\n";
    return b.str();
  };
  sc.figure("loss_vs_tokens", body("tokens (all nodes)", 1, "set format x '%.0s%c'\n"), 2);
  sc.figure("loss_vs_time", body(std::string("time since start [") + u.name + "]", 2, ""), 2);
}

// ---- ensemble figures: every number from ensemble.json (analysis/ensemble.h)

// The run-level figures an ensemble's box plot shows, one panel each.
struct EnsembleFigure {
  const char* key;    // in ensemble.json's metrics and runs
  const char* title;  // the panel's title
  const char* axis;   // its y label
  double scale;       // ensemble.json's unit to the axis's: fractions to %
};
const EnsembleFigure kEnsembleFigures[] = {
    {"compute_utilization", "Compute utilization", "compute utilization [%]", 100},
    {"mfu", "MFU", "model FLOPs utilization [%]", 100},
    {"allreduce_s_p50", "All-reduce, run median",
     "all-reduce time per outer step, run median [s]", 1},
    {"allreduce_s_iqr", "All-reduce, within-run IQR",
     "all-reduce p75 - p25 over a run's outer steps [s]", 1},
};
const char* const kBoxConvention =
    "box: p25-p75, line: median, whiskers: p5-p95 over the seeds; dots: one seed each";

double json_number(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : NAN; }

// A number of ensemble.json as the file writes it (the shortest text that reads back as the same
// double), NaN where it has none: the data files hold exactly the file's numbers.
std::string as_written(const nlohmann::json& v) { return v.is_number() ? v.dump() : "NaN"; }

// One panel per figure that some ensemble has; one box per ensemble (x = 1, 2, ...), the seeds'
// values as dots beside it. Percentiles are drawn as candlesticks (box p25-p75, whiskers p5-p95)
// with the median as a bar across; the data files hold ensemble.json's numbers unscaled.
void fig_ensemble_box(Script& sc, const std::vector<const EnsembleData*>& ens,
                      const std::string& name) {
  std::ostringstream body, tics;
  for (std::size_t i = 0; i < ens.size(); ++i)
    tics << (i ? ", " : "") << gp_quote(ens[i]->label) << " " << i + 1;
  // The seeds' own values, one file per ensemble: seed, each figure, the dot's sideways offset.
  for (std::size_t i = 0; i < ens.size(); ++i) {
    auto out = open_data(sc.data(name + "_seeds_" + std::to_string(i) + ".dat"));
    out << "# seed";
    for (const EnsembleFigure& f : kEnsembleFigures) out << " " << f.key;
    out << " offset (runs that ran, from ensemble.json)\n";
    std::size_t k = 0;
    for (const auto& r : ens[i]->ensemble["runs"]) {
      if (r["status"] != "ok") continue;
      out << r["seed"].get<std::int64_t>();
      // An ensemble written before a figure existed has no value for it: NaN.
      for (const EnsembleFigure& f : kEnsembleFigures)
        out << " " << as_written(r.value(f.key, nlohmann::json()));
      const double spread = std::fmod(static_cast<double>(k++) * 0.6180339887, 1.0) - 0.5;
      out << " " << 0.36 + 0.2 * spread << "\n";
    }
  }
  int panels = 0;
  for (std::size_t col = 0; col < std::size(kEnsembleFigures); ++col) {
    const EnsembleFigure& f = kEnsembleFigures[col];
    const std::string file = name + "_" + f.key + ".dat";
    std::ostringstream plot, labels;
    {
      auto out = open_data(sc.data(file));
      out << "# x p5 p25 median p75 p95 seeds label: ensemble.json metrics." << f.key << "\n";
      for (std::size_t i = 0; i < ens.size(); ++i) {
        const auto& metrics = ens[i]->ensemble["metrics"];
        if (!metrics.contains(f.key)) {  // written before the figure existed: no box
          out << i + 1 << " NaN NaN NaN NaN NaN 0 \"" << ens[i]->label << "\"\n";
          continue;
        }
        const auto& m = metrics[f.key];
        const double p5 = json_number(m["p5"]), p95 = json_number(m["p95"]);
        out << i + 1 << " " << as_written(m["p5"]) << " " << as_written(m["p25"]) << " "
            << as_written(m["median"]) << " " << as_written(m["p75"]) << " " << as_written(m["p95"])
            << " " << m["count"].get<std::size_t>() << " \"" << ens[i]->label << "\"\n";
        if (!std::isfinite(p5)) continue;
        const std::string ref = Script::ref(file),
                          every = " every ::" + std::to_string(i) + "::" + std::to_string(i);
        char sc_[16];
        std::snprintf(sc_, sizeof sc_, "%g", f.scale);
        auto col_ = [&](int c) { return "($" + std::to_string(c) + "*" + sc_ + ")"; };
        plot << (plot.tellp() > 0 ? ", " : "plot ");
        // Every seed alike (within 0.1 %, a flat line): no box, the value written above.
        if (p95 - p5 <= 1e-3 * std::abs(p95)) {
          char text[96];
          std::snprintf(text, sizeof text, "all %zu seeds: %.4g", m["count"].get<std::size_t>(),
                        p95 * f.scale);
          labels << "set label " << i + 2 << " " << gp_quote(text) << " at " << i + 1 << ", first "
                 << p95 * f.scale << " center offset 0,1.2\n";
        } else {
          plot << ref << every << " using 1:" << col_(3) << ":" << col_(2) << ":" << col_(6) << ":"
               << col_(5) << " with candlesticks whiskerbars 0.5 fs solid 0.5 border -1 lc rgb '"
               << color(i) << "', " << ref << every << " using 1:" << col_(4) << ":" << col_(4)
               << ":" << col_(4) << ":" << col_(4)
               << " with candlesticks lw 2.5 lc rgb '#000000', ";
        }
        plot << Script::ref(name + "_seeds_" + std::to_string(i) + ".dat") << " using (" << i + 1
             << " + $" << std::size(kEnsembleFigures) + 2 << "):($" << col + 2 << "*" << sc_
             << ") with points pt 7 ps 0.6 lc rgb '" << color(i) << "'";
      }
    }
    if (plot.tellp() == 0) continue;
    body << "set title " << gp_quote(f.title) << "\n"
         << "set ylabel " << gp_quote(f.axis) << "\n"
         << "unset label\n"
         << labels.str();
    if (panels++ == 0)
      body << "set label 1 " << gp_quote(kBoxConvention) << " at screen 0.5, screen 0.03 center\n";
    body << plot.str() << "\n";
  }
  if (panels == 0) return;
  std::ostringstream head;
  head << "set style fill solid 0.5 border -1\nset boxwidth 0.5 absolute\nset grid ytics\n"
       << "set key off\nset bmargin 5\nset offsets 0, 0, graph 0.08, graph 0.08\n"
       << "set xrange [0.4:" << ens.size() + 0.6 << "]\nset xtics (" << tics.str() << ")\n";
  if (ens.size() > 2) head << "set xtics rotate by -30\n";
  sc.figure(name, head.str() + body.str(), panels);
}

// The all-reduce time per outer step across seeds: per ensemble a p10-p90 band over the seeds
// at each outer step, and the median as a line (error bars when there is one outer step).
void fig_ensemble_steps(Script& sc, const std::vector<const EnsembleData*>& ens,
                        const std::string& name) {
  std::ostringstream plot;
  double lo = INFINITY, hi = -INFINITY;
  for (std::size_t i = 0; i < ens.size(); ++i) {
    const auto& steps = ens[i]->ensemble["allreduce_s_by_step"];
    if (steps.empty()) continue;
    const std::string file = name + "_" + std::to_string(i) + ".dat";
    {
      auto out = open_data(sc.data(file));
      out << "# outer_step seeds p10 p50 p90: ensemble.json allreduce_s_by_step (s)\n";
      for (const auto& st : steps) {
        const auto step = st["outer_step"].get<std::int64_t>();
        lo = std::min(lo, static_cast<double>(step));
        hi = std::max(hi, static_cast<double>(step));
        out << step << " " << st["count"].get<std::size_t>() << " " << as_written(st["p10"]) << " "
            << as_written(st["p50"]) << " " << as_written(st["p90"]) << "\n";
      }
    }
    const std::string ref = Script::ref(file);
    const std::string who = ens.size() > 1 ? ens[i]->label + ": " : "";
    plot << (plot.tellp() > 0 ? ", " : "plot ");
    if (steps.size() == 1)
      plot << ref << " using 1:4:3:5 with yerrorbars pt 7 ps 1 lw 2 lc rgb '" << color(i)
           << "' title " << gp_quote(who + "median, bar: p10-p90 over the seeds");
    else
      plot << ref << " using 1:3:5 with filledcurves fs transparent solid 0.25 noborder lc rgb '"
           << color(i) << "' title " << gp_quote(who + "p10-p90 over the seeds") << ", " << ref
           << " using 1:4 with lines lw 2.5 lc rgb '" << color(i) << "' title "
           << gp_quote(who + "median");
  }
  if (plot.tellp() == 0) return;
  const double pad = std::max(0.5, (hi - lo) * 0.02);
  std::ostringstream body;
  body.precision(10);
  body << "set title 'All-reduce time per outer step (slowest node) across seeds'\n"
       << "set xlabel 'outer step'\nset ylabel 'all-reduce time per outer step [s]'\n"
       << "set grid\n"
       << kKeyOutside << "\nset yrange [0:*]\nset xrange [" << lo - pad << ":" << hi + pad << "]\n"
       << (hi - lo <= 20 ? "set xtics 1\n" : "") << plot.str() << "\n";
  sc.figure(name, body.str());
}

std::vector<std::string> finish(Script& sc, const std::string& script_name) {
  const fs::path script = sc.dir / script_name;
  {
    std::ofstream out(script);
    if (!out) throw ConfigError(script.string() + ": cannot write");
    out << "# Generated by `meridian plot`; run `gnuplot " << script_name << "` here to redraw.\n"
        << sc.text.str();
  }
  if (!sc.files.empty()) run_gnuplot(script.string(), sc.options);
  return sc.files;
}

Script start(const std::string& out_dir, const PlotOptions& options) {
  find_gnuplot(options.gnuplot);  // fail before writing anything
  Script sc;
  sc.dir = fs::absolute(out_dir);
  sc.options = options;
  std::error_code ec;
  fs::create_directories(sc.dir / "data", ec);
  if (ec) throw ConfigError(out_dir + ": cannot create the plots folder: " + ec.message());
  return sc;
}

// The name a folder goes by in legends: its last component, "." and ".." resolved.
std::string folder_name(const std::string& dir) {
  fs::path name = fs::absolute(dir).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();
  return name.filename().string();
}

}  // namespace

RunData load_run(const std::string& run_dir_or_file) {
  RunData r;
  fs::path p(run_dir_or_file);
  r.dir = fs::is_directory(p) ? p.string() : p.parent_path().string();
  if (r.dir.empty()) r.dir = ".";
  r.label = folder_name(r.dir);
  if (!fs::is_directory(p) && p.filename() != "events.jsonl") r.label = p.stem().string();
  r.events = read_events_file(run_dir_or_file);
  try {
    r.summary = summarize(r.events);
  } catch (const ConfigError& e) {
    throw ConfigError(events_path(run_dir_or_file) + ": " + e.what());
  }
  return r;
}

std::int64_t default_timeline_step(const RunData& run) {
  const auto& steps = run.summary.steps;
  if (steps.empty()) return -1;
  for (const EventRecord& e : run.events)
    if (e.as<RecoveryFinishedRecord>())
      for (const OuterStepStats& st : steps)
        if (st.t_end_s >= e.t_s) return st.outer_step;
  return steps[steps.size() / 2].outer_step;
}

std::vector<std::string> plot_run(const RunData& run, const std::string& out_dir,
                                  const RunPlotOptions& options) {
  Script sc = start(out_dir, options.plot);
  const std::vector<const RunData*> one = {&run};
  fig_nodes(sc, one, "nodes");
  fig_allreduce(sc, one, "");
  fig_utilization(sc, one, "utilization");
  const std::int64_t step = options.timeline_step.value_or(default_timeline_step(run));
  if (options.timeline_step) {
    bool found = false;
    for (const OuterStepStats& st : run.summary.steps) found |= st.outer_step == step;
    if (!found)
      throw ConfigError("--step " + std::to_string(step) + ": run " + run.label +
                        " has no outer step with that number");
  }
  if (step >= 0) fig_timeline(sc, run, step);
  fig_bytes(sc, run);
  fig_loss(sc, run);
  return finish(sc, "plots.gp");
}

std::vector<std::string> plot_comparison(const std::vector<RunData>& runs,
                                         const std::string& out_dir, const PlotOptions& options) {
  Script sc = start(out_dir, options);
  std::vector<const RunData*> all;
  for (const RunData& r : runs) all.push_back(&r);
  fig_nodes(sc, all, "compare_nodes");
  fig_allreduce(sc, all, "compare_");
  fig_utilization(sc, all, "compare_utilization");
  return finish(sc, "compare.gp");
}

FolderKind folder_kind(const std::string& path) {
  if (fs::is_directory(path) && fs::exists(fs::path(path) / "ensemble.json"))
    return FolderKind::kEnsemble;
  if (has_events(path)) return FolderKind::kRun;
  if (!fs::exists(path)) throw ConfigError(path + ": no such file or folder");
  throw ConfigError(path +
                    ": neither a run (no events.jsonl, no node-<ID>/events.jsonl) nor an ensemble "
                    "of `meridian sim --seeds` (no ensemble.json)");
}

EnsembleData load_ensemble(const std::string& dir) {
  EnsembleData e;
  e.dir = dir;
  e.label = folder_name(dir);
  const std::string file = (fs::path(dir) / "ensemble.json").string();
  std::ifstream in(file);
  if (!in) throw ConfigError(file + ": cannot open the ensemble (expected DIR/ensemble.json)");
  try {
    e.ensemble = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& x) {
    throw ConfigError(file + ": not JSON: " + x.what());
  }
  const auto& j = e.ensemble;
  if (!j.contains("runs") || !j.contains("metrics") || !j["metrics"].contains("mfu"))
    throw ConfigError(file + ": not an ensemble of `meridian sim --seeds` (no runs, no metrics)");
  if (!j["metrics"]["mfu"].contains("p25") || !j.contains("allreduce_s_by_step"))
    throw ConfigError(file +
                      ": written before ensembles had figures (no quartiles, no per-step band); "
                      "rerun its `meridian sim ... --seeds` (the command is in the file)");
  return e;
}

std::vector<std::string> plot_ensembles(const std::vector<EnsembleData>& ensembles,
                                        const std::string& out_dir, const PlotOptions& options) {
  Script sc = start(out_dir, options);
  std::vector<const EnsembleData*> all;
  for (const EnsembleData& e : ensembles) all.push_back(&e);
  const std::string prefix = ensembles.size() > 1 ? "compare_" : "";
  fig_ensemble_box(sc, all, prefix + "ensemble_box");
  fig_ensemble_steps(sc, all, prefix + "ensemble_allreduce_steps");
  return finish(sc, prefix + "ensemble.gp");
}

}  // namespace meridian::analysis
