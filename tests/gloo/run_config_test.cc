// The run file as `meridian train` reads it (trainer/run_config.h over engine/config): every key
// lands in its option, defaults hold, unknown keys or bad values raise ConfigError naming the
// file, the line and the key, a file in the older RUN.yaml form says how to convert it, and the
// simulator's scenarios start real nodes (their simulated-world sections noted, not misread).
#include "trainer/run_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/codec/codec.h"
#include "engine/core/error.h"

namespace meridian::trainer {
namespace {

class RunConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = ::testing::TempDir() + "run_config_test_" + std::to_string(::getpid()) + ".yaml";
    std::ofstream(path_) << text;
    return path_;
  }
  std::string dir() const { return std::filesystem::path(path_).parent_path().string(); }
  // The ConfigError message of loading `text` ("" when it loads).
  std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
    try {
      load_run_config(write(text), overrides);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(RunConfigTest, EveryKeyReachesItsOption) {
  const RunConfig c = load_run_config(
      write("run: {seed: 7, nodes: 3, outer_steps: 12}\n"
            "model: {config: tiny, seq_len: 32}\n"
            "train: {batch: 2, lr: 0.002}\n"
            "output: {dir: out/x}\n"
            "store: {bind: 0.0.0.0}\n"
            "transport: {kind: nccl}\n"
            "data:\n  shards: 4\n  cache_dir: /tmp/c\n"
            "  validation_sequences: 5\n  files: [art, science]\n"
            "diloco:\n  H: 9\n  codec: int8\n  outer_lr: 0.5\n  outer_momentum: 0.8\n"
            "  local_ranks: 2\n  timeout_s: 11\n  retries: 1\n  nonfinite_evict_after: 5\n"
            "  admission_timeout_s: 20\n  round_timeout_s: 21\n"
            "  heartbeat_s: 0.25\n  dead_after_s: 1.5\n"
            "recovery:\n  timeout_s: 13\n  max_sources: 1\n  blocking: true\n"));
  EXPECT_EQ(c.trainer.model.name, "tiny");
  EXPECT_EQ(c.trainer.model.layers, 2);  // trainer/configs/tiny.yaml
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.initial_nodes, 3);
  EXPECT_EQ(c.diloco.mesh.initial_world, 3);
  EXPECT_EQ(c.diloco.outer_steps, 12);
  EXPECT_EQ(c.diloco.mesh.outer_steps, 12);
  EXPECT_EQ(c.output_dir, dir() + "/out/x");  // relative to the run file
  EXPECT_EQ(c.store_bind, "0.0.0.0");
  EXPECT_EQ(c.transport.kind, "nccl");
  EXPECT_EQ(c.shards, 4);
  EXPECT_EQ(c.data.cache_dir, "/tmp/c");
  EXPECT_EQ(c.data.vocab, c.trainer.model.vocab);
  EXPECT_EQ(c.data.files, (std::vector<std::string>{"art", "science"}));
  EXPECT_EQ(c.trainer.train.batch, 2);
  EXPECT_DOUBLE_EQ(c.trainer.train.optim.lr, 0.002);
  EXPECT_EQ(c.trainer.model.seq_len, 32);
  EXPECT_EQ(c.validation_sequences, 5);
  EXPECT_EQ(c.diloco.inner_steps, 9);
  EXPECT_EQ(c.diloco.codec, CodecId::kInt8Prime);
  EXPECT_FLOAT_EQ(c.diloco.outer.lr, 0.5f);
  EXPECT_FLOAT_EQ(c.diloco.outer.momentum, 0.8f);
  EXPECT_EQ(c.diloco.local_ranks, 2);
  EXPECT_EQ(c.diloco.allreduce_timeout_s, 11.0);
  EXPECT_EQ(c.diloco.mesh.max_retries, 1);
  EXPECT_EQ(c.diloco.mesh.nonfinite_evict_after, 5);
  EXPECT_EQ(c.diloco.mesh.admission_timeout_s, 20.0);
  EXPECT_EQ(c.diloco.mesh.round_timeout_s, 21.0);
  EXPECT_EQ(c.diloco.mesh.heartbeat_interval_s, 0.25);
  EXPECT_EQ(c.diloco.mesh.dead_after_s, 1.5);
  EXPECT_EQ(c.diloco.recovery.timeout_s, 13.0);
  EXPECT_EQ(c.diloco.recovery.max_sources, 1);
  EXPECT_TRUE(c.diloco.recovery.blocking);
  // The resolved configuration names what was read, in the run file's words.
  const std::string json = run_config_json(c).str();
  EXPECT_NE(json.find("\"codec\":\"int8\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"H\":9"), std::string::npos) << json;
}

// Defaults: the real run's bounds (600 s) where the simulator's are unbounded, one data shard per
// node, the embedded store on loopback, Gloo.
TEST_F(RunConfigTest, DefaultsAreTheDocumentedOnes) {
  const RunConfig c = load_run_config(write("model: tiny\nrun: {nodes: 2}\n"));
  EXPECT_EQ(c.shards, 2);
  EXPECT_EQ(c.diloco.mesh.admission_timeout_s, 600.0);
  EXPECT_EQ(c.diloco.mesh.round_timeout_s, 600.0);
  EXPECT_EQ(c.diloco.inner_steps, 100);
  EXPECT_EQ(c.diloco.codec, CodecId::kInt8Prime);
  EXPECT_EQ(c.store, "");
  EXPECT_EQ(c.store_bind, "127.0.0.1");
  EXPECT_EQ(c.transport.kind, "gloo");
  EXPECT_EQ(c.output_dir, "runs/" + std::filesystem::path(path_).stem().string());
}

TEST_F(RunConfigTest, UnknownKeysNameFileLineAndKey) {
  const std::string top = error_of("model: tiny\nrun: {outer_steps: 1}\nepochs: 3\n");
  EXPECT_NE(top.find(path_ + ":3: unknown key 'epochs'; keys of a run file:"), std::string::npos)
      << top;
  const std::string nested = error_of("diloco:\n  codecc: int8\n");
  EXPECT_NE(nested.find(path_ + ":2: unknown key 'diloco.codecc'; keys of diloco:"),
            std::string::npos)
      << nested;
  const std::string set = error_of("model: tiny\n", {"diloco.HH=3"});
  EXPECT_NE(set.find("--set diloco.HH=3: unknown key 'diloco.HH'"), std::string::npos) << set;
}

TEST_F(RunConfigTest, DilocoCodecTakesEveryCodecName) {
  for (const CodecId id : kAllCodecIds) {
    const std::string name(codec_name(id));
    const RunConfig c =
        load_run_config(write("model: {config: tiny}\ndiloco: {codec: " + name + "}\n"));
    EXPECT_EQ(c.diloco.codec, id) << name;
  }
}

// codec topk: its keys reach DilocoOptions (error_feedback 0.95 unless given), belong to topk
// alone, and topk runs blocking, overlapped or streaming.
TEST_F(RunConfigTest, TopkKeysReachTheEngineAndBelongToTopkAlone) {
  RunConfig c = load_run_config(write("model: {config: tiny}\ndiloco: {codec: topk}\n"));
  EXPECT_EQ(c.diloco.codec, CodecId::kTopk);
  EXPECT_EQ(c.diloco.codec_params.topk_density, 0.02);
  EXPECT_EQ(c.diloco.codec_params.topk_bits, 2);
  EXPECT_EQ(c.diloco.error_feedback, kDefaultErrorFeedback);
  EXPECT_EQ(c.diloco.sparse_collective, SparseCollective::kAuto);
  c =
      load_run_config(write("model: {config: tiny}\ndiloco: {codec: topk, topk_density: 0.01, "
                            "topk_bits: 4, error_feedback: 0, sparse_collective: ring}\n"));
  EXPECT_EQ(c.diloco.codec_params.topk_density, 0.01);
  EXPECT_EQ(c.diloco.codec_params.topk_bits, 4);
  EXPECT_EQ(c.diloco.error_feedback, 0.0f);
  EXPECT_EQ(c.diloco.sparse_collective, SparseCollective::kRing);
  EXPECT_EQ(load_run_config(write("model: {config: tiny}\n")).diloco.error_feedback, 0.0f);
  std::string e = error_of("diloco:\n  codec: int8\n  error_feedback: 0.9\n");
  EXPECT_NE(e.find(":3: key 'diloco.error_feedback': expected absent unless diloco.codec is topk"),
            std::string::npos)
      << e;
  e = error_of("diloco:\n  codec: int8\n  sparse_collective: ring\n");
  EXPECT_NE(
      e.find(":3: key 'diloco.sparse_collective': expected absent unless diloco.codec is topk"),
      std::string::npos)
      << e;
  e = error_of("diloco:\n  codec: topk\n  sparse_collective: tree\n");
  EXPECT_NE(e.find("key 'diloco.sparse_collective': expected auto, gather or ring"),
            std::string::npos)
      << e;
  e = error_of("diloco:\n  codec: topk\n  topk_bits: 9\n");
  EXPECT_NE(e.find("key 'diloco.topk_bits': expected an integer in [1, 8]"), std::string::npos)
      << e;
  EXPECT_EQ(load_run_config(write("model: {config: tiny}\ndiloco: {codec: topk, overlap: eager}\n"))
                .diloco.overlap,
            Overlap::kEager);
  // Sparse outer steps stream (each fragment's error feedback at its own sync).
  EXPECT_EQ(load_run_config(write("model: {config: tiny}\ndiloco: {codec: topk, fragments: 2}\n"))
                .diloco.fragments,
            2);
}

TEST_F(RunConfigTest, BadValuesNameTheKeyAndWhatWasExpected) {
  std::string e = error_of("run: {outer_steps: 0}\n");
  EXPECT_NE(e.find(":1: key 'run.outer_steps': expected a positive integer, got '0'"),
            std::string::npos)
      << e;
  e = error_of("diloco:\n  codec: int3\n");
  EXPECT_NE(e.find(":2: key 'diloco.codec': expected one of fp32, bf16, int8, int8-minmax, fp4, "
                   "topk, got 'int3'"),
            std::string::npos)
      << e;
  e = error_of("diloco: {H: many}\n");
  EXPECT_NE(e.find("key 'diloco.H': expected a positive integer, got 'many'"), std::string::npos)
      << e;
  e = error_of("diloco: {heartbeat_s: 2, dead_after_s: 1}\n");
  EXPECT_NE(e.find("key 'diloco.dead_after_s': expected seconds > diloco.heartbeat_s"),
            std::string::npos)
      << e;
  e = error_of("data: 3\n");
  EXPECT_NE(e.find("key 'data': expected a mapping"), std::string::npos) << e;
  e = error_of("model: no-such-model\n");
  EXPECT_NE(e.find("key 'model': expected a model config: one of"), std::string::npos) << e;
  e = error_of("model: tiny\n", {"train.batch=-1"});
  EXPECT_NE(e.find("--set train.batch=-1: key 'train.batch': expected a positive number"),
            std::string::npos)
      << e;
  e = error_of("model: tiny\n", {"diloco.nonfinite_evict_after=-1"});
  EXPECT_NE(e.find("key 'diloco.nonfinite_evict_after': expected an integer >= 0"),
            std::string::npos)
      << e;
  e = error_of("transport: {kind: mpi}\n");
  EXPECT_NE(e.find("key 'transport.kind': expected gloo or nccl, got 'mpi'"), std::string::npos)
      << e;
}

// A file in the former RUN.yaml form (or the former scenario form) is refused with what
// replaced each key, by line.
TEST_F(RunConfigTest, TheOlderFormSaysHowToConvert) {
  const auto says = [&](const std::string& text, const std::string& key, const std::string& now) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("key '" + key + "' is from an older form of the run file: " + now),
              std::string::npos)
        << text << " -> " << e;
    EXPECT_NE(e.find("cli/train/README.md"), std::string::npos) << e;
  };
  says("model: tiny\nseed: 0\n", "seed", "it is run.seed");
  says("nodes: 3\n", "nodes", "it is run.nodes");
  says("outer_steps: 3\n", "outer_steps", "it is run.outer_steps");
  says("output_dir: x\n", "output_dir", "it is output.dir");
  says("store_bind: 0.0.0.0\n", "store_bind", "it is store.bind");
  says("heartbeat: {interval_s: 1}\n", "heartbeat", "heartbeat.interval_s is diloco.heartbeat_s");
  says("diloco: {inner_steps: 4}\n", "diloco.inner_steps", "H is diloco.H");
  says("diloco: {allreduce_timeout_s: 4}\n", "diloco.allreduce_timeout_s",
       "it is diloco.timeout_s");
  says("diloco: {max_retries: 4}\n", "diloco.max_retries", "it is diloco.retries");
  says("data: {batch: 4}\n", "data.batch", "the batch per node is train.batch");
  says("data: {seq_len: 4}\n", "data.seq_len", "the sequence length is model.seq_len");
  says("trainer: {model: tiny}\n", "trainer", "the trainer section became");
  says("hardware: {batch_sequences: 4}\n", "hardware.batch_sequences",
       "the batch per node is train.batch");
  const std::string store = error_of("store: etcd://h:1\n");
  EXPECT_NE(store.find("key 'store': expected a mapping: the etcd address moved to store.address"),
            std::string::npos)
      << store;
}

