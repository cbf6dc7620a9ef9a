// Data loading, tokenization and packing (see data.h).
#include "train/data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/dataset.h"
#include "data/records.h"
#include "tokenizer/chat_template.h"
#include "vk/error.h"

namespace vkf::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void append(Example& e, const std::vector<int32_t>& ids, bool trained) {
  e.ids.insert(e.ids.end(), ids.begin(), ids.end());
  e.labels.insert(e.labels.end(), ids.size(), -100);
  if (trained) std::copy(ids.begin(), ids.end(), e.labels.end() - static_cast<std::ptrdiff_t>(ids.size()));
}

// One "messages" conversation: the loss covers the tokens each assistant turn adds to the
// rendered conversation (as TRL's assistant-only loss), the rest is context.
Example from_messages(const json& messages, const Tokenizer& t, const std::string& where) {
  VKF_REQUIRE(messages.is_array() && !messages.empty(), "{}: \"messages\" must be a non-empty list", where);
  VKF_REQUIRE(!t.chat_template().empty(), "{}: \"messages\" needs a chat template in the tokenizer folder", where);
  const json extra = {{"bos_token", t.bos_token()}, {"eos_token", t.eos_token()}};
  Example e;
  std::vector<int32_t> done;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    VKF_REQUIRE(m.is_object() && m.contains("role") && m.contains("content"),
                "{}: message {} needs \"role\" and \"content\"", where, i);
    const json upto = json(std::vector<json>(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(i) + 1));
    const auto ids = t.encode(tokenizer::apply_chat_template(t.chat_template(), upto, false, extra), false);
    VKF_REQUIRE(ids.size() >= done.size() && std::equal(done.begin(), done.end(), ids.begin()),
                "{}: the chat template's rendering of message {} does not extend the previous turns' "
                "tokens, so assistant tokens cannot be located", where, i);
    std::vector<int32_t> added(ids.begin() + static_cast<std::ptrdiff_t>(done.size()), ids.end());
    append(e, added, m["role"] == "assistant");
    done = ids;
  }
  return e;
}

void load_file(const fs::path& file, const Tokenizer& t, const DataOptions& o, std::vector<Example>& out) {
  std::ifstream in(file, std::ios::binary);
  VKF_REQUIRE(in, "{}: cannot open", file.string());
  auto finish = [&](Example e) {
    if (o.eos_id >= 0) append(e, {o.eos_id}, true);
    if (!e.ids.empty()) out.push_back(std::move(e));
  };
  if (!data::is_record_file(file.string())) {
    std::stringstream ss;
    ss << in.rdbuf();
    Example e;
    append(e, t.encode(ss.str(), true), true);
    finish(std::move(e));
    return;
  }
  const auto col = [](const std::string& given, const char* fallback) { return given.empty() ? std::string(fallback) : given; };
  const std::string text = col(o.text_column, "text"), prompt = col(o.prompt_column, "prompt"),
                    completion = col(o.completion_column, "completion"), messages = col(o.messages_column, "messages");
  // Which layout: the one whose columns were named, else the first whose columns are present.
  const bool named_text = !o.text_column.empty(), named_pc = !o.prompt_column.empty() || !o.completion_column.empty(),
             named_messages = !o.messages_column.empty();
  VKF_REQUIRE(named_text + named_pc + named_messages <= 1,
              "give one of --text-column, --prompt-column/--completion-column, --messages-column");
  data::read_records(file.string(), {text, prompt, completion, messages}, [&](json&& j, const std::string& where) {
    auto str = [&](const std::string& c) -> std::string {
      VKF_REQUIRE(j.contains(c), "{}: no column \"{}\" (the record has: {})", where, c, j.dump().substr(0, 200));
      VKF_REQUIRE(j[c].is_string(), "{}: \"{}\" must be a string, not {}", where, c, j[c].type_name());
      return j[c].get<std::string>();
    };
    Example e;
    const bool use_text = named_text || (!named_pc && !named_messages && j.contains(text) && !j[text].is_null());
    const bool use_pc = named_pc || (!named_text && !named_messages && !use_text && j.contains(prompt) && j.contains(completion));
    if (use_text) {
      append(e, t.encode(str(text), true), true);
    } else if (use_pc) {
      append(e, t.encode(str(prompt), true), false);
      append(e, t.encode(str(completion), false), true);
    } else if (named_messages || j.contains(messages)) {
      VKF_REQUIRE(j.contains(messages), "{}: no column \"{}\"", where, messages);
      e = from_messages(j[messages], t, where);
    } else {
      fail("{}: expected \"{}\", \"{}\" + \"{}\", or \"{}\" (name others with --text-column, --prompt-column, "
           "--completion-column or --messages-column)", where, text, prompt, completion, messages);
    }
    finish(std::move(e));
  });
}

}  // namespace

std::vector<Example> load_documents(const std::string& path, const Tokenizer& t, const DataOptions& o) {
  std::vector<fs::path> files;
  for (const auto& f : data::resolve_data(path, o.split)) files.push_back(f);
  std::vector<Example> docs;
  for (const auto& f : files) load_file(f, t, o, docs);
  VKF_REQUIRE(!docs.empty(), "{}: no training text found", path);
  return docs;
}

std::vector<Example> make_sequences(const std::vector<Example>& docs, const DataOptions& o) {
  VKF_REQUIRE(o.max_length >= 2, "--max-length must be at least 2 (got {})", o.max_length);
  const size_t L = static_cast<size_t>(o.max_length);
  std::vector<Example> out;
  if (!o.packing) {
    for (const auto& d : docs) {
      Example e;
      const size_t n = std::min(L, d.ids.size());
      e.ids.assign(d.ids.begin(), d.ids.begin() + static_cast<std::ptrdiff_t>(n));
      e.labels.assign(d.labels.begin(), d.labels.begin() + static_cast<std::ptrdiff_t>(n));
      out.push_back(std::move(e));
    }
    return out;
  }
  Example all;
  for (const auto& d : docs) {
    all.ids.insert(all.ids.end(), d.ids.begin(), d.ids.end());
    all.labels.insert(all.labels.end(), d.labels.begin(), d.labels.end());
  }
  for (size_t start = 0; start + L <= all.ids.size(); start += L) {
    Example e;
    e.ids.assign(all.ids.begin() + static_cast<std::ptrdiff_t>(start), all.ids.begin() + static_cast<std::ptrdiff_t>(start + L));
    e.labels.assign(all.labels.begin() + static_cast<std::ptrdiff_t>(start), all.labels.begin() + static_cast<std::ptrdiff_t>(start + L));
    out.push_back(std::move(e));
  }
  VKF_REQUIRE(!out.empty(), "the data holds {} tokens, fewer than one --max-length sequence of {}; "
              "use a smaller --max-length or more text", all.ids.size(), o.max_length);
  return out;
}

}  // namespace vkf::train
