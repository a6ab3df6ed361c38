#include "model/observed_modules.h"

namespace dbh::model {

const std::vector<std::string>& observed_modules(DecoderKind decoder) {
  static const std::vector<std::string> kEncoder = {"encoder.stem", "encoder.layer1", "encoder.layer2",
                                                    "encoder.layer3", "encoder.layer4"};
  static const std::vector<std::string> kHead = {"head.prob.conv",   "head.prob.up1",   "head.prob.up2",
                                                 "head.thresh.conv", "head.thresh.up1", "head.thresh.up2",
                                                 "head.binarize"};
  auto build = [&](const std::vector<std::string>& blocks) {
    std::vector<std::string> all = kEncoder;
    all.insert(all.end(), blocks.begin(), blocks.end());
    all.insert(all.end(), kHead.begin(), kHead.end());
    return all;
  };
  static const std::vector<std::string> kFpn =
      build({"decoder.lateral5", "decoder.lateral4", "decoder.lateral3", "decoder.lateral2", "decoder.smooth5",
             "decoder.smooth4", "decoder.smooth3", "decoder.smooth2", "decoder.fusion"});
  static const std::vector<std::string> kPan =
      build({"decoder.lateral5", "decoder.lateral4", "decoder.lateral3", "decoder.lateral2", "decoder.smooth4",
             "decoder.smooth3", "decoder.smooth2", "decoder.merge3", "decoder.merge4", "decoder.merge5",
             "decoder.fusion"});
  return decoder == DecoderKind::kPan ? kPan : kFpn;
}

const std::vector<std::string>& observed_modules_with_parameters(DecoderKind decoder) {
  static const auto with_parameters = [](const std::vector<std::string>& all) {
    std::vector<std::string> out;
    for (const auto& n : all) {
      if (n != "head.binarize") out.push_back(n);
    }
    return out;
  };
  static const std::vector<std::string> kFpn = with_parameters(observed_modules(DecoderKind::kFpn));
  static const std::vector<std::string> kPan = with_parameters(observed_modules(DecoderKind::kPan));
  return decoder == DecoderKind::kPan ? kPan : kFpn;
}

}  // namespace dbh::model
