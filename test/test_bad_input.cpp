// Bad input: each case gives one clear sentence naming the file and exit code 1, never a crash.
// (scripts/test.sh also runs these under AddressSanitizer + UBSan.)
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "test_util.h"

using nlohmann::json;
namespace t = ptc::test;

namespace {

// Runs `ptc inspect` on `path` and checks: exit 1, one line starting "error: <path>", containing
// `fragment`.
void expect_user_error(const std::string& path, const std::string& fragment, const std::string& extra_args = "") {
  auto r = t::run_ptc("inspect " + extra_args + " '" + path + "'");
  INFO("output: " << r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.rfind("error: " + path, 0) == 0);
  CHECK(r.output.find(fragment) != std::string::npos);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
}

std::string tmp(const std::string& name) { return t::temp_dir() + "/" + name; }

// mlp.pt2 with model.json passed through `edit`.
std::string with_model_json(const std::string& name, const std::function<std::string(std::string)>& edit) {
  std::string out = tmp(name);
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [&](const std::string& entry, const std::string& bytes) -> std::optional<std::string> {
    if (entry == "mlp/models/model.json") return edit(bytes);
    return bytes;
  });
  return out;
}

std::string with_json_edit(const std::string& name, const std::function<void(json&)>& edit) {
  return with_model_json(name, [&](std::string s) {
    json j = json::parse(s);
    edit(j);
    return j.dump();
  });
}

}  // namespace

TEST_CASE("bad input: a path that does not exist", "[bad]") {
  expect_user_error(tmp("no-such-model.pt2"), "cannot open: No such file or directory");
}

TEST_CASE("bad input: a directory", "[bad]") { expect_user_error(t::temp_dir(), "is a directory"); }

TEST_CASE("bad input: an empty file and a text file", "[bad]") {
  t::write_file(tmp("empty.pt2"), "");
  expect_user_error(tmp("empty.pt2"), "not a model archive");
  t::write_file(tmp("text.pt"), "this is not a model\n");
  expect_user_error(tmp("text.pt"), "not a model archive");
}

TEST_CASE("bad input: a truncated zip", "[bad]") {
  std::string bytes = t::read_file(t::fixture("mlp.pt2"));
  t::write_file(tmp("truncated.pt2"), bytes.substr(0, bytes.size() / 2));
  expect_user_error(tmp("truncated.pt2"), "not a zip archive");
  // Cut inside the central directory too.
  t::write_file(tmp("truncated2.pt2"), bytes.substr(0, bytes.size() - 30));
  expect_user_error(tmp("truncated2.pt2"), "zip");
}

TEST_CASE("bad input: a corrupt zip", "[bad]") {
  std::string bytes = t::read_file(t::fixture("mlp.pt2"));
  // Overwrite the central directory (the last ~2 KiB) with garbage.
  for (size_t i = bytes.size() - 2000; i < bytes.size() - 22; ++i) bytes[i] = static_cast<char>(i * 7);
  t::write_file(tmp("corrupt.pt2"), bytes);
  expect_user_error(tmp("corrupt.pt2"), "zip");
}

TEST_CASE("bad input: an archive without model.json", "[bad]") {
  std::string out = tmp("no_model_json.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string& e, const std::string& b) -> std::optional<std::string> {
    if (e == "mlp/models/model.json") return std::nullopt;
    return b;
  });
  expect_user_error(out, "not a torch.export archive: it has no mlp/models/model.json");
}

TEST_CASE("bad input: model.json that is not JSON", "[bad]") {
  expect_user_error(with_model_json("bad_json.pt2", [](std::string s) { return s.substr(0, s.size() / 2); }),
                    "models/model.json is not valid JSON");
}

TEST_CASE("bad input: deeply nested JSON", "[bad]") {
  expect_user_error(with_model_json("deep_json.pt2", [](std::string) { return std::string(100000, '[') + std::string(100000, ']'); }),
                    "nests 100000 levels deep");
}

TEST_CASE("bad input: an unknown schema major version", "[bad]") {
  expect_user_error(with_json_edit("schema9.pt2", [](json& j) { j["schema_version"]["major"] = 9; }),
                    "schema version 9");
}

