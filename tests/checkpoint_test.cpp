#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "train/precision.h"
#include "train/trainer.h"
#include "util/files.h"

namespace lol {
namespace {

namespace fs = std::filesystem;
using testing::make_model;
using testing::max_abs_diff;
using testing::tiny_config;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lol_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    remove_tree(dir_.string());
  }
  void TearDown() override { remove_tree(dir_.string()); }

  // Writes a file made of a header length, a header and `data_bytes` zero bytes.
  std::string write_raw(const std::string& header, uint64_t declared_len, size_t data_bytes) {
    fs::create_directories(dir_);
    std::string path = (dir_ / "raw.safetensors").string();
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(declared_len >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
    return path;
  }
  std::string error_of(const std::string& path) {
    return testing::error_message([&] { read_safetensors(path); });
  }
  std::string header_case(const std::string& header, size_t data_bytes) {
    return error_of(write_raw(header, header.size(), data_bytes));
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, SaveLoadGivesIdenticalLogitsForEveryFamily) {
  for (Family family : testing::all_families()) {
    auto c = tiny_config(family);
    c.router_tied = family != Family::kLol;
    c.tie_embeddings = family == Family::kDense;
    auto model = make_model(c, 42);
    save_model(model, dir_.string());
    auto loaded = load_model(dir_.string(), testing::device());
    EXPECT_EQ(loaded->config().to_json(), c.to_json());
    torch::NoGradGuard no_grad;
    Layout layout(Batch::single({1, 5, 7, 2, 9, 3, 3, 8, 1}, 2, {3}), c.vocab_size,
                  testing::device());
    EXPECT_EQ(max_abs_diff(model->forward(layout).logits, loaded->forward(layout).logits), 0.0)
        << enum_name(family);
  }
}

TEST_F(CheckpointTest, CanonicalNamesAndShapesOfTheLolFamily) {
  auto c = tiny_config();
  c.router_tied = false;
  c.tie_embeddings = false;
  auto model = make_model(c, 1);
  save_model(model, dir_.string());
  auto tensors = read_safetensors((dir_ / "model.safetensors").string());
  const int64_t d = c.d_model, dh = c.head_dim();
  std::map<std::string, std::vector<int64_t>> expected = {
      {"embed.weight", {c.vocab_size, d}},
      {"library.2.attn_norm.weight", {d}},
      {"library.0.attn.q.weight", {c.n_heads * dh, d}},
      {"prelude.0.attn.k.weight", {c.n_kv_heads * dh, d}},
      {"coda.0.attn.v.weight", {c.n_kv_heads * dh, d}},
      {"library.1.attn.o.weight", {d, c.n_heads * dh}},
      {"library.1.ffn_norm.weight", {d}},
      {"library.1.ffn.gate.weight", {c.ffn_hidden, d}},
      {"library.1.ffn.up.weight", {c.ffn_hidden, d}},
      {"library.1.ffn.down.weight", {d, c.ffn_hidden}},
      {"core.film.attn.gamma", {c.core_depth, d}},
      {"core.film.ffn.beta", {c.core_depth, d}},
      {"router.weight", {c.core_depth, c.library_size, d}},
      {"router.depth_vectors", {c.core_depth, d}},
      {"router.balance_bias", {c.library_size}},
      {"norm.weight", {d}},
      {"lm_head.weight", {c.vocab_size, d}},
  };
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(tensors.count(name)) << name;
    EXPECT_EQ(tensors[name].sizes().vec(), shape) << name;
    EXPECT_EQ(tensors[name].scalar_type(), torch::kFloat32);
  }
  // balance_per_depth: one bias row per routed depth under the same name; it loads back row for
  // row, and a config without the option names the shape it needs.
  c.balance_per_depth = true;
  auto per_depth = make_model(c, 1);
  {
    torch::NoGradGuard no_grad;
    per_depth->core().balance_biases()[2].fill_(0.5);
  }
  save_model(per_depth, dir_.string());
  tensors = read_safetensors((dir_ / "model.safetensors").string());
  EXPECT_EQ(tensors["router.balance_bias"].sizes().vec(),
            (std::vector<int64_t>{c.core_depth, c.library_size}));
  auto loaded = load_model(dir_.string());
  EXPECT_TRUE(torch::equal(loaded->core().balance_biases()[2], torch::full({c.library_size}, 0.5)));
  EXPECT_TRUE(torch::equal(loaded->core().balance_biases()[1], torch::zeros({c.library_size})));
  c.balance_per_depth = false;
  write_file_atomic((dir_ / "config.json").string(), c.to_json().dump());
  try {
    load_model(dir_.string());
    ADD_FAILURE() << "a (D, L) bias loaded into a model with one bias";
  } catch (const Error& e) {
    const auto D = std::to_string(c.core_depth), L = std::to_string(c.library_size);
    EXPECT_NE(std::string(e.what()).find("tensor 'router.balance_bias' has shape [" + D + ", " + L +
                                         "], the config needs [" + L + "]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, MalformedFilesGiveTheirOwnErrors) {
  auto contains = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  EXPECT_PRED2(contains, error_of((dir_ / "missing").string()), "cannot open");
  // Shorter than the length prefix.
  fs::create_directories(dir_);
  { std::ofstream((dir_ / "short").string()) << "abc"; }
  EXPECT_PRED2(contains, error_of((dir_ / "short").string()), "truncated");
  EXPECT_PRED2(contains, error_of(write_raw("{}", 1ull << 40, 0)), "exceeds the limit");
  EXPECT_PRED2(contains, error_of(write_raw("{}", 500, 0)), "truncated: header needs 500");
  EXPECT_PRED2(contains, header_case("{not json", 0), "not a JSON object");
  EXPECT_PRED2(contains, header_case(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
               "needs dtype, shape and data_offsets");
  EXPECT_PRED2(contains, header_case(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
               "unsupported dtype");
  EXPECT_PRED2(contains,
               header_case(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
               "non-negative");
  EXPECT_PRED2(contains,
               header_case(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8),
               "fall outside");
  EXPECT_PRED2(contains,
               header_case(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               "need 12");
  EXPECT_PRED2(
      contains,
      header_case(
          R"({"a":{"dtype":"F32","shape":[1000000000000,1000000000000],"data_offsets":[0,8]}})", 8),
      "larger than the file");
  EXPECT_PRED2(
      contains,
      header_case(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          12),
      "overlaps");
  EXPECT_PRED2(contains,
               header_case(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "hole");
  EXPECT_PRED2(contains,
               header_case(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
               "trailing");
}

// A filtered read gives exactly the accepted tensors, equal to a full read's, and still
// validates the whole header.
TEST_F(CheckpointTest, AFilteredReadGivesOnlyTheWantedTensors) {
  const auto c = tiny_config();
  auto model = make_model(c, 3);
  const auto bias = torch::arange(c.library_size, torch::kFloat32) - 1.0;
  {
    torch::NoGradGuard no_grad;
    model->core().balance_biases()[0].copy_(bias);
  }
  save_model(model, dir_.string());
  const auto path = (dir_ / "model.safetensors").string();
  const auto all = read_safetensors(path);
  auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  const auto some = read_safetensors(path, [&](const std::string& name) {
    return ends_with(name, "norm.weight") || name == "router.balance_bias";
  });
  size_t expected = 0;
  for (const auto& [name, t] : all) {
    const bool wanted = ends_with(name, "norm.weight") || name == "router.balance_bias";
    expected += wanted;
    ASSERT_EQ(some.count(name), wanted ? 1u : 0u) << name;
    if (wanted) {
      EXPECT_TRUE(torch::equal(some.at(name), t)) << name;
    }
  }
  EXPECT_EQ(some.size(), expected);
  EXPECT_GT(expected, 2u);
  EXPECT_TRUE(torch::equal(some.at("router.balance_bias"), bias));
  EXPECT_TRUE(read_safetensors(path, [](const std::string&) { return false; }).empty());
  // A header that claims more data than the file holds is refused, whatever is asked for.
  const auto bad = write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 55, 4);
  EXPECT_THROW(read_safetensors(bad, [](const std::string&) { return false; }), Error);
}

TEST_F(CheckpointTest, ModelDirectoryMismatchesNameTheTensor) {
  auto c = tiny_config();
  auto model = make_model(c, 2);
  save_model(model, dir_.string());
  auto path = (dir_ / "model.safetensors").string();
  auto tensors = read_safetensors(path);
  auto expect_error = [&](const TensorMap& t, const std::string& part) {
    write_safetensors(path, t);
    try {
      load_model(dir_.string());
      ADD_FAILURE() << "no error, expected " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto missing = tensors;
  missing.erase("library.1.attn.q.weight");
  expect_error(missing, "missing tensor 'library.1.attn.q.weight'");
  auto wrong_shape = tensors;
  wrong_shape["norm.weight"] = torch::ones({c.d_model + 1});
  expect_error(wrong_shape, "tensor 'norm.weight' has shape [17], the config needs [16]");
  auto extra = tensors;
  extra["library.9.attn.q.weight"] = torch::ones({2});
  expect_error(extra, "unexpected tensor 'library.9.attn.q.weight'");
  auto ints = tensors;
  ints["norm.weight"] = torch::ones({c.d_model}, torch::kInt64);
  expect_error(ints, "integer dtype");
  // A config asking for far more than the weights hold is refused before the model is built
  // (library_size 1000 of these blocks would be 20 times the file).
  write_safetensors(path, tensors);
  auto big = c;
  big.library_size = 1000;
  write_file_atomic((dir_ / "config.json").string(), big.to_json().dump());
  expect_error(tensors, "config.json describes a lol model of");
  write_file_atomic((dir_ / "config.json").string(), c.to_json().dump());
  // Half-precision weights load (converted), and the config is validated with its path.
  auto half = tensors;
  half["norm.weight"] = tensors["norm.weight"].to(torch::kBFloat16);
  write_safetensors(path, half);
  EXPECT_NO_THROW(load_model(dir_.string()));
  write_file_atomic((dir_ / "config.json").string(), std::string(R"({"window": 0})"));
  try {
    load_model(dir_.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("window must be > 0, got 0"), std::string::npos)
        << e.what();
  }
}

TEST(Files, RemoveTreeDeletesNestedEntriesButNeverFollowsLinks) {
  const auto root = fs::temp_directory_path() / ("lol_files_" + std::to_string(::getpid()));
  const auto outside = root.string() + "_outside";
  remove_tree(root.string());
  remove_tree(outside);
  make_directories((root / "a" / "b").string());
  make_directories(outside);
  write_file_atomic((root / "a" / "b" / "x.bin").string(), std::string("x"));
  write_file_atomic((root / "top.txt").string(), std::string("t"));
  write_file_atomic(outside + "/keep.txt", std::string("k"));
  fs::create_directory_symlink(outside, root / "link");
  EXPECT_EQ(list_directory(root.string()), (std::vector<std::string>{"a", "link", "top.txt"}));
  EXPECT_TRUE(is_directory((root / "a").string()));
  EXPECT_FALSE(is_directory((root / "top.txt").string()));
  remove_tree(root.string());
  EXPECT_FALSE(path_exists(root.string()));
  EXPECT_TRUE(path_exists(outside + "/keep.txt"));  // the link went, not what it pointed to
  remove_tree(root.string());                       // already gone: nothing to do
  EXPECT_THROW(list_directory(root.string()), Error);
  remove_tree(outside);
}

TEST(Config, ValidationNamesTheFieldAndOverridesApply) {
  auto c = tiny_config();
  apply_override(ModelConfig::fields(), "window=8", c);
  apply_override(ModelConfig::fields(), "family=dense", c);
  apply_override(ModelConfig::fields(), "router_tied=false", c);
  EXPECT_EQ(c.window, 8);
  EXPECT_EQ(c.family, Family::kDense);
  EXPECT_FALSE(c.router_tied);
  auto message = [&](const std::string& assignment) {
    return testing::error_message([&] {
      ModelConfig copy = tiny_config();
      apply_override(ModelConfig::fields(), assignment, copy);
      copy.validate();
    });
  };
  EXPECT_EQ(message("window=abc"), "config key 'window' must be an integer, got \"abc\"");
  EXPECT_EQ(message("windw=3"), message("windw=3"));
  EXPECT_NE(message("windw=3").find("unknown config key 'windw'"), std::string::npos);
  EXPECT_EQ(message("n_kv_heads=3"), "n_heads (4) must be a multiple of n_kv_heads (3)");
  EXPECT_EQ(message("family=rnn"), "family must be one of lol, dense, looped, moe; got 'rnn'");
  EXPECT_EQ(message("stride=-1"), "stride must be >= 0, got -1");
  EXPECT_EQ(message("window=1.5"), "config key 'window' must be an integer, got 1.5");
  EXPECT_EQ(message("novalue"), "override must look like key=value, got 'novalue'");
  EXPECT_EQ(message("router_skip_share=0.25"),
            "router_skip_share needs router_skip=true (a skip choice to steer)");
  EXPECT_EQ(testing::error_message([&] {
              ModelConfig copy = tiny_config();
              copy.router_skip = true;
              copy.router_skip_share = 1.0;
              copy.validate();
            }),
            "router_skip_share must be in [0, 1), got 1");
  // JSON round trip.
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json());
}

// The fuzzer's dictionary (fuzz/dict/config.dict) names every field and enumeration word the
// config readers accept, so a field added to a table without the dictionary fails here.
bool in_dictionary(const std::string& dict, const std::string& word) {
  return dict.find("\"\\\"" + word + "\\\"\"\n") != std::string::npos;  // the entry "\"word\""
}

template <typename E>
void expect_words_in_dictionary(const std::string& dict) {
  for (const auto& [value, name] : enum_names<E>())
    EXPECT_TRUE(in_dictionary(dict, name)) << name << " is not in fuzz/dict/config.dict";
}

TEST(Config, FuzzDictionaryListsEveryFieldAndWord) {
  const std::string dict = read_text_file(std::string(LOL_FUZZ_DICT_DIR) + "/config.dict");
  for (const auto& f : ModelConfig::fields()) EXPECT_TRUE(in_dictionary(dict, f.name)) << f.name;
  for (const auto& f : TrainConfig::fields()) EXPECT_TRUE(in_dictionary(dict, f.name)) << f.name;
  const json state = TrainState{}.to_json();
  for (const auto& key : state.items()) EXPECT_TRUE(in_dictionary(dict, key.key())) << key.key();
  expect_words_in_dictionary<Family>(dict);
  expect_words_in_dictionary<CoreAttention>(dict);
  expect_words_in_dictionary<BalanceCount>(dict);
  expect_words_in_dictionary<BalanceSpace>(dict);
  expect_words_in_dictionary<Optimizer>(dict);
  expect_words_in_dictionary<Schedule>(dict);
  expect_words_in_dictionary<GrowShape>(dict);
  expect_words_in_dictionary<Precision>(dict);
  EXPECT_FALSE(in_dictionary(dict, "no_such_field"));
  EXPECT_FALSE(in_dictionary(dict, "famil"));  // whole entries, not prefixes
}

TEST(Config, ShippedPresetsLoadAndBuild) {
  for (std::string name : {"tiny", "maze-demo", "maze-cpu", "sudoku-demo", "sudoku-cpu", "text-cpu",
                           "text-gpu", "paper-360m", "paper-1b"}) {
    ModelConfig c;
    ASSERT_NO_THROW(c = load_model_config(name)) << name;
    if (name == "tiny") {
      LanguageModel model(c);
      model->initialize(0);
    }
  }
}

}  // namespace
}  // namespace lol
