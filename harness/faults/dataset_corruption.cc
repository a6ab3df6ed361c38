#include "harness/faults/dataset_corruption.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/data/dataset_copy.h"
#include "model/data/scan.h"

namespace dbh::harness::faults {
namespace fs = std::filesystem;

namespace {

// `path` as a file corrupt_sample may change: a plain file (no link) whose
// real location is inside `copy_root` (canonical), made writable. Anything
// else is refused before a byte is written.
fs::path writable_copy_file(const fs::path& path, const fs::path& copy_root) {
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  const fs::path real = fs::canonical(path, ec);
  std::string got;
  if (ec) {
    got = "none";
  } else if (!fs::is_regular_file(own)) {
    got = fs::is_symlink(own) ? "a link to " + real.string() : std::string("something that is not a plain file");
  } else if (!model::is_inside(real, copy_root)) {
    got = "a file outside it, at " + real.string();
  }
  if (!got.empty()) {
    throw std::runtime_error("corrupt_sample: " + path.string() + ": expected a file inside the copy " +
                             copy_root.string() + ", got " + got);
  }
  fs::permissions(real, fs::perms::owner_write, fs::perm_options::add, ec);
  return real;
}

}  // namespace

std::string corrupt_dataset_copy(const std::string& src, const std::string& dst, int64_t index,
                                 scenario::SampleCorruption kind) {
  using scenario::SampleCorruption;
  model::copy_dataset(src, dst);
  const fs::path root = fs::canonical(dst);
  // Indices as the scenario and data.subset count them: every listed image.
  const auto scan = model::scan_dataset(dst, model::OnInvalid::kError, {}, /*check_images=*/false);
  if (index < 0 || index >= static_cast<int64_t>(scan.images.size())) {
    throw std::runtime_error("corrupt_sample: sample " + std::to_string(index) +
                             " does not exist (the dataset has " +
                             std::to_string(scan.images.size()) + " samples)");
  }
  const std::string file = scan.images[static_cast<size_t>(index)].file;
  if (kind == SampleCorruption::kTruncateImage || kind == SampleCorruption::kZeroByteImage) {
    const fs::path image = writable_copy_file(model::image_path(dst, file), root);
    const auto size = fs::file_size(image);
    fs::resize_file(image, kind == SampleCorruption::kZeroByteImage ? 0 : size / 3);
    return file;
  }
  // Annotation corruptions edit the UFO JSON of that image.
  const fs::path ann = fs::path(dst) / "annotations.json";
  if (!fs::exists(ann)) throw std::runtime_error("corrupt_sample: " + scenario::choice_name(kind) + " needs UFO annotations");
  const fs::path writable = writable_copy_file(ann, root);
  nlohmann::json j;
  {
    std::ifstream in(writable);
    j = nlohmann::json::parse(in);
  }
  auto& words = j["images"][file]["words"];
  if (words.empty()) throw std::runtime_error("corrupt_sample: " + file + " has no words to corrupt");
  auto& points = words.begin().value()["points"];
  if (kind == SampleCorruption::kNanCoordinate) {
    points[0][0] = "NaN";
  } else {  // duplicate_vertices: every vertex the same point
    for (auto& p : points) p = points[0];
  }
  std::ofstream out(writable);
  out << j.dump(1);
  out.close();
  if (!out) throw std::runtime_error("corrupt_sample: " + writable.string() + ": cannot write");
  return file;
}

}  // namespace dbh::harness::faults
