// `meridian train RUN.yaml --node-id ID ...` (`meridian train` runs it when its first argument is
// a file: cli/train/train_node.h): one DiLoCo node per process over the TCP store (or an
// etcd cluster: `store: etcd://...` in RUN.yaml) and the Gloo transport, with a TorchWorker. Starts
// a run or joins a running one by live recovery. Not a launcher (scripts/start_nodes.sh starts N of
// these) and not the in-process emulation.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/args.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/compose/compose.h"
#include "cli/compose/real_node.h"
#include "cli/options.h"
#include "cli/slurm.h"
#include "cli/train/terminal_notices.h"
#include "cli/train/train_node.h"
#include "engine/backends/common/store_net.h"
#include "engine/backends/event_sinks/sinks.h"
#include "engine/backends/faults/fault_point.h"
#include "engine/backends/faults/watched_transport.h"
#include "engine/backends/store_tcp/tcp_store.h"
#include "engine/core/codec/codec.h"
#include "engine/core/diloco/diloco.h"
#include "engine/core/error.h"
#include "engine/core/events/config_record.h"
#include "engine/core/events/event_sink.h"
#include "engine/core/util/crc32c.h"
#include "engine/core/util/files.h"
#include "trainer/run_checkpoint.h"
#include "trainer/run_config.h"
#include "trainer/torch_worker.h"

