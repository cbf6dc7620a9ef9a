// Added tokens (special or not) are cut out of the text before the normalizer and model run,
// exactly where the HF library finds them: leftmost-longest matches, with single_word, lstrip
// and rstrip applied to each match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vkf::tok {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// A segment of text: either an added token's id, or plain text (id < 0) still to be encoded.
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;  // begins at offset 0 of the original input
};

// Splits `text` on the given tokens (matched against their `pattern` strings).
std::vector<Segment> split_added(std::string_view text,
                                 const std::vector<const AddedToken*>& tokens,
                                 const std::vector<std::string>& patterns, bool at_start);

}  // namespace vkf::tok
