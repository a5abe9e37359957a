// Each seed's note ends with the bugs it kills, by mutant name: "Kills: mask-origin,
// page-tail-read." (or "Kills: none." for a seed no mutant fails yet). The list is the link
// from the seed to the mutants with the bugs its note describes, and it must be exact: every
// mutant it names fails the seed, and every other mutant passes it, so a note can neither
// claim a bug its program cannot expose nor leave out one it does. Honest engines passing
// every seed is test_seeds' job (and each seed's replay test's). The corpus must also hold
// a seed for each feature the generator's corners are about (issue 15): a window, RoPE, a
// batched step, a non-identity page order, a large pool, decodes past the split threshold,
// GQA groups other than 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "cpu/flash_constants.h"
#include "kvfuzz/engine.h"
#include "kvfuzz/fixture_io.h"
#include "kvfuzz/judge.h"

namespace kvfuzz {
namespace {

const std::filesystem::path kSeeds = std::filesystem::path(KVFUZZ_SOURCE_DIR) / "corpus/seeds";
constexpr std::string_view kKills = "Kills: ";

struct Seed {
  std::string file;
  Scenario scenario;
};

const std::vector<Seed>& seeds() {
  static const std::vector<Seed> all = [] {
    std::vector<Seed> out;
    for (const auto& entry : std::filesystem::directory_iterator(kSeeds)) {
      if (entry.path().extension() == ".json") {
        out.push_back({entry.path().filename().string(), load_fixture(entry.path())});
      }
    }
    std::sort(out.begin(), out.end(), [](const Seed& a, const Seed& b) { return a.file < b.file; });
    return out;
  }();
  return all;
}

// The mutant names of the note's last sentence, "Kills: a, b." ("Kills: none." is the empty
// list); nothing when the note does not end with such a sentence.
std::optional<std::vector<std::string>> kills_of(const std::string& note) {
  const size_t at = note.rfind(kKills);
  if (at == std::string::npos || note.empty() || note.back() != '.') return std::nullopt;
  const std::string list = note.substr(at + kKills.size(), note.size() - at - kKills.size() - 1);
  std::vector<std::string> names;
  if (list == "none") return names;
  size_t from = 0;
  while (true) {
    const size_t comma = list.find(", ", from);
    names.push_back(
        list.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 2;
  }
  return names;
}

std::vector<const EngineInfo*> mutants() {
  std::vector<const EngineInfo*> out;
  for (const EngineInfo& engine : engine_registry()) {
    if (engine.mutant) out.push_back(&engine);
  }
  return out;
}

TEST(SeedKills, TheListIsReadFromTheNotesLastSentence) {
  EXPECT_EQ(kills_of("A row. Kills: mask-origin, page-tail-read."),
            (std::vector<std::string>{"mask-origin", "page-tail-read"}));
  EXPECT_EQ(kills_of("A row. Kills: stale-kv."), (std::vector<std::string>{"stale-kv"}));
  EXPECT_EQ(kills_of("A row. Kills: none."), (std::vector<std::string>{}));
  EXPECT_FALSE(kills_of("A row with no list.").has_value());
  EXPECT_FALSE(kills_of("Kills: stale-kv. Then more prose").has_value());
}

TEST(SeedKills, EverySeedNamesOnlyRegisteredMutantsOnce) {
  ASSERT_GE(seeds().size(), 20u);
  for (const Seed& seed : seeds()) {
    const auto kills = kills_of(seed.scenario.note);
    ASSERT_TRUE(kills.has_value()) << seed.file << ": the note must end with \"Kills: ...\"";
    const std::set<std::string> unique(kills->begin(), kills->end());
    EXPECT_EQ(unique.size(), kills->size()) << seed.file << ": a mutant named twice";
    for (const std::string& name : *kills) {
      const EngineInfo* engine = find_engine(name);
      EXPECT_TRUE(engine != nullptr && engine->mutant)
          << seed.file << ": " << name << " is not a registered mutant";
    }
  }
}

// The heart of it: for every seed, the mutants that fail it are exactly the ones its note
// names. A mutant added later that fails a seed fails this test until the note names it
// (and says in its prose what that mutant gets wrong there).
TEST(SeedKills, TheMutantsThatFailEachSeedAreExactlyTheOnesItsNoteNames) {
  int links = 0;
  for (const Seed& seed : seeds()) {
    const auto kills = kills_of(seed.scenario.note);
    if (!kills) continue;  // reported by the test above
    const std::set<std::string> named(kills->begin(), kills->end());
    const Prepared prepared = prepare(seed.scenario);
    for (const EngineInfo* mutant : mutants()) {
      if (unjudgeable(seed.scenario, probe_declarations(*mutant))) {
        EXPECT_FALSE(named.count(mutant->name))
            << seed.file << ": names " << mutant->name << ", which cannot judge it";
        continue;
      }
      const bool failed = !judge_engine(seed.scenario, prepared, *mutant).verdict.pass;
      if (named.count(mutant->name)) {
        ++links;
        EXPECT_TRUE(failed) << seed.file << " names " << mutant->name << ", which passes it";
      } else {
        EXPECT_FALSE(failed) << mutant->name << " fails " << seed.file
                             << ", whose note does not name it: add it to the note's "
                                "\"Kills:\" list and say what it gets wrong there";
      }
    }
  }
  EXPECT_GE(links, 40);
}

TEST(SeedKills, EveryMutantKillsSomeSeed) {
  std::set<std::string> named;
  for (const Seed& seed : seeds()) {
    for (const std::string& name :
         kills_of(seed.scenario.note).value_or(std::vector<std::string>{})) {
      named.insert(name);
    }
  }
  for (const EngineInfo* mutant : mutants()) {
    EXPECT_TRUE(named.count(mutant->name)) << mutant->name << " kills no seed";
  }
}

// Keys a one-token chunk sees: its position + 1, or the window.
int64_t decode_keys(const Scenario& s, const PlacedChunk& chunk) {
  const int64_t keys = chunk.start + 1;
  return s.layout.window ? std::min<int64_t>(keys, *s.layout.window) : keys;
}

// The physical page a paged engine hands out first.
int64_t first_page(const Scenario& s) {
  switch (s.placement.order) {
    case PageOrder::identity:
      return 0;
    case PageOrder::reversed:
      return s.placement.pool_pages.value_or(required_pool_pages(s)) - 1;
    case PageOrder::explicit_list:
      return s.placement.pages.front();
  }
  return 0;
}

bool any_seed(const std::function<bool(const Scenario&)>& has) {
  return std::any_of(seeds().begin(), seeds().end(),
                     [&](const Seed& seed) { return has(seed.scenario); });
}

TEST(SeedFeatures, TheSeedsCoverEveryCornerOfIssue15) {
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    return s.layout.window && max_epoch_length(s) > *s.layout.window &&
           *s.layout.window > s.layout.page_size;
  })) << "a window shorter than the context and longer than a page";
  EXPECT_TRUE(any_seed([](const Scenario& s) { return s.layout.rope_theta.has_value(); }))
      << "RoPE";
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    return std::any_of(s.program.begin(), s.program.end(), [](const Op& op) {
      return op.kind == OpKind::step && op.chunks.size() >= 3;
    });
  })) << "a batched step of three sequences";
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    return s.placement.order == PageOrder::explicit_list && s.sequences >= 2;
  })) << "an explicit page order shared by two sequences";
  EXPECT_TRUE(any_seed([](const Scenario& s) { return first_page(s) >= (1 << 16); }))
      << "a pool handing out a page past 2^16 first";
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    std::set<int64_t> decodes;
    for_each_chunk(s, [&](const PlacedChunk& c) {
      if (c.tokens->size() == 1) decodes.insert(decode_keys(s, c));
    });
    const int64_t t = cpu::kFlashSplitThreshold, p = cpu::kFlashPartitionKeys;
    return decodes.count(t - 1) && decodes.count(t) && decodes.count(t + 1) &&
           decodes.count(3 * p) && decodes.count(3 * p + 1);
  })) << "decodes one below, at and one above the split threshold and a partition edge";
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    return s.layout.kv_heads > 1 && s.layout.group() > 2;
  })) << "GQA with a group above 2";
  EXPECT_TRUE(any_seed([](const Scenario& s) {
    return s.layout.kv_heads == 1 && s.layout.q_heads >= 8;
  })) << "MQA over at least 8 q heads";
}

}  // namespace
}  // namespace kvfuzz
