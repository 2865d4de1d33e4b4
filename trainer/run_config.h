// RunConfig: the RUN.yaml of a real multi-process DiLoCo run (`meridian train RUN.yaml`): model,
// data shards, DiLoCo and heartbeat options, output directory, outer steps. Pure C++ (yaml-cpp,
// no LibTorch). Not the model config (trainer/configs/*.yaml) and not the command line.
#pragma once

#include <cstdint>
#include <string>

#include "engine/diloco/diloco.h"
#include "engine/events/json.h"
#include "trainer/data.h"
#include "trainer/model_config.h"

namespace meridian::trainer {

// RUN.yaml `checkpoint:` (cli/train/README.md). Absent: the run writes no checkpoints.
struct CheckpointOptions {
  std::string dir;               // resolved against the run file's directory; "" = off
  std::int64_t every_steps = 0;  // write after every K-th outer step (0 = not by steps)
  double every_s = 0.0;          // write once T seconds passed since the last write (0 = not)
  int keep = 3;                  // retention: each node keeps its newest N checkpoints
  bool enabled() const { return !dir.empty(); }
};

struct RunConfig {
  std::string model = "tiny";  // a name in trainer/configs/ or a path to a model .yaml
  TrainerConfig trainer;       // loaded from `model`, with data.batch / data.seq_len applied
  std::uint64_t seed = 0;      // weight init (identical on every node) and shard shuffling
  int initial_nodes = 1;       // round 0 forms once this many nodes are queued
  int shards = 1;              // data shards; node ID takes shard (ID - 1) % shards by default
  int validation_sequences = 16;
  DataOptions data;                // corpus, cache directory (vocab set from the model)
  DilocoOptions diloco;            // H, outer steps, codec, outer optimizer, timeouts, heartbeats
  std::string output_dir = "run";  // node ID writes <output_dir>/node-<ID>/
  CheckpointOptions checkpoint;    // node ID writes <checkpoint.dir>/node-<ID>/step-<n>/
  // The run's store: "" = the embedded TCP store (--store / --serve-store on the command line);
  // etcd://HOST:PORT[,...][/PREFIX][?...] = an etcd cluster (engine/store/etcd/etcd_store.h,
  // which checks the URL). Not part of the configuration hash: nodes may list the endpoints in
  // any order.
  std::string store;
  // The address a node's embedded store (--serve-store) listens on: loopback unless the run
  // says otherwise ("0.0.0.0" serves every interface). The node's --bind overrides it.
  std::string store_bind = "127.0.0.1";
};

// Reads RUN.yaml. Unknown keys, wrong types and out-of-range values raise ConfigError naming
// the file and the key (e.g. "run.yaml: diloco.codecc: unknown key").
RunConfig load_run_config(const std::string& path);

// The `trainer:` section of a simulator scenario with `worker: torch` (netsim/README.md), read
// with the same readers as RUN.yaml: `model` (a config name or a .yaml path), `data` (RUN.yaml's
// data keys but `shards`: one shard per host slot), `train` (overrides of the model config's
// train section: lr, schedule, ...), `outer_lr`, `outer_momentum`, `target_loss`.
struct TrainerSection {
  std::string model = "tiny";
  TrainerConfig trainer;  // the model config with data.batch/seq_len and `train` applied
  DataOptions data;       // vocab set from the model
  int validation_sequences = 16;
  OuterOptimizerOptions outer;
  // `target_loss`: the validation loss (nats/token) whose first crossing the run's summary
  // times (summary.json `target`: modelled seconds and tokens to reach it); 0 = none.
  double target_loss = 0;
};

// `yaml_text` is the section's content; errors name `file` and the key ("trainer.data.batch").
TrainerSection parse_trainer_section(const std::string& yaml_text, const std::string& file);
JsonObject trainer_section_json(const TrainerSection& t);

// The resolved configuration as a JSON object text (the `config` event's `config` field and the
// text hashed for the store's configuration check).
JsonObject run_config_json(const RunConfig& c);

}  // namespace meridian::trainer
