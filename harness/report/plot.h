#pragma once
// Note [Plots that tell the truth]: a plot shows only values that were
// measured, at the x they were measured at (a batch size, a step), with
// labelled ticks on both axes, a legend that never overlaps (laid out in rows
// above the plot area), failed trials marked where they ran and nowhere else,
// and the chosen point (a confirmed setup) ringed and named.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dbh::harness::report {

/// One line of a plot.
struct PlotSeries {
  std::string name;
  std::vector<double> x;  // ascending
  std::vector<double> y;  // NaN: no value at that x (not drawn, not joined)
  /// x of the trials of this series that ran and failed: a cross at the top
  /// of the plot area, in the series' colour.
  std::vector<double> failed_x;
  bool reference = false;  // a level to compare against (a budget): drawn thin, without points
};

struct PlotOptions {
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  bool integer_x = false;  // ticks only at whole numbers (batch sizes, steps)
  /// A point to ring and name (the confirmed setup).
  std::optional<std::pair<double, double>> highlight;
  std::string highlight_label;
  /// What the crosses of PlotSeries::failed_x mean, in the legend.
  std::string failed_label = "failed (ran, did not pass)";
};

/// At most about `max_ticks` tick positions covering [lo, hi], spaced 1, 2 or
/// 5 × 10^k (whole numbers only when `integers`), ascending. Pure.
std::vector<double> nice_ticks(double lo, double hi, int max_ticks, bool integers);

/// Draws the plot and writes it as a PNG, atomically. Throws ReportError when
/// it cannot be written.
void write_plot(const std::string& path, const PlotOptions& options, const std::vector<PlotSeries>& series);

}  // namespace dbh::harness::report
