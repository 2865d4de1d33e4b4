// gnuplot as a child process (analysis/process.h; its output in a log next to the script).
// Not a gnuplot binding: figures are text scripts, kept on disk so a user can tweak them.
#include "analysis/gnuplot.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "analysis/process.h"
#include "engine/core/error.h"

namespace meridian::analysis {

std::string find_gnuplot(const std::string& program) {
  namespace fs = std::filesystem;
  auto runnable = [](const fs::path& p) {
    return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p);
  };
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return program;
  } else if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':'))
      if (!dir.empty() && runnable(fs::path(dir) / program))
        return (fs::path(dir) / program).string();
  }
  throw ConfigError("gnuplot ('" + program +
                    "') was not found on PATH; plots need it. Fix: apt-get install -y gnuplot-nox");
}

void run_gnuplot(const std::string& script_path, const PlotOptions& options) {
  const std::string exe = find_gnuplot(options.gnuplot);
  const std::string log_path = script_path + ".log";
  namespace fs = std::filesystem;
  const fs::path script = fs::absolute(script_path);
  // `cd` first: the script's relative paths then resolve in its folder, whatever our cwd.
  if (run_process(exe, {"-e", "cd " + gp_quote(script.parent_path().string()), script.string()},
                  log_path) != 0)
    throw Error("gnuplot failed on " + script_path + " (log: " + log_path + "):\n" +
                file_tail(log_path, 1500));
}

std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out + "'";
}

void gp_figure(std::ostream& script, const std::string& dir, const std::string& name,
               const std::string& body, const PlotOptions& options, int height_px,
               std::vector<std::string>& files, int panels) {
  namespace fs = std::filesystem;
  const std::string font = " noenhanced font 'DejaVu Sans,13' linewidth 1.5";
  // pdfcairo sizes in inches and sets fonts in points: a pixel as a point (72 per inch) keeps
  // the PNG's proportions and text size relative to the figure.
  char pdf_size[64];
  std::snprintf(pdf_size, sizeof pdf_size, "%.3fin,%.3fin", options.width_px / 72.0,
                height_px / 72.0);
  const std::string size = std::to_string(options.width_px) + "," + std::to_string(height_px);
  std::vector<std::pair<std::string, std::string>> outputs = {
      {"png", "pngcairo size " + size + font + " background rgb 'white'"}};
  if (options.svg)
    outputs.push_back({"svg", "svg size " + size + font + " background rgb 'white'"});
  if (options.pdf) outputs.push_back({"pdf", std::string("pdfcairo size ") + pdf_size + font});
  std::string multiplot;
  if (panels > 1 || !options.title.empty()) {
    multiplot = "set multiplot layout 1," + std::to_string(std::max(panels, 1));
    if (!options.title.empty()) multiplot += " title " + gp_quote(options.title) + " font ',15'";
    multiplot += "\n";
  }
  script << "\n# ---- " << name << "\n";
  for (const auto& [ext, terminal] : outputs) {
    script << "reset\nset terminal " << terminal << "\n"
           << "set output " << gp_quote(name + "." + ext) << "\n"
           << multiplot << body << "\nunset multiplot\nset output\n";
    files.push_back((fs::path(dir) / (name + "." + ext)).string());
  }
}

const char* series_color(std::size_t i) {
  static const char* const kColors[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                        "#e69f00", "#56b4e9", "#000000", "#f0e442"};
  return kColors[i % 8];
}

TimeUnit time_unit_for(double span_s) {
  if (span_s >= 3 * 3600.0) return {3600.0, "h"};
  if (span_s >= 3 * 60.0) return {60.0, "min"};
  return {1.0, "s"};
}

}  // namespace meridian::analysis
