// Reading dataset records (see records.h).
#include "data/records.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/parquet.h"
#include "vk/error.h"

namespace vkf::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string lower_ext(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VKF_REQUIRE(in, "{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void json_lines(const std::string& path, const std::string& text,
                const std::function<void(json&&, const std::string&)>& row) {
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON ({})", where, e.what());
    }
    VKF_REQUIRE(j.is_object(), "{}: each line must be a JSON object", where);
    row(std::move(j), where);
  }
}

}  // namespace

bool is_record_file(const std::string& path) {
  const std::string e = lower_ext(path);
  return e == ".jsonl" || e == ".json" || e == ".csv" || e == ".tsv" || e == ".parquet";
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text, char delim, const std::string& what) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, was_quoted = false;
  int64_t line = 1;
  size_t i = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // a UTF-8 byte order mark
  auto end_field = [&] {
    row.push_back(field);
    if (!was_quoted && field.empty()) row.back() = std::string(1, '\0');  // marks "empty, unquoted"
    field.clear();
    was_quoted = false;
  };
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && field.empty()) {
      quoted = was_quoted = true;
    } else if (c == delim) {
      end_field();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_field();
      rows.push_back(std::move(row));
      row.clear();
      ++line;
    } else {
      field += c;
    }
  }
  VKF_REQUIRE(!quoted, "{}: a quoted field opened before line {} is never closed", what, line);
  if (!field.empty() || was_quoted || !row.empty()) {
    end_field();
    rows.push_back(std::move(row));
  }
  return rows;
}

void read_records(const std::string& path, const std::vector<std::string>& columns,
                  const std::function<void(json&&, const std::string&)>& row) {
  const std::string ext = lower_ext(path);
  if (ext == ".parquet") {
    ParquetFile f(path);
    std::vector<std::string> wanted;
    const auto have = f.columns();
    for (const auto& c : columns)
      if (std::find(have.begin(), have.end(), c) != have.end()) wanted.push_back(c);
    VKF_REQUIRE(columns.empty() || !wanted.empty(), "{}: none of the columns {} is in this file; its columns are: {}",
                path, fmt::join(columns, ", "), fmt::join(have, ", "));
    int64_t n = 0;
    f.read_rows(wanted, [&](json&& r) { row(std::move(r), fmt::format("{}: row {}", path, n++)); });
    return;
  }
  const std::string text = slurp(path);
  if (ext == ".csv" || ext == ".tsv") {
    const auto rows = parse_csv(text, ext == ".tsv" ? '\t' : ',', path);
    VKF_REQUIRE(!rows.empty(), "{}: an empty CSV file (no header row)", path);
    const auto& header = rows[0];
    for (size_t r = 1; r < rows.size(); ++r) {
      if (rows[r].size() == 1 && rows[r][0] == std::string(1, '\0')) continue;  // a blank line
      const std::string where = fmt::format("{}: row {}", path, r + 1);
      VKF_REQUIRE(rows[r].size() == header.size(), "{}: {} fields where the header has {}", where, rows[r].size(),
                  header.size());
      json obj = json::object();
      for (size_t k = 0; k < header.size(); ++k)
        obj[header[k]] = rows[r][k] == std::string(1, '\0') ? json(nullptr) : json(rows[r][k]);
      row(std::move(obj), where);
    }
    return;
  }
  if (ext == ".json") {
    // A whole JSON document: an array of records, or an object holding one; anything else is
    // read as JSON Lines (many .json files on the Hub are).
    json doc;
    bool whole = true;
    try {
      doc = json::parse(text);
    } catch (const json::exception&) {
      whole = false;
    }
    if (whole && doc.is_object()) {
      const json* list = nullptr;
      for (auto& [k, v] : doc.items())
        if (v.is_array() && !v.empty() && v[0].is_object()) list = list ? nullptr : &v;
      if (list) doc = *list;
    }
    if (whole && doc.is_array()) {
      for (size_t r = 0; r < doc.size(); ++r) {
        const std::string where = fmt::format("{}: record {}", path, r);
        VKF_REQUIRE(doc[r].is_object(), "{}: each record must be a JSON object", where);
        row(std::move(doc[r]), where);
      }
      return;
    }
  }
  json_lines(path, text, row);
}

}  // namespace vkf::data
