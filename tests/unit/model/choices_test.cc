#include "model/choices.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace dbh::model {
namespace {

// Every name parses to the enum value at its index and prints back as
// itself; a name not in the list throws, and the message lists every name.
template <typename E, typename Parse>
void ExpectNamesRoundTrip(const std::vector<std::string>& names, Parse parse, size_t count) {
  ASSERT_EQ(names.size(), count);
  for (size_t i = 0; i < names.size(); ++i) {
    const E value = parse(names[i]);
    EXPECT_EQ(static_cast<size_t>(value), i) << names[i];
    EXPECT_EQ(to_string(value), names[i]);
  }
  try {
    parse("Unknown");
    ADD_FAILURE() << "Unknown parsed";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const auto& n : names)
      EXPECT_NE(what.find("\"" + n + "\""), std::string::npos) << what;
    EXPECT_NE(what.find("got \"Unknown\""), std::string::npos) << what;
  }
  EXPECT_THROW(parse(""), std::invalid_argument);
  EXPECT_THROW(parse(names[0] + " "), std::invalid_argument);  // exact names only
}

TEST(ModelChoices, EveryNameRoundTripsAndNoOtherParses) {
  ExpectNamesRoundTrip<DecoderKind>(decoder_kind_names(), decoder_kind_from_string, 2);
  ExpectNamesRoundTrip<OptimizerKind>(optimizer_kind_names(), optimizer_kind_from_string, 2);
  ExpectNamesRoundTrip<Precision>(precision_names(), precision_from_string, 3);
  ExpectNamesRoundTrip<ResizeSide>(resize_side_names(), resize_side_from_string, 2);
  ExpectNamesRoundTrip<OnInvalid>(on_invalid_names(), on_invalid_from_string, 3);
}

TEST(ModelChoices, NamesAreTheOnesConfigurationsWrite) {
  EXPECT_EQ(decoder_kind_from_string("pan"), DecoderKind::kPan);
  EXPECT_EQ(optimizer_kind_from_string("adam"), OptimizerKind::kAdam);
  EXPECT_EQ(precision_from_string("bf16"), Precision::kBf16);
  EXPECT_EQ(resize_side_from_string("long"), ResizeSide::kLong);
  EXPECT_EQ(on_invalid_from_string("clip"), OnInvalid::kClip);
  EXPECT_EQ(to_string(Precision::kFp32), "fp32");
}

}  // namespace
}  // namespace dbh::model
