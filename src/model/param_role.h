#pragma once
// What each parameter is for, tagged by the module that registers it (not guessed from its
// name later). One table says what a role means for initialisation, the optimizer and weight
// decay, so a new module states the roles of its tensors and inherits the rest.
#include <map>
#include <string>

namespace lol {

enum class ParamRole {
  kEmbedding,       // token embedding (also the LM head when tied)
  kHead,            // untied LM head
  kMatrix,          // a block's projections that read the residual stream (q, k, v, gate, up)
  kResidualOutput,  // a block's projections that write into it (attn.o, ffn.down)
  kRouter,          // router matrices (the lol window router, MoE token routers)
  kDepthVector,     // e[l], the router input of window 0 at depth l (SPEC 1.4)
  kNormWeight,      // RMSNorm weights
  kFilmScale,       // FiLM gamma (SPEC 1.1)
  kFilmShift,       // FiLM beta
};

enum class Init { kNormal, kNormalResidual, kOnes, kZeros };

struct RoleTraits {
  Init init;   // kNormal: N(0, init_std^2); kNormalResidual: N(0, init_std^2 / (2 blocks))
  bool muon;   // Muon takes it when the optimizer is muon (2-D block matrices); else AdamW
  bool decay;  // decoupled weight decay applies
};

inline RoleTraits role_traits(ParamRole role) {
  switch (role) {
    case ParamRole::kEmbedding:
    case ParamRole::kHead:
    case ParamRole::kRouter:
      return {Init::kNormal, false, true};
    case ParamRole::kMatrix:
      return {Init::kNormal, true, true};
    case ParamRole::kResidualOutput:
      return {Init::kNormalResidual, true, true};
    case ParamRole::kDepthVector:
      return {Init::kNormal, false, false};
    case ParamRole::kNormWeight:
    case ParamRole::kFilmScale:
      return {Init::kOnes, false, false};
    case ParamRole::kFilmShift:
      return {Init::kZeros, false, false};
  }
  return {Init::kZeros, false, false};
}

// The roles of a module's parameters under their names relative to it ("q.weight").
class ParamRoles {
 public:
  void set(const std::string& name, ParamRole role) { roles_[name] = role; }
  // Adds a child module's roles under "prefix.".
  void add(const std::string& prefix, const ParamRoles& child) {
    for (const auto& [name, role] : child.roles_) roles_[prefix + "." + name] = role;
  }
  const std::map<std::string, ParamRole>& all() const { return roles_; }

 private:
  std::map<std::string, ParamRole> roles_;
};

}  // namespace lol
