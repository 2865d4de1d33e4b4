// Base64 through OpenSSL's EVP_EncodeBlock / EVP_DecodeBlock. OpenSSL's decoder skips
// whitespace and ignores where padding sits, so the input is checked first: RFC 4648's alphabet,
// a multiple of 4, '=' only as the last one or two characters.
#include "engine/core/util/base64.h"

#include <openssl/evp.h>

#include <climits>

#include "engine/core/error.h"

namespace meridian {

std::string base64_encode(const std::string& in) {
  if (in.size() > std::size_t{INT_MAX} / 4 * 3) throw Error("base64: input too large");
  std::string out((in.size() + 2) / 3 * 4 + 1, '\0');  // + the terminating NUL OpenSSL writes
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.size() % 4 != 0)
    throw ProtocolError("base64: length " + std::to_string(text.size()) +
                        " is not a multiple of 4");
  if (text.size() > INT_MAX) throw ProtocolError("base64: input too large");
  const std::size_t n = text.size();
  const std::size_t pad = n == 0 ? 0 : (text[n - 1] == '=') + (text[n - 2] == '=');
  if (pad == 1 && text[n - 2] == '=')
    throw ProtocolError("base64: invalid character at offset " + std::to_string(n - 2));
  for (std::size_t i = 0; i + pad < n; ++i) {
    const char c = text[i];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '/';
    if (!ok) throw ProtocolError("base64: invalid character at offset " + std::to_string(i));
  }
  std::string out(n / 4 * 3, '\0');
  const int got =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(n));
  if (got < 0 || static_cast<std::size_t>(got) != out.size())
    throw ProtocolError("base64: OpenSSL could not decode it");
  out.resize(out.size() - pad);  // EVP_DecodeBlock counts the padding as zero bytes
  return out;
}

}  // namespace meridian
