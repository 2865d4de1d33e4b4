// Standard base64 (RFC 4648, with padding): the HTML report's embedded PNGs and the keys and
// values of etcd's JSON API. Not a streaming codec.
#pragma once

#include <string>

namespace meridian {

std::string base64_encode(const std::string& bytes);
// Throws ProtocolError on a character outside the alphabet or a length that is not a multiple
// of 4.
std::string base64_decode(const std::string& text);

}  // namespace meridian
