// A one-line progress display on stderr for long commands (sim, emulation, train, sweep): a bar,
// the caller's text and an ETA, redrawn in place at most four times a second. Drawn only when
// stderr is a terminal, so logs and CI output stay clean. Not a logger: results go to stdout.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace meridian::cli {

class ProgressLine {
 public:
  // `enabled` defaults to "stderr is a terminal".
  explicit ProgressLine(bool enabled = ::isatty(STDERR_FILENO) == 1)
      : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { finish(); }

  bool enabled() const { return enabled_; }

  // Seconds since construction (or the last restart()).
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void restart() { start_ = std::chrono::steady_clock::now(); }

  // `fraction` in [0, 1] (negative: unknown, no bar and no ETA); `text` follows the bar.
  // Throttled: a call within 0.25 s of the last drawing is skipped unless `force`.
  void update(double fraction, const std::string& text, bool force = false) {
    if (!enabled_) return;
    const double now = elapsed_s();
    if (!force && drawn_ && now - last_draw_s_ < 0.25) return;
    last_draw_s_ = now;
    drawn_ = true;
    std::string line;
    if (fraction >= 0) {
      fraction = std::clamp(fraction, 0.0, 1.0);
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(fraction * kWidth);
      char pct[16];
      std::snprintf(pct, sizeof pct, "] %3.0f%%  ", 100 * fraction);
      line = "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + pct;
    }
    line += text;
    if (fraction > 0.001 && fraction < 1)
      line += "  ETA " + duration_text(now * (1 - fraction) / fraction);
    if (line.size() < width_) line += std::string(width_ - line.size(), ' ');  // erase leftovers
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%s", line.c_str());
    std::fflush(stderr);
  }

  // Erases the line, so that a result written to the same terminal (a CSV row on stdout) does
  // not land inside it; the next update draws it again.
  void clear() {
    if (!enabled_ || !drawn_) return;
    std::fprintf(stderr, "\r%s\r", std::string(width_, ' ').c_str());
    std::fflush(stderr);
    drawn_ = false;
    width_ = 0;
  }

  // Ends the line (a newline after the last drawing); later updates start a new one.
  void finish() {
    if (!enabled_ || !drawn_) return;
    std::fputc('\n', stderr);
    drawn_ = false;
    width_ = 0;
  }

  // "42 s", "3 min 05 s", "2 h 07 min".
  static std::string duration_text(double s) {
    char buf[32];
    if (s < 60)
      std::snprintf(buf, sizeof buf, "%.0f s", s);
    else if (s < 3600)
      std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s / 60),
                    static_cast<int>(s) % 60);
    else
      std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s / 3600),
                    static_cast<int>(s / 60) % 60);
    return buf;
  }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  bool drawn_ = false;
  double last_draw_s_ = 0;
  std::size_t width_ = 0;
};

}  // namespace meridian::cli
