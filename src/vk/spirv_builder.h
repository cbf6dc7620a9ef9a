// A small SPIR-V module writer, for kernels that the installed GLSL compiler cannot express
// (Debian 12's glslc predates VK_NV_cooperative_matrix2's workgroup-scope matrices). It knows the
// module's section order and how to encode instructions and strings; what the instructions mean
// is the caller's business (see ops/matmul_workgroup.cpp). Types and constants are deduplicated,
// as SPIR-V requires for non-aggregate types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace vkf::vk {

// Opcodes and enumerants used by vkformer's generated kernels, from the SPIR-V specification and
// its SPV_KHR_cooperative_matrix extension.
namespace spv {
enum Op : uint32_t {
  OpExtension = 10,
  OpMemoryModel = 14,
  OpEntryPoint = 15,
  OpExecutionMode = 16,
  OpCapability = 17,
  OpTypeVoid = 19,
  OpTypeBool = 20,
  OpTypeInt = 21,
  OpTypeFloat = 22,
  OpTypeVector = 23,
  OpTypeRuntimeArray = 29,
  OpTypeStruct = 30,
  OpTypePointer = 32,
  OpTypeFunction = 33,
  OpConstantFalse = 42,
  OpConstant = 43,
  OpConstantComposite = 44,
  OpFunction = 54,
  OpFunctionEnd = 56,
  OpVariable = 59,
  OpLoad = 61,
  OpStore = 62,
  OpAccessChain = 65,
  OpDecorate = 71,
  OpMemberDecorate = 72,
  OpCompositeExtract = 81,
  OpUConvert = 113,
  OpConvertUToPtr = 120,
  OpIAdd = 128,
  OpFAdd = 129,
  OpISub = 130,
  OpIMul = 132,
  OpUDiv = 134,
  OpUMod = 137,
  OpSelect = 169,
  OpULessThan = 176,
  OpULessThanEqual = 178,
  OpBitwiseAnd = 199,
  OpLoopMerge = 246,
  OpLabel = 248,
  OpBranch = 249,
  OpBranchConditional = 250,
  OpReturn = 253,
  OpTypeCooperativeMatrixKHR = 4456,
  OpCooperativeMatrixLoadKHR = 4457,
  OpCooperativeMatrixStoreKHR = 4458,
  OpCooperativeMatrixMulAddKHR = 4459,
  // SPV_NV_tensor_addressing and SPV_NV_cooperative_matrix2.
  OpCooperativeMatrixLoadTensorNV = 5367,
  OpTypeTensorLayoutNV = 5370,
  OpTypeTensorViewNV = 5371,
  OpCreateTensorLayoutNV = 5372,
  OpTensorLayoutSetDimensionNV = 5373,
  OpTensorLayoutSetStrideNV = 5374,
  OpTensorLayoutSliceNV = 5375,
  OpCreateTensorViewNV = 5377,
};
enum Capability : uint32_t {
  CapShader = 1,
  CapFloat16 = 9,
  CapInt64 = 11,
  CapStorageBuffer16BitAccess = 4433,
  CapPhysicalStorageBufferAddresses = 5347,
  CapCooperativeMatrixKHR = 6022,
  CapCooperativeMatrixTensorAddressingNV = 5433,
  CapTensorAddressingNV = 5439,
};
enum StorageClass : uint32_t {
  Input = 1,
  Function = 7,
  PushConstant = 9,
  PhysicalStorageBuffer = 5349,
};
enum Decoration : uint32_t { Block = 2, ArrayStride = 6, BuiltIn = 11, Offset = 35 };
enum BuiltInValue : uint32_t { NumWorkgroups = 24, WorkgroupId = 26 };
enum Scope : uint32_t { ScopeWorkgroup = 2, ScopeSubgroup = 3 };
enum MatrixUse : uint32_t { UseA = 0, UseB = 1, UseAccumulator = 2 };
enum MatrixLayout : uint32_t { RowMajor = 0, ColumnMajor = 1 };
constexpr uint32_t kAddressingPhysicalStorageBuffer64 = 5348;
constexpr uint32_t kMemoryModelGLSL450 = 1;
constexpr uint32_t kExecutionModelGLCompute = 5;
constexpr uint32_t kExecutionModeLocalSize = 17;
constexpr uint32_t kMemoryAccessAligned = 0x2;
constexpr uint32_t kTensorAddressingTensorView = 0x1;
constexpr uint32_t kTensorClampUndefined = 0;
}  // namespace spv

class SpirvBuilder {
 public:
  uint32_t fresh_id() { return next_id_++; }

  // Module-level declarations, each in its section.
  void capability(uint32_t cap);
  void extension(const std::string& name);
  void memory_model(uint32_t addressing, uint32_t model);
  void entry_point(uint32_t model, uint32_t function, const std::string& name,
                   const std::vector<uint32_t>& interface);
  void execution_mode(uint32_t function, uint32_t mode, const std::vector<uint32_t>& literals);
  void decorate(uint32_t target, uint32_t decoration, const std::vector<uint32_t>& literals = {});
  void member_decorate(uint32_t type, uint32_t member, uint32_t decoration,
                       const std::vector<uint32_t>& literals = {});

  // A type instruction (its result id is the first word after the opcode): the same opcode and
  // operands return the same id.
  uint32_t type(uint32_t opcode, const std::vector<uint32_t>& operands = {});
  uint32_t constant_u32(uint32_t value);
  uint32_t constant_u64(uint64_t value);
  uint32_t constant_f32(float value);
  uint32_t constant_f16(uint16_t bits);
  // Any other constant instruction: `opcode` with result type `type_id` and these value words.
  uint32_t constant(uint32_t type_id, const std::vector<uint32_t>& values, uint32_t opcode);
  // A composite constant of `type` from its constituents (a cooperative matrix takes one).
  uint32_t constant_composite(uint32_t type, const std::vector<uint32_t>& constituents);
  // A module-scope variable.
  uint32_t global_variable(uint32_t pointer_type, uint32_t storage_class);

  // Function code: instructions are appended in order. `op` returns the result id of an
  // instruction with a result type; `op_void` emits one without result.
  uint32_t op(uint32_t opcode, uint32_t result_type, const std::vector<uint32_t>& operands);
  void op_void(uint32_t opcode, const std::vector<uint32_t>& operands);
  // An instruction whose result id is already known (OpLabel, OpFunction, forward references).
  void op_with_id(uint32_t opcode, uint32_t result_type, uint32_t result,
                  const std::vector<uint32_t>& operands);

  // The finished module's words (header included).
  std::vector<uint32_t> finish() const;

 private:
  static void emit(std::vector<uint32_t>& out, uint32_t opcode, const std::vector<uint32_t>& words);
  static std::vector<uint32_t> string_words(const std::string& s);

  uint32_t next_id_ = 1;
  std::vector<uint32_t> capabilities_, extensions_, memory_model_, entry_points_, modes_,
      annotations_, globals_, code_;
  // Types and constants by their opcode and operands (a constant's result type first): one id
  // each.
  std::map<std::vector<uint32_t>, uint32_t> types_;
};

}  // namespace vkf::vk
