// Text that comes from a user's engine (a reply, a line of its stderr, a plugin's error
// message) made fit for kvfuzz's one-line messages. Such text may be anything: bytes that
// are not UTF-8, a multi-byte character cut by a pipe read or by a length limit, control
// characters. The messages it ends up in are written into fixtures (provenance.failure)
// as JSON strings, and nlohmann's dump refuses invalid UTF-8 (error 316), so every byte an
// engine chose must pass through here first.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace kvfuzz::external {

// How control characters are shown.
enum class Controls {
  // \n, \r and \t as those two characters, the other C0 controls and DEL as \xNN, the C1
  // controls, U+2028 and U+2029 as \uNNNN: a quoted excerpt shows what was there.
  escape,
  // Newline, carriage return, tab, U+0085, U+2028 and U+2029 become a space, the other
  // controls are escaped as above: a message read as prose stays on one line.
  blank,
};

struct SafeText {
  std::string text;  // valid UTF-8 without line breaks
  size_t used = 0;   // the bytes of the input it shows; a cut falls between characters
};

// `bytes` as valid UTF-8 on one line: each well-formed UTF-8 character is kept as it is,
// each byte that is not part of one (a stray continuation byte, an overlong form, a
// surrogate, a code point past U+10FFFF, a sequence cut short) becomes the four
// characters \xNN, and control characters are shown as `controls` says. Takes at most
// `max_characters` characters of the input, counting a stray byte as one.
SafeText safe_utf8(std::string_view bytes, Controls controls,
                   size_t max_characters = std::numeric_limits<size_t>::max());

// The length (1 to 4) of the well-formed UTF-8 character at the start of `bytes`, or 0
// when its first byte does not start one (or `bytes` is empty).
size_t utf8_character_length(std::string_view bytes);

}  // namespace kvfuzz::external
