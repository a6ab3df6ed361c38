#include "harness/report/plot.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"

namespace dbh::harness::report {
namespace {

std::string tick_text(double v, double step) {
  std::ostringstream s;
  const int digits = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step)));
  s << std::fixed << std::setprecision(std::clamp(digits, 0, 6)) << v;
  return s.str();
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_ticks, bool integers) {
  std::vector<double> out;
  if (!std::isfinite(lo) || !std::isfinite(hi) || max_ticks < 2) return out;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / static_cast<double>(max_ticks - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  if (integers) step = std::max(1.0, std::round(step));
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (double v = first; v <= hi + step * 1e-9; v += step) out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  return out;
}

void write_plot(const std::string& path, const PlotOptions& o, const std::vector<PlotSeries>& series) {
  const int w = 760, h = 460, left = 80, right = 24;
  const double font = 0.45;
  cv::Mat img(h, w, CV_8UC3, cv::Scalar(255, 255, 255));
  const cv::Scalar black(0, 0, 0), grey(110, 110, 110), grid(228, 228, 228), red(0, 0, 220);
  const cv::Scalar colors[] = {{200, 60, 30}, {30, 140, 30}, {150, 0, 150}, {0, 130, 200}, {90, 90, 90}};
  cv::putText(img, o.title, {left, 24}, cv::FONT_HERSHEY_SIMPLEX, 0.55, black, 1, cv::LINE_AA);

  // The legend, in rows above the plot area: an entry moves to the next row
  // rather than overlap the one before it.
  struct Entry {
    std::string text;
    cv::Scalar color;
    int kind;  // 0 line, 1 reference, 2 failed cross, 3 highlight ring
  };
  std::vector<Entry> entries;
  bool any_failed = false;
  for (size_t k = 0; k < series.size(); ++k) {
    entries.push_back({series[k].name, colors[k % 5], series[k].reference ? 1 : 0});
    any_failed = any_failed || !series[k].failed_x.empty();
  }
  if (any_failed) entries.push_back({o.failed_label, red, 2});
  if (o.highlight) entries.push_back({o.highlight_label, black, 3});
  int lx = left, ly = 46;
  for (const auto& e : entries) {
    int base = 0;
    const cv::Size size = cv::getTextSize(e.text, cv::FONT_HERSHEY_SIMPLEX, font, 1, &base);
    const int width = 26 + size.width + 18;
    if (lx + width > w - right && lx > left) {
      lx = left;
      ly += 20;
    }
    const cv::Point mark{lx + 10, ly - 4};
    if (e.kind == 0) cv::line(img, {lx, ly - 4}, {lx + 20, ly - 4}, e.color, 2, cv::LINE_AA);
    if (e.kind == 1) cv::line(img, {lx, ly - 4}, {lx + 20, ly - 4}, e.color, 1, cv::LINE_AA);
    if (e.kind == 2) cv::drawMarker(img, mark, e.color, cv::MARKER_TILTED_CROSS, 10, 2);
    if (e.kind == 3) cv::circle(img, mark, 7, e.color, 2, cv::LINE_AA);
    cv::putText(img, e.text, {lx + 26, ly}, cv::FONT_HERSHEY_SIMPLEX, font, e.color, 1, cv::LINE_AA);
    lx += width;
  }
  const int top = ly + 22, bottom = 58;

  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const auto& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      xlo = std::min(xlo, s.x[i]), xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]), yhi = std::max(yhi, s.y[i]);
    }
    for (const double x : s.failed_x) xlo = std::min(xlo, x), xhi = std::max(xhi, x);
  }
  cv::rectangle(img, {left, top}, {w - right, h - bottom}, black, 1);
  if (!std::isfinite(xlo)) {
    cv::putText(img, "no measured values", {left + 20, (top + h - bottom) / 2}, cv::FONT_HERSHEY_SIMPLEX, 0.6, red, 1);
  } else {
    if (!std::isfinite(ylo)) ylo = 0, yhi = 1;
    if (yhi - ylo < 1e-12) ylo -= 0.5, yhi += 0.5;
    const double ypad = (yhi - ylo) * 0.08;
    ylo -= ypad, yhi += ypad;
    const double x_first = xlo, x_last = xhi;  // ticks only where something was measured
    if (xhi - xlo < 1e-12) xlo -= 1, xhi += 1;
    const double xpad = (xhi - xlo) * 0.04;
    xlo -= xpad, xhi += xpad;
    auto px = [&](double x) { return left + static_cast<int>((w - left - right) * (x - xlo) / (xhi - xlo)); };
    auto py = [&](double y) { return h - bottom - static_cast<int>((h - top - bottom) * (y - ylo) / (yhi - ylo)); };
    // Ticks and grid: y on the left, x below.
    const auto yt = nice_ticks(ylo, yhi, 6, false);
    const double ystep = yt.size() > 1 ? yt[1] - yt[0] : 1.0;
    for (const double y : yt) {
      cv::line(img, {left + 1, py(y)}, {w - right - 1, py(y)}, grid, 1);
      cv::line(img, {left - 4, py(y)}, {left, py(y)}, black, 1);
      int base = 0;
      const std::string t = tick_text(y, ystep);
      const cv::Size size = cv::getTextSize(t, cv::FONT_HERSHEY_SIMPLEX, 0.4, 1, &base);
      cv::putText(img, t, {left - 8 - size.width, py(y) + 4}, cv::FONT_HERSHEY_SIMPLEX, 0.4, black, 1, cv::LINE_AA);
    }
    const auto xt = nice_ticks(x_first, x_last, 10, o.integer_x);
    const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1.0;
    for (const double x : xt) {
      cv::line(img, {px(x), h - bottom}, {px(x), h - bottom + 4}, black, 1);
      int base = 0;
      const std::string t = tick_text(x, xstep);
      const cv::Size size = cv::getTextSize(t, cv::FONT_HERSHEY_SIMPLEX, 0.4, 1, &base);
      cv::putText(img, t, {px(x) - size.width / 2, h - bottom + 18}, cv::FONT_HERSHEY_SIMPLEX, 0.4, black, 1,
                  cv::LINE_AA);
    }
    for (size_t k = 0; k < series.size(); ++k) {
      const auto& s = series[k];
      const cv::Scalar c = colors[k % 5];
      for (size_t i = 0; i + 1 < s.x.size() && i + 1 < s.y.size(); ++i) {
        if (std::isfinite(s.y[i]) && std::isfinite(s.y[i + 1])) {
          cv::line(img, {px(s.x[i]), py(s.y[i])}, {px(s.x[i + 1]), py(s.y[i + 1])}, c, s.reference ? 1 : 2,
                   cv::LINE_AA);
        }
      }
      if (!s.reference) {
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
          if (std::isfinite(s.y[i])) cv::circle(img, {px(s.x[i]), py(s.y[i])}, 3, c, -1, cv::LINE_AA);
        }
      }
      for (const double x : s.failed_x) {
        cv::drawMarker(img, {px(x), top + 10}, red, cv::MARKER_TILTED_CROSS, 10, 2);
      }
    }
    if (o.highlight && std::isfinite(o.highlight->second)) {
      cv::circle(img, {px(o.highlight->first), py(o.highlight->second)}, 9, black, 2, cv::LINE_AA);
    }
  }
  int base = 0;
  const cv::Size xs = cv::getTextSize(o.x_label, cv::FONT_HERSHEY_SIMPLEX, font, 1, &base);
  cv::putText(img, o.x_label, {left + (w - left - right - xs.width) / 2, h - 16}, cv::FONT_HERSHEY_SIMPLEX, font, grey,
              1, cv::LINE_AA);
  cv::putText(img, o.y_label, {8, top - 8}, cv::FONT_HERSHEY_SIMPLEX, 0.4, grey, 1, cv::LINE_AA);
  // Encoded in memory, then written atomically: a full disk leaves no torn image.
  std::vector<uchar> png;
  if (!cv::imencode(".png", img, png)) throw ReportError(path + ": cannot encode the plot as PNG");
  write_file_atomically(path, std::string(png.begin(), png.end()));
}

}  // namespace dbh::harness::report
