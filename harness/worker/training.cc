#include "harness/worker/training.h"

#include <torch/torch.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "harness/common/cpu.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/schema.h"
#include "model/data/batch.h"

namespace dbh::harness::worker {

std::optional<LastStep> nothing_left_to_train(const scenario::Scenario& s, int64_t checkpoint_step) {
  const int64_t last = s.train.last_step();
  if (checkpoint_step < last) return std::nullopt;
  return LastStep{last < s.train.max_steps ? DBH_SCENARIO_KEY(train.stop_after) : DBH_SCENARIO_KEY(train.max_steps),
                  last};
}

int64_t training_threads(const scenario::Scenario& s) {
  return s.train.threads > 0 ? s.train.threads : available_cores();
}

model::DeterminismOptions determinism_options(const scenario::Scenario& s) {
  return model::DeterminismOptions()
      .seed(s.train.seed)
      .threads(training_threads(s))
      .cudnn_enabled(s.hardware.cudnn_enabled)
      .cudnn_benchmark(s.hardware.cudnn_benchmark)
      .cudnn_deterministic(s.hardware.cudnn_deterministic)
      .allow_tf32(s.hardware.allow_tf32);
}

model::DbNetOptions net_options(const scenario::Scenario& s) {
  return model::DbNetOptions()
      .encoder(model::ResNetOptions().depth(s.model.encoder))
      .decoder(s.model.decoder)
      .k(s.model.k);
}

model::DbNet make_net(const scenario::Scenario& s) {
  model::apply_determinism(determinism_options(s));
  return model::DbNet(net_options(s));
}

model::TrainOptions train_options(const scenario::Scenario& s) {
  return model::TrainOptions()
      .optimizer(s.train.optimizer)
      .lr(s.train.lr)
      .momentum(s.train.momentum)
      .weight_decay(s.train.weight_decay)
      .poly_power(s.train.poly_power)
      .max_steps(s.train.max_steps)
      .accumulation(s.train.accumulation)
      .grad_clip(s.train.grad_clip)
      .precision(s.train.precision)
      // `auto` left unresolved (no supervisor measured it): PyTorch's NCHW.
      .channels_last(s.train.channels_last.value_or(false))
      .device(s.hardware.device)
      .determinism(determinism_options(s));
}

bool uses_dataset(const scenario::Scenario& s) {
  return s.data.source == scenario::DataSource::kReal || s.data.source == scenario::DataSource::kSyntheticRender;
}

model::DatasetOptions dataset_options(const scenario::Scenario& s, const std::string& root) {
  model::DatasetOptions d;
  if (s.data.source == scenario::DataSource::kSyntheticRender) d.synthetic_samples = s.data.samples;
  d.root = root;
  d.size = s.data.size;
  d.augment = s.data.augment;
  d.seed = s.train.seed;
  d.on_invalid = s.data.on_invalid;
  d.preflight = s.data.preflight;
  d.subset = s.data.subset;
  return d;
}

model::LoaderOptions loader_options(const scenario::Scenario& s) {
  model::LoaderOptions lo;
  lo.batch_size = s.data.batch_size;
  lo.num_workers = s.data.num_workers;
  lo.seed = s.train.seed;
  lo.validate = s.data.validate;
  return lo;
}

namespace {

model::BatchSource stream_source(const scenario::Scenario& s, std::shared_ptr<model::Loader> loader) {
  if (loader) return [loader](int64_t micro) { return loader->get(micro); };
  const int64_t n = s.data.batch_size, size = s.data.size;
  const uint64_t seed = s.train.seed;
  const bool random = s.data.source == scenario::DataSource::kSyntheticRandom;
  return [n, size, seed, random](int64_t micro) {
    const uint64_t k = seed * 1000003ULL + static_cast<uint64_t>(micro);
    return random ? model::synthetic_random_batch(n, size, size, k) : model::synthetic_boxes_batch(n, size, size, k);
  };
}

}  // namespace

model::BatchSource make_batch_source(const scenario::Scenario& s, std::shared_ptr<model::Loader> loader) {
  model::BatchSource stream = stream_source(s, std::move(loader));
  if (!s.data.fixed_batch) return stream;
  // Note [The first batch, repeated]: every micro-batch is a copy of the
  // first, so what a step's fault writes into its batch stays in that step.
  auto first = std::make_shared<std::optional<model::Batch>>();
  return [stream, first](int64_t) {
    if (!first->has_value()) *first = stream(0);
    return (*first)->clone();
  };
}

std::string message_of(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

namespace {

// Writes `path` through a temporary name with `write(tmp)`: complete or
// absent. Throws CheckpointWriteError naming `path`.
void write_through_temporary(const std::string& path, const std::function<void(const std::string&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    write(tmp);
  } catch (const std::exception& e) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw CheckpointWriteError(path + ": expected a writable file, got an error (" + one_line(message_of(e)) + ")");
  }
  replace_file_atomically(tmp, path);
}

}  // namespace

void save_checkpoint_file(model::Trainer& trainer, const std::string& path) {
  write_through_temporary(path, [&](const std::string& tmp) { trainer.save_checkpoint(tmp); });
}

namespace {

// Note [The same state, step by step]: the model's parameters and buffers by
// name, as a LibTorch archive.
void save_state_file(model::DbNet& net, const std::string& path) {
  torch::serialize::OutputArchive archive;
  torch::NoGradGuard no_grad;
  for (const auto& p : net->named_parameters()) archive.write(p.key(), p.value().detach().cpu().contiguous());
  for (const auto& b : net->named_buffers()) archive.write(b.key(), b.value().cpu().contiguous());
  write_through_temporary(path, [&](const std::string& tmp) { archive.save_to(tmp); });
}

void load_state_file(model::DbNet& net, const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const std::exception& e) {
    throw StateReplayError(std::string(DBH_SCENARIO_KEY(monitors.numerics_replay)) + ": " + path +
                             ": expected a state dbh saved (monitors.numerics_save_states), got a file it cannot "
                             "read (" + one_line(message_of(e)) + ")");
  }
  torch::NoGradGuard no_grad;
  const auto copy = [&](const std::string& name, torch::Tensor& into) {
    torch::Tensor read;
    if (!archive.try_read(name, read) || read.sizes() != into.sizes()) {
      throw StateReplayError(std::string(DBH_SCENARIO_KEY(monitors.numerics_replay)) + ": " + path +
                               ": expected " + name + " of shape " + c10::str(into.sizes()) + ", got " +
                               (read.defined() ? "shape " + c10::str(read.sizes()) : std::string("none")) +
                               " (a state of another model)");
    }
    into.copy_(read);
  };
  for (auto& p : net->named_parameters()) copy(p.key(), p.value());
  for (auto& b : net->named_buffers()) copy(b.key(), b.value());
}

}  // namespace