namespace meridian::cli {
namespace {

struct NodeArgs {
  // bind "": the run file's store.bind; transport "": its transport.kind.
  // host "": 127.0.0.1, or under Slurm this task's host's address.
  std::string run_yaml, store, secret_file, bind, port_file, host, transport;
  std::vector<std::string> overrides;  // --set
  std::string device = "cpu";
  std::int64_t node_id = -1;
  int serve_port = -1;
  int cuda_device = 0;
  int shard = -1;
  std::uint64_t pause_at_message = 0;  // 0 = never
  std::string fault_marker;
  bool resume = false;
  trainer::ResumeFrom resume_from;             // --resume-from
  std::uint64_t exit_in_checkpoint_write = 0;  // 0 = never
  FaultPoint kill_at;                          // n = 0: never
  std::optional<slurm::Task> slurm;            // started by srun without --node-id
};

std::unique_ptr<Options> options(NodeArgs& a) {
  auto o = std::make_unique<Options>(
      "meridian train",
      std::vector<std::string>{
          "FILE --node-id ID --secret-file F (--store HOST:PORT | --serve-store PORT) [options]",
          "FILE --node-id ID --secret-file F [options]   (FILE says `store: {address: "
          "etcd://...}`)",
          "FILE --secret-file F [options]   under srun, on Slurm: see below"},
      "One DiLoCo node of a real run. A node whose store has no round yet starts the run (round "
      "0 forms once run.nodes nodes are queued); otherwise it joins the running one through live "
      "recovery. Writes <output.dir>/node-<ID>/events.jsonl (engine/core/events/SCHEMA.md) and "
      "checksums.tsv (outer_step, epoch, members, CRC-32C of the outer parameters after each "
      "applied outer step), and with FILE's `checkpoint:` its checkpoints in "
      "<checkpoint.dir>/node-<ID>/step-<n>/ (cli/train/README.md). SIGINT or SIGTERM: leave "
      "gracefully after the current round.");
  const auto big = std::uint64_t{1} << 40;
  o->argument("FILE",
              "the run file (cli/train/README.md, \"The run file\"): the same schema `meridian "
              "sim` simulates; its network, hardware and churn sections describe the simulated "
              "world and are ignored here",
              a.run_yaml)
      .texts("--set", "KEY=VALUE", "override a key of FILE (repeatable; list items as key[N].sub)",
             a.overrides)
      .value("--transport", "gloo|nccl",
             "the transport between nodes (default: FILE's transport.kind, gloo; nccl where this "
             "meridian was built with it, one GPU per node)",
             [&a](const std::string& n, const std::string& v) {
               if (v != "gloo" && v != "nccl")
                 throw ConfigError(n + ": expected gloo or nccl, got '" + v + "'");
               a.transport = v;
             })
      .integer("--cuda-device", "G", "with nccl: the GPU this node's communicator uses (default 0)",
               a.cuda_device, 0, 1023)
      .integer("--node-id", "ID",
               "this node's id (>= 1, unused in this run; a restarted node takes a new one; "
               "under srun without it: the task's rank + 1)",
               a.node_id, 1, big)
      .text("--store", "HOST:PORT",
            "the run's store (another node's embedded one or `meridian "
            "store`)",
            a.store)
      .value("--serve-store", "PORT",
             "embed the store in this node (0 = a free port), bound to "
             "--bind",
             [&a](const std::string& n, const std::string& v) { a.serve_port = opt::port(n, v); })
      .text("--bind", "HOST",
            "address the embedded store listens on (default: the run file's store.bind, "
            "127.0.0.1; 0.0.0.0 serves every interface)",
            a.bind)
      .text("--store-port-file", "F", "write the embedded store's port to F once it listens",
            a.port_file)
      .text("--secret-file", "F", "the run's shared secret (mode 600)", a.secret_file)
      .text("--host", "ADDR",
            "address this node's Gloo device binds to and advertises (default 127.0.0.1)", a.host)
      .integer("--shard", "R",
               "whose checkpoints' inner state a resume takes (default (ID - 1) % data.shards); "
               "the run plans the data, not the shard",
               a.shard, 0, 1 << 20)
      .text("--device", "cpu|cuda", "(default cpu; this build's TorchWorker trains on the CPU)",
            a.device)
      .flag("--resume",
            "restart the run from the newest checkpoint (FILE's `checkpoint:`) of this node's "
            "shard (--shard) that every resuming node has; each is verified against its manifest "
            "(sizes, SHA-256 of every file) and a failing one is skipped with its reason. With "
            "none valid the node refuses (exit 2, naming each checkpoint and why) unless told "
            "--resume-from. A store whose run is under way is joined by live recovery instead",
            a.resume)
      .value("--resume-from", "WHAT",
             "(implies --resume) what to start from: own-shard (the default: only this shard's "
             "checkpoints), other-shard (this shard's, else another shard's: its outer state and "
             "inner step, AdamW moments at zero), or a checkpoint directory DIR/node-N/step-<n> "
             "(exactly that one; its inner state too when it is of this shard)",
             [&a](const std::string&, const std::string& v) {
               a.resume_from = trainer::parse_resume_from(v);
               a.resume = true;
             })
      .integer("--fault-pause-at-message", "N",
               "fault injection for tests: at this node's N-th outgoing all-reduce message, "
               "write --fault-marker's file and stop there (until killed)",
               a.pause_at_message, 1, big)
      .text("--fault-marker", "F", "with --fault-pause-at-message", a.fault_marker)
      .integer("--fault-exit-in-checkpoint-write", "K",
               "fault injection for tests: the process exits (status 3) after the K-th durable "
               "step of its checkpoint writes (a file, a rename)",
               a.exit_in_checkpoint_write, 1, big)
      .value(
          "--fault-kill", "POINT",
          "fault injection for tests: the process SIGKILLs itself at POINT of its own "
          "activity: inner:N (in its N-th outer step's inner steps), reduce-scatter:N[:A], "
          "all-gather:N[:A] (its first message of that phase in outer step N, attempt A, "
          "default 0), recovery:K (its K-th outgoing live-recovery message, serving a "
          "joiner), admitted (a joiner, right after its admission, before it fetches its "
          "state)",
          [&a](const std::string& n, const std::string& v) { a.kill_at = parse_fault_point(v, n); })
      .notes(
          "Under Slurm (`srun meridian train FILE --secret-file F`, no --node-id): task T of "
          "the step is node T + 1; with the embedded TCP store task 0 serves it on "
          "--serve-store PORT (default 15000 + the job id's last four digits) at its host's "
          "address, and the others connect to the step's first host; --host defaults to the "
          "address SLURMD_NODENAME resolves to. The step needs at least run.nodes tasks; tasks "
          "beyond them join by live recovery. scripts/slurm/ has an sbatch example "
          "(cli/train/README.md, \"On a Slurm cluster\").");
  return o;
}

NodeArgs parse_args(const std::vector<std::string>& args, const slurm::Env& env) {
  NodeArgs a;
  options(a)->parse(args);
  if (a.run_yaml.empty()) throw ConfigError("the run file is required");
  if (a.node_id < 1 && !(a.slurm = slurm::task(env)))
    throw ConfigError("--node-id is required (or start the nodes with srun: see below)");
  if (a.secret_file.empty()) throw ConfigError("--secret-file is required");
  if (!a.store.empty() && a.serve_port >= 0)
    throw ConfigError("give one of --store HOST:PORT and --serve-store PORT, not both");
  if (a.device != "cpu" && a.device != "cuda")
    throw ConfigError("--device: expected cpu or cuda, got '" + a.device + "'");
  if ((a.pause_at_message > 0) != !a.fault_marker.empty())
    throw ConfigError("--fault-pause-at-message and --fault-marker go together");
  if (a.device == "cuda")
    throw ConfigError("--device cuda: this build's TorchWorker trains on the CPU only");
  return a;
}

// Passes inner steps through and keeps the last loss and the tokens, for the progress line.
class ProgressWorker final : public ForwardingWorker {
 public:
  explicit ProgressWorker(trainer::TorchWorker& w) : ForwardingWorker(w) {}
  InnerStepsResult run_inner_steps(int steps) override {
    const auto r = ForwardingWorker::run_inner_steps(steps);
    loss = r.loss;
    tokens += r.tokens;
    return r;
  }

