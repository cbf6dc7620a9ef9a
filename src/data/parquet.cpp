// Parquet file reading (see parquet.h): footer and schema, then per row group the column chunks of
// the requested columns, decoded by parquet_pages.cpp and assembled into rows.
//
// Assembly (the Dremel scheme, from the format's definition of repetition and definition levels):
// each leaf column is first turned into one nested structure per row that follows its own schema
// path (an array per REPEATED node, a box {"v": ...} per defined OPTIONAL group, null where a level
// is undefined); then the leaves under a group are merged position by position into objects, and
// LIST / MAP annotated groups become plain arrays, including the legacy two-level list forms.
#include "data/parquet.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "data/parquet_pages.h"
#include "data/thrift.h"
#include "vk/error.h"

namespace vkf::data {
namespace fs = std::filesystem;
using nlohmann::json;
using parquet::LeafData;
using parquet::LeafDesc;

namespace {

enum Repetition { REQUIRED = 0, OPTIONAL = 1, REPEATED = 2 };
enum ConvertedType { CT_MAP = 1, CT_MAP_KEY_VALUE = 2, CT_LIST = 3 };
// LogicalType is a Thrift union: the id of the field that is set names the type.
enum LogicalField { LT_MAP = 2, LT_LIST = 3 };

struct Node {
  std::string name;
  int physical = -1;  // -1 for groups
  int type_length = 0;
  int repetition = REQUIRED;
  bool is_list = false, is_map = false;
  std::vector<size_t> children;
  int def = 0, rep = 0;  // levels at this node (counting itself)
  size_t first_leaf = 0, leaf_count = 0;
  bool leaf() const { return physical >= 0; }
};

}  // namespace

struct ParquetFile::Impl {
  std::string path;
  uint64_t file_size = 0;
  thrift::Value meta;
  std::vector<Node> nodes;  // nodes[0] is the root
  std::vector<size_t> leaves;                 // node index of each leaf, in column order
  std::vector<std::vector<size_t>> leaf_paths;  // top-level field .. leaf, per leaf

  size_t build(const std::vector<thrift::Value>& schema, size_t& pos, int def, int rep, std::vector<size_t>& stack) {
    VKF_REQUIRE(pos < schema.size(), "{}: the schema lists fewer elements than its groups claim; the file is corrupt", path);
    const thrift::Value& e = schema[pos++];
    const size_t id = nodes.size();
    nodes.emplace_back();
    Node n;
    n.name = e.string_or(4, "");
    const int64_t nchildren = e.int_or(5, 0);
    n.physical = nchildren > 0 || e.get(1) == nullptr ? -1 : static_cast<int>(e.int_or(1, -1));
    n.type_length = static_cast<int>(e.int_or(2, 0));
    n.repetition = id == 0 ? REQUIRED : static_cast<int>(e.int_or(3, REQUIRED));
    VKF_REQUIRE(n.repetition >= REQUIRED && n.repetition <= REPEATED, "{}: column '{}' has repetition {}", path, n.name,
                n.repetition);
    const int64_t ct = e.int_or(6, -1);
    const thrift::Value* lt = e.get(10);
    n.is_list = ct == CT_LIST || (lt && lt->get(LT_LIST));
    n.is_map = ct == CT_MAP || ct == CT_MAP_KEY_VALUE || (lt && lt->get(LT_MAP));
    n.def = def + (n.repetition != REQUIRED ? 1 : 0);
    n.rep = rep + (n.repetition == REPEATED ? 1 : 0);
    VKF_REQUIRE(n.def < 65535 && nchildren <= static_cast<int64_t>(schema.size()), "{}: a corrupt schema at '{}'", path, n.name);
    VKF_REQUIRE(n.physical <= 7, "{}: column '{}' has physical type {}; the file is corrupt", path, n.name, n.physical);
    VKF_REQUIRE(n.physical >= 0 || nchildren > 0, "{}: '{}' is a group without fields; the file is corrupt", path, n.name);
    n.first_leaf = leaves.size();
    if (id != 0) stack.push_back(id);
    nodes[id] = n;
    if (n.physical >= 0) {
      leaves.push_back(id);
      leaf_paths.push_back(stack);
    }
    for (int64_t k = 0; k < nchildren; ++k) {
      const size_t child = build(schema, pos, nodes[id].def, nodes[id].rep, stack);
      nodes[id].children.push_back(child);
    }
    nodes[id].leaf_count = leaves.size() - nodes[id].first_leaf;
    if (id != 0) stack.pop_back();
    return id;
  }

