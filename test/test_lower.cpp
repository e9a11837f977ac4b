// Lowering to loop IR, checked end to end by the reference interpreter against PyTorch eager's
// outputs for every fixture (both .pt2 flavours, every recorded case).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/npy.h"
#include "test_util.h"

using nlohmann::json;
using namespace ptc;

namespace {

std::vector<float> floats(const std::vector<std::byte>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Binds each symbolic input dimension to the size the reference input has.
std::map<std::string, int64_t> bind_symbols(const Graph& g, const std::vector<NpyArray>& ins) {
  std::map<std::string, int64_t> env;
  size_t k = 0;
  for (const auto& in : g.inputs) {
    if (in.role != GraphInput::Role::User) continue;
    const auto& sizes = in.value->type.sizes;
    REQUIRE(sizes.size() == ins.at(k).shape.size());
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d].kind() == sym::Kind::Symbol) env[sizes[d].name()] = ins[k].shape[d];
      else CHECK(sizes[d].as_const() == ins[k].shape[d]);
    ++k;
  }
  return env;
}

}  // namespace

// Runs every recorded case of fixture `name` through lowering + the interpreter.
void check_fixture_by_interpreter(const Graph& g, const std::string& name) {
  json expect = json::parse(test::read_file(test::fixture(name + ".expect.json")));
  double atol = expect["tolerance"]["atol"].get<double>(), rtol = expect["tolerance"]["rtol"].get<double>();
  loop::Program prog = lower_to_loops(g);
  INFO(loop::print_program(prog));
  for (const auto& c : expect["cases"]) {
    std::vector<NpyArray> ins;
    std::vector<std::vector<std::byte>> raw;
    for (const auto& f : c["inputs"]) {
      ins.push_back(read_npy(test::fixture(f["file"].get<std::string>())));
      raw.push_back(ins.back().data);
    }
    auto outs = interpret(prog, g, raw, bind_symbols(g, ins));
    REQUIRE(outs.size() == c["outputs"].size());
    for (size_t i = 0; i < outs.size(); ++i) {
      NpyArray ref = read_npy(test::fixture(c["outputs"][i]["file"].get<std::string>()));
      REQUIRE(outs[i].size() == ref.data.size());
      auto got = floats(outs[i]), want = floats(ref.data);
      double worst = 0;
      for (size_t j = 0; j < got.size(); ++j) {
        double err = std::fabs(got[j] - want[j]) - rtol * std::fabs(want[j]);
        worst = std::max(worst, err);
      }
      INFO(name << " case output " << i << ": worst error beyond rtol " << worst);
      CHECK(worst <= atol);
    }
  }
}

TEST_CASE("lowering + interpreter match PyTorch eager on every fixture", "[lower]") {
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "index_ops", "mha"})
    for (const char* suffix : {".pt2", ".core.pt2"}) {
      INFO(name << suffix);
      auto g = load_pt2(test::fixture(std::string(name) + suffix));
      check_fixture_by_interpreter(*g, name);
    }
}

TEST_CASE("lowering fuses pointwise chains and keeps views as index rewrites", "[lower]") {
  auto g = load_pt2(test::fixture("mlp.pt2"));
  loop::Program p = lower_to_loops(*g);
  std::string text = loop::print_program(p);
  INFO(text);
  int gemms = 0, pointwise = 0, reductions = 0;
  for (const auto& c : p.comps) {
    gemms += c.kind == loop::Computation::Kind::Extern;
    pointwise += c.kind == loop::Computation::Kind::Pointwise;
    reductions += c.kind == loop::Computation::Kind::Reduction;
  }
  CHECK(gemms == 2);
  CHECK(reductions == 2);  // layer-norm's mean and variance
  // bias + gelu compose into one pointwise buffer (the second GEMM's operand); bias + residual +
  // normalize + affine compose into the output; mean and rstd are one small pointwise each (the
  // scheduler, not lowering, fuses them with their reductions).
  CHECK(pointwise == 4);
  // The weight transposes are strided views of the weights, not copies.
  CHECK(text.find("p_l1_weight[256, 64]") == std::string::npos);
}

TEST_CASE("lowering names the node it cannot lower", "[lower]") {
  auto g = load_pt2(test::fixture("mlp.pt2"));
  // Turn gelu into an op the table knows but lowering does not (cumsum).
  for (const auto& n : g->nodes())
    if (n->kind == OpKind::Gelu) const_cast<Node*>(n.get())->kind = OpKind::Topk;
  try {
    lower_to_loops(*g);
    FAIL("no error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("node 'gelu' (aten::topk) at scripts/export_models.py:") != std::string::npos);
    CHECK(std::string(e.what()).find("cannot lower") != std::string::npos);
  }
}
