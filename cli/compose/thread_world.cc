// Threads (thread_world.h).
#include "cli/compose/thread_world.h"

#include "cli/compose/compose.h"

namespace meridian::compose {

std::unique_ptr<DilocoNode> ThreadWorld::make_node(const NodeParts& parts, DilocoOptions options) {
  return compose::make_node(parts, std::move(options));
}

}  // namespace meridian::compose
