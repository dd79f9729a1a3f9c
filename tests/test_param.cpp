// The parameterization table: presets, TOML round trip, the equivalence shift, bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "brain/util/errors.h"
#include "brain/param/table.h"

using namespace scaleinv;

namespace {
const RoleExponents& R(const ParamTable& t, Role r) { return t.row(r); }
constexpr int kSgd = 0, kAdam = 1, kAda = 2;

}  // namespace

TEST(ParamPresets, EveryPresetLoadsAndHasASource) {
  for (const auto& n : preset_names()) {
    ParamTable t = preset(n);
    EXPECT_EQ(t.name, n);
    EXPECT_FALSE(t.source.empty()) << n;
    EXPECT_EQ(t.base_width, 64) << n;  // one base shape for all: hyperparameters mean the same
    EXPECT_EQ(t.base_depth, 4) << n;
  }
}

TEST(ParamPresets, Table1OfSeed000) {
  // seed 000 Table 1 (a_0 a_h a_{L+1} | b | c with Adam).
  struct Row { const char* n; double a[3], b[3], c[3]; };
  const Row rows[] = {{"sp", {0, 0, 0}, {0, .5, .5}, {0, 1, 1}},
                      {"ntk", {0, .5, .5}, {0, 0, 0}, {0, .5, .5}},
                      {"mup", {-.5, 0, .5}, {.5, .5, .5}, {.5, 1, .5}},
                      {"mf", {0, .5, 1}, {0, 0, 0}, {0, .5, 0}}};
  for (const Row& r : rows) {
    ParamTable t = preset(r.n);
    const Role roles[3] = {Role::Embedding, Role::Hidden, Role::Readout};
    for (int i = 0; i < 3; ++i) {
      EXPECT_DOUBLE_EQ(R(t, roles[i]).a, r.a[i]) << r.n << " " << i;
      EXPECT_DOUBLE_EQ(R(t, roles[i]).b, r.b[i]) << r.n << " " << i;
      EXPECT_DOUBLE_EQ(R(t, roles[i]).c[kAdam], r.c[i]) << r.n << " " << i;
    }
  }
}

TEST(ParamPresets, CompletePIsMupShiftedOnEmbeddingAndReadout) {
  // seed 000 2.1: "muP shifted here": a = (0,0,1), b = (0,1/2,0), c = (0,1,0), rho = 1.
  ParamTable mup = preset("mup");
  std::array<double, kNumRoles> theta{};
  theta[static_cast<int>(Role::Embedding)] = 0.5;
  theta[static_cast<int>(Role::Readout)] = 0.5;
  ParamTable s = shift(mup, theta);
  ParamTable c = preset("completep");
  for (Role r : {Role::Embedding, Role::Hidden, Role::Readout}) {
    EXPECT_DOUBLE_EQ(s.row(r).a, c.row(r).a) << role_name(r);
    EXPECT_DOUBLE_EQ(s.row(r).b, c.row(r).b) << role_name(r);
    for (int f = 0; f < kNumFamilies; ++f) EXPECT_DOUBLE_EQ(s.row(r).c[f], c.row(r).c[f]) << role_name(r) << f;
    EXPECT_DOUBLE_EQ(s.row(r).eps, c.row(r).eps) << role_name(r);
  }
  EXPECT_DOUBLE_EQ(c.branch, 1.0);
}

TEST(ParamShift, SpToNtkAndMupToMf) {
  // seed 000 1.2.2: SP == NTK and muP == MF under eq. (28), every column included.
  auto theta_for = [](double e, double h, double r) {
    std::array<double, kNumRoles> th{};
    th[static_cast<int>(Role::Embedding)] = e;
    th[static_cast<int>(Role::Readout)] = r;
    th[static_cast<int>(Role::Router)] = r;  // the router's default row is the readout's
    for (Role x : {Role::Hidden, Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnO, Role::Expert})
      th[static_cast<int>(x)] = h;
    return th;
  };
  ParamTable ntk = shift(preset("sp"), theta_for(0, .5, .5));
  ParamTable mf = shift(preset("mup"), theta_for(.5, .5, .5));
  for (Role r : all_roles()) {
    EXPECT_EQ(ntk.row(r), preset("ntk").row(r)) << role_name(r);
    EXPECT_EQ(mf.row(r), preset("mf").row(r)) << role_name(r);
  }
}

