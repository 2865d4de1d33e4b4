// What a node proves to a store when it joins a run (the TCP store's handshake, the etcd store's
// run record): the run's shared secret, the version and the hash of the resolved configuration.
#pragma once

#include <string>

namespace meridian {

// What a node proves when it joins. Every node of a run shares `secret` (never sent on the wire);
// `version` and `config_hash` must equal the server's or the node is refused with the reason.
struct StoreIdentity {
  std::string secret;
  std::string version;
  // Hash of the run's resolved configuration (see config_hash_of; a node's is
  // trainer::run_config_hash). On the server, empty means "the first node's to join": the
  // first joined node fixes the run's hash and later nodes with another are refused.
  std::string config_hash;
};

// The hash nodes and server compare: SHA-256 hex of the resolved configuration's text.
std::string config_hash_of(const std::string& resolved_config_text);

// Reads a shared-secret file: its bytes without trailing newlines/spaces. Throws ConfigError
// naming the file when it cannot be read or is empty, or when others than its owner may read it
// (mode & 077, as ssh does for keys).
std::string read_secret_file(const std::string& path);

}  // namespace meridian
