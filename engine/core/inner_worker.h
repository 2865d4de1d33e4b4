// InnerWorker: what DiLoCo needs from whatever computes the inner steps.
// ModeledWorker (netsim: time from FLOPs) and TorchWorker (trainer) implement it. Not a trainer
// API: no tensors, no devices, only flat fp32 views and opaque state for recovery.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace meridian {

// A named, contiguous piece of worker state shipped during live recovery (e.g. AdamW moments).
struct StateSection {
  std::string name;
  std::span<float> values;   // live view into the worker; empty for timing-only workers
  std::uint64_t count = 0;   // number of fp32 values (== values.size() when values is not empty)
};

// Positions [begin, end) in the run's data order: the sequence of samples a run trains, epoch
// after epoch (a worker maps a position to a sample: trainer/data.h, DataOrder). Which positions
// a node trains is the engine's plan (engine/core/diloco/data_plan.h), not the node's.
struct SampleRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const SampleRange&) const = default;
};

struct InnerStepsResult {
  std::int64_t steps = 0;    // inner steps completed
  std::int64_t tokens = 0;   // tokens consumed by this node
  double loss = 0.0;         // mean training loss over the steps (NaN when not computed)
  double compute_s = 0.0;    // time spent computing, on the Runtime clock
};

// Thread-safety: run_inner_steps and the views are used by one activity at a time, except that
// live recovery may read state_sections() of a serving peer between two inner steps through
// the lock returned by the engine (see engine/core/recovery).
class InnerWorker {
 public:
  virtual ~InnerWorker() = default;

  // Runs `steps` inner optimizer steps on the samples assigned (assign_samples), or on the
  // worker's own data when it reads none the engine plans.
  virtual InnerStepsResult run_inner_steps(int steps) = 0;

  // Elastic data (engine/core/diloco/README.md, "Elastic data"): the samples one inner step reads,
  // or 0 for a worker that reads no data the engine plans (a timing-only worker).
  virtual std::int64_t samples_per_step() const { return 0; }
  // The positions the next outer step's inner steps read, in order: samples_per_step() * H of
  // them, given before those inner steps start (never while they run).
  virtual void assign_samples(std::vector<SampleRange> ranges) { (void)ranges; }

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

// Passes every call to another InnerWorker. Decorators (progress, recording) derive from it and
// override only what they change. Owns the inner worker when given it by unique_ptr; otherwise
// the inner worker must outlive this one.
class ForwardingWorker : public InnerWorker {
 public:
  explicit ForwardingWorker(std::unique_ptr<InnerWorker> inner)
      : owned_(std::move(inner)), inner_(*owned_) {}
  explicit ForwardingWorker(InnerWorker& inner) : inner_(inner) {}

  InnerStepsResult run_inner_steps(int steps) override { return inner_.run_inner_steps(steps); }
  std::int64_t samples_per_step() const override { return inner_.samples_per_step(); }
  void assign_samples(std::vector<SampleRange> ranges) override {
    inner_.assign_samples(std::move(ranges));
  }
  std::uint64_t parameter_count() const override { return inner_.parameter_count(); }
  std::span<float> parameters() override { return inner_.parameters(); }
  void parameters_updated() override { inner_.parameters_updated(); }
  std::vector<std::uint64_t> bucket_boundaries() const override {
    return inner_.bucket_boundaries();
  }
  std::vector<StateSection> state_sections() override { return inner_.state_sections(); }
  std::string progress() const override { return inner_.progress(); }
  void restore_progress(const std::string& progress) override {
    inner_.restore_progress(progress);
  }

 protected:
  InnerWorker& inner() const { return inner_; }

 private:
  std::unique_ptr<InnerWorker> owned_;
  InnerWorker& inner_;
};

}  // namespace meridian
