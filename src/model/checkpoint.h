#pragma once
// Model directories: config.json + model.safetensors (SPEC 2). Reading validates every byte
// it trusts: header size, JSON, dtypes, shapes, offsets (in range, no overlap, no hole), then
// names and shapes against the model the config describes.
#include <torch/torch.h>

#include <map>
#include <string>

#include "model/model.h"

namespace lol {

using TensorMap = std::map<std::string, torch::Tensor>;

// safetensors: 8-byte little-endian header length, JSON header, raw little-endian data.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Throws lol::Error naming the file and what is wrong. Tensors come back on the CPU with
// their stored dtype (F32, F16, BF16, F64, I64, I32, BOOL...).
TensorMap read_safetensors(const std::string& path);

// Writes DIR/config.json and DIR/model.safetensors, each atomically (creates DIR).
void save_model(const LanguageModel& model, const std::string& dir);
// Reads and validates DIR, builds the model on `device` and loads its weights.
LanguageModel load_model(const std::string& dir, torch::Device device = torch::kCPU);
ModelConfig load_model_config_from_dir(const std::string& dir);
// Copies `tensors` into the model, checking that the names match exactly and shapes agree.
void load_state(LanguageModel& model, const TensorMap& tensors, const std::string& source);

}  // namespace lol
