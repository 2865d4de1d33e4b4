// Deferred time: simulated time the current actor owes but has not slept yet. Small store calls
// charge their round trip here instead of sleeping at once, so a burst of them (a heartbeat reads
// every member's counter) costs one context switch; the simulated backends pay the debt before
// the actor next waits, sleeps, computes or transfers (not when it locks a mutex), and its clock
// (SimRuntime::now_s) includes it. Not thread-safe (SimGrid actors run in one OS thread); valid
// only inside a running SimGrid engine.
#pragma once

namespace meridian::netsim {

// The current actor owes `seconds` more (>= 0).
void defer_time(double seconds);
// Sleeps whatever the current actor owes; a no-op when it owes nothing or outside an actor.
void pay_deferred_time();
// Returns what the current actor owes and clears it: the caller pays it another way (a timed
// wait that starts listening only once it is paid).
double take_deferred_time();
// What the current actor owes (0 outside an actor): its own clock is the engine's plus this.
double deferred_time_s();

}  // namespace meridian::netsim
