#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>

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

TensorMap read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  LOL_CHECK(in.good(), path, ": cannot open");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  LOL_CHECK(file_size >= 8, path, ": truncated: ", file_size,
            " bytes, shorter than the 8-byte header length");
  in.seekg(0);
  unsigned char prefix[8];
  in.read(reinterpret_cast<char*>(prefix), 8);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  LOL_CHECK(header_len <= kMaxHeaderBytes, path, ": header length ", header_len,
            " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  LOL_CHECK(header_len <= file_size - 8, path, ": truncated: header needs ", header_len,
            " bytes but the file has ", file_size - 8, " after the length");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  json header = json::parse(text, nullptr, false);
  LOL_CHECK(!header.is_discarded() && header.is_object(), path, ": header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_len;

  struct Entry {
    std::string name;
    const DtypeInfo* dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    auto where = path + ": tensor '" + name + "'";
    LOL_CHECK(value.is_object() && value.contains("dtype") && value["dtype"].is_string() &&
                  value.contains("shape") && value["shape"].is_array() &&
                  value.contains("data_offsets") && value["data_offsets"].is_array() &&
                  value["data_offsets"].size() == 2,
              where, ": entry needs dtype, shape and data_offsets [begin, end]");
    Entry e{name, nullptr, {}, 0, 0};
    const auto dtype_name = value["dtype"].get<std::string>();
    for (const auto& d : dtypes())
      if (dtype_name == d.name) e.dtype = &d;
    LOL_CHECK(e.dtype != nullptr, where, ": unsupported dtype '", dtype_name, "'");
    uint64_t elements = 1;
    for (const auto& dim : value["shape"]) {
      LOL_CHECK(dim.is_number_unsigned() || (dim.is_number_integer() && dim.get<int64_t>() >= 0),
                where, ": shape must hold non-negative integers, got ", value["shape"].dump());
      const uint64_t size = dim.get<uint64_t>();
      LOL_CHECK(size == 0 || elements <= data_size / size, where, ": shape ", value["shape"].dump(),
                " is larger than the file");
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
    LOL_CHECK(e.end - e.begin == elements * e.dtype->bytes, where, ": data_offsets span ",
              e.end - e.begin, " bytes but dtype ", e.dtype->name, " and shape ",
              shape_string(e.shape), " need ", elements * e.dtype->bytes);
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected_begin = 0;
  for (const auto& e : entries) {
    LOL_CHECK(e.begin >= expected_begin, path, ": tensor '", e.name,
              "' overlaps the previous tensor's data");
    LOL_CHECK(e.begin == expected_begin, path, ": hole of ", e.begin - expected_begin,
              " bytes in the data before tensor '", e.name, "'");
    expected_begin = e.end;
  }
  LOL_CHECK(expected_begin == data_size, path, ": ", data_size - expected_begin,
            " trailing data bytes belong to no tensor");

  TensorMap tensors;
  for (const auto& e : entries) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    in.seekg(static_cast<std::streamoff>(8 + header_len + e.begin));
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    LOL_CHECK(in.good(), path, ": read failed for tensor '", e.name, "'");
    tensors[e.name] = t;
  }
  return tensors;
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

ModelConfig load_model_config_from_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  LOL_CHECK(path_exists(path), dir, ": not a model directory (no config.json)");
  json object = json::parse(read_text_file(path), nullptr, false);
  LOL_CHECK(!object.is_discarded(), path, ": not valid JSON");
  try {
    return ModelConfig::from_json(object);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
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
    for (const auto& [name, t] : tensors) {
      bool known = std::any_of(expected.begin(), expected.end(),
                               [&](const auto& e) { return e.first == name; });
      LOL_CHECK(known, source, ": unexpected tensor '", name, "' (not part of a ",
                enum_name(model->config().family), " model with this config)");
    }
  }
}

LanguageModel load_model(const std::string& dir, torch::Device device) {
  auto config = load_model_config_from_dir(dir);
  const std::string path = dir + "/model.safetensors";
  LOL_CHECK(path_exists(path), dir, ": no model.safetensors");
  auto tensors = read_safetensors(path);
  LanguageModel model(config);
  load_state(model, tensors, path);
  model->to(device);
  return model;
}

}  // namespace lol
