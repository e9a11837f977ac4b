// Graph IR: building, printing (exact text) and the verifier's checks.
#include <catch2/catch.hpp>

#include "ptc/graph.h"

using namespace ptc;

namespace {

std::unique_ptr<Node> make_node(OpKind kind, std::string name, std::vector<Arg> args, std::vector<Value*> outs) {
  auto n = std::make_unique<Node>();
  n->kind = kind;
  n->name = std::move(name);
  n->args = std::move(args);
  n->outputs = std::move(outs);
  return n;
}

// A two-node graph: relu(linear(x, w, b)) with a dynamic batch s0.
std::unique_ptr<Graph> small_graph(int64_t weight_bytes = 4 * 8 * 4) {
  auto g = std::make_unique<Graph>();
  g->name = "tiny";
  g->symbols["s0"] = sym::Range{1, 64};
  sym::Expr s0 = sym::symbol("s0", {1, 64});
  Value* x = g->add_input("x", Type::tensor(DType::Float32, {s0, 4}), GraphInput::Role::User);
  Value* w = g->add_input("w", Type::tensor(DType::Float32, {8, 4}), GraphInput::Role::Parameter, "fc.weight");
  static std::vector<std::byte> storage(1024);
  TensorData td;
  td.type = w->type;
  td.storage = storage.data();
  td.storage_bytes = static_cast<size_t>(weight_bytes);
  g->weights["fc.weight"] = td;
  Value* y = g->add_value("y", Type::tensor(DType::Float32, {s0, 8}));
  g->add_node(make_node(OpKind::Linear, "linear", {x, w, std::monostate{}}, {y}));
  Value* z = g->add_value("z", Type::tensor(DType::Float32, {s0, 8}));
  g->add_node(make_node(OpKind::Gelu, "gelu", {y, std::string("tanh")}, {z}));
  g->outputs = {z};
  return g;
}

}  // namespace

TEST_CASE("graph printer", "[graph]") {
  auto g = small_graph();
  CHECK(verify_graph(*g).empty());
  CHECK(print_graph(*g) ==
        "graph tiny {\n"
        "  symbol s0 in [1, 64]\n"
        "  input %x: f32[s0, 4]\n"
        "  parameter %w: f32[8, 4] = \"fc.weight\"\n"
        "  %y: f32[s0, 8] = aten::linear(%x, %w)\n"
        "  %z: f32[s0, 8] = aten::gelu(%y, approximate=\"tanh\")\n"
        "  return %z\n"
        "}\n");
}

TEST_CASE("types print sizes, strides only when not contiguous", "[graph]") {
  sym::Expr s = sym::symbol("s1", {1, 8});
  CHECK(Type::tensor(DType::BFloat16, {s, 3}).str() == "bf16[s1, 3]");
  CHECK(Type::tensor(DType::Float32, {2, 3}, {1, 2}).str() == "f32[2, 3]{1, 2}");
  CHECK(contiguous_strides({2, s, 5}) == std::vector<sym::Expr>{s * 5, 5, 1});
  CHECK(Type::sym_int(s * 2).str() == "SymInt(2*s1)");
  CHECK(Type::tensor(DType::Float32, {2, s}).static_numel() == std::nullopt);
  CHECK(Type::tensor(DType::Float32, {2, 3}).static_numel() == 6);
}

TEST_CASE("verifier finds broken graphs", "[graph]") {
  SECTION("use before definition") {
    auto g = small_graph();
    Value* ghost = g->add_value("ghost", Type::tensor(DType::Float32, {2}));
    Value* out = g->add_value("out", Type::tensor(DType::Float32, {2}));
    g->add_node(make_node(OpKind::Relu, "relu", {ghost}, {out}));
    auto problems = verify_graph(*g);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "node relu (aten::relu): uses %ghost before it is defined");
  }
  SECTION("argument of the wrong type and wrong count") {
    auto g = small_graph();
    Value* out = g->add_value("out", Type::tensor(DType::Float32, {2}));
    g->add_node(make_node(OpKind::Relu, "relu", {std::string("x")}, {out}));
    Value* out2 = g->add_value("out2", Type::tensor(DType::Float32, {2}));
    g->add_node(make_node(OpKind::Relu, "relu2", {}, {out2}));
    auto problems = verify_graph(*g);
    REQUIRE(problems.size() == 2);
    CHECK(problems[0] == "node relu (aten::relu): argument self = \"x\" does not fit type Tensor");
    CHECK(problems[1] == "node relu2 (aten::relu): 0 arguments, schema has 1");
  }
  SECTION("undeclared symbol") {
    auto g = small_graph();
    g->add_input("q", Type::tensor(DType::Float32, {sym::symbol("s9", {1, 4})}), GraphInput::Role::User);
    auto problems = verify_graph(*g);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "value %q: size uses symbol s9 that the graph does not declare");
  }
  SECTION("weights too small for their shape") {
    auto g = small_graph(100);
    auto problems = verify_graph(*g);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "weight \"fc.weight\": elements reach past its 100-byte storage");
  }
  SECTION("graph output never defined") {
    auto g = small_graph();
    g->outputs.push_back(g->add_value("nowhere", Type::unknown()));
    auto problems = verify_graph(*g);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0] == "graph output %nowhere is never defined");
  }
}

TEST_CASE("source frames skip torch's own files", "[graph]") {
  SourceInfo s;
  s.stack_trace =
      "File \"/home/u/models.py\", line 9, in forward\n    return self.ln(x)\n"
      "  File \"/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py\", line 134, in forward\n"
      "    return F.linear(input, self.weight, self.bias)";
  CHECK(s.user_frame() == "/home/u/models.py:9: return self.ln(x)");
}
