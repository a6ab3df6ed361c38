#pragma once

#include <opencv2/core/mat.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/choices.h"
#include "model/label/polygon.h"

namespace dbh::model {

/// One annotated word: a closed polygon in original-image pixel coordinates,
/// kept in floating point until label generation (spec §10.2).
struct WordAnnotation {
  /// UFO word key ("0001"), or the 1-based line number for ICDAR files.
  std::string id;
  Polygon points;
  std::string transcription;
  /// "Don't care": ICDAR "###", UFO `illegibility: true` or an ignore tag.
  bool ignore = false;
  /// 1-based line in the source file where known (ICDAR), else 0.
  int line = 0;
};

/// The words of one image. width/height 0 means "not known yet" (ICDAR files
/// do not carry the image size; check_image fills it from the decoded image).
struct ImageAnnotation {
  std::string file;
  int width = 0;
  int height = 0;
  std::vector<WordAnnotation> words;
  /// 1-based line of the image's key in a UFO file (the occurrence a JSON
  /// reader keeps), else 0.
  int line = 0;
};

/// What is wrong with an annotation. to_string gives the stable name used in
/// reports; never rename or renumber released kinds.
enum class DefectKind {
  kNonFiniteCoordinate,  ///< NaN or ±Inf vertex coordinate.
  kHugeCoordinate,       ///< |coordinate| > kHugeCoordinate.
  kTooFewPoints,         ///< Fewer than 3 distinct vertices.
  kZeroArea,             ///< |area| < kZeroAreaEps (e.g. collinear points).
  kSelfIntersection,     ///< Two non-adjacent edges properly intersect.
  kRepeatedVertex,       ///< Consecutive identical vertices.
  kOutOfImage,           ///< A vertex outside [0, width] × [0, height].
  kMissingImage,         ///< The image file does not exist.
  kUnreadableImage,      ///< The image file exists but does not decode.
  kImageSizeMismatch,    ///< Decoded size differs from img_w/img_h.
  kBadJsonShape,         ///< Invalid JSON, or a required key missing.
  kBadJsonType,          ///< A JSON value of the wrong type.
  kBadIcdarLine,         ///< An ICDAR line that is not 8 numbers + text.
  kUnreadableFile,       ///< The annotation file cannot be read.
  kInvalidBatch,         ///< A loaded batch failed the validation hook.
  /// The same image annotated twice: a UFO key written twice in "images"
  /// (a JSON reader keeps one), two names of one file, two ICDAR
  /// ground-truth files for one image, or one ICDAR ground-truth file whose
  /// image is ambiguous (img_1.png and img_1.jpg both present).
  kDuplicateImage,
  /// Any other JSON key written twice in one object (a word id, img_w,
  /// points…): a JSON reader silently keeps one of the values.
  kDuplicateKey,
  /// An image name that leaves the dataset folder as written (an absolute
  /// path elsewhere, ".." steps out of it); links are followed.
  kOutsideDataset,
};

/// Whether a defect of `kind` makes the whole dataset unusable under every
/// OnInvalid policy: what to read is ambiguous (duplicates) or lies outside
/// the dataset. scan_dataset marks such a dataset unreadable.
bool refuses_dataset(DefectKind kind);

/// Stable snake_case name of a kind, e.g. "non_finite_coordinate".
std::string to_string(DefectKind kind);

/// One problem found in an annotation file. `message` is complete on its own:
/// where (file[:line], image, word), what was expected, what was found.
struct Defect {
  DefectKind kind;
  std::string file;     ///< Annotation file.
  std::string image;    ///< Image file name, empty if not known.
  std::string word_id;  ///< Word id, empty for image- or file-level defects.
  int line = 0;         ///< 1-based line, 0 if not known.
  std::string message;
};

/// Thrown by higher levels (dataset loading) under OnInvalid::kError; the
/// readers and validate() never throw. what() is the first defect's message
/// plus a count of the others.
class DataError : public std::runtime_error {
 public:
  explicit DataError(std::vector<Defect> defects);
  const std::vector<Defect>& defects() const { return defects_; }

