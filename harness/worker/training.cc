#include "harness/worker/training.h"

#include <torch/torch.h>

#include "harness/common/cpu.h"
#include "harness/scenario/schema.h"
#include "model/data/batch.h"

namespace dbh::harness {

std::optional<LastStep> nothing_left_to_train(const Scenario& s, int64_t checkpoint_step) {
  const int64_t last = s.train.last_step();
  if (checkpoint_step < last) return std::nullopt;
  return LastStep{last < s.train.max_steps ? DBH_SCENARIO_KEY(train.stop_after) : DBH_SCENARIO_KEY(train.max_steps),
                  last};
}

int64_t training_threads(const Scenario& s) {
  return s.train.threads > 0 ? s.train.threads : available_cores();
}

model::DeterminismOptions determinism_options(const Scenario& s) {
  return model::DeterminismOptions()
      .seed(s.train.seed)
      .threads(training_threads(s))
      .cudnn_enabled(s.hardware.cudnn_enabled)
      .cudnn_benchmark(s.hardware.cudnn_benchmark)
      .cudnn_deterministic(s.hardware.cudnn_deterministic)
      .allow_tf32(s.hardware.allow_tf32);
}

model::DbNetOptions net_options(const Scenario& s) {
  return model::DbNetOptions()
      .encoder(model::ResNetOptions().depth(s.model.encoder))
      .decoder(model::decoder_kind_from_string(s.model.decoder))
      .k(s.model.k);
}

model::DbNet make_net(const Scenario& s) {
  model::apply_determinism(determinism_options(s));
  return model::DbNet(net_options(s));
}

model::TrainOptions train_options(const Scenario& s) {
  return model::TrainOptions()
      .optimizer(model::optimizer_kind_from_string(s.train.optimizer))
      .lr(s.train.lr)
      .momentum(s.train.momentum)
      .weight_decay(s.train.weight_decay)
      .poly_power(s.train.poly_power)
      .max_steps(s.train.max_steps)
      .accumulation(s.train.accumulation)
      .grad_clip(s.train.grad_clip)
      .precision(model::precision_from_string(s.train.precision))
      // `auto` left unresolved (no supervisor measured it): PyTorch's NCHW.
      .channels_last(s.train.channels_last.value_or(false))
      .device(s.hardware.device)
      .determinism(determinism_options(s));
}

bool uses_dataset(const Scenario& s) {
  return s.data.source == "real" || s.data.source == "synthetic_render";
}

model::DatasetOptions dataset_options(const Scenario& s, const std::string& root) {
  model::DatasetOptions d;
  if (s.data.source == "synthetic_render") d.synthetic_samples = s.data.samples;
  d.root = root;
  d.size = s.data.size;
  d.augment = s.data.augment;
  d.seed = s.train.seed;
  d.on_invalid = s.data.on_invalid == "skip"   ? model::OnInvalid::kSkip
                 : s.data.on_invalid == "clip" ? model::OnInvalid::kClip
                                               : model::OnInvalid::kError;
  d.preflight = s.data.preflight;
  d.subset = s.data.subset;
  return d;
}

model::LoaderOptions loader_options(const Scenario& s) {
  model::LoaderOptions lo;
  lo.batch_size = s.data.batch_size;
  lo.num_workers = s.data.num_workers;
  lo.seed = s.train.seed;
  lo.validate = s.data.validate;
  return lo;
}

model::BatchSource make_batch_source(const Scenario& s, std::shared_ptr<model::Loader> loader) {
  if (loader) return [loader](int64_t micro) { return loader->get(micro); };
  const int64_t n = s.data.batch_size, size = s.data.size;
  const uint64_t seed = s.train.seed;
  const bool random = s.data.source == "synthetic_random";
  return [n, size, seed, random](int64_t micro) {
    const uint64_t k = seed * 1000003ULL + static_cast<uint64_t>(micro);
    return random ? model::synthetic_random_batch(n, size, size, k) : model::synthetic_boxes_batch(n, size, size, k);
  };
}

std::string message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace dbh::harness
