// SHA-1 of a byte string, in lowercase hex: the name libFuzzer gives an artifact
// (crash-<sha1>), so that a target can write its fixture right next to it. Not for security.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvfuzz::fuzz {

std::string sha1_hex(const uint8_t* data, size_t size);

}  // namespace kvfuzz::fuzz
