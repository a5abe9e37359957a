// Focusing a `kvfuzz check` run from the command line (docs/filters.md): flags that narrow
// what the one generator draws (GeneratorFilters in kvfuzz/generator.h), applied after the
// engines' declared supports. A case seed reproduces its case only with the same flags.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "kvfuzz/generator.h"

namespace kvfuzz::cli {

// What the flags hold, as given (empty or 0: the flag was not given, no filter).
struct CaseFilters {
  std::string dtypes;      // --dtype f16,bf16
  std::string window;      // --window on|off|any
  std::string rope;        // --rope on|off|any
  std::string without;     // --without truncate,fork,reset,batch
  std::string sequences;   // --sequences N or MIN-MAX
  int max_context = 0;     // --max-context N
  int min_context = 0;     // --min-context N
  std::string features;    // --feature softcap,sinks,alibi,chunked_local
  std::string kv_formats;  // --kv-format fp8_e4m3fn,q8_0,...
};

// Registers the flags above on `check`, with their help.
void add_filter_options(CLI::App& cmd, CaseFilters& filters);

// Sets options.filters from the flags, after options.supports holds the engines' supports.
// Throws UsageError with one line naming the flag and what was expected, for a value that
// does not parse and for a filter the engines' supports or the sizes cannot meet (--dtype
// f32 for an f16-only engine).
void apply_filters(const CaseFilters& flags, GeneratorOptions& options);

}  // namespace kvfuzz::cli
