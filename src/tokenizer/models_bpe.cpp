// The BPE model: splits a word into characters (or byte-fallback tokens) and applies merges by
// rank, always the lowest-ranked, leftmost pair first, which is the order the HF library's
// priority queue produces.
#include <limits>
#include <queue>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "vk/error.h"

namespace vkf::tok {

void Vocab::add(const std::string& token, int32_t id) {
  ids[token] = id;
  if (tokens.size() <= static_cast<size_t>(id)) tokens.resize(static_cast<size_t>(id) + 1);
  tokens[static_cast<size_t>(id)] = token;
}

Vocab Vocab::from_object(const json& j, const std::string& where) {
  VKF_REQUIRE(j.is_object(), "{}: expected an object of token: id, got {}", where, j.type_name());
  Vocab v;
  for (auto it = j.begin(); it != j.end(); ++it) {
    VKF_REQUIRE(it->is_number_integer() && it->get<int64_t>() >= 0 &&
                    it->get<int64_t>() < std::numeric_limits<int32_t>::max(),
                "{}[\"{}\"]: expected a non-negative integer id, got {}", where, it.key(),
                it->dump());
    v.add(it.key(), it->get<int32_t>());
  }
  return v;
}

namespace {

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ULL); }
};

class Bpe : public Model {
 public:
  Vocab vocab;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, PairHash> merges;  // -> rank, new id
  std::optional<std::string> unk, prefix, suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void tokenize(std::string_view w, std::vector<int32_t>& out) const override {
    if (w.empty()) return;
    if (ignore_merges)
      if (auto id = vocab.find(std::string(w))) {
        out.push_back(*id);
        return;
      }
    std::vector<int32_t> sym;
    std::optional<int32_t> pending_unk;
    for (size_t i = 0, len = 0; i < w.size(); i += len) {
      decode_utf8(w, i, len);
      std::string s(w.substr(i, len));
      if (prefix && i > 0) s = *prefix + s;
      if (suffix && i + len == w.size()) s += *suffix;
      if (auto id = vocab.find(s)) {
        if (pending_unk) sym.push_back(*std::exchange(pending_unk, std::nullopt));
        sym.push_back(*id);
        continue;
      }
      if (byte_fallback) {
        std::vector<int32_t> bytes;
        for (unsigned char b : s) {
          auto id = vocab.find(fmt::format("<0x{:02X}>", b));
          if (!id) break;
          bytes.push_back(*id);
        }
        // The library adds byte tokens without first flushing a pending unknown token.
        if (bytes.size() == s.size()) {
          sym.insert(sym.end(), bytes.begin(), bytes.end());
          continue;
        }
      }
      if (unk) {
        const int32_t uid = *vocab.find(*unk);
        if (pending_unk && !fuse_unk) sym.push_back(*pending_unk);
        pending_unk = uid;
      }
    }
    if (pending_unk) sym.push_back(*pending_unk);
    merge(sym);
    out.insert(out.end(), sym.begin(), sym.end());
  }

  // Repeatedly merges the lowest-ranked pair, the leftmost on ties, through a min-heap keyed by
  // (rank, position of the left symbol) over a linked list, so long words stay O(n log n).
  void merge(std::vector<int32_t>& sym) const {
    const size_t n = sym.size();
    if (n < 2) return;
    std::vector<int64_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) {
      prev[i] = static_cast<int64_t>(i) - 1;
      next[i] = i + 1 < n ? static_cast<int64_t>(i) + 1 : -1;
    }
    using Entry = std::pair<int32_t, size_t>;  // rank, left position
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    auto push = [&](size_t left) {
      if (next[left] < 0) return;
      auto it = merges.find(key(sym[left], sym[static_cast<size_t>(next[left])]));
      if (it != merges.end()) heap.emplace(it->second.first, left);
    };
    for (size_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      const auto [rank, left] = heap.top();
      heap.pop();
      if (!alive[left] || next[left] < 0) continue;
      const auto right = static_cast<size_t>(next[left]);
      auto it = merges.find(key(sym[left], sym[right]));
      if (it == merges.end() || it->second.first != rank) continue;  // stale entry
      sym[left] = it->second.second;
      alive[right] = false;
      next[left] = next[right];
      if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int64_t>(left);
      if (prev[left] >= 0) push(static_cast<size_t>(prev[left]));
      push(left);
    }
    size_t w = 0;
    for (size_t i = 0; i < n; ++i)
      if (alive[i]) sym[w++] = sym[i];
    sym.resize(w);
  }
  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab.find(t); }
  const std::string* id_to_token(int32_t id) const override { return vocab.at(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab.ids.size()); }
};

