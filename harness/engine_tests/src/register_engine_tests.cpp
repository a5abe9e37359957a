// Registers the engine's tests with GoogleTest at run time (testing::RegisterTest): the
// corpus is a list of files known only when the program starts, and one test per fixture
// lets ctest (gtest_discover_tests) report, rerun and label each on its own.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "corpus/fixture_files.h"
#include "engine_tests_internal.h"
#include "kvfuzz/engine_tests.h"

namespace kvfuzz {

namespace {

class FunctionTest : public testing::Test {
 public:
  explicit FunctionTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

// A test name GoogleTest's filters and ctest take as it is: letters, digits and '_' ('-'
// would start a negative --gtest_filter pattern). Repeats get _2, _3, ...
class TestNames {
 public:
  std::string make(const std::string& wanted) {
    std::string name = wanted;
    for (char& c : name) {
      const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (!plain) c = '_';
    }
    // assign, not = "_": g++ 12 -O3 -Wrestrict false positive on the literal (GCC PR 105329).
    if (name.empty()) name.assign(1, '_');
    std::string unique = name;
    for (int i = 2; !taken_.insert(unique).second; ++i) unique = name + "_" + std::to_string(i);
    return unique;
  }

 private:
  std::set<std::string> taken_;
};

void add_test(const char* suite, const std::string& name, const std::string& file, int line,
              std::function<void()> body) {
  testing::RegisterTest(suite, name.c_str(), nullptr, nullptr, file.c_str(), line,
                        [body = std::move(body)]() { return new FunctionTest(body); });
}

// Fixture files, or every *.json below a directory (fixtures_below), in the order given.
std::vector<std::filesystem::path> fixture_files(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::filesystem::path> files;
  for (const std::filesystem::path& path : paths) {
    if (!std::filesystem::is_directory(path)) {
      files.push_back(path);
      continue;
    }
    const std::vector<std::filesystem::path> found = fixtures_below(path);
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

}  // namespace

void register_engine_tests(EngineInfo engine, EngineTestOptions options) {
  if (!engine.make) throw std::invalid_argument("engine " + engine.name + " has no factory");
  auto shared_engine = std::make_shared<const EngineInfo>(std::move(engine));
  auto shared_options = std::make_shared<const EngineTestOptions>(with_environment(options));

  for (const Property property : kAllProperties) {
    add_test("Properties", std::string(property_name(property)), __FILE__, __LINE__,
             [shared_engine, shared_options, property] {
               engine_tests::check_generated_cases(*shared_engine, property, *shared_options);
             });
  }
  const auto add_corpus = [&](const char* suite, const std::vector<std::filesystem::path>& paths) {
    TestNames names;
    for (const std::filesystem::path& file : fixture_files(paths)) {
      add_test(suite, names.make(file.stem().string()), file.string(), 1,
               [shared_engine, shared_options, file] {
                 engine_tests::replay_fixture(*shared_engine, file, *shared_options);
               });
    }
  };
  add_corpus("Corpus", shared_options->corpus);
  add_corpus("KvfuzzCorpus", shared_options->kvfuzz_corpus);
}

}  // namespace kvfuzz
