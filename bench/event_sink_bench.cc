// What flushing events.jsonl per record costs: records per second of a JsonlEventSink writing a
// representative `allreduce` record (the most frequent type) to a file, buffered and with a
// flush (one write(2)) per record. Not a benchmark of JSON formatting alone.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "engine/backends/event_sinks/sinks.h"

namespace meridian {
namespace {

Event allreduce_record() {
  JsonObject f;
  f.add("outer_step", 12).add("bucket", 3).add("epoch", 4).add("attempt", 0).add("codec", "int8");
  f.add("elements", std::int64_t{1} << 22).add("participants", 4);
  f.add("bytes_sent", std::int64_t{6} << 20).add("bytes_received", std::int64_t{6} << 20);
  f.add("start_s", 123.456789).add("elapsed_s", 0.987654).add("relative_error", 0.0031);
  f.add("local_rank", 0);
  return Event{123.456789, 7, "allreduce", f};
}

void BM_JsonlSink(benchmark::State& state) {
  const auto flush = state.range(0) ? EventFlush::kEachRecord : EventFlush::kBuffered;
  const std::string path = "/tmp/event_sink_bench." + std::to_string(::getpid()) + ".jsonl";
  std::ofstream out(path, std::ios::trunc);
  JsonlEventSink sink(out, flush);
  const Event e = allreduce_record();
  for (auto _ : state) sink.emit(e);
  out.close();
  std::remove(path.c_str());
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(state.range(0) ? "flush each record" : "buffered");
}
BENCHMARK(BM_JsonlSink)->Arg(0)->Arg(1);

}  // namespace
}  // namespace meridian

BENCHMARK_MAIN();
