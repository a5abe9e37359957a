// Text for one-line messages (support/text.h): the one UTF-8 validator on every kind of
// ill-formed sequence, safe_utf8 keeping well-formed characters and escaping every other
// byte, cuts between characters, and the message pieces built on them.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/text.h"

namespace kvfuzz {
namespace {

// Whether `text` is valid UTF-8 by another judge than ours: nlohmann refuses to dump
// invalid UTF-8 (error 316), which is what a fixture holding the text would meet.
bool valid_utf8(const std::string& text) {
  try {
    return nlohmann::json::parse(nlohmann::json(text).dump()).get<std::string>() == text;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// ---------------------------------------------------------------------------------------
// The validator

TEST(Utf8, WellFormedCharactersHaveTheirLength) {
  EXPECT_EQ(utf8_character_length("a"), 1u);
  EXPECT_EQ(utf8_character_length("\u00e9x"), 2u);
  EXPECT_EQ(utf8_character_length("\u20ac"), 3u);
  EXPECT_EQ(utf8_character_length("\U0001F600"), 4u);
  EXPECT_EQ(utf8_character_length("\xf4\x8f\xbf\xbf"), 4u);  // U+10FFFF
  EXPECT_EQ(utf8_character_length(std::string_view("\0", 1)), 1u);
  EXPECT_EQ(utf8_character_length(""), 0u);
}

TEST(Utf8, IllFormedSequencesAreFoundWhereTheyStart) {
  struct Case {
    std::string text;
    std::optional<size_t> offset;
  };
  const std::vector<Case> cases = {
      {"plain", std::nullopt},
      {"\u00e9\u20ac\U0001F600", std::nullopt},
      {"ab\x80", 2},                   // a stray continuation byte
      {"\xff", 0},                     // never in UTF-8
      {"a\xc0\xaf", 1},                // overlong '/' in 2 bytes (C0 and C1 never start one)
      {"\xc1\xbf", 0},                 // overlong U+007F
      {"\xe0\x80\xaf", 0},             // overlong '/' in 3 bytes
      {"\xe0\x9f\xbf", 0},             // overlong U+07FF
      {"\xf0\x8f\xbf\xbf", 0},         // overlong U+FFFF in 4 bytes
      {"x\xed\xa0\x80", 1},            // surrogate U+D800
      {"\xed\xbf\xbf", 0},             // surrogate U+DFFF
      {"\xed\x9f\xbf", std::nullopt},  // U+D7FF, just below the surrogates
      {"\xf4\x90\x80\x80", 0},         // U+110000, past the last code point
      {"\xf5\x80\x80\x80", 0},         // F5..FF never start a character
      {"\u20ac\xe2\x82", 3},           // cut short at the end
      {"\xe2\x82x", 0},                // cut short before another character
      {"\xf0\x9f\x98", 0},             // 4-byte character missing its last byte
      {"\xc3", 0},                     // lead byte alone
  };
  for (const Case& c : cases) {
    EXPECT_EQ(first_invalid_utf8(c.text), c.offset) << testing::PrintToString(c.text);
    // nlohmann agrees on which texts are valid.
    EXPECT_EQ(valid_utf8(c.text), !c.offset.has_value()) << testing::PrintToString(c.text);
  }
}

TEST(Utf8, AgreesWithNlohmannOnEveryTwoByteSequence) {
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) {
      const std::string text = {static_cast<char>(a), static_cast<char>(b)};
      ASSERT_EQ(!first_invalid_utf8(text).has_value(), valid_utf8(text)) << a << " " << b;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Text made safe for a message

TEST(SafeUtf8, WellFormedCharactersAreKeptAndEveryOtherByteIsEscaped) {
  struct Case {
    std::string bytes, shown;
  };
  const std::vector<Case> cases = {
      {"plain ascii", "plain ascii"},
      {"\u00e9\u20ac\U0001F600", "\u00e9\u20ac\U0001F600"},  // 2, 3 and 4 bytes
      {"\xff\xfe", "\\xff\\xfe"},
      {"\x80", "\\x80"},                             // a stray continuation byte
      {"\xc0\xaf", "\\xc0\\xaf"},                    // an overlong '/'
      {"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},           // an overlong '/' in 3 bytes
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a surrogate, U+D800
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // past U+10FFFF
      {"\xe2\x82", "\\xe2\\x82"},                    // cut short at the end
      {"\xe2\x82x", "\\xe2\\x82x"},                  // cut short before another
      {"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},      // U+10FFFF itself
      {"a\tb\nc\rd\x01\x7f", "a\\tb\\nc\\rd\\x01\\x7f"},
      {"\u0085\u2028", "\\u0085\\u2028"},  // line breaks beyond ASCII
  };
  ASSERT_FALSE(valid_utf8("\xff")) << "the check below would prove nothing";
  for (const Case& c : cases) {
    const SafeText text = safe_utf8(c.bytes, Controls::escape);
    EXPECT_EQ(text.text, c.shown);
    EXPECT_EQ(text.used, c.bytes.size());
    EXPECT_TRUE(valid_utf8(text.text)) << text.text;
  }
  EXPECT_EQ(safe_utf8("a\tb\nc\u2028d\x01", Controls::blank).text, "a b c d\\x01");
}

TEST(SafeUtf8, CutsFallBetweenCharacters) {
  // 3-byte characters: a cut in bytes after 80 of them, or after 80 bytes, would split one.
  std::string text = "x";
  for (int i = 0; i < 100; ++i) text += "\u20ac";
  const SafeText cut = safe_utf8(text, Controls::escape, 80);
  EXPECT_EQ(cut.used, 1 + 79 * 3u);
  EXPECT_TRUE(valid_utf8(cut.text));
  const std::string excerpt = quote_excerpt(text);
  EXPECT_TRUE(valid_utf8(excerpt)) << excerpt;
  EXPECT_NE(excerpt.find("\u20ac'... (301 bytes)"), std::string::npos) << excerpt;
  // Garbage of every byte value: each shown as itself or \xNN, and all of it valid UTF-8.
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  EXPECT_TRUE(valid_utf8(safe_utf8(every_byte, Controls::escape).text));
  EXPECT_TRUE(valid_utf8(quote_excerpt(every_byte)));
}

// ---------------------------------------------------------------------------------------
// Pieces of messages

TEST(MessageText, QuoteExcerptAndOneLineMarkTheirCuts) {
  EXPECT_EQ(quote_excerpt("abc"), "'abc'");
  EXPECT_EQ(quote_excerpt("abcdef", 3), "'abc'... (6 bytes)");
  EXPECT_EQ(quote_excerpt("a\nb"), "'a\\nb'");
  EXPECT_EQ(one_line("a\nb\tc", 10), "a b c");
  EXPECT_EQ(one_line("abcdef", 3), "abc...");
  EXPECT_EQ(one_line("\xff", 10), "\\xff");
}

TEST(MessageText, EscapeControlsKeepsALineOneLine) {
  EXPECT_EQ(escape_controls("a\nb\rc\td\x01\x7f\u00e9"), "a\\nb\\rc\\td\\u0001\\u007f\u00e9");
}

TEST(MessageText, CutBytesNeverSplitsACharacter) {
  EXPECT_EQ(cut_bytes("short", 10), "short");
  EXPECT_EQ(cut_bytes("0123456789", 8), "01234...");
  // "ab" and a 3-byte character: a cut after 4 bytes would fall inside it.
  const std::string cut = cut_bytes("ab\u20ac\u20ac\u20ac", 7);
  EXPECT_EQ(cut, "ab...");
  EXPECT_TRUE(valid_utf8(cut));
}

TEST(MessageText, MarkupTextEscapesWhatXmlAndHtmlReadAsMarkup) {
  EXPECT_EQ(markup_text("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  // Tab, newline and return stay; the controls XML 1.0 forbids do not; UTF-8 passes.
  EXPECT_EQ(markup_text("x\ty\nz\r\x01\x1b\u00e9"), "x\ty\nz\r??\u00e9");
}

TEST(MessageText, DescribeSeconds) {
  EXPECT_EQ(describe_seconds(std::chrono::milliseconds(1000)), "1 s");
  EXPECT_EQ(describe_seconds(std::chrono::milliseconds(250)), "0.25 s");
}

}  // namespace
}  // namespace kvfuzz
