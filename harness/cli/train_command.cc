#include "harness/cli/train_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/cli/env_command.h"
#include "harness/env/environment.h"
#include "model/data/batch.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/train/trainer.h"

namespace dbh::harness {
namespace fs = std::filesystem;

int run_env_command(bool json) {
  const auto env = collect_environment();
  std::cout << (json ? environment_json(env) + "\n" : format_environment(env));
  return 0;
}

namespace {

std::string timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, "%Y%m%d-%H%M%S");
  return s.str();
}

}  // namespace

int run_train_command(const TrainCommandOptions& o) {
  if (o.size % 32 != 0) {
    std::cerr << "dbh train: --size: expected a multiple of 32, got " << o.size << "\n";
    return 2;
  }
  if (o.precision != "fp32" && o.device.rfind("cuda", 0) != 0) {
    std::cerr << "dbh train: --precision " << o.precision
              << ": expected fp32 on " << o.device
              << " (mixed precision runs on CUDA devices only)\n";
    return 2;
  }
  try {
    (void)model::parse_device(o.device);
  } catch (const std::exception& e) {
    std::cerr << "dbh train: --device: " << e.what() << "\n";
    return 2;
  }
  const fs::path out = o.out.empty() ? fs::path("reports/runs") / ("train-" + timestamp())
                                     : fs::path(o.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::cerr << "dbh train: --out " << out.string() << ": cannot create: " << ec.message() << "\n";
    return 2;
  }

  model::DeterminismOptions det;
  det.seed(o.seed).threads(o.threads > 0 ? o.threads
                                         : static_cast<int64_t>(std::thread::hardware_concurrency()));
  model::apply_determinism(det);

  model::DbNetOptions net;
  net.encoder(model::ResNetOptions().depth(o.encoder))
      .decoder(model::decoder_kind_from_string(o.decoder));
  model::DbNet dbnet(net);
  if (!o.weights.empty()) {
    const auto n = dbnet->load_weights(o.weights);
    if (!o.quiet) std::cout << "loaded " << n << " tensors from " << o.weights << "\n";
  }
  model::TrainOptions topt;
  topt.optimizer(model::optimizer_kind_from_string(o.optimizer))
      .lr(o.lr)
      .max_steps(o.steps)
      .accumulation(o.accumulation)
      .grad_clip(o.grad_clip)
      .precision(model::precision_from_string(o.precision))
      .device(o.device)
      .determinism(det);
  model::Trainer trainer(dbnet, topt);
  if (!o.resume.empty()) trainer.load_checkpoint(o.resume);

  model::BatchSource source;
  std::string data_desc;
  const uint64_t seed = o.seed;
  const int64_t n = o.batch_size, s = o.size;
  if (!o.data.empty() || o.source == "synthetic_render") {
    model::DatasetOptions dopt;
    dopt.root = o.data;
    if (o.data.empty()) dopt.synthetic_samples = 64;
    dopt.size = s;
    dopt.augment = o.augment;
    dopt.seed = seed;
    dopt.on_invalid = o.on_invalid == "skip"   ? model::OnInvalid::kSkip
                      : o.on_invalid == "clip" ? model::OnInvalid::kClip
                                               : model::OnInvalid::kError;
    std::shared_ptr<model::Dataset> dataset;
    try {
      dataset = std::make_shared<model::Dataset>(dopt);
    } catch (const model::DataError& e) {
      std::cerr << "dbh train: --data " << o.data << ": " << e.defects().size()
                << " defect(s):\n";
      for (const auto& d : e.defects()) std::cerr << "  " << d.message << "\n";
      return 2;
    }
    for (const auto& d : dataset->defects()) std::cerr << "warning: " << d.message << "\n";
    model::LoaderOptions lopt;
    lopt.batch_size = n;
    lopt.num_workers = o.num_workers;
    lopt.seed = seed;
    lopt.validate = o.validate_batches;
    auto loader = std::make_shared<model::Loader>(dataset, lopt);
    source = [loader](int64_t micro) { return loader->get(micro); };
    data_desc = o.data.empty() ? "synthetic_render (" + std::to_string(dataset->size()) + " rendered images)"
                               : "real (" + o.data + ", " + std::to_string(dataset->size()) + " images, " +
                                     dataset->format() + ")";
  } else if (o.source == "synthetic_random") {
    source = [=](int64_t micro) {
      return model::synthetic_random_batch(n, s, s, seed * 1000003ULL + static_cast<uint64_t>(micro));
    };
  } else {
    source = [=](int64_t micro) {
      return model::synthetic_boxes_batch(n, s, s, seed * 1000003ULL + static_cast<uint64_t>(micro));
    };
  }
  if (data_desc.empty()) data_desc = o.source;

  if (!o.quiet) {
    std::cout << "dbh train: resnet" << o.encoder << " + " << o.decoder << ", data " << data_desc
              << ", batch " << n << "x" << o.accumulation << ", " << s << "x" << s << ", "
              << o.steps << " steps, " << o.optimizer << " lr " << o.lr << ", " << o.precision
              << " on " << o.device << ", seed " << o.seed << "\n";
  }
  std::ofstream csv(out / "metrics.csv");
  csv << "step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,loss_bits\n";
  std::vector<model::StepResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  while (trainer.next_step() < o.steps) {
    model::StepResult r;
    try {
      r = trainer.step(source);
    } catch (const model::DataError& e) {
      std::cerr << "dbh train: step " << trainer.next_step() << ": " << e.what() << "\n";
      return 2;
    }
    results.push_back(r);
    csv << r.step << "," << std::setprecision(9) << r.loss << "," << r.bce << "," << r.l1 << ","
        << r.dice << "," << r.lr << "," << r.grad_norm << "," << (r.skipped ? 1 : 0) << ","
        << r.loss_scale << "," << r.seconds << "," << r.loss_bits << "\n";
    if (!o.quiet) {
      std::cout << "step " << std::setw(4) << r.step + 1 << "/" << o.steps << "  loss "
                << std::fixed << std::setprecision(4) << r.loss << " (bce " << r.bce << ", l1 "
                << r.l1 << ", dice " << r.dice << ")  lr " << std::setprecision(5) << r.lr
                << "  |g| " << std::setprecision(3) << r.grad_norm << "  " << std::setprecision(2)
                << r.seconds << " s" << std::defaultfloat << "\n";
    }
    if (o.checkpoint_every > 0 && trainer.next_step() % o.checkpoint_every == 0) {
      trainer.save_checkpoint((out / ("checkpoint-" + std::to_string(trainer.next_step()) + ".pt")).string());
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  trainer.save_checkpoint((out / "checkpoint-final.pt").string());

  bool finite = true;
  for (const auto& r : results) finite = finite && std::isfinite(r.loss);
  nlohmann::ordered_json summary;
  summary["schema_version"] = 1;
  summary["command"] = "train";
  summary["data"] = data_desc;
  summary["steps_completed"] = results.size();
  summary["first_loss"] = results.empty() ? 0.0 : results.front().loss;
  summary["last_loss"] = results.empty() ? 0.0 : results.back().loss;
  summary["all_losses_finite"] = finite;
  summary["wall_seconds"] = wall;
  summary["environment"] = nlohmann::json::parse(environment_json(collect_environment()));
  {
    std::ofstream js(out / "summary.json.tmp");
    js << summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  fs::rename(out / "summary.json.tmp", out / "summary.json");
  std::cout << "dbh train: " << results.size() << " steps in " << std::fixed << std::setprecision(1)
            << wall << " s, loss " << std::setprecision(4)
            << (results.empty() ? 0.0 : results.front().loss) << " -> "
            << (results.empty() ? 0.0 : results.back().loss) << "\n"
            << "output: " << fs::absolute(out).string() << " (metrics.csv, summary.json, checkpoint-final.pt)\n";
  return finite ? 0 : 1;
}

}  // namespace dbh::harness
