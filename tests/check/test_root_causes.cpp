// Findings by root cause (kvfuzz/root_causes.h), as both doors settle them: a known bug's
// case is set aside and counted on it, the case of an earlier finding of the same engine is
// that finding's cause again, and the name, note and provenance of a case do not matter.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>

#include "kvfuzz/fixture_io.h"
#include "kvfuzz/root_causes.h"

namespace {

namespace fs = std::filesystem;
using namespace kvfuzz;

const fs::path kSeeds = fs::path(KVFUZZ_SOURCE_DIR) / "corpus" / "seeds";

TEST(RootCauses, SettlesKnownSameAndNewCauses) {
  const fs::path known_file = kSeeds / "batched-step-three-sequences.json";
  RootCauses causes({known_file});
  ASSERT_EQ(causes.known().size(), 1u);
  EXPECT_EQ(causes.still_failing(), 0);
  causes.known()[0].still_failing = true;
  EXPECT_EQ(causes.still_failing(), 1);

  // The known bug's case, renamed and re-noted as another run's shrunk case would be.
  Scenario again = load_fixture(known_file.string());
  again.name = "another-run";
  again.note = "shrunk again";
  const Settled known = causes.settle("e", again, 0, 3);
  EXPECT_EQ(known.kind, Settled::Kind::known);
  EXPECT_EQ(known.first, 0u);
  EXPECT_EQ(causes.known()[0].seen, 3);
  EXPECT_NE(causes.known()[0].state_line().find("found again 3 times"), std::string::npos);

  // Another case: new for engine e (finding 4), then the same cause (finding 7), and new
  // again for engine f.
  const Scenario other = load_fixture((kSeeds / "sliding-window-decode.json").string());
  EXPECT_EQ(causes.settle("e", other, 4, 1).kind, Settled::Kind::new_cause);
  const Settled same = causes.settle("e", other, 7, 1);
  EXPECT_EQ(same.kind, Settled::Kind::same_cause);
  EXPECT_EQ(same.first, 4u);
  EXPECT_EQ(causes.settle("f", other, 8, 1).kind, Settled::Kind::new_cause);
}

TEST(RootCauses, AKnownPathThatIsNoFixtureIsBadInput) {
  try {
    RootCauses causes({kSeeds / "no-such-fixture.json"});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("known: "), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("expected a fixture file or a folder of fixtures"),
              std::string::npos);
  }
  // A folder: every fixture below it, in a fixed order.
  const RootCauses folder({kSeeds});
  EXPECT_GT(folder.known().size(), 1u);
}

}  // namespace