  std::atomic<double> loss{0.0};
  std::atomic<std::int64_t> tokens{0};
};

// Fault injection for tests (--fault-pause-at-message): counts this process's outgoing messages
// on all-reduce rings (not recovery epochs) and, at the chosen one, writes the marker file and
// stops in that call, so a test can SIGKILL the node in the middle of an all-reduce. The node's
// events are flushed first: the test reads them after the kill.
class PausingFactory final : public TransportFactory {
 public:
  PausingFactory(TransportFactory& inner, std::uint64_t at, std::string marker,
                 JsonlEventSink& events)
      : inner_(inner), at_(at), marker_(std::move(marker)), events_(events) {}

  std::unique_ptr<Transport> connect(const EpochSpec& spec) override {
    auto t = inner_.connect(spec);
    if (at_ == 0 || is_recovery_epoch(spec.epoch)) return t;
    return std::make_unique<WatchedTransport>(std::move(t), [this](Tag) { count(); });
  }

 private:
  void count() {
    if (++sent_ != at_) return;
    events_.flush();
    write_file_atomically(marker_, std::to_string(at_) + "\n");
    std::cerr << "fault: paused at outgoing all-reduce message " << at_ << std::endl;
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // until the test kills us
  }

  TransportFactory& inner_;
  const std::uint64_t at_;
  const std::string marker_;
  JsonlEventSink& events_;
  std::atomic<std::uint64_t> sent_{0};
};

JsonObject config_event(const trainer::RunConfig& c, const std::string& command,
                        double clock_origin_unix_s) {
  const auto& m = c.trainer.model;
  ConfigRecord record;
  record.mode = "real";
  record.seed = c.seed;
  record.command = command;
  record.clock_origin_unix_s = clock_origin_unix_s;
  record.versions.add("meridian", kVersion);
  record.metrics = {trainer::parameter_count(m),
                    trainer::flops_per_token(m),
                    std::int64_t{c.trainer.train.batch} * m.seq_len,
                    0,
                    0.0,
                    c.diloco.inner_steps,
                    std::string(codec_name(c.diloco.codec)),
                    c.diloco.local_ranks};
  record.config = trainer::run_config_json(c);
  return config_record_fields(record);
}

// A resumed node continues its earlier life's files (one history per node: the report covers the
// whole run). A line the earlier life was killed in the middle of writing (no newline at the
// end) is cut off and said so, so that a file stays one valid record per line. Returns what the
// file holds then ("" when it does not exist).
std::string continue_file(const std::string& path, int node_id) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) throw ConfigError(path + ": cannot be read to continue it (--resume)");
  }
  if (!text.empty() && text.back() != '\n') {
    const std::size_t newline = text.rfind('\n');
    const std::size_t keep = newline == std::string::npos ? 0 : newline + 1;
    std::cerr << "node " << node_id << ": " << path << ": the earlier life's last line was cut "
              << "short (" << text.size() - keep << " bytes: the process was killed while "
              << "writing it); dropped" << std::endl;
    std::filesystem::resize_file(path, keep, ec);
    if (ec) throw ConfigError(path + ": cannot drop its torn last line: " + ec.message());
    text.resize(keep);
  }
  return text;
}

// How many lives an events file holds: one `config` record starts each.
int lives_in(const std::string& events_text) {
  int lives = 0;
  const std::string config = "\"type\":\"config\"";
  for (std::size_t at = 0; (at = events_text.find(config, at)) != std::string::npos; ++at) ++lives;
  return lives;
}

// The `run_resumed` record a resumed life writes after its `config` (engine/core/events/SCHEMA.md).
Event run_resumed_event(double t_s, int node_id, int life, const char* via,
                        std::optional<std::int64_t> from, const std::string& checkpoint) {
  JsonObject f;
  f.add("life", life).add("via", std::string(via));
  if (from) f.add("from_outer_step", *from).add("checkpoint", checkpoint);
  return Event{t_s, node_id, "run_resumed", f};
}

