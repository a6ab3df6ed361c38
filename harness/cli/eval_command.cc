#include "harness/cli/eval_command.h"
#include "harness/cli/eval_page.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <torch/torch.h>

#include "harness/common/out_file.h"
#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "harness/common/progress.h"
#include "harness/common/text.h"
#include "harness/env/environment.h"
#include "harness/report/eval_reading.h"
#include "harness/report/markdown_html.h"
#include "harness/report/report.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/trial.h"
#include "model/data/image_decode.h"
#include "model/data/scan.h"
#include "model/dbnet.h"
#include "model/eval/infer.h"
#include "model/eval/overlay.h"
#include "model/train/determinism.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kWhere = "dbh eval";
constexpr int64_t kMaxSize = 8192;
constexpr int64_t kMaxBatch = 1024;
constexpr int64_t kMaxOverlays = 1000;
constexpr int64_t kMaxThreads = 1024;
constexpr double kMaxUnclipRatio = 100.0;

[[noreturn]] void usage(const std::string& key, const std::string& expected,
                        const std::string& got) {
  throw UsageError(std::string(kWhere) + ": " + key + ": expected " + expected + ", got " + got);
}

int64_t encoder_depth(const std::string& name) {
  for (const int64_t depth : {18, 34, 50}) {
    if (name == std::to_string(depth) || name == "resnet" + std::to_string(depth)) return depth;
  }
  usage("--encoder", "resnet18, resnet34 or resnet50", quoted_excerpt(name));
}

std::string architecture(int64_t depth, model::DecoderKind decoder) {
  return "resnet" + std::to_string(depth) + " + " + model::to_string(decoder);
}

// The first line of a LibTorch error (its text without the C++ backtrace).
std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return one_line(nl == std::string::npos ? s : s.substr(0, nl));
}

// The encoder and decoder whose every tensor `path` holds, or "" when none
// does. Only called on the error path: builds up to six models.
std::string guess_architecture(const std::string& path) {
  for (const int64_t depth : {18, 34, 50}) {
    for (const auto decoder : {model::DecoderKind::kFpn, model::DecoderKind::kPan}) {
      model::DbNet candidate(model::DbNetOptions()
                                 .encoder(model::ResNetOptions().depth(depth))
                                 .decoder(decoder));
      const auto report = model::load_model_state(candidate, path);
      if (report.exact()) return architecture(depth, decoder);
    }
  }
  return "";
}

void write_png(const fs::path& path, const cv::Mat& image) {
  std::vector<uchar> png;
  if (!cv::imencode(".png", image, png)) {
    throw ReportError(path.string() + ": expected an encodable image, got a PNG encoder failure");
  }
  write_file_atomically(path.string(), std::string(png.begin(), png.end()));
}

void throw_if_stopped() {
  if (const int signal_number = supervisor::stop_requested()) throw supervisor::Interrupted(signal_number);
}

// --save-weights names a new file, or a weights file to replace; never the
// --weights file itself (a checkpoint would lose its optimizer state) nor a
// file that is not a LibTorch archive (a user's file is never overwritten).
void check_save_weights(const std::string& path, const std::string& weights) {
  const std::string key = "--save-weights " + path;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (fs::exists(st)) {
    if (fs::equivalent(path, weights, ec)) usage(key, "a file other than --weights", "the --weights file itself");
    if (!fs::is_regular_file(st)) usage(key, "a new file or a weights file to replace", describe_path(path));
    try {
      check_checkpoint_file(path, kWhere, "--save-weights");
    } catch (const UsageError&) {
      usage(key, "a new file or a weights file to replace (a LibTorch archive)",
            "an existing file that is not one (dbh never overwrites it)");
    }
    // A training checkpoint (Trainer::save_checkpoint: it holds the step) is
    // a LibTorch archive too, but replaced by weights it would lose its
    // optimizer and step: another run's resume point.
    bool checkpoint = false;
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path, torch::kCPU);
      torch::Tensor step;
      checkpoint = archive.try_read("step", step);
    } catch (const std::exception&) {
      usage(key, "a new file or a weights file to replace (a LibTorch archive)",
            "an existing file that does not load as one (dbh never overwrites it)");
    }
    if (checkpoint) {
      usage(key, "a new file or a weights file to replace",
            "a training checkpoint (replaced, its optimizer and step would be lost; dbh never overwrites it)");
    }
  }
  const fs::path parent = fs::absolute(path).parent_path();
  if (!fs::is_directory(parent, ec)) {
    usage(key, "a file in an existing folder", describe_path(parent.string()) + " at " + parent.string());
  }
}

