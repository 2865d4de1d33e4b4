// ElasticMesh implementation. The protocol itself is described in engine/mesh/PROTOCOL.md.
#include "engine/mesh/elastic_mesh.h"

#include <algorithm>
#include <charconv>
#include <mutex>
#include <set>

#include "engine/error.h"
#include "engine/mesh/ring_order.h"

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

// The lease value "<holder id>:<renewal counter>".
std::pair<std::int64_t, std::int64_t> parse_lease(const std::string& v) {
  const auto colon = v.find(':');
  if (colon == std::string::npos) return {-1, 0};
  return {parse_i64(v.substr(0, colon)).value_or(-1), parse_i64(v.substr(colon + 1)).value_or(0)};
}

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

}  // namespace

ElasticMesh::ElasticMesh(Store& store, Runtime& runtime, EventSink& events, MeshOptions options)
    : store_(store),
      runtime_(runtime),
      events_(events),
      options_(std::move(options)),
      mu_(runtime.make_mutex()),
      cv_(runtime.make_condvar()) {
  if (options_.heartbeat_interval_s <= 0 || options_.dead_after_s <= options_.heartbeat_interval_s)
    throw ConfigError("mesh: need 0 < heartbeat_interval_s < dead_after_s");
  if (options_.initial_world < 1) throw ConfigError("mesh: initial_world must be >= 1");
  if (options_.max_retries < 0) throw ConfigError("mesh: max_retries must be >= 0");
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
std::string ElasticMesh::key_round(std::uint64_t round) const {
  return options_.prefix + "round/" + padded(round);
}
std::string ElasticMesh::key_report(std::uint64_t round, std::int64_t id) const {
  return options_.prefix + "report/" + padded(round) + "/" + std::to_string(id);
}

std::string ElasticMesh::key_ready(std::uint64_t round, std::int64_t id) const {
  return options_.prefix + "ready/" + padded(round) + "/" + std::to_string(id);
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
  store_.add(key_heartbeat(id_), 1);
  JsonObject started;
  started.add("initial", initial);
  if (!options_.host.empty()) started.add("host", options_.host);
  emit("node_started", started);
  if (!initial) emit("join_requested");
  store_.set(key_join(id_), std::to_string(id_));
  beat_and_lease();
  heartbeat_ =
      runtime_.spawn("mesh-heartbeat-" + std::to_string(id_), [this] { heartbeat_loop(); });
  coordinator_ =
      runtime_.spawn("mesh-coordinator-" + std::to_string(id_), [this] { coordinator_loop(); });
  return id_;
}

bool ElasticMesh::wait_stop(double seconds) {
  std::lock_guard<Mutex> lock(*mu_);
  const double deadline_s = runtime_.now_s() + seconds;
  while (!stopping_) {
    const double left_s = deadline_s - runtime_.now_s();
    if (left_s <= 0) break;
    cv_->wait_for(*mu_, left_s);
  }
  return stopping_;
}

void ElasticMesh::stop() {
  {
    std::lock_guard<Mutex> lock(*mu_);
    stopping_ = true;
    leader_ = false;
    cv_->notify_all();
  }
  // Errors of the activities (a store that died with the node) end them; nothing to report.
  for (auto* a : {&heartbeat_, &coordinator_}) {
    if (!*a) continue;
    try {
      (*a)->join();
    } catch (const Error&) {
    }
    a->reset();
  }
}

void ElasticMesh::announce_leave() {
  store_.set(key_left(id_), "1");
  std::lock_guard<Mutex> lock(*mu_);
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
  std::lock_guard<Mutex> lock(*mu_);
  return leader_;
}

void ElasticMesh::heartbeat_loop() {
  // Fixed-rate beats: the next beat is due one interval after the previous one was due, not one
  // interval after this beat's store calls finished. A beat costs four store round trips (beat,
  // observation, lease read and renewal); far from the store (250 ms RTT) that is a second, and
  // sleeping a full interval on top would space beats further apart than they need to be.
  // Every wait is at least a tenth of the interval: a beat always yields (under simulation a
  // zero wait would not let the clock move).
  const double min_wait_s = options_.heartbeat_interval_s / 10;
  double due_s = runtime_.now_s() + options_.heartbeat_interval_s;
  while (!wait_stop(std::max(min_wait_s, due_s - runtime_.now_s()))) {
    due_s = std::max(due_s + options_.heartbeat_interval_s, runtime_.now_s());
    try {
      beat_and_lease();
    } catch (const PeerLostError&) {
      return;  // the store is gone for this node: it is dead to the others
    } catch (const TimeoutError&) {
    }
  }
}

void ElasticMesh::beat_and_lease() {
  store_.add(key_heartbeat(id_), 1);
  observe_heartbeats();
  // The coordinator lease: the holder renews it every beat by compare-and-set; anyone who sees
  // it unchanged for dead_after_s (or held by a node that left) takes it the same way.
  const std::string key = options_.prefix + "leader";
  const std::string mine = std::to_string(id_) + ":0";
  const auto current = store_.try_get(key);
  bool leader = false;
  const double now = runtime_.now_s();
  if (!current) {
    leader = store_.compare_set(key, std::nullopt, mine) == mine;
  } else {
    const auto [holder, count] = parse_lease(*current);
    if (holder == id_) {
      const std::string renewed = std::to_string(id_) + ":" + std::to_string(count + 1);
      leader = store_.compare_set(key, current, renewed) == renewed;
    } else {
      if (*current != lease_seen_) {
        lease_seen_ = *current;
        lease_seen_s_ = now;
      }
      const bool holder_left = store_.try_get(key_left(holder)).has_value();
      if (holder_left || now - lease_seen_s_ >= options_.dead_after_s)
        leader = store_.compare_set(key, current, mine) == mine;
    }
  }
  std::lock_guard<Mutex> lock(*mu_);
  const bool gained = leader && !stopping_ && !leader_;
  leader_ = leader && !stopping_;
  if (gained) cv_->notify_all();  // the coordinator activity waits for the lease (below)
}

void ElasticMesh::observe_heartbeats() {
  // Every counter in one store read (Store::read_prefix): a beat costs a constant number of
  // store round trips whatever the number of nodes. Reading the N counters one by one made a
  // beat N + 4 round trips, so that from a far site (N = 56, 250 ms RTT) a beat took longer
  // than dead_after_s and healthy nodes were evicted (issue 23). Each counter counts as read
  // when the read was sent: its value is at least that fresh.
  const std::string prefix = options_.prefix + "hb/";
  struct Read {
    std::int64_t id, counter;
  };
  std::vector<Read> reads;
  const double read_s = runtime_.now_s();
  for (const auto& [key, value] : store_.read_prefix(prefix)) {
    const auto id = parse_i64(key.substr(prefix.size()));
    if (!id) continue;
    reads.push_back({*id, parse_i64(value).value_or(-1)});
  }
  const double now = runtime_.now_s();
  // The coordinator reports each silence once, when its rule first fires (a counter unchanged
  // over dead_after_s of its reads): when a crash is detected, as distinct from when a round
  // record removes the node (fail_detected), which waits for the round.
  std::vector<std::pair<std::int64_t, double>> silent;  // (id, seconds without a change)
  {
    std::lock_guard<Mutex> lock(*mu_);
    observed_s_ = now;
    for (const Read& r : reads) {
      Seen& s = seen_[r.id];
      if (s.counter != r.counter) {
        s.counter = r.counter;
        s.changed_s = read_s;
        s.reported = false;
      }
      s.read_s = std::max(s.read_s, read_s);
      if (leader_ && !s.reported && r.id != id_ &&
          s.read_s - s.changed_s >= options_.dead_after_s) {
        s.reported = true;
        silent.emplace_back(r.id, s.read_s - s.changed_s);
      }
    }
  }
  for (const auto& [id, silent_s] : silent) {
    if (store_.try_get(key_left(id))) continue;  // it left (or finished): not a silence
    emit("silent", JsonObject().add("node_silent", id).add("silent_s", silent_s));
  }
}

bool ElasticMesh::is_dead(std::int64_t id) {
  if (id == id_) {
    // A node never sees itself silent, but a leaving coordinator must resolve its last round
    // as the others would: without itself (it announced the leave before its report).
    std::lock_guard<Mutex> lock(*mu_);
    return left_;
  }
  if (store_.try_get(key_left(id))) return true;
  std::lock_guard<Mutex> lock(*mu_);
  const double now = runtime_.now_s();
  auto [it, inserted] = seen_.try_emplace(id, Seen{-1, now, now});
  // Dead only on evidence: reads of an unchanged counter spanning dead_after_s. The time since
  // the last read is not silence (this node may simply not have looked: its activities starved,
  // or its store round trips are long).
  return it->second.read_s - it->second.changed_s >= options_.dead_after_s;
}

bool ElasticMesh::wait_lease() {
  std::lock_guard<Mutex> lock(*mu_);
  // No deadline: the heartbeat activity notifies when it takes the lease, and stop() notifies.
  // The bound only keeps each wait finite for the Runtimes.
  while (!stopping_ && !leader_) cv_->wait_for(*mu_, 3600.0);
  return !stopping_;
}

void ElasticMesh::coordinator_loop() {
  const double poll_s = options_.heartbeat_interval_s / 8;
  // A node that does not hold the lease has nothing to resolve: it waits until its heartbeat
  // activity takes the lease (or the node stops) instead of polling.
  while (wait_lease()) {
    bool progressed = false;
    try {
      progressed = resolve_once();
    } catch (const PeerLostError&) {
      return;
    } catch (const TimeoutError&) {
    }
    if (!progressed && wait_stop(poll_s)) return;
  }
}

std::vector<std::int64_t> ElasticMesh::queued_joiners() {
  const std::string prefix = options_.prefix + "join/";
  std::vector<std::int64_t> ids;
  for (const std::string& key : store_.list(prefix)) {
    const auto id = parse_i64(key.substr(prefix.size()));
    if (!id) continue;
    if (is_dead(*id)) {
      store_.erase(key);  // a joiner that died in the queue is forgotten
      continue;
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

bool ElasticMesh::bootstrap() {
  std::vector<std::int64_t> queued = queued_joiners();
  if (static_cast<int>(queued.size()) < options_.initial_world) return false;
  RoundRecord first;
  first.round = 0;
  first.epoch = 0;
  first.outer_step = 0;
  first.prev = RoundPrev::kStart;
  first.members = ring_order(queued);
  return publish(first, queued, {}, {});
}

bool ElasticMesh::publish(const RoundRecord& next, const std::vector<std::int64_t>& admitted,
                          const std::vector<std::int64_t>& removed_by_allreduce,
                          const std::vector<std::int64_t>& removed_by_protocol) {
  // Why each removed node went, decided before the record is out: once it is, an evicted node
  // may read it, stop and write its deathrattle before we would look.
  std::vector<const char*> why;
  for (std::int64_t gone : next.removed) {
    const bool rattled = store_.try_get(key_left(gone)).has_value();
    const bool by_allreduce =
        std::count(removed_by_allreduce.begin(), removed_by_allreduce.end(), gone) > 0;
    const bool by_protocol =
        std::count(removed_by_protocol.begin(), removed_by_protocol.end(), gone) > 0;
    why.push_back(rattled        ? "deathrattle"
                  : by_protocol  ? "protocol"
                  : by_allreduce ? "allreduce"
                                 : "heartbeat");
  }
  const std::string text = next.encode();
  if (store_.compare_set(key_round(next.round), std::nullopt, text) != text) return true;  // lost
  store_.set(options_.prefix + "latest", std::to_string(next.round));
  for (std::int64_t j : admitted) store_.erase(key_join(j));
  for (std::int64_t gone : next.removed) store_.erase(key_heartbeat(gone));  // no longer watched
  for (std::size_t i = 0; i < next.removed.size(); ++i)
    emit("fail_detected", JsonObject().add("failed", next.removed[i]).add("by", why[i]));
  // Keep the last few rounds; older reports and records are garbage.
  if (next.round >= 3) {
    const std::uint64_t old = next.round - 3;
    store_.erase(key_round(old));
    for (const char* kind : {"report/", "ready/"})
      for (const std::string& k : store_.list(options_.prefix + kind + padded(old) + "/"))
        store_.erase(k);
  }
  return true;
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
  // Fresh observations first: a coordinator whose own activities were starved must not take
  // its stale view for silence of the others (the heartbeat activity observes every beat).
  bool stale;
  {
    std::lock_guard<Mutex> lock(*mu_);
    stale = runtime_.now_s() - observed_s_ > options_.heartbeat_interval_s / 2;
  }
  if (stale) observe_heartbeats();

  std::vector<std::int64_t> survivors, removed, blamed;
  std::vector<std::string> missing_keys;
  bool any_fail = false;
  for (std::size_t i = 0; i < cur.members.size(); ++i) {
    const std::int64_t m = cur.members[i];
    const auto rep = store_.try_get(key_report(r, m));
    const bool dead = is_dead(m);
    if (rep) {
      any_fail = any_fail || *rep != "ok";
      // A member can only vouch for what it received, i.e. from its ring predecessor: a blame of
      // anybody else is ignored, so one faulty node can cost at most its predecessor's place.
      const std::int64_t pred = cur.members[(i + cur.members.size() - 1) % cur.members.size()];
      for (std::int64_t b : blamed_in_report(*rep))
        if (b == pred && pred != m && std::count(blamed.begin(), blamed.end(), b) == 0)
          blamed.push_back(b);
      if (dead)
        removed.push_back(m);
      else
        survivors.push_back(m);
    } else if (dead) {
      removed.push_back(m);
    } else {
      missing_keys.push_back(key_report(r, m));
    }
  }
  // Members whose chunks failed validation are cut off like dead ones.
  for (std::int64_t b : blamed) {
    const auto it = std::find(survivors.begin(), survivors.end(), b);
    if (it == survivors.end()) continue;  // already removed (dead)
    survivors.erase(it);
    removed.push_back(b);
  }
  if (!missing_keys.empty()) {
    try {
      store_.wait(missing_keys, options_.heartbeat_interval_s);
      return true;  // every report is in: resolve at once
    } catch (const TimeoutError&) {
      return false;
    }
  }
  if (survivors.empty()) return false;  // nobody left to continue (or to recover from)

  RoundRecord next;
  next.round = r + 1;
  next.removed = removed;
  const bool retry = any_fail && cur.attempt < options_.max_retries;
  if (!any_fail) {
    next.prev = RoundPrev::kCommit;
  } else {
    next.prev = retry ? RoundPrev::kRetry : RoundPrev::kFallback;
    next.reason = "allreduce failed in epoch " + std::to_string(cur.epoch) + " attempt " +
                  std::to_string(cur.attempt) + ", removed " + ids_text(removed);
  }
  next.outer_step = retry ? cur.outer_step : cur.outer_step + 1;
  next.attempt = retry ? cur.attempt + 1 : 0;
  std::vector<std::int64_t> admitted;
  const bool last = options_.outer_steps > 0 && next.outer_step >= options_.outer_steps;
  if (!retry && !last) {  // nobody serves a recovery in the run's final record
    for (std::int64_t j : queued_joiners()) {
      if (std::count(cur.members.begin(), cur.members.end(), j)) continue;
      if (options_.max_joiners_per_round > 0 &&
          static_cast<int>(admitted.size()) >= options_.max_joiners_per_round)
        break;
      admitted.push_back(j);
    }
  }
  std::vector<std::int64_t> members = survivors;
  members.insert(members.end(), admitted.begin(), admitted.end());
  const bool changed = members != cur.members;
  next.members = changed ? ring_order(members) : cur.members;
  next.joiners = admitted;
  if (!admitted.empty()) next.sources = survivors;
  next.epoch = (changed || any_fail) ? cur.epoch + 1 : cur.epoch;
  return publish(next, admitted, any_fail ? removed : std::vector<std::int64_t>{}, blamed);
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

bool ElasticMesh::ready_barrier(const RoundRecord& r) {
  store_.set(key_ready(r.round, id_), "1");
  while (true) {
    std::vector<std::string> missing;
    for (std::int64_t m : r.members) {
      if (m == id_ || store_.try_get(key_ready(r.round, m))) continue;
      if (is_dead(m)) return false;
      missing.push_back(key_ready(r.round, m));
    }
    if (missing.empty()) return true;
    if (store_.try_get(key_round(r.round + 1))) return false;  // decided without us
    {
      std::lock_guard<Mutex> lock(*mu_);
      if (stopping_) throw PeerLostError(-1, "mesh: node stopped in the barrier");
    }
    try {
      store_.wait(missing, options_.heartbeat_interval_s);
      return true;
    } catch (const TimeoutError&) {
    }
  }
}

void ElasticMesh::report(const RoundRecord& r, bool ok, const std::vector<std::int64_t>& blamed) {
  std::string value = ok ? "ok" : "fail";
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
      std::lock_guard<Mutex> lock(*mu_);
      if (stopping_) throw PeerLostError(-1, "mesh: node stopped while waiting for a round");
    }
  }
}

}  // namespace meridian
