#include "engine/core/util/files.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <system_error>

#include "engine/core/error.h"

namespace meridian {

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(tmp.string() + ": cannot create");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) throw Error(tmp.string() + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(path.string() + ": cannot replace it with " + tmp.string() + ": " + ec.message());
  }
}

}  // namespace meridian
