// The one construction site of DilocoNode (compose.h).
#include "cli/compose/compose.h"

namespace meridian::compose {

std::unique_ptr<DilocoNode> make_node(const NodeParts& parts, DilocoOptions options) {
  return std::make_unique<DilocoNode>(parts.worker, parts.store, parts.transports, parts.runtime,
                                      parts.events, std::move(options));
}

}  // namespace meridian::compose
