// ElasticMesh: membership of the nodes of one run through the Store, as written down in
// engine/core/mesh/PROTOCOL.md: unique node ids, liveness leases kept alive by heartbeats, a
// deathrattle, a join queue, a coordinator role held by a leased key that any node can take
// over, watches instead of polling, and one RoundRecord per round of the outer loop.
// Not a transport: the members of a round build their Transport from the record's epoch.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/events/event_sink.h"
#include "engine/core/mesh/round_record.h"
#include "engine/core/process_probe.h"
#include "engine/core/runtime.h"
#include "engine/core/store.h"

namespace meridian {

struct MeshOptions {
  std::string prefix = "mesh/";       // every key of the protocol lives under it
  double heartbeat_interval_s = 2.0;  // each node keeps its liveness lease alive this often
  double dead_after_s = 6.0;          // the lease's time to live: a node whose keepalives stop
                                      // this long (on the store's clock) is dead
  int initial_world = 1;              // round 0 forms once this many nodes are queued
  int max_retries = 3;                // a failed round is retried this often, then fallback
  // ...but a round whose failure includes a member whose connect failed, with nobody removed,
  // is retried until this many attempts in all (nothing was exchanged: retrying is safe, and
  // a stranger on a listening port must not force a fallback).
  int max_connect_retries = 12;
  int max_joiners_per_round = 0;      // 0 = admit every queued joiner at a boundary
  std::int64_t outer_steps = 0;  // rounds for outer steps >= this are never formed (0 = no end)
  std::int64_t first_outer_step = 0;   // the outer step round 0 computes (a resumed run's)
  double admission_timeout_s = 600.0;  // bound on a joiner's wait to appear in a round
  double round_timeout_s = 600.0;      // bound on a member's wait for the next round record
  // A member that sat out this many outer steps in a row because its pseudo-gradient was not
  // finite (the non-finite guard's `abstain`) is evicted at the next step boundary, with the
  // events `nonfinite` (action `evict`) and `fail_detected` (by `nonfinite`); 0 = never. A step
  // in which it contributed resets its count. The last members are never all evicted.
  int nonfinite_evict_after = 3;
  // Measured bandwidth of the link from -> to between two node ids, for the ring order;
  // null = uniform (ring order = survivors in their previous order, joiners appended by id).
  std::function<double(std::int64_t from, std::int64_t to)> bandwidth_bps;
  // Where the node runs (e.g. the simulated host "us-east-0"), echoed into its node_started
  // record for the plots; "" = not recorded.
  std::string host;
  // Process liveness asked of the operating system (engine/core/process_probe.h), beside the
  // lease; it must outlive the mesh. null = the lease alone (simulation, in-process runs).
  // With one, each node publishes where its process answers, and the coordinator ends the
  // lease of a member or joiner whose process answered there once and now refuses
  // (PROTOCOL.md, "A crashed process is refused at once").
  ProcessProbe* probe = nullptr;
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
  // `fragment` >= 0: the barrier of that fragment's sync within the round (streaming DiLoCo),
  // a key space of its own beside the round's.
  bool ready_barrier(const RoundRecord& r, int fragment = -1);
  // For a member that will not reach the barrier of `r` (its connect failed): marks it there,
  // so members that connected do not wait for it while it is alive. They pass the barrier and
  // their ring fails at once on its closed connections (the round is then retried as usual).
  void skip_barrier(const RoundRecord& r, int fragment = -1);
  // Why waiting for the other members of round `r` to connect can no longer succeed, or ""
  // while it still can: a member dead by its lease or gone by its deathrattle, a member that
  // already reported `r` (its connect failed: it will not come), or the round decided without
  // this node (the next record exists). One look at the store (three lists and a read). Safe
  // from any of the node's activities.
  std::string waiting_is_futile(const RoundRecord& r);
  // Why node `who` is gone ("its lease ended", "left the run"), or "" while it is alive.
  std::string gone(std::int64_t who);
  // Why a member of `r` other than this node is gone, or "" while all are alive (one look).
  std::string members_gone(const RoundRecord& r);
  // This member's outcome of round `r`: its all-reduce succeeded (true) or not. `blamed`: the
  // members whose chunks it rejected as invalid; the coordinator evicts a blamed member when it
  // is the reporter's ring predecessor (the only peer whose messages the reporter receives).
  // `abstain`: this member's pseudo-gradient was not finite (it did not send it): the round is
  // retried with this member in the record's `abstain` list, so that the others average
  // without it, and it stays a member.
  // `unconnected`: this member's transports for `r` never connected (see max_connect_retries).
  void report(const RoundRecord& r, bool ok, const std::vector<std::int64_t>& blamed = {},
              bool abstain = false, bool unconnected = false);
  // The record that follows `r` (TimeoutError after round_timeout_s).
  RoundRecord next_round(const RoundRecord& r);
  // Announces a graceful exit before the node's last report, so the coordinator never places
  // the node in another round (a leave costs no retry): the deathrattle is written, and that
  // report says `;leave` (the coordinator may have read left/ before the deathrattle existed).
  void announce_leave();
  // Graceful exit: writes the deathrattle so the coordinator drops this node at once, then stops.
  void leave();
  // Stops the activities and ends the node's lease (no deathrattle); a lease the store cannot
  // be told about (it is unreachable) runs out by itself. Idempotent.
  void stop();

  bool is_leader();
  const MeshOptions& options() const { return options_; }

