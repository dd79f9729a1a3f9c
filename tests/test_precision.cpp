// Simulated low precision (src/engine/precision/quantize.h): rounding against hand-computed values of
// each format (max normal, min subnormal, ties to even, overflow, NaN), the counters, the autograd
// hooks and the config field.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "brain/util/errors.h"
#include "engine/precision/quantize.h"
#include "brain/train/config.h"

using namespace scaleinv;
using namespace scaleinv::precision;

namespace {

double r(double x, Format f, bool saturate = false) {
  return round_to_format(torch::tensor({static_cast<float>(x)}), f, saturate).item<double>();
}
const double kInf = std::numeric_limits<double>::infinity();

}  // namespace

TEST(PrecisionFormats, SpecsOfTheFormats) {
  EXPECT_EQ(format_spec(Format::E4M3).max_finite, 448.0);              // S.1111.110 = 1.75 * 2^8
  EXPECT_EQ(format_spec(Format::E4M3).min_subnormal(), std::ldexp(1.0, -9));
  EXPECT_EQ(format_spec(Format::E4M3).min_normal(), std::ldexp(1.0, -6));
  EXPECT_EQ(format_spec(Format::E5M2).max_finite, 57344.0);            // 1.75 * 2^15
  EXPECT_EQ(format_spec(Format::E5M2).min_subnormal(), std::ldexp(1.0, -16));
  EXPECT_EQ(format_spec(Format::E5M2).min_normal(), std::ldexp(1.0, -14));
  EXPECT_EQ(format_spec(Format::BF16).min_subnormal(), std::ldexp(1.0, -133));
  EXPECT_EQ(format_spec(Format::BF16).max_finite, std::ldexp(255.0, 120));  // (2 - 2^-7) 2^127
}

TEST(PrecisionRounding, E4M3HandValues) {
  const Format f = Format::E4M3;
  EXPECT_EQ(r(448, f), 448);                          // max normal
  EXPECT_EQ(r(464, f), 448);                          // tie between 448 and 480: even mantissa (110) wins
  EXPECT_EQ(r(465, f), 448);                          // rounds to 480 > max: saturates (no inf in E4M3)
  EXPECT_EQ(r(1e6, f), 448);
  EXPECT_EQ(r(-1e6, f), -448);
  EXPECT_EQ(r(1.0625, f), 1.0);                       // tie 1 + 1/16: to even (1.000)
  EXPECT_EQ(r(1.1875, f), 1.25);                      // tie 1 + 3/16: to even (1.010)
  EXPECT_EQ(r(1.07, f), 1.125);                       // above the tie: up
  EXPECT_EQ(r(std::ldexp(1.0, -9), f), std::ldexp(1.0, -9));   // min subnormal
  EXPECT_EQ(r(std::ldexp(7.0, -9), f), std::ldexp(7.0, -9));   // max subnormal
  EXPECT_EQ(r(std::ldexp(1.0, -6), f), std::ldexp(1.0, -6));   // min normal
  EXPECT_EQ(r(std::ldexp(1.0, -10), f), 0.0);                  // half the min subnormal: tie to even (0)
  EXPECT_EQ(r(std::ldexp(1.5, -10), f), std::ldexp(1.0, -9));  // above half: up to the min subnormal
  EXPECT_EQ(r(std::ldexp(3.0, -10), f), std::ldexp(2.0, -9));  // tie 1.5 subnormal steps: to even (2)
  EXPECT_EQ(r(std::ldexp(1.0, -11), f), 0.0);                  // underflow
  EXPECT_TRUE(std::signbit(r(-std::ldexp(1.0, -11), f)));      // to -0
  EXPECT_TRUE(std::isnan(r(std::nan(""), f)));
  EXPECT_TRUE(std::isnan(r(kInf, f)));                          // no inf encoding
}

