// Post-processors: add special tokens around a single encoded sequence (pairs are not used by
// vkformer). With add_special_tokens off the tokenizer skips them entirely, as the library does.
#include "tokenizer/components.h"
#include "vk/error.h"

namespace vkf::tok {
namespace {

class Template : public PostProcessor {
 public:
  std::vector<int32_t> before, after;  // ids around the sequence (a single "$A")
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out(before);
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after.begin(), after.end());
    return out;
  }
};

class SequencePP : public PostProcessor {
 public:
  std::vector<std::unique_ptr<PostProcessor>> items;
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : items) ids = p->process(std::move(ids));
    return ids;
  }
};

int32_t pair_id(const json& j, const std::string& where, const char* name) {
  const json& v = field(j, where, name);
  VKF_REQUIRE(v.is_array() && v.size() == 2 && v[1].is_number_integer(),
              "{}.{}: expected [token, id], got {}", where, name, v.dump());
  return v[1].get<int32_t>();
}

}  // namespace

std::unique_ptr<PostProcessor> make_template(std::vector<int32_t> before,
                                             std::vector<int32_t> after) {
  auto p = std::make_unique<Template>();
  p->before = std::move(before);
  p->after = std::move(after);
  return p;
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& where) {
  const std::string t = type_of(j, where);
  if (t == "ByteLevel") return std::make_unique<SequencePP>();  // only trims offsets
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    auto p = std::make_unique<Template>();
    p->before = {pair_id(j, where, "cls")};
    p->after = {pair_id(j, where, "sep")};
    return p;
  }
  if (t == "Sequence") {
    auto s = std::make_unique<SequencePP>();
    const json& list = field(j, where, "processors");
    VKF_REQUIRE(list.is_array(), "{}.processors: expected an array", where);
    for (size_t i = 0; i < list.size(); ++i)
      s->items.push_back(make_post_processor(list[i], fmt::format("{}.processors[{}]", where, i)));
    return s;
  }
  if (t == "TemplateProcessing") {
    auto p = std::make_unique<Template>();
    const json& single = field(j, where, "single");
    const json& specials = field(j, where, "special_tokens");
    VKF_REQUIRE(single.is_array(), "{}.single: expected an array", where);
    bool seen_seq = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string w = fmt::format("{}.single[{}]", where, i);
      const json& e = single[i];
      if (e.is_object() && e.contains("Sequence")) {
        VKF_REQUIRE(!seen_seq, "{}: a second sequence in a single template", w);
        seen_seq = true;
        continue;
      }
      VKF_REQUIRE(e.is_object() && e.contains("SpecialToken"),
                  "{}: expected {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}", w);
      const std::string id = str_field(e["SpecialToken"], w + ".SpecialToken", "id");
      VKF_REQUIRE(specials.is_object() && specials.contains(id),
                  "{}: special token \"{}\" is not in {}.special_tokens", w, id, where);
      const json& ids = field(specials[id], where + ".special_tokens." + id, "ids");
      VKF_REQUIRE(ids.is_array(), "{}.special_tokens.{}.ids: expected an array", where, id);
      auto& dst = seen_seq ? p->after : p->before;
      for (const auto& x : ids) dst.push_back(x.get<int32_t>());
    }
    return p;
  }
  fail("{}.type: unknown post-processor \"{}\"", where, t);
}

}  // namespace vkf::tok