// The option values `dbh eval` accepts, checked before anything is read:
// the bounds training and validation accept (data.val.*), since a larger
// value exhausts memory or disk instead of saying what is wrong.
struct EvalChoices {
  int64_t depth = 18;
  model::DecoderKind decoder{};
  model::ResizeSide side{};
  model::OnInvalid on_invalid{};
  torch::Device device{torch::kCPU};
};

// `value` as one of a fixed choice's names (model/choices.h), else a usage
// error naming the flag and the names.
template <typename Choice>
Choice parse_choice(Choice (*from_string)(const std::string&), const std::vector<std::string>& names,
                    const char* flag, const std::string& value) {
  try {
    return from_string(value);
  } catch (const std::invalid_argument&) {
    usage(flag, "one of " + scenario::join(names), quoted_excerpt(value));
  }
}

EvalChoices check_eval_options(const EvalCommandOptions& o) {
  if (o.size <= 0 || o.size % 32 != 0) usage("--size", "a positive multiple of 32", std::to_string(o.size));
  if (o.size > kMaxSize) {
    usage("--size", "a positive multiple of 32 up to " + std::to_string(kMaxSize), std::to_string(o.size));
  }
  if (o.batch_size <= 0 || o.batch_size > kMaxBatch) {
    usage("--batch-size", "a number in [1, " + std::to_string(kMaxBatch) + "]", std::to_string(o.batch_size));
  }
  if (o.overlays < 0 || o.overlays > kMaxOverlays) {
    usage("--overlays", "a number in [0, " + std::to_string(kMaxOverlays) + "]", std::to_string(o.overlays));
  }
  if (o.threads < 0 || o.threads > kMaxThreads) {
    usage("--threads", "a number in [0, " + std::to_string(kMaxThreads) + "] (0: all cores)",
          std::to_string(o.threads));
  }
  for (const auto& [key, value] : {std::pair<const char*, double>{"--thresh", o.binarize_thresh},
                                   {"--box-thresh", o.box_thresh},
                                   {"--iou-thresh", o.iou_thresh}}) {
    if (!(value >= 0.0 && value <= 1.0)) usage(key, "a number in [0, 1]", fixed(value, 6));
  }
  if (o.max_candidates < 0 || o.max_candidates > std::numeric_limits<int>::max()) {
    usage("--max-candidates", "a number in [0, " + std::to_string(std::numeric_limits<int>::max()) + "]",
          std::to_string(o.max_candidates));
  }
  if (!(o.unclip_ratio >= 0.0 && o.unclip_ratio <= kMaxUnclipRatio)) {
    usage("--unclip-ratio", "a number in [0, " + fixed(kMaxUnclipRatio, 0) + "]", fixed(o.unclip_ratio, 6));
  }
  EvalChoices c;
  c.depth = encoder_depth(o.encoder);
  c.decoder = parse_choice(model::decoder_kind_from_string, model::decoder_kind_names(), "--decoder", o.decoder);
  c.side = parse_choice(model::resize_side_from_string, model::resize_side_names(), "--side", o.side);
  c.on_invalid = parse_choice(model::on_invalid_from_string, model::on_invalid_names(), "--on-invalid", o.on_invalid);
  try {
    c.device = model::parse_device(o.device);
  } catch (const std::exception& e) {
    throw UsageError(std::string(kWhere) + ": --device: " + e.what());
  }
  return c;
}

