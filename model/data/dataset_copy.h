#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace dbh::model {

/// Thrown when a dataset folder cannot be copied without reading or writing
/// outside the places it may: what() is the first problem (with a count of
/// the others), problems() all of them. Each problem names the path, what was
/// expected and what was found.
class DatasetCopyError : public std::runtime_error {
 public:
  explicit DatasetCopyError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

/// Whether `path` lies in `root` or is `root`, comparing the lexically
/// normalised absolute paths component by component (no file system access,
/// so links are not followed: pass canonical paths where links matter).
bool is_inside(const std::filesystem::path& path, const std::filesystem::path& root);

/// What stops `root` from being copied without leaving it, one message per
/// problem, in path order; empty when it can be copied. Every entry under
/// `root` must be a file or a folder, or a link that resolves to a file or a
/// folder inside `root` (its target is copied in its place); a link that
/// resolves outside `root` is named with its target, e.g.
/// "<root>/images/x.png: expected a file inside the dataset folder <root>,
/// got a link to /etc/passwd". Also reported: dangling links, links to a
/// folder that contains them (a loop), FIFOs, sockets and devices, folders
/// that cannot be listed, and (after those) every image name and annotation
/// file that resolves outside `root` (scan_dataset's kOutsideDataset, with
/// its message). Reads directory entries and the annotations, never an
/// image; never throws.
std::vector<std::string> dataset_copy_problems(const std::string& root);

/// Copies the dataset folder `src` to `dst` so that the copy is
/// self-contained and nothing outside `dst` is written:
///  - `dst` must not overlap `src` (neither inside the other); whatever is at
///    `dst` is replaced;
///  - every problem of dataset_copy_problems(src) stops the copy before
///    anything is written;
///  - links inside `src` become plain files and folders (the copy holds no
///    links);
///  - a UFO image name that resolves outside `src` (resolve_image) stops
///    the copy, as it stops reading the dataset;
///  - a UFO annotations.json that names an image inside the dataset by an
///    absolute path (or by ".." steps, or through a link, that a copy would
///    not follow the same way) is rewritten in the copy: that image is copied
///    to images/.~<its absolute path> and named ".~<its absolute path>", so
///    the copy reads a copy of every file the dataset reads, and a fault that
///    breaks it breaks the copy. Absolute names keep their order behind the
///    common prefix, so sample indices are the same in the copy; when the
///    new names would sort differently (or collide), the copy is refused.
/// Throws DatasetCopyError (and removes the partial copy) when the copy
/// cannot be made as described.
void copy_dataset(const std::string& src, const std::string& dst);

}  // namespace dbh::model
