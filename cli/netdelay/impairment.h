// Seeded random loss and jitter for `meridian netdelay` (cli/netdelay/): a Bernoulli or
// Gilbert–Elliott loss process and an in-order random extra delay, one independent stream per
// ordered port pair. Pure code with its own generator (splitmix64), so a seed gives the same
// draws on every platform; not a model of any particular network, only the processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::netdelay {

// Gilbert–Elliott (Gilbert 1960, Elliott 1963), one step per packet: in state Good a packet is
// lost with probability loss_good, in Bad with loss_bad; after each packet the state moves
// Good -> Bad with probability p_gb and Bad -> Good with p_bg. So a Bad period lasts 1 / p_bg
// packets on average (geometric), a Good one 1 / p_gb, the share of packets sent in Bad is
// p_gb / (p_gb + p_bg), and the mean loss rate is that mix of loss_good and loss_bad. With
// loss_good = 0 and loss_bad = 1 (Gilbert's model), losses come in runs of mean 1 / p_bg.
// netem's `loss gemodel p r 1-h 1-k` is (p_gb, p_bg, loss_bad, loss_good) in this order.
struct GilbertElliott {
  double p_gb = 0;
  double p_bg = 1;
  double loss_good = 0;
  double loss_bad = 1;
  double mean_loss_rate() const;
};

struct LossSpec {
  enum class Kind { kNone, kBernoulli, kGilbertElliott };
  Kind kind = Kind::kNone;
  double p = 0;       // kBernoulli: each packet lost independently with probability p
  GilbertElliott ge;  // kGilbertElliott
  bool active() const { return kind != Kind::kNone; }
};

// Numbers separated by commas or blanks ("5,10 20"); a bad field is a ConfigError
// "<what>: expected <expected>, got '<field>'".
std::vector<double> parse_number_list(std::string text, const std::string& what,
                                      const std::string& expected);

// "--loss P" and "--loss-ge p_gb,p_bg,loss_good,loss_bad"; every probability in [0, 1]
// (p_bg > 0), else a ConfigError naming the option and the field.
LossSpec parse_bernoulli_loss(const std::string& text);
LossSpec parse_gilbert_elliott_loss(const std::string& text);

// Uniform [0, 1) with 53 random bits, from a splitmix64 state.
double unit_draw(std::uint64_t& state);

// The state of one stream's generator: the run's seed, the stream's index (e.g. the port pair)
// and what it draws (loss or jitter), mixed so neighbouring streams are independent.
std::uint64_t stream_state(std::uint64_t seed, std::uint64_t stream, std::uint64_t what);

// One loss process: call lose() once per packet, in order. Deterministic for a state.
class LossProcess {
 public:
  LossProcess() = default;
  LossProcess(const LossSpec& spec, std::uint64_t state) : spec_(spec), state_(state) {}
  bool lose();
  bool in_bad_state() const { return bad_; }

 private:
  LossSpec spec_;
  std::uint64_t state_ = 0;
  bool bad_ = false;  // Gilbert–Elliott: starts Good
};

// Jitter: an extra delay drawn per frame from an exponential distribution of mean `mean_ns`
// (so its standard deviation is mean_ns too), the sojourn time of an M/M/1 router queue. It only
// adds delay, so the configured delay stays the path's minimum. The forwarder then holds a frame
// at least until its pair's previous frame left: a FIFO queue's behaviour, no reordering. So a
// frame in a dense burst waits for the largest draw ahead of it and sees more than mean_ns on
// average; a lone frame (a ping) sees the distribution as drawn.
class Jitter {
 public:
  Jitter() = default;
  Jitter(double mean_ns, std::uint64_t state) : mean_ns_(mean_ns), state_(state) {}
  std::int64_t draw_ns();

 private:
  double mean_ns_ = 0;
  std::uint64_t state_ = 0;
};

}  // namespace meridian::netdelay