// Loads `o.weights` into `net` (architecture `arch`), accounting for every
// tensor: a file that does not load, tensors of another shape or model, or
// missing ones without --allow-partial are usage errors that say what the
// file holds.
model::ModelStateReport load_eval_weights(model::DbNet& net, const EvalCommandOptions& o, const std::string& arch) {
  model::ModelStateReport loaded;
  try {
    loaded = model::load_model_state(net, o.weights);
  } catch (const c10::Error& e) {
    usage("--weights " + o.weights, "a dbh checkpoint or weights file (a LibTorch archive)",
          "one that does not load: " + first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    // TorchScript's reader throws its own types for archives of other kinds
    // (a torch.save pickle, a zip of something else).
    usage("--weights " + o.weights, "a dbh checkpoint or weights file (a LibTorch archive)",
          "one that does not load: " + first_line(e.what()));
  }
  const size_t total = net->named_parameters().size() + net->named_buffers().size();
  if (!loaded.exact()) {
    for (const auto& name : loaded.missing) {
      std::cerr << "not loaded (missing from the file): " << name << "\n";
    }
    for (const auto& m : loaded.mismatched) std::cerr << "not loaded (other shape): " << m << "\n";
    for (const auto& name : loaded.unexpected) std::cerr << "unused entry of the file: " << name << "\n";
    const std::string guess = guess_architecture(o.weights);
    const std::string hint =
        !guess.empty() && guess != arch
            ? "; the file holds " + guess + ": pass the --encoder and --decoder it was trained with"
            : "";
    if (!loaded.mismatched.empty() || !loaded.unexpected_model.empty()) {
      usage("--weights " + o.weights, "tensors shaped for " + arch + " (--encoder, --decoder)",
            (loaded.mismatched.empty()
                 ? std::to_string(loaded.unexpected_model.size()) + " tensors of a larger model that " + arch +
                       " lacks (" + loaded.unexpected_model.front() + ", …), listed above"
                 : std::to_string(loaded.mismatched.size()) + " of " + std::to_string(total) +
                       " with another shape, listed above") +
                hint);
    }
    if (loaded.loaded == 0) {
      // Nothing of the file reaches the model: evaluating would score an
      // untrained network under the file's name, --allow-partial or not.
      usage("--weights " + o.weights, "a file holding tensors of " + arch,
            "none of its " + std::to_string(loaded.unexpected.size()) + " entries is a parameter or buffer of " +
                arch + hint);
    }
    if (!o.allow_partial) {
      usage("--weights " + o.weights, "every parameter and buffer of " + arch,
            std::to_string(loaded.missing.size()) + " of " + std::to_string(total) +
                " missing, listed above" + hint + " (--allow-partial evaluates anyway)");
    }
    std::cerr << "warning: " << loaded.missing.size() << " of " << total
              << " tensors keep their initial values (--allow-partial)\n";
  }
  return loaded;
}

}  // namespace

// The overlays of the images `order` names (worst first) into out/overlays/,
// replacing a previous evaluation's; their index for eval.json.
json write_overlays(const fs::path& out, const std::string& data, const model::DatasetEvaluation& result,
                    const std::vector<size_t>& order) {
  const fs::path overlay_dir = out / "overlays";
  fs::remove_all(overlay_dir);  // a previous evaluation's overlays into this folder
  json overlays = json::array();
  if (!order.empty()) make_directories_no_follow(overlay_dir.string());
  for (size_t rank = 0; rank < order.size(); ++rank) {
    throw_if_stopped();
    const auto& e = result.images[order[rank]];
    const cv::Mat image = model::decode_image(model::image_path(data, e.file));
    std::vector<model::Polygon> det;
    for (const auto& d : e.detections) det.push_back(d.polygon);
    const std::string number = std::to_string(rank + 1);
    const std::string name = std::string(number.size() < 2 ? "0" : "") + number + "-" +
                             safe_file_name(fs::path(e.file).stem().string()) + ".png";
    write_png(overlay_dir / name, model::draw_overlay(image, e.gt, e.gt_ignore, det));
    overlays.push_back({{"rank", rank + 1},
                        {"file", "overlays/" + name},
                        {"image", e.file},
                        {"hmean", e.metrics.hmean}});
  }
  return overlays;
}

