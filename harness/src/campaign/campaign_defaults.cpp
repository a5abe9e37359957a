#include "campaign/campaign_defaults.h"

#include <system_error>

namespace kvfuzz::campaign {

namespace fs = std::filesystem;

CampaignLayout built_layout() {
  return {KVFUZZ_INSTALLED_FUZZERS_DIR, KVFUZZ_INSTALLED_DATA_DIR, KVFUZZ_BUILD_FUZZERS_DIR,
          KVFUZZ_SOURCE_DIR, KVFUZZ_BUILD_SANITIZED_FUZZERS_DIR};
}

CampaignDefaults campaign_defaults(const fs::path& self, const CampaignLayout& layout) {
  const fs::path bin = self.parent_path();
  const fs::path data = (bin / layout.installed_data).lexically_normal();
  std::error_code error;
  if (fs::is_directory(data / "corpus", error)) {
    const std::string installed = (bin / layout.installed_fuzzers).lexically_normal().string();
    return {installed, installed, (data / "corpus").string(), (data / "fixture.dict").string(),
            true};
  }
  return {layout.build_fuzzers.string(), layout.build_sanitized_fuzzers.string(),
          (layout.source / "corpus").string(),
          (layout.source / "fuzzers" / "fixture.dict").string(), false};
}

std::string how_to_build_fuzzers(bool sanitized) {
  return sanitized ? "scripts/build.sh sanitize builds the sanitized targets (clang)"
                   : "scripts/build.sh fuzz builds the coverage-only targets (clang; "
                     "scripts/build.sh sanitize builds them too), or --sanitize runs the "
                     "sanitize preset's";
}

CampaignDefaults campaign_defaults() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  return campaign_defaults(error ? fs::path() : self, built_layout());
}

}  // namespace kvfuzz::campaign