// The `checkpoint` event of one write (engine/core/events/SCHEMA.md).
JsonObject checkpoint_event(const trainer::CheckpointWriteResult& r) {
  JsonObject f;
  f.add("outer_step", r.steps_done - 1).add("steps_done", r.steps_done);
  f.add("written", r.written).add("bytes", r.bytes).add("elapsed_s", r.elapsed_s);
  f.add("wait_s", r.wait_s).add("path", r.path);
  if (!r.written) f.add("error", r.error);
  return f;
}

// A node that lost the run because another process's embedded TCP store (or `meridian store`)
// ended says so in words: the errors it saw name a socket, not the cause.
void say_if_store_gone(const NodeArgs& a, const std::string& host, std::uint16_t port) {
  try {
    ::close(store_wire::dial_once(host, port, store_wire::now_s() + 2.0));
  } catch (const Error& e) {
    const std::string where = host + ":" + std::to_string(port);
    if (std::string(e.what()).find("refused") == std::string::npos) {
      std::cerr << "node " << a.node_id << ": the run's store at " << where
                << " is unreachable from this node (" << e.what()
                << "): cut off from the run (a network partition?)" << std::endl;
      return;
    }
    std::cerr << "node " << a.node_id << ": the run's store at " << where
              << " is gone (the node that embedded it with --serve-store, or `meridian store`, "
                 "has ended): the run cannot go on without it. A store that outlives any node: "
                 "`store: {address: etcd://...}` in the run file; a restart from the last checkpoint: "
                 "`checkpoint:` and --resume (cli/train/README.md)"
              << std::endl;
  }
}

// The IPv4 address host name `name` resolves to; ConfigError naming `what` otherwise.
std::string address_of(const std::string& name, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res); rc != 0 || !res)
    throw ConfigError(what + " '" + name + "' does not resolve to an IPv4 address (" +
                      ::gai_strerror(rc) + "): give --host ADDR");
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(res);
  return text;
}

// Under srun without --node-id: the node's id, address and store from Slurm's environment
// (cli/slurm.h). Task 0 serves the embedded store (unless the run file names an etcd cluster or
// --store names another store); every other task connects to the step's first host, where task
// 0 runs under Slurm's block and cyclic distributions. Outside Slurm: the defaults.
void place_with_slurm(NodeArgs& a, const trainer::RunConfig& c) {
  if (!a.slurm) {
    if (a.host.empty()) a.host = "127.0.0.1";
    return;
  }
  const slurm::Task& t = *a.slurm;
  a.node_id = static_cast<std::int64_t>(t.rank) + 1;
  const std::string where = "Slurm job " + std::to_string(t.job_id) + " step " +
                            std::to_string(t.step_id) + ", task " + std::to_string(t.rank) +
                            " of " + std::to_string(t.tasks);
  if (t.tasks < static_cast<std::uint64_t>(c.initial_nodes))
    throw ConfigError(
        a.run_yaml + ": the run starts with run.nodes = " + std::to_string(c.initial_nodes) +
        " nodes, but " + where + " has fewer tasks: srun -n " + std::to_string(c.initial_nodes) +
        " or more (tasks beyond run.nodes join by live recovery)");
  if (a.host.empty()) {
    a.host = address_of(t.host, "this task's host (SLURMD_NODENAME)");
    if (t.hosts > 1 && a.host.rfind("127.", 0) == 0)
      throw ConfigError("this task's host name '" + t.host + "' (SLURMD_NODENAME) resolves to " +
                        a.host + ", a loopback address the step's other " +
                        std::to_string(t.hosts - 1) + " host(s) cannot reach: give --host ADDR");
  }
  std::string store_note;
  if (c.store.empty() && a.store.empty()) {
    if (a.serve_port == 0)
      throw ConfigError(
          "--serve-store 0 under Slurm: the other tasks cannot learn a port chosen "
          "at random; give a port, or none (15000 + the job id's last four digits)");
    const auto port = a.serve_port > 0 ? static_cast<std::uint16_t>(a.serve_port)
                                       : slurm::default_store_port(t.job_id);
    if (t.rank == 0) {
      a.serve_port = port;
      if (a.bind.empty()) a.bind = a.host;
      store_note = "; serving the run's store on " + a.bind + ":" + std::to_string(port);
    } else {
      a.serve_port = -1;
      a.store = t.first_host + ":" + std::to_string(port);
      store_note = "; the run's store: task 0's, " + a.store;
    }
  }
  std::cerr << "node " << a.node_id << ": " << where << " on " << t.host << " (" << a.host << ")"
            << store_note << std::endl;
}

