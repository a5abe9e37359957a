// FIPS 180-4 SHA-1, written out because the fuzz targets must name their fixture the way
// libFuzzer names the artifact, and no chosen dependency provides it.
#include "sha1.h"

#include <array>
#include <cstdio>
#include <vector>

namespace kvfuzz::fuzz {

namespace {

uint32_t rotl(uint32_t x, int n) {
  return (x << n) | (x >> (32 - n));
}

}  // namespace

std::string sha1_hex(const uint8_t* data, size_t size) {
  std::array<uint32_t, 5> h = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::vector<uint8_t> message(data, data + size);
  message.push_back(0x80);
  while (message.size() % 64 != 56) message.push_back(0);
  const uint64_t bits = static_cast<uint64_t>(size) * 8;
  for (int i = 7; i >= 0; --i) message.push_back(static_cast<uint8_t>(bits >> (8 * i)));

  for (size_t block = 0; block < message.size(); block += 64) {
    std::array<uint32_t, 80> w{};
    for (int i = 0; i < 16; ++i) {
      const uint8_t* p = &message[block + 4 * static_cast<size_t>(i)];
      w[i] = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
    }
    for (int i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      uint32_t f = 0, k = 0;
      if (i < 20) {
        f = (b & c) | (~b & d), k = 0x5A827999u;
      } else if (i < 40) {
        f = b ^ c ^ d, k = 0x6ED9EBA1u;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
      } else {
        f = b ^ c ^ d, k = 0xCA62C1D6u;
      }
      const uint32_t t = rotl(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rotl(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::string hex;
  for (uint32_t word : h) {
    char text[9];
    std::snprintf(text, sizeof text, "%08x", word);
    hex += text;
  }
  return hex;
}

}  // namespace kvfuzz::fuzz
