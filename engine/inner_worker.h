// InnerWorker: what DiLoCo needs from whatever computes the inner steps.
// ModeledWorker (netsim: time from FLOPs) and TorchWorker (trainer) implement it. Not a trainer
// API: no tensors, no devices, only flat fp32 views and opaque state for recovery.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace meridian {

// A named, contiguous piece of worker state shipped during live recovery (e.g. AdamW moments).
struct StateSection {
  std::string name;
  std::span<float> values;   // live view into the worker; empty for timing-only workers
  std::uint64_t count = 0;   // number of fp32 values (== values.size() when values is not empty)
};

struct InnerStepsResult {
  std::int64_t steps = 0;    // inner steps completed
  std::int64_t tokens = 0;   // tokens consumed by this node
  double loss = 0.0;         // mean training loss over the steps (NaN when not computed)
  double compute_s = 0.0;    // time spent computing, on the Runtime clock
};

// Thread-safety: run_inner_steps and the views are used by one activity at a time, except that
// live recovery may read state_sections() of a serving peer between two inner steps through
// the lock returned by the engine (see engine/recovery).
class InnerWorker {
 public:
  virtual ~InnerWorker() = default;

  // Runs `steps` inner optimizer steps on the local data shard.
  virtual InnerStepsResult run_inner_steps(int steps) = 0;

  // Number of fp32 parameters (the pseudo-gradient's length).
  virtual std::uint64_t parameter_count() const = 0;
  // Flat fp32 view of the parameters, or empty for a timing-only worker. DiLoCo reads the
  // local parameters here after the inner steps and writes the new outer parameters back.
  virtual std::span<float> parameters() = 0;
  // Called after parameters() was written so the worker can copy into its real storage
  // (a no-op when parameters() is a zero-copy view).
  virtual void parameters_updated() {}

  // Layer-group boundaries (cumulative element offsets, first 0, last parameter_count()) used
  // to cut the pseudo-gradient into buckets.
  virtual std::vector<std::uint64_t> bucket_boundaries() const = 0;

  // State beyond the parameters that a joiner must receive (inner optimizer moments, ...).
  virtual std::vector<StateSection> state_sections() = 0;
  // Progress (data position, inner step, RNG state) as an opaque string, and its restore.
  virtual std::string progress() const = 0;
  virtual void restore_progress(const std::string& progress) = 0;
};

}  // namespace meridian
