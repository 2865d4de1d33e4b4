// ElasticMesh implementation. The protocol itself is described in engine/core/mesh/PROTOCOL.md.
#include "engine/core/mesh/elastic_mesh.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/mesh/ring_order.h"

namespace meridian {
namespace {

// v in decimal, zero-padded to 12 digits (more if it needs them), so keys sort by number.
std::string padded(std::uint64_t v) {
  std::string s = std::to_string(v);
  if (s.size() < 12) s.insert(0, 12 - s.size(), '0');
  return s;
}

std::optional<std::int64_t> parse_i64(const std::string& s) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Rounds whose record, reports and ready keys stay in the store: the newest and the two before
// it. A member is at most one round behind the newest record (a record needs every live
// member's report of the round before), a queued joiner that finds a record collected jumps to
// `latest` (wait_admitted).
constexpr std::uint64_t kRoundsKept = 3;

// Bound of one watch: nothing but a change wakes the activities (stop() ends the lease, a
// change they watch); the bound only keeps each wait finite for the Runtimes.
constexpr double kWatchSliceS = 3600.0;

std::string ids_text(const std::vector<std::int64_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// The ids after ";blame=" in a report ("fail;blame=[3,5]"); none when absent or malformed (a
// report is advisory: a garbled blame costs nobody their place).
std::vector<std::int64_t> blamed_in_report(const std::string& report) {
  const std::string key = ";blame=[";
  const auto at = report.find(key);
  if (at == std::string::npos || report.back() != ']') return {};
  std::vector<std::int64_t> ids;
  const char* p = report.data() + at + key.size();
  const char* const end = report.data() + report.size() - 1;  // the ']'
  while (p < end) {
    std::int64_t id = 0;
    const auto [next, ec] = std::from_chars(p, end, id);
    if (ec != std::errc() || (next != end && *next != ',')) return {};
    ids.push_back(id);
    p = next == end ? end : next + 1;
  }
  return ids;
}

// Whether a report's flags (before any ";blame=") hold `flag` (";leave", ";unconnected").
bool report_has_flag(const std::string& report, const std::string& flag) {
  const std::string flags = report.substr(0, report.find(";blame="));
  return flags.find(flag) != std::string::npos;
}

// A report of a member that announced its leave ("ok;leave", "fail;abstain;leave;blame=[..]").
bool report_says_leave(const std::string& report) { return report_has_flag(report, ";leave"); }

// What a round's reports say (resolve_once): who goes on and who is removed, and how it went.
struct RoundReports {
  std::vector<std::int64_t> survivors, removed, blamed, abstain;
  bool missing = false;      // a live member has not reported yet
  std::vector<std::int64_t> waiting_for;  // those members
  bool any_fail = false;     // a member's all-reduce failed
  bool unconnected = false;  // a member's transports never connected
};

// Reads the reports of `cur`'s members: `report(m)` is member m's report (none yet: nullopt),
// `dead_by_mesh(m)` whether the mesh counts m dead. A member that announced its leave is removed
// like a dead one, and so is one its ring successor blamed for invalid chunks.
RoundReports read_reports(const RoundRecord& cur,
                          const std::function<std::optional<std::string>(std::int64_t)>& report,
                          const std::function<bool(std::int64_t)>& dead_by_mesh) {
  RoundReports out;
  for (std::size_t i = 0; i < cur.members.size(); ++i) {
    const std::int64_t m = cur.members[i];
    const auto rep = report(m);
    const bool dead = dead_by_mesh(m) || (rep && report_says_leave(*rep));
    if (rep) {
      out.any_fail = out.any_fail || rep->substr(0, rep->find(';')) != "ok";
      if (rep->find(";abstain") != std::string::npos) out.abstain.push_back(m);
      out.unconnected = out.unconnected || report_has_flag(*rep, ";unconnected");
      // A member can only vouch for what it received, i.e. from its ring predecessor: a blame of
      // anybody else is ignored, so one faulty node can cost at most its predecessor's place.
      const std::int64_t pred = cur.members[(i + cur.members.size() - 1) % cur.members.size()];
      for (std::int64_t b : blamed_in_report(*rep))
        if (b == pred && pred != m && std::count(out.blamed.begin(), out.blamed.end(), b) == 0)
          out.blamed.push_back(b);
      (dead ? out.removed : out.survivors).push_back(m);
    } else if (dead) {
      out.removed.push_back(m);
    } else {
      out.missing = true;
      out.waiting_for.push_back(m);
    }
  }
  // Members whose chunks failed validation are cut off like dead ones.
  for (std::int64_t b : out.blamed) {
    const auto it = std::find(out.survivors.begin(), out.survivors.end(), b);
    if (it == out.survivors.end()) continue;  // already removed (dead)
    out.survivors.erase(it);
    out.removed.push_back(b);
  }
  return out;
}

// The non-finite rule: at an outer-step boundary each survivor's count of steps in a row that it
// sat out moves on (a step it contributed to resets it); one that reached `evict_after` (> 0) is
// evicted, never all of them. A retry carries the counts unchanged. Writes next.nonfinite_steps,
// moves the evicted from rep.survivors to rep.removed and returns them.
std::vector<std::int64_t> apply_nonfinite_rule(const RoundRecord& cur, bool retry, int evict_after,
                                               RoundReports& rep, RoundRecord& next) {
  std::vector<std::int64_t> evicted;
  for (std::int64_t m : rep.survivors) {
    const int before = cur.nonfinite_steps_of(m);
    const bool sat_out =
        std::count(rep.abstain.begin(), rep.abstain.end(), m) > 0 || cur.abstains(m);
    const int n = retry ? before : sat_out ? before + 1 : 0;
    if (!retry && evict_after > 0 && n >= evict_after)
      evicted.push_back(m);
    else if (n > 0)
      next.nonfinite_steps.emplace_back(m, n);
  }
  if (evicted.size() == rep.survivors.size()) {  // never all of them: the run would end here
    for (std::int64_t m : evicted) next.nonfinite_steps.emplace_back(m, evict_after);
    evicted.clear();
  }
  std::sort(next.nonfinite_steps.begin(), next.nonfinite_steps.end());
  for (std::int64_t m : evicted) {
    rep.survivors.erase(std::find(rep.survivors.begin(), rep.survivors.end(), m));
    rep.removed.push_back(m);
  }
  return evicted;
}

// next.prev and next.reason: committed, retried or fallen back, and why; who was evicted.
void describe_outcome(const RoundRecord& cur, const RoundReports& rep, bool retry,
                      const std::vector<std::int64_t>& evicted, int evict_after,
                      RoundRecord& next) {
  if (!rep.any_fail) {
    next.prev = RoundPrev::kCommit;
  } else {
    next.prev = retry ? RoundPrev::kRetry : RoundPrev::kFallback;
    next.reason = "allreduce failed in epoch " + std::to_string(cur.epoch) + " attempt " +
                  std::to_string(cur.attempt) + ", removed " + ids_text(rep.removed);
    if (rep.unconnected) next.reason += ", a member's connections failed";
    if (!rep.abstain.empty())
      next.reason += ", non-finite pseudo-gradient on " + ids_text(rep.abstain);
  }
  if (!evicted.empty())
    next.reason += std::string(next.reason.empty() ? "" : "; ") + "evicted " + ids_text(evicted) +
                   ": non-finite pseudo-gradient in " + std::to_string(evict_after) +
                   " outer steps in a row";
}

}  // namespace

ElasticMesh::ElasticMesh(Store& store, Runtime& runtime, EventSink& events, MeshOptions options)
    : store_(store),
      runtime_(runtime),
      events_(events),
      options_(std::move(options)),
      mu_(runtime.make_mutex()),
      beat_mu_(runtime.make_mutex()),
      beat_cv_(runtime.make_condvar()) {
  if (options_.heartbeat_interval_s <= 0 || options_.dead_after_s <= options_.heartbeat_interval_s)
    throw ConfigError("mesh: need 0 < heartbeat_interval_s < dead_after_s");
  if (options_.initial_world < 1) throw ConfigError("mesh: initial_world must be >= 1");
  if (options_.max_retries < 0) throw ConfigError("mesh: max_retries must be >= 0");
  if (options_.nonfinite_evict_after < 0)
    throw ConfigError("mesh: nonfinite_evict_after must be >= 0 (0 = never)");
}

ElasticMesh::~ElasticMesh() { stop(); }

std::string ElasticMesh::key_heartbeat(std::int64_t id) const {
  return options_.prefix + "hb/" + std::to_string(id);
}
std::string ElasticMesh::key_left(std::int64_t id) const {
  return options_.prefix + "left/" + std::to_string(id);
}
std::string ElasticMesh::key_join(std::int64_t id) const {
  return options_.prefix + "join/" + padded(static_cast<std::uint64_t>(id));
}
std::string ElasticMesh::key_wake(std::int64_t id) const {
  return options_.prefix + "wake/" + std::to_string(id);
}
std::string ElasticMesh::key_probe(std::int64_t id) const {
  return options_.prefix + "probe/" + std::to_string(id);
}
std::string ElasticMesh::key_round(std::uint64_t round) const {
  return options_.prefix + "round/" + padded(round);
}
std::string ElasticMesh::key_report(std::uint64_t round, std::int64_t id) const {
  return options_.prefix + "report/" + padded(round) + "/" + std::to_string(id);
}

std::string ElasticMesh::ready_prefix(std::uint64_t round, int fragment) const {
  return options_.prefix + "ready/" + padded(round) + "/" +
         (fragment >= 0 ? "f" + std::to_string(fragment) + "/" : "");
}

void ElasticMesh::emit(const std::string& type, JsonObject fields) {
  events_.emit(Event{runtime_.now_s(), id_, type, std::move(fields)});
}

std::int64_t ElasticMesh::start(bool initial, std::int64_t node_id) {
  MERIDIAN_CHECK(!heartbeat_);
  // An id is claimed by compare-and-set from absent with a value unique to this claim, so a
  // second claimant sees someone else's value and fails.
  const std::string claim = options_.prefix + "id/";
  const std::string token = "claim-" + std::to_string(store_.add(options_.prefix + "claims", 1));
  const auto claimed = [&](std::int64_t id) {
    return store_.compare_set(claim + std::to_string(id), std::nullopt, token) == token;
  };
  if (node_id >= 0) {
    if (!claimed(node_id))
      throw ConfigError("mesh: node id " + std::to_string(node_id) + " is already in use");
  } else {
    do {
      node_id = store_.add(options_.prefix + "next_id", 1);
    } while (!claimed(node_id));
  }
  id_ = node_id;
  register_lease(false);
  JsonObject started;
  started.add("initial", initial);
  if (!options_.host.empty()) started.add("host", options_.host);
  emit("node_started", started);
  if (!initial) emit("join_requested");
  queue_join();
  hold_leadership();  // the first node to start holds the role from the start
  heartbeat_ =
      runtime_.spawn("mesh-heartbeat-" + std::to_string(id_), [this] { heartbeat_loop(); });
  coordinator_ =
      runtime_.spawn("mesh-coordinator-" + std::to_string(id_), [this] { coordinator_loop(); });
  return id_;
}

void ElasticMesh::register_lease(bool requeue) {
  // Liveness: a lease that the heartbeat activity keeps alive, with the node's hb/ key attached:
  // the key is gone (a change watchers see) once the keepalives stop for dead_after_s.
  lease_ = store_.lease_grant(options_.dead_after_s);
  store_.compare_set_leased(key_heartbeat(id_), std::nullopt, "1", lease_);
  // Where this process answers, with the lease a refusal there would end (probe_gone).
  if (options_.probe) {
    store_.compare_set_leased(key_probe(id_), std::nullopt,
                              std::to_string(lease_.load()) + "@" + options_.probe->address(),
                              lease_);
  }
  bool queued;
  {
    LockGuard lock(*mu_);
    queued = !admitted_ && !left_;  // a node that announced its leave never queues again
  }
  // The join key ended with the old lease: a node still queued queues again.
  if (queued && requeue) queue_join();
}

void ElasticMesh::queue_join() {
  // Attached to the node's lease, so that the store erases the entry of a joiner that dies while
  // queued (PROTOCOL.md, "Store size"); a node that renews its lease queues again.
  store_.compare_set_leased(key_join(id_), std::nullopt, std::to_string(id_), lease_);
}

bool ElasticMesh::wait_stop(double seconds) {
  LockGuard lock(*beat_mu_);
  const double deadline_s = runtime_.now_s() + seconds;
  while (!beat_stop_) {
    const double left_s = deadline_s - runtime_.now_s();
    if (left_s <= 0) break;
    beat_cv_->wait_for(*beat_mu_, left_s);
  }
  return beat_stop_;
}

void ElasticMesh::stop() {
  {
    LockGuard lock(*mu_);
    stopping_ = true;
    leader_ = false;
  }
  {
    LockGuard lock(*beat_mu_);
    beat_stop_ = true;
    beat_cv_->notify_all();
  }
  // Errors of the activities (a store that died with the node) end them; nothing to report.
  const auto join = [](std::unique_ptr<Activity>& a) {
    if (!a) return;
    try {
      a->join();
    } catch (const Error&) {
    }
    a.reset();
  };
  join(heartbeat_);  // no new lease after this
  // Ending the lease erases this node's keys: the others see it gone at once, and the change
  // wakes this node's own coordinator activity from its watch (after stopping_ is set). A lease
  // that had ended already (the store or the process probe ended it while the node ran, before
  // its heartbeat took a new one) changes nothing: its wake key does instead. A crashed node
  // cannot reach the store (a simulated host failure: the store refuses its host's calls while
  // its stack unwinds): its lease runs out, as a real one's would, and its activities end on
  // the store's errors.
  if (const std::int64_t lease = lease_.exchange(0); lease > 0) {
    try {
      if (!store_.lease_revoke(lease)) {
        store_.set(key_wake(id_), "1");
        store_.erase(key_wake(id_));
      }
    } catch (const Error&) {
      // an unreachable store: the lease runs out by itself
    }
  }
  join(coordinator_);
}

void ElasticMesh::announce_leave() {
  store_.set(key_left(id_), "1");
  LockGuard lock(*mu_);
  left_ = true;
}

void ElasticMesh::leave() {
  try {
    store_.set(key_left(id_), "1");
  } catch (const Error&) {
    // best effort: an unreachable store means the node is as good as dead already
  }
  stop();
}

bool ElasticMesh::is_leader() {
  LockGuard lock(*mu_);
  return leader_;
}

void ElasticMesh::heartbeat_loop() {
  // One keepalive of the lease per interval, fixed-rate: the next is due one interval after the
  // previous one was due, not one interval after its round trip (250 ms far from the store).
  // Every wait is at least a tenth of the interval: a beat always yields (under simulation a
  // zero wait would not let the clock move). A store that accounts for the keepalives itself
  // answers "never again" (infinity): this activity then only waits for the node to stop.
  const double interval_s = options_.heartbeat_interval_s;
  double due_s = runtime_.now_s() + interval_s;
  double next_s = interval_s;
  while (!wait_stop(std::isfinite(next_s) ? std::max(interval_s / 10, due_s - runtime_.now_s())
                                          : next_s)) {
    due_s = std::max(due_s + interval_s, runtime_.now_s());
    try {
      next_s = store_.keepalive(lease_, interval_s);
    } catch (const PeerLostError&) {
      return;  // the store is gone for this node: it is dead to the others
    } catch (const TimeoutError&) {
      continue;
    }
    if (next_s < 0) {
      // The store ended the lease although this node runs: its keepalives were held up past
      // dead_after_s (a starved process, a stalled link). The others saw it dead; it comes
      // back with a new lease, as a heartbeat counter that moves again did: if a round removed
      // it meanwhile, the next record evicts it (PROTOCOL.md, "a live node declared dead").
      {
        LockGuard lock(*beat_mu_);
        if (beat_stop_) return;
      }
      try {
        register_lease(true);
      } catch (const PeerLostError&) {
        return;
      } catch (const TimeoutError&) {
      }
      next_s = interval_s;
    }
  }
}

bool ElasticMesh::hold_leadership() {
  // The coordinator role is the key `leader` = "<holder id>", attached to the holder's lease:
  // it is erased when the holder's lease ends (a crash, a stop), and whoever sees it absent
  // takes it by compare-and-set; only one taker wins. A holder that wrote its deathrattle may
  // be taken over at once.
  const std::string key = options_.prefix + "leader";
  const std::string mine = std::to_string(id_);
  bool leader = false;
  holder_seen_.reset();
  {
    LockGuard lock(*mu_);
    if (left_) {  // a node that announced its leave hands the role over (see resolve_once)
      leader_ = false;
      return false;
    }
  }
  if (const auto current = store_.try_get(key); !current) {
    leader = store_.compare_set_leased(key, std::nullopt, mine, lease_) == mine;
  } else if (*current == mine) {
    leader = true;
  } else if (const auto holder = parse_i64(*current); holder) {
    holder_seen_ = *holder;
    if (store_.try_get(key_left(*holder)).has_value())
      leader = store_.compare_set_leased(key, current, mine, lease_) == mine;
  }
  LockGuard lock(*mu_);
  leader_ = leader && !stopping_;
  return leader_;
}

ElasticMesh::Liveness ElasticMesh::observe() {
  // Two reads whatever the number of nodes: the lease keys and the deathrattles.
  Liveness live;
  for (const auto* kind : {"hb/", "left/"}) {
    const std::string prefix = options_.prefix + kind;
    auto& ids = kind[0] == 'h' ? live.alive : live.left;
    for (const std::string& key : store_.list(prefix))
      if (const auto id = parse_i64(key.substr(prefix.size()))) ids.insert(*id);
  }
  return live;
}

bool ElasticMesh::is_dead(const Liveness& live, std::int64_t id) {
  if (id == id_) {
    // A node never sees itself silent; once it announced its leave it counts itself gone (and
    // resolves no round after that: resolve_once).
    LockGuard lock(*mu_);
    return left_;
  }
  return live.dead(id);
}

void ElasticMesh::coordinator_loop() {
  // Wakes on store changes only (a watch), never on a timer: a report, a ready key, a join, a
  // deathrattle, a lease that ended (its key erased), the leader key. A node that does not hold
  // the role watches only what could hand it over.
  const std::vector<std::string> all = {options_.prefix};
  const std::vector<std::string> handover = {options_.prefix + "leader", options_.prefix + "left/",
                                             key_heartbeat(id_), key_wake(id_)};
  try {
    std::uint64_t revision = store_.revision();
    while (true) {
      {
        LockGuard lock(*mu_);
        if (stopping_) return;
      }
      bool progressed = false;
      bool leader = false;
      try {
        leader = hold_leadership();
        progressed = leader && resolve_once();
      } catch (const TimeoutError&) {
      }
      if (!progressed) {
        // Woken by a change, or when a member the process probe watches is due again (the
        // coordinator: the members it waits for; any other node: the coordinator).
        const double wake_s = leader ? probe_wake_s_ : probe_coordinator();
        const double slice_s = std::isfinite(wake_s)
                                   ? std::clamp(wake_s - runtime_.now_s(), 0.01, kWatchSliceS)
                                   : kWatchSliceS;
        revision = store_.watch(leader ? all : handover, revision, slice_s);
      }
    }
  } catch (const PeerLostError&) {
    return;
  }
}

std::vector<std::int64_t> ElasticMesh::queued_joiners(const Liveness& live) {
  const std::string prefix = options_.prefix + "join/";
  std::vector<std::int64_t> ids;
  // Three sessions found this race from three sides (a resume barrier, etcd's slower calls,
  // ThreadSanitizer). `live` may predate the listing: a node that started, or took a new lease
  // and queued again, in between has a join key but no hb/ key in it. A node writes hb/ before
  // join/, so liveness observed after the listing is current for every key listed: a joiner
  // alive by it is counted now. Only a joiner that left is forgotten; one that still looks dead
  // stays queued and is skipped, because erasing its key could strand a node that renews its
  // lease a moment later and never queues again. The key is attached to the joiner's lease: the
  // store erases it when the joiner dies, and the joiner writes it again with its next lease.
  std::optional<Liveness> after;
  for (const std::string& key : store_.list(prefix)) {
    const auto id = parse_i64(key.substr(prefix.size()));
    if (!id) continue;
    if (live.left.count(*id)) {
      store_.erase(key);
      continue;
    }
    if (is_dead(live, *id)) {
      if (!after) after = observe();
      if (is_dead(*after, *id)) continue;
    }
    ids.push_back(*id);
  }
  return ids;  // ascending (keys are zero-padded)
}

std::vector<std::int64_t> ElasticMesh::ring_order(const std::vector<std::int64_t>& ids) {
  if (!options_.bandwidth_bps || ids.size() < 3) return ids;
  BandwidthMatrix bw(ids.size(), std::vector<double>(ids.size(), 0.0));
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = 0; j < ids.size(); ++j)
      if (i != j) bw[i][j] = options_.bandwidth_bps(ids[i], ids[j]);
  std::vector<std::int64_t> out;
  for (int k : bottleneck_ring_order(bw).order) out.push_back(ids[k]);
  return out;
}

bool ElasticMesh::probe_gone(std::int64_t id) {
  if (!options_.probe || id == id_) return false;
  next_probe_s_[id] = runtime_.now_s() + options_.heartbeat_interval_s;
  const auto published = store_.try_get(key_probe(id));
  if (!published) return false;
  const auto at = published->find('@');
  const auto lease = parse_i64(published->substr(0, at));
  if (at == std::string::npos || !lease || *lease <= 0) return false;
  const std::string address = published->substr(at + 1);
  const auto answer = options_.probe->probe(address, std::min(1.0, options_.dead_after_s / 4));
  if (answer == ProcessProbe::Answer::kAnswered) answered_[id] = *published;
  if (answer != ProcessProbe::Answer::kRefused) return false;
  // Only a refusal where the same process answered before: an address that never answered may
  // sit behind a firewall that rejects (its node's lease still decides).
  const auto it = answered_.find(id);
  if (it == answered_.end() || it->second != *published) return false;
  answered_.erase(it);
  next_probe_s_.erase(id);
  reported_silent_.insert(id);  // it was not silent: `silent` would say dead_after_s
  // Several nodes may find the same coordinator gone: the one whose revoke ended the lease says so.
  if (store_.lease_revoke(*lease))
    emit("process_gone", JsonObject().add("node_gone", id).add("address", address));
  return true;
}

double ElasticMesh::probe_coordinator() {
  // The role's key lives as long as its holder's lease, so a crashed coordinator would keep it
  // for a whole lease while every member waits for a record only it writes. Each other node
  // probes the holder's process once per heartbeat interval; a refusal where it answered before
  // ends the holder's lease (probe_gone), which erases the key and wakes the handover watch.
  // The holder is the one hold_leadership() read just before (no second read of `leader`), and
  // its timer is probe_gone's, as for the members the coordinator waits for; unlike those, it is
  // probed on the timer whether or not it answered, as nothing else wakes a handover watch.
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (!options_.probe || !holder_seen_ || *holder_seen_ == id_) return kNever;
  const std::int64_t holder = *holder_seen_;
  if (const auto due = next_probe_s_.find(holder);
      due == next_probe_s_.end() || runtime_.now_s() >= due->second) {
    if (probe_gone(holder)) return kNever;  // its lease ended: `leader` is erased, a change
  }
  return next_probe_s_.at(holder);
}

double ElasticMesh::probe_missing(const std::vector<std::int64_t>& waiting_for) {
  double wake_s = std::numeric_limits<double>::infinity();
  if (!options_.probe) return wake_s;
  for (const std::int64_t m : waiting_for) {
    if (m == id_) continue;
    const auto due = next_probe_s_.find(m);
    if ((due == next_probe_s_.end() || runtime_.now_s() >= due->second) && probe_gone(m)) continue;
    // Only a member that answered is probed on a timer; the others when something else wakes
    // the coordinator.
    if (answered_.count(m)) wake_s = std::min(wake_s, next_probe_s_[m]);
  }
  return wake_s;
}

bool ElasticMesh::bootstrap() {
  std::vector<std::int64_t> queued = queued_joiners(observe());
  // Probed once each, so that a refusal later means their process is gone (probe_gone).
  std::erase_if(queued, [&](std::int64_t id) { return probe_gone(id); });
  if (static_cast<int>(queued.size()) < options_.initial_world) return false;
  RoundRecord first;
  first.round = 0;
  first.epoch = 0;
  first.outer_step = options_.first_outer_step;
  first.prev = RoundPrev::kStart;
  first.members = ring_order(queued);
  return publish(first, queued, {}, {});
}

bool ElasticMesh::publish(const RoundRecord& next, const std::vector<std::int64_t>& admitted,
                          const std::vector<std::int64_t>& removed_by_allreduce,
                          const std::vector<std::int64_t>& removed_by_protocol,
                          const std::vector<std::int64_t>& removed_by_nonfinite,
                          const std::vector<std::int64_t>& forget_left) {
  // Why each removed node went, decided before the record is out: once it is, an evicted node
  // may read it, stop and write its deathrattle before we would look.
  std::vector<const char*> why;
  for (std::int64_t gone : next.removed) {
    const bool rattled = store_.try_get(key_left(gone)).has_value();
    const bool by_allreduce =
        std::count(removed_by_allreduce.begin(), removed_by_allreduce.end(), gone) > 0;
    const bool by_protocol =
        std::count(removed_by_protocol.begin(), removed_by_protocol.end(), gone) > 0;
    const bool by_nonfinite =
        std::count(removed_by_nonfinite.begin(), removed_by_nonfinite.end(), gone) > 0;
    why.push_back(rattled        ? "deathrattle"
                  : by_protocol  ? "protocol"
                  : by_nonfinite ? "nonfinite"
                  : by_allreduce ? "allreduce"
                                 : "heartbeat");
  }
  const std::string text = next.encode();
  if (store_.compare_set(key_round(next.round), std::nullopt, text) != text) return true;  // lost
  store_.set(options_.prefix + "latest", std::to_string(next.round));
  for (std::int64_t j : admitted) store_.erase(key_join(j));
  for (std::int64_t gone : next.removed) store_.erase(key_heartbeat(gone));  // no longer watched
  for (std::int64_t m : removed_by_nonfinite)  // at a step boundary: it sat out the last step
    emit("nonfinite", JsonObject()
                          .add("outer_step", next.outer_step - 1)
                          .add("faulty", m)
                          .add("detected_by", "coordinator")
                          .add("action", "evict")
                          .add("steps", options_.nonfinite_evict_after));
  for (std::size_t i = 0; i < next.removed.size(); ++i)
    emit("fail_detected", JsonObject().add("failed", next.removed[i]).add("by", why[i]));
  // Keep the last few rounds; older reports and records are garbage.
  if (next.round >= kRoundsKept) collect_rounds(next.round - kRoundsKept + 1);
  for (std::int64_t gone : forget_left) store_.erase(key_left(gone));
  return true;
}

void ElasticMesh::collect_rounds(std::uint64_t first_kept) {
  // One listing per kind: the few rounds kept, plus whatever an earlier coordinator missed.
  for (const char* kind : {"round/", "report/", "ready/"}) {
    const std::string prefix = options_.prefix + kind;
    for (const std::string& key : store_.list(prefix)) {
      const std::string rest = key.substr(prefix.size());
      const auto round = parse_i64(rest.substr(0, rest.find('/')));
      if (round && *round >= 0 && static_cast<std::uint64_t>(*round) < first_kept)
        store_.erase(key);
    }
  }
}

bool ElasticMesh::resolve_once() {
  const auto latest_text = store_.try_get(options_.prefix + "latest");
  if (!latest_text) return bootstrap();
  const auto latest = parse_i64(*latest_text);
  if (!latest) throw ProtocolError("mesh: 'latest' is not an integer: " + *latest_text);
  const auto r = static_cast<std::uint64_t>(*latest);
  if (store_.try_get(key_round(r + 1))) {  // written by a previous leader: catch up
    store_.set(options_.prefix + "latest", std::to_string(r + 1));
    return true;
  }
  const RoundRecord cur = RoundRecord::decode(store_.get(key_round(r), 1.0));
  if (options_.outer_steps > 0 && cur.outer_step >= options_.outer_steps) return false;
  const Liveness live = observe();
  // `silent`: once per node whose lease ran out without a deathrattle, when the coordinator
  // first sees it (as distinct from fail_detected, when a round record removes it).
  for (const std::int64_t id : cur.members) seen_alive_.insert(id);
  for (auto it = seen_alive_.begin(); it != seen_alive_.end();) {
    const std::int64_t id = *it;
    if (live.alive.count(id) || id == id_) {
      ++it;
      continue;
    }
    it = seen_alive_.erase(it);
    if (live.left.count(id) || !reported_silent_.insert(id).second) continue;
    emit("silent", JsonObject().add("node_silent", id).add("silent_s", options_.dead_after_s));
  }
  seen_alive_.insert(live.alive.begin(), live.alive.end());

  RoundReports rep = read_reports(
      cur, [&](std::int64_t m) { return store_.try_get(key_report(r, m)); },
      [&](std::int64_t m) { return is_dead(live, m); });
  if (rep.missing) {  // a report or a lease's end will wake the coordinator (or a probe's timer)
    probe_wake_s_ = probe_missing(rep.waiting_for);
    return false;
  }
  probe_wake_s_ = std::numeric_limits<double>::infinity();
  if (rep.survivors.empty()) return false;  // nobody left to continue (or to recover from)

  RoundRecord next;
  next.round = r + 1;
  // A round whose connect failed with every member alive exchanged nothing: it is retried
  // beyond max_retries (a stranger that wins Gloo's accept race fails epochs, and must not
  // drive the members into a fallback that sets their parameters apart), up to
  // max_connect_retries attempts in all.
  const bool retry =
      rep.any_fail &&
      (cur.attempt < options_.max_retries ||
       (rep.unconnected && rep.removed.empty() && cur.attempt < options_.max_connect_retries));
  const int evict_after = options_.nonfinite_evict_after;
  const std::vector<std::int64_t> evicted =
      apply_nonfinite_rule(cur, retry, evict_after, rep, next);
  next.removed = rep.removed;
  describe_outcome(cur, rep, retry, evicted, evict_after, next);
  next.outer_step = retry ? cur.outer_step : cur.outer_step + 1;
  next.attempt = retry ? cur.attempt + 1 : 0;
  std::vector<std::int64_t> admitted;
  const bool last = options_.outer_steps > 0 && next.outer_step >= options_.outer_steps;
  if (!retry && !last) {  // nobody serves a recovery in the run's final record
    for (std::int64_t j : queued_joiners(live)) {
      if (std::count(cur.members.begin(), cur.members.end(), j)) continue;
      if (options_.max_joiners_per_round > 0 &&
          static_cast<int>(admitted.size()) >= options_.max_joiners_per_round)
        break;
      // Probed before its admission: a joiner whose process is gone is not admitted (its lease
      // is ended), and one that answers can be found gone at once if it dies after.
      if (probe_gone(j)) continue;
      admitted.push_back(j);
    }
  }
  std::vector<std::int64_t> members = rep.survivors;
  members.insert(members.end(), admitted.begin(), admitted.end());
  const bool changed = members != cur.members;
  next.members = changed ? ring_order(members) : cur.members;
  next.joiners = admitted;
  // A retry keeps those that sat out (their pseudo-gradient is still the one they withheld).
  if (retry) {
    std::vector<std::int64_t>& abstain = rep.abstain;
    for (std::int64_t m : cur.abstain)
      if (std::count(abstain.begin(), abstain.end(), m) == 0) abstain.push_back(m);
    for (std::int64_t m : next.members)
      if (std::count(abstain.begin(), abstain.end(), m)) next.abstain.push_back(m);
  }
  if (!admitted.empty()) next.sources = rep.survivors;
  next.epoch = (changed || rep.any_fail) ? cur.epoch + 1 : cur.epoch;
  {
    // A node that announced its leave writes no record: the others take the role when they see
    // its deathrattle, and a record that it and its taker both wrote would be the same text, so
    // both would count themselves its writer (`fail_detected` twice). The check comes after the
    // reads: a leaver's last round resolves only with its report or with it dead by is_dead(),
    // and both follow left_.
    LockGuard lock(*mu_);
    if (left_) return false;
  }
  // Deathrattles no node can need: the node's lease has ended (its hb/ key is gone, so it is
  // dead without its left/ key, and it never queues again: register_lease) and neither this
  // round nor the next names it.
  std::vector<std::int64_t> forget_left;
  for (std::int64_t id : live.left)
    if (!live.alive.count(id) && cur.rank_of(id) < 0 && next.rank_of(id) < 0)
      forget_left.push_back(id);
  return publish(next, admitted, rep.any_fail ? rep.removed : std::vector<std::int64_t>{},
                 rep.blamed, evicted, forget_left);
}

RoundRecord ElasticMesh::wait_admitted() {
  const double deadline_s = runtime_.now_s() + options_.admission_timeout_s;
  std::uint64_t cursor = 0;
  if (const auto latest = store_.try_get(options_.prefix + "latest"))
    cursor = static_cast<std::uint64_t>(parse_i64(*latest).value_or(0));
  while (true) {
    const double left_s = deadline_s - runtime_.now_s();
    if (left_s <= 0)
      throw TimeoutError("mesh: node " + std::to_string(id_) + " not admitted within " +
                         std::to_string(options_.admission_timeout_s) + " s");
    std::optional<std::string> text;
    try {
      text = store_.get(key_round(cursor), std::min(left_s, options_.heartbeat_interval_s));
    } catch (const TimeoutError&) {
      // The record may have been collected while we were behind: jump to the latest.
      if (const auto latest = store_.try_get(options_.prefix + "latest"))
        cursor = std::max(cursor, static_cast<std::uint64_t>(parse_i64(*latest).value_or(0)));
      continue;
    }
    const RoundRecord rec = RoundRecord::decode(*text);
    if (rec.rank_of(id_) >= 0) {
      {
        LockGuard lock(*mu_);
        admitted_ = true;
      }
      if (rec.is_joiner(id_))
        emit("admitted", JsonObject().add("epoch", rec.epoch).add("outer_step", rec.outer_step));
      return rec;
    }
    // The run's final record (no round follows it) without this node: the run ended before a
    // boundary could admit it. Waiting on would wait for a record that is never written.
    if (options_.outer_steps > 0 && rec.outer_step >= options_.outer_steps) return rec;
    ++cursor;
  }
}

bool ElasticMesh::ready_barrier(const RoundRecord& r, int fragment) {
  const std::string ready = ready_prefix(r.round, fragment);
  store_.set(ready + std::to_string(id_), "1");
  // Wakes on what can end the wait: a ready key, a lease's end, a deathrattle, the next record.
  const std::vector<std::string> watched = {ready, options_.prefix + "hb/",
                                            options_.prefix + "left/", key_round(r.round + 1)};
  std::uint64_t revision = store_.revision();
  while (true) {
    std::set<std::int64_t> in;
    for (const std::string& key : store_.list(ready))
      if (const auto id = parse_i64(key.substr(ready.size()))) in.insert(*id);
    std::vector<std::int64_t> missing;
    for (std::int64_t m : r.members)
      if (m != id_ && !in.count(m)) missing.push_back(m);
    if (missing.empty()) return true;
    const Liveness live = observe();
    for (std::int64_t m : missing)
      if (is_dead(live, m)) return false;
    if (store_.try_get(key_round(r.round + 1))) return false;  // decided without us
    {
      LockGuard lock(*mu_);
      if (stopping_) throw PeerLostError(-1, "mesh: node stopped in the barrier");
    }
    revision = store_.watch(watched, revision, kWatchSliceS);
  }
}

void ElasticMesh::skip_barrier(const RoundRecord& r, int fragment) {
  store_.set(ready_prefix(r.round, fragment) + std::to_string(id_), "skipped");
}

std::string ElasticMesh::gone(std::int64_t who) {
  const Liveness live = observe();
  return gone_by(live, who);
}

std::string ElasticMesh::gone_by(const Liveness& live, std::int64_t who) {
  if (who == id_) return "";
  if (live.left.count(who)) return "node " + std::to_string(who) + " left the run";
  if (!live.alive.count(who)) return "node " + std::to_string(who) + "'s lease ended";
  return "";
}

std::string ElasticMesh::members_gone(const RoundRecord& r) {
  const Liveness live = observe();
  for (std::int64_t m : r.members)
    if (std::string why = gone_by(live, m); !why.empty()) return why;
  return "";
}

std::string ElasticMesh::waiting_is_futile(const RoundRecord& r) {
  const Liveness live = observe();
  const std::string reports = options_.prefix + "report/" + padded(r.round) + "/";
  std::set<std::int64_t> reported;
  for (const std::string& key : store_.list(reports))
    if (const auto id = parse_i64(key.substr(reports.size()))) reported.insert(*id);
  for (std::int64_t m : r.members) {
    if (m == id_) continue;
    if (std::string why = gone_by(live, m); !why.empty()) return why;
    if (reported.count(m))
      return "node " + std::to_string(m) + " already reported round " + std::to_string(r.round);
  }
  if (store_.try_get(key_round(r.round + 1)))
    return "round " + std::to_string(r.round) + " was decided without this node";
  return "";
}

void ElasticMesh::report(const RoundRecord& r, bool ok, const std::vector<std::int64_t>& blamed,
                         bool abstain, bool unconnected) {
  std::string value = ok && !abstain ? "ok" : "fail";
  if (abstain) value += ";abstain";
  {
    // The leave travels in the report itself: the coordinator may have looked at left/ before
    // the deathrattle was written and read this report after, and must not place a leaver in
    // the next round (it would leave that round failed, costing a retry).
    LockGuard lock(*mu_);
    if (left_) value += ";leave";
  }
  if (unconnected) value += ";unconnected";
  if (!ok && !blamed.empty()) value += ";blame=" + ids_text(blamed);
  store_.set(key_report(r.round, id_), value);
}

RoundRecord ElasticMesh::next_round(const RoundRecord& r) {
  const double deadline_s = runtime_.now_s() + options_.round_timeout_s;
  while (true) {
    const double left_s = deadline_s - runtime_.now_s();
    if (left_s <= 0)
      throw TimeoutError("mesh: no record for round " + std::to_string(r.round + 1) + " within " +
                         std::to_string(options_.round_timeout_s) + " s");
    try {
      return RoundRecord::decode(
          store_.get(key_round(r.round + 1), std::min(left_s, options_.heartbeat_interval_s)));
    } catch (const TimeoutError&) {
      LockGuard lock(*mu_);
      if (stopping_) throw PeerLostError(-1, "mesh: node stopped while waiting for a round");
    }
  }
}

}  // namespace meridian
