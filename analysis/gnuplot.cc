// gnuplot as a child process (posix_spawn, stderr to a log file next to the script).
// Not a gnuplot binding: figures are text scripts, kept on disk so a user can tweak them.
#include "analysis/gnuplot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"

extern char** environ;

namespace meridian::analysis {

std::string find_gnuplot(const std::string& program) {
  namespace fs = std::filesystem;
  auto runnable = [](const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); };
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return program;
  } else if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':'))
      if (!dir.empty() && runnable(fs::path(dir) / program)) return (fs::path(dir) / program).string();
  }
  throw ConfigError("gnuplot ('" + program +
                    "') was not found on PATH; plots need it. Fix: apt-get install -y gnuplot-nox");
}

void run_gnuplot(const std::string& script_path, const PlotOptions& options) {
  const std::string exe = find_gnuplot(options.gnuplot);
  const std::string log_path = script_path + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>(script_path.c_str()),
                             nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start " + exe + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    std::string tail = text.str();
    if (tail.size() > 1500) tail = "..." + tail.substr(tail.size() - 1500);
    throw Error("gnuplot failed on " + script_path + " (log: " + log_path + "):\n" + tail);
  }
}

std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out + "'";
}

void gp_figure(std::ostream& script, const std::string& dir, const std::string& name,
               const std::string& body, const PlotOptions& options, int height_px,
               std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  const std::string png = (fs::path(dir) / (name + ".png")).string();
  script << "\n# ---- " << name << "\nreset\n"
         << "set terminal pngcairo size " << options.width_px << "," << height_px
         << " noenhanced font 'DejaVu Sans,13' linewidth 1.5 background rgb 'white'\n"
         << "set output " << gp_quote(png) << "\n"
         << body << "\nunset multiplot\nset output\n";
  files.push_back(png);
  if (options.svg) {
    const std::string svg = (fs::path(dir) / (name + ".svg")).string();
    script << "reset\nset terminal svg size " << options.width_px << "," << height_px
           << " noenhanced font 'DejaVu Sans,13' linewidth 1.5 background rgb 'white'\n"
           << "set output " << gp_quote(svg) << "\n"
           << body << "\nunset multiplot\nset output\n";
    files.push_back(svg);
  }
}

TimeUnit time_unit_for(double span_s) {
  if (span_s >= 3 * 3600.0) return {3600.0, "h"};
  if (span_s >= 3 * 60.0) return {60.0, "min"};
  return {1.0, "s"};
}

}  // namespace meridian::analysis
