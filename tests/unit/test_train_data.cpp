// Training data and trainer helpers: loss masks of prompt/completion and chat data, packing with
// EOS between documents, padding mode, errors naming file and line, and which parameters get
// weight decay (transformers' Trainer: none for biases and norm weights).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/data.h"
#include "train/trainer.h"
#include "vk/error.h"

namespace vkf {
namespace {
namespace fs = std::filesystem;

// A WordLevel tokenizer over "t0".."t47" split on whitespace, with a chat template that marks
// roles with t10 (user) and t11 (assistant).
Tokenizer word_tokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 48; ++i) vocab[fmt::format("t{}", i)] = i;
  const nlohmann::json tok = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                              {"added_tokens", nlohmann::json::array()}, {"normalizer", nullptr},
                              {"pre_tokenizer", {{"type", "WhitespaceSplit"}}}, {"post_processor", nullptr},
                              {"decoder", nullptr},
                              {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "t0"}}}};
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": "t2", "chat_template": "{% for m in messages %}t{{ 10 if m['role'] == 'user' else 11 }} {{ m['content'] }} {% endfor %}"})";
  return Tokenizer::from_folder(dir);
}

class TrainData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("vkf_data_{}", ::getpid());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TrainData, LabelsMaskPromptsAndUserTurns) {
  const Tokenizer t = word_tokenizer(dir_ / "tok");
  std::ofstream(dir_ / "d.jsonl") << R"({"prompt": "t20 t21", "completion": "t22 t23"})" << "\n\n"
                                  << R"({"messages": [{"role": "user", "content": "t30"}, {"role": "assistant", "content": "t32 t33"}]})"
                                  << "\n" << R"({"text": "t40 t41"})" << "\n";
  train::DataOptions o;
  o.eos_id = 2;
  const auto docs = train::load_documents((dir_ / "d.jsonl").string(), t, o);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(docs[0].ids, (std::vector<int32_t>{20, 21, 22, 23, 2}));
  EXPECT_EQ(docs[0].labels, (std::vector<int32_t>{-100, -100, 22, 23, 2}));
  EXPECT_EQ(docs[1].ids, (std::vector<int32_t>{10, 30, 11, 32, 33, 2}));
  EXPECT_EQ(docs[1].labels, (std::vector<int32_t>{-100, -100, 11, 32, 33, 2}));
  EXPECT_EQ(docs[2].labels, (std::vector<int32_t>{40, 41, 2}));
  // Packing concatenates and cuts exact lengths, dropping the remainder.
  o.max_length = 4;
  const auto packed = train::make_sequences(docs, o);
  ASSERT_EQ(packed.size(), 3u);  // 14 tokens -> 3 x 4
  EXPECT_EQ(packed[1].ids, (std::vector<int32_t>{2, 10, 30, 11}));
  EXPECT_EQ(packed[1].labels, (std::vector<int32_t>{2, -100, -100, 11}));
  o.packing = false;
  const auto padded = train::make_sequences(docs, o);
  ASSERT_EQ(padded.size(), 3u);
  EXPECT_EQ(padded[1].ids, (std::vector<int32_t>{10, 30, 11, 32}));  // truncated
}

TEST_F(TrainData, ErrorsNameFileAndLine) {
  const Tokenizer t = word_tokenizer(dir_ / "tok");
  std::ofstream(dir_ / "bad.jsonl") << R"({"text": "t5"})" << "\n" << R"({"question": "t5"})" << "\n";
  test::expect_error([&] { train::load_documents((dir_ / "bad.jsonl").string(), t, {}); },
                     {"bad.jsonl:2", "prompt", "messages"});
  test::expect_error([&] { train::load_documents((dir_ / "none.txt").string(), t, {}); }, {"none.txt"});
  train::DataOptions o;
  o.max_length = 64;
  std::ofstream(dir_ / "short.txt") << "t5 t6";
  const auto docs = train::load_documents((dir_ / "short.txt").string(), t, o);
  test::expect_error([&] { train::make_sequences(docs, o); }, {"fewer than one", "--max-length"});
}

TEST(Trainer, WeightDecayGroups) {
  EXPECT_TRUE(train::decays("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(train::decays("model.embed_tokens.weight"));
  EXPECT_FALSE(train::decays("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(train::decays("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(train::decays("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(train::decays("model.norm.weight"));
}

}  // namespace
}  // namespace vkf
