#pragma once
// Training documents and where they come from. A source is deterministic and seekable: its
// position is a small JSON value that a checkpoint stores, so a resumed run reads exactly the
// documents the uninterrupted run would have read.
#include <memory>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/json.h"

namespace lol {

struct Document {
  std::vector<int64_t> tokens;
  int64_t prompt_len = 0;            // P (SPEC 1.3); 0 for plain text
  std::vector<uint8_t> router_only;  // per token, empty = none (SPEC 1.5)
  std::vector<uint8_t> loss_mask;    // per token: predict this token? empty = all but the first
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  virtual Document next() = 0;
  virtual json position() const = 0;  // where next() reads from
  virtual void seek(const json& position) = 0;
  virtual int64_t vocab_size() const = 0;  // ids are below this
  virtual std::string describe() const = 0;
};

// A non-negative integer `key` of a saved source position (train_state.json), or an error that
// shows the position.
inline int64_t position_field(const json& position, const char* key) {
  LOL_CHECK(position.is_object() && position.contains(key) && position[key].is_number_integer() &&
                position[key].get<int64_t>() >= 0,
            "data position needs \"", key, "\" as an integer >= 0, got ", json_text(position));
  return position[key].get<int64_t>();
}

}  // namespace lol
