#include "harness/report/eval_reading.h"

#include "harness/common/text.h"

#include <cstdio>

namespace dbh::harness::report {
namespace {

// Thresholds and probabilities with two decimals; scores with three.
std::string two(double v) { return fixed(v, 2); }

std::string percent(double v) { return fixed(100.0 * v, 0) + " %"; }

}  // namespace

std::vector<EvalFinding> read_evaluation(const EvalFacts& f) {
  std::vector<EvalFinding> out;
  if (f.gt == 0) {
    out.push_back({"nothing_to_score",
                   "the dataset holds no scorable word (none annotated, or all don't-care): precision, recall and "
                   "h-mean have nothing to measure, so 0.000 says nothing about the model",
                   "evaluate on images with legible, annotated words (check them with dbh data check, and the "
                   "transcriptions marked ### or illegible)"});
    return out;
  }
  const bool saturated = f.mean_text_fraction >= 0.5;
  if (f.matched == 0 && saturated) {
    out.push_back({"saturated_map",
                   std::string(f.det == 0 ? "no detections" : "no detection matches a word") +
                       " on a saturated probability map: on average " + percent(f.mean_text_fraction) +
                       " of each image lies above the threshold " + two(f.binarize_thresh) + " (max P " +
                       two(f.max_probability) +
                       "), so the text bitmap is one region covering the image, which post-processing cannot "
                       "split into words",
                   "this is what untrained, diverged or mismatched weights produce: check that the weights were "
                   "trained (the loss in their run's metrics.csv fell), that --encoder/--decoder match them, and "
                   "that the images are normalised as in training (black or white logged training images mean "
                   "they were not)"});
  } else if (f.det == 0 && f.max_probability < f.binarize_thresh) {
    out.push_back({"map_below_threshold",
                   "no detections: the probability map never reaches the threshold " + two(f.binarize_thresh) +
                       " (max P " + two(f.max_probability) + "), so the model marks no pixel as text",
                   "check that the weights are trained and match --encoder/--decoder; try --size as in training; "
                   "a lower --thresh shows what the model does find"});
  } else if (f.det == 0) {
    out.push_back({"boxes_dropped",
                   "no detections although " + percent(f.mean_text_fraction) +
                       " of the pixels lie above the threshold: every region's mean probability stayed below "
                       "--box-thresh " +
                       two(f.box_thresh) + " or it was too small to keep",
                   "try a lower --box-thresh (e.g. 0.5), and --size as in training"});
  } else if (f.matched == 0) {
    out.push_back({"nothing_matches",
                   std::to_string(f.det) + " detections, none overlapping a ground-truth word by IoU > 0.5: the "
                                           "boxes are off the words",
                   "look at the overlays (red predictions against green truth): boxes too large or small point at "
                   "--unclip-ratio, shifted or scaled boxes at --size/--side or the annotations' point order"});
  } else if (f.precision < 0.5 && f.recall >= 0.5) {
    out.push_back({"false_positives",
                   "most detections match no word (precision " + fixed(f.precision, 3) + ", recall " +
                       fixed(f.recall, 3) + "): the model finds the words and much else",
                   "raise --box-thresh or --thresh, and look at the worst overlays for what it mistakes for text"});
  } else if (f.recall < 0.5 && f.precision >= 0.5) {
    out.push_back({"missed_words",
                   "most words are missed (recall " + fixed(f.recall, 3) + ", precision " + fixed(f.precision, 3) +
                       "): what it detects is right, but it detects too little",
                   "lower --box-thresh or --thresh, try a larger --size for small words, and look at the worst "
                   "overlays"});
  } else {
    out.push_back({"scored",
                   "h-mean " + fixed(f.hmean, 3) + " (precision " + fixed(f.precision, 3) + ", recall " +
                       fixed(f.recall, 3) + ") over " + std::to_string(f.gt) + " words in " +
                       std::to_string(f.images) + " images",
                   "the worst images' overlays show where it fails"});
  }
  return out;
}

}  // namespace dbh::harness::report
