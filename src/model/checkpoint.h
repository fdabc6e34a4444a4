#pragma once
// Model directories: config.json + model.safetensors (SPEC 2). Reading validates every byte
// it trusts: header size, JSON, dtypes, shapes, offsets (in range, no overlap, no hole), then
// names and shapes against the model the config describes.
#include <torch/torch.h>

#include <functional>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "model/model.h"

namespace lol {

using TensorMap = std::map<std::string, torch::Tensor>;

// safetensors: 8-byte little-endian header length, JSON header, raw little-endian data.
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Throws lol::Error naming the file and what is wrong. Tensors come back on the CPU with
// their stored dtype (F32, F16, BF16, F64, I64, I32, BOOL...). With `wanted`, only the tensors
// whose names it accepts are read (the header is still validated in full).
using TensorFilter = std::function<bool(const std::string& name)>;
TensorMap read_safetensors(const std::string& path, const TensorFilter& wanted = {});
// The same from a seekable stream (the fuzz target feeds bytes); `name` is used in messages.
TensorMap read_safetensors(std::istream& in, const std::string& name,
                           const TensorFilter& wanted = {});

// One tensor as the header describes it, validated like a full read but without the data.
struct SafetensorsEntry {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};
std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path);

// Training runs keep checkpoints as RUN/checkpoints/step_XXXXXXXX/, each a model directory
// with the training state beside it (docs/training.md).
std::string checkpoint_name(int64_t step);  // "step_00000040"
// Finished checkpoints of a run, oldest first (none when there is no checkpoints/).
std::vector<std::string> checkpoint_names(const std::string& run_dir);
// RUN/checkpoints/<newest>; throws naming what is missing.
std::string latest_checkpoint(const std::string& run_dir);
// `path` when it is a model directory, its latest checkpoint when it is a training run: every
// command that takes --model accepts both.
std::string resolve_model_dir(const std::string& path);

// Writes DIR/config.json and DIR/model.safetensors, each atomically (creates DIR).
void save_model(const LanguageModel& model, const std::string& dir);
// Reads and validates DIR (a model directory or a run: resolve_model_dir), builds the model on
// `device` and loads its weights.
LanguageModel load_model(const std::string& dir, torch::Device device = torch::kCPU);
ModelConfig load_model_config_from_dir(const std::string& dir);
// Copies `tensors` into the model, checking that the names match exactly and shapes agree.
void load_state(LanguageModel& model, const TensorMap& tensors, const std::string& source);

}  // namespace lol
