#include "model/data/scan.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <stdexcept>
#include <system_error>

#include "model/data/dataset_copy.h"
#include "model/data/image_decode.h"

namespace dbh::model {
namespace fs = std::filesystem;

namespace {

// `root` as links and ".." resolve it (the folder every name must stay in).
fs::path resolved_root(const std::string& root, std::error_code& ec) {
  const fs::path absolute = fs::absolute(root, ec);
  if (ec) return {};
  return fs::weakly_canonical(absolute, ec);
}

std::string in_quotes(const std::string& s) {
  constexpr size_t kMax = 80;
  return "\"" + (s.size() > kMax ? s.substr(0, kMax) + "..." : s) + "\"";
}

// What `shown` (a path of the dataset at `root`, canonical `root_real`)
// resolves to, or why it is not inside the dataset folder. `name` is the
// annotation's spelling (an image name), or empty for a file of the dataset.
ImageRef resolve_in(const std::string& root, const fs::path& root_real, const std::string& shown,
                    const std::string& name) {
  ImageRef ref;
  ref.path = shown;
  const std::string expected = "expected a file inside the dataset folder " + root + ", got ";
  if (const size_t nul = name.find('\0'); nul != std::string::npos) {
    ref.problem = expected + "a name with a NUL byte at offset " + std::to_string(nul) +
                  " (the file system would read a shorter name)";
    return ref;
  }
  std::error_code ec;
  const fs::path absolute = fs::absolute(shown, ec);
  const fs::path target = ec ? fs::path() : fs::weakly_canonical(absolute, ec);
  if (ec) {
    ref.problem = expected + "a path that does not resolve (" + ec.message() + ")";
    return ref;
  }
  ref.resolved = target.string();
  // The name must stay inside the folder as written; links in the dataset
  // are the user's own (an images/ folder on another disk is common) and
  // are followed wherever they lead.
  std::error_code root_ec;
  const fs::path root_abs = fs::absolute(root, root_ec).lexically_normal();
  if (is_inside(target, root_real) || (!root_ec && is_inside(absolute.lexically_normal(), root_abs))) return ref;
  const fs::path named(name);
  if (!name.empty() && named.is_absolute()) {
    ref.problem = expected + "an absolute path that leads out of it, to " + ref.resolved;
  } else {
    ref.problem = expected + "a path whose \"..\" steps lead out of it, to " + ref.resolved;
  }
  return ref;
}

// Adds a defect of image `image` read from annotation file `file` (at
// `line`, 0 if not known), worded as the readers word theirs:
// "file[:line]: image "x": what".
void add_image_defect(std::vector<Defect>& out, DefectKind kind, const std::string& file, const std::string& image,
                      int line, const std::string& what) {
  constexpr size_t kMaxQuoted = 60;
  const std::string name = image.size() > kMaxQuoted ? image.substr(0, kMaxQuoted) + "..." : image;
  const std::string where = file + (line > 0 ? ":" + std::to_string(line) : std::string());
  out.push_back(Defect{kind, file, image, "", line, where + ": image \"" + name + "\": " + what});
}

}  // namespace

ImageRef resolve_image(const std::string& root, const std::string& file) {
  const std::string shown = (fs::path(root) / "images" / file).string();
  std::error_code ec;
  const fs::path root_real = resolved_root(root, ec);
  if (ec) {
    ImageRef ref;
    ref.path = shown;
    ref.problem = "expected a dataset folder that resolves, got " + root + " (" + ec.message() + ")";
    return ref;
  }
  return resolve_in(root, root_real, shown, file);
}

std::string image_path(const std::string& root, const std::string& file) {
  ImageRef ref = resolve_image(root, file);
  if (!ref.problem.empty()) {
    throw DataError({Defect{DefectKind::kOutsideDataset, root, file, "", 0,
                            root + ": image " + in_quotes(file) + ": " + ref.problem}});
  }
  return std::move(ref.path);
}

namespace {

// The ICDAR 2015 annotations of `icdar` (gt_*.txt, one per image, in name
// order) appended to `read`, each image's annotation file to
// `annotation_file`; a file outside the dataset is skipped (`inside` says so),
// and an image named twice (img_1.png and img_1.jpg) is a defect in
// `outside`.
void read_icdar_folder(const fs::path& root, const fs::path& icdar, const std::function<bool(const fs::path&)>& inside,
                       std::vector<Defect>& outside, ReadResult& read, std::vector<std::string>& annotation_file) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (inside(icdar)) {
    for (const auto& e : fs::directory_iterator(icdar, ec)) {
      if (e.path().extension() == ".txt") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (!inside(f)) continue;
    std::string stem = f.stem().string();
    if (stem.rfind("gt_", 0) == 0) stem = stem.substr(3);
    std::vector<std::string> candidates;
    for (const char* ext : {".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".bmp", ".tif", ".tiff"}) {
      if (fs::exists(root / "images" / (stem + ext), ec)) candidates.push_back(stem + ext);
    }
    const std::string image_file = candidates.empty() ? stem + ".png" : candidates.front();
    if (candidates.size() > 1) {
      // img_1.png and img_1.jpg: which one gt_img_1.txt annotates is
      // unknown, and picking one would train on a guess.
      std::string names;
      for (const auto& c : candidates) names += (names.empty() ? "" : " and ") + c;
      outside.push_back(Defect{DefectKind::kDuplicateImage, f.string(), image_file, "", 0,
                               f.string() + ": expected one image named " + stem + ".* in " +
                                   (root / "images").string() + ", got " + names +
                                   " (which one it annotates is unknown)"});
    }
    auto r = read_icdar_txt(f.string(), image_file);
    annotation_file.insert(annotation_file.end(), r.images.size(), f.string());
    read.images.insert(read.images.end(), r.images.begin(), r.images.end());
    read.defects.insert(read.defects.end(), r.defects.begin(), r.defects.end());
  }
}

// Each image file is annotated once: the first name (and file) that
// resolved to it, by file identity (device and inode: a hard link is another
// name of the same file too), by resolved path when it is missing.
struct FirstName {
  std::string name;
  std::string annotation_file;
  int line = 0;
};

// Records `image` (named in `ann_file`, resolved as `ref`) in `annotated`; a
// second name of one file is a defect.
void note_second_name(std::map<std::string, FirstName>& annotated, const ImageAnnotation& image,
                      const std::string& ann_file, const ImageRef& ref, std::vector<Defect>& defects) {
  struct stat st {};
  const std::string identity = ::stat(ref.resolved.c_str(), &st) == 0
                                   ? "file " + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)
                                   : "path " + ref.resolved;
  const auto [first, inserted] = annotated.emplace(identity, FirstName{image.file, ann_file, image.line});
  if (inserted) return;
  const FirstName& f = first->second;
  if (f.annotation_file != ann_file) {
    add_image_defect(defects, DefectKind::kDuplicateImage, ann_file, image.file, image.line,
                     "expected one ground-truth file per image, got two for " + ref.resolved + ": " +
                         f.annotation_file + " and " + ann_file);
  } else {
    add_image_defect(defects, DefectKind::kDuplicateImage, ann_file, image.file, image.line,
                     "expected each image file annotated once, got this name and image " + in_quotes(f.name) +
                         (f.line > 0 ? " (line " + std::to_string(f.line) + ")" : std::string()) + " both for " +
                         ref.resolved);
  }
}

}  // namespace

ScanResult scan_dataset(const std::string& root_dir, OnInvalid policy,
                        const std::vector<std::string>& ignore_tags, bool check_images,
                        const std::function<void(int64_t, int64_t)>& on_progress) {
  ScanResult out;
  out.root = root_dir;
  const fs::path root(root_dir);
  const fs::path ufo = root / "annotations.json";
  const fs::path icdar = root / "icdar";
  std::error_code ec;
  const fs::path root_real = resolved_root(root_dir, ec);
  if (ec) {
    out.defects.push_back(Defect{DefectKind::kUnreadableFile, root_dir, "", "", 0,
                                 root_dir + ": expected a dataset folder that resolves, got an error (" +
                                     ec.message() + ")"});
    return out;
  }
  // images/ holds every image: something else there (a file, a FIFO) makes
  // each one "missing", which is one problem of the folder, not of its images.
  if (const fs::path images = root / "images"; fs::exists(fs::symlink_status(images, ec)) || fs::exists(images, ec)) {
    if (!fs::is_directory(images, ec)) {
      const std::string what = describe_non_file(images.string());
      out.defects.push_back(Defect{DefectKind::kUnreadableFile, images.string(), "", "", 0,
                                   images.string() + ": expected the dataset's folder of images, got " +
                                       (what.empty() ? std::string("a file") : what)});
      return out;
    }
  }
  // Annotation files are checked as image names are (resolve_in): their
  // paths are built inside the dataset, so only a root that does not
  // resolve stops them.
  std::vector<Defect> outside;
  const auto inside = [&](const fs::path& file) {
    const ImageRef ref = resolve_in(root_dir, root_real, file.string(), "");
    if (ref.problem.empty()) return true;
    outside.push_back(Defect{DefectKind::kOutsideDataset, file.string(), "", "", 0,
                             file.string() + ": " + ref.problem});
    return false;
  };
  ReadResult read;
  // Per image, the file its annotations came from (ICDAR: one file per image).
  std::vector<std::string> annotation_file;
  if (fs::exists(ufo, ec)) {
    out.format = "UFO JSON";
    out.annotation_path = ufo.string();
    if (inside(ufo)) read = read_ufo_json(ufo.string(), ignore_tags);
    annotation_file.assign(read.images.size(), ufo.string());
  } else if (fs::is_directory(icdar, ec)) {
    out.format = "ICDAR 2015 txt";
    out.annotation_path = icdar.string();
    read_icdar_folder(root, icdar, inside, outside, read, annotation_file);
  } else {
    out.defects.push_back(Defect{DefectKind::kUnreadableFile, root_dir, "", "", 0,
                                 root_dir + ": expected annotations.json (UFO) or an icdar/ "
                                            "folder of gt_*.txt files, found neither"});
    return out;
  }
  out.defects = std::move(outside);
  out.defects.insert(out.defects.end(), read.defects.begin(), read.defects.end());
  // A file-level failure (not JSON, no "images" object, unreadable) leaves
  // nothing to train on.
  out.readable = !read.images.empty() ||
                 std::none_of(out.defects.begin(), out.defects.end(), [](const Defect& d) {
                   return d.image.empty() && d.word_id.empty();
                 });
  out.images_listed = static_cast<int64_t>(read.images.size());
  if (out.readable && read.images.empty()) {
    out.readable = false;
    out.defects.push_back(Defect{DefectKind::kUnreadableFile, out.annotation_path, "", "", 0,
                                 out.annotation_path + ": expected at least one annotated image, found none"});
  }
  std::map<std::string, FirstName> annotated;  // Note: each image file is annotated once
  for (size_t k = 0; k < read.images.size(); ++k) {
    if (on_progress) on_progress(static_cast<int64_t>(k), static_cast<int64_t>(read.images.size()));
    ImageAnnotation& image = read.images[k];
    const std::string& ann_file = annotation_file[k];
    const ImageRef ref = resolve_in(root_dir, root_real, (root / "images" / image.file).string(), image.file);
    if (!ref.problem.empty()) {
      add_image_defect(out.defects, DefectKind::kOutsideDataset, ann_file, image.file, image.line, ref.problem);
      continue;  // never checked, decoded or offered to a reader
    }
    note_second_name(annotated, image, ann_file, ref, out.defects);
    std::vector<Defect> found;
    if (check_images) {
      found = check_image(image, ref.path, ann_file);
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
  // Ambiguous or outside data is refused under every policy, and said first.
  if (std::any_of(out.defects.begin(), out.defects.end(), [](const Defect& d) { return refuses_dataset(d.kind); })) {
    out.readable = false;
    std::stable_partition(out.defects.begin(), out.defects.end(),
                          [](const Defect& d) { return refuses_dataset(d.kind); });
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
