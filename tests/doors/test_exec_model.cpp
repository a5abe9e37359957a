// Whole models through the exec: door (docs/engine-protocol.md, "Whole models"): the
// messages (hello's "whole_model" and "model", a step of ids, a reply of logits, each
// malformed reply named by its path) and the weights file (safetensors: the bits of
// make_weights, gone when its object is). Whole runs through a numpy engine are in
// tests/python/test_model_engines.py (numpy is the venv's).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "doors/exec_protocol.h"
#include "doors/model_weights_file.h"
#include "kvfuzz/model_engine.h"
#include "model/transformer.h"

namespace kvfuzz::doors {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ExecModelMessages, HelloAndNewCaseCarryTheModelAndItsWeightsFile) {
  EngineConfig config;
  config.sequences = 2;
  config.page_order = {0, 1};
  const ModelRequest model{ModelConfig{.vocab = 5, .width = 4, .layers = 2, .ffn = 8, .seed = 9},
                           "/tmp/w.safetensors"};
  for (const std::string& line :
       {hello_request(config, 2, model), new_case_request(config, model)}) {
    const auto json = nlohmann::json::parse(line);
    EXPECT_EQ(json["model"],
              nlohmann::json::parse(R"({"vocab":5,"width":4,"layers":2,"ffn":8,"seed":9,)"
                                    R"("weights":"/tmp/w.safetensors"})"))
        << line;
  }
  // An attention engine's hello is as it was: no "model".
  EXPECT_FALSE(nlohmann::json::parse(hello_request(config, 2)).contains("model"));
}

TEST(ExecModelMessages, AStepIsIdsAndItsReplyIsLogitsPerToken) {
  const std::vector<int> a{3, 1}, b{4};
  const std::vector<ModelChunkIn> chunks{{0, a}, {1, b}};
  EXPECT_EQ(model_step_request(chunks),
            R"({"op":"step","chunks":[{"seq":0,"ids":[3,1]},{"seq":1,"ids":[4]}]})");
  std::vector<ModelChunkOut> outs(2);
  read_model_step_reply(R"({"ok":true,"chunks":[{"positions":[0,1],"logits":[[1,2,3],[4,5,6]]},)"
                        R"({"positions":[7],"logits":[[-1,"NaN",0.5]]}]})",
                        chunks, 3, outs, 2);
  EXPECT_EQ(outs[0].positions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(outs[0].logits, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(outs[1].positions, (std::vector<int64_t>{7}));
  EXPECT_TRUE(std::isnan(outs[1].logits[1]));
}

TEST(ExecModelMessages, AMalformedLogitsReplyNamesThePathAndWhatWasExpected) {
  const std::vector<int> ids{3, 1};
  const std::vector<ModelChunkIn> chunks{{0, ids}};
  std::vector<ModelChunkOut> outs(1);
  const auto read = [&](const std::string& line) {
    return error_of([&] { read_model_step_reply(line, chunks, 3, outs, 2); });
  };
  EXPECT_EQ(read(R"({"ok":true,"chunks":[{"positions":[0,1],"logits":[[1,2,3],[4,5]]}]})"),
            "the engine's answer to step does not follow protocol 2: $.chunks[0].logits[1]: "
            "expected an array of 3 numbers (vocab), got an array of 2");
  EXPECT_EQ(read(R"({"ok":true,"chunks":[{"positions":[0,1],"out":[[1,2,3],[4,5,6]]}]})"),
            "the engine's answer to step does not follow protocol 2: $.chunks[0].logits: "
            "expected an array of 2 logits rows (one per token), got nothing (the field is "
            "missing)");
  EXPECT_EQ(read(R"({"ok":true,"chunks":[{"positions":[0,1],"logits":[[1,2,3],[4,"x",6]]}]})"),
            "the engine's answer to step does not follow protocol 2: $.chunks[0].logits[1][1]: "
            "expected a number (or NaN, Infinity, -Infinity), got the string 'x'");
}

TEST(ExecModelMessages, HelloSaysWholeModelAndNewCaseMayNotChangeIt) {
  const HelloReply hello =
      read_hello_reply(R"({"ok":true,"protocol":2,"name":"m","whole_model":true})", 2);
  EXPECT_TRUE(hello.whole_model);
  EXPECT_FALSE(read_hello_reply(R"({"ok":true,"protocol":2,"name":"m"})", 2).whole_model);
  EXPECT_EQ(error_of([&] { read_new_case_reply(R"({"ok":true,"protocol":2,"name":"m"})", hello); }),
            "the engine's answer to new_case declares $.whole_model otherwise than its answer to "
            "hello; only numerics may depend on the case (docs/engine-protocol.md)");
  EXPECT_EQ(error_of([] {
              read_hello_reply(R"({"ok":true,"protocol":2,"name":"m","whole_model":1})", 2);
            }),
            "the engine's answer to hello does not follow protocol 2: $.whole_model: expected "
            "true or false, got the number 1");
}

// The safetensors header and the bits of every tensor against make_weights.
TEST(ModelWeightsFile, HoldsMakeWeightsBitsAsSafetensorsAndIsRemovedAfterUse) {
  const ModelConfig model{.vocab = 7, .width = 4, .layers = 2, .ffn = 6, .seed = 42};
  Layout layout;
  layout.q_heads = 2;
  layout.head_dim = 4;
  layout.value_dim = 2;
  std::filesystem::path path;
  std::string bytes;
  std::filesystem::path folder;
  {
    const WeightsFolder weights;
    folder = weights.path();
    {
      const ModelWeightsFile file(folder, model, layout);
      path = file.path();
      ASSERT_TRUE(std::filesystem::exists(path));
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
    // What the folder would keep of a file whose reader was killed goes with the folder.
    std::ofstream(folder / "left-by-a-killed-worker.safetensors") << "weights";
    ASSERT_TRUE(std::filesystem::exists(folder / "left-by-a-killed-worker.safetensors"));
  }
  EXPECT_FALSE(std::filesystem::exists(folder)) << folder;
  EXPECT_EQ(bytes, model_weights_safetensors(model, layout));
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | static_cast<unsigned char>(bytes[i]);
  ASSERT_EQ(size % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, size));
  const TransformerWeights w = make_weights(model, layout);
  const auto check = [&](const std::string& name, const std::vector<float>& values,
                         const std::vector<size_t>& shape) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(header.contains(name));
    EXPECT_EQ(header[name]["dtype"], "F32");
    EXPECT_EQ(header[name]["shape"].get<std::vector<size_t>>(), shape);
    const auto offsets = header[name]["data_offsets"].get<std::vector<size_t>>();
    ASSERT_EQ(offsets[1] - offsets[0], values.size() * 4);
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 3; b >= 0; --b) {
        bits = bits << 8 | static_cast<unsigned char>(bytes[8 + size + offsets[0] + 4 * i + b]);
      }
      ASSERT_EQ(bits, std::bit_cast<uint32_t>(values[i])) << i;
    }
  };
  check("embedding", w.embedding, {7, 4});
  check("layers.1.wq", w.layers[1].wq, {4, 8});
  check("layers.1.wv", w.layers[1].wv, {4, 2});
  check("layers.0.wo", w.layers[0].wo, {4, 4});
  check("layers.0.w_down", w.layers[0].w_down, {6, 4});
  check("layers.1.mlp_norm", w.layers[1].mlp_norm, {4});
  check("lm_head", w.lm_head, {4, 7});
  EXPECT_EQ(header.size(), 1 + 1 + 2 * 9 + 2u);  // metadata, embedding, 9 per layer, 2 final
}

}  // namespace
}  // namespace kvfuzz::doors
