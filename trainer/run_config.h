// RunConfig: what a real node (`meridian train FILE --node-id N`) takes from the run file
// (engine/config/run_file.h), resolved into the trainer's and the engine's types: the model and
// its inner optimizer, the data shards, DilocoOptions, the store, the transport, checkpoints.
// Pure C++ (no LibTorch). Also the conversions the simulator's `worker: torch` uses, so that a
// run file means the same model, batch and data in emulation and in a real run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/run_file.h"
#include "engine/core/diloco/diloco.h"
#include "engine/core/events/json.h"
#include "trainer/data.h"
#include "trainer/model_config.h"

namespace meridian::trainer {

// The run file's `checkpoint:` (cli/train/README.md). Absent: the run writes no checkpoints.
using CheckpointOptions = config::CheckpointSpec;

struct RunConfig {
  config::RunFile file;        // the run file as read
  TrainerConfig trainer;       // `model:` and `train:`
  std::uint64_t seed = 0;      // run.seed: weight init (identical on every node) and shuffling
  int initial_nodes = 1;       // round 0 forms once this many nodes are queued
  int shards = 1;              // data shards; node ID takes shard (ID - 1) % shards by default
  int validation_sequences = 16;
  DataOptions data;                // corpus, cache directory (vocab set from the model)
  DilocoOptions diloco;            // H, outer steps, codec, outer optimizer, timeouts, heartbeats
  std::string output_dir = "run";  // node ID writes <output_dir>/node-<ID>/
  CheckpointOptions checkpoint;    // node ID writes <checkpoint.dir>/node-<ID>/step-<n>/
  // "" = the embedded TCP store (--store / --serve-store on the command line); etcd://... = an
  // etcd cluster. Not part of the configuration hash: nodes may list the endpoints in any order.
  std::string store;
  std::string store_bind = "127.0.0.1";  // where a --serve-store node's store listens
  config::TransportSpec transport;       // kind (gloo | nccl), connections per peer
};

// Reads the run file (overrides as `--set`), checks what a real run needs, resolves it.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
RunConfig resolve_run_config(const config::RunFile& f);

// The conversions from the run file's sections; errors name the file and the key.
TrainerConfig trainer_config(const config::RunFile& f);
TrainerConfig trainer_config(const config::ModelConfigFile& f);
ModelConfig model_config(const config::ModelSpec& m, const std::string& where);
TrainConfig train_config(const config::TrainSpec& t);
DataOptions data_options(const config::DataSpec& d, int vocab);

// The trainer part of a `config` event (model, train, data, and train.target_loss when > 0), as
// emulation writes it.
JsonObject trainer_config_json(const TrainerConfig& t, const config::DataSpec& data,
                               double target_loss = 0);

// The resolved configuration as a JSON object text (the `config` event's `config` field and the
// text hashed for the store's configuration check).
JsonObject run_config_json(const RunConfig& c);
// The outer-step variant's keys of a `diloco` record (codec topk's density, bits and error
// feedback; sparse_collective, overlap and the streaming keys), each only where it is not the
// default, so that records and configuration hashes of runs without them stay as they were. The
// one writer of them for run_config_json and the thread emulation's config record.
void add_variant_fields(JsonObject& diloco, const DilocoOptions& d);

// The configuration hash a node of this run sends when it joins the run's store
// (StoreIdentity::config_hash): config_hash_of the run_config_json text. `meridian store
// --config` computes it with this function too, so that a store and its nodes agree.
std::string run_config_hash(const RunConfig& c);

}  // namespace meridian::trainer
