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
#include <tuple>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "harness/cli/env_command.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/text.h"
#include "harness/supervisor/trial.h"
#include "harness/env/environment.h"
#include "model/data/batch.h"
#include "model/data/dataset.h"
#include "model/dbnet.h"
#include "model/eval/infer.h"
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
  // Input checks first: bad input leaves nothing behind.
  auto usage = [](const std::string& key, const std::string& expected, const std::string& got) {
    throw UsageError("dbh train: " + key + ": expected " + expected + ", got " + got);
  };
  auto number = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  if (o.size < 32 || o.size > 8192 || o.size % 32 != 0) {
    usage("--size", "a multiple of 32 in [32, 8192]", std::to_string(o.size));
  }
  // The bounds a scenario accepts (data.*, train.*): beyond them a run
  // exhausts memory or never ends instead of saying what is wrong.
  for (const auto& [key, value, lo, hi] :
       {std::tuple<const char*, int64_t, int64_t, int64_t>{"--steps", o.steps, 1, 100000000},
        {"--batch-size", o.batch_size, 1, 4096},
        {"--accumulation", o.accumulation, 1, 4096},
        {"--num-workers", o.num_workers, 0, 256},
        {"--threads", o.threads, 0, 1024},
        {"--checkpoint-every", o.checkpoint_every, 0, 100000000}}) {
    if (value < lo || value > hi) {
      usage(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", std::to_string(value));
    }
  }
  if (!(std::isfinite(o.lr) && o.lr > 0 && o.lr <= 1e6)) usage("--lr", "a number > 0 and <= 1e+06", number(o.lr));
  if (!(std::isfinite(o.grad_clip) && o.grad_clip >= 0 && o.grad_clip <= 1e12)) {
    usage("--grad-clip", "a number >= 0 and <= 1e+12 (0: off)", number(o.grad_clip));
  }
  if (o.precision != "fp32" && o.device.rfind("cuda", 0) != 0) {
    usage("--precision " + o.precision, "fp32 on " + o.device, "mixed precision, which runs on CUDA devices only");
  }
  try {
    (void)model::parse_device(o.device);
  } catch (const std::exception& e) {
    throw UsageError(std::string("dbh train: --device: ") + e.what());
  }
  const fs::path out = o.out.empty() ? fs::path("reports/runs") / ("train-" + timestamp())
                                     : fs::path(o.out);
  // The output folder is claimed as every command's is: a user's folder (a
  // dataset, another command's results) is refused, a second dbh on it is
  // locked out, and on any error or interruption (SIGINT, SIGTERM: checked
  // between steps) what this command wrote is removed.
  install_stop_handlers();
  OutputDir claim(out, "train");
  auto stop_check = [] {
    if (const int signal_number = stop_requested()) throw Interrupted(signal_number);
  };

  model::DeterminismOptions det;
  det.seed(o.seed).threads(o.threads > 0 ? o.threads
                                         : static_cast<int64_t>(std::thread::hardware_concurrency()));
  model::apply_determinism(det);

  model::DbNetOptions net;
  net.encoder(model::ResNetOptions().depth(o.encoder))
      .decoder(model::decoder_kind_from_string(o.decoder));
  model::DbNet dbnet(net);
  const std::string arch = "resnet" + std::to_string(o.encoder) + " + " + o.decoder;
  // A file of another architecture (or not of dbh) is the user's to fix.
  auto load_error = [&](const std::string& key, const std::string& path, const std::exception& e) {
    std::string what = e.what();
    if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) what = c10->what_without_backtrace();
    what = one_line(what.substr(0, what.find('\n')));
    usage(key + " " + path, "a file of " + arch + " (--encoder, --decoder)", "one that does not load: " + what);
  };
  if (!o.weights.empty()) {
    // A weights file or a dbh checkpoint (its model part), as `dbh eval`
    // reads them: DbNet::load_weights finds nothing in a checkpoint.
    int64_t n = 0;
    try {
      n = model::load_model_state(dbnet, o.weights).loaded;
    } catch (const std::exception& e) {
      load_error("--weights", o.weights, e);
    }
    const size_t total = dbnet->named_parameters().size() + dbnet->named_buffers().size();
    // Partial loads are how a backbone is initialised (torchvision, another
    // decoder), so they are said, not refused; a file that gives nothing
    // would train from scratch under its name.
    if (n == 0) {
      usage("--weights " + o.weights, "a file holding tensors of " + arch + " (--encoder, --decoder)",
            "one none of whose entries has a name and shape of that model");
    }
    if (static_cast<size_t>(n) < total) {
      std::cerr << "warning: --weights " << o.weights << ": loaded " << n << " of " << total << " tensors of "
                << arch << "; the others keep their initial values\n";
    }
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
  if (!o.resume.empty()) {
    try {
      trainer.load_checkpoint(o.resume);
    } catch (const std::exception& e) {
      load_error("--resume", o.resume, e);
    }
  }

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
      for (const auto& d : e.defects()) std::cerr << "  " << d.message << "\n";
      usage("--data " + o.data, "a dataset without defects (or --on-invalid skip|clip)",
            std::to_string(e.defects().size()) + " defect(s), listed above");
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
  const fs::path csv_path = out / "metrics.csv";
  std::ofstream csv(csv_path);
  csv << "step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,loss_bits\n";
  auto save = [&](const fs::path& path) {
    // Through a temporary name: a checkpoint is complete or absent.
    const fs::path tmp = path.string() + ".tmp";
    try {
      trainer.save_checkpoint(tmp.string());
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove(tmp, ec);
      const std::string what = e.what();
      throw ReportError(path.string() + ": expected a writable file, got an error (" +
                        one_line(what.substr(0, what.find('\n'))) + ")");
    }
    replace_file_atomically(tmp.string(), path.string());
  };
  std::vector<model::StepResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  while (trainer.next_step() < o.steps) {
    stop_check();
    model::StepResult r;
    try {
      r = trainer.step(source);
    } catch (const model::DataError& e) {
      throw UsageError("dbh train: step " + std::to_string(trainer.next_step()) + ": " + e.what());
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
                << r.seconds << " s" << std::defaultfloat << std::endl;  // flushed: logs show progress
    }
    if (o.checkpoint_every > 0 && trainer.next_step() % o.checkpoint_every == 0) {
      save(out / ("checkpoint-" + std::to_string(trainer.next_step()) + ".pt"));
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop_check();
  save(out / "checkpoint-final.pt");
  csv.close();
  if (!csv) throw ReportError(csv_path.string() + ": expected a writable file, got a write error");

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
  write_file_atomically((out / "summary.json").string(),
                        summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  stop_check();
  claim.commit();
  std::cout << "dbh train: " << results.size() << " steps in " << std::fixed << std::setprecision(1)
            << wall << " s, loss " << std::setprecision(4)
            << (results.empty() ? 0.0 : results.front().loss) << " -> "
            << (results.empty() ? 0.0 : results.back().loss) << "\n"
            << "output: " << fs::absolute(out).string() << " (metrics.csv, summary.json, checkpoint-final.pt)\n";
  return finite ? 0 : 1;
}

}  // namespace dbh::harness
