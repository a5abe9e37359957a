// kvfuzz-llama-export FIXTURE OUT.gguf: writes the GGUF model of a model fixture (its model
// section and layout, as the llama.cpp adapter loads it), so that a finding can be
// reproduced with llama.cpp alone (docs/findings/llama.cpp.md). Exit 2 on bad input.
#include <cstdio>
#include <exception>
#include <string>

#include "gguf_export.h"
#include "kvfuzz/fixture_io.h"
#include "model/transformer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kvfuzz-llama-export FIXTURE.json OUT.gguf\n");
    return 2;
  }
  try {
    const kvfuzz::Scenario scenario = kvfuzz::load_fixture(argv[1]);
    if (!scenario.model) {
      std::fprintf(stderr, "%s: $.model: expected a model fixture (a \"model\" section)\n",
                   argv[1]);
      return 2;
    }
    if (const std::string why = kvfuzz::llama_cpp::unexpressible(scenario.layout); !why.empty()) {
      std::fprintf(stderr, "%s: $.layout: the llama architecture cannot express %s\n", argv[1],
                   why.c_str());
      return 2;
    }
    kvfuzz::llama_cpp::write_gguf(argv[2], *scenario.model, scenario.layout,
                                  kvfuzz::make_weights(*scenario.model, scenario.layout));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvfuzz-llama-export: %s\n", e.what());
    return 2;
  }
  return 0;
}
