// clip_grad_norm_'s coefficient in fp32, formed from the total norm as torch forms it
// (`max_norm / t` on a tensor t is reciprocal(t) * max_norm in torch) and clamped at 1 so that a
// NaN norm stays visible, as torch.clamp keeps it. Shared by scale_by_scalar.comp (clipping the
// gradients in place) and adamw.comp (clipping folded into the update), which must agree bitwise.
float clip_coefficient(float norm, float max_norm) {
  float c = (1.0 / (norm + 1e-6)) * max_norm;
  return c > 1.0 ? 1.0 : c;
}
