// RUN.yaml parsing for `meridian train`: every key lands in its option, defaults hold, and
// unknown keys or bad values raise ConfigError naming the file and the key.
#include "trainer/run_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/error.h"

namespace meridian::trainer {
namespace {

class RunConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = ::testing::TempDir() + "run_config_test_" + std::to_string(::getpid()) + ".yaml";
    std::ofstream(path_) << text;
    return path_;
  }
  // The ConfigError message of loading `text` ("" when it loads).
  std::string error_of(const std::string& text) {
    try {
      load_run_config(write(text));
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
      write("model: tiny\nseed: 7\nnodes: 3\nouter_steps: 12\noutput_dir: out/x\n"
            "data:\n  shards: 4\n  cache_dir: /tmp/c\n  batch: 2\n  seq_len: 32\n"
            "  validation_sequences: 5\n  files: [art, science]\n"
            "diloco:\n  inner_steps: 9\n  codec: int8\n  outer_lr: 0.5\n  outer_momentum: 0.8\n"
            "  local_ranks: 2\n  allreduce_timeout_s: 11\n  max_retries: 1\n"
            "  admission_timeout_s: 20\n  round_timeout_s: 21\n"
            "heartbeat:\n  interval_s: 0.25\n  dead_after_s: 1.5\n"
            "recovery:\n  timeout_s: 13\n  max_sources: 1\n  blocking: true\n"));
  EXPECT_EQ(c.trainer.model.name, "tiny");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.initial_nodes, 3);
  EXPECT_EQ(c.diloco.mesh.initial_world, 3);
  EXPECT_EQ(c.diloco.outer_steps, 12);
  EXPECT_EQ(c.diloco.mesh.outer_steps, 12);
  EXPECT_EQ(c.output_dir, "out/x");
  EXPECT_EQ(c.shards, 4);
  EXPECT_EQ(c.data.cache_dir, "/tmp/c");
  EXPECT_EQ(c.data.vocab, c.trainer.model.vocab);
  EXPECT_EQ(c.data.files, (std::vector<std::string>{"art", "science"}));
  EXPECT_EQ(c.trainer.train.batch, 2);
  EXPECT_EQ(c.trainer.model.seq_len, 32);
  EXPECT_EQ(c.validation_sequences, 5);
  EXPECT_EQ(c.diloco.inner_steps, 9);
  EXPECT_EQ(c.diloco.codec, CodecId::kInt8Prime);
  EXPECT_FLOAT_EQ(c.diloco.outer.lr, 0.5f);
  EXPECT_FLOAT_EQ(c.diloco.outer.momentum, 0.8f);
  EXPECT_EQ(c.diloco.local_ranks, 2);
  EXPECT_EQ(c.diloco.allreduce_timeout_s, 11.0);
  EXPECT_EQ(c.diloco.mesh.max_retries, 1);
  EXPECT_EQ(c.diloco.mesh.admission_timeout_s, 20.0);
  EXPECT_EQ(c.diloco.mesh.round_timeout_s, 21.0);
  EXPECT_EQ(c.diloco.mesh.heartbeat_interval_s, 0.25);
  EXPECT_EQ(c.diloco.mesh.dead_after_s, 1.5);
  EXPECT_EQ(c.diloco.recovery.timeout_s, 13.0);
  EXPECT_EQ(c.diloco.recovery.max_sources, 1);
  EXPECT_TRUE(c.diloco.recovery.blocking);
  // The resolved configuration names what was read.
  const std::string json = run_config_json(c).str();
  EXPECT_NE(json.find("\"codec\":\"int8\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"inner_steps\":9"), std::string::npos) << json;
}

TEST_F(RunConfigTest, UnknownKeysNameFileAndKey) {
  const std::string top = error_of("model: tiny\nouter_steps: 1\nepochs: 3\n");
  EXPECT_NE(top.find(path_ + ": epochs: unknown key"), std::string::npos) << top;
  const std::string nested = error_of("outer_steps: 1\ndiloco:\n  codecc: int8\n");
  EXPECT_NE(nested.find(path_ + ": diloco.codecc: unknown key"), std::string::npos) << nested;
}