TEST(PrecisionRounding, E5M2HandValues) {
  const Format f = Format::E5M2;
  EXPECT_EQ(r(57344, f), 57344);                      // max normal
  EXPECT_EQ(r(61439, f), 57344);                      // below the tie with 65536
  EXPECT_EQ(r(61440, f), kInf);                       // tie rounds to even 2^16: overflow to inf
  EXPECT_EQ(r(61440, f, /*saturate=*/true), 57344);
  EXPECT_EQ(r(-1e9, f), -kInf);
  EXPECT_EQ(r(1.125, f), 1.0);                        // tie 1 + 1/8: to even (1.00)
  EXPECT_EQ(r(1.375, f), 1.5);                        // tie 1 + 3/8: to even (1.10)
  EXPECT_EQ(r(std::ldexp(1.0, -16), f), std::ldexp(1.0, -16));  // min subnormal
  EXPECT_EQ(r(std::ldexp(1.0, -14), f), std::ldexp(1.0, -14));  // min normal
  EXPECT_EQ(r(std::ldexp(1.0, -17), f), 0.0);                   // half the min subnormal: to even (0)
  EXPECT_EQ(r(std::ldexp(1.5, -17), f), std::ldexp(1.0, -16));
  EXPECT_EQ(r(kInf, f), kInf);
  EXPECT_TRUE(std::isnan(r(std::nan(""), f)));
}

TEST(PrecisionRounding, Bf16HandValuesAndTorchsConversion) {
  const Format f = Format::BF16;
  EXPECT_EQ(r(1.0 + std::ldexp(1.0, -8), f), 1.0);                              // tie: to even
  EXPECT_EQ(r(1.0 + 3 * std::ldexp(1.0, -8), f), 1.0 + std::ldexp(1.0, -6));   // tie: to even
  EXPECT_EQ(r(std::ldexp(1.0, -133), f), std::ldexp(1.0, -133));                // min subnormal
  EXPECT_EQ(r(std::ldexp(1.0, -134), f), 0.0);
  EXPECT_EQ(r(std::ldexp(255.4, 120), f), std::ldexp(255.0, 120));  // max finite: below the tie with 2^128
  EXPECT_EQ(r(3.4e38, f), kInf);                      // above it: overflow
  EXPECT_TRUE(std::isnan(r(std::nan(""), f)));
  // Against libtorch's own float -> bfloat16 conversion (round to nearest even), over many scales.
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({20000}) * torch::pow(2.0, torch::randint(-130, 120, {20000}).to(torch::kFloat));
  torch::Tensor mine = round_to_format(x, f);
  torch::Tensor ref = x.to(torch::kBFloat16).to(torch::kFloat);
  EXPECT_TRUE(torch::equal(mine, ref));
}

TEST(PrecisionRounding, RoundingIsIdempotentOnTheGrid) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({5000}) * 100;
  for (Format f : {Format::BF16, Format::E4M3, Format::E5M2}) {
    torch::Tensor q = round_to_format(x, f, true);
    EXPECT_TRUE(torch::equal(round_to_format(q, f, true), q)) << format_name(f);
  }
}

TEST(PrecisionCounting, UnderflowAndSaturationAreCounted) {
  // E4M3: 2^-12 and -2^-11 underflow, 0 is not counted (zero in), 1000 saturates, NaN is ignored.
  torch::Tensor x = torch::tensor({1.0f, std::ldexp(1.0f, -12), -std::ldexp(1.0f, -11), 0.0f, 1000.0f, NAN});
  QuantStats st;
  torch::Tensor q = round_and_count(x, Format::E4M3, true, &st);
  EXPECT_EQ(st.nonzero, 0);  // the value-dependent counts wait on the device until settled
  st.settle();
  EXPECT_EQ(st.total, 6);
  EXPECT_EQ(st.nonzero, 4);
  EXPECT_EQ(st.underflow, 2);
  EXPECT_EQ(st.saturated, 1);
  EXPECT_DOUBLE_EQ(st.underflow_fraction(), 0.5);
  EXPECT_DOUBLE_EQ(st.saturated_fraction(), 0.25);
  EXPECT_EQ(q[4].item<float>(), 448.0f);
}