TEST_F(RunConfigTest, CheckpointKeysResolveTheDirectoryAgainstTheRunFile) {
  const RunConfig off = load_run_config(write("model: tiny\n"));
  EXPECT_FALSE(off.checkpoint.enabled());
  EXPECT_EQ(run_config_json(off).str().find("checkpoint"), std::string::npos);
  const RunConfig c = load_run_config(
      write("checkpoint:\n  dir: ck/a\n  every_steps: 5\n  every_s: 600\n  keep: 2\n"));
  EXPECT_EQ(c.checkpoint.dir, (std::filesystem::path(dir()) / "ck/a").lexically_normal().string());
  EXPECT_EQ(c.checkpoint.every_steps, 5);
  EXPECT_EQ(c.checkpoint.every_s, 600.0);
  EXPECT_EQ(c.checkpoint.keep, 2);
  // The schedule is part of the configuration the store checks; the directory is not.
  const std::string json = run_config_json(c).str();
  EXPECT_NE(json.find("\"checkpoint\":{\"every_steps\":5,\"every_s\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"keep\":2}"), std::string::npos) << json;
  EXPECT_EQ(json.find("ck/a"), std::string::npos) << json;
  EXPECT_EQ(load_run_config(write("checkpoint:\n  dir: /abs\n  every_s: 1\n")).checkpoint.dir,
            "/abs");
}