std::optional<std::string> opt_str(const json& j, const std::string& where, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return str_field(j, where, name);
}

}  // namespace

std::unique_ptr<Model> make_bpe(const json& j, const std::string& where) {
  auto m = std::make_unique<Bpe>();
  m->vocab = Vocab::from_object(field(j, where, "vocab"), where + ".vocab");
  if (auto it = j.find("dropout"); it != j.end() && !it->is_null())
    fail(
        "{}.dropout: BPE dropout ({}) is not supported (it makes encoding random); set it to "
        "null",
        where, it->dump());
  m->unk = opt_str(j, where, "unk_token");
  m->prefix = opt_str(j, where, "continuing_subword_prefix");
  m->suffix = opt_str(j, where, "end_of_word_suffix");
  if (m->prefix && m->prefix->empty()) m->prefix.reset();
  if (m->suffix && m->suffix->empty()) m->suffix.reset();
  m->fuse_unk = bool_field(j, where, "fuse_unk", false);
  m->byte_fallback = bool_field(j, where, "byte_fallback", false);
  m->ignore_merges = bool_field(j, where, "ignore_merges", false);
  if (m->unk)
    VKF_REQUIRE(m->vocab.find(*m->unk), "{}.unk_token: \"{}\" is not in the vocab", where, *m->unk);
  const json& merges = field(j, where, "merges");
  VKF_REQUIRE(merges.is_array(), "{}.merges: expected an array", where);
  const size_t plen = m->prefix ? m->prefix->size() : 0;
  for (size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      VKF_REQUIRE(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                  "{}.merges[{}]: \"{}\" is not two tokens separated by one space", where, r, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      VKF_REQUIRE(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                  "{}.merges[{}]: expected \"a b\" or [\"a\", \"b\"], got {}", where, r, e.dump());
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    auto ia = m->vocab.find(a), ib = m->vocab.find(b);
    VKF_REQUIRE(ia && ib, "{}.merges[{}]: token \"{}\" is not in the vocab", where, r, ia ? b : a);
    const std::string merged = a + (b.size() >= plen ? b.substr(plen) : b);
    auto im = m->vocab.find(merged);
    VKF_REQUIRE(im, "{}.merges[{}]: merged token \"{}\" is not in the vocab", where, r, merged);
    m->merges.emplace(Bpe::key(*ia, *ib), std::make_pair(static_cast<int32_t>(r), *im));
  }
  return m;
}

std::unique_ptr<Model> make_model(const json& j, const std::string& where) {
  VKF_REQUIRE(j.is_object(), "{}: expected an object", where);
  std::string t;
  if (j.contains("type"))
    t = type_of(j, where);
  else if (j.contains("merges"))
    t = "BPE";
  else
    fail("{}.type: missing; expected BPE, WordPiece, Unigram or WordLevel", where);
  if (t == "BPE") return make_bpe(j, where);
  if (t == "WordPiece") return make_wordpiece(j, where);
  if (t == "Unigram") return make_unigram(j, where);
  if (t == "WordLevel") return make_wordlevel(j, where);
  fail("{}.type: unknown model \"{}\"; expected BPE, WordPiece, Unigram or WordLevel", where, t);
}

}  // namespace vkf::tok
