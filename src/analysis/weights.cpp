#include "analysis/weights.h"

#include <algorithm>

#include "util/error.h"

namespace lol {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The rows of a tensor viewed as [-1, width], in float64.
std::vector<std::vector<double>> rows_of(const torch::Tensor& tensor, int64_t width) {
  const auto t = tensor.to(torch::kFloat64).contiguous().reshape({-1, width});
  std::vector<std::vector<double>> rows;
  for (int64_t r = 0; r < t.size(0); ++r) {
    const double* data = t[r].data_ptr<double>();
    rows.emplace_back(data, data + width);
  }
  return rows;
}

std::vector<double> to_vector(const torch::Tensor& t) {
  const auto c = t.to(torch::kFloat64).contiguous();
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

// "name" for a single row, "name[1]".. "name[n]" for several (1-based: depths and layers).
std::string row_name(const std::string& name, size_t r, size_t count) {
  return count == 1 ? name : name + "[" + std::to_string(r + 1) + "]";
}

}  // namespace

double value_range(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  return *hi - *lo;
}

bool bias_at_probability_limit(const std::vector<double>& bias) {
  return value_range(bias) >= 0.99;  // 0 for an empty bias
}

bool is_routing_weight(const std::string& name) {
  return ends_with(name, "balance_bias") || name == "router.skip_bias" ||
         ends_with(name, "router.weight") || name == "router.depth_vectors" ||
         name.rfind("core.film.", 0) == 0;
}

RoutingWeights routing_weights(const TensorMap& tensors) {
  RoutingWeights w;
  for (const auto& [name, tensor] : tensors) {
    if (ends_with(name, "balance_bias")) {
      LOL_CHECK(tensor.dim() == 1 || tensor.dim() == 2, name,
                ": a balance bias is [L] or [D, L], got ", tensor.dim(), " dimensions");
      const auto rows = rows_of(tensor, tensor.size(-1));
      for (size_t r = 0; r < rows.size(); ++r)
        w.balance_bias.push_back(
            {tensor.dim() == 2 ? name + "[" + std::to_string(r + 1) + "]" : name, rows[r]});
    } else if (name == "router.skip_bias") {
      LOL_CHECK(tensor.dim() == 1, name, ": the skip's bias is [1] or [D], got ", tensor.dim(),
                " dimensions");
      w.skip_bias.push_back({name, to_vector(tensor.to(torch::kFloat64))});
    } else if (ends_with(name, "router.weight")) {
      LOL_CHECK(tensor.dim() == 2 || tensor.dim() == 3, name,
                ": a router weight is [L, d] or [R, L, d], got ", tensor.dim(), " dimensions");
      const auto norms = tensor.to(torch::kFloat64).norm(2, -1).reshape({-1, tensor.size(-2)});
      for (int64_t r = 0; r < norms.size(0); ++r)
        w.router_rows.push_back(
            {row_name(name, static_cast<size_t>(r), static_cast<size_t>(norms.size(0))),
             to_vector(norms[r])});
    } else if (name == "router.depth_vectors") {
      LOL_CHECK(tensor.dim() == 2, name, ": depth vectors are [D, d], got ", tensor.dim(),
                " dimensions");
      w.depth_vectors.push_back({name, to_vector(tensor.to(torch::kFloat64).norm(2, -1))});
    }
  }
  // FiLM in a fixed order, each as its distance from the identity it starts at.
  for (const std::string slot : {"attn", "ffn"})
    for (const std::string part : {"gamma", "beta"}) {
      const auto it = tensors.find("core.film." + slot + "." + part);
      if (it == tensors.end()) continue;
      LOL_CHECK(it->second.dim() == 2, it->first, ": FiLM is [D, d], got ", it->second.dim(),
                " dimensions");
      auto t = it->second.to(torch::kFloat64);
      if (part == "gamma") t = t - 1.0;
      w.film.push_back({slot + "." + part + (part == "gamma" ? " - 1" : ""),
                        to_vector(t.pow(2).mean(-1).sqrt())});
    }
  return w;
}

bool RoutingWeights::empty() const {
  return balance_bias.empty() && skip_bias.empty() && film.empty() && depth_vectors.empty() &&
         router_rows.empty();
}

json RoutingWeights::to_json() const {
  json j = json::object();
  // Rows that share a tensor ("x[1]", "x[2]") gather under its name as a list of rows.
  auto grouped = [](const std::vector<WeightRow>& rows, bool single_as_row) {
    json g = json::object();
    for (const auto& r : rows) {
      const auto bracket = r.name.find('[');
      if (bracket == std::string::npos && single_as_row) {
        g[r.name] = r.values;
      } else {
        auto& list = g[r.name.substr(0, bracket)];
        if (list.is_null()) list = json::array();
        list.push_back(r.values);
      }
    }
    return g;
  };
  if (!balance_bias.empty()) j["balance_bias"] = grouped(balance_bias, true);
  if (!skip_bias.empty()) j["skip_bias"] = skip_bias.front().values;
  if (!film.empty()) {
    json& f = j["film_rms"] = json::object();
    for (const auto& r : film) f[r.name] = r.values;
  }
  if (!depth_vectors.empty()) j["router_depth_vector_norms"] = depth_vectors.front().values;
  if (!router_rows.empty()) j["router_row_norms"] = grouped(router_rows, false);
  return j;
}

}  // namespace lol
