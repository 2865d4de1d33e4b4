// The registry of worker kinds (see worker_plugin.h).
#include "netsim/worker_plugin.h"

#include <map>

#include "engine/core/error.h"

namespace meridian::netsim {
namespace {

std::map<std::string, WorkerKindFactory>& registry() {
  static std::map<std::string, WorkerKindFactory> kinds;
  return kinds;
}

}  // namespace

bool register_worker_kind(const std::string& kind, WorkerKindFactory factory) {
  registry()[kind] = std::move(factory);
  return true;
}

WorkerPlugin resolve_worker(Scenario& sc, const SlowStepFn& on_slow_step) {
  if (sc.worker == "modeled") return {};
  auto it = registry().find(sc.worker);
  if (it == registry().end()) {
    std::string built = "modeled";
    for (auto& [k, f] : registry()) built += ", " + k;
    throw ConfigError(sc.file + ": key 'worker': '" + sc.worker +
                      "' is not part of this build of meridian (it has: " + built + ")" +
                      (sc.worker == "torch" ? "; worker: torch needs MERIDIAN_WITH_TORCH=ON and "
                                              "MERIDIAN_WITH_SIMGRID=ON (LibTorch and SimGrid)"
                                            : ""));
  }
  WorkerPlugin p = it->second(sc, on_slow_step);
  p.kind = sc.worker;
  return p;
}

}  // namespace meridian::netsim
