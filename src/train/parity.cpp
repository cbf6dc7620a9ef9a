// Parity runs and their comparison with transformers (see parity.h).
#include "train/parity.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/autograd.h"
#include "train/causal_lm.h"
#include "vk/error.h"

namespace vkf::train {

ParityBatch load_parity_batch(const std::string& path) {
  io::SafetensorsFile f(path);
  ParityBatch b;
  for (const char* name : {"input_ids", "attention_mask", "labels"}) {
    const auto& e = f.at(name);
    VKF_REQUIRE(e.shape.size() == 2, "{}: '{}' must be [batch, seq], got {}", path, name, shape_str(e.shape));
    VKF_REQUIRE(e.dtype == io::StDtype::I64 || e.dtype == io::StDtype::I32,
                "{}: '{}' must be I64 (or I32), got {}", path, name, io::st_dtype_name(e.dtype));
  }
  const Shape shape = f.at("input_ids").shape;
  VKF_REQUIRE(f.at("attention_mask").shape == shape && f.at("labels").shape == shape,
              "{}: input_ids, attention_mask and labels must have the same shape", path);
  b.batch = shape[0];
  b.seq = shape[1];
  b.input_ids = f.load("input_ids");
  b.attention_mask = f.load("attention_mask");
  for (double v : f.read_double("labels")) b.labels.push_back(static_cast<int64_t>(v));
  for (double v : f.read_double("attention_mask")) b.mask_host.push_back(static_cast<int64_t>(v));
  return b;
}

namespace {
io::WriteTensor host_f32(const std::string& name, const Tensor& t) {
  return io::to_write_tensor(name, t.dtype() == DType::F32 ? t : t.to(DType::F32));
}
}  // namespace

std::vector<io::WriteTensor> run_parity(models::DecoderModel& model, const ParityBatch& batch,
                                        const ParityOptions& options, const peft::LoraAdapter* adapter) {
  VKF_REQUIRE(options.steps >= 1, "parity: --steps must be at least 1 (got {})", options.steps);
  std::vector<io::WriteTensor> out;
  std::vector<std::string> names;
  std::vector<Tensor> trainable;
  if (adapter) {
    model.set_requires_grad(false);
    adapter->set_requires_grad(true);
    for (const auto& [n, t] : adapter->parameters()) names.push_back(n), trainable.push_back(t);
  } else {
    model.set_requires_grad(true);
    names = model.parameter_names();
    trainable = model.parameters();
  }
  ops::AdamW opt(trainable, options.adamw);
  // No dropout stream is activated here, so every dropout is off, as PARITY.md has transformers
  // run (all dropout probabilities 0) whatever config.json says.
  for (int step = 1; step <= options.steps; ++step) {
    autograd::Tape tape;
    Tensor logits, loss;
    {
      autograd::TapeScope scope(tape);
      logits = model.forward(batch.input_ids, batch.attention_mask);
      loss = causal_lm_loss(logits, batch.labels);
    }
    if (step == 1) {
      out.push_back(host_f32("logits", logits));
      out.push_back(host_f32("loss", loss));
    }
    out.push_back(host_f32(fmt::format("loss.step{}", step), loss));
    tape.backward(loss);
    if (step == 1) {
      for (size_t i = 0; i < names.size(); ++i) {
        const Tensor g = trainable[i].grad();
        VKF_REQUIRE(g.defined(), "parity: parameter '{}' received no gradient", names[i]);
        out.push_back(host_f32("grad." + names[i], g));
      }
    }
    opt.step();
    opt.zero_grad();
    for (size_t i = 0; i < names.size(); ++i)
      out.push_back(host_f32(fmt::format("step{}.{}", step, names[i]), trainable[i]));
  }
  model.set_requires_grad(false);
  if (adapter) adapter->set_requires_grad(false);
  return out;
}

std::vector<ParityRow> compare_parity(const io::SafetensorsFile& ours, const io::SafetensorsFile& x32,
                                      const io::SafetensorsFile& x64, const std::vector<int64_t>& mask) {
  std::vector<ParityRow> rows;
  for (const auto& e : x64.entries()) {
    ParityRow r;
    r.name = e.name;
    if (e.name.rfind("grad.", 0) == 0) r.group = "grads";
    else if (e.name.rfind("step", 0) == 0) r.group = e.name.substr(0, e.name.find('.'));
    else if (e.name.rfind("loss", 0) == 0) r.group = "loss";
    else r.group = e.name;
    VKF_REQUIRE(ours.find(e.name), "{}: result '{}' is missing (expected from {})", ours.path(), e.name,
                x64.path());
    VKF_REQUIRE(x32.find(e.name), "{}: '{}' is missing", x32.path(), e.name);
    const auto a = ours.read_double(e.name), b = x32.read_double(e.name), c = x64.read_double(e.name);
    VKF_REQUIRE(a.size() == c.size() && b.size() == c.size(), "'{}': sizes differ ({} / {} / {})",
                e.name, a.size(), b.size(), c.size());
    // Logits are compared at non-padding positions only.
    size_t row_len = 0;
    if (e.name == "logits") {
      VKF_REQUIRE(!mask.empty() && c.size() % mask.size() == 0,
                  "logits: {} values do not split into {} positions", c.size(), mask.size());
      row_len = c.size() / mask.size();
    }
    for (size_t i = 0; i < c.size(); ++i) {
      if (row_len && mask[i / row_len] == 0) continue;
      auto d = [](double x, double y) {
        const double v = std::fabs(x - y);
        return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
      };
      r.err64 = std::max(r.err64, d(a[i], c[i]));
      r.err32 = std::max(r.err32, d(a[i], b[i]));
      r.ref32 = std::max(r.ref32, d(b[i], c[i]));
    }
    r.tolerance = std::max(2e-7, 2 * r.ref32);
    r.pass = r.err64 <= r.tolerance;
    rows.push_back(r);
  }
  for (const auto& e : ours.entries()) {
    VKF_REQUIRE(x64.find(e.name), "{}: result '{}' has no counterpart in {}", ours.path(), e.name,
                x64.path());
  }
  return rows;
}

}  // namespace vkf::train
