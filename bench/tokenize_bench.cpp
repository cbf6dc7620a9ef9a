// Encode throughput of vkf::Tokenizer, single-threaded: MB/s and tokens/s on one text (the
// parity corpus repeated, or --text FILE). tools/oracle/tokenizer_bench.js measures the HF
// library on the same text; results go in bench/RESULTS.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "vk/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer encode throughput"};
  std::string tokenizer, text_file, corpus = "tests/fixtures/tokenizer/corpus.jsonl";
  int repeat = 200, iters = 3;
  app.add_option("--tokenizer", tokenizer, "Model folder or tokenizer.json")->required();
  app.add_option("--text", text_file, "A UTF-8 text file to encode (default: the corpus)");
  app.add_option("--corpus", corpus, "JSON-lines corpus used when --text is absent");
  app.add_option("--repeat", repeat, "Times the corpus is repeated");
  app.add_option("--iters", iters, "Timed runs (the best is reported)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::string text;
    if (!text_file.empty()) {
      std::ifstream f(text_file, std::ios::binary);
      VKF_REQUIRE(f.good(), "{}: cannot open", text_file);
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    } else {
      std::ifstream f(corpus);
      VKF_REQUIRE(f.good(), "{}: cannot open; run from the repository root or pass --corpus",
                  corpus);
      std::string line, joined;
      while (std::getline(f, line)) joined += nlohmann::json::parse(line).get<std::string>() + "\n";
      for (int i = 0; i < repeat; ++i) text += joined;
    }
    const auto tok = vkf::Tokenizer::load(tokenizer);
    double best = 1e30;
    size_t n_tokens = 0;
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      n_tokens = tok.encode(text, false).size();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    fmt::print("vkformer: {} bytes, {} tokens, {:.3f} s, {:.2f} MB/s, {:.0f} tokens/s\n",
               text.size(), n_tokens, best, static_cast<double>(text.size()) / best / 1e6,
               static_cast<double>(n_tokens) / best);
  } catch (const vkf::Error& e) {
    fmt::print(stderr, "tokenize_bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