// The dataset, checked as training checks it: every image decoded (with
// progress), defects refused unless --on-invalid skips or clips them.
model::ScanResult scan_eval_data(const EvalCommandOptions& o, model::OnInvalid policy) {
  if (!fs::is_directory(o.data)) {
    usage("--data", "a dataset folder (images/ plus annotations.json or icdar/)",
          describe_path(o.data) + " at " + o.data);
  }
  // Note [No silent minute]: every image is decoded.
  Progress progress(std::string(kWhere) + ": decoding the images of " + o.data, "images");
  model::ScanResult scan = model::scan_dataset(
      o.data, policy, {}, /*check_images=*/true, [&](int64_t done, int64_t total) { progress.update(done, total); });
  progress.finish();
  if (!scan.readable) {
    const std::string what = scan.defects.empty() ? "nothing readable" : scan.defects.front().message;
    throw UsageError(std::string(kWhere) + ": --data: " + what);
  }
  if (policy == model::OnInvalid::kError && !scan.defects.empty()) {
    for (const auto& d : scan.defects) std::cerr << "  " << one_line(d.message) << "\n";
    usage("--data " + o.data, "a dataset without defects (or --on-invalid skip|clip)",
          std::to_string(scan.defects.size()) + " defect(s), listed above");
  }
  for (const auto& d : scan.defects) std::cerr << "warning: " << one_line(d.message) << "\n";
  if (scan.images.empty()) usage("--data " + o.data, "at least one usable image", "none");
  return scan;
}

