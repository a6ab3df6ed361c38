#include "model/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>

#include "model/nn/autocast.h"
#include "model/train/fused_sgd.h"

namespace dbh::model {

// --- GradScaler ------------------------------------------------------------

GradScaler::GradScaler(bool enabled, double init_scale,
                       int64_t growth_interval, const torch::Device& device)
    : enabled_(enabled), growth_interval_(growth_interval) {
  TORCH_CHECK(init_scale > 0, "Expected a positive initial loss scale, but got ",
              init_scale);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, init_scale, f32);
  growth_tracker_ = torch::zeros({1}, f32.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, f32);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_.to(loss.dtype()) : loss;
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!enabled_) return true;
  found_inf_.zero_();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  const auto inv_scale = scale_.reciprocal();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
  return found_inf_.item<float>() == 0.0f;
}

void GradScaler::update() {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_,
                         /*scale_growth_factor=*/2.0,
                         /*scale_backoff_factor=*/0.5, growth_interval_);
}

double GradScaler::current_scale() const {
  return enabled_ ? scale_.item<double>() : 1.0;
}

void GradScaler::load_state(const std::vector<torch::Tensor>& s) {
  TORCH_CHECK(s.size() == 2, "Expected 2 loss-scaler tensors, but got ", s.size());
  scale_.copy_(s[0]);
  growth_tracker_.copy_(s[1]);
}

// --- Trainer ----------------------------------------------------------------

