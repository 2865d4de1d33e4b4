// Test support shared by the plot, report and ensemble tests: whether gnuplot is installed, a
// fresh folder per test, a file's text, a PNG's pixel size. Not fixtures: plain functions.
#pragma once

#include <string>
#include <utility>

namespace meridian::analysis::testing {

// Whether `gnuplot` is on PATH (figure tests skip without it).
bool have_gnuplot();

// TempDir()/NAME, emptied and created.
std::string fresh_dir(const std::string& name);

// The whole file ("" when it cannot be read).
std::string read_text(const std::string& path);

// Width and height from a PNG's IHDR chunk; a gtest failure when the file is not a PNG.
std::pair<int, int> png_size(const std::string& path);

}  // namespace meridian::analysis::testing
