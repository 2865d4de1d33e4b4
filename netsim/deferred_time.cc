// Deferred time kept as an extension of the s4u actor (freed with it; see deferred_time.h).
#include "netsim/deferred_time.h"

#include <simgrid/s4u.hpp>
#include <utility>

namespace meridian::netsim {
namespace sg4 = simgrid::s4u;

namespace {

struct Owed {
  double seconds = 0.0;
};

const simgrid::xbt::Extension<sg4::Actor, Owed>& owed_id() {
  static const auto id = sg4::Actor::extension_create<Owed>();
  return id;
}

}  // namespace

void defer_time(double seconds) {
  if (seconds <= 0) return;
  sg4::Actor* self = sg4::Actor::self();
  if (self == nullptr) return;
  Owed* o = self->extension(owed_id());
  if (o == nullptr) {
    o = new Owed;
    self->extension_set(owed_id(), o);  // owned and deleted by the actor
  }
  o->seconds += seconds;
}

double deferred_time_s() {
  sg4::Actor* self = sg4::Actor::self();
  if (self == nullptr) return 0.0;
  const Owed* o = self->extension(owed_id());
  return o == nullptr ? 0.0 : o->seconds;
}

double take_deferred_time() {
  sg4::Actor* self = sg4::Actor::self();
  if (self == nullptr) return 0.0;
  Owed* o = self->extension(owed_id());
  if (o == nullptr) return 0.0;
  return std::exchange(o->seconds, 0.0);
}

void pay_deferred_time() {
  const double s = take_deferred_time();
  if (s > 0) sg4::this_actor::sleep_for(s);
}

}  // namespace meridian::netsim
