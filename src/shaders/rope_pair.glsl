// The rotary embedding of one element, shared by every kernel that rotates a decode step's query
// or key (rope_kv_write.comp, attention_decode_fast.comp), so that a key rotated by one kernel is
// bitwise the key another rotates for itself. transformers' x * cos + rotate_half(x) * sin, pair
// by pair: the pair (i0, i1) = (c, c + half) (rotate-half) or (2c, 2c + 1) (interleaved) becomes
// (a cos - b sin, b cos + a sin) with a = x[i0], b = x[i1], each product and the sum rounded
// apart (as torch does): `precise` forbids the compiler's fusing them into an fma, which one
// module might do and another not.

float rope_first(float a, float b, float cs, float sn) {
  precise float r = a * cs - b * sn;
  return r;
}

float rope_second(float a, float b, float cs, float sn) {
  precise float r = b * cs + a * sn;
  return r;
}

// Element d of x[base .. base + D) rotated at table row `row` of cos/sin [P, half]; dims from
// 2 * half on pass through.
float rope_element(F32Buf x, uint base, uint d, F32Buf cos_, F32Buf sin_, uint row, uint half_,
                   bool interleaved) {
  if (d >= 2u * half_) return x.v[base + d];
  const bool first = interleaved ? (d & 1u) == 0u : d < half_;
  const uint c = interleaved ? d >> 1 : (first ? d : d - half_);
  const uint i0 = interleaved ? 2u * c : c;
  const uint i1 = i0 + (interleaved ? 1u : half_);
  const float cs = cos_.v[row * half_ + c], sn = sin_.v[row * half_ + c];
  const float a = x.v[base + i0], b = x.v[base + i1];
  return first ? rope_first(a, b, cs, sn) : rope_second(a, b, cs, sn);
}