TEST_CASE("bad input: wrong types in model.json", "[bad]") {
  expect_user_error(with_json_edit("wrong_type.pt2", [](json& j) {
                      j["graph_module"]["graph"]["tensor_values"]["x"]["dtype"] = "float";
                    }),
                    "tensor 'x'.dtype must be an integer");
  expect_user_error(with_json_edit("wrong_type2.pt2", [](json& j) {
                      j["graph_module"]["graph"]["nodes"][0]["inputs"] = 5;
                    }),
                    "'inputs' must be a list");
  expect_user_error(with_json_edit("wrong_type3.pt2", [](json& j) { j["schema_version"] = "8.17"; }),
                    "schema_version");
}

TEST_CASE("bad input: a node error names the node and the user's source line", "[bad]") {
  expect_user_error(with_json_edit("missing_arg.pt2", [](json& j) {
                      auto& inputs = j["graph_module"]["graph"]["nodes"][0]["inputs"];
                      inputs.erase(inputs.begin() + 1);  // linear without its weight
                    }),
                    "node 'linear' (aten::linear) at scripts/export_models.py:");
  expect_user_error(with_json_edit("dangling.pt2", [](json& j) {
                      j["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"]["as_tensor"]["name"] = "ghost";
                    }),
                    "uses value 'ghost' before it is defined");
}

TEST_CASE("bad input: a missing weight file", "[bad]") {
  std::string out = tmp("missing_weight.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string& e, const std::string& b) -> std::optional<std::string> {
    if (e == "mlp/data/weights/weight_0") return std::nullopt;
    return b;
  });
  expect_user_error(out, "the archive has no file data/weights/weight_0");
}

TEST_CASE("bad input: a weight file of the wrong size", "[bad]") {
  std::string out = tmp("short_weight.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string& e, const std::string& b) -> std::optional<std::string> {
    if (e == "mlp/data/weights/weight_0") return b.substr(0, b.size() / 2);
    return b;
  });
  expect_user_error(out, "reach past its");
}

TEST_CASE("bad input: zip entries that escape the archive root", "[bad]") {
  std::string out = tmp("escape.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string&, const std::string& b) { return std::optional<std::string>(b); },
                 {{"mlp/../../etc/passwd", "x"}});
  expect_user_error(out, "escapes the archive root");
}

TEST_CASE("bad input: a .pt that is not TorchScript", "[bad]") {
  std::string out = tmp("checkpoint.pt");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string&, const std::string&) { return std::optional<std::string>(); },
                 {{"archive/data.pkl", "\x80\x02}q\x00."}, {"archive/version", "3\n"}});
  expect_user_error(out, "torch.save checkpoint");
}

TEST_CASE("bad input: the old pickled-weights layouts are refused by name", "[bad]") {
  std::string out = tmp("old_layout.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [](const std::string&, const std::string& b) { return std::optional<std::string>(b); },
                 {{"mlp/data/weights/model.pt", "pickle"}});
  expect_user_error(out, "torch 2.8");
  std::string flat = tmp("flat_layout.pt2");
  t::rewrite_zip(t::fixture("mlp.pt2"), flat, [](const std::string&, const std::string&) { return std::optional<std::string>(); },
                 {{"serialized_exported_program.json", "{}"}, {"serialized_state_dict.pt", "x"}, {"version", "1"}});
  expect_user_error(flat, "torch 2.7 or older");
}

TEST_CASE("bad input: TorchScript-only shape options given for a .pt2", "[bad]") {
  expect_user_error(t::fixture("mlp_dyn.pt2"), "--input-shape and --symbol are for TorchScript (.pt) models", "--symbol s77=1..8");
  auto r = t::run_ptc("compile " + t::fixture("mlp_dyn.pt2") + " -o " + tmp("shape_opts.so") + " --input-shape 4x64");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("a torch.export archive carries its shapes") != std::string::npos);
}

// ---- hostile archives (fuzzing's explicit cases, docs/reliability.md) ------------------------

namespace {

// mlp.pt2 with its weights config passed through `edit`.
std::string with_weights_config_edit(const std::string& name, const std::function<void(json&)>& edit) {
  std::string out = tmp(name);
  t::rewrite_zip(t::fixture("mlp.pt2"), out, [&](const std::string& entry, const std::string& bytes) -> std::optional<std::string> {
    if (entry != "mlp/data/weights/model_weights_config.json") return bytes;
    json j = json::parse(bytes);
    edit(j["config"]["l1.weight"]["tensor_meta"]);
    return j.dump();
  });
  return out;
}

json sizes_json(std::initializer_list<int64_t> v) {
  json a = json::array();
  for (int64_t x : v) a.push_back({{"as_int", x}});
  return a;
}

}  // namespace

