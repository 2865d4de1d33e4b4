// Seeded soak of the elastic mesh: 8 nodes, 300 outer steps, random crashes (in inner steps and
// in the middle of all-reduces), graceful leaves and joins. After the run, every outer step is
// checked: all nodes that applied it agree on epoch, members and bit-identical outer parameters
// and momentum, and no node that was not killed ended abnormally.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "tests/mesh/cluster_harness.h"

namespace meridian::testing {
namespace {

TEST(MeshSoak, EightNodes300OuterStepsWithRandomChurn) {
  ClusterOptions o;
  o.initial = 8;
  o.outer_steps = 300;
  o.inner_steps = 2;
  o.inner_step_s = 0.0005;
  Cluster c(o);
  std::mt19937_64 rng(20241121);
  std::mutex mu;  // guards `alive` and the RNG (actions run on node threads)
  std::set<std::int64_t> alive = {1, 2, 3, 4, 5, 6, 7, 8};
  int kills = 0, leaves = 0, joins = 0;

  const auto pick = [&]() -> std::int64_t {
    auto it = alive.begin();
    std::advance(it, std::uniform_int_distribution<std::size_t>(0, alive.size() - 1)(rng));
    return *it;
  };
  for (std::int64_t step = 0; step < o.outer_steps - 2; ++step) {
    c.at_step(step, [&] {
      std::lock_guard<std::mutex> lock(mu);
      const int action = std::uniform_int_distribution<int>(0, 19)(rng);
      if (action == 0 && alive.size() > 3) {  // crash during the next inner steps
        const std::int64_t v = pick();
        alive.erase(v);
        ++kills;
        c.worker(v).set_before_inner([&c, v] { c.kill(v); });
      } else if (action == 1 && alive.size() > 3) {  // crash in the middle of an all-reduce
        const std::int64_t v = pick();
        alive.erase(v);
        ++kills;
        c.on_send(v, 1 + rng() % 5, false, [&c, v] { c.kill(v); });
      } else if (action == 2 && alive.size() > 3) {  // graceful leave
        const std::int64_t v = pick();
        alive.erase(v);
        ++leaves;
        c.leave(v);
      } else if ((action == 3 || action == 4) && alive.size() < 10) {
        alive.insert(c.add_joiner());
        ++joins;
      }
    });
  }
  c.start();
  c.join();
  c.check_invariants();
  EXPECT_GT(kills, 5);
  EXPECT_GT(leaves, 5);
  EXPECT_GT(joins, 5);
  // Every joiner that was not killed recovered (a crashed one may have died before it did).
  for (std::int64_t id : c.ids()) {
    if (id <= 8 || c.killed(id)) continue;
    const auto ev = c.events(id);
    EXPECT_EQ(std::count_if(ev.begin(), ev.end(),
                            [](const Event& e) { return e.type == "recovery_finished"; }),
              1)
        << "joiner " << id;
  }
  std::cout << "soak: kills " << kills << ", leaves " << leaves << ", joins " << joins
            << ", retries " << c.all_of_type("retry").size() << "\n";
}

}  // namespace
}  // namespace meridian::testing
