#pragma once

#include <cstdint>

#include "model/data/augment.h"

namespace dbh::model {

/// Parameters of the `synthetic_render` data source: deterministic rendered
/// text images with exact polygons, for volume without licences.
struct RenderOptions {
  /// Output image size in pixels. Must be ≥ 1.
  int width = 640;
  int height = 640;
  /// Words attempted per image, drawn uniformly from [min_words, max_words].
  /// Need 0 ≤ min_words ≤ max_words.
  int min_words = 3;
  int max_words = 12;
  /// Hershey font scale, drawn log-uniformly from this range (shrunk when a
  /// word would not fit the image). Need 0 < min ≤ max, finite.
  double min_font_scale = 0.6;
  double max_font_scale = 2.5;
  /// Each word is rotated by an angle uniform in ±max_rotate_deg (a third of
  /// the words stay horizontal). Must lie in [0, 180].
  double max_rotate_deg = 30;
  /// Global Gaussian pixel noise with σ uniform in [0, noise_sigma_max]; 0
  /// disables it (no noise at all). Must be finite and ≥ 0.
  double noise_sigma_max = 12;
  /// Probability of a final Gaussian blur (3×3 or 5×5); 0 disables it.
  /// Must lie in [0, 1].
  double blur_prob = 0.3;
  /// Probability that a word is drawn deliberately faint (low contrast) or
  /// tiny; such words become ignore=true ("###"). Must lie in [0, 1].
  double ignore_prob = 0.1;
  /// Words whose text box is thinner than this (px) are also marked ignore
  /// (matches LabelMapOptions::min_text_size). Must be finite and ≥ 0.
  double min_text_px = 8;
  /// Placement attempts per word (rejection sampling against image bounds
  /// and earlier words) before that word is given up. Must be ≥ 1.
  int max_place_tries = 50;
};

/// Renders sample `index` of a synthetic text dataset; the result is a
/// function of (seed, index, options) only (no global RNG, any thread).
///
/// Image (BGR, CV_8UC3, height × width): a background (flat colour, linear
/// gradient, or smooth random noise texture), then words of random
/// upper/lower/capitalised/digit strings drawn with cv::putText in one of the
/// 8 Hershey faces (optionally FONT_ITALIC), random scale and thickness, in a
/// colour contrasted against the background under the word. Each word is
/// drawn as an anti-aliased mask on its own canvas, warped by its affine
/// matrix (rotation by a random angle + translation) with cv::warpAffine and
/// alpha-composited; it is placed by rejection sampling so that its quad
/// lies in the image (2 px margin) and, grown by 3 px, overlaps no earlier
/// word's grown quad. A word that finds no place after max_place_tries is
/// skipped (its font is first shrunk if it cannot fit the image). Then
/// global Gaussian noise and, with blur_prob, a Gaussian blur.
///
/// Polygons: the rotated quad of each word's text box, transformed by the
/// same affine matrix as its pixels: 4 vertices, clockwise in image
/// coordinates (y down), starting at the top-left of the reading direction
/// (top-left, top-right, bottom-right, bottom-left of the unrotated word).
/// The text box is the cv::getTextSize box (ascent above the baseline,
/// `baseline` below it) united with the bounding box of the word's actual
/// ink, because Hershey glyphs (script faces, thick strokes) overhang the
/// getTextSize box by up to ~25 px; every drawn pixel is thus inside its
/// polygon (up to 1 px of bilinear spread). All vertices lie in
/// [0, width−1] × [0, height−1]; no two polygons overlap.
///
/// Word count: in [min_words, max_words] unless placement gave up on some
/// words; at least 1 when min_words ≥ 1 and the image is not tiny (≥ ~32 px
/// per side). Throws std::invalid_argument for options outside their ranges.
AnnotatedImage render_synthetic_text(uint64_t seed, int64_t index,
                                     const RenderOptions& options = {});

}  // namespace dbh::model
