#include "model/data/scan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <stdexcept>

namespace dbh::model {
namespace fs = std::filesystem;

std::string image_path(const std::string& root, const std::string& file) {
  return (fs::path(root) / "images" / file).string();
}

ScanResult scan_dataset(const std::string& root_dir, OnInvalid policy,
                        const std::vector<std::string>& ignore_tags, bool check_images) {
  ScanResult out;
  out.root = root_dir;
  const fs::path root(root_dir);
  const fs::path ufo = root / "annotations.json";
  const fs::path icdar = root / "icdar";
  std::error_code ec;
  ReadResult read;
  // Per image, the file its annotations came from (ICDAR: one file per image).
  std::map<std::string, std::string> annotation_file_of;
  if (fs::exists(ufo, ec)) {
    out.format = "UFO JSON";
    out.annotation_path = ufo.string();
    read = read_ufo_json(ufo.string(), ignore_tags);
  } else if (fs::is_directory(icdar, ec)) {
    out.format = "ICDAR 2015 txt";
    out.annotation_path = icdar.string();
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(icdar, ec)) {
      if (e.path().extension() == ".txt") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string stem = f.stem().string();
      if (stem.rfind("gt_", 0) == 0) stem = stem.substr(3);
      std::string image_file = stem + ".png";
      for (const char* ext : {".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".bmp", ".tif", ".tiff"}) {
        if (fs::exists(root / "images" / (stem + ext), ec)) {
          image_file = stem + ext;
          break;
        }
      }
      auto r = read_icdar_txt(f.string(), image_file);
      for (const auto& im : r.images) annotation_file_of[im.file] = f.string();
      read.images.insert(read.images.end(), r.images.begin(), r.images.end());
      read.defects.insert(read.defects.end(), r.defects.begin(), r.defects.end());
    }
  } else {
    out.defects.push_back(Defect{DefectKind::kUnreadableFile, root_dir, "", "", 0,
                                 root_dir + ": expected annotations.json (UFO) or an icdar/ "
                                            "folder of gt_*.txt files, found neither"});
    return out;
  }
  out.defects = read.defects;
  // A file-level failure (not JSON, no "images" object, unreadable) leaves
  // nothing to train on.
  out.readable = !read.images.empty() ||
                 std::none_of(read.defects.begin(), read.defects.end(), [](const Defect& d) {
                   return d.image.empty() && d.word_id.empty();
                 });
  out.images_listed = static_cast<int64_t>(read.images.size());
  if (out.readable && read.images.empty()) {
    out.readable = false;
    out.defects.push_back(Defect{DefectKind::kUnreadableFile, out.annotation_path, "", "", 0,
                                 out.annotation_path + ": expected at least one annotated image, found none"});
  }
  for (auto& image : read.images) {
    const auto source = annotation_file_of.find(image.file);
    const std::string& ann_file =
        source != annotation_file_of.end() ? source->second : out.annotation_path;
    std::vector<Defect> found;
    if (check_images) {
      found = check_image(image, image_path(root_dir, image.file), ann_file);
    }
    const bool unusable = std::any_of(found.begin(), found.end(), [](const Defect& d) {
      return d.kind == DefectKind::kMissingImage || d.kind == DefectKind::kUnreadableImage;
    });
    auto word_defects = validate(image, policy, ann_file);
    found.insert(found.end(), word_defects.begin(), word_defects.end());
    out.defects.insert(out.defects.end(), found.begin(), found.end());
    if (!unusable) ++out.images_usable;
    if (unusable && policy != OnInvalid::kError) continue;
    out.words += static_cast<int64_t>(image.words.size());
    for (const auto& w : image.words) out.words_ignored += w.ignore ? 1 : 0;
    out.images.push_back(std::move(image));
  }
  return out;
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<int64_t> batch_indices(int64_t n, int64_t batch_size, uint64_t seed, int64_t micro) {
  if (n <= 0 || batch_size <= 0) {
    throw std::invalid_argument("batch_indices: expected a non-empty dataset and batch, got " +
                                std::to_string(n) + " samples and batch " + std::to_string(batch_size));
  }
  std::vector<int64_t> out;
  int64_t cached_epoch = -1;
  std::vector<int64_t> perm;
  for (int64_t k = 0; k < batch_size; ++k) {
    const int64_t pos = micro * batch_size + k;
    const int64_t epoch = pos / n;
    if (epoch != cached_epoch) {
      perm.resize(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      uint64_t state = seed ^ (0x5DEECE66DULL * static_cast<uint64_t>(epoch + 1));
      for (int64_t i = n - 1; i > 0; --i) {
        const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
        std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
      }
      cached_epoch = epoch;
    }
    out.push_back(perm[static_cast<size_t>(pos % n)]);
  }
  return out;
}

}  // namespace dbh::model
