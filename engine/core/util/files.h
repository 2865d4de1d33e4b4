// Writing a file so that a reader sees the old contents or the new, never a part.
#pragma once

#include <filesystem>
#include <string_view>

namespace meridian {

// Writes `text` to `path` under a temporary name beside it (the path, ".tmp" and this process's
// id, so that processes writing the same file at once do not share one) and renames it over
// `path`. Throws Error naming the file when it cannot be created, written or renamed.
void write_file_atomically(const std::filesystem::path& path, std::string_view text);

}  // namespace meridian
