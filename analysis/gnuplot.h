// Running gnuplot on a generated script, and the small helpers every figure shares (quoting,
// one figure drawn to PNG, SVG and PDF, time units). Not the figures themselves: plots.h.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace meridian::analysis {

struct PlotOptions {
  std::string gnuplot = "gnuplot";  // program name (looked up on PATH) or path
  int width_px = 1200;
  int height_px = 700;
  bool svg = true;    // also write an SVG next to each PNG
  bool pdf = false;   // also write a PDF (pdfcairo, vector, same proportions as the PNG)
  std::string title;  // "": none; else a title above every figure (e.g. the paper's run name)
};

// Where every legend goes: under the plot, outside the data, in as many columns as fit.
inline constexpr const char* kKeyOutside = "set key below center horizontal height 1 samplen 2";

// The gnuplot executable, or a ConfigError that says how to install it.
std::string find_gnuplot(const std::string& program);

// Runs `gnuplot script` in the script's folder (paths in the scripts are relative to it, so a
// plots folder can be moved, committed or redrawn by hand with `gnuplot NAME.gp` there), with
// stderr captured to script + ".log"; a non-zero exit is an Error quoting the log's last lines.
void run_gnuplot(const std::string& script_path, const PlotOptions& options);

// A gnuplot single-quoted string literal ('' stands for ').
std::string gp_quote(const std::string& s);

// Writes `body` into the script once per format: NAME.png (pngcairo), NAME.svg and NAME.pdf
// when options ask for them, in `dir`, the script's own folder (the script names them relative
// to it). `panels` > 1: the body draws that many plots side by side (gp_figure starts the
// multiplot; the body must not); options.title goes above them all. Appends the written file
// paths (in `dir`) to `files`.
void gp_figure(std::ostream& script, const std::string& dir, const std::string& name,
               const std::string& body, const PlotOptions& options, int height_px,
               std::vector<std::string>& files, int panels = 1);

// The i-th colour of the series palette (8 colours that stay distinct in print and for the
// common colour-blindnesses), as "#rrggbb".
const char* series_color(std::size_t i);

// A readable time unit for a span: seconds, minutes or hours.
struct TimeUnit {
  double divisor_s;
  const char* name;  // "s", "min", "h"
};
TimeUnit time_unit_for(double span_s);

}  // namespace meridian::analysis
