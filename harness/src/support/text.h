// Text made fit for kvfuzz's one-line messages. What goes into a message may be anything:
// a user's engine reply, a line of its stderr, a plugin's error string, a file name, a
// JSON value that failed a check. Such text may hold bytes that are not UTF-8, a
// multi-byte character cut by a pipe read or by a length limit, control characters. The
// messages end up in fixtures (provenance.failure) as JSON strings, and nlohmann's dump
// refuses invalid UTF-8 (error 316), so every byte a user chose passes through here first.
#pragma once

#include <chrono>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace kvfuzz {

// ---- UTF-8 ----------------------------------------------------------------------------

// The length (1 to 4) of the well-formed UTF-8 character at the start of `bytes`, or 0
// when its first byte does not start one (or `bytes` is empty). Well-formed as in
// Unicode's table 3-7: no overlong forms, no surrogates, nothing past U+10FFFF, no
// sequence cut short.
size_t utf8_character_length(std::string_view bytes);

// The offset of the first byte that is not part of a well-formed character, if any.
std::optional<size_t> first_invalid_utf8(std::string_view text);

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
// each byte that is not part of one becomes the four characters \xNN, and control
// characters are shown as `controls` says. Takes at most `max_characters` characters of
// the input, counting a stray byte as one.
SafeText safe_utf8(std::string_view bytes, Controls controls,
                   size_t max_characters = std::numeric_limits<size_t>::max());

// ---- Pieces of one-line messages --------------------------------------------------------

// 'text' as safe_utf8 escapes it, cut after `max_characters` characters and then followed
// by "... (N bytes)": "'abc'... (5120 bytes)". A quoted excerpt of whatever was there.
std::string quote_excerpt(std::string_view text, size_t max_characters = 80);

// `text` as prose on one line (safe_utf8 with Controls::blank), cut after
// `max_characters` characters and then followed by "...".
std::string one_line(std::string_view text, size_t max_characters);

// `text` (kvfuzz's own words around a file name, for a message on stderr) with \n, \r and
// \t written as those two characters and the other C0 controls and DEL as \u00NN, so the
// line never breaks. Every other byte passes unchanged, so the result is valid UTF-8 only
// when `text` is: text that goes into a JSON document passes through safe_utf8 instead.
std::string escape_controls(std::string_view text);

// `text` fit for XML and HTML, as element text or an attribute value: &, <, >, " and '
// escaped (' as &#39;, which both read), and the characters XML 1.0 forbids (C0 controls
// other than tab, newline and return) replaced by '?'. The JUnit report and the campaign's
// HTML report use it.
std::string markup_text(std::string_view text);

// A word the shell reads back unchanged: as it is when it holds only characters no shell
// treats specially, else in single quotes (a quote inside as '\''). The commands that
// check and the campaign report print use it.
std::string shell_word(std::string_view word);

// `text` up to its first line break (all of it when it has none).
std::string first_line(std::string_view text);

// The system's words for an errno value ("No such file or directory").
std::string errno_text(int error);

// `text` cut to at most `max_bytes` bytes (at least 4) without splitting a UTF-8
// sequence, the cut marked with "...".
std::string cut_bytes(std::string text, size_t max_bytes);

// "1 s", "0.25 s".
std::string describe_seconds(std::chrono::milliseconds duration);

}  // namespace kvfuzz
