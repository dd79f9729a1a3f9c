#include "brain/param/table.h"

#include <cmath>

namespace scaleinv {

namespace {
constexpr const char* kRoleNames[kNumRoles] = {"embedding", "hidden", "readout", "vector", "attn_q",
                                               "attn_k",    "attn_v", "attn_o",  "router", "expert"};
constexpr const char* kFamilyNames[kNumFamilies] = {"sgd", "adam", "adafactor", "muon"};
constexpr const char* kMuonScaleNames[] = {"spectral", "rms"};
}  // namespace

const char* role_name(Role r) { return kRoleNames[static_cast<int>(r)]; }

bool parse_role(const std::string& s, Role* out) {
  for (int i = 0; i < kNumRoles; ++i)
    if (s == kRoleNames[i]) {
      *out = static_cast<Role>(i);
      return true;
    }
  return false;
}

std::array<Role, kNumRoles> all_roles() {
  std::array<Role, kNumRoles> r{};
  for (int i = 0; i < kNumRoles; ++i) r[i] = static_cast<Role>(i);
  return r;
}

const char* family_name(OptFamily f) { return kFamilyNames[static_cast<int>(f)]; }

const char* family_abbrev(OptFamily f) {
  static const char* const kAbbrev[kNumFamilies] = {"sgd", "adm", "afc", "muo"};
  return kAbbrev[static_cast<int>(f)];
}

const std::vector<RoleColumn>& role_columns() {
  using E = RoleExponents;
  static const std::vector<RoleColumn> kColumns = {
      // key        label    scalar        families      required omitted_when_zero shown group_start in_block_only
      {"a", "a", &E::a, nullptr, true, false, true, false, false},
      {"b", "b", &E::b, nullptr, true, false, true, false, false},
      {"lr", "c", nullptr, &E::c, true, false, true, true, false},
      {"wd", "wd", &E::wd, nullptr, false, false, true, true, false},
      {"eps", "eps", &E::eps, nullptr, false, false, true, false, false},
      {"depth_lr", "k", nullptr, &E::depth_lr, false, false, true, true, true},
      {"depth_wd", "k_wd", &E::depth_wd, nullptr, false, false, true, false, true},
      {"depth_eps", "k_eps", &E::depth_eps, nullptr, false, false, true, false, true},
      {"unit", "unit", &E::unit, nullptr, false, true, false, false, false},
      {"experts_lr", "E", nullptr, &E::experts_lr, false, true, false, false, false},
  };
  return kColumns;
}

bool parse_family(const std::string& s, OptFamily* out) {
  for (int i = 0; i < kNumFamilies; ++i)
    if (s == kFamilyNames[i]) {
      *out = static_cast<OptFamily>(i);
      return true;
    }
  return false;
}

bool muon_orthogonalized(Role r) {
  return r == Role::Hidden || r == Role::Expert || (r >= Role::AttnQ && r <= Role::AttnO);
}

const char* muon_scale_name(MuonScale s) { return kMuonScaleNames[static_cast<int>(s)]; }

bool parse_muon_scale(const std::string& s, MuonScale* out) {
  for (int i = 0; i < 2; ++i)
    if (s == kMuonScaleNames[i]) {
      *out = static_cast<MuonScale>(i);
      return true;
    }
  return false;
}

void derive_muon_column(RoleExponents& e, Role r) {
  const int adam = static_cast<int>(OptFamily::Adam), muon = static_cast<int>(OptFamily::Muon);
  e.c[muon] = muon_orthogonalized(r) ? e.c[adam] - 1.0 : e.c[adam];
  e.depth_lr[muon] = e.depth_lr[adam];
}

TensorScale tensor_scale(const ParamTable& t, Role role, OptFamily f, double m, double k, bool in_block,
                         double base_std, double e_mult) {
  const RoleExponents& e = t.row(role);
  const int fi = static_cast<int>(f);
  const double kk = in_block ? k : 1.0;
  TensorScale s;
  s.multiplier = std::pow(m, -e.a);
  s.init = std::pow(m, -e.b);
  s.lr = std::pow(m, -e.c[fi]) * std::pow(kk, -e.depth_lr[fi]) * std::pow(e_mult, -e.experts_lr[fi]);
  s.wd = std::pow(m, -e.wd) * std::pow(kk, -e.depth_wd);
  s.eps = std::pow(m, -e.eps) * std::pow(kk, -e.depth_eps);
  s.unit = (e.unit == 0 || base_std <= 0) ? 1.0 : std::pow(base_std, e.unit);
  return s;
}

RoleExponents default_row(const ParamTable& t, Role r) {
  if (r == Role::Router) return t.row(Role::Readout);
  // The experts are hidden matrices for Muon too (each orthogonalized alone): the hidden row as it
  // stands, its Muon column included (`standard`'s one global LR stays one).
  if (r == Role::Expert) return t.row(Role::Hidden);
  if (r >= Role::AttnQ && r <= Role::AttnO) {
    RoleExponents e = t.row(Role::Hidden);
    derive_muon_column(e, r);
    return e;
  }
  return t.row(r);
}

bool role_is_default(const ParamTable& t, Role r) {
  // Only the mixture-of-experts rows are left out where implied; every other row is always written.
  return r >= Role::Router && t.row(r) == default_row(t, r);
}

bool is_moe_table(const ParamTable& t) {
  for (Role r : {Role::Router, Role::Expert})
    for (double x : t.row(r).experts_lr)
      if (x != 0) return true;
  return false;
}

double branch_multiplier(const ParamTable& t, double k) { return std::pow(k, -t.branch); }

double shortcut_multiplier(const ParamTable& t, double depth) { return std::pow(depth, t.shortcut); }

double attn_logit_scale(const ParamTable& t, double d_head, double base_d_head) {
  return std::pow(base_d_head, -0.5) * std::pow(d_head / base_d_head, -t.attn_logit);
}

ParamTable shift(const ParamTable& t, const std::array<double, kNumRoles>& theta) {
  // seed 000 eq. (28): a <- a + theta, b <- b - theta, c <- c - theta (Adam-like).
  // SGD: dW = eta W', and W' picks up d^-theta from the multiplier while W must grow by d^theta,
  // so c_sgd moves by 2 theta. Adafactor's update is relative to RMS(W): c unchanged.
  // Adam's epsilon tracks the raw gradient, which shrinks by d^-theta: eps <- eps + theta.
  ParamTable s = t;
  for (int i = 0; i < kNumRoles; ++i) {
    RoleExponents& e = s.roles[i];
    const double th = theta[i];
    e.a += th;
    e.b -= th;
    e.c[static_cast<int>(OptFamily::Adam)] -= th;
    e.c[static_cast<int>(OptFamily::Muon)] -= th;  // scale-invariant update, as Adam (table.h)
    e.c[static_cast<int>(OptFamily::SGD)] -= 2 * th;
    e.eps += th;
  }
  return s;
}

}  // namespace scaleinv
