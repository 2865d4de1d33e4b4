// ElasticMesh: membership of the nodes of one run through the Store, as written down in
// engine/mesh/PROTOCOL.md: unique node ids, heartbeats, a deathrattle, a join queue, a leased
// coordinator role that any node can take over, and one RoundRecord per round of the outer loop.
// Not a transport: the members of a round build their Transport from the record's epoch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/events/event_sink.h"
#include "engine/mesh/round_record.h"
#include "engine/runtime.h"
#include "engine/store.h"

namespace meridian {

struct MeshOptions {
  std::string prefix = "mesh/";       // every key of the protocol lives under it
  double heartbeat_interval_s = 2.0;  // each node adds 1 to its heartbeat counter this often
  double dead_after_s = 6.0;          // a counter that does not move this long (on the observer's
                                      // own clock) means dead; also the coordinator lease
  int initial_world = 1;              // round 0 forms once this many nodes are queued
  int max_retries = 3;                // a failed round is retried this often, then fallback
  int max_joiners_per_round = 0;      // 0 = admit every queued joiner at a boundary
  std::int64_t outer_steps = 0;  // rounds for outer steps >= this are never formed (0 = no end)
  double admission_timeout_s = 600.0;  // bound on a joiner's wait to appear in a round
  double round_timeout_s = 600.0;      // bound on a member's wait for the next round record
  // Measured bandwidth of the link from -> to between two node ids, for the ring order;
  // null = uniform (ring order = survivors in their previous order, joiners appended by id).
  std::function<double(std::int64_t from, std::int64_t to)> bandwidth_bps;
  // Where the node runs (e.g. the simulated host "us-east-0"), echoed into its node_started
  // record for the plots; "" = not recorded.
  std::string host;
};

// Thread-safety: start/wait_admitted/report/next_round/leave/stop are called by the node's
// main activity; the heartbeat and coordinator activities run on their own.
class ElasticMesh {
 public:
  ElasticMesh(Store& store, Runtime& runtime, EventSink& events, MeshOptions options);
  ~ElasticMesh();
  ElasticMesh(const ElasticMesh&) = delete;
  ElasticMesh& operator=(const ElasticMesh&) = delete;

  // Registers this node and starts its heartbeat and coordinator activities. `node_id` < 0
  // draws a fresh id from the store's counter; a given id must be unused (ConfigError otherwise).
  // Emits node_started, and join_requested unless `initial`. Returns the node id.
  std::int64_t start(bool initial, std::int64_t node_id = -1);
  std::int64_t node_id() const { return id_; }

  // The first round that names this node a member (TimeoutError after admission_timeout_s).
  // Emits `admitted` when the node is one of the round's joiners. When the run ends first, the
  // run's final record (outer_step >= outer_steps), which does not name this node.
  RoundRecord wait_admitted();
  // The barrier before the all-reduce (PRIME's monitored barrier, with liveness): marks this
  // member ready and waits until every member of `r` is. Returns false as soon as a member that
  // is not ready is dead by this node's own observation, or the round was already decided.
  // The wait is bounded by the members' liveness, not by a timeout: a slow member is waited for
  // (so the ring's timeout covers the transfer only), a dead one within dead_after_s.
  bool ready_barrier(const RoundRecord& r);
  // This member's outcome of round `r`: its all-reduce succeeded (true) or not. `blamed`: the
  // members whose chunks it rejected as invalid; the coordinator evicts a blamed member when it
  // is the reporter's ring predecessor (the only peer whose messages the reporter receives).
  void report(const RoundRecord& r, bool ok, const std::vector<std::int64_t>& blamed = {});
  // The record that follows `r` (TimeoutError after round_timeout_s).
  RoundRecord next_round(const RoundRecord& r);
  // Announces a graceful exit before the node's last report, so the coordinator never places
  // the node in another round (a leave costs no retry).
  void announce_leave();
  // Graceful exit: writes the deathrattle so the coordinator drops this node at once, then stops.
  void leave();
  // Stops the activities (no deathrattle). Idempotent.
  void stop();

  bool is_leader();
  const MeshOptions& options() const { return options_; }

  // Store keys (public for tests and tools).
  std::string key_heartbeat(std::int64_t id) const;
  std::string key_left(std::int64_t id) const;
  std::string key_join(std::int64_t id) const;
  std::string key_round(std::uint64_t round) const;
  std::string key_report(std::uint64_t round, std::int64_t id) const;
  std::string key_ready(std::uint64_t round, std::int64_t id) const;

 private:
  struct Seen {
    std::int64_t counter = -1;
    double changed_s = 0.0;  // this node's clock at the read that first saw `counter`
    double read_s = 0.0;     // this node's clock at the latest read of the counter
    bool reported = false;   // `silent` emitted for the current silence (coordinator only)
  };

  void heartbeat_loop();
  void coordinator_loop();
  // Waits until this node holds the coordinator lease; returns false when stopping.
  bool wait_lease();
  void beat_and_lease();
  void observe_heartbeats();
  bool is_dead(std::int64_t id);
  // One resolution attempt; returns false when it should wait before trying again.
  bool resolve_once();
  bool bootstrap();
  std::vector<std::int64_t> queued_joiners();
  std::vector<std::int64_t> ring_order(const std::vector<std::int64_t>& ids);
  bool publish(const RoundRecord& next, const std::vector<std::int64_t>& admitted,
               const std::vector<std::int64_t>& removed_by_allreduce,
               const std::vector<std::int64_t>& removed_by_protocol);
  // Waits on the stop condition; returns true when stopping.
  bool wait_stop(double seconds);
  void emit(const std::string& type, JsonObject fields = {});

  Store& store_;
  Runtime& runtime_;
  EventSink& events_;
  MeshOptions options_;
  std::int64_t id_ = -1;

  std::unique_ptr<Mutex> mu_;
  std::unique_ptr<CondVar> cv_;
  bool stopping_ = false;              // guarded by mu_
  bool leader_ = false;                // guarded by mu_
  bool left_ = false;                  // announce_leave() was called; guarded by mu_
  std::map<std::int64_t, Seen> seen_;  // guarded by mu_
  double observed_s_ = -1e300;         // when seen_ was last refreshed; guarded by mu_
  std::string lease_seen_;             // heartbeat activity only
  double lease_seen_s_ = 0.0;          // heartbeat activity only
  std::unique_ptr<Activity> heartbeat_;
  std::unique_ptr<Activity> coordinator_;
};

}  // namespace meridian