namespace {

// Channels-last weights, as the trainer keeps them: oneDNN and cuDNN pick
// their NHWC kernels.
void to_channels_last(model::DbNet& net) {
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

model::PostprocessOptions postprocess_options(const EvalCommandOptions& o) {
  model::PostprocessOptions post;
  post.binarize_thresh = o.binarize_thresh;
  post.box_thresh = o.box_thresh;
  post.unclip_ratio = o.unclip_ratio;
  post.max_candidates = static_cast<int>(o.max_candidates);
  return post;
}

// Every image of `scan` scored, a progress line each (unless --quiet); a stop
// request ends it between images.
model::DatasetEvaluation evaluate_with_progress(model::DbNet& net, const EvalCommandOptions& o,
                                                const model::ScanResult& scan, model::ResizeSide side,
                                                const model::PostprocessOptions& post) {
  const auto options = model::InferenceOptions()
                           .size(o.size)
                           .side(side)
                           .batch_size(o.batch_size)
                           .device(o.device)
                           .postprocess(post)
                           .iou_thresh(o.iou_thresh);
  try {
    return model::evaluate(net, o.data, scan.images, options,
                           [&](const model::ImageEvaluation& e, int64_t done, int64_t n) {
                             throw_if_stopped();
                             if (o.quiet) return;
                             std::cout << "[" << std::setw(static_cast<int>(std::to_string(n).size())) << done
                                       << "/" << n << "] " << one_line(e.file) << "  " << metrics_line(e.metrics)
                                       << "  max P " << fixed(e.probability.max, 2) << std::endl;
                           });
  } catch (const model::DataError& e) {
    throw UsageError(std::string(kWhere) + ": --data: " + e.what());
  }
}

}  // namespace

int run_eval_command(const EvalCommandOptions& o) {
  // Input checks first: bad input leaves nothing behind.
  const EvalChoices c = check_eval_options(o);
  const int64_t depth = c.depth;
  const model::DecoderKind decoder_kind = c.decoder;
  const model::ResizeSide side = c.side;
  const torch::Device device = c.device;
  check_checkpoint_file(o.weights, kWhere, "--weights");
  const std::string weights_abs = fs::absolute(o.weights).lexically_normal().string();
  const model::ScanResult scan = scan_eval_data(o, c.on_invalid);
  model::apply_determinism(model::DeterminismOptions().seed(0).threads(
      o.threads > 0 ? o.threads : static_cast<int64_t>(std::thread::hardware_concurrency())));

  // The model, with every tensor accounted for.
  model::DbNet net(model::DbNetOptions()
                       .encoder(model::ResNetOptions().depth(depth))
                       .decoder(decoder_kind));
  const std::string arch = architecture(depth, decoder_kind);
  const model::ModelStateReport loaded = load_eval_weights(net, o, arch);
  const size_t total = net->named_parameters().size() + net->named_buffers().size();
  const fs::path out = o.out.empty() ? fs::path(default_output_folder("eval")) : fs::path(o.out);
  if (!o.save_weights.empty()) check_save_weights(o.save_weights, o.weights);
  // From here on something is written: SIGINT and SIGTERM stop the
  // evaluation between images, and what it wrote is removed (Interrupted
  // unwinds through the claim), so an interrupted evaluation leaves nothing
  // half-written.
  supervisor::install_stop_handlers();
  check_outside_dataset("dbh eval", "--out", out.string(), o.data);
  check_outside_dataset("dbh eval", "--save-weights", o.save_weights, o.data);
  OutputDir claim(out, "eval " + weights_abs, OutputDir::Reuse::kReplace, {o.weights});
  // --save-weights goes through a temporary name, written now (before the
  // model is moved and re-laid out) and renamed into place last: a reader
  // never sees a partial file and a failed or interrupted evaluation leaves
  // none.
  std::string save_tmp;
  struct RemoveTmp {
    const std::string& path;
    ~RemoveTmp() {
      std::error_code ec;
      if (!path.empty()) fs::remove(path, ec);
    }
  } remove_tmp{save_tmp};
  if (!o.save_weights.empty()) {
    save_tmp = o.save_weights + ".tmp." + std::to_string(::getpid());
    try {
      net->save_weights(save_tmp);
    } catch (const std::exception& e) {
      usage("--save-weights " + o.save_weights, "a writable file", "an error: " + first_line(e.what()));
    }
  }
  net->to(device);
  to_channels_last(net);
  const model::PostprocessOptions post = postprocess_options(o);
  if (!o.quiet) {
    std::cout << "dbh eval: " << arch << " from " << o.weights << " (" << loaded.format
              << (loaded.step >= 0 ? ", step " + std::to_string(loaded.step) : std::string()) << ", "
              << loaded.loaded << " of " << total << " tensors), data " << o.data << " ("
              << scan.images.size() << " images, " << scan.format << "), " << o.side << " side "
              << o.size << ", batch " << o.batch_size << ", box_thresh " << o.box_thresh << " on "
              << o.device << "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const model::DatasetEvaluation result = evaluate_with_progress(net, o, scan, side, post);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The K worst images: lowest H-mean, then most errors, then dataset order.
  const std::vector<size_t> order = model::worst_images(result, static_cast<size_t>(o.overlays));
  json overlays = write_overlays(out, o.data, result, order);

  // Note [Reading an evaluation]: what the numbers mean, from the facts
  // measured above.
  const EvalPage page{o,      arch,   depth, decoder_kind, weights_abs,
                      loaded, total,  scan,  result,       post,
                      torch::get_num_threads(), wall, std::move(overlays),
                      report::read_evaluation(eval_facts(result, post)),
                      json::parse(env::environment_json(env::collect_environment()))};
  const auto& reading = page.reading;
  write_eval_pages(out, page);
  throw_if_stopped();
  if (!save_tmp.empty()) {
    try {
      replace_file_atomically(save_tmp, o.save_weights);
    } catch (const ReportError& e) {
      usage("--save-weights " + o.save_weights, "a writable file", std::string("an error (") + e.what() + ")");
    }
    save_tmp.clear();
  }
  claim.commit();

  std::cout << "dbh eval: " << metrics_line(result.overall) << " on " << page.n() << " images; "
            << fixed(page.inference_per_s(), 2) << " images/s inference, " << fixed(page.post_ms(), 1)
            << " ms/image post-processing\n"
            << "reading: " << one_line(reading.front().meaning) << "\n"
            << "next: " << one_line(reading.front().next) << "\n"
            << "output: " << fs::absolute(out).lexically_normal().string() << " (eval.json, eval.md, eval.html"
            << (order.empty() ? "" : ", overlays/") << ")\n";
  return 0;
}

}  // namespace dbh::harness::cli