void exchange_state(model::DbNet& net, const scenario::Scenario& s, const SessionSite& site, int64_t step) {
  const std::string name = proto::state_file_name(step);
  if (s.monitors.numerics_save_states && site.run == 0) {
    save_state_file(net, (std::filesystem::path(site.dir) / name).string());
  }
  if (!s.monitors.numerics_replay.empty()) {
    const std::filesystem::path replay = std::filesystem::path(s.monitors.numerics_replay) / name;
    std::error_code ec;
    // A state is a file of the folder, never one a link points to.
    if (std::filesystem::symlink_status(replay, ec).type() == std::filesystem::file_type::regular) {
      load_state_file(net, replay.string());
    }
  }
}

void train_steps(model::DbNet& net, model::Trainer& trainer, const model::BatchSource& batches,
                 const ValidationSet& validation, const scenario::Scenario& s, const SessionSite& site, const StepHooks& hooks) {
  const int64_t last = s.train.last_step();
  while (trainer.next_step() < last) {
    exchange_state(net, s, site, trainer.next_step());
    if (hooks.before_step) hooks.before_step(trainer.next_step());
    const model::StepResult r = trainer.step(batches);
    if (hooks.after_step) hooks.after_step(r);
    const int64_t next = trainer.next_step();
    if (s.train.checkpoint_every > 0 && next % s.train.checkpoint_every == 0) {
      const std::string path = (std::filesystem::path(site.dir) / proto::checkpoint_file_name(site.run, next)).string();
      save_checkpoint_file(trainer, path);
      if (hooks.checkpointed) hooks.checkpointed(next, path);
    }
    std::optional<ValidationResult> v;
    if (validates_after(s, validation, next)) {
      v = validate(net, s, validation, site.run, next, next == last, site.dir, site.faults);
      if (hooks.validated) hooks.validated(next, *v);
    }
    if (hooks.step_done) hooks.step_done(r, v ? &*v : nullptr);
  }
}

}  // namespace dbh::harness::worker