// The embedded store must outlive every node that uses it: peers finishing their last round,
// and nodes still queued or recovering when the run ended (they learn so from the store and
// leave). So the serving node waits until no node holds a liveness lease any more (the mesh's
// hb/ keys: each ends with a graceful leave, or dead_after_s after a crash), bounded.
void keep_store_until_nodes_leave(std::int64_t node_id, Store& store, const DilocoOptions& d) {
  try {
    const std::string alive = d.mesh.prefix + "hb/";  // ElasticMesh::key_heartbeat
    const double bound_s = 2 * d.mesh.dead_after_s + d.allreduce_timeout_s + d.recovery.timeout_s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
    std::uint64_t revision = store.watch({alive}, 0, 0.0);  // the current revision
    for (bool said = false;;) {
      const auto holders = store.list(alive);
      if (holders.empty()) break;
      const double left_s =
          std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
      if (left_s <= 0) {
        std::cerr << "node " << node_id << ": stopping the embedded store with " << holders.size()
                  << " node(s) still alive after " << bound_s << " s" << std::endl;
        break;
      }
      if (!said)
        std::cerr << "node " << node_id << ": keeping the embedded store up until "
                  << holders.size() << " other node(s) have left" << std::endl;
      said = true;
      revision = store.watch({alive}, revision, left_s);
    }
  } catch (const Error& e) {
    std::cerr << "node " << node_id << ": at the end: " << e.what() << std::endl;
  }
}

// --resume: joins a run under way by live recovery, or restarts the run from the newest
// checkpoint every resuming node has (verified; refused with each candidate's reason), with the
// `run_resumed` record of this life either way.
void resume(const NodeArgs& a, const trainer::RunConfig& c, compose::RealNode& real, bool initial,
            int life, DilocoOptions& d, InnerWorker& worker, JsonlEventSink& events) {
  Store& store = real.store();
  Runtime& runtime = real.runtime();
  const auto node_ckpt_dir = trainer::node_checkpoint_dir(c.checkpoint.dir, a.node_id);
  if (!initial && store.list(d.mesh.prefix + "hb/").empty()) {
    throw ConfigError(
        "--resume: the store holds a run with no live node; a whole-run resume "
        "starts from a fresh store (restart `meridian store`, or --serve-store)");
  } else if (!initial) {
    std::cerr << "node " << a.node_id << ": --resume: the run is under way; joining it by live "
              << "recovery (no checkpoint is read)" << std::endl;
    events.emit(
        run_resumed_event(runtime.now_s(), a.node_id, life, "live_recovery", std::nullopt, ""));
  } else {
    const auto skipped = [&](const trainer::SkippedCheckpoint& s) {
      std::cerr << "node " << a.node_id << ": checkpoint " << s.path.string()
                << " skipped: " << s.reason << std::endl;
      JsonObject f;
      f.add("path", s.path.string()).add("reason", s.reason);
      events.emit(Event{runtime.now_s(), a.node_id, "checkpoint_skipped", f});
    };
    std::vector<trainer::ResumeCandidate> found;
    try {
      found = trainer::find_resume_candidates(c.checkpoint.dir, c.trainer.model, real.shard(),
                                              c.shards, a.resume_from, skipped);
    } catch (const ConfigError&) {
      // Refused: tell the other resuming nodes now rather than let them wait for this one.
      try {
        trainer::agree_resume_step(store, c.initial_nodes, {}, d.mesh.admission_timeout_s);
      } catch (const Error&) {
      }
      throw;
    }
    std::vector<std::int64_t> steps;
    for (const auto& f : found) steps.push_back(f.steps_done);
    const std::int64_t from =
        trainer::agree_resume_step(store, c.initial_nodes, steps, d.mesh.admission_timeout_s);
    const auto it = std::find_if(found.begin(), found.end(),
                                 [&](const auto& f) { return f.steps_done == from; });
    trainer::load_for_resume(*it, c.trainer.model, worker, d);
    events.emit(
        run_resumed_event(runtime.now_s(), a.node_id, life, "checkpoint", from, it->path.string()));
    std::cerr << "node " << a.node_id << ": resuming after outer step " << from << "/"
              << d.outer_steps << " from " << it->path.string()
              << (it->own_shard ? "" : " (another shard's: outer state only, fresh inner state)")
              << std::endl;
    if (const int moved = trainer::set_aside_newer(node_ckpt_dir, from))
      std::cerr << "node " << a.node_id << ": moved " << moved << " newer checkpoint(s) to "
                << (node_ckpt_dir / "superseded").string() << std::endl;
  }
}

