// The TorchScript reader against what scripts/export_models.py recorded (built with libtorch).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ptc/frontend.h"
#include "test_util.h"

using nlohmann::json;
using namespace ptc;

TEST_CASE("TorchScript reader maps every fixture's aten nodes", "[torchscript]") {
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "mha"}) {
    json expect = json::parse(test::read_file(test::fixture(std::string(name) + ".expect.json")));
    const json& e = expect["flavours"]["torchscript"];
    std::string file = test::fixture(e["file"].get<std::string>());
    INFO(file);
    auto g = load_model(file);
    CHECK(g->source_format == "TorchScript");
    CHECK(verify_graph(*g).empty());
    std::map<std::string, int> want, got;
    for (const auto& [kind, c] : e["node_kinds"].items())
      if (kind.rfind("aten::", 0) == 0) want[kind] = c.get<int>();
    for (const auto& n : g->nodes())
      if (n->target.rfind("aten::", 0) == 0) got[n->target]++;
    CHECK(got == want);
    // Inputs as ptc_inputs.json describes them.
    const json& ins = e["ptc_inputs"]["inputs"];
    std::vector<const Value*> user;
    for (const auto& in : g->inputs)
      if (in.role == GraphInput::Role::User) user.push_back(in.value);
    REQUIRE(user.size() == ins.size());
    for (size_t i = 0; i < user.size(); ++i) {
      CHECK(user[i]->name == ins[i]["name"].get<std::string>());
      for (size_t d = 0; d < ins[i]["sizes"].size(); ++d) {
        const json& s = ins[i]["sizes"][d];
        if (s.is_string()) CHECK(user[i]->type.sizes[d].str() == s.get<std::string>());
        else CHECK(user[i]->type.sizes[d].as_const() == s.get<int64_t>());
      }
    }
    // A returned tuple of tensors becomes that many graph outputs.
    size_t outputs = 0;
    for (const auto& t : e["output_types"]) {
      std::string text = t.get<std::string>();
      outputs += text.rfind("Tuple[", 0) == 0 ? static_cast<size_t>(std::count(text.begin(), text.end(), ',') + 1) : 1;
    }
    CHECK(g->outputs.size() == outputs);
    // Frozen parameters arrive as graph inputs named after their attribute, with the same bytes
    // as the .pt2's weights (freezing drops the unused ones).
    auto ep = load_pt2(test::fixture(expect["flavours"]["export"]["file"].get<std::string>()));
    int matched = 0;
    for (const auto& in : g->inputs) {
      if ((in.role != GraphInput::Role::Constant && in.role != GraphInput::Role::Parameter) || !ep->weights.count(in.target)) continue;
      // The module's parameters keep that role (what --train differentiates).
      bool ep_param = false;
      for (const auto& e : ep->inputs) ep_param = ep_param || (e.target == in.target && e.role == GraphInput::Role::Parameter);
      CHECK((in.role == GraphInput::Role::Parameter) == ep_param);
      const TensorData& a = g->weights.at(in.target);
      const TensorData& b = ep->weights.at(in.target);
      REQUIRE(a.type.sizes == b.type.sizes);
      REQUIRE(a.nbytes() == b.nbytes());
      CHECK(std::memcmp(a.storage, b.storage, a.nbytes()) == 0);
      ++matched;
    }
    CHECK(matched >= 4);
    // Static models get their output shapes from shape propagation.
    if (!expect["dynamic"].get<bool>()) {
      const json& out = expect["flavours"]["export"]["outputs"][0]["sizes"];
      REQUIRE(g->outputs[0]->type.is_tensor());
      REQUIRE(g->outputs[0]->type.sizes.size() == out.size());
      for (size_t d = 0; d < out.size(); ++d) CHECK(g->outputs[0]->type.sizes[d].as_const() == out[d].get<int64_t>());
    }
  }
}

TEST_CASE("TorchScript reader follows dynamic sizes symbolically", "[torchscript]") {
  auto g = load_model(test::fixture("tfm_dyn.pt"));
  bool symbolic_view = false;
  for (const auto& n : g->nodes())
    if (n->kind == OpKind::View)
      if (auto sizes = std::get_if<std::vector<sym::Expr>>(&n->args[1]))
        for (const auto& s : *sizes) symbolic_view = symbolic_view || !s.is_const();
  CHECK(symbolic_view);
}

TEST_CASE("TorchScript: explicit input shapes, and a broken archive", "[torchscript][bad]") {
  auto r = test::run_ptc("inspect --input-shape 3x64 " + test::fixture("mlp.pt"));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("x: f32[3, 64]") != std::string::npos);
  auto wrong = test::run_ptc("inspect --input-shape 3x64 --input-shape 2 " + test::fixture("mlp.pt"));
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.output.find("the model has 1 inputs but 2 input shapes were given") != std::string::npos);
  // Sizes separated by something other than 'x', a symbol range that is not one: one sentence.
  auto commas = test::run_ptc("inspect --input-shape 3,64 " + test::fixture("mlp.pt"));
  CHECK(commas.exit_code == 1);
  CHECK(commas.output.find("input shape '3,64' is not sizes (numbers or symbols) separated by 'x'") != std::string::npos);
  auto range = test::run_ptc("inspect --input-shape s0x64 --symbol s0=a..b " + test::fixture("mlp.pt"));
  CHECK(range.exit_code == 1);
  CHECK(range.output.find("symbol range 's0=a..b' must look like s0=1..1024") != std::string::npos);
  std::string out = test::temp_dir() + "/broken_ts.pt";
  test::rewrite_zip(test::fixture("mlp.pt2"), out, [](const std::string&, const std::string&) { return std::optional<std::string>(); },
                    {{"archive/code/__torch__.py", "garbage"}, {"archive/data.pkl", "x"}});
  auto b = test::run_ptc("inspect " + out);
  INFO(b.output);
  CHECK(b.exit_code == 1);
  CHECK(b.output.find("not a TorchScript archive torch::jit::load can read") != std::string::npos);
}
