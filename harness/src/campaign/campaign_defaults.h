// Where `kvfuzz campaign` finds its fuzz targets, seeds and dictionary when the command
// line does not say. An installed kvfuzz (PREFIX/bin/kvfuzz, with kvfuzz's corpus in
// PREFIX/share/kvfuzz/corpus) takes the installed ones: the targets from
// PREFIX/libexec/kvfuzz, the corpus as seeds, PREFIX/share/kvfuzz/fixture.dict. A kvfuzz
// run from its build tree takes the build's targets (or the sanitize preset's) and the
// checkout's corpus/ and fuzzers/fixture.dict, by absolute path, so the working directory
// matters to neither.
#pragma once

#include <filesystem>
#include <string>

namespace kvfuzz::campaign {

struct CampaignDefaults {
  std::string fuzzers;
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
  // In the build tree: the fuzz targets, and the checkout.
  std::filesystem::path build_fuzzers;
  std::filesystem::path source;
};

// The layout this kvfuzz was built with.
CampaignLayout built_layout();

// The defaults for the kvfuzz executable at `self`: installed when the installed corpus is
// where `layout` says it would be next to it.
CampaignDefaults campaign_defaults(const std::filesystem::path& self, const CampaignLayout& layout);

// The defaults for this process (/proc/self/exe) and built_layout().
CampaignDefaults campaign_defaults();

}  // namespace kvfuzz::campaign
