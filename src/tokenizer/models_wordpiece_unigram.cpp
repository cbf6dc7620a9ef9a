// WordPiece (greedy longest match with a continuation prefix), Unigram (Viterbi over piece
// scores, with byte fallback) and WordLevel (whole-word lookup) models.
#include <cmath>
#include <limits>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "vk/error.h"

namespace vkf::tok {
namespace {

class VocabModel : public Model {
 public:
  Vocab vocab;
  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab.at(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab.ids.size()); }
};

class WordPiece : public VocabModel {
 public:
  std::string unk, prefix;
  size_t max_chars = 100;

  int32_t unk_id() const {
    auto id = vocab.find(unk);
    VKF_REQUIRE(id, "WordPiece: unk_token \"{}\" is not in the vocab", unk);
    return *id;
  }
  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (to_code_points(w).size() > max_chars) {
      out.push_back(unk_id());
      return;
    }
    std::vector<int32_t> sub;
    size_t start = 0;
    while (start < w.size()) {
      size_t end = w.size();
      std::optional<int32_t> found;
      while (start < end) {
        std::string s(w.substr(start, end - start));
        if (start > 0) s = prefix + s;
        if ((found = vocab.find(s))) break;
        // Step back one whole character.
        --end;
        while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80) --end;
      }
      if (!found) {
        out.push_back(unk_id());
        return;
      }
      sub.push_back(*found);
      start = end;
    }
    out.insert(out.end(), sub.begin(), sub.end());
  }
};

class WordLevel : public VocabModel {
 public:
  std::string unk;
  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (auto id = vocab.find(std::string(w))) {
      out.push_back(*id);
      return;
    }
    auto u = vocab.find(unk);
    VKF_REQUIRE(u, "WordLevel: \"{}\" is not in the vocab and unk_token \"{}\" is missing", w, unk);
    out.push_back(*u);
  }
};

class Unigram : public VocabModel {
 public:
  std::vector<double> scores;
  std::optional<int32_t> unk_id;
  bool byte_fallback = false;
  double min_score = 0;
  size_t max_len = 0;

  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (w.empty()) return;
    const double unk_score = min_score - 10.0;
    struct Node {
      double score = 0;
      size_t from = 0;
      int32_t id = -1;
      bool set = false;
    };
    std::vector<Node> best(w.size() + 1);
    best[0].set = true;
    for (size_t s = 0, clen = 0; s < w.size(); s += clen) {
      decode_utf8(w, s, clen);
      if (!best[s].set) continue;
      bool single = false;
      // Prefixes in increasing length; the first candidate wins ties as in the library.
      for (size_t e = s + 1; e <= w.size() && e - s <= max_len; ++e) {
        auto id = vocab.find(std::string(w.substr(s, e - s)));
        if (!id) continue;
        const double cand = best[s].score + scores[static_cast<size_t>(*id)];
        if (!best[e].set || cand > best[e].score) best[e] = {cand, s, *id, true};
        if (e - s == clen) single = true;
      }
      if (!single) {
        const double cand = best[s].score + unk_score;
        Node& t = best[s + clen];
        if (!t.set || cand > t.score) t = {cand, s, -1, true};
      }
    }
    // Walk back, then fuse consecutive unknown pieces into one.
    std::vector<std::pair<std::string, int32_t>> pieces;
    for (size_t e = w.size(); e > 0; e = best[e].from)
      pieces.emplace_back(std::string(w.substr(best[e].from, e - best[e].from)), best[e].id);
    std::reverse(pieces.begin(), pieces.end());
    std::vector<std::pair<std::string, int32_t>> fused;
    for (auto& p : pieces) {
      if (p.second < 0 && !fused.empty() && fused.back().second < 0)
        fused.back().first += p.first;
      else
        fused.push_back(p);
    }
    for (auto& [text, id] : fused) {
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      if (auto known = vocab.find(text)) {
        out.push_back(*known);
        continue;
      }
      if (byte_fallback) {
        std::vector<int32_t> bytes;
        for (unsigned char b : text)
          if (auto bid = vocab.find(fmt::format("<0x{:02X}>", b))) bytes.push_back(*bid);
        if (bytes.size() == text.size()) {
          out.insert(out.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      VKF_REQUIRE(unk_id, "Unigram: \"{}\" cannot be encoded and the model has no unk_id", text);
      out.push_back(*unk_id);
    }
  }
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const json& j, const std::string& where) {
  auto m = std::make_unique<WordPiece>();
  m->vocab = Vocab::from_object(field(j, where, "vocab"), where + ".vocab");
  m->unk = str_field(j, where, "unk_token", "[UNK]");
  m->prefix = str_field(j, where, "continuing_subword_prefix", "##");
  if (auto it = j.find("max_input_chars_per_word"); it != j.end() && !it->is_null()) {
    VKF_REQUIRE(it->is_number_unsigned(), "{}.max_input_chars_per_word: expected a count", where);
    m->max_chars = it->get<size_t>();
  }
  return m;
}

std::unique_ptr<Model> make_wordlevel(const json& j, const std::string& where) {
  auto m = std::make_unique<WordLevel>();
  m->vocab = Vocab::from_object(field(j, where, "vocab"), where + ".vocab");
  m->unk = str_field(j, where, "unk_token", "<unk>");
  return m;
}

std::unique_ptr<Model> make_unigram(const json& j, const std::string& where) {
  auto m = std::make_unique<Unigram>();
  const json& v = field(j, where, "vocab");
  VKF_REQUIRE(v.is_array(), "{}.vocab: expected an array of [piece, score]", where);
  m->min_score = std::numeric_limits<double>::max();
  for (size_t i = 0; i < v.size(); ++i) {
    VKF_REQUIRE(v[i].is_array() && v[i].size() == 2 && v[i][0].is_string() && v[i][1].is_number(),
                "{}.vocab[{}]: expected [piece, score], got {}", where, i, v[i].dump());
    const std::string piece = v[i][0].get<std::string>();
    m->vocab.add(piece, static_cast<int32_t>(i));
    m->scores.push_back(v[i][1].get<double>());
    m->min_score = std::min(m->min_score, m->scores.back());
    m->max_len = std::max(m->max_len, piece.size());
  }
  if (auto it = j.find("unk_id"); it != j.end() && !it->is_null()) {
    VKF_REQUIRE(it->is_number_unsigned() && it->get<size_t>() < v.size(),
                "{}.unk_id: expected an index into vocab, got {}", where, it->dump());
    m->unk_id = it->get<int32_t>();
  }
  m->byte_fallback = bool_field(j, where, "byte_fallback", false);
  return m;
}

}  // namespace vkf::tok