TEST_F(RunConfigTest, BadCheckpointKeysNameTheKey) {
  EXPECT_NE(error_of("checkpoint:\n  every_steps: 1\n").find("key 'checkpoint.dir': expected a "
                                                             "directory path"),
            std::string::npos);
  EXPECT_NE(error_of("checkpoint:\n  dir: c\n").find("key 'checkpoint.every_steps': expected "
                                                     "every_steps or every_s"),
            std::string::npos);
  EXPECT_NE(error_of("checkpoint:\n  dir: c\n  every_steps: 1\n  keep: 0\n")
                .find("key 'checkpoint.keep': expected a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of("checkpoint:\n  dir: c\n  every_steps: -1\n").find("checkpoint.every_steps"),
            std::string::npos);
  EXPECT_NE(error_of("checkpoint:\n  dir: c\n  every_step: 1\n")
                .find("unknown key 'checkpoint.every_step'"),
            std::string::npos);
}

// store.address: empty (the embedded TCP store, given on the command line) or an etcd URL, which
// engine/backends/store_etcd checks in full when the node starts.
TEST_F(RunConfigTest, StoreIsEmptyOrAnEtcdUrl) {
  EXPECT_EQ(load_run_config(write("model: tiny\n")).store, "");
  EXPECT_EQ(load_run_config(write("store: {address: 'etcd://h1:2379,h2:2379/r'}\n")).store,
            "etcd://h1:2379,h2:2379/r");
  const std::string e = error_of("store: {address: '127.0.0.1:2379'}\n");
  EXPECT_NE(e.find(path_ + ":1: key 'store.address': expected etcd://HOST:PORT"),
            std::string::npos)
      << e;
}

// The simulator's scenario is a run file for a real node too: shrunk by --set (list items
// included), its model, batch, DiLoCo and heartbeat keys are the real run's; network, hardware
// and churn are noted as not used, never misread.
TEST(RunFile, AScenarioStartsARealRunWithTheSameKeys) {
  const std::string file = std::string(MERIDIAN_SOURCE_DIR) + "/scenarios/intellect1-global.yaml";
  const RunConfig c = load_run_config(
      file, {"model={config: tiny}", "train.batch=2", "run.outer_steps=2",
             "network.nodes[0].count=1"});
  EXPECT_EQ(c.trainer.model.name, "tiny");
  EXPECT_EQ(c.trainer.train.batch, 2);
  EXPECT_EQ(c.diloco.outer_steps, 2);
  EXPECT_EQ(c.diloco.inner_steps, 100);              // the scenario's diloco.H
  EXPECT_EQ(c.diloco.codec, CodecId::kInt8Prime);    // its diloco.codec
  EXPECT_EQ(c.diloco.local_ranks, 8);                // its diloco.local_ranks
  EXPECT_EQ(c.diloco.mesh.dead_after_s, 6.0);        // its diloco.dead_after_s
  EXPECT_EQ(c.diloco.mesh.max_retries, 3);           // its diloco.retries
  EXPECT_EQ(c.initial_nodes, 12);  // run.nodes absent: the starting nodes of network.nodes
  // diloco.nonfinite_evict_after absent: the default.
  EXPECT_EQ(c.diloco.mesh.nonfinite_evict_after, 3);
  const auto notes = c.file.notes_for(config::Mode::kReal);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("intellect1-global.yaml: hardware: not used by a real run"),
            std::string::npos)
      << notes[0];
  EXPECT_NE(notes[1].find("intellect1-global.yaml: network: not used by a real run"),
            std::string::npos)
      << notes[1];
  const auto sim_notes = config::load_run_file(file).notes_for(config::Mode::kSimulate);
  EXPECT_TRUE(sim_notes.empty());
  // A list item that is not there is an error naming --set and the list's length.
  std::string e;
  try {
    load_run_config(file, {"network.nodes[9].count=1"});
  } catch (const ConfigError& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("--set network.nodes[9].count=1: 'network.nodes' has no item [9]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(it has 7)"), std::string::npos) << e;
}

}  // namespace
}  // namespace meridian::trainer
