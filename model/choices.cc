#include "model/choices.h"

#include <cstddef>
#include <stdexcept>

namespace dbh::model {
namespace {

// The enum value named `name` among `names` (in the enum's order); throws
// std::invalid_argument "expected WHAT "a", "b" or "c", got "x"".
template <typename E>
E parse(const std::vector<std::string>& names, const char* what, const std::string& name) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) expected += i + 1 == names.size() ? " or " : ", ";
    expected += "\"" + names[i] + "\"";
  }
  throw std::invalid_argument(std::string("expected ") + what + " " + expected + ", got \"" + name + "\"");
}

template <typename E>
std::string name_of(const std::vector<std::string>& names, E value) {
  return names.at(static_cast<size_t>(value));
}

}  // namespace

const std::vector<std::string>& decoder_kind_names() {
  static const std::vector<std::string> names = {"fpn", "pan"};
  return names;
}
DecoderKind decoder_kind_from_string(const std::string& name) {
  return parse<DecoderKind>(decoder_kind_names(), "decoder", name);
}
std::string to_string(DecoderKind kind) {
  return name_of(decoder_kind_names(), kind);
}

const std::vector<std::string>& optimizer_kind_names() {
  static const std::vector<std::string> names = {"sgd", "adam"};
  return names;
}
OptimizerKind optimizer_kind_from_string(const std::string& name) {
  return parse<OptimizerKind>(optimizer_kind_names(), "optimizer", name);
}
std::string to_string(OptimizerKind kind) {
  return name_of(optimizer_kind_names(), kind);
}

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"fp32", "fp16", "bf16"};
  return names;
}
Precision precision_from_string(const std::string& name) {
  return parse<Precision>(precision_names(), "precision", name);
}
std::string to_string(Precision precision) {
  return name_of(precision_names(), precision);
}

const std::vector<std::string>& resize_side_names() {
  static const std::vector<std::string> names = {"short", "long"};
  return names;
}
ResizeSide resize_side_from_string(const std::string& name) {
  return parse<ResizeSide>(resize_side_names(), "a resize side", name);
}
std::string to_string(ResizeSide side) {
  return name_of(resize_side_names(), side);
}

const std::vector<std::string>& on_invalid_names() {
  static const std::vector<std::string> names = {"error", "skip", "clip"};
  return names;
}
OnInvalid on_invalid_from_string(const std::string& name) {
  return parse<OnInvalid>(on_invalid_names(), "an invalid-annotation policy", name);
}
std::string to_string(OnInvalid policy) {
  return name_of(on_invalid_names(), policy);
}

}  // namespace dbh::model
