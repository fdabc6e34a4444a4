#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "model/stats.h"
#include "util/files.h"

namespace lol {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the reference implementation

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  int64_t bytes;
};
const std::vector<DtypeInfo>& dtypes() {
  static const std::vector<DtypeInfo> table = {
      {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
      {"F64", torch::kFloat64, 8}, {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
      {"I16", torch::kInt16, 2},   {"I8", torch::kInt8, 1},     {"U8", torch::kUInt8, 1},
      {"BOOL", torch::kBool, 1}};
  return table;
}

const DtypeInfo& dtype_of(torch::ScalarType type) {
  for (const auto& d : dtypes())
    if (d.type == type) return d;
  fail("cannot store tensors of type ", c10::toString(type), " in safetensors");
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const auto& info = dtype_of(t.scalar_type());
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * info.bytes;
    header[name] = {{"dtype", info.name},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));
  std::vector<std::pair<const void*, size_t>> pieces = {{prefix, 8}, {text.data(), text.size()}};
  for (const auto& t : contiguous)
    pieces.emplace_back(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  write_file_atomic(path, pieces);
}

namespace {
// A shape dimension beyond this cannot be real data (it is also where int64 sizes would wrap).
constexpr uint64_t kMaxDimension = uint64_t{1} << 48;

struct Header {
  uint64_t length = 0;                    // bytes of JSON after the 8-byte prefix
  std::vector<SafetensorsEntry> entries;  // ordered by data offset
};

// Reads and validates everything but the tensor data: the header length, the JSON, every
// entry's dtype, shape and offsets (in range, no overlap, no hole, no trailing bytes).
Header read_header(std::istream& in, uint64_t file_size, const std::string& name) {
  LOL_CHECK(file_size >= 8, name, ": truncated: ", file_size,
            " bytes, shorter than the 8-byte header length");
  in.seekg(0);
  unsigned char prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  LOL_CHECK(in.good(), name, ": cannot read the header length");
  Header h;
  for (int i = 0; i < 8; ++i) h.length |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  LOL_CHECK(h.length <= kMaxHeaderBytes, name, ": header length ", h.length,
            " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  LOL_CHECK(h.length <= file_size - 8, name, ": truncated: header needs ", h.length,
            " bytes but the file has ", file_size - 8, " after the length");
  std::string text(h.length, '\0');
  in.read(text.data(), static_cast<std::streamsize>(h.length));
  LOL_CHECK(in.good() || h.length == 0, name, ": cannot read the header");
  json header = json::parse(text, nullptr, false);
  LOL_CHECK(!header.is_discarded() && header.is_object(), name, ": header is not a JSON object");
  const uint64_t data_size = file_size - 8 - h.length;

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") continue;
    auto where = name + ": tensor '" + key + "'";
    LOL_CHECK(value.is_object() && value.contains("dtype") && value["dtype"].is_string() &&
                  value.contains("shape") && value["shape"].is_array() &&
                  value.contains("data_offsets") && value["data_offsets"].is_array() &&
                  value["data_offsets"].size() == 2,
              where, ": entry needs dtype, shape and data_offsets [begin, end]");
    SafetensorsEntry e;
    e.name = key;
    const auto dtype_name = value["dtype"].get<std::string>();
    const DtypeInfo* dtype = nullptr;
    for (const auto& d : dtypes())
      if (dtype_name == d.name) dtype = &d;
    LOL_CHECK(dtype != nullptr, where, ": unsupported dtype '", dtype_name, "'");
    e.dtype = dtype->type;
    uint64_t elements = 1;
    for (const auto& dim : value["shape"]) {
      LOL_CHECK(dim.is_number_unsigned() || (dim.is_number_integer() && dim.get<int64_t>() >= 0),
                where, ": shape must hold non-negative integers, got ", json_text(value["shape"]));
      const uint64_t size = dim.get<uint64_t>();
      LOL_CHECK(size <= kMaxDimension && (size == 0 || elements <= data_size / size), where,
                ": shape ", json_text(value["shape"]), " is larger than the file");
      elements *= size;
      e.shape.push_back(static_cast<int64_t>(size));
    }
    for (const auto& off : value["data_offsets"])
      LOL_CHECK(off.is_number_unsigned() || (off.is_number_integer() && off.get<int64_t>() >= 0),
                where, ": data_offsets must be non-negative integers");
    e.begin = value["data_offsets"][0].get<uint64_t>();
    e.end = value["data_offsets"][1].get<uint64_t>();
    LOL_CHECK(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ",
              e.end, "] fall outside the ", data_size, " data bytes (truncated file?)");
    LOL_CHECK(e.end - e.begin == elements * static_cast<uint64_t>(dtype->bytes), where,
              ": data_offsets span ", e.end - e.begin, " bytes but dtype ", dtype->name,
              " and shape ", shape_string(e.shape), " need ",
              elements * static_cast<uint64_t>(dtype->bytes));
    h.entries.push_back(std::move(e));
  }
  std::sort(h.entries.begin(), h.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  uint64_t expected_begin = 0;
  for (const auto& e : h.entries) {
    LOL_CHECK(e.begin >= expected_begin, name, ": tensor '", e.name,
              "' overlaps the previous tensor's data");
    LOL_CHECK(e.begin == expected_begin, name, ": hole of ", e.begin - expected_begin,
              " bytes in the data before tensor '", e.name, "'");
    expected_begin = e.end;
  }
  LOL_CHECK(expected_begin == data_size, name, ": ", data_size - expected_begin,
            " trailing data bytes belong to no tensor");
  return h;
}

uint64_t stream_size(std::istream& in, const std::string& name) {
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  LOL_CHECK(end >= 0, name, ": cannot tell the file's size");
  return static_cast<uint64_t>(end);
}
}  // namespace

std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOL_CHECK(in.good(), path, ": cannot open");
  return read_header(in, stream_size(in, path), path).entries;
}

TensorMap read_safetensors(std::istream& in, const std::string& name, const TensorFilter& wanted) {
  const auto header = read_header(in, stream_size(in, name), name);
  TensorMap tensors;
  for (const auto& e : header.entries) {
    if (wanted && !wanted(e.name)) continue;
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    in.seekg(static_cast<std::streamoff>(8 + header.length + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    LOL_CHECK(in.good() || e.end == e.begin, name, ": read failed for tensor '", e.name, "'");
    tensors[e.name] = t;
  }
  return tensors;
}

TensorMap read_safetensors(const std::string& path, const TensorFilter& wanted) {
  std::ifstream in(path, std::ios::binary);
  LOL_CHECK(in.good(), path, ": cannot open");
  return read_safetensors(in, path, wanted);
}

void save_model(const LanguageModel& model, const std::string& dir) {
  make_directories(dir);
  TensorMap tensors;
  for (const auto& [name, tensor] : model->named_state())
    tensors[name] = tensor.to(torch::kFloat32);
  write_safetensors(dir + "/model.safetensors", tensors,
                    {{"format", "pt"}, {"family", enum_name(model->config().family)}});
  write_file_atomic(dir + "/config.json", model->config().to_json().dump(2) + "\n");
}

std::string checkpoint_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

std::vector<std::string> checkpoint_names(const std::string& run_dir) {
  const std::string root = run_dir + "/checkpoints";
  std::vector<std::string> names;
  if (!is_directory(root)) return names;
  for (const auto& n : list_directory(root))  // sorted: zero-padded step numbers sort by step
    if (n.rfind("step_", 0) == 0 && n.find(".tmp") == std::string::npos &&
        is_directory(root + "/" + n))
      names.push_back(n);
  return names;
}

std::string latest_checkpoint(const std::string& run_dir) {
  LOL_CHECK(is_directory(run_dir + "/checkpoints"), run_dir,
            ": no checkpoints/ directory (not a training run?)");
  const auto names = checkpoint_names(run_dir);
  LOL_CHECK(!names.empty(), run_dir, "/checkpoints: holds no checkpoint");
  return run_dir + "/checkpoints/" + names.back();
}

std::string resolve_model_dir(const std::string& path) {
  if (path_exists(path + "/config.json")) return path;
  if (is_directory(path + "/checkpoints")) return latest_checkpoint(path);
  fail(path, ": not a model directory (no config.json) nor a training run (no checkpoints/)");
}

ModelConfig load_model_config_from_dir(const std::string& given) {
  const std::string dir = resolve_model_dir(given);
  return read_json_file(dir + "/config.json", ModelConfig::from_json);
}

void load_state(LanguageModel& model, const TensorMap& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  auto expected = model->named_state();
  for (const auto& [name, target] : expected) {
    auto it = tensors.find(name);
    LOL_CHECK(it != tensors.end(), source, ": missing tensor '", name, "' (shape ",
              shape_string(target.sizes().vec()), ")");
    const auto& t = it->second;
    LOL_CHECK(t.sizes() == target.sizes(), source, ": tensor '", name, "' has shape ",
              shape_string(t.sizes().vec()), ", the config needs ",
              shape_string(target.sizes().vec()));
    LOL_CHECK(t.is_floating_point(), source, ": tensor '", name, "' has integer dtype ",
              c10::toString(t.scalar_type()), ", expected a float type");
    target.copy_(t.to(target.scalar_type()));
  }
  if (tensors.size() != expected.size()) {
    for (const auto& item : tensors) {
      const std::string& name = item.first;
      bool known = std::any_of(expected.begin(), expected.end(),
                               [&](const auto& e) { return e.first == name; });
      LOL_CHECK(known, source, ": unexpected tensor '", name, "' (not part of a ",
                enum_name(model->config().family), " model with this config)");
    }
  }
}

LanguageModel load_model(const std::string& given, torch::Device device) {
  const std::string dir = resolve_model_dir(given);
  auto config = load_model_config_from_dir(dir);
  const std::string path = dir + "/model.safetensors";
  LOL_CHECK(path_exists(path), dir, ": no model.safetensors");
  // The weights on disk bound the model the config may ask for: a config.json that describes
  // far more parameters than the file holds is refused before the model is built (allocated).
  // Smaller mismatches are built and then named tensor by tensor by load_state.
  uint64_t stored = 0;
  for (const auto& e : read_safetensors_header(path)) {
    uint64_t elements = 1;
    for (auto size : e.shape) elements *= static_cast<uint64_t>(size);
    stored += elements;
  }
  const auto needed = static_cast<uint64_t>(model_stats(config, config.max_seq_len).stored_params);
  LOL_CHECK(needed <= 2 * stored + (uint64_t{1} << 20), dir, ": config.json describes a ",
            enum_name(config.family), " model of ", needed,
            " parameters but model.safetensors holds ", stored,
            " values: the config and the weights do not belong together");
  auto tensors = read_safetensors(path);
  LanguageModel model(config);
  load_state(model, tensors, path);
  model->to(device);
  return model;
}

}  // namespace lol