TEST_CASE("bad input: a zip bomb (a deflated entry declaring more than deflate can produce)", "[bad]") {
  std::string out = tmp("bomb.pt2");
  t::write_file(out, t::make_zip({{"m/models/model.json", std::string(4096, ' '), true, int64_t(4000000000)},
                                  {"m/archive_format", "pt2"}}));
  expect_user_error(out, "declares 4000000000 bytes from");
  expect_user_error(out, "more than deflate can produce (a zip bomb?)");
}

TEST_CASE("bad input: negative and absurd tensor shapes (element counts that overflow)", "[bad]") {
  expect_user_error(with_json_edit("neg_shape.pt2", [](json& j) {
                      j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = {{"as_int", -5}};
                    }),
                    "tensor 'x' has negative size -5");
  expect_user_error(with_json_edit("huge_shape.pt2", [](json& j) {
                      j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"] = sizes_json({int64_t(1) << 40, int64_t(1) << 40});
                    }),
                    "tensor 'x' has more than 2^48 elements");
  expect_user_error(with_weights_config_edit("huge_weight.pt2", [](json& m) { m["sizes"] = sizes_json({int64_t(1) << 62, 64}); }),
                    "weight 'l1.weight' has a size of 4611686018427387904, beyond 2^48");
  expect_user_error(with_weights_config_edit("huge_weight2.pt2", [](json& m) { m["sizes"] = sizes_json({int64_t(1) << 30, int64_t(1) << 30}); }),
                    "weight 'l1.weight' has more than 2^48 elements");
  // An empty tensor with large sizes holds no element: not refused for its size (here it is
  // refused later: l1's weight must be [256, 64]).
  auto r = t::run_ptc("inspect " + with_weights_config_edit("empty_big.pt2", [](json& m) {
                        m["sizes"] = sizes_json({int64_t(1) << 30, int64_t(1) << 30, 0});
                        m["strides"] = sizes_json({0, 0, 1});
                      }));
  CHECK(r.output.find("2^48") == std::string::npos);
}

TEST_CASE("bad input: weight storage out of range (offset, strides, dtype vs byte count)", "[bad]") {
  expect_user_error(with_weights_config_edit("w_offset.pt2", [](json& m) { m["storage_offset"] = {{"as_int", int64_t(1) << 62}}; }),
                    "weight 'l1.weight' has storage offset 4611686018427387904, outside [0, 2^48]");
  expect_user_error(with_weights_config_edit("w_offset2.pt2", [](json& m) { m["storage_offset"] = {{"as_int", int64_t(1) << 40}}; }),
                    "weight \"l1.weight\": elements reach past its 65536-byte storage");
  expect_user_error(with_weights_config_edit("w_stride.pt2", [](json& m) { m["strides"] = sizes_json({-64, 1}); }),
                    "weight \"l1.weight\": elements reach past its 65536-byte storage");
  expect_user_error(with_weights_config_edit("w_stride2.pt2", [](json& m) { m["strides"] = sizes_json({int64_t(1) << 50, 1}); }),
                    "weight 'l1.weight' has stride 1125899906842624, beyond 2^48");
  expect_user_error(with_weights_config_edit("w_dtype.pt2", [](json& m) { m["dtype"] = 8; }),  // float64: twice the bytes
                    "weight \"l1.weight\": elements reach past its 65536-byte storage");
}

TEST_CASE("bad input: a cyclic node reference (a node reading a later node's output)", "[bad]") {
  expect_user_error(with_json_edit("cyclic.pt2", [](json& j) {
                      auto& nodes = j["graph_module"]["graph"]["nodes"];
                      nodes[0]["inputs"][0]["arg"]["as_tensor"]["name"] = nodes.back()["outputs"][0]["as_tensor"]["name"];
                    }),
                    "uses value 'layer_norm' before it is defined");
}

TEST_CASE("hostile names cannot reach the generated code: quoted in strings, masked in comments", "[bad]") {
  // A node and a value named with a newline and C++ in it: the library still compiles and runs.
  std::string out = with_json_edit("names.pt2", [](json& j) {
    auto& g = j["graph_module"]["graph"];
    g["nodes"][0]["name"] = "lin\n#error injected\n";
    g["nodes"][0]["metadata"].erase("stack_trace");
  });
  std::string so = tmp("names.so");
  auto r = t::run_ptc("compile -q --no-cache " + out + " -o " + so);
  INFO(r.output);
  CHECK(r.exit_code == 0);
}
