// Fixture files: a strict JSON parser and a canonical writer (docs/fixture-format.md).
//
// Every problem is reported as one line: "FILE: JSON.PATH: expected ..., got ...".
// write_fixture(parse_fixture(text)) == text for every canonically written fixture.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kvfuzz/scenario.h"

namespace kvfuzz {

// The newest format version. Version 2 added the attention features (Layout::softcap,
// sinks, alibi, chunked_local), version 3 the quantized KV caches (Layout::k_format,
// v_format), version 4 MLA's value read from its key (Layout::value_from_key), version 5 the
// affine KV formats (affine2, affine4, affine8 with their group), version 6 RoPE's interleaved
// pairs (Layout::rope_style), version 7 RoPE on part of the head (Layout::rope_dims), version 8 the
// per-channel key formats (kv_format.h: channel_u8, channel_u4); older fixtures read unchanged, and
// a scenario is written in the lowest version that holds it: one without either is still version 1
// (kMinFixtureFormatVersion), byte for byte as before.
constexpr int kFixtureFormatVersion = 8;
constexpr int kMinFixtureFormatVersion = 1;
// The version write_fixture gives a scenario: the lowest that can hold it.
int fixture_format_version(const Scenario& scenario);

// Bad input: one line, naming the file, the JSON path and what was expected.
struct FixtureError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `origin` names the source in error messages (usually the file path).
Scenario parse_fixture(std::string_view text, std::string_view origin);
Scenario load_fixture(const std::filesystem::path& path);

std::string write_fixture(const Scenario& scenario);
// Writes via a temporary file and rename, so a crash never leaves half a fixture.
void save_fixture(const Scenario& scenario, const std::filesystem::path& path);

}  // namespace kvfuzz
