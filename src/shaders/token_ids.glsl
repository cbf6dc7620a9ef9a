// Reading integer token ids / labels of either dtype (ID_I64 = 0: I32, 1: I64) for the embedding
// and cross-entropy kernels, so I64 ids from data loaders are used as they are (no conversion
// pass, and ids past 32 bits are seen as out of range instead of wrapping into it).
// Every test works on the (low, high) 32-bit halves of the id: lavapipe (Mesa 22.3) miscompiles
// 64-bit signed comparisons of sign-extended values (int64_t(x) >= 0 is true for negative x).
#if ID_I64
#define IdBuf U64Buf
ivec2 id_halves(IdBuf ids, uint i) { return ivec2(unpack32(ids.v[i])); }
#else
#define IdBuf I32Buf
ivec2 id_halves(IdBuf ids, uint i) {
  int x = ids.v[i];
  return ivec2(x, x >> 31);
}
#endif

const uint kInvalidRow = 0xffffffffu;

// Row index of id i when it lies in [0, limit) (limit <= 2^31), else kInvalidRow.
uint row_of_id(IdBuf ids, uint i, uint limit) {
  ivec2 h = id_halves(ids, i);
  return (h.y == 0 && uint(h.x) < limit) ? uint(h.x) : kInvalidRow;
}

// Whether id i equals the 64-bit value whose halves are `value` (e.g. ignore_index).
bool id_equals(IdBuf ids, uint i, ivec2 value) { return id_halves(ids, i) == value; }