// Over calls the counts add and the worst fractions are per call: E4M3 on [1, 2^-12] (1 of 2
// underflows: 0.5), on [1, 1, 1000, 2^-12] (1 of 4 underflows, 1 of 4 saturates: 0.25 each) and on
// zeros only (nothing nonzero, fractions 0). A settle after more calls adds to what an earlier one
// folded in; a second settle changes nothing.
TEST(PrecisionCounting, CountsAddOverCallsAndTheWorstFractionIsPerCall) {
  const float tiny = std::ldexp(1.0f, -12);
  QuantStats st;
  round_and_count(torch::tensor({1.0f, tiny}), Format::E4M3, true, &st);
  round_and_count(torch::tensor({1.0f, 1.0f, 1000.0f, tiny}), Format::E4M3, true, &st);
  st.settle();
  EXPECT_EQ(st.calls, 2);
  EXPECT_EQ(st.nonzero, 6);
  EXPECT_EQ(st.underflow, 2);
  EXPECT_EQ(st.saturated, 1);
  EXPECT_DOUBLE_EQ(st.worst_underflow, 0.5);  // not the pooled 2/6
  EXPECT_DOUBLE_EQ(st.worst_saturated, 0.25);
  round_and_count(torch::zeros({2}), Format::E4M3, true, &st);
  st.settle();
  st.settle();
  EXPECT_EQ(st.calls, 3);
  EXPECT_EQ(st.total, 8);
  EXPECT_EQ(st.nonzero, 6);
  EXPECT_DOUBLE_EQ(st.worst_underflow, 0.5);
  EXPECT_DOUBLE_EQ(st.underflow_fraction(), 2.0 / 6.0);
}

TEST(PrecisionHooks, QuantizeIsStraightThroughAndQuantizeGradRoundsTheGradient) {
  Scope scope(Format::E4M3);
  torch::Tensor x = torch::tensor({1.07f, 300.0f}, torch::requires_grad());
  torch::Tensor q = quantize(x, "x");
  EXPECT_FLOAT_EQ(q[0].item<float>(), 1.125f);
  (q * torch::tensor({2.0f, 3.0f})).sum().backward();
  EXPECT_FLOAT_EQ(x.grad()[0].item<float>(), 2.0f);  // straight through
  EXPECT_FLOAT_EQ(x.grad()[1].item<float>(), 3.0f);

  torch::Tensor y = torch::tensor({1.0f, 1.0f}, torch::requires_grad());
  torch::Tensor z = quantize_grad(y, "y:grad");
  EXPECT_TRUE(torch::equal(z.detach(), y.detach()));  // identity forward
  (z * torch::tensor({1.07f, std::ldexp(1.0f, -12)})).sum().backward();
  EXPECT_FLOAT_EQ(y.grad()[0].item<float>(), 1.125f);  // rounded in backward
  EXPECT_FLOAT_EQ(y.grad()[1].item<float>(), 0.0f);    // underflowed
  EXPECT_EQ(scope.all_stats().at("y:grad").underflow, 1);
}

TEST(PrecisionHooks, NoScopeMeansNoRounding) {
  torch::Tensor x = torch::tensor({1.07f});
  EXPECT_TRUE(torch::equal(quantize(x, "x"), x));
}

TEST(PrecisionConfig, TrainPrecisionFieldIsValidated) {
  EXPECT_EQ(train_config_from_toml_text("[train]\nprecision = \"e4m3\"\n", "t.toml").train.precision, "e4m3");
  EXPECT_EQ(train_config_from_toml_text("", "t.toml").train.precision, "fp32");
  try {
    train_config_from_toml_text("[train]\nprecision = \"fp16\"\n", "t.toml");
    FAIL() << "fp16 accepted";
  } catch (const UserError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t.toml"), std::string::npos) << m;
    EXPECT_NE(m.find("precision"), std::string::npos) << m;
  }
  EXPECT_THROW(format_from_string("fp16", "command line", "--formats"), UserError);
}
