// SPIR-V module writer (see spirv_builder.h). Encoding: every instruction starts with a word
// holding its word count (high 16 bits) and opcode (low 16 bits); strings are UTF-8, nul
// terminated and zero padded to whole little-endian words.
#include "vk/spirv_builder.h"

#include <cstring>

namespace vkf::vk {

void SpirvBuilder::emit(std::vector<uint32_t>& out, uint32_t opcode,
                        const std::vector<uint32_t>& words) {
  out.push_back(static_cast<uint32_t>(words.size() + 1) << 16 | opcode);
  out.insert(out.end(), words.begin(), words.end());
}

std::vector<uint32_t> SpirvBuilder::string_words(const std::string& s) {
  std::vector<uint32_t> words(s.size() / 4 + 1, 0);  // room for the terminating nul
  for (size_t i = 0; i < s.size(); ++i)
    words[i / 4] |= static_cast<uint32_t>(static_cast<unsigned char>(s[i])) << (8 * (i % 4));
  return words;
}

void SpirvBuilder::capability(uint32_t cap) {
  emit(capabilities_, spv::OpCapability, {cap});
}

void SpirvBuilder::extension(const std::string& name) {
  emit(extensions_, spv::OpExtension, string_words(name));
}

void SpirvBuilder::memory_model(uint32_t addressing, uint32_t model) {
  memory_model_.clear();
  emit(memory_model_, spv::OpMemoryModel, {addressing, model});
}

void SpirvBuilder::entry_point(uint32_t model, uint32_t function, const std::string& name,
                               const std::vector<uint32_t>& interface) {
  std::vector<uint32_t> words = {model, function};
  const auto s = string_words(name);
  words.insert(words.end(), s.begin(), s.end());
  words.insert(words.end(), interface.begin(), interface.end());
  emit(entry_points_, spv::OpEntryPoint, words);
}

void SpirvBuilder::execution_mode(uint32_t function, uint32_t mode,
                                  const std::vector<uint32_t>& literals) {
  std::vector<uint32_t> words = {function, mode};
  words.insert(words.end(), literals.begin(), literals.end());
  emit(modes_, spv::OpExecutionMode, words);
}

void SpirvBuilder::decorate(uint32_t target, uint32_t decoration,
                            const std::vector<uint32_t>& literals) {
  std::vector<uint32_t> words = {target, decoration};
  words.insert(words.end(), literals.begin(), literals.end());
  emit(annotations_, spv::OpDecorate, words);
}

void SpirvBuilder::member_decorate(uint32_t type, uint32_t member, uint32_t decoration,
                                   const std::vector<uint32_t>& literals) {
  std::vector<uint32_t> words = {type, member, decoration};
  words.insert(words.end(), literals.begin(), literals.end());
  emit(annotations_, spv::OpMemberDecorate, words);
}

uint32_t SpirvBuilder::type(uint32_t opcode, const std::vector<uint32_t>& operands) {
  std::vector<uint32_t> key = {opcode};
  key.insert(key.end(), operands.begin(), operands.end());
  if (auto it = types_.find(key); it != types_.end()) return it->second;
  const uint32_t id = fresh_id();
  std::vector<uint32_t> words = {id};
  words.insert(words.end(), operands.begin(), operands.end());
  emit(globals_, opcode, words);
  types_.emplace(std::move(key), id);
  return id;
}

uint32_t SpirvBuilder::constant(uint32_t type_id, const std::vector<uint32_t>& values,
                                uint32_t opcode) {
  // Constants share the deduplication table with types; unlike a type, a constant's encoding
  // puts its result type before its result id.
  std::vector<uint32_t> key = {opcode, type_id};
  key.insert(key.end(), values.begin(), values.end());
  if (auto it = types_.find(key); it != types_.end()) return it->second;
  const uint32_t id = fresh_id();
  std::vector<uint32_t> words = {type_id, id};
  words.insert(words.end(), values.begin(), values.end());
  emit(globals_, opcode, words);
  types_.emplace(std::move(key), id);
  return id;
}

uint32_t SpirvBuilder::constant_u32(uint32_t value) {
  return constant(type(spv::OpTypeInt, {32, 0}), {value}, spv::OpConstant);
}

uint32_t SpirvBuilder::constant_u64(uint64_t value) {
  return constant(type(spv::OpTypeInt, {64, 0}),
                  {static_cast<uint32_t>(value), static_cast<uint32_t>(value >> 32)},
                  spv::OpConstant);
}

uint32_t SpirvBuilder::constant_f32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return constant(type(spv::OpTypeFloat, {32}), {bits}, spv::OpConstant);
}

uint32_t SpirvBuilder::constant_f16(uint16_t bits) {
  // A 16-bit literal takes one word, its value in the low-order bits.
  return constant(type(spv::OpTypeFloat, {16}), {bits}, spv::OpConstant);
}

uint32_t SpirvBuilder::constant_composite(uint32_t type_id,
                                          const std::vector<uint32_t>& constituents) {
  return constant(type_id, constituents, spv::OpConstantComposite);
}

uint32_t SpirvBuilder::global_variable(uint32_t pointer_type, uint32_t storage_class) {
  const uint32_t id = fresh_id();
  emit(globals_, spv::OpVariable, {pointer_type, id, storage_class});
  return id;
}

uint32_t SpirvBuilder::op(uint32_t opcode, uint32_t result_type,
                          const std::vector<uint32_t>& operands) {
  const uint32_t id = fresh_id();
  op_with_id(opcode, result_type, id, operands);
  return id;
}

void SpirvBuilder::op_void(uint32_t opcode, const std::vector<uint32_t>& operands) {
  emit(code_, opcode, operands);
}

void SpirvBuilder::op_with_id(uint32_t opcode, uint32_t result_type, uint32_t result,
                              const std::vector<uint32_t>& operands) {
  std::vector<uint32_t> words;
  if (result_type) words.push_back(result_type);
  words.push_back(result);
  words.insert(words.end(), operands.begin(), operands.end());
  emit(code_, opcode, words);
}

std::vector<uint32_t> SpirvBuilder::finish() const {
  // Header: magic, version 1.6, generator (0: unregistered), id bound, schema.
  std::vector<uint32_t> out = {0x07230203, 0x00010600, 0, next_id_, 0};
  for (const auto* section : {&capabilities_, &extensions_, &memory_model_, &entry_points_, &modes_,
                              &annotations_, &globals_, &code_})
    out.insert(out.end(), section->begin(), section->end());
  return out;
}

}  // namespace vkf::vk