  // One leaf's rows as nested structures following its schema path (see the file comment).
  std::vector<json> leaf_rows(const LeafData& d, const std::vector<size_t>& path_nodes, int64_t num_rows,
                              const std::string& what) const {
    std::vector<json> rows;
    size_t vi = 0;
    for (size_t e = 0; e < d.def.size(); ++e) {
      const int r = d.rep[e], dl = d.def[e];
      if (r == 0) rows.emplace_back();
      VKF_REQUIRE(!rows.empty(), "{}: the first value continues a row (repetition level {}); the file is corrupt", what, r);
      json* slot = &rows.back();
      for (size_t i = 0; i < path_nodes.size(); ++i) {
        const Node& n = nodes[path_nodes[i]];
        if (n.repetition == REPEATED) {
          if (dl < n.def) {  // an empty (or absent-at-this-level) list
            if (!slot->is_array()) *slot = json::array();
            break;
          }
          if (n.rep > r) {
            *slot = json::array();
          } else {
            VKF_REQUIRE(slot->is_array() && (n.rep == r || !slot->empty()),
                        "{}: repetition levels that continue a list that was never started; the file is corrupt", what);
          }
          if (n.rep >= r) slot->push_back(nullptr);
          slot = &slot->back();
          if (n.leaf()) {
            VKF_REQUIRE(vi < d.values.size(), "{}: fewer values than defined entries; the file is corrupt", what);
            *slot = d.values[vi++];
          }
          continue;
        }
        if (n.repetition == OPTIONAL && dl < n.def) {
          *slot = nullptr;
          break;
        }
        if (n.leaf()) {
          VKF_REQUIRE(vi < d.values.size(), "{}: fewer values than defined entries; the file is corrupt", what);
          *slot = d.values[vi++];
          break;
        }
        if (n.repetition == OPTIONAL) {
          if (!slot->is_object()) *slot = json{{"v", nullptr}};
          slot = &(*slot)["v"];
        }
      }
    }
    VKF_REQUIRE(static_cast<int64_t>(rows.size()) == num_rows, "{}: {} rows where the row group has {}; the file is corrupt",
                what, rows.size(), num_rows);
    return rows;
  }

  // The value of node `id` from the structures `s` of its leaves (node.leaf_count of them).
  json merge(size_t id, const std::vector<const json*>& s, const std::string& what) const {
    const Node& n = nodes[id];
    if (n.repetition != REPEATED) return content(id, s, what);
    for (const json* x : s)
      VKF_REQUIRE(x->is_array() && x->size() == s[0]->size(), "{}: the leaves of '{}' disagree on list lengths; the file is corrupt",
                  what, n.name);
    json out = json::array();
    std::vector<const json*> elem(s.size());
    for (size_t k = 0; k < s[0]->size(); ++k) {
      for (size_t j = 0; j < s.size(); ++j) elem[j] = &(*s[j])[k];
      out.push_back(content(id, elem, what));
    }
    return out;
  }

