#include "engine/core/events/config_record.h"

namespace meridian {

JsonObject config_record_fields(const ConfigRecord& r) {
  const RunMetrics& m = r.metrics;
  JsonObject metrics;
  metrics.add("param_count", m.param_count)
      .add("flops_per_token", m.flops_per_token)
      .add("tokens_per_inner_step", m.tokens_per_inner_step)
      .add("gpus_per_node", m.gpus_per_node)
      .add("peak_flops_per_gpu", m.peak_flops_per_gpu)
      .add("H", m.inner_steps)
      .add("codec", m.codec)
      .add("local_ranks", m.local_ranks);
  JsonObject f;
  f.add("mode", r.mode).add("seed", r.seed).add("command", r.command);
  if (r.clock_origin_unix_s) f.add("clock_origin_unix_s", *r.clock_origin_unix_s);
  f.add("versions", r.versions).add("metrics", metrics).add("config", r.config);
  return f;
}

}  // namespace meridian
