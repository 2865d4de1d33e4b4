// SHA-256 against the FIPS 180-2 examples, HMAC-SHA256 against RFC 4231's test cases and base64
// against RFC 4648's (engine/core/util/, OpenSSL behind them). Exact outputs: any bit wrong fails.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/util/base64.h"
#include "engine/core/util/hmac.h"
#include "engine/core/util/sha256.h"

namespace meridian {
namespace {

std::string hex_sha256(const std::string& s) { return to_hex(sha256(s)); }
std::string hex_hmac(const std::string& k, const std::string& m) {
  return to_hex(hmac_sha256(k, m));
}
std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(hex_sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_sha256(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAcrossBlockBoundaries) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>(i * 7));
  for (std::size_t split : {0, 1, 55, 56, 63, 64, 65, 128, 299}) {
    Sha256 h;
    h.update(std::string_view(text).substr(0, split));
    h.update(std::string_view(text).substr(split));
    EXPECT_EQ(to_hex(h.finish()), hex_sha256(text)) << "split at " << split;
  }
}

TEST(HmacSha256, Rfc4231) {
  // Test case 1
  EXPECT_EQ(hex_hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2
  EXPECT_EQ(hex_hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3
  EXPECT_EQ(hex_hmac(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4
  EXPECT_EQ(hex_hmac(unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                     std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 6: a key longer than one block is hashed first.
  EXPECT_EQ(
      hex_hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
      "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7
  EXPECT_EQ(hex_hmac(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, DigestsEqualComparesEveryByte) {
  const Sha256Digest a = hmac_sha256("k", "m");
  Sha256Digest b = a;
  EXPECT_TRUE(digests_equal(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digests_equal(a, b));
  b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(digests_equal(a, b));
}

TEST(Sha256, RefusesUseAfterFinish) {
  Sha256 h;
  h.update("abc");
  h.finish();
  EXPECT_THROW(h.update("d"), Error);
  EXPECT_THROW(h.finish(), Error);
}

// RFC 4648 section 10, both ways, and what a strict decoder refuses.
TEST(Base64, RoundTripsRfc4648VectorsAndRefusesWhatIsNotBase64) {
  const std::vector<std::pair<std::string, std::string>> vectors = {{"", ""},
                                                                    {"f", "Zg=="},
                                                                    {"fo", "Zm8="},
                                                                    {"foo", "Zm9v"},
                                                                    {"foob", "Zm9vYg=="},
                                                                    {"fooba", "Zm9vYmE="},
                                                                    {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(base64_encode(plain), coded);
    EXPECT_EQ(base64_decode(coded), plain);
  }
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes);
  for (const char* bad : {"Zg=", "Zm9v\n", "Zm 9", "Z=9v", "Zm=v", "Zg=a", "====", "Zm9*"}) {
    try {
      base64_decode(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find("base64"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace meridian
