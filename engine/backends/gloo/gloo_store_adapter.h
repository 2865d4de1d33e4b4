// Adapts a meridian::Store to gloo::rendezvous::Store under a key prefix, so Gloo's
// connectFullMesh can exchange addresses through the run's store; and the barrier before it
// (every member arrived). Every wait is bounded by the adapter's timeout (Gloo's own timeout
// and its timeout-less overloads are not used) and given up as soon as the epoch's abandon rule
// says a member cannot come (EpochSpec::abandon). Its first write erases the keys of the epochs
// this one supersedes (engine/core/transport.h, epoch_superseded), so the store holds the
// rendezvous of the current epochs only. Not a general-purpose Gloo store.
#pragma once

#include <gloo/rendezvous/store.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/core/store.h"

namespace meridian::gloo_transport {

class StoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  // `abandon` as EpochSpec::abandon (polled every `poll_s` while waiting; may be empty).
  StoreAdapter(meridian::Store& store, std::string prefix, double timeout_s,
               std::function<std::string()> abandon = {}, double poll_s = 0.5)
      : store_(store),
        prefix_(std::move(prefix)),
        timeout_s_(timeout_s),
        abandon_(std::move(abandon)),
        poll_s_(poll_s) {}

  // Marks member `rank` of `size` arrived and waits until every member has.
  void barrier(int rank, int size);
  // The bound of the waits from now on.
  void set_timeout(double timeout_s) { timeout_s_ = timeout_s; }

  // The first set erases every key of a superseded epoch under the same base (the prefix is
  // one that epoch_store_prefix made; another prefix erases nothing).
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  meridian::Store& store_;
  std::string prefix_;
  double timeout_s_;
  std::function<std::string()> abandon_;
  double poll_s_;
  bool swept_ = false;

  void erase_superseded();
};

}  // namespace meridian::gloo_transport
