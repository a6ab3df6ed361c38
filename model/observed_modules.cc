#include "model/observed_modules.h"

#include <algorithm>

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

std::string observed_module_of(const std::string& parameter) {
  const auto dot = parameter.rfind('.');
  std::string m = dot == std::string::npos ? parameter : parameter.substr(0, dot);
  if (m.rfind("encoder.layer", 0) == 0) return m.substr(0, std::string("encoder.layerN").size());
  if (m.rfind("encoder.", 0) == 0) return "encoder.stem";
  if (m.rfind("decoder.fusion", 0) == 0) return "decoder.fusion";
  if (m.rfind("decoder.", 0) == 0) {
    const auto second = m.find('.', 8);
    const std::string block = second == std::string::npos ? m : m.substr(0, second);
    // PAN's stride-2 convolutions run inside the merge that follows them.
    if (block.size() == std::string("decoder.downN").size() && block.rfind("decoder.down", 0) == 0 &&
        block.back() >= '2' && block.back() <= '4') {
      return "decoder.merge" + std::string(1, static_cast<char>(block.back() + 1));
    }
    return block;
  }
  if (m.rfind("head.", 0) == 0) {
    // head.prob.bn → head.prob.conv (bn belongs to the conv stage), up1_bn → up1.
    std::string h = m;
    if (h.size() > 3 && h.compare(h.size() - 3, 3, ".bn") == 0) h = h.substr(0, h.size() - 3) + ".conv";
    if (h.size() > 7 && h.compare(h.size() - 7, 7, ".up1_bn") == 0) h = h.substr(0, h.size() - 7) + ".up1";
    return h;
  }
  return m;
}

bool is_parameter_name(DecoderKind decoder, const std::string& parameter) {
  const auto dot = parameter.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string last = parameter.substr(dot + 1);
  if (last != "weight" && last != "bias") return false;
  const auto& owners = observed_modules_with_parameters(decoder);
  return std::find(owners.begin(), owners.end(), observed_module_of(parameter)) != owners.end();
}

}  // namespace dbh::model