// What a node does after each outer step it applied: a checkpoint when one is due, the step's
// line in checksums.tsv and the progress line on stdout.
class OuterStepReport {
 public:
  OuterStepReport(std::int64_t node_id, const trainer::RunConfig& c, const DilocoOptions& d,
                  Store& store, Runtime& runtime, ProgressWorker& worker,
                  trainer::CheckpointWriter* writer, std::ostream& checksums)
      : node_id_(node_id),
        ck_(c.checkpoint),
        d_(d),
        store_(store),
        runtime_(runtime),
        worker_(worker),
        writer_(writer),
        checksums_(checksums),
        last_checkpoint_s_(runtime.now_s()),
        last_(std::chrono::steady_clock::now()) {}

  void after(const OuterStepView& v) {
    run_steps_done_ = std::max(run_steps_done_.load(), v.outer_step + 1);
    if (writer_ && checkpoint_due(v)) {
      writer_->wait_idle();
      writer_->submit(trainer::snapshot_node_state(v, worker_));
      last_checkpoint_s_ = runtime_.now_s();
    }
    const auto bytes = std::as_bytes(v.outer_parameters);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", crc32c(bytes));
    std::lock_guard<std::mutex> lock(mu_);
    checksums_ << v.outer_step << "\t" << v.epoch << "\t" << v.members.size() << "\t" << crc << "\n"
               << std::flush;
    const auto now = std::chrono::steady_clock::now();
    const double dt_s = std::chrono::duration<double>(now - last_).count();
    const std::int64_t tokens = worker_.tokens;
    std::ostringstream line;
    line << "node " << node_id_ << " | outer step " << v.outer_step + 1 << "/" << d_.outer_steps
         << " | epoch " << v.epoch << " | nodes " << v.members.size() << " | loss " << std::fixed
         << std::setprecision(4) << worker_.loss.load() << " | " << std::setprecision(0)
         << (dt_s > 0 ? (tokens - last_tokens_) / dt_s : 0.0) << " tokens/s"
         << (v.fallback ? " | fallback" : "");
    std::cout << line.str() << std::endl;
    last_ = now;
    last_tokens_ = tokens;
  }

  // The run's outer steps done, as this node saw them.
  std::int64_t run_steps_done() const { return run_steps_done_.load(); }

 private:
  // Every member must write the same steps (a resume needs one step all of them have): by step
  // count and at the end, or by the round's first member's clock.
  bool checkpoint_due(const OuterStepView& v) {
    const bool last_step = v.outer_step + 1 >= d_.outer_steps;
    bool due = last_step || (ck_.every_steps > 0 && (v.outer_step + 1) % ck_.every_steps == 0) ||
               (ck_.every_s > 0 && runtime_.now_s() - last_checkpoint_s_ >= ck_.every_s);
    if (ck_.every_s > 0 && !last_step)
      due = trainer::agree_checkpoint_due(store_, v, due, 2 * d_.mesh.dead_after_s);
    return due;
  }

  const std::int64_t node_id_;
  const trainer::CheckpointOptions& ck_;
  const DilocoOptions& d_;
  Store& store_;
  Runtime& runtime_;
  ProgressWorker& worker_;
  trainer::CheckpointWriter* const writer_;  // null: no checkpoints
  std::ostream& checksums_;
  double last_checkpoint_s_;
  std::chrono::steady_clock::time_point last_;
  std::int64_t last_tokens_ = 0;
  std::mutex mu_;
  std::atomic<std::int64_t> run_steps_done_{0};
};

compose::RealNodeArgs real_node_args(const NodeArgs& a, const StoreIdentity& identity) {
  compose::RealNodeArgs ra;
  ra.file = a.run_yaml;
  ra.node_id = a.node_id;
  ra.store = a.store;
  ra.serve_port = a.serve_port;
  ra.bind = a.bind;
  ra.host = a.host;
  ra.shard = a.shard;
  ra.cuda_device = a.cuda_device;
  ra.identity = identity;
  ra.log = [](const std::string& line) { std::cerr << line << std::endl; };
  return ra;
}

// The node's files in <output.dir>/node-<ID>/ (cli/train/README.md), and which life of the node
// this process is.
struct NodeFiles {
  std::ofstream events, checksums;
  int life = 1;
};

// A first life creates the files; a resumed node appends to its earlier lives' (one history per
// node). A resumed life's number follows the lives the file holds (2 at least: a resume whose
// earlier files are elsewhere, another output.dir, is still a restart).
NodeFiles open_node_files(const NodeArgs& a, const std::string& output_dir) {
  const std::string dir = output_dir + "/node-" + std::to_string(a.node_id);
  std::filesystem::create_directories(dir);
  NodeFiles f;
  f.life =
      a.resume ? std::max(2, lives_in(continue_file(dir + "/events.jsonl", a.node_id)) + 1) : 1;
  const bool new_checksums = !a.resume || continue_file(dir + "/checksums.tsv", a.node_id).empty();
  const auto mode = a.resume ? std::ios::app : std::ios::trunc;
  f.events.open(dir + "/events.jsonl", mode);
  f.checksums.open(dir + "/checksums.tsv", mode);
  if (!f.events || !f.checksums) throw ConfigError(dir + ": cannot create the node's files");
  if (new_checksums) f.checksums << "outer_step\tepoch\tmembers\tcrc32c\n" << std::flush;
  return f;
}

