// The join identity's helpers: the configuration hash and the secret file.
#include "engine/backends/common/store_identity.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "engine/core/error.h"
#include "engine/core/util/sha256.h"

namespace meridian {

std::string config_hash_of(const std::string& resolved_config_text) {
  const Sha256Digest d = sha256(resolved_config_text);
  return to_hex(d);
}

std::string read_secret_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw ConfigError("secret file '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    throw ConfigError("secret file '" + path + "': readable by group or others (chmod 600 it)");
  }
  std::ifstream in(path, std::ios::binary);
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) throw ConfigError("secret file '" + path + "': cannot be read");
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  if (secret.empty())
    throw ConfigError("secret file '" + path + "': empty (expected a shared secret)");
  return secret;
}

}  // namespace meridian