namespace {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(
    const TrainOptions& o, std::vector<torch::Tensor> params) {
  TORCH_CHECK(o.lr() > 0, "Expected a positive learning rate, but got ", o.lr());
  if (o.optimizer() == OptimizerKind::kSgd) {
    // Note [One pass of SGD]: SGD's update in one pass per parameter.
    return std::make_unique<FusedSGD>(
        std::move(params), torch::optim::SGDOptions(o.lr())
                               .momentum(o.momentum())
                               .weight_decay(o.weight_decay()));
  }
  return std::make_unique<torch::optim::Adam>(
      std::move(params),
      torch::optim::AdamOptions(o.lr()).weight_decay(o.weight_decay()));
}

uint32_t float_bits(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

}  // namespace

Trainer::Trainer(DbNet model, const TrainOptions& options)
    : model_(std::move(model)),
      options_(options),
      device_(parse_device(options.device())),
      scaler_(options.precision() == Precision::kFp16, options.init_scale(),
              options.growth_interval(), device_) {
  TORCH_CHECK(options_.max_steps() > 0, "Expected max_steps > 0, but got ",
              options_.max_steps());
  TORCH_CHECK(options_.accumulation() > 0, "Expected accumulation > 0, but got ",
              options_.accumulation());
  TORCH_CHECK(options_.grad_clip() >= 0, "Expected grad_clip >= 0, but got ",
              options_.grad_clip());
  TORCH_CHECK(options_.precision() == Precision::kFp32 || device_.is_cuda(),
              "Expected precision fp32 on ", device_.str(), ", but got ",
              to_string(options_.precision()),
              " (mixed precision runs on CUDA devices only)");
  model_->to(device_);
  apply_memory_format();
  model_->train();
  loss_ = DbLoss(options_.loss());
  optimizer_ = make_optimizer(options_, model_->parameters());
}

void Trainer::apply_memory_format() {
  if (!options_.channels_last()) return;
  torch::NoGradGuard no_grad;
  // set_data keeps each parameter's identity (the optimizer's references and
  // state keys stay valid) and only changes its layout.
  for (auto& p : model_->parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

void Trainer::add_listener(TrainerListener& listener) { listeners_.push_back(&listener); }

double Trainer::lr_at(int64_t step) const {
  const double progress = std::min<double>(
      1.0, static_cast<double>(step) / static_cast<double>(options_.max_steps()));
  return options_.lr() * std::pow(1.0 - progress, options_.poly_power());
}

StepResult Trainer::step(const BatchSource& source) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t step = step_;
  for (auto& l : listeners_) l->on_step_begin(step);

  StepResult r;
  r.step = step;
  r.lr = lr_at(step);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(r.lr);
  optimizer_->zero_grad(/*set_to_none=*/true);

  const bool amp = options_.precision() != Precision::kFp32;
  const auto amp_dtype =
      options_.precision() == Precision::kBf16 ? at::kBFloat16 : at::kHalf;
  const int64_t micro_count = options_.accumulation();
  const bool non_blocking = device_.is_cuda();
  torch::Tensor loss_sum;
  std::vector<torch::Tensor> micro_totals;
  for (int64_t m = 0; m < micro_count; ++m) {
    Batch batch = source(step * micro_count + m).to(device_, non_blocking);
    r.samples += batch.size();
    for (auto& l : listeners_) l->on_batch(step, batch);
    DbLossParts parts;
    {
      AutocastGuard autocast(amp, amp_dtype);
      // Listeners (fault injection, monitors) saw the batch as loaded; the
      // model gets the image in its own layout.
      auto out = model_->forward(options_.channels_last()
                                     ? batch.image.contiguous(torch::MemoryFormat::ChannelsLast)
                                     : batch.image);
      for (auto& l : listeners_) l->on_forward(step, out);
      parts = loss_->forward(out, batch.targets);
    }
    for (auto& l : listeners_) l->on_loss(step, parts);
    auto scaled = scaler_.scale(parts.total / static_cast<double>(micro_count));
    scaled.backward();
    const auto detached = torch::stack({parts.total.detach(), parts.bce.detach(),
                                        parts.l1.detach(), parts.dice.detach()});
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    micro_totals.push_back(parts.total.detach().to(torch::kFloat32));
  }
  const auto means = (loss_sum / static_cast<double>(micro_count)).to(torch::kCPU);
  r.loss = means[0].item<double>();
  r.bce = means[1].item<double>();
  r.l1 = means[2].item<double>();
  r.dice = means[3].item<double>();
  const auto totals = torch::stack(micro_totals).to(torch::kCPU).contiguous();
  for (int64_t m = 0; m < micro_count; ++m) r.micro_loss_bits.push_back(float_bits(totals[m].item<float>()));
  r.loss_bits = r.micro_loss_bits.back();

  const auto params = model_->parameters();
  const bool finite = scaler_.unscale(params);
  for (auto& l : listeners_) l->on_before_optimizer(step, model_);
  // The rate the optimizer steps with, which a listener may have changed
  // (an injected spike or freeze): what the step's result reports.
  if (!optimizer_->param_groups().empty()) r.lr = optimizer_->param_groups().front().options().get_lr();
  {
    std::vector<torch::Tensor> norms;
    for (const auto& p : params) {
      if (!p.grad().defined()) continue;
      auto n = p.grad().detach().norm(2);
      norms.push_back(n.scalar_type() == torch::kFloat32 ? n : n.to(torch::kFloat32));
    }
    const torch::Tensor stacked = norms.empty() ? torch::Tensor() : torch::stack(norms);
    for (auto& l : listeners_) l->on_grad_norms(step, stacked);
    const float norm = norms.empty() ? 0.0f : stacked.norm(2).item<float>();
    r.grad_norm = norm;
    r.grad_norm_bits = float_bits(norm);
  }
  if (options_.grad_clip() > 0 && std::isfinite(r.grad_norm)) {
    torch::nn::utils::clip_grad_norm_(params, options_.grad_clip());
  }
  r.skipped = !finite;
  if (finite) optimizer_->step();
  r.loss_scale = scaler_.current_scale();
  scaler_.update();
  ++step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& l : listeners_) l->on_step_end(step, r);
  return r;
}

std::vector<StepResult> Trainer::fit(const BatchSource& source) {
  std::vector<StepResult> results;
  while (step_ < options_.max_steps()) results.push_back(step(source));
  return results;
}

void Trainer::save_checkpoint(const std::string& path) const {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optim_archive;
  model_->save(model_archive);
  optimizer_->save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  const auto scaler = scaler_.state();
  archive.write("scaler.scale", scaler[0].cpu());
  archive.write("scaler.growth_tracker", scaler[1].cpu());
  archive.write("step", torch::tensor(step_, torch::kInt64));
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    archive.write("rng.cpu", gen.get_state());
  }
  const std::string tmp = path + ".tmp";
  // A file or link already at the temporary name (a reused output folder)
  // goes first: the archive is a new file, never written through a link.
  std::filesystem::remove(tmp);
  save_archive(archive, tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename checkpoint " + tmp + " to " + path +
                             ": " + std::strerror(errno));
  }
}

void Trainer::load_checkpoint(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path, device_);
  torch::serialize::InputArchive model_archive, optim_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", optim_archive);
  model_->load(model_archive);
  apply_memory_format();  // loading replaces the parameters' storage and layout
  optimizer_->load(optim_archive);
  torch::Tensor scale, tracker, step, rng;
  archive.read("scaler.scale", scale);
  archive.read("scaler.growth_tracker", tracker);
  scaler_.load_state({scale, tracker});
  archive.read("step", step);
  step_ = step.item<int64_t>();
  archive.read("rng.cpu", rng);
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(rng.cpu());
}

}  // namespace dbh::model
