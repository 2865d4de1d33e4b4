// Running a child program to completion with its output in a log file (gnuplot, and the
// `meridian sim` children of a sweep). Not a general process library: no pipes, no timeouts.
#pragma once

#include <string>
#include <vector>

namespace meridian::analysis {

// Runs `exe` with `args` (argv[1..]); stdout and stderr go to `log_path` (truncated).
// Returns the exit status, or 128 + signal when killed. A program that cannot be started is
// an Error.
int run_process(const std::string& exe, const std::vector<std::string>& args,
                const std::string& log_path);

// The last `max_chars` characters of a text file ("" when unreadable).
std::string file_tail(const std::string& path, std::size_t max_chars);

// The running program's own path (/proc/self/exe).
std::string self_executable();

}  // namespace meridian::analysis