// What a node's file ends with: `run_finished` with the run's outer steps (a node that joined
// late or resumed applied fewer itself), or, when the run did not finish for this node,
// `node_lost` with what happened.
Event last_record(double t_s, std::int64_t node_id, const NodeResult& r, double wall_s,
                  std::int64_t run_steps_done, int outer_steps_planned) {
  JsonObject f;
  if (r.exit == NodeExit::kLost || r.exit == NodeExit::kEvicted) {
    f.add("exit", node_exit_name(r.exit)).add("reason", r.what);
    f.add("outer_steps", r.outer_steps_applied).add("elapsed_s", wall_s);
    return Event{t_s, node_id, "node_lost", f};
  }
  f.add("simulated_s", wall_s).add("outer_steps", run_steps_done);
  f.add("outer_steps_planned", outer_steps_planned);
  return Event{t_s, -1, "run_finished", f};
}

// The node's checkpoint writer (FILE's `checkpoint:`): a `checkpoint` record per write, a line on
// stderr for one not written, and --fault-exit-in-checkpoint-write's fault point.
std::unique_ptr<trainer::CheckpointWriter> checkpoint_writer(const NodeArgs& a,
                                                             const trainer::RunConfig& c,
                                                             Runtime& runtime,
                                                             JsonlEventSink& events) {
  std::function<void(const std::filesystem::path&)> fault;
  if (a.exit_in_checkpoint_write > 0) {
    auto done = std::make_shared<std::uint64_t>(0);
    fault = [done, k = a.exit_in_checkpoint_write, &events](const std::filesystem::path& p) {
      if (++*done < k) return;
      std::cerr << "fault: exit in a checkpoint write, after " << p.string() << std::endl;
      events.flush();
      ::_exit(3);
    };
  }
  return std::make_unique<trainer::CheckpointWriter>(
      trainer::node_checkpoint_dir(c.checkpoint.dir, a.node_id), c.trainer.model, c.checkpoint.keep,
      [&runtime, &events, id = a.node_id](const trainer::CheckpointWriteResult& r) {
        events.emit(Event{runtime.now_s(), id, "checkpoint", checkpoint_event(r)});
        if (!r.written)
          std::cerr << "node " << id << ": checkpoint " << r.path << " not written: " << r.error
                    << std::endl;
      },
      fault);
}

// The node's run configuration: the run file with its overrides, placed by Slurm where it runs
// under it, the command line's transport; its notes on stderr.
trainer::RunConfig node_run_config(NodeArgs& a) {
  trainer::RunConfig c = trainer::load_run_config(a.run_yaml, a.overrides);
  place_with_slurm(a, c);
  for (const std::string& note : c.file.notes_for(config::Mode::kReal))
    std::cerr << "node " << a.node_id << ": " << note << std::endl;
  if (!a.transport.empty()) c.transport.kind = a.transport;
  if ((a.resume || a.exit_in_checkpoint_write > 0) && !c.checkpoint.enabled())
    throw ConfigError(std::string(a.resume ? "--resume" : "--fault-exit-in-checkpoint-write") +
                      ": " + a.run_yaml + " has no `checkpoint:` section");
  return c;
}