 private:
  std::vector<Defect> defects_;
};

/// Result of reading one annotation file: what could be read, and what was
/// wrong. Malformed words are left out of `images` and reported in `defects`.
struct ReadResult {
  std::vector<ImageAnnotation> images;
  std::vector<Defect> defects;
};

/// Coordinates beyond this magnitude (px) are kHugeCoordinate (2^24: far
/// beyond any image, and still exact in float32).
inline constexpr double kHugeCoordinate = 16777216.0;
/// |area| below this (px²) is kZeroArea.
inline constexpr double kZeroAreaEps = 1e-6;

/// Reads a UFO JSON file (spec §10.2): images → <name> → {img_w, img_h,
/// words → <id> → {points, transcription, illegibility, tags}}. Unknown
/// fields are ignored; images and words come in key order.
/// `illegibility: true` or a tag in `ignore_tags` sets ignore. A missing or
/// mistyped `words`, `img_w` or `img_h` is a defect (the image is kept with
/// what could be read); a word whose points are not an array of [x, y] number
/// pairs is dropped with a defect; a transcription that is neither string nor
/// null, or an illegibility that is not a bool, is a defect (the word is kept
/// and, for illegibility, ignored). Invalid JSON is one kBadJsonShape defect
/// with line and column. A key written twice in one object is
/// kDuplicateImage (in "images") or kDuplicateKey (anywhere else), naming
/// both lines; JSON keeps the last, and so does the result. Never throws.
ReadResult read_ufo_json(const std::string& path,
                         const std::vector<std::string>& ignore_tags = {});

/// Reads an ICDAR 2015 ground-truth file (spec §10.1) for `image_file`: UTF-8
/// with optional BOM, LF or CRLF, one word per line
/// `x1,y1,...,x4,y4,transcription`; everything after the 8th comma is the
/// transcription (commas included), "###" means ignore; a line of exactly 8
/// numbers has an empty transcription. Blank lines are skipped; other lines
/// with fewer than 8 numeric fields are kBadIcdarLine defects. Coordinates
/// may be fractional; "nan"/"inf" are read as such and left to validate().
/// Returns one image (width/height 0) unless the file cannot be read. Never
/// throws.
ReadResult read_icdar_txt(const std::string& path,
                          const std::string& image_file);

/// Checks every word of `image` and applies `policy`; `file` names the
/// annotation file in messages. Checks, in order: non-finite coordinate and
/// fewer than 3 vertices (either ends the word's checks); huge coordinate;
/// out of image; repeated vertex (exact consecutive repeat); then, on the
/// polygon with repeats removed (and, under kClip, clamped), the first of:
/// fewer than 3 distinct vertices, self-intersection (a proper crossing of two
/// non-adjacent edges, O(n²); so a symmetric bow tie is a self-intersection,
/// not zero area), zero area. Out-of-image checks and clamping use the
/// continuous image extent [0, width] × [0, height] and are skipped while the
/// size is unknown (0). Returns every defect found, including those that
/// clamping creates (a word wholly outside the image clamps to a degenerate
/// polygon and is dropped). Never throws.
std::vector<Defect> validate(ImageAnnotation& image, OnInvalid policy,
                             const std::string& file);

/// Checks that `image_path` exists (kMissingImage) and decodes with EXIF
/// orientation ignored (kUnreadableImage, spec §11 item 11), and that the
/// decoded size matches image.width/height (kImageSizeMismatch); a zero
/// width/height is filled in from the decoded image. Decoding is
/// decode_image's: a truncated or corrupt JPEG or PNG is unreadable (e.g.
/// "expected a complete JPEG image at …, got a decode warning: Premature end
/// of JPEG file"), never a partly grey image. When `decoded` is not
/// null it receives the decoded BGR image (empty on failure), so callers need
/// not decode twice. Never throws.
std::vector<Defect> check_image(ImageAnnotation& image,
                                const std::string& image_path,
                                const std::string& file,
                                cv::Mat* decoded = nullptr);

}  // namespace dbh::model
