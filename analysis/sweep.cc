// The sweep: grid expansion, one child run per point, the table and the per-axis plots.
// A failing point is recorded (status and the tail of its log) and the sweep goes on.
#include "analysis/sweep.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>

#include "analysis/events.h"
#include "analysis/process.h"
#include "engine/core/error.h"

namespace meridian::analysis {
namespace fs = std::filesystem;

SweepAxis parse_sweep_axis(const std::string& set_arg) {
  const auto eq = set_arg.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError("--set '" + set_arg +
                      "': expected key=value[,value...], e.g. diloco.H=50,100");
  SweepAxis axis;
  axis.key = set_arg.substr(0, eq);
  std::stringstream values(set_arg.substr(eq + 1));
  std::string v;
  while (std::getline(values, v, ',')) {
    if (v.empty()) throw ConfigError("--set '" + set_arg + "': an empty value in the list");
    axis.values.push_back(v);
  }
  if (axis.values.empty() || set_arg.back() == ',')
    throw ConfigError("--set '" + set_arg + "': an empty value in the list");
  return axis;
}

std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes) {
  for (std::size_t i = 0; i < axes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (axes[i].key == axes[j].key)
        throw ConfigError("--set " + axes[i].key +
                          " is given twice; list its values once: " + axes[i].key + "=v1,v2,...");
  std::vector<SweepPoint> points(1);
  for (const SweepAxis& axis : axes) {
    std::vector<SweepPoint> next;
    for (const SweepPoint& p : points)
      for (const std::string& v : axis.values) {
        SweepPoint q = p;
        q.settings.push_back({axis.key, v});
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  for (SweepPoint& p : points) {
    for (const auto& [k, v] : p.settings) p.name += (p.name.empty() ? "" : "_") + k + "=" + v;
    if (p.name.empty()) p.name = "default";
    for (char& c : p.name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '=' && c != '_' &&
          c != '-')
        c = '-';
  }
  return points;
}

SweepRunner self_runner() {
  const std::string exe = self_executable();
  return [exe](const std::vector<std::string>& args, const std::string& log_path) {
    return run_process(exe, args, log_path);
  };
}

std::string sweep_progress_line(std::size_t done, std::size_t total, double elapsed_s) {
  std::string line =
      "sweep: " + std::to_string(done) + "/" + std::to_string(total) + " points done, ";
  if (done >= total) return line + "finished";
  if (done == 0) return line + "ETA ?";
  const long eta =
      std::lround(elapsed_s / static_cast<double>(done) * static_cast<double>(total - done));
  if (eta >= 3600)
    return line + "ETA " + std::to_string(eta / 3600) + " h " + std::to_string(eta % 3600 / 60) +
           " min";
  if (eta >= 60)
    return line + "ETA " + std::to_string(eta / 60) + " min " + std::to_string(eta % 60) + " s";
  return line + "ETA " + std::to_string(eta) + " s";
}

int SweepResult::failed() const {
  int n = 0;
  for (const SweepPointResult& p : points) n += p.summary ? 0 : 1;
  return n;
}

namespace {

// How the Markdown table shows a column (the CSV keeps the raw number).
enum class Unit { kFraction, kSeconds, kBytes, kFactor, kCount, kInteger, kMean, kPlain };

struct Column {
  const char* name;
  Unit unit;
  std::function<double(const Summary&)> value;
};

const std::vector<Column>& metric_columns() {
  static const std::vector<Column> columns = {
      {"compute_utilization", Unit::kFraction,
       [](const Summary& s) { return s.compute_utilization; }},
      {"outer_step_utilization", Unit::kFraction,
       [](const Summary& s) { return s.outer_step_utilization; }},
      {"mfu", Unit::kFraction, [](const Summary& s) { return s.mfu; }},
      {"allreduce_p50_s", Unit::kSeconds, [](const Summary& s) { return s.allreduce_s.p50; }},
      {"allreduce_p90_s", Unit::kSeconds, [](const Summary& s) { return s.allreduce_s.p90; }},
      {"inner_step_s", Unit::kSeconds, [](const Summary& s) { return s.inner_step_s; }},
      {"wire_bytes_per_node_per_outer_step", Unit::kBytes,
       [](const Summary& s) { return s.wire_bytes_per_node_per_outer_step; }},
      {"bandwidth_reduction_vs_ddp", Unit::kFactor,
       [](const Summary& s) { return s.bandwidth_reduction_vs_ddp.value_or(NAN); }},
      {"tokens", Unit::kCount, [](const Summary& s) { return s.tokens; }},
      {"simulated_s", Unit::kSeconds, [](const Summary& s) { return s.simulated_s; }},
      {"outer_steps", Unit::kInteger,
       [](const Summary& s) { return static_cast<double>(s.outer_steps); }},
      {"nodes_mean", Unit::kMean, [](const Summary& s) { return s.nodes.mean; }},
      {"loss", Unit::kPlain, [](const Summary& s) { return s.loss.value_or(NAN); }},
      {"val_loss", Unit::kPlain, [](const Summary& s) { return s.val_loss.value_or(NAN); }},
      {"time_to_target_s", Unit::kSeconds,
       [](const Summary& s) { return s.target_reached ? s.target_reached->t_s : NAN; }},
      {"tokens_to_target", Unit::kCount,
       [](const Summary& s) { return s.target_reached ? s.target_reached->tokens : NAN; }},
  };
  return columns;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string printf_string(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// v / 1000^k with three significant digits and the k-th prefix.
std::string scaled(double v, const char* const prefixes[5], const char* unit) {
  int k = 0;
  while (k < 4 && std::abs(v) >= 999.5) v /= 1000, ++k;
  return printf_string(std::abs(v) >= 99.95   ? "%.0f"
                       : std::abs(v) >= 9.995 ? "%.1f"
                                              : "%.2f",
                       v) +
         " " + prefixes[k] + unit;
}

// The Markdown cell: the number with its unit, readable at a glance.
std::string with_unit(double v, Unit unit) {
  if (!std::isfinite(v)) return "";
  static const char* const kSi[5] = {"", "k", "M", "G", "T"};
  switch (unit) {
    case Unit::kFraction:
      return printf_string("%.1f %%", 100 * v);
    case Unit::kSeconds:  // three digits, trailing zeros kept: 23.0 s, 8.58 min, 18.2 h
      if (std::abs(v) >= 3 * 3600) return printf_string("%#.3g h", v / 3600);
      if (std::abs(v) >= 180) return printf_string("%#.3g min", v / 60);
      return printf_string(std::abs(v) >= 99.95 ? "%.0f s" : "%#.3g s", v);
    case Unit::kBytes:
      return scaled(v, kSi, "B");
    case Unit::kFactor:
      return printf_string(std::abs(v) >= 10 ? "%.0fx" : "%.1fx", v);
    case Unit::kCount: {
      std::string c = scaled(v, kSi, "");
      while (!c.empty() && c.back() == ' ') c.pop_back();
      return c;
    }
    case Unit::kInteger:
      return printf_string("%.0f", v);
    case Unit::kMean:
      return printf_string("%.2f", v);
    case Unit::kPlain:
      return printf_string("%.4g", v);
  }
  return number(v);
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string md_field(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string status_of(const SweepPointResult& p) {
  if (p.summary) return "ok";
  return p.exit_code != 0 ? "failed (exit " + std::to_string(p.exit_code) + ")" : "failed";
}

bool all_numeric(const std::vector<std::string>& values) {
  for (const std::string& v : values) {
    char* end = nullptr;
    std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') return false;
  }
  return true;
}

}  // namespace

void write_sweep_tables(const SweepResult& result, const std::string& out_dir,
                        std::vector<std::string>& files) {
  const fs::path csv_path = fs::path(out_dir) / "sweep.csv",
                 md_path = fs::path(out_dir) / "sweep.md";
  std::ofstream csv(csv_path), md(md_path);
  if (!csv || !md) throw ConfigError(out_dir + ": cannot write sweep.csv / sweep.md");
  if (!result.command.empty()) md << "Command: `" << result.command << "`\n\n";
  std::vector<std::string> header = {"point"};
  for (const SweepAxis& a : result.axes) header.push_back(a.key);
  header.push_back("status");
  for (const Column& c : metric_columns()) header.push_back(c.name);
  for (std::size_t i = 0; i < header.size(); ++i) {
    csv << (i ? "," : "") << csv_field(header[i]);
    md << "| " << md_field(header[i]) << " ";
  }
  csv << "\n";
  md << "|\n";
  for (std::size_t i = 0; i < header.size(); ++i)
    md << (i <= result.axes.size() + 1 ? "|---" : "|--:");
  md << "|\n";
  for (const SweepPointResult& p : result.points) {
    std::vector<std::string> row = {p.point.name};
    for (const auto& kv : p.point.settings) row.push_back(kv.second);
    row.push_back(status_of(p));
    std::vector<std::string> md_row = row;
    for (const Column& c : metric_columns()) {
      row.push_back(p.summary ? number(c.value(*p.summary)) : "");
      md_row.push_back(p.summary ? with_unit(c.value(*p.summary), c.unit) : "");
    }
    for (std::size_t i = 0; i < row.size(); ++i) {
      csv << (i ? "," : "") << csv_field(row[i]);
      md << "| " << md_field(md_row[i]) << " ";
    }
    csv << "\n";
    md << "|\n";
  }
  files.push_back(csv_path.string());
  files.push_back(md_path.string());
}

namespace {

// Emulation sweeps: every point's validation loss against the modelled clock and against
// tokens, side by side (one line per point), with the run file's target loss when it has one.
void plot_val_curves(const SweepResult& result, const fs::path& dir, std::ostream& script,
                     const PlotOptions& options, std::vector<std::string>& drawn) {
  std::vector<const SweepPointResult*> with_curve;
  std::optional<double> target;
  for (const SweepPointResult& p : result.points)
    if (p.summary && !p.summary->val_curve.empty()) {
      with_curve.push_back(&p);
      if (p.summary->target_loss) target = p.summary->target_loss;
    }
  if (with_curve.empty()) return;
  const std::string data_ref = "data/val_loss_curves.dat";
  std::ofstream out(dir / "plots" / data_ref);
  out << "# t_s tokens val_loss (one block per point, modelled clock from the run's start)\n";
  std::ostringstream time, tokens;
  for (std::size_t i = 0; i < with_curve.size(); ++i) {
    const SweepPointResult& p = *with_curve[i];
    out << (i ? "\n\n" : "") << "# " << p.point.name << "\n";
    for (const Summary::ValPoint& v : p.summary->val_curve)
      out << v.t_s << " " << v.tokens << " " << v.val_loss << "\n";
    const std::string f = gp_quote(data_ref) + " index " + std::to_string(i);
    const std::string style = " with linespoints pt 7 ps 0.5 lw 2 lc rgb '" +
                              std::string(series_color(i)) + "' title " + gp_quote(p.point.name);
    time << (i ? ", " : "plot ") << f << " using 1:3" << style;
    tokens << (i ? ", " : "plot ") << f << " using 2:3" << style;
  }
  if (target) {
    char t[96];  // two %g of up to 13 characters each
    std::snprintf(t, sizeof t, ", %g with lines dt 2 lc rgb '#808080' title 'target %g'", *target,
                  *target);
    time << t;
    tokens << t;
  }
  std::ostringstream body;
  body << "set grid\n" << kKeyOutside << "\nset ylabel 'validation loss [nats/token]'\n"
       << "set title 'Validation loss vs modelled time'\nset xlabel 'modelled time [s]'\n"
       << time.str() << "\n"
       << "set title 'Validation loss vs tokens'\nset xlabel 'tokens (all nodes)'\n"
       << "set format x '%.0s%c'\n"
       << tokens.str() << "\n";
  gp_figure(script, (dir / "plots").string(), "val_loss_curves", body.str(), options,
            options.height_px, drawn, 2);
}

// One series per combination of the other axes' values (in grid order, so that the legend
// lists them as they were given), each point at axis `a`'s value (its index when not numeric).
using SweepSeries =
    std::vector<std::pair<std::string, std::vector<std::pair<double, const Summary*>>>>;
SweepSeries axis_series(const SweepResult& result, std::size_t a, bool numeric) {
  const SweepAxis& axis = result.axes[a];
  SweepSeries lines;
  for (const SweepPointResult& p : result.points) {
    if (!p.summary) continue;
    std::string line;
    for (std::size_t b = 0; b < p.point.settings.size(); ++b)
      if (b != a)
        line += (line.empty() ? "" : " ") + p.point.settings[b].first + "=" +
                p.point.settings[b].second;
    const std::string& v = p.point.settings[a].second;
    const double x =
        numeric ? std::strtod(v.c_str(), nullptr)
                : static_cast<double>(std::find(axis.values.begin(), axis.values.end(), v) -
                                      axis.values.begin());
    auto it = std::find_if(lines.begin(), lines.end(), [&](auto& l) { return l.first == line; });
    if (it == lines.end()) it = lines.insert(lines.end(), {line, {}});
    it->second.push_back({x, &*p.summary});
  }
  return lines;
}

// The x axis of an axis' figures: its values as tics (a log scale for a numeric axis spanning a
// decade or more), or its categories.
std::string axis_xtics(const SweepAxis& axis, bool numeric) {
  std::ostringstream body;
  if (numeric) {
    body << "set xtics (";
    for (std::size_t i = 0; i < axis.values.size(); ++i)
      body << (i ? ", " : "") << gp_quote(axis.values[i]) << " " << axis.values[i];
    body << ")\nset offsets graph 0.05, graph 0.05, 0, 0\n";
    double lo = INFINITY, hi = 0;
    for (const std::string& v : axis.values) {
      lo = std::min(lo, std::strtod(v.c_str(), nullptr));
      hi = std::max(hi, std::strtod(v.c_str(), nullptr));
    }
    if (lo > 0 && hi >= 10 * lo) body << "set logscale x\n";  // e.g. H = 50, 100, 500
  } else {
    body << "set xtics (";
    for (std::size_t i = 0; i < axis.values.size(); ++i)
      body << (i ? ", " : "") << gp_quote(axis.values[i]) << " " << i;
    body << ")\nset xrange [-0.5:" << axis.values.size() - 0.5 << "]\n";
  }
  return body.str();
}

}  // namespace

void plot_sweep(const SweepResult& result, const std::string& out_dir, const PlotOptions& options,
                std::vector<std::string>& files) {
  const fs::path dir = fs::absolute(out_dir);
  fs::create_directories(dir / "plots" / "data");
  std::ostringstream script;
  std::vector<std::string> drawn;
  for (std::size_t a = 0; a < result.axes.size(); ++a) {
    const SweepAxis& axis = result.axes[a];
    if (axis.values.size() < 2) continue;
    const bool numeric = all_numeric(axis.values);
    SweepSeries lines = axis_series(result, a, numeric);
    if (lines.empty()) continue;
    std::string safe = axis.key;
    for (char& c : safe)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    const std::string name = "sweep_" + safe;
    const std::string data_ref = "data/" + name + ".dat";  // as the script (run in plots/) names it
    std::ofstream out(dir / "plots" / data_ref);
    out << "# " << axis.key << " compute_utilization_pct outer_step_utilization_pct mfu_pct\n";
    std::ostringstream util, mfu;
    int index = 0;
    for (auto& [line, pts] : lines) {
      std::sort(pts.begin(), pts.end(), [](auto& l, auto& r) { return l.first < r.first; });
      if (index) out << "\n\n";
      out << "# " << (line.empty() ? "all" : line) << "\n";
      for (const auto& [x, s] : pts)
        out << x << " " << s->compute_utilization * 100 << " " << s->outer_step_utilization * 100
            << " " << s->mfu * 100 << "\n";
      const std::string f = gp_quote(data_ref) + " index " + std::to_string(index);
      // Categories: each series' dots beside the others' in its category, no joining line.
      std::string x = "1";
      if (!numeric) {
        std::ostringstream shifted;
        shifted << "($1 + " << (index - (static_cast<double>(lines.size()) - 1) / 2) * 0.1 << ")";
        x = shifted.str();
      }
      const std::string solid = numeric ? "linespoints pt 7 lw 2" : "points pt 7 ps 1.5";
      const std::string dashed = numeric ? "linespoints pt 5 dt 2" : "points pt 4 ps 1.5";
      // A legend entry per series (its colour), the two forms once, in grey, after them.
      util << (index ? ", " : "plot ") << f << " using " << x << ":2 with " << solid << " lc rgb '"
           << series_color(index) << "'"
           << " title " << gp_quote(line.empty() ? "all" : line) << ", " << f << " using " << x
           << ":3 with " << dashed << " lc rgb '" << series_color(index) << "' notitle";
      if (index + 1 == static_cast<int>(lines.size()))
        util << ", NaN with " << solid << " lc rgb '#808080' title 'compute/alive time', NaN with "
             << dashed << " lc rgb '#808080' title 'T_inner/(T_inner+T_allreduce)'";
      mfu << (index ? ", " : "plot ") << f << " using " << x << ":4 with " << solid << " lc rgb '"
          << series_color(index) << "'"
          << " title " << gp_quote(line.empty() ? "MFU" : line);
      ++index;
    }
    std::ostringstream body;
    body << "set grid\n"
         << kKeyOutside << "\n"
         << "set xlabel " << gp_quote(axis.key) << "\n";
    body << axis_xtics(axis, numeric);
    body << "set title " << gp_quote("Compute utilization vs " + axis.key)
         << "\nset ylabel 'utilization [%]'\nset yrange [0:105]\n"
         << util.str() << "\n"
         << "set title " << gp_quote("MFU vs " + axis.key)
         << "\nset ylabel 'model FLOPs utilization [%]'\nset yrange [0:*]\n"
         << mfu.str() << "\n";
    gp_figure(script, (dir / "plots").string(), name, body.str(), options, options.height_px, drawn,
              2);
  }
  plot_val_curves(result, dir, script, options, drawn);
  if (drawn.empty()) return;
  const fs::path script_path = dir / "plots" / "sweep.gp";
  {
    std::ofstream s(script_path);
    s << "# Generated by `meridian sweep`; run `gnuplot sweep.gp` here to redraw.\n"
      << script.str();
  }
  run_gnuplot(script_path.string(), options);
  files.insert(files.end(), drawn.begin(), drawn.end());
}

void write_exit_status(const std::string& path, int status) {
  std::ofstream(path) << status << "\n";
}

std::optional<int> read_exit_status(const std::string& path) {
  std::ifstream in(path);
  int status = 0;
  if (!(in >> status)) return std::nullopt;
  return status;
}

SweepResult run_sweep(const SweepOptions& options, const std::vector<SweepAxis>& axes,
                      const SweepRunner& runner, std::ostream& progress) {
  const bool parts = options.part_count > 0;
  if (options.plots && !parts) find_gnuplot(options.plot.gnuplot);  // before hours of simulation
  SweepResult result;
  result.axes = axes;
  result.command = options.command;
  const std::vector<SweepPoint> points = expand_grid(axes);
  // Every point's settings before the first runs: a bad key fails now, not after hours.
  if (options.check_point)
    for (const SweepPoint& p : points) {
      try {
        options.check_point(p);
      } catch (const ConfigError& e) {
        std::string sets;
        for (const auto& [k, v] : p.settings) sets += " --set " + k + "=" + v;
        throw ConfigError("--set: point '" + p.name + "' (" + sets.substr(1) +
                          ") is not a valid scenario: " + e.what());
      }
    }
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) throw ConfigError(options.out_dir + ": cannot create the sweep folder: " + ec.message());
  const auto sweep_t0 = std::chrono::steady_clock::now();
  std::size_t todo = points.size();  // this process's points
  if (parts)
    todo = points.size() / options.part_count +
           (options.part_index < points.size() % options.part_count ? 1 : 0);
  auto report_progress = [&](std::size_t done) {
    if (options.on_progress)
      options.on_progress(
          done, todo,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - sweep_t0).count());
  };
  std::string missing;  // --gather: points that have no exit status
  if (!options.gather) report_progress(0);
  for (std::size_t i = 0; i < points.size(); ++i) {
    SweepPointResult r;
    r.point = points[i];
    r.dir = (fs::path(options.out_dir) / r.point.name).string();
    const std::string log = r.dir + ".log", exit_file = r.dir + ".exit";
    if (options.gather) {
      const std::optional<int> status = read_exit_status(exit_file);
      if (!status) {
        missing += (missing.empty() ? "" : ", ") + r.point.name;
        continue;
      }
      r.exit_code = *status;
    } else if (parts && i % options.part_count != options.part_index) {
      continue;
    }
    double took_s = 0;
    const bool ran = !options.gather;
    if (ran) {
      // The sweep claimed its folder (the command's --force): the point folders are its own.
      std::vector<std::string> args = {"sim", options.scenario, "--out", r.dir, "--force"};
      if (options.seed) args.insert(args.end(), {"--seed", std::to_string(*options.seed)});
      for (const auto& [k, v] : r.point.settings) args.insert(args.end(), {"--set", k + "=" + v});
      progress << "[" << i + 1 << "/" << points.size() << "] " << r.point.name << " ... "
               << std::flush;
      const auto t0 = std::chrono::steady_clock::now();
      r.exit_code = runner(args, log);
      took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (parts) write_exit_status(exit_file, r.exit_code);
    }
    if (r.exit_code != 0) {
      r.error =
          "exit " + std::to_string(r.exit_code) + "; log " + log + ":\n" + file_tail(log, 400);
    } else {
      try {
        r.summary = summarize(read_events_file(r.dir));
      } catch (const ConfigError& e) {
        r.error = e.what();
      }
    }
    if (ran) {
      char took[32];
      std::snprintf(took, sizeof took, "%.1f s", took_s);
      progress << (r.summary ? "ok" : "FAILED") << " (" << took << ")\n";
      if (!r.error.empty()) progress << "  " << r.error << "\n";
    }
    result.points.push_back(std::move(r));
    if (ran) report_progress(result.points.size());
  }
  if (!missing.empty())
    throw ConfigError("--gather: " + options.out_dir + " has no finished run of point(s) " +
                      missing +
                      " (no <point>.exit): a part has not finished, did not start, or "
                      "ran another grid; run it (--part I/N) and gather again");
  if (parts) return result;  // the table and figures are the gather's
  write_sweep_tables(result, options.out_dir, result.files);
  if (options.plots) plot_sweep(result, options.out_dir, options.plot, result.files);
  return result;
}

}  // namespace meridian::analysis
