// Note [One metrics.csv]: one header and one row format for `dbh run` and
// `dbh train`.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "harness/report/metrics_csv.h"

namespace dbh::harness {
namespace {

std::vector<std::string> cells(std::string line) {
  if (!line.empty() && line.back() == '\n') line.pop_back();
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string c; std::getline(in, c, ',');) out.push_back(c);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

TEST(MetricsCsvTest, EveryRowHasTheHeadersColumnsInItsOrder) {
  const auto header = cells(report::metrics_csv_header());
  ASSERT_EQ(header.size(), 16u);
  EXPECT_EQ(header.front(), "run");
  EXPECT_EQ(header.back(), "recall");
  supervisor::StepRecord s;
  s.run = 1;
  s.step = 7;
  s.loss = 0.5;
  s.bce = 0.25;
  s.l1 = 0.125;
  s.dice = 0.125;
  s.lr = 0.007;
  s.grad_norm = 3.5;
  s.skipped = true;
  s.loss_scale = 65536;
  s.seconds = 0.75;
  s.rss_bytes = int64_t{3} << 30;
  s.loss_bits = 1056964608;
  const auto plain = cells(report::metrics_csv_row(s, nullptr));
  ASSERT_EQ(plain.size(), header.size()) << report::metrics_csv_row(s, nullptr);
  auto at = [&](const std::vector<std::string>& row, const std::string& column) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == column) return row[i];
    }
    ADD_FAILURE() << "no column " << column;
    return std::string();
  };
  EXPECT_EQ(at(plain, "run"), "1");
  EXPECT_EQ(at(plain, "step"), "7");
  EXPECT_EQ(at(plain, "loss"), "0.5");
  EXPECT_EQ(at(plain, "skipped"), "1");
  EXPECT_EQ(at(plain, "loss_scale"), "65536");
  EXPECT_EQ(at(plain, "rss_bytes"), "3221225472");  // integers in full, never 3.22e+09
  EXPECT_EQ(at(plain, "loss_bits"), "1056964608");
  EXPECT_EQ(at(plain, "hmean"), "");
  EXPECT_EQ(at(plain, "recall"), "");
  supervisor::EvalRecord e;
  e.hmean = 0.75;
  e.precision = 0.8;
  e.recall = 0.7;
  const auto validated = cells(report::metrics_csv_row(s, &e));
  ASSERT_EQ(validated.size(), header.size());
  EXPECT_EQ(at(validated, "hmean"), "0.75");
  EXPECT_EQ(at(validated, "precision"), "0.8");
  EXPECT_EQ(at(validated, "recall"), "0.7");
  EXPECT_EQ(at(plain, "bce"), "0.25");
  EXPECT_EQ(at(plain, "grad_norm"), "3.5");
  // What the worker did not measure (an external worker's loss parts) is an
  // empty cell, never a 0.
  s.bce = s.l1 = s.dice = s.grad_norm = std::nullopt;
  const auto unmeasured = cells(report::metrics_csv_row(s, nullptr));
  ASSERT_EQ(unmeasured.size(), header.size());
  EXPECT_EQ(at(unmeasured, "bce"), "");
  EXPECT_EQ(at(unmeasured, "dice"), "");
  EXPECT_EQ(at(unmeasured, "grad_norm"), "");
  EXPECT_EQ(at(unmeasured, "lr"), "0.007");
}

}  // namespace
}  // namespace dbh::harness
