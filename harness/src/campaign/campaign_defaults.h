// Where `kvfuzz campaign` finds its fuzz targets, seeds and dictionary when the command
// line does not say. An installed kvfuzz (PREFIX/bin/kvfuzz, with kvfuzz's corpus in
// PREFIX/share/kvfuzz/corpus) takes the installed ones: the targets from
// PREFIX/libexec/kvfuzz (those of the build that was installed, with or without
// --sanitize), the corpus as seeds, PREFIX/share/kvfuzz/fixture.dict. A kvfuzz run from
// its build tree takes the coverage-only targets (the fuzz preset's, build/fuzz/fuzzers:
// several times faster) or, with --sanitize, the ASan + UBSan ones (the sanitize preset's),
// a build's own where it makes that kind, and the checkout's corpus/ and
// fuzzers/fixture.dict, by absolute path, so the working directory matters to neither.
#pragma once

#include <filesystem>
#include <string>

namespace kvfuzz::campaign {

struct CampaignDefaults {
  std::string fuzzers;            // coverage-only targets, no sanitizers (the default)
  std::string sanitized_fuzzers;  // ASan + UBSan targets (--sanitize)
  std::string seeds;
  std::string dict;
  bool installed = false;  // found next to an installed kvfuzz
};

// Where things are, as the build that made this kvfuzz says.
struct CampaignLayout {
  // Relative to the directory of an installed kvfuzz: "../libexec/kvfuzz", "../share/kvfuzz"
  // (the data directory holds corpus/ and fixture.dict).
  std::filesystem::path installed_fuzzers;
  std::filesystem::path installed_data;
  // In the build tree: the coverage-only fuzz targets, and the checkout.
  std::filesystem::path build_fuzzers;
  std::filesystem::path source;
  // In the build tree: the sanitized fuzz targets.
  std::filesystem::path build_sanitized_fuzzers;
};

// What builds the targets a campaign looks for by default (`sanitized`: for --sanitize),
// for the message when they are missing.
std::string how_to_build_fuzzers(bool sanitized);

// The layout this kvfuzz was built with.
CampaignLayout built_layout();

// The defaults for the kvfuzz executable at `self`: installed when the installed corpus is
// where `layout` says it would be next to it.
CampaignDefaults campaign_defaults(const std::filesystem::path& self, const CampaignLayout& layout);

// The defaults for this process (/proc/self/exe) and built_layout().
CampaignDefaults campaign_defaults();

}  // namespace kvfuzz::campaign
