// CPU reference attention (see attention_ref.h), written from the definition in transformers:
// the query at index i has cache position Tk - Tq + i; causal keeps kv_idx <= q_idx, the sliding
// window keeps kv_idx > q_idx - window, the padding mask drops keys whose attention_mask is 0;
// dropout (training) multiplies the probabilities [B, Hq, Tq, Tk], flattened row-major, by the
// inverted-dropout mask of ref::dropout before they weight v.
#include "ops/attention_ref.h"

#include <algorithm>
#include <cmath>

#include "ops/dropout_ref.h"
#include "vk/error.h"

namespace vkf::ref {
namespace {

// Everything one (batch, query head, query row) needs: which keys it sees, and their probabilities.
struct Row {
  std::vector<bool> visible;   // [Tk]
  std::vector<double> raw;     // scale * q.k, [Tk]
  std::vector<double> prob;    // softmax over visible keys, 0 elsewhere, [Tk]
};

size_t q_index(const AttentionShape& s, int64_t b, int64_t i, int64_t h, int64_t d) {
  return static_cast<size_t>(((b * s.tq + i) * s.hq + h) * s.d + d);
}
size_t kv_index(const AttentionShape& s, int64_t b, int64_t j, int64_t h, int64_t d) {
  return static_cast<size_t>(((b * s.tk + j) * s.hkv + h) * s.d + d);
}

void check_sizes(const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<int64_t>& mask,
                 const AttentionShape& s) {
  const auto nq = static_cast<size_t>(s.batch * s.tq * s.hq * s.d);
  const auto nk = static_cast<size_t>(s.batch * s.tk * s.hkv * s.d);
  VKF_REQUIRE(q.size() == nq && k.size() == nk && v.size() == nk && s.hq % s.hkv == 0,
              "ref::attention: sizes q {}, k {}, v {} do not match the shape", q.size(),
              k.size(), v.size());
  VKF_REQUIRE(mask.empty() || mask.size() == static_cast<size_t>(s.batch * s.tk),
              "ref::attention: mask has {} values, expected {}", mask.size(), s.batch * s.tk);
}

double capped(double raw, const ops::AttentionOptions& o) {
  return o.softcap > 0 ? o.softcap * std::tanh(raw / o.softcap) : raw;
}

Row make_row(const std::vector<double>& q, const std::vector<double>& k,
             const std::vector<int64_t>& mask, const AttentionShape& s,
             const ops::AttentionOptions& o, int64_t b, int64_t h, int64_t i) {
  const int64_t kvh = h / (s.hq / s.hkv);
  const int64_t pos = s.tk - s.tq + i;
  Row r;
  r.visible.assign(static_cast<size_t>(s.tk), false);
  r.raw.assign(static_cast<size_t>(s.tk), 0.0);
  r.prob.assign(static_cast<size_t>(s.tk), 0.0);
  double max_score = -INFINITY;
  for (int64_t j = 0; j < s.tk; ++j) {
    bool vis = true;
    if (o.causal && j > pos) vis = false;
    if (o.sliding_window > 0 && !(j > pos - o.sliding_window)) vis = false;
    if (!mask.empty() && mask[static_cast<size_t>(b * s.tk + j)] == 0) vis = false;
    r.visible[j] = vis;
    if (!vis) continue;
    double dot = 0;
    for (int64_t d = 0; d < s.d; ++d) dot += q[q_index(s, b, i, h, d)] * k[kv_index(s, b, j, kvh, d)];
    r.raw[j] = static_cast<double>(o.scale) * dot;
    max_score = std::max(max_score, capped(r.raw[j], o));
  }
  double total = 0;
  for (int64_t j = 0; j < s.tk; ++j)
    if (r.visible[j]) total += (r.prob[j] = std::exp(capped(r.raw[j], o) - max_score));
  if (total > 0)
    for (auto& p : r.prob) p /= total;
  return r;
}

// Dropout factors of row (b, h, i): 1 without dropout, else 0 or 1 / (1 - p) per key.
std::vector<double> dropout_factors(const AttentionShape& s, const ops::AttentionOptions& o,
                                    int64_t b, int64_t h, int64_t i) {
  std::vector<double> f(static_cast<size_t>(s.tk), 1.0);
  if (o.dropout_p <= 0) return f;
  const double p = o.dropout_p;
  const auto first = static_cast<uint64_t>(((b * s.hq + h) * s.tq + i) * s.tk);
  for (int64_t j = 0; j < s.tk; ++j) {
    const uint64_t counter = o.dropout_offset + first + static_cast<uint64_t>(j);
    const bool keep = p < 1 && dropout_keep(o.dropout_seed, counter, p);
    f[static_cast<size_t>(j)] = keep ? 1.0 / (1.0 - p) : 0.0;
  }
  return f;
}

}  // namespace

std::vector<double> attention(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v,
                              const std::vector<int64_t>& key_padding_mask,
                              const AttentionShape& s, const ops::AttentionOptions& o) {
  check_sizes(q, k, v, key_padding_mask, s);
  std::vector<double> out(q.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t kvh = h / (s.hq / s.hkv);
      for (int64_t i = 0; i < s.tq; ++i) {
        const Row r = make_row(q, k, key_padding_mask, s, o, b, h, i);
        const auto f = dropout_factors(s, o, b, h, i);
        for (int64_t j = 0; j < s.tk; ++j) {
          if (!r.visible[j]) continue;
          for (int64_t d = 0; d < s.d; ++d)
            out[q_index(s, b, i, h, d)] += r.prob[j] * f[j] * v[kv_index(s, b, j, kvh, d)];
        }
      }
    }
  return out;
}

AttentionGrads attention_backward(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v,
                                  const std::vector<int64_t>& key_padding_mask,
                                  const std::vector<double>& dout, const AttentionShape& s,
                                  const ops::AttentionOptions& o) {
  check_sizes(q, k, v, key_padding_mask, s);
  VKF_REQUIRE(dout.size() == q.size(), "ref::attention_backward: dout has {} values, expected {}",
              dout.size(), q.size());
  AttentionGrads g{std::vector<double>(q.size(), 0.0), std::vector<double>(k.size(), 0.0),
                   std::vector<double>(v.size(), 0.0)};
  const auto tk = static_cast<size_t>(s.tk);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t kvh = h / (s.hq / s.hkv);
      for (int64_t i = 0; i < s.tq; ++i) {
        const Row r = make_row(q, k, key_padding_mask, s, o, b, h, i);
        const auto f = dropout_factors(s, o, b, h, i);
        // out_i = sum_j p_j f_j v_j: dv_j += p_j f_j dout_i, dp_j = f_j (dout_i . v_j).
        std::vector<double> dp(tk, 0.0);
        for (int64_t j = 0; j < s.tk; ++j) {
          if (!r.visible[j]) continue;
          for (int64_t d = 0; d < s.d; ++d) {
            const double go = dout[q_index(s, b, i, h, d)];
            g.dv[kv_index(s, b, j, kvh, d)] += r.prob[j] * f[j] * go;
            dp[j] += go * v[kv_index(s, b, j, kvh, d)];
          }
          dp[j] *= f[j];
        }
        // Softmax Jacobian: dscore_j = p_j (dp_j - sum_l p_l dp_l).
        double weighted = 0;
        for (size_t j = 0; j < tk; ++j) weighted += r.prob[j] * dp[j];
        for (int64_t j = 0; j < s.tk; ++j) {
          if (!r.visible[j]) continue;
          double dscore = r.prob[j] * (dp[j] - weighted);
          if (o.softcap > 0) {
            const double t = std::tanh(r.raw[j] / o.softcap);
            dscore *= 1 - t * t;  // d/dx of c tanh(x / c)
          }
          const double ddot = dscore * static_cast<double>(o.scale);
          for (int64_t d = 0; d < s.d; ++d) {
            g.dq[q_index(s, b, i, h, d)] += ddot * k[kv_index(s, b, j, kvh, d)];
            g.dk[kv_index(s, b, j, kvh, d)] += ddot * q[q_index(s, b, i, h, d)];
          }
        }
      }
    }
  return g;
}

}  // namespace vkf::ref
