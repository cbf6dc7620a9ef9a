// out[i] = in[i] * c over contiguous f32 data, with the factor c formed on the GPU from rank-0
// tensors in device memory, so that no host round trip sits between a norm and its use:
//   MODE 0 (clip): c = min(1, max_norm / (s0 + 1e-6)), s0 the total norm, formed as
//     torch.nn.utils.clip_grad_norm_ forms it (grad_clip.glsl) and applied always (in place:
//     out = in).
//   MODE 1 (ratio): c = s0 / s1, or 0 when s1 == 0: the gradient g / norm of an L2 norm.
//   MODE 2 (unscale + clip): out = (in * inv_scale) * c, c as in MODE 0 with s0 the norm of the
//     unscaled gradients: GradScaler.unscale_ followed by clip_grad_norm_, each product rounded
//     on its own as torch rounds its two in-place multiplies (inv_scale is a power of two, so the
//     first is exact unless it leaves the normal range).
//   MODE 3 (scalar): c = s0, e.g. an incoming gradient applied to gradients made ahead of time.
#version 460
#include "common.glsl"
#include "grad_clip.glsl"
#define LOCAL_SIZE 256
layout(local_size_x = LOCAL_SIZE) in;

layout(constant_id = 0) const uint MODE = 0;

layout(push_constant, std430) uniform Push {
  F32Buf s0;
  F32Buf s1;
  F32Buf in_;
  F32Buf out_;
  uint n;
  float max_norm;
  float inv_scale;  // MODE 2
} p;

void main() {
  uint i = flat_invocation(LOCAL_SIZE);
  if (i >= p.n) return;
  float c;
  if (MODE == 0 || MODE == 2) {
    c = clip_coefficient(p.s0.v[0], p.max_norm);
  } else if (MODE == 3) {
    c = p.s0.v[0];
  } else {
    float d = p.s1.v[0];
    c = d == 0.0 ? 0.0 : p.s0.v[0] / d;
  }
  if (MODE == 2) {
    precise float unscaled = p.in_.v[i] * p.inv_scale;
    precise float clipped = unscaled * c;
    p.out_.v[i] = clipped;
  } else {
    p.out_.v[i] = p.in_.v[i] * c;
  }
}
