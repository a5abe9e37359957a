#include "check_reproduce.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <string_view>

#include "support/text.h"

namespace kvfuzz::cli {

std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < all.size()) {
    const size_t end = std::min(all.find('\0', start), all.size());
    argv.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return argv;
}

std::string reproduction_command(const std::vector<std::string>& argv, const std::string& engine,
                                 uint64_t case_seed) {
  constexpr std::array<std::string_view, 7> dropped = {
      "--cases", "--seed", "--jobs", "--junit", "--json", "--max-failures", "--case-seed"};
  std::vector<std::string> kept;
  bool engine_given = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    const std::string_view name = std::string_view(word).substr(0, word.find('='));
    const bool joined = word.find('=') != std::string::npos && word.starts_with("--");
    if (std::find(dropped.begin(), dropped.end(), name) != dropped.end()) {
      if (!joined) ++i;  // its value
      continue;
    }
    if (name == "--engine") {
      if (!joined) ++i;
      kept.push_back("--engine");
      kept.push_back(engine);
      engine_given = true;
      continue;
    }
    kept.push_back(word);
  }
  if (!engine_given) {
    kept.push_back("--engine");
    kept.push_back(engine);
  }
  kept.push_back("--case-seed");
  kept.push_back(std::to_string(case_seed));
  std::string command;
  for (const std::string& word : kept) {
    if (!command.empty()) command += ' ';
    command += shell_word(word);  // not " " + shell_word(...): g++ 12 -O3 -Wrestrict false positive
  }
  return command;
}

}  // namespace kvfuzz::cli
