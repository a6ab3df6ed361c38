#include "model/data/dataset_copy.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/data/scan.h"

namespace dbh::model {
namespace fs = std::filesystem;

namespace {

std::string summarise(const std::vector<std::string>& problems) {
  if (problems.empty()) return "the dataset cannot be copied";
  std::string s = problems.front();
  if (problems.size() > 1) {
    s += " (and " + std::to_string(problems.size() - 1) + " more problem" + (problems.size() > 2 ? "s" : "") + ")";
  }
  return s;
}

std::string describe_type(fs::file_type type) {
  switch (type) {
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    case fs::file_type::not_found: return "nothing";
    default: return "a special file";
  }
}

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

// Files a private copy may hold beyond two names per dataset file.
constexpr size_t kMaxExtraCopies = 1000;

// What copying a dataset folder does: the folders to create and the files to
// copy, each relative to the copy, or why it cannot be done.
struct CopyPlan {
  std::vector<fs::path> folders;                        // parents first
  std::vector<std::pair<fs::path, fs::path>> files;     // resolved source, destination
  std::vector<std::string> problems;
  std::set<fs::path> distinct;                          // canonical files planned
  bool too_many = false;                                // the walk stopped: see plan_folder
  uintmax_t bytes = 0;                                  // what the files take
};

// Plans the copy of folder `real` (a canonical path inside `root_real`),
// shown to the user as `shown`, into `rel` of the copy. `open` holds the
// canonical folders being walked: a link to one of them is a loop.
void plan_folder(const fs::path& root_real, const std::string& root_shown, const fs::path& real,
                 const fs::path& shown, const fs::path& rel, std::vector<fs::path>& open, CopyPlan& plan) {
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(real, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
  if (ec) {
    plan.problems.push_back(shown.string() + ": expected a folder that can be listed, got: " + ec.message());
    return;
  }
  std::sort(entries.begin(), entries.end(),
            [](const fs::directory_entry& a, const fs::directory_entry& b) { return a.path() < b.path(); });
  open.push_back(real);
  for (const auto& entry : entries) {
    if (plan.too_many) break;
    const fs::path name = entry.path().filename();
    const fs::path at = shown / name;
    const fs::file_status own = entry.symlink_status(ec);
    if (ec) {
      plan.problems.push_back(at.string() + ": expected a file or a folder, got an entry that cannot be read: " +
                              ec.message());
      continue;
    }
    fs::path source = entry.path();  // canonical: `real` is, and `name` is no link
    fs::file_status status = own;
    if (fs::is_symlink(own)) {
      const fs::path target = fs::canonical(entry.path(), ec);
      if (ec) {
        std::error_code read_ec;
        const fs::path text = fs::read_symlink(entry.path(), read_ec);
        plan.problems.push_back(at.string() + ": expected a file inside the dataset folder " + root_shown +
                                ", got a link to " + text.string() + " that does not resolve (" + ec.message() +
                                ")");
        continue;
      }
      status = fs::status(target, ec);
      if (!is_inside(target, root_real)) {
        plan.problems.push_back(at.string() + ": expected a " + (fs::is_directory(status) ? "folder" : "file") +
                                " inside the dataset folder " + root_shown + ", got a link to " +
                                target.string());
        continue;
      }
      source = target;
    }
    if (fs::is_directory(status)) {
      if (std::find(open.begin(), open.end(), source) != open.end()) {
        plan.problems.push_back(at.string() + ": expected a link to a folder that does not contain it, got a link to " +
                                source.string() + " (a loop)");
        continue;
      }
      plan.folders.push_back(rel / name);
      plan_folder(root_real, root_shown, source, at, rel / name, open, plan);
    } else if (fs::is_regular_file(status)) {
      plan.files.emplace_back(source, rel / name);
      plan.bytes += fs::file_size(source, ec);
      plan.distinct.insert(source);
      // Links may reach one folder by many paths (two links per level
      // double it at each level): a copy made by following them would hold
      // a small dataset millions of times. A file copied under a second
      // name (an alias folder) is fine; beyond that the walk stops.
      if (plan.files.size() > 2 * plan.distinct.size() + kMaxExtraCopies) {
        plan.problems.push_back(at.string() + ": expected links that reach each file of the dataset once or twice, "
                                "got links reaching its " + std::to_string(plan.distinct.size()) +
                                " file(s) more than " + std::to_string(plan.files.size()) +
                                " times (a private copy would hold them all)");
        plan.too_many = true;
        break;
      }
    } else {
      plan.problems.push_back(at.string() + ": expected a file or a folder, got " + describe_type(status.type()));
    }
  }
  open.pop_back();
}

CopyPlan plan_copy(const std::string& root) {
  CopyPlan plan;
  try {
    std::error_code ec;
    const fs::path real = fs::canonical(root, ec);
    if (ec || !fs::is_directory(real)) {
      plan.problems.push_back(root + ": expected a dataset folder, got " +
                              (ec ? "a path that does not resolve (" + ec.message() + ")" : std::string("a file")));
      return plan;
    }
    std::vector<fs::path> open;
    plan_folder(real, root, real, fs::path(root), fs::path(), open, plan);
  } catch (const std::exception& e) {
    plan.problems.push_back(root + ": expected a dataset folder that can be walked, got an error: " + e.what());
  }
  return plan;
}

// A UFO image name of the copy: `from` in the dataset, `to` in the copy, and
// the file to copy to images/`to` (empty: none, the image is missing).
struct Rename {
  std::string from;
  std::string to;
  fs::path source;
};

bool has_parent_step(const fs::path& name) {
  return std::any_of(name.begin(), name.end(), [](const fs::path& part) { return part == ".."; });
}

// Whether image name `name` reads, in a copy of the dataset at `src_real`
// (canonical), the copy of the file it reads in the dataset: a relative name
// below images/, or one whose ".." steps stay in the dataset and pass through
// no link that would take them elsewhere.
bool same_file_in_copy(const std::string& name, const fs::path& src_real) {
  const fs::path key(name);
  if (!key.is_relative()) return false;
  if (!has_parent_step(key)) return true;
  const fs::path lexical = (src_real / "images" / key).lexically_normal();
  if (!is_inside(lexical, src_real)) return false;
  std::error_code resolved_ec, mirrored_ec;
  const fs::path resolved = fs::canonical(src_real / "images" / key, resolved_ec);
  const fs::path mirrored = fs::canonical(lexical, mirrored_ec);
  if (resolved_ec || mirrored_ec) return resolved_ec && mirrored_ec;  // missing in both
  return resolved == mirrored;
}

// The image names of the dataset's annotations (`images`) that must change
// in a copy at `dst` so that each reads a copy of the file it reads in the
// dataset at `src_real` (canonical), inside `dst`. Problems go to `problems`.
std::vector<Rename> plan_renames(const nlohmann::json& images, const fs::path& src_real, const fs::path& dst,
                                 const std::string& annotations, std::vector<std::string>& problems) {
  std::vector<Rename> renames;
  std::vector<std::string> old_names, new_names;
  for (const auto& item : images.items()) {
    const std::string& name = item.key();
    old_names.push_back(name);
    new_names.push_back(name);
    if (same_file_in_copy(name, src_real)) continue;
    // A name that leaves the dataset is refused (scan_dataset refuses it
    // too): a copy must not take in a file the dataset may not read.
    if (const ImageRef ref = resolve_image(src_real.string(), name); !ref.problem.empty()) {
      problems.push_back(annotations + ": image " + in_quotes(name) + ": " + ref.problem);
      continue;
    }
    const fs::path key(name);
    const fs::path original = src_real / "images" / key;  // `key` itself when absolute
    std::error_code ec;
    const fs::path target = fs::canonical(original, ec);
    Rename r;
    r.from = name;
    // An absolute name keeps its text behind the prefix, so absolute names
    // keep their order; any other is named by where it leads.
    const fs::path where = key.is_absolute() && !has_parent_step(key) ? key
                           : ec                                      ? fs::absolute(original).lexically_normal()
                                                                     : target;
    r.to = ".~" + where.generic_string();
    if (!ec && fs::is_regular_file(target)) r.source = target;
    if (!is_inside(dst / "images" / r.to, dst)) {
      problems.push_back(annotations + ": image " + in_quotes(name) +
                         ": expected a name that resolves inside the copy " + dst.string() + ", got " +
                         in_quotes(r.to));
      continue;
    }
    new_names.back() = r.to;
    renames.push_back(std::move(r));
  }
  if (renames.empty()) return renames;
  // Samples are indexed in name order: the new names must keep it.
  std::set<std::string> seen;
  for (size_t i = 0; i < new_names.size(); ++i) {
    if (!seen.insert(new_names[i]).second) {
      problems.push_back(annotations + ": image " + in_quotes(old_names[i]) +
                         ": expected a name in the copy that no other image has, got " +
                         in_quotes(new_names[i]));
    } else if (i > 0 && !(new_names[i - 1] < new_names[i])) {
      problems.push_back(annotations + ": image " + in_quotes(old_names[i]) +
                         ": expected a name in the copy that keeps the dataset's sample order, got " +
                         in_quotes(new_names[i]) + ", which sorts before " + in_quotes(new_names[i - 1]) +
                         " (image " + in_quotes(old_names[i - 1]) + ")");
    }
  }
  return renames;
}

}  // namespace

DatasetCopyError::DatasetCopyError(std::vector<std::string> problems)
    : std::runtime_error(summarise(problems)), problems_(std::move(problems)) {}

bool is_inside(const fs::path& path, const fs::path& root) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec).lexically_normal();
  if (ec) return false;
  const fs::path r = fs::absolute(root, ec).lexically_normal();
  if (ec) return false;
  auto pi = p.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri) {
    if (ri->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *ri) return false;
    ++pi;
  }
  return true;
}

