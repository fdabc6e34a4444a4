// Progress off a terminal: how often it prints, and what a line says.
#include "util/progress.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace lol {

TEST(Progress, RatesAndDurationsAreWrittenTheWayTqdmWritesThem) {
  EXPECT_EQ(format_rate(12.345), "12.3 it/s");
  EXPECT_EQ(format_rate(1), "1 it/s");
  EXPECT_EQ(format_rate(23456.7), "23457 it/s");
  EXPECT_EQ(format_rate(0.4), "2.5 s/it");
  EXPECT_EQ(format_rate(0.001), "1000 s/it");
  EXPECT_EQ(format_rate(0), "? it/s");
  EXPECT_EQ(format_duration(3723), "1h2m3s");
  EXPECT_EQ(format_duration(59.6), "1m0s");
  EXPECT_EQ(format_duration(-1), "?");
}

// Captures what Progress writes to std::cerr (redrawn bars on a terminal are not checked).
class ProgressLines : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::isatty(STDERR_FILENO)) GTEST_SKIP() << "stderr is a terminal: Progress draws a bar";
    saved_ = std::cerr.rdbuf(captured_.rdbuf());
  }
  void TearDown() override {
    if (saved_) std::cerr.rdbuf(saved_);
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(captured_.str());
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  std::ostringstream captured_;
  std::streambuf* saved_ = nullptr;
};

TEST_F(ProgressLines, AboutTwentyLinesPerRunWithRateElapsedAndEta) {
  Progress progress("work", 1000, 200);  // resumed at 200: 800 units left, a line every 40
  for (int64_t done = 201; done <= 1000; ++done) progress.update(done, "x " + std::to_string(done));
  const auto got = lines();
  ASSERT_EQ(got.size(), 20u);
  EXPECT_EQ(got.front().rfind("work 240/1000 x 240 | ", 0), 0u) << got.front();
  EXPECT_EQ(got.back().rfind("work 1000/1000 x 1000 | ", 0), 0u) << got.back();
  for (const auto& line : got) {
    EXPECT_NE(line.find(" it/s elapsed "), std::string::npos) << line;
    EXPECT_NE(line.find(" ETA "), std::string::npos) << line;
  }
}

TEST_F(ProgressLines, AnIntervalTheCallerSetsIsKeptAndTheLastUnitAlwaysPrints) {
  Progress progress("train", 25, 0, 10);
  for (int64_t done = 1; done <= 25; ++done) progress.update(done, "");
  const auto got = lines();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].rfind("train 10/25 ", 0), 0u) << got[0];
  EXPECT_EQ(got[1].rfind("train 20/25 ", 0), 0u) << got[1];
  EXPECT_EQ(got[2].rfind("train 25/25 ", 0), 0u) << got[2];
}

}  // namespace lol
