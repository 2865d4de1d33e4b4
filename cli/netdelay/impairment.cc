// Loss processes and jitter of `meridian netdelay` (see impairment.h). Pure code, no allocation
// per packet.
#include "cli/netdelay/impairment.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/util/splitmix64.h"

namespace meridian::netdelay {
namespace {

double probability(double v, const std::string& what) {
  if (!std::isfinite(v) || v < 0 || v > 1) {
    std::ostringstream os;
    os << what << ": expected a probability in [0, 1], got " << v;
    throw ConfigError(os.str());
  }
  return v;
}

}  // namespace

std::vector<double> parse_number_list(std::string text, const std::string& what,
                                      const std::string& expected) {
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream fields(text);
  std::vector<double> out;
  std::string field;
  while (fields >> field) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != field.size())
      throw ConfigError(what + ": expected " + expected + ", got '" + field + "'");
    out.push_back(v);
  }
  return out;
}

double GilbertElliott::mean_loss_rate() const {
  const double bad_share = p_gb / (p_gb + p_bg);
  return (1 - bad_share) * loss_good + bad_share * loss_bad;
}

LossSpec parse_bernoulli_loss(const std::string& text) {
  const std::vector<double> v = parse_number_list(text, "--loss", "a probability");
  if (v.size() != 1) throw ConfigError("--loss: expected one probability, got '" + text + "'");
  LossSpec s;
  s.kind = LossSpec::Kind::kBernoulli;
  s.p = probability(v[0], "--loss");
  return s;
}

LossSpec parse_gilbert_elliott_loss(const std::string& text) {
  const std::vector<double> v = parse_number_list(text, "--loss-ge", "a probability");
  if (v.size() != 4) {
    throw ConfigError("--loss-ge: expected p_gb,p_bg,loss_good,loss_bad (4 probabilities), got '" +
                      text + "'");
  }
  LossSpec s;
  s.kind = LossSpec::Kind::kGilbertElliott;
  s.ge.p_gb = probability(v[0], "--loss-ge p_gb");
  s.ge.p_bg = probability(v[1], "--loss-ge p_bg");
  s.ge.loss_good = probability(v[2], "--loss-ge loss_good");
  s.ge.loss_bad = probability(v[3], "--loss-ge loss_bad");
  if (s.ge.p_bg == 0) throw ConfigError("--loss-ge p_bg: expected > 0 (Bad would never end)");
  return s;
}

double unit_draw(std::uint64_t& state) {
  return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
}

std::uint64_t stream_state(std::uint64_t seed, std::uint64_t stream, std::uint64_t what) {
  return splitmix64_mix(splitmix64_mix(seed) ^ splitmix64_mix((stream << 8) | what));
}

bool LossProcess::lose() {
  switch (spec_.kind) {
    case LossSpec::Kind::kNone:
      return false;
    case LossSpec::Kind::kBernoulli:
      return unit_draw(state_) < spec_.p;
    case LossSpec::Kind::kGilbertElliott: {
      const GilbertElliott& g = spec_.ge;
      const bool lost = unit_draw(state_) < (bad_ ? g.loss_bad : g.loss_good);
      bad_ = unit_draw(state_) < (bad_ ? 1 - g.p_bg : g.p_gb);
      return lost;
    }
  }
  return false;
}

std::int64_t Jitter::draw_ns() {
  if (mean_ns_ <= 0) return 0;
  return std::llround(-mean_ns_ * std::log1p(-unit_draw(state_)));
}

}  // namespace meridian::netdelay