  // A node's value ignoring its own repetition: optional unboxing, leaves, groups.
  json content(size_t id, const std::vector<const json*>& s, const std::string& what) const {
    const Node& n = nodes[id];
    if (n.leaf()) return *s[0];
    std::vector<const json*> inner = s;
    if (n.repetition == OPTIONAL) {
      if (s[0]->is_null()) return nullptr;
      for (auto& x : inner) {
        VKF_REQUIRE(x->is_object() && x->contains("v"), "{}: the leaves of '{}' disagree on nulls; the file is corrupt", what, n.name);
        x = &(*x)["v"];
      }
    }
    if ((n.is_list || n.is_map) && n.children.size() == 1 && nodes[n.children[0]].repetition == REPEATED) {
      // LIST: group -> repeated group (list) -> element. The repeated group is itself the element
      // when it has several fields or carries a legacy name ("array", "<name>_tuple"); a MAP's
      // key_value group is an element {key, value}.
      const size_t rep_id = n.children[0];
      const Node& r = nodes[rep_id];
      const bool rep_is_element = r.leaf() || n.is_map || r.children.size() != 1 || r.name == "array" ||
                                  r.name == n.name + "_tuple";
      for (const json* x : inner)
        VKF_REQUIRE(x->is_array() && x->size() == inner[0]->size(), "{}: the leaves of '{}' disagree on list lengths", what, n.name);
      json out = json::array();
      std::vector<const json*> elem(inner.size());
      for (size_t k = 0; k < inner[0]->size(); ++k) {
        for (size_t j = 0; j < inner.size(); ++j) elem[j] = &(*inner[j])[k];
        out.push_back(rep_is_element ? group(rep_id, elem, what) : merge(r.children[0], elem, what));
      }
      return out;
    }
    return group(id, inner, what);
  }

  json group(size_t id, const std::vector<const json*>& s, const std::string& what) const {
    const Node& n = nodes[id];
    if (n.leaf()) return *s[0];
    json obj = json::object();
    for (size_t c : n.children) {
      const Node& child = nodes[c];
      const size_t off = child.first_leaf - n.first_leaf;
      std::vector<const json*> sub(s.begin() + static_cast<std::ptrdiff_t>(off),
                                   s.begin() + static_cast<std::ptrdiff_t>(off + child.leaf_count));
      obj[child.name] = merge(c, sub, what);
    }
    return obj;
  }

  std::vector<uint8_t> read_range(uint64_t offset, uint64_t size, const std::string& what) const {
    VKF_REQUIRE(offset <= file_size && size <= file_size - offset,
                "{}: bytes {}..{} lie outside the {}-byte file; the file is truncated or corrupt", what, offset,
                offset + size, file_size);
    std::ifstream in(path, std::ios::binary);
    VKF_REQUIRE(in, "{}: cannot open", path);
    std::vector<uint8_t> buf(static_cast<size_t>(size));
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(size));
    VKF_REQUIRE(in.gcount() == static_cast<std::streamsize>(size), "{}: short read at byte {}", path, offset);
    return buf;
  }
};

ParquetFile::ParquetFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  std::error_code ec;
  m.file_size = fs::file_size(path, ec);
  VKF_REQUIRE(!ec, "{}: cannot read ({})", path, ec.message());
  VKF_REQUIRE(m.file_size >= 12, "{}: {} bytes is too small to be a Parquet file", path, m.file_size);
  const auto head = m.read_range(0, 4, path);
  const auto tail = m.read_range(m.file_size - 8, 8, path);
  VKF_REQUIRE(std::equal(head.begin(), head.end(), "PAR1") && std::equal(tail.begin() + 4, tail.end(), "PAR1"),
              "{}: not a Parquet file (no PAR1 magic at both ends; an encrypted 'PARE' file or another format)", path);
  const uint64_t meta_len = static_cast<uint64_t>(tail[0]) | static_cast<uint64_t>(tail[1]) << 8 |
                            static_cast<uint64_t>(tail[2]) << 16 | static_cast<uint64_t>(tail[3]) << 24;
  VKF_REQUIRE(meta_len + 12 <= m.file_size, "{}: the footer claims {} bytes of metadata in a {}-byte file; the file is truncated",
              path, meta_len, m.file_size);
  const auto meta = m.read_range(m.file_size - 8 - meta_len, meta_len, path);
  size_t used = 0;
  m.meta = thrift::read_struct(meta.data(), meta.size(), used, path + ": footer");
  const auto& schema = m.meta.list_of(2);
  VKF_REQUIRE(!schema.empty(), "{}: the footer has no schema", path);
  size_t pos = 0;
  std::vector<size_t> stack;
  m.build(schema, pos, 0, 0, stack);
}

