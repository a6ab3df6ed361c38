#include "harness/cli/data_command.h"
#include "harness/common/progress.h"
#include "harness/common/text.h"
#include "harness/common/out_file.h"

#include <filesystem>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "harness/common/error.h"
#include "harness/common/png.h"
#include "harness/common/files.h"
#include "harness/common/output_dir.h"
#include "model/data/dataset.h"
#include "model/data/scan.h"
#include "model/eval/overlay.h"

namespace dbh::harness::cli {
namespace fs = std::filesystem;

namespace {

model::OnInvalid parse_policy(const std::string& s) {
  if (s == "skip") return model::OnInvalid::kSkip;
  if (s == "clip") return model::OnInvalid::kClip;
  return model::OnInvalid::kError;
}

// NumPy .npy (format 1.0) of a CV_32FC1 matrix, written atomically. Throws
// ReportError when it cannot be written.
void write_npy(const fs::path& path, const cv::Mat& m) {
  CV_Assert(m.type() == CV_32FC1 && m.isContinuous());
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(m.rows) + ", " + std::to_string(m.cols) + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string data("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<uint16_t>(header.size());
  data.push_back(static_cast<char>(len & 0xff));
  data.push_back(static_cast<char>(len >> 8));
  data += header;
  data.append(reinterpret_cast<const char*>(m.ptr<float>()), m.total() * sizeof(float));
  write_file_atomically(path.string(), data);
}

}  // namespace

int run_data_check(const DataCheckOptions& o) {
  // --json names a file dbh writes: checked before the scan, never a user's
  // file, a link, a FIFO, or a file of the dataset it reads.
  const auto is_data_check_json = [](const std::string& path) {
    return file_has_head_and_tail(path, "{\n  \"schema_version\": 1,\n  \"root\": ", "}\n");
  };
  try {
    if (!o.json_out.empty()) {
      // By name or by identity: a dataset's images/ may be a link to a folder
      // elsewhere, which is the dataset's too.
      const std::string json_folder = fs::absolute(o.json_out).parent_path().string();
      if (path_within(o.json_out, o.dir) || within_by_identity(json_folder, o.dir)) {
        throw UsageError("dbh data check: --json: expected a file outside the dataset " + o.dir + ", got " +
                         o.json_out);
      }
      check_output_file(o.json_out, OutputFileRule{"dbh data check", "--json", is_data_check_json,
                                                   "a data-check report dbh wrote", ""});
    }
  } catch (const UsageError& e) {
    std::cerr << one_line(e.what()) << "\n";
    return 2;
  }
  // Note [No silent minute]: every image is decoded.
  Progress progress("dbh data check: decoding the images of " + o.dir, "images");
  const auto scan = model::scan_dataset(o.dir, parse_policy(o.on_invalid), {}, /*check_images=*/true,
                                        [&](int64_t done, int64_t total) { progress.update(done, total); });
  progress.finish();
  std::map<std::string, int64_t> counts;
  for (const auto& d : scan.defects) ++counts[model::to_string(d.kind)];
  if (!o.quiet) {
    std::cout << "dataset:  " << o.dir << "\n"
              << "format:   " << (scan.format.empty() ? "none found" : scan.format) << "\n"
              << "images:   " << scan.images_usable << " usable of " << scan.images_listed
              << " listed\n"
              << "words:    " << scan.words << " (" << scan.words_ignored << " ignored)\n"
              << "defects:  " << scan.defects.size() << "\n";
    for (const auto& [kind, n] : counts) std::cout << "  " << kind << ": " << n << "\n";
    for (const auto& d : scan.defects) std::cout << one_line(d.message) << "\n";
  }
  nlohmann::ordered_json j;
  j["schema_version"] = 1;
  j["root"] = o.dir;
  j["format"] = scan.format;
  j["readable"] = scan.readable;
  j["images_listed"] = scan.images_listed;
  j["images_usable"] = scan.images_usable;
  j["words"] = scan.words;
  j["words_ignored"] = scan.words_ignored;
  j["defect_counts"] = counts;
  j["defects"] = nlohmann::json::array();
  for (const auto& d : scan.defects) {
    j["defects"].push_back({{"kind", model::to_string(d.kind)},
                            {"file", d.file},
                            {"image", d.image},
                            {"word_id", d.word_id},
                            {"line", d.line},
                            {"message", d.message}});
  }
  const int code = !scan.readable ? 2 : scan.defects.empty() ? 0 : 1;
  j["exit_code"] = code;
  if (!o.json_out.empty()) {
    try {
      write_file_atomically(o.json_out, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } catch (const ReportError& e) {
      std::cerr << "dbh data check: --json " << o.json_out << ": cannot write (" << e.what() << ")\n";
      return 2;
    }
  }
  if (o.quiet) std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return code;
}

int run_data_show(const DataShowOptions& o) {
  if (o.size <= 0 || o.size % 32 != 0) {
    std::cerr << "dbh data show: --size: expected a positive multiple of 32, got " << o.size << "\n";
    return 2;
  }
  model::DatasetOptions dopt;
  dopt.root = o.dir;
  dopt.size = o.size;
  dopt.augment = !o.no_augment;
  dopt.seed = o.seed;
  dopt.on_invalid = model::OnInvalid::kSkip;
  std::unique_ptr<model::Dataset> ds;
  try {
    ds = std::make_unique<model::Dataset>(dopt);
  } catch (const model::DataError& e) {
    std::cerr << "dbh data show: " << o.dir << ": " << e.what() << "\n";
    return 2;
  }
  // --index counts every image the annotations list, as data.subset and
  // `dbh bisect data` do: an image that cannot be used is named, never
  // replaced by the next one.
  const auto listed = model::scan_dataset(o.dir, model::OnInvalid::kSkip, {}, /*check_images=*/false).images;
  if (o.index < 0 || o.index >= static_cast<int64_t>(listed.size())) {
    std::cerr << "dbh data show: --index: expected "
              << (listed.empty() ? std::string("a sample, but the dataset lists none")
                                 : "0.." + std::to_string(listed.size() - 1))
              << ", got " << o.index << "\n";
    return 2;
  }
  const std::string& file = listed[static_cast<size_t>(o.index)].file;
  int64_t usable = -1;
  for (int64_t i = 0; i < ds->size(); ++i) {
    if (ds->images()[static_cast<size_t>(i)].file == file) usable = i;
  }
  if (usable < 0) {
    std::string why = "it cannot be used";
    for (const auto& d : ds->defects()) {
      if (d.image == file) why = d.message;
    }
    std::cerr << "dbh data show: --index " << o.index << ": expected a usable sample, got " << one_line(file) << ": "
              << one_line(why) << " (dbh data check " << o.dir << " lists every defect)\n";
    return 2;
  }
  model::Sample s;
  try {
    s = ds->get(usable, o.epoch);
  } catch (const model::DataError& e) {
    std::cerr << "dbh data show: " << e.what() << "\n";
    return 2;
  }
  // The output folder is claimed as every command's is: a user's folder (the
  // dataset itself, another command's results) is refused, and on an error
  // what this command wrote is removed.
  const fs::path out(o.out);
  check_outside_dataset("dbh data show", "--out", out.string(), o.dir);
  OutputDir claim(out, "data show");
  const cv::Mat bgr8 = model::denormalize_to_bgr8(s.image);
  bool ok = write_png((out / "input.png").string(), bgr8);
  const std::pair<const char*, const cv::Mat*> maps[] = {
      {"gt_shrink", &s.maps.gt_shrink},
      {"gt_shrink_mask", &s.maps.gt_shrink_mask},
      {"gt_thresh", &s.maps.gt_thresh},
      {"gt_thresh_mask", &s.maps.gt_thresh_mask}};
  for (const auto& [name, m] : maps) {
    write_npy(out / (std::string(name) + ".npy"), *m);
    cv::Mat png;
    m->convertTo(png, CV_8U, 255.0);
    ok = write_png((out / (std::string(name) + ".png")).string(), png) && ok;
  }
  // Overlay: the shrunk text kernels (green) and the threshold band (red) on
  // the input the model sees.
  cv::Mat overlay = bgr8.clone();
  for (int y = 0; y < overlay.rows; ++y) {
    for (int x = 0; x < overlay.cols; ++x) {
      auto& px = overlay.at<cv::Vec3b>(y, x);
      if (s.maps.gt_shrink.at<float>(y, x) > 0.5f) {
        px = px * 0.5 + cv::Vec3b(0, 255, 0) * 0.5;
      } else if (s.maps.gt_thresh_mask.at<float>(y, x) > 0.5f) {
        px = px * 0.6 + cv::Vec3b(0, 0, 255) * 0.4;
      }
      if (s.maps.gt_shrink_mask.at<float>(y, x) < 0.5f) px = px * 0.5 + cv::Vec3b(128, 128, 128) * 0.5;
    }
  }
  ok = write_png((out / "overlay.png").string(), overlay) && ok;
  if (!ok) {
    std::cerr << "dbh data show: --out " << o.out << ": cannot write the files\n";
    return 2;
  }
  claim.commit();
  if (model::looks_all_black(bgr8)) {
    std::cerr << "warning: the input image is all black after de-normalisation\n";
  }
  std::cout << "sample " << o.index << " (" << s.id << "), " << (o.no_augment ? "no augmentation" : "augmented, epoch " + std::to_string(o.epoch))
            << ", " << o.size << "x" << o.size << "\n"
            << "wrote " << fs::absolute(out).string()
            << ": input.png, overlay.png, gt_shrink/gt_shrink_mask/gt_thresh/gt_thresh_mask (.npy float32, .png)\n";
  return 0;
}

}  // namespace dbh::harness::cli
