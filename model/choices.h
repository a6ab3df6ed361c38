#pragma once
// The model's fixed choices, declared without LibTorch so that a scenario
// holds them as these enums from the moment it is read: the decoder, the
// optimizer, the precision, the test-time resize side and what an invalid
// annotation does. Each has the names a configuration writes, in the enum's
// order (`*_names()`), `to_string` and a parser that throws
// std::invalid_argument for any other name.

#include <string>
#include <vector>

namespace dbh::model {

/// The decoder between the encoder and the head (spec §2.2): the DB paper's
/// FPN, or PANet-style path aggregation.
enum class DecoderKind { kFpn, kPan };
/// "fpn", "pan".
const std::vector<std::string>& decoder_kind_names();
DecoderKind decoder_kind_from_string(const std::string& name);
std::string to_string(DecoderKind kind);

enum class OptimizerKind { kSgd, kAdam };
/// "sgd", "adam".
const std::vector<std::string>& optimizer_kind_names();
OptimizerKind optimizer_kind_from_string(const std::string& name);
std::string to_string(OptimizerKind kind);

/// fp32; fp16 = CUDA autocast to float16 with dynamic loss scaling;
/// bf16 = CUDA autocast to bfloat16 (no scaling needed).
enum class Precision { kFp32, kFp16, kBf16 };
/// "fp32", "fp16", "bf16".
const std::vector<std::string>& precision_names();
Precision precision_from_string(const std::string& name);
std::string to_string(Precision precision);

/// Which side of an image the test-time size applies to (spec §6.3).
enum class ResizeSide {
  /// The short side becomes `size`: [DB]'s `image_short_side` (README "short
  /// side 736"), and MMOCR's (1333, 736) for images below 1.81:1.
  kShort,
  /// The long side becomes `size`: PaddleOCR's `limit_type max`, and the
  /// training letterbox.
  kLong,
};
/// "short", "long".
const std::vector<std::string>& resize_side_names();
ResizeSide resize_side_from_string(const std::string& name);
std::string to_string(ResizeSide side);

/// What validate() (model/data/annotation.h) does with an invalid word.
enum class OnInvalid {
  /// Change nothing; the caller throws DataError if any defect came back.
  kError,
  /// Drop every word with a defect.
  kSkip,
  /// Repair what clamping repairs (out-of-image and huge coordinates,
  /// repeated vertices) and drop words that are still invalid afterwards.
  kClip,
};
/// "error", "skip", "clip".
const std::vector<std::string>& on_invalid_names();
OnInvalid on_invalid_from_string(const std::string& name);
std::string to_string(OnInvalid policy);

}  // namespace dbh::model
