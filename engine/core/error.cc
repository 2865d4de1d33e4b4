// Out-of-line part of MERIDIAN_CHECK (keeps the macro's expansion small).
#include "engine/core/error.h"

namespace meridian::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& detail) {
  std::ostringstream os;
  os << "internal check failed at " << file << ":" << line << ": " << expr << detail;
  throw CheckError(os.str());
}

}  // namespace meridian::detail