  // Store keys (public for tests and tools).
  std::string key_heartbeat(std::int64_t id) const;
  std::string key_left(std::int64_t id) const;
  std::string key_join(std::int64_t id) const;
  std::string key_probe(std::int64_t id) const;
  std::string key_wake(std::int64_t id) const;
  std::string key_round(std::uint64_t round) const;
  std::string key_report(std::uint64_t round, std::int64_t id) const;
  // The prefix of round `round`'s ready keys: ready/<round>/, or ready/<round>/f<fragment>/
  // for a fragment's barrier (collect_rounds() erases both by their round).
  std::string ready_prefix(std::uint64_t round, int fragment) const;

 private:
  // Who is alive, in one look at the store: a node is dead once its lease key is gone or it
  // wrote its deathrattle.
  struct Liveness {
    std::set<std::int64_t> alive;  // ids whose hb/ key (attached to their lease) exists
    std::set<std::int64_t> left;   // ids with a left/ key
    bool dead(std::int64_t id) const { return left.count(id) || !alive.count(id); }
  };

  void heartbeat_loop();
  // A new lease with this node's hb/ key attached; `requeue`: and the join key again while the
  // node is still queued.
  void register_lease(bool requeue);
  // Writes this node's join key, attached to its lease.
  void queue_join();
  void coordinator_loop();
  // Takes or keeps the coordinator role (the leader key, attached to this node's lease);
  // returns whether this node holds it.
  bool hold_leadership();
  Liveness observe();
  // Dead by `live`; this node counts itself dead only once it announced its leave.
  bool is_dead(const Liveness& live, std::int64_t id);
  std::string gone_by(const Liveness& live, std::int64_t who);
  // One resolution attempt; returns false when it should wait for a change before trying again.
  bool resolve_once();
  bool bootstrap();
  std::vector<std::int64_t> queued_joiners(const Liveness& live);
  std::vector<std::int64_t> ring_order(const std::vector<std::int64_t>& ids);
  // Writes `next` (compare-and-set from absent) and, when this node wrote it, collects what no
  // node can need any more (PROTOCOL.md, "Store size"). `removed_by_nonfinite`: evicted by the
  // non-finite rule at this record (a step boundary); `forget_left`: deathrattles of nodes whose
  // lease has ended and that no record since names.
  bool publish(const RoundRecord& next, const std::vector<std::int64_t>& admitted,
               const std::vector<std::int64_t>& removed_by_allreduce,
               const std::vector<std::int64_t>& removed_by_protocol,
               const std::vector<std::int64_t>& removed_by_nonfinite = {},
               const std::vector<std::int64_t>& forget_left = {});
  // Erases records, reports and ready keys of rounds below `first_kept`, whichever coordinator
  // missed them (a publish that lost its race, a catch-up after a handover).
  void collect_rounds(std::uint64_t first_kept);
  // The heartbeat activity's wait for stop(); returns true when stopping.
  bool wait_stop(double seconds);
  void emit(const std::string& type, JsonObject fields = {});
  // The process probe (options_.probe), coordinator activity only. Probes node `id` at the
  // address it published (probe/<id>): an answer is remembered with its lease; a refusal at an
  // address that answered under the same lease ends that lease (its keys go, everyone waiting
  // on the node wakes) and returns true. Anything else returns false.
  bool probe_gone(std::int64_t id);
  // Probes the live members that have not reported the current round (`waiting_for`), each at
  // most once per heartbeat interval; returns when the coordinator should look again (infinity
  // when there is nothing to probe on a timer).
  double probe_missing(const std::vector<std::int64_t>& waiting_for);
  // For a node that does not hold the coordinator role: probes the holder's process when due
  // (once per heartbeat interval), so that a crashed coordinator is replaced at once rather
  // than after its lease; returns when to probe next (infinity without a probe).
  double probe_coordinator();

  Store& store_;
  Runtime& runtime_;
  EventSink& events_;
  MeshOptions options_;
  std::int64_t id_ = -1;

  std::unique_ptr<Mutex> mu_;
  bool stopping_ = false;              // guarded by mu_
  // The heartbeat activity's wait has its own mutex: under simulation a waiter holds its mutex
  // until it has paid the round trips it owes, and the node's other activities must never wait
  // for a keepalive's reply (real threads do not).
  std::unique_ptr<Mutex> beat_mu_;
  std::unique_ptr<CondVar> beat_cv_;
  bool beat_stop_ = false;  // guarded by beat_mu_
  bool leader_ = false;                // guarded by mu_
  bool left_ = false;                  // announce_leave() was called; guarded by mu_
  std::atomic<std::int64_t> lease_{0};       // this node's liveness lease (0: none)
  bool admitted_ = false;                    // named in a round record; guarded by mu_
  std::set<std::int64_t> seen_alive_;        // coordinator activity only
  std::set<std::int64_t> reported_silent_;  // coordinator activity only
  // The process probe's memory, coordinator activity only: per node, the "lease@address" it
  // published when it last answered, and when it may be probed next.
  std::map<std::int64_t, std::string> answered_;
  std::map<std::int64_t, double> next_probe_s_;
  // When resolve_once last asked to be woken for a probe (infinity: not at all).
  double probe_wake_s_ = std::numeric_limits<double>::infinity();
  // Who held the coordinator role when hold_leadership() last read it, if another node did
  // (coordinator activity only; start() calls hold_leadership() before that activity exists).
  std::optional<std::int64_t> holder_seen_;
  std::unique_ptr<Activity> heartbeat_;
  std::unique_ptr<Activity> coordinator_;
};

}  // namespace meridian