ParquetFile::~ParquetFile() = default;

int64_t ParquetFile::num_rows() const { return impl_->meta.int_or(3, 0); }

std::vector<std::string> ParquetFile::columns() const {
  std::vector<std::string> out;
  for (size_t c : impl_->nodes[0].children) out.push_back(impl_->nodes[c].name);
  return out;
}

void ParquetFile::read_rows(const std::vector<std::string>& wanted, const std::function<void(json&&)>& row) const {
  const Impl& m = *impl_;
  std::vector<size_t> fields;
  for (const auto& w : wanted) {
    size_t found = 0;
    for (size_t c : m.nodes[0].children)
      if (m.nodes[c].name == w) found = c;
    VKF_REQUIRE(found != 0, "{}: no column '{}'; the columns are: {}", m.path, w, fmt::join(columns(), ", "));
    fields.push_back(found);
  }
  if (wanted.empty()) fields = m.nodes[0].children;
  for (const auto& rg : m.meta.list_of(4)) {
    const int64_t n_rows = rg.int_or(3, 0);
    const auto& chunks = rg.list_of(1);
    VKF_REQUIRE(chunks.size() == m.leaves.size(), "{}: a row group with {} column chunks for {} columns", m.path,
                chunks.size(), m.leaves.size());
    std::vector<std::vector<json>> field_rows;  // per field, per row
    for (size_t f : fields) {
      const Node& fn = m.nodes[f];
      std::vector<std::vector<json>> per_leaf;
      for (size_t l = fn.first_leaf; l < fn.first_leaf + fn.leaf_count; ++l) {
        const Node& leaf = m.nodes[m.leaves[l]];
        std::string dotted;
        for (size_t p : m.leaf_paths[l]) dotted += (dotted.empty() ? "" : ".") + m.nodes[p].name;
        const std::string what = fmt::format("{}: column {}", m.path, dotted);
        VKF_REQUIRE(chunks[l].string_or(1, "").empty(), "{}: column chunks in other files are not supported", what);
        const thrift::Value* cm = chunks[l].get(3);
        VKF_REQUIRE(cm, "{}: a column chunk without metadata", what);
        const int64_t data_off = cm->int_or(9, -1), dict_off = cm->int_or(11, -1), size = cm->int_or(7, -1);
        const int64_t start = dict_off > 0 && dict_off < data_off ? dict_off : data_off;
        VKF_REQUIRE(start >= 0 && size >= 0, "{}: a column chunk with offset {} and size {}", what, start, size);
        const auto bytes = m.read_range(static_cast<uint64_t>(start), static_cast<uint64_t>(size), what);
        LeafDesc desc{leaf.physical, leaf.type_length, leaf.def, leaf.rep, dotted};
        const LeafData d = parquet::decode_chunk(bytes, desc, static_cast<int>(cm->int_or(4, 0)), cm->int_or(5, 0), what);
        per_leaf.push_back(m.leaf_rows(d, m.leaf_paths[l], n_rows, what));
      }
      std::vector<json> values;
      std::vector<const json*> s(per_leaf.size());
      for (int64_t r = 0; r < n_rows; ++r) {
        for (size_t j = 0; j < per_leaf.size(); ++j) s[j] = &per_leaf[j][static_cast<size_t>(r)];
        values.push_back(m.merge(f, s, m.path + ": column " + fn.name));
      }
      field_rows.push_back(std::move(values));
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      json obj = json::object();
      for (size_t k = 0; k < fields.size(); ++k) obj[m.nodes[fields[k]].name] = std::move(field_rows[k][static_cast<size_t>(r)]);
      row(std::move(obj));
    }
  }
}

std::vector<json> read_parquet(const std::string& path, const std::vector<std::string>& wanted) {
  std::vector<json> rows;
  ParquetFile(path).read_rows(wanted, [&](json&& r) { rows.push_back(std::move(r)); });
  return rows;
}

}  // namespace vkf::data
