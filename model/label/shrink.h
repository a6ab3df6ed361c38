#pragma once

#include <vector>

#include "model/label/polygon.h"

namespace dbh::model {

/// Clipper works on 64-bit integers; offset_polygon multiplies coordinates by
/// kOffsetScale = 2^8 before rounding them, so offsets keep 1/256 px precision
/// (the Python references truncate to whole pixels; spec §4.1).
inline constexpr double kOffsetScale = 256.0;

/// offset_polygon refuses coordinates and offsets larger than this (in pixels)
/// in absolute value: far beyond any image, and it keeps the scaled integers
/// and the number of arc vertices small.
inline constexpr double kMaxOffsetCoordinate = 16777216.0;  // 2^24

/// DBNet's shrink/dilate offset D = A·(1 − ratio²) / L (spec §4.1), with A the
/// absolute shoelace area and L the perimeter. Returns 0 for degenerate input
/// (fewer than 3 vertices, zero perimeter, zero area) and whenever the result
/// would not be a finite number.
double shrink_distance(const Polygon& poly, double ratio);

/// Offsets a closed polygon by `delta` pixels (negative shrinks, positive
/// dilates) with Clipper 6.4.2's ClipperOffset: jtRound joins,
/// etClosedPolygon, miter limit 2.0 and an arc tolerance of 0.25 px (Clipper's
/// default 0.25 taken in pixels, i.e. 0.25·kOffsetScale Clipper units, so the
/// round corners have as many vertices as pyclipper's on pixel coordinates).
/// Coordinates are scaled by kOffsetScale and rounded to integers, offset, and
/// scaled back. Orientation of the input does not matter; outer pieces come
/// back with positive signed_area (clockwise in image coordinates), holes with
/// negative. Returns the pieces in Clipper's order; empty if the offset
/// removes the polygon, or for invalid input (fewer than 3 vertices,
/// non-finite values, magnitudes above kMaxOffsetCoordinate). Never throws.
std::vector<Polygon> offset_polygon(const Polygon& poly, double delta);

/// Drops every vertex lying within `eps` (Euclidean, inclusive) of the last
/// kept vertex, then drops trailing vertices within `eps` of the first one
/// (the closing edge). eps = 0 removes exact repeats only. Non-finite
/// vertices are never equal to anything and are kept.
Polygon remove_duplicate_vertices(const Polygon& poly, double eps);

/// The polygon in clockwise order in image coordinates (positive
/// signed_area): reversed if its signed area is negative, unchanged otherwise
/// (degenerate polygons included).
Polygon to_clockwise(const Polygon& poly);

}  // namespace dbh::model
