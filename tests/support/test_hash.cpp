// FNV-1a 64 (support/hash.h): the published test vectors, and the streaming interface
// giving what the one-shot one gives. Fixture names are these hashes, so a change here
// renames every saved fixture.
#include <gtest/gtest.h>

#include <array>
#include <string_view>

#include "support/hash.h"

namespace kvfuzz {
namespace {

TEST(Fnv1a, KnownVectors) {
  // From the FNV reference (draft-eastlake-fnv, test vectors for FNV-1a 64).
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a, EveryInterfaceHashesTheSameBytes) {
  const std::string_view text("kvfuzz\xff\x00!", 9);  // a NUL and a byte past ASCII
  const std::array<unsigned char, 9> bytes = {'k', 'v', 'f', 'u', 'z', 'z', 0xff, 0, '!'};
  Fnv1a streamed;
  for (const unsigned char byte : bytes) streamed.add(byte);
  EXPECT_EQ(fnv1a(bytes), streamed.value());
  EXPECT_EQ(fnv1a(text), streamed.value());
  EXPECT_NE(fnv1a(text), fnv1a(text.substr(0, 8)));
}

TEST(Fnv1a, Add64IsItsBytesLeastSignificantFirst) {
  Fnv1a word;
  word.add_u64(0x0807060504030201ull);
  const std::array<unsigned char, 8> bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(word.value(), fnv1a(bytes));
}

static_assert(fnv1a("a") == 0xaf63dc4c8601ec8cull, "usable at compile time");

}  // namespace
}  // namespace kvfuzz
