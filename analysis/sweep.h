// `meridian sweep`: a grid of `--set key=v1,v2,...` values, one `meridian sim` child per point,
// then one table (CSV and Markdown) and plots of utilization and MFU against each swept key.
// The runner is injected so the grid and the table are testable without a simulator.
// Not the simulator: points run `meridian sim SCENARIO --out DIR/<point> --set k=v ...`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "analysis/gnuplot.h"
#include "analysis/summary.h"

namespace meridian::analysis {

struct SweepAxis {
  std::string key;                  // e.g. "diloco.H"
  std::vector<std::string> values;  // in the order given
};

// One point of the grid: one value per axis, in axis order.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> settings;
  std::string name;  // folder name: "diloco.H=50_diloco.codec=int8" (unsafe characters -> '-')
};

// "key=v1,v2,..." -> an axis. An empty key or value, or a missing '=', is a ConfigError.
SweepAxis parse_sweep_axis(const std::string& set_arg);

// The cartesian product, first axis slowest. A key given twice is a ConfigError.
std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes);

// Runs one point: args are argv[1..] of `meridian` (starting with "sim"); its output goes
// to log_path. Returns the exit status.
using SweepRunner =
    std::function<int(const std::vector<std::string>& args, const std::string& log_path)>;

// The real runner: this very binary (/proc/self/exe) as a child process.
SweepRunner self_runner();

struct SweepOptions {
  std::string scenario;  // SCENARIO.yaml
  std::string out_dir = "runs/sweep";
  std::optional<std::int64_t> seed;
  PlotOptions plot;
  bool plots = true;
  std::string command;  // the command line, written above the Markdown table
  // Called for every point before any runs (e.g. loading the scenario with the point's
  // overrides); throws ConfigError for a point that cannot run. Default: no check.
  std::function<void(const SweepPoint&)> check_point;
  // Called before the first point (done 0) and after each: points done, of total, wall
  // seconds since the first started. Default: none.
  std::function<void(std::size_t done, std::size_t total, double elapsed_s)> on_progress;
  // One share of the grid (a task of a job array): only points number part_index,
  // part_index + part_count, ... run, each leaving its exit status in DIR/<point>.exit; no
  // table or figures. `gather`: nothing runs; the table and figures of the points that ran in
  // parts (ConfigError naming those without an exit status).
  std::size_t part_index = 0, part_count = 0;  // part_count 0: the whole grid
  bool gather = false;
};

// A run of a part (`--part`) leaves its exit status beside its folder (DIR/<run>.exit) for the
// gather: written by write_exit_status, read back (nullopt when absent or not an integer).
void write_exit_status(const std::string& path, int status);
std::optional<int> read_exit_status(const std::string& path);

// The progress line: "sweep: 2/6 points done, ETA 1 min 10 s" (the ETA from the mean time per
// point so far; "ETA ?" before the first is done).
std::string sweep_progress_line(std::size_t done, std::size_t total, double elapsed_s);

struct SweepPointResult {
  SweepPoint point;
  std::string dir;
  int exit_code = 0;
  std::string error;  // why it has no summary ("" when it has one)
  std::optional<Summary> summary;
};

struct SweepResult {
  std::vector<SweepAxis> axes;
  std::vector<SweepPointResult> points;
  std::vector<std::string> files;  // the table and the plots
  std::string command;
  int failed() const;
};

// Checks every point (options.check_point) first: a point that cannot run is a ConfigError
// naming `--set` and the point, before any point runs. Then runs every point (a line per point
// to `progress`), summarizes each from DIR/<point>/events.jsonl, writes DIR/sweep.csv and
// DIR/sweep.md, and the plots when options.plots.
SweepResult run_sweep(const SweepOptions& options, const std::vector<SweepAxis>& axes,
                      const SweepRunner& runner, std::ostream& progress);

// The table's columns: point, each axis key, status, then the metrics: raw numbers in the
// CSV; in the Markdown, with their units (utilizations as %, times in s/min/h, bytes in
// kB/MB/GB, counts with k/M/G).
void write_sweep_tables(const SweepResult& result, const std::string& out_dir,
                        std::vector<std::string>& files);

// One figure per axis with two or more values: utilization (both forms) and MFU against the
// axis value, one series per combination of the other axes: lines over a numeric axis, dots
// side by side over a categorical one (fp32, int8: no line joins categories). Emulation points
// (summaries with a `val_curve`) also give `val_loss_curves`: each point's validation loss
// against the modelled clock and against tokens, side by side, with the target loss.
void plot_sweep(const SweepResult& result, const std::string& out_dir, const PlotOptions& options,
                std::vector<std::string>& files);

}  // namespace meridian::analysis