TEST_F(RunConfigTest, BadValuesNameTheKey) {
  EXPECT_NE(error_of("outer_steps: 0\n").find("outer_steps: expected a positive"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ndiloco:\n  codec: int3\n").find("diloco.codec"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ndiloco:\n  inner_steps: many\n").find("diloco.inner_steps"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\nheartbeat:\n  interval_s: 2\n  dead_after_s: 1\n")
                .find("heartbeat.dead_after_s: expected more than interval_s"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ndata: 3\n").find("data: expected a map"), std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\nmodel: no-such-model\n"), "");
}

TEST_F(RunConfigTest, CheckpointKeysResolveTheDirectoryAgainstTheRunFile) {
  const RunConfig off = load_run_config(write("outer_steps: 1\n"));
  EXPECT_FALSE(off.checkpoint.enabled());
  EXPECT_EQ(run_config_json(off).str().find("checkpoint"), std::string::npos);
  const RunConfig c = load_run_config(
      write("outer_steps: 1\ncheckpoint:\n  dir: ck/a\n  every_steps: 5\n  every_s: 600\n"
            "  keep: 2\n"));
  EXPECT_EQ(c.checkpoint.dir,
            (std::filesystem::path(path_).parent_path() / "ck/a").lexically_normal().string());
  EXPECT_EQ(c.checkpoint.every_steps, 5);
  EXPECT_EQ(c.checkpoint.every_s, 600.0);
  EXPECT_EQ(c.checkpoint.keep, 2);
  // The schedule is part of the configuration the store checks; the directory is not.
  const std::string json = run_config_json(c).str();
  EXPECT_NE(json.find("\"checkpoint\":{\"every_steps\":5,\"every_s\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"keep\":2}"), std::string::npos) << json;
  EXPECT_EQ(json.find("ck/a"), std::string::npos) << json;
  EXPECT_EQ(load_run_config(write("outer_steps: 1\ncheckpoint:\n  dir: /abs\n  every_s: 1\n"))
                .checkpoint.dir,
            "/abs");
}

TEST_F(RunConfigTest, BadCheckpointKeysNameTheKey) {
  EXPECT_NE(error_of("outer_steps: 1\ncheckpoint:\n  every_steps: 1\n")
                .find("checkpoint.dir: expected a directory path"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ncheckpoint:\n  dir: c\n")
                .find("checkpoint: give every_steps or every_s"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ncheckpoint:\n  dir: c\n  every_steps: 1\n  keep: 0\n")
                .find("checkpoint.keep: expected a positive integer"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ncheckpoint:\n  dir: c\n  every_steps: -1\n")
                .find("checkpoint.every_steps"),
            std::string::npos);
  EXPECT_NE(error_of("outer_steps: 1\ncheckpoint:\n  dir: c\n  every_step: 1\n")
                .find("checkpoint.every_step: unknown key"),
            std::string::npos);
}

// `store`: empty (the embedded TCP store, given on the command line) or an etcd URL, which
// engine/store/etcd checks in full when the node starts.
TEST_F(RunConfigTest, StoreIsEmptyOrAnEtcdUrl) {
  EXPECT_EQ(load_run_config(write("outer_steps: 1\n")).store, "");
  EXPECT_EQ(load_run_config(write("outer_steps: 1\nstore: etcd://h1:2379,h2:2379/r\n")).store,
            "etcd://h1:2379,h2:2379/r");
  const std::string e = error_of("outer_steps: 1\nstore: 127.0.0.1:2379\n");
  EXPECT_NE(e.find(path_ + ": store: expected etcd://HOST:PORT"), std::string::npos) << e;
}

}  // namespace
}  // namespace meridian::trainer
