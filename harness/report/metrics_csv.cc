#include "harness/report/metrics_csv.h"

#include <iomanip>
#include <sstream>

namespace dbh::harness::report {

const std::string& metrics_csv_header() {
  static const std::string kHeader =
      "run,step,loss,bce,l1,dice,lr,grad_norm,skipped,loss_scale,seconds,rss_bytes,loss_bits,hmean,precision,recall\n";
  return kHeader;
}

namespace {

// A value the worker measured, or an empty cell (never a 0 it did not measure).
struct Cell {
  const std::optional<double>& v;
};
std::ostream& operator<<(std::ostream& os, Cell c) {
  if (c.v) os << *c.v;
  return os;
}

}  // namespace

std::string metrics_csv_row(const supervisor::StepRecord& s, const supervisor::EvalRecord* eval) {
  std::ostringstream row;
  row << std::setprecision(9) << s.run << "," << s.step << "," << s.loss << "," << Cell{s.bce} << "," << Cell{s.l1}
      << "," << Cell{s.dice} << "," << s.lr << "," << Cell{s.grad_norm} << "," << (s.skipped ? 1 : 0) << ","
      << s.loss_scale << ","
      << s.seconds << "," << s.rss_bytes << "," << s.loss_bits;
  if (eval != nullptr) {
    row << "," << eval->hmean << "," << eval->precision << "," << eval->recall << "\n";
  } else {
    row << ",,,\n";
  }
  return row.str();
}

}  // namespace dbh::harness::report