// Stop signals become a graceful leave: blocked here, before any thread starts, and waited for
// by the node's watcher (SIGUSR1 wakes it at the end).
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int run_node(NodeArgs a, const std::vector<std::string>& argv) {
  trainer::RunConfig c = node_run_config(a);
  const trainer::CheckpointOptions& ck = c.checkpoint;
  StoreIdentity identity{read_secret_file(a.secret_file), kVersion, trainer::run_config_hash(c)};
  sigset_t signals = block_stop_signals();

  compose::RealNode real(c, real_node_args(a, identity));
  if (real.server()) {
    std::cout << "store listening on " << real.served_bind() << ":" << real.served_port()
              << std::endl;
    if (!a.port_file.empty())
      write_file_atomically(a.port_file, std::to_string(real.served_port()) + "\n");
  }
  Store& store = real.store();
  // A store that already holds a round record means the run is under way: join it.
  const bool initial = store.list(c.diloco.mesh.prefix + "round/").empty();
  const auto node_ckpt_dir = trainer::node_checkpoint_dir(ck.dir, a.node_id);
  if (ck.enabled() && initial && !a.resume && !trainer::checkpoint_steps(node_ckpt_dir).empty())
    throw ConfigError(node_ckpt_dir.string() +
                      " holds checkpoints of an earlier run: start with --resume, or remove it");

  NodeFiles files = open_node_files(a, c.output_dir);
  const int life = files.life;
  std::ofstream& events_file = files.events;
  std::ofstream& checksums = files.checksums;
  // Flushed per record: a node killed at any point (SIGKILL, churn) leaves every event it
  // emitted (a record costs ~2 us more so, bench/event_sink_bench.cc; a node writes tens a second).
  JsonlEventSink events(events_file, EventFlush::kEachRecord);
  TerminalNotices notices(events);  // the few records an operator must see, also on stderr
  Runtime& runtime = real.runtime();
  std::string command = "meridian train";
  for (const auto& s : argv) command += " " + s;
  // The wall-clock time of this process's t = 0: analysis merges the nodes' files with it.
  const double unix_now_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double t_s = runtime.now_s();
  events.emit(Event{t_s, -1, "config", config_event(c, command, unix_now_s - t_s)});

  real.make_worker(c);
  trainer::TorchWorker& torch = real.worker();
  ProgressWorker worker(torch);
  PausingFactory transports(real.transports(), a.pause_at_message, a.fault_marker, events);
  FaultTrigger kill_point(
      a.kill_at,
      [&events](const std::string& what) {
        std::cerr << "fault: SIGKILL in " << what << std::endl;
        events.flush();  // a fault point ends the process without unwinding: nothing is lost
        ::raise(SIGKILL);
      },
      c.diloco.inner_steps);
  FaultTrigger::Worker node_worker(worker, kill_point);
  FaultTrigger::Factory node_transports(transports, kill_point);

  DilocoOptions d = c.diloco;
  d.ring_watchdog_s = d.mesh.heartbeat_interval_s;  // a frozen peer costs a lease, not the timeout
  d.mesh.probe = &real.probe();                     // a crashed peer costs a probe, not a lease
  if (a.resume) resume(a, c, real, initial, life, d, worker, events);
  std::unique_ptr<trainer::CheckpointWriter> writer =
      ck.enabled() ? checkpoint_writer(a, c, runtime, events) : nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  OuterStepReport report(a.node_id, c, d, store, runtime, worker, writer.get(), checksums);
  d.on_outer_step = [&report](const OuterStepView& v) { report.after(v); };
  const std::unique_ptr<DilocoNode> node_owner =
      compose::make_node({node_worker, store, node_transports, runtime, notices}, d);
  DilocoNode& node = *node_owner;
  d.initial_momentum = {};

  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGUSR1) {
      std::cerr << "node " << a.node_id << ": leaving after the current round" << std::endl;
      node.request_leave();
    }
  });
  std::cerr << "node " << a.node_id << ": " << (initial ? "starting the run" : "joining the run")
            << " (data shard " << real.shard() << "/" << c.shards << ", " << torch.parameter_count()
            << " parameters)" << std::endl;
  const NodeResult r = node.run(initial, a.node_id);
  pthread_kill(watcher.native_handle(), SIGUSR1);
  watcher.join();
  writer.reset();  // the last checkpoint is on disk before the node says it is done

  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  events.emit(
      last_record(runtime.now_s(), a.node_id, r, wall_s, report.run_steps_done(), d.outer_steps));
  std::cerr << "node " << a.node_id << ": " << node_exit_name(r.exit) << " after "
            << r.outer_steps_applied << " outer steps" << (r.what.empty() ? "" : ": ") << r.what
            << std::endl;
  if (r.exit == NodeExit::kLost && !a.store.empty()) {
    const auto [host, port] = compose::split_host_port(a.store);
    say_if_store_gone(a, host, port);
  }
  if (real.server()) keep_store_until_nodes_leave(a.node_id, store, d);
  return (r.exit == NodeExit::kFinished || r.exit == NodeExit::kLeft) ? kExitOk : kExitFailed;
}

}  // namespace

std::string train_node_help() {
  NodeArgs a;
  return options(a)->help();
}

int run_train_node(const std::vector<std::string>& args) {
  const NodeArgs a = parse_args(args, slurm::process_env());
  try {
    return run_node(a, args);
  } catch (const ConfigError& e) {
    std::cerr << "meridian train: " << e.what() << std::endl;
    return kExitUsage;
  } catch (const Error& e) {
    std::cerr << "meridian train: " << e.what() << std::endl;
    return kExitFailed;
  }
}

}  // namespace meridian::cli