std::vector<std::string> dataset_copy_problems(const std::string& root) {
  std::vector<std::string> problems = plan_copy(root).problems;
  // Image names and annotation files that leave the dataset: reading the
  // dataset refuses them, and a copy must not take them in.
  for (const Defect& d : scan_dataset(root, OnInvalid::kError, {}, /*check_images=*/false).defects) {
    if (d.kind == DefectKind::kOutsideDataset) problems.push_back(d.message);
  }
  return problems;
}

void copy_dataset(const std::string& src, const std::string& dst) {
  std::error_code ec;
  const fs::path src_real = fs::canonical(src, ec);
  if (ec || !fs::is_directory(src_real)) {
    throw DatasetCopyError({src + ": expected a dataset folder, got " +
                            (ec ? "a path that does not resolve (" + ec.message() + ")" : std::string("a file"))});
  }
  // The copy's own name is not resolved: a link there is replaced, never
  // followed.
  fs::path copy = fs::absolute(dst, ec).lexically_normal();
  if (!copy.has_filename()) copy = copy.parent_path();
  const fs::path copy_parent = fs::weakly_canonical(copy.parent_path(), ec);
  if (ec || copy.filename().empty()) {
    throw DatasetCopyError({dst + ": expected a folder for the copy, got a path that does not resolve" +
                            (ec ? " (" + ec.message() + ")" : std::string())});
  }
  copy = copy_parent / copy.filename();
  if (is_inside(copy, src_real)) {
    throw DatasetCopyError({dst + ": expected a copy folder outside the dataset folder " + src + ", got one inside it"});
  }
  if (is_inside(src_real, copy)) {
    throw DatasetCopyError({dst + ": expected a copy folder that does not contain the dataset folder " + src +
                            ", got one that does"});
  }
  CopyPlan plan = plan_copy(src);
  // UFO image names that leave the dataset, planned before anything is
  // written.
  std::vector<Rename> renames;
  nlohmann::json annotations;
  const fs::path ufo = src_real / "annotations.json";
  if (fs::is_regular_file(ufo, ec) && plan.problems.empty()) {
    std::ifstream in(ufo, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    annotations = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    // Unreadable annotations are copied as they are; reading the copy
    // reports them.
    if (annotations.is_object() && annotations.contains("images") && annotations["images"].is_object()) {
      renames = plan_renames(annotations["images"], src_real, copy, (fs::path(src) / "annotations.json").string(),
                             plan.problems);
    }
  }
  std::set<fs::path> planned;
  for (const auto& [from, to] : plan.files) planned.insert(to);
  for (const auto& r : renames) {
    if (!r.source.empty() && planned.count(fs::path("images") / r.to) != 0) {
      plan.problems.push_back(src + ": expected no file at images/" + r.to + " (where the copy puts " +
                              r.source.string() + "), got one");
    }
  }
  if (!plan.problems.empty()) throw DatasetCopyError(plan.problems);
  // Room for the copy, with a margin for the run's own files: a copy that
  // fills the disk half way would fail with whatever the file system says.
  constexpr uintmax_t kMargin = uintmax_t{64} << 20;
  if (const fs::space_info room = fs::space(copy_parent, ec); !ec && plan.bytes + kMargin > room.available) {
    throw DatasetCopyError({dst + ": expected room for a private copy of " + src + " (" +
                            std::to_string(plan.bytes >> 20) + " MiB and a 64 MiB margin), got " +
                            std::to_string(room.available >> 20) + " MiB free: No space left on device"});
  }

  try {
    fs::remove_all(copy);
    fs::create_directories(copy);
    for (const auto& folder : plan.folders) fs::create_directory(copy / folder);
    for (const auto& [from, to] : plan.files) fs::copy_file(from, copy / to);
    if (!renames.empty()) {
      std::map<std::string, std::string> new_name;
      for (const auto& r : renames) {
        new_name[r.from] = r.to;
        if (r.source.empty()) continue;
        const fs::path to = copy / "images" / r.to;
        fs::create_directories(to.parent_path());
        fs::copy_file(r.source, to);
      }
      nlohmann::json renamed = nlohmann::json::object();
      for (auto& item : annotations["images"].items()) {
        const auto it = new_name.find(item.key());
        renamed[it != new_name.end() ? it->second : item.key()] = std::move(item.value());
      }
      annotations["images"] = std::move(renamed);
      const fs::path written = copy / "annotations.json";
      // A new file in the copy's place (the copy is a plain file, never a
      // link: dataset_copy_problems), not the copied one rewritten.
      fs::remove(written);
      std::ofstream out(written, std::ios::binary | std::ios::trunc);
      out << annotations.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
      out.close();
      if (!out) throw std::runtime_error(written.string() + ": cannot write the renamed annotations");
    }
  } catch (const std::exception& e) {
    fs::remove_all(copy, ec);
    throw DatasetCopyError({dst + ": expected a writable copy of " + src + ", got an error: " + e.what()});
  }
}

}  // namespace dbh::model
