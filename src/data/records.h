// Dataset records from the file formats the Hub's datasets use, each row as a JSON object:
// JSON Lines, JSON (an array of objects, an object holding one such array, or JSON Lines named
// .json), CSV/TSV (RFC 4180: a header row, quoted fields with "" escapes and line breaks; empty
// fields are null, as pandas reads them) and Parquet (only the columns asked for are read).
// Errors name the file and line (or row).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace vkf::data {

// True for the extensions read_records understands (.jsonl, .json, .csv, .tsv, .parquet).
bool is_record_file(const std::string& path);

// Calls `row(record, where)` for every row, `where` naming the file and line or row number.
// `columns`: for Parquet, the columns to read (those absent from the file are skipped; all when
// empty); other formats give every field.
void read_records(const std::string& path, const std::vector<std::string>& columns,
                  const std::function<void(nlohmann::json&& record, const std::string& where)>& row);

// CSV parsing on its own (tests): rows of fields, quoted fields unescaped; an empty unquoted field
// is a single NUL character (so that it can become null while "" stays an empty string).
std::vector<std::vector<std::string>> parse_csv(const std::string& text, char delimiter, const std::string& what);

}  // namespace vkf::data