TEST(ParamShift, MovesLrByThetaForAdamTwiceForSgdNotForAdafactor) {
  std::array<double, kNumRoles> th{};
  th[static_cast<int>(Role::Hidden)] = 0.25;
  ParamTable t = preset("mup"), s = shift(t, th);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).a, t.row(Role::Hidden).a + 0.25);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).b, t.row(Role::Hidden).b - 0.25);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).c[kAdam], t.row(Role::Hidden).c[kAdam] - 0.25);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).c[kSgd], t.row(Role::Hidden).c[kSgd] - 0.5);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).c[kAda], t.row(Role::Hidden).c[kAda]);
  EXPECT_DOUBLE_EQ(s.row(Role::Hidden).eps, t.row(Role::Hidden).eps + 0.25);
  EXPECT_EQ(s.row(Role::Readout), t.row(Role::Readout));
}

TEST(ParamScale, BaseShapesAreTheSameNetworkForEveryPreset) {
  for (const auto& n : preset_names()) {
    ParamTable t = preset(n);
    for (Role r : all_roles())
      for (int f = 0; f < kNumFamilies; ++f) {
        TensorScale s = tensor_scale(t, r, static_cast<OptFamily>(f), 1.0, 1.0, true);
        EXPECT_DOUBLE_EQ(s.multiplier, 1.0);
        EXPECT_DOUBLE_EQ(s.init, 1.0);
        EXPECT_DOUBLE_EQ(s.lr, 1.0);
        EXPECT_DOUBLE_EQ(s.eps, 1.0);
      }
    EXPECT_DOUBLE_EQ(branch_multiplier(t, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(attn_logit_scale(t, 16, 16), 0.25);
  }
}

TEST(ParamScale, WidthAndDepthFactors) {
  ParamTable t = preset("depth-mup");
  TensorScale h = tensor_scale(t, Role::Hidden, OptFamily::Adam, 4.0, 16.0, true);
  EXPECT_DOUBLE_EQ(h.lr, 1.0 / 4.0 / 4.0);  // eta n^-1 L^-1/2 (seed 004 Claim 5.5)
  EXPECT_DOUBLE_EQ(h.init, 0.5);
  TensorScale out = tensor_scale(t, Role::Readout, OptFamily::Adam, 4.0, 16.0, false);
  EXPECT_DOUBLE_EQ(out.lr, 0.25);
  EXPECT_DOUBLE_EQ(out.init, 0.25);  // Var(V) ~ n^-2
  EXPECT_DOUBLE_EQ(branch_multiplier(t, 16.0), 0.25);
  EXPECT_DOUBLE_EQ(shortcut_multiplier(preset("keel"), 12.0), 12.0);
}

TEST(ParamIO, TomlAndJsonRoundTrip) {
  for (const auto& n : preset_names()) {
    ParamTable t = preset(n);
    EXPECT_EQ(param_from_toml_string(param_to_toml(t), "roundtrip.toml"), t) << n;
    EXPECT_EQ(param_from_json(param_to_json(t)), t) << n;
    EXPECT_EQ(param_fingerprint(param_from_json(param_to_json(t))), param_fingerprint(t));
  }
  EXPECT_NE(param_fingerprint(preset("sp")), param_fingerprint(preset("ntk")));
}

TEST(ParamIO, ExampleCustomFileMatchesMupExceptAttention) {
  ParamTable t = load_param(std::string(SCALEINV_SOURCE_DIR) + "/examples/params/custom.toml");
  ParamTable mup = preset("mup");
  for (Role r : all_roles()) EXPECT_EQ(t.row(r), mup.row(r)) << role_name(r);
  EXPECT_DOUBLE_EQ(t.attn_logit, 0.5);
}

// A bare preset name is the preset even where the working directory holds a folder or a file of that
// name (a clone of microsoft/mup is a folder "mup"); "./NAME" reads the file, and a bare name that is
// no preset reads the file as before.
TEST(ParamIO, PresetNameWinsOverAFolderOrFileOfThatName) {
  const std::string dir = scaleinv::testing::temp_dir("param_preset_name");
  std::filesystem::create_directories(dir + "/mup");
  ParamTable custom = preset("mup");
  custom.name = "mine";
  scaleinv::testing::write_file(dir + "/sp", param_to_toml(custom));
  scaleinv::testing::write_file(dir + "/mine", param_to_toml(custom));
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  EXPECT_EQ(param_fingerprint(load_param("mup")), param_fingerprint(preset("mup")));
  EXPECT_EQ(param_fingerprint(load_param("sp")), param_fingerprint(preset("sp")));
  EXPECT_EQ(load_param("./sp").name, "mine");
  EXPECT_EQ(load_param("mine").name, "mine");
  EXPECT_THROW(load_param("./mup"), UserError);
  std::filesystem::current_path(cwd);
}

TEST(ParamIO, BadTomlNamesFileAndField) {
  const std::string dir = scaleinv::testing::temp_dir("param_io");
  const std::string good = scaleinv::param_to_toml(preset("mup"));
  struct Case { const char* tag; std::string text; const char* field; };
  std::string misspelt = good;
  misspelt.replace(misspelt.find("\nb = "), 5, "\nbb = ");
  std::string non_number = good;
  non_number.replace(non_number.find("\na = "), 5, "\na = \"half\"\n#");
  std::string missing = good;
  missing.replace(missing.find("[roles.readout]"), 15, "[roles.readout_]");
  // A depth exponent on the readout, which lies outside every residual block (it would be ignored).
  std::string outside = good;
  const size_t readout = outside.find("[roles.readout]");
  outside.replace(outside.find("depth_eps = 0", readout), 13, "depth_eps = 0.5");
  const Case cases[] = {{"misspelt", misspelt, "roles.embedding.bb"},
                        {"nonnumber", non_number, "roles.embedding.a"},
                        {"missing", missing, "roles.readout_"},
                        {"outside", outside, "roles.readout.depth_eps"}};
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.tag + ".toml";
    scaleinv::testing::write_file(path, c.text);
    try {
      param_from_toml_file(path);
      ADD_FAILURE() << c.tag << " was accepted";
    } catch (const UserError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
      EXPECT_NE(msg.find("fix:"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(ParamCli, ShowShiftAndErrors) {
  using scaleinv::testing::run_cli;
  auto r = run_cli("param show mup");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("seed 000 Table 1"), std::string::npos);
  EXPECT_NE(r.out.find("-1/2"), std::string::npos);

  const std::string dir = scaleinv::testing::temp_dir("param_cli");
  r = run_cli("param shift sp --theta hidden=1/2 --theta readout=1/2 --json " + dir + "/s.json");
  EXPECT_EQ(r.code, 0) << r.err;
  std::ifstream in(dir + "/s.json");
  nlohmann::json j;
  in >> j;
  ParamTable shifted = param_from_json(j);
  for (Role role : all_roles()) EXPECT_EQ(shifted.row(role), preset("ntk").row(role)) << role_name(role);

  r = run_cli("param show nosuch");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown preset 'nosuch'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(fix: use one of standard, sp, ntk, mup, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", spectral or a path to a .toml file)"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = run_cli("param shift mup --theta hiddn=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--theta"), std::string::npos) << r.err;
}
