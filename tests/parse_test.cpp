// Numbers from user input: the whole text spells the number, or it is refused.
#include "util/parse.h"

#include <gtest/gtest.h>

#include <limits>

namespace lol {
namespace {

TEST(Parse, IntegersSpellTheWholeText) {
  EXPECT_EQ(parse_int("0"), 0);
  EXPECT_EQ(parse_int("-17"), -17);
  EXPECT_EQ(parse_int("9223372036854775807"), std::numeric_limits<int64_t>::max());
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "x1", "1.0", "1e3", "0x10", "--1",
                          "9223372036854775808", "1,2"})
    EXPECT_FALSE(parse_int(bad).has_value()) << "'" << bad << "'";
}

TEST(Parse, FiniteNumbersSpellTheWholeText) {
  EXPECT_EQ(parse_finite("3"), 3.0);
  EXPECT_EQ(parse_finite("-2.5"), -2.5);
  EXPECT_EQ(parse_finite("3e-4"), 3e-4);
  EXPECT_EQ(parse_finite(".5"), 0.5);
  for (const char* bad :
       {"", " 1", "1 ", "+1", "1x", "inf", "nan", "-inf", "1e999", "0x1p3", "1..2", "1@2"})
    EXPECT_FALSE(parse_finite(bad).has_value()) << "'" << bad << "'";
}

}  // namespace
}  // namespace lol
