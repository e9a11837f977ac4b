// Graph passes (lib/passes/{dce,cse,fold_constants,fold_batch_norm}.cpp): before/after text on
// hand-built graphs, the folded numbers, and on every fixture: the optimized graph verifies and
// the reference interpreter still reproduces PyTorch's outputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "ptc/rewrite.h"  // owned_tensor / read_all for hand-built weights
#include "ptc/frontend.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "test_util.h"

using namespace ptc;
using sym::Expr;

// test_lower.cpp: lowers `g`, runs every recorded case of fixture `name` through the reference
// interpreter and compares with PyTorch's outputs within the fixture's tolerances.
void check_fixture_by_interpreter(const Graph& g, const std::string& name);

namespace {

const char* kFixtures[] = {"mlp", "mlp_dyn", "small_cnn", "mbv2_dyn", "tiny_tfm", "tfm_dyn", "index_ops", "mha"};

using Builder = test::GraphBuilder;

Arg ints(std::vector<int64_t> v) { return v; }
Arg syms(std::vector<Expr> v) { return v; }

const Node* find_node(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

std::vector<double> weight_values(const Graph& g, const std::string& target) {
  auto it = g.weights.find(target);
  REQUIRE(it != g.weights.end());
  return rewrite::read_all(it->second);
}

// Runs `pass` and checks the contract every pass has: the input is untouched, the output
// verifies, and the text is deterministic.
template <class Pass>
std::unique_ptr<Graph> run(Pass pass, const Graph& g) {
  const std::string before = print_graph(g);
  auto out = pass(g);
  CHECK(print_graph(g) == before);
  auto problems = verify_graph(*out);
  INFO(print_graph(*out));
  for (const auto& p : problems) UNSCOPED_INFO(p);
  CHECK(problems.empty());
  CHECK(print_graph(*pass(g)) == print_graph(*out));
  return out;
}

std::unique_ptr<Graph> optimize(const Graph& g) {
  auto a = run(fold_batch_norm, g);
  auto b = run(fold_constants, *a);
  auto c = run(common_subexpression_elimination, *b);
  return run(dead_code_elimination, *c);
}

// A float32 scaled_dot_product_attention with an additive float32 mask, the graph's output.
void masked_attention(Builder& b) {
  auto T = [](int64_t n) { return std::vector<sym::Expr>{sym::Expr(1), sym::Expr(2), sym::Expr(n), sym::Expr(8)}; };
  Value* q = b.input("q", DType::Float32, T(4));
  Value* k = b.input("k", DType::Float32, T(6));
  Value* v = b.input("v", DType::Float32, T(6));
  Value* m = b.input("m", DType::Float32, {sym::Expr(1), sym::Expr(1), sym::Expr(4), sym::Expr(6)});
  Value* y = b.op(OpKind::ScaledDotProductAttention, "sdpa", {{"query", q}, {"key", k}, {"value", v}, {"attn_mask", m}});
  b.g->outputs = {y};
}

// `before` and `after` (one float32 user input of `n` elements) give the same outputs through
// lowering and the interpreter, within `rel` of each value (0: bit for bit).
void check_same_outputs(const Graph& before, const Graph& after, size_t n, float rel) {
  std::vector<float> in(n);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::cos(0.7 * static_cast<double>(i)));
  std::vector<std::byte> raw(in.size() * sizeof(float));
  std::memcpy(raw.data(), in.data(), raw.size());
  auto want = interpret(lower_to_loops(before), before, {raw}, {});
  auto got = interpret(lower_to_loops(after), after, {raw}, {});
  REQUIRE(want.size() == got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    REQUIRE(want[i].size() == got[i].size());
    std::vector<float> w(want[i].size() / sizeof(float)), g(w.size());
    std::memcpy(w.data(), want[i].data(), want[i].size());
    std::memcpy(g.data(), got[i].data(), got[i].size());
    for (size_t j = 0; j < w.size(); ++j) CHECK(std::fabs(g[j] - w[j]) <= rel * (1.f + std::fabs(w[j])));
  }
}

size_t count_kind(const Graph& g, OpKind k) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += node->kind == k;
  return n;
}

}  // namespace

// ---- dead-code elimination -----------------------------------------------------------------------

TEST_CASE("dce removes nodes that reach no output and keeps the signature", "[passes]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 4});
  b.weight("p_w", "w", DType::Float32, {4}, {1, 2, 3, 4});
  Value* n0 = b.op(OpKind::SymSizeInt, "sym_size_int", {{"self", x}, {"dim", int64_t(0)}});
  b.op(OpKind::Gelu, "gelu", {{"self", x}});
  Value* r = b.op(OpKind::Relu, "relu", {{"self", x}}, "File \"m.py\", line 3, in forward\n    relu(x)");
  Value* v = b.op(OpKind::View, "view", {{"self", r}, {"size", syms({s0 * 4})}});
  b.op(OpKind::Neg, "neg", {{"self", v}});  // dead, reads a live value
  b.g->outputs = {r};
  (void)n0;
  CHECK(print_graph(*b.g) ==
        "graph t {\n"
        "  symbol s0 in [2, 64]\n"
        "  input %x: f32[s0, 4]\n"
        "  parameter %p_w: f32[4] = \"w\"\n"
        "  %sym_size_int: SymInt(s0) = aten::sym_size.int(%x, 0)\n"
        "  %gelu: f32[s0, 4] = aten::gelu(%x)\n"
        "  %relu: f32[s0, 4] = aten::relu(%x)\n"
        "  %view: f32[4*s0] = aten::view(%relu, [4*s0])\n"
        "  %neg: f32[4*s0] = aten::neg(%view)\n"
        "  return %relu\n"
        "}\n");
  auto out = run(dead_code_elimination, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  symbol s0 in [2, 64]\n"
        "  input %x: f32[s0, 4]\n"
        "  parameter %p_w: f32[4] = \"w\"\n"
        "  %relu: f32[s0, 4] = aten::relu(%x)\n"
        "  return %relu\n"
        "}\n");
  CHECK(out->weights.count("w"));
  CHECK(find_node(*out, "relu")->source.stack_trace == "File \"m.py\", line 3, in forward\n    relu(x)");
  CHECK(out->find_value("gelu") == nullptr);
  // Already minimal: unchanged.
  CHECK(print_graph(*run(dead_code_elimination, *out)) == print_graph(*out));
}

TEST_CASE("prune_unused_weights drops weights no node reads", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {4});
  Value* w = b.weight("p_w", "w", DType::Float32, {4}, {1, 2, 3, 4});
  b.weight("p_unused", "unused", DType::Float32, {2}, {1, 2});
  Value* y = b.op(OpKind::MulTensor, "mul", {{"self", x}, {"other", w}});
  b.g->outputs = {y};
  auto out = run(prune_unused_weights, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[4]\n"
        "  parameter %p_w: f32[4] = \"w\"\n"
        "  %mul: f32[4] = aten::mul.Tensor(%x, %p_w)\n"
        "  return %mul\n"
        "}\n");
  CHECK(out->weights.size() == 1);
  CHECK(out->weights.count("w"));
}

// ---- common-subexpression elimination --------------------------------------------------------------

TEST_CASE("cse merges duplicated sym_size, size arithmetic and views", "[passes]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 4});
  Value* a = b.op(OpKind::SymSizeInt, "sym_size_int", {{"self", x}, {"dim", int64_t(0)}});
  Value* a2 = b.op(OpKind::SymSizeInt, "sym_size_int_1", {{"self", x}, {"dim", int64_t(0)}});
  b.op(OpKind::SymMul, "mul", {{"a", s0}, {"b", Expr(4)}});
  b.op(OpKind::SymMul, "mul_1", {{"a", s0}, {"b", Expr(4)}});
  Value* v1 = b.op(OpKind::View, "view", {{"self", x}, {"size", syms({s0 * 4})}});
  Value* v2 = b.op(OpKind::View, "view_1", {{"self", x}, {"size", syms({s0 * 4})}});
  Value* r1 = b.op(OpKind::Relu, "relu", {{"self", v1}});
  Value* r2 = b.op(OpKind::Relu, "relu_1", {{"self", v2}});  // equal once the views are merged
  Value* m1 = b.op(OpKind::MulScalar, "mul_2", {{"self", r1}, {"other", 0.1}});
  Value* m2 = b.op(OpKind::MulScalar, "mul_3", {{"self", r2}, {"other", 0.1000000001}});  // differs
  Value* s = b.op(OpKind::AddTensor, "add", {{"self", m1}, {"other", m2}});
  Value* ar = b.op(OpKind::ArangeStartStep, "arange", {{"start", int64_t(0)}, {"end", a}});
  Value* ar2 = b.op(OpKind::ArangeStartStep, "arange_1", {{"start", int64_t(0)}, {"end", a2}});
  Value* d1 = b.op(OpKind::Dropout, "dropout", {{"input", s}, {"p", 0.5}, {"train", true}});
  Value* d2 = b.op(OpKind::Dropout, "dropout_1", {{"input", s}, {"p", 0.5}, {"train", true}});
  Value* sum = b.op(OpKind::AddTensor, "add_1", {{"self", d1}, {"other", d2}});
  b.g->outputs = {sum, ar, ar2};
  auto out = run(common_subexpression_elimination, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  symbol s0 in [2, 64]\n"
        "  input %x: f32[s0, 4]\n"
        "  %sym_size_int: SymInt(s0) = aten::sym_size.int(%x, 0)\n"
        "  %mul: SymInt(4*s0) = _operator::mul(s0, 4)\n"
        "  %view: f32[4*s0] = aten::view(%x, [4*s0])\n"
        "  %relu: f32[4*s0] = aten::relu(%view)\n"
        "  %mul_2: f32[4*s0] = aten::mul.Scalar(%relu, 0.1)\n"
        "  %mul_3: f32[4*s0] = aten::mul.Scalar(%relu, 0.1)\n"
        "  %add: f32[4*s0] = aten::add.Tensor(%mul_2, %mul_3)\n"
        "  %arange: i64[s0] = aten::arange.start_step(0, %sym_size_int)\n"
        "  %arange_1: i64[s0] = aten::arange.start_step(0, %sym_size_int)\n"
        "  %dropout: f32[4*s0] = aten::dropout(%add, 0.5, True)\n"
        "  %dropout_1: f32[4*s0] = aten::dropout(%add, 0.5, True)\n"
        "  %add_1: f32[4*s0] = aten::add.Tensor(%dropout, %dropout_1)\n"
        "  return %add_1, %arange, %arange_1\n"
        "}\n");
  // arange_1 duplicates arange but is a graph output, so it stays (outputs keep their names).
  // Already minimal: unchanged.
  CHECK(print_graph(*run(common_subexpression_elimination, *out)) == print_graph(*out));
}

TEST_CASE("cse merges dropout in inference and multi-output nodes", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {2, 6});
  Value* d1 = b.op(OpKind::Dropout, "dropout", {{"input", x}, {"p", 0.5}, {"train", false}});
  Value* d2 = b.op(OpKind::Dropout, "dropout_1", {{"input", x}, {"p", 0.5}, {"train", false}});
  auto s1 = b.node(OpKind::SplitTensor, "split", {{"self", d1}, {"split_size", Expr(3)}, {"dim", int64_t(1)}});
  auto s2 = b.node(OpKind::SplitTensor, "split_b", {{"self", d2}, {"split_size", Expr(3)}, {"dim", int64_t(1)}});
  Value* y = b.op(OpKind::AddTensor, "add", {{"self", s1[1]}, {"other", s2[1]}});
  b.g->outputs = {y};
  auto out = run(common_subexpression_elimination, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[2, 6]\n"
        "  %dropout: f32[2, 6] = aten::dropout(%x, 0.5, False)\n"
        "  %split: f32[2, 3]{6, 1}, %split_1: f32[2, 3]{6, 1} = aten::split.Tensor(%dropout, 3, 1)\n"
        "  %add: f32[2, 3] = aten::add.Tensor(%split_1, %split_1)\n"
        "  return %add\n"
        "}\n");
}

// ---- constant folding ---------------------------------------------------------------------------

TEST_CASE("fold_constants evaluates weight-only chains and keeps the frontier", "[passes]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 2});
  Value* w = b.weight("p_w", "l.weight", DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  Value* bias = b.weight("p_b", "l.bias", DType::Float32, {3}, {0.5, -1, 2});
  Value* t = b.op(OpKind::Permute, "permute", {{"self", w}, {"dims", ints({1, 0})}});
  Value* mm = b.op(OpKind::Mm, "mm", {{"self", x}, {"mat2", t}});
  // (w * 2 + bias[:, None]) / 4, then rsqrt of 1 + var: a chain folded into one constant.
  Value* m = b.op(OpKind::MulScalar, "mul", {{"self", w}, {"other", 2.0}});
  Value* u = b.op(OpKind::Unsqueeze, "unsqueeze", {{"self", bias}, {"dim", int64_t(-1)}});
  Value* a = b.op(OpKind::AddTensor, "add", {{"self", m}, {"other", u}});
  Value* d = b.op(OpKind::DivScalar, "div", {{"self", a}, {"other", int64_t(4)}});
  Value* dt = b.op(OpKind::TransposeInt, "transpose", {{"self", d}, {"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
  Value* y = b.op(OpKind::AddTensor, "add_1", {{"self", mm}, {"other", b.op(OpKind::SumDimIntList, "sum", {{"self", dt}, {"dim", ints({0})}})}});
  Value* out_y = b.op(OpKind::Relu, "relu", {{"self", y}});
  b.g->outputs = {out_y};
  auto out = run(fold_constants, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  symbol s0 in [2, 64]\n"
        "  input %x: f32[s0, 2]\n"
        "  parameter %p_w: f32[3, 2] = \"l.weight\"\n"
        "  parameter %p_b: f32[3] = \"l.bias\"\n"
        "  constant %permute: f32[2, 3]{1, 2} = \"_folded_0\"\n"
        "  constant %transpose: f32[2, 3]{1, 2} = \"_folded_1\"\n"
        "  %mm: f32[s0, 3] = aten::mm(%x, %permute)\n"
        "  %sum: f32[3] = aten::sum.dim_IntList(%transpose, [0])\n"
        "  %add_1: f32[s0, 3] = aten::add.Tensor(%mm, %sum)\n"
        "  %relu: f32[s0, 3] = aten::relu(%add_1)\n"
        "  return %relu\n"
        "}\n");
  // The permute is a view of the weight: same storage and owner, nothing copied.
  const TensorData& pt = out->weights.at("_folded_0");
  CHECK(pt.storage == b.g->weights.at("l.weight").storage);
  CHECK(pt.owner == b.g->weights.at("l.weight").owner);
  CHECK(weight_values(*out, "_folded_0") == std::vector<double>{1, 3, 5, 2, 4, 6});
  // The computed chain owns its bytes, laid out as transpose's recorded type {1, 2}.
  const TensorData& ct = out->weights.at("_folded_1");
  CHECK(ct.storage != b.g->weights.at("l.weight").storage);
  CHECK(ct.type.str() == "f32[2, 3]{1, 2}");
  CHECK(ct.storage_bytes == 6 * 4);
  // rows of (w*2 + b[:,None]) / 4: [2.5/4, 4.5/4], [5/4, 7/4], [12/4, 14/4]; transposed.
  CHECK(weight_values(*out, "_folded_1") == std::vector<double>{0.625, 1.25, 3, 1.125, 1.75, 3.5});
  // Nothing left to fold: unchanged.
  CHECK(print_graph(*run(fold_constants, *out)) == print_graph(*out));
}

TEST_CASE("fold_constants handles int64, bool and dtype casts, and leaves outputs alone", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {3});
  Value* idx = b.weight("c_idx", "idx", DType::Int64, {3}, {1, -2, 40}, GraphInput::Role::Constant);
  Value* mask = b.weight("b_mask", "mask", DType::Bool, {3}, {1, 0, 1}, GraphInput::Role::Buffer);
  Value* i2 = b.op(OpKind::MulScalar, "mul", {{"self", idx}, {"other", int64_t(3)}});      // i64
  Value* i3 = b.op(OpKind::AddScalar, "add", {{"self", i2}, {"other", int64_t(1)}});       // i64
  Value* f = b.op(OpKind::UnderscoreToCopy, "_to_copy", {{"self", i3}, {"dtype", DType::Float64}});
  Value* h = b.op(OpKind::DivScalar, "div", {{"self", i3}, {"other", int64_t(2)}});        // f32
  Value* m = b.op(OpKind::UnderscoreToCopy, "_to_copy_1", {{"self", mask}, {"dtype", DType::Float32}});
  Value* nm = b.op(OpKind::Neg, "neg", {{"self", m}});                                     // a graph output
  Value* y = b.op(OpKind::MulTensor, "mul_1", {{"self", x}, {"other", h}});
  Value* z = b.op(OpKind::MulTensor, "mul_2", {{"self", x}, {"other", nm}});
  b.g->outputs = {y, z, f, nm};
  auto out = run(fold_constants, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[3]\n"
        "  constant %c_idx: i64[3] = \"idx\"\n"
        "  buffer %b_mask: bool[3] = \"mask\"\n"
        "  constant %add: i64[3] = \"_folded_0\"\n"
        "  constant %div: f32[3] = \"_folded_1\"\n"
        "  constant %_to_copy_1: f32[3] = \"_folded_2\"\n"
        "  %_to_copy: f64[3] = aten::_to_copy(%add, dtype=float64)\n"
        "  %neg: f32[3] = aten::neg(%_to_copy_1)\n"
        "  %mul_1: f32[3] = aten::mul.Tensor(%x, %div)\n"
        "  %mul_2: f32[3] = aten::mul.Tensor(%x, %neg)\n"
        "  return %mul_1, %mul_2, %_to_copy, %neg\n"
        "}\n");
  CHECK(out->weights.at("_folded_0").type.dtype == DType::Int64);
  CHECK(weight_values(*out, "_folded_0") == std::vector<double>{4, -5, 121});
  CHECK(weight_values(*out, "_folded_1") == std::vector<double>{2, -2.5, 60.5});
  CHECK(weight_values(*out, "_folded_2") == std::vector<double>{1, 0, 1});
}

TEST_CASE("fold_constants converts float weights to bf16 / fp16 with round-to-nearest-even", "[passes]") {
  // The converted weight owns bytes in the new dtype and the folded constant views them; a
  // transposed (non-dense) weight goes the element-wise way. Both round as a C++ float to
  // bfloat16 / half conversion to nearest even does.
  Builder b;
  Value* x = b.input("x", DType::BFloat16, {2, 3});
  const double tie = 1.0 + 1.0 / 256;  // between bfloat16's 1 and 1 + 2^-7: to even (1)
  const double up = 1.0 + 3.0 / 512;   // past the midpoint: 1 + 2^-7
  Value* w = b.weight("p_w", "w", DType::Float32, {2, 3}, {tie, up, -2.5, 65504, 1e-8, 3.0});
  Value* wb = b.op(OpKind::ToDtype, "to_bf16", {{"self", w}, {"dtype", DType::BFloat16}});
  Value* wh = b.op(OpKind::ToDtype, "to_f16", {{"self", w}, {"dtype", DType::Float16}});
  Value* wt = b.op(OpKind::ToDtype, "to_bf16_t", {{"self", b.op(OpKind::T, "t", {{"self", w}})}, {"dtype", DType::BFloat16}});
  Value* y = b.op(OpKind::MulTensor, "mul", {{"self", x}, {"other", wb}});
  Value* z = b.op(OpKind::MulTensor, "mul_1", {{"self", b.op(OpKind::ToDtype, "xf", {{"self", x}, {"dtype", DType::Float16}})}, {"other", wh}});
  Value* u = b.op(OpKind::Mm, "mm", {{"self", x}, {"mat2", wt}});
  b.g->outputs = {y, z, u};
  auto out = run(fold_constants, *b.g);
  std::vector<double> bf, hf, bt;
  for (auto& [name, td] : out->weights) {
    if (td.type.dtype == DType::BFloat16 && td.type.sizes.size() == 2 && td.type.sizes[0] == Expr(2)) bf = weight_values(*out, name);
    if (td.type.dtype == DType::BFloat16 && td.type.sizes.size() == 2 && td.type.sizes[0] == Expr(3)) bt = weight_values(*out, name);
    if (td.type.dtype == DType::Float16) hf = weight_values(*out, name);
  }
  CHECK(bf == std::vector<double>{1.0, 1.0 + 1.0 / 128, -2.5, 65536, 1.0011717677116394e-08, 3.0});
  CHECK(bt == std::vector<double>{1.0, 65536, 1.0 + 1.0 / 128, 1.0011717677116394e-08, -2.5, 3.0});
  CHECK(hf == std::vector<double>{1.00390625, 1.005859375, -2.5, 65504, 0, 3.0});
}

TEST_CASE("fold_constants leaves inexact int64 and symbolic sizes alone", "[passes]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Int64, {s0});
  Value* big = b.weight("c_big", "big", DType::Int64, {2}, {double(int64_t(1) << 60), 1}, GraphInput::Role::Constant);
  Value* m = b.op(OpKind::MulScalar, "mul", {{"self", big}, {"other", int64_t(3)}});
  Value* e = b.op(OpKind::Expand, "expand", {{"self", b.op(OpKind::SliceTensor, "slice", {{"self", big}, {"start", Expr(1)}})},
                                              {"size", syms({s0})}});
  Value* y = b.op(OpKind::AddTensor, "add", {{"self", x}, {"other", e}});
  b.g->outputs = {m, y};
  auto out = run(fold_constants, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  symbol s0 in [2, 64]\n"
        "  input %x: i64[s0]\n"
        "  constant %c_big: i64[2] = \"big\"\n"
        "  constant %slice: i64[1] = \"_folded_0\"\n"
        "  %mul: i64[2] = aten::mul.Scalar(%c_big, 3)\n"
        "  %expand: i64[s0]{0} = aten::expand(%slice, [s0])\n"
        "  %add: i64[s0] = aten::add.Tensor(%x, %expand)\n"
        "  return %mul, %add\n"
        "}\n");
  // The slice is a view: it shares the weight's storage at storage offset 1.
  CHECK(out->weights.at("_folded_0").storage == b.g->weights.at("big").storage);
  CHECK(out->weights.at("_folded_0").type.storage_offset == Expr(1));
  CHECK(weight_values(*out, "_folded_0") == std::vector<double>{1});
}

TEST_CASE("fold_constants rounds through float32 at each node", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {2});
  Value* v = b.weight("b_var", "bn.running_var", DType::Float32, {2}, {0.3, 2.0}, GraphInput::Role::Buffer);
  Value* e = b.op(OpKind::AddScalar, "add", {{"self", v}, {"other", 1e-5}});
  Value* r = b.op(OpKind::Rsqrt, "rsqrt", {{"self", e}});
  Value* p = b.op(OpKind::PowTensorScalar, "pow", {{"self", r}, {"exponent", 3.0}});
  Value* y = b.op(OpKind::MulTensor, "mul", {{"self", x}, {"other", p}});
  b.g->outputs = {y};
  auto out = run(fold_constants, *b.g);
  auto got = weight_values(*out, "_folded_0");
  for (int i = 0; i < 2; ++i) {
    float var = i ? 2.0f : 0.3f;
    float add = static_cast<float>(static_cast<double>(var) + 1e-5);
    float rs = static_cast<float>(1.0 / std::sqrt(static_cast<double>(add)));
    float want = static_cast<float>(std::pow(static_cast<double>(rs), 3.0));
    CHECK(got[i] == static_cast<double>(want));
  }
}

// ---- batch-norm folding ----------------------------------------------------------------------------

TEST_CASE("fold_batch_norm folds an inference batch norm into the conv before it", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {1, 1, 3, 3});
  Value* w = b.weight("p_c_weight", "c.weight", DType::Float32, {2, 1, 1, 1}, {2, -1});
  Value* cb = b.weight("p_c_bias", "c.bias", DType::Float32, {2}, {1, 0});
  Value* g = b.weight("p_bn_weight", "bn.weight", DType::Float32, {2}, {3, 0.5});
  Value* be = b.weight("p_bn_bias", "bn.bias", DType::Float32, {2}, {0.25, -1});
  Value* mean = b.weight("b_bn_running_mean", "bn.running_mean", DType::Float32, {2}, {1, 2}, GraphInput::Role::Buffer);
  Value* var = b.weight("b_bn_running_var", "bn.running_var", DType::Float32, {2}, {3, 0}, GraphInput::Role::Buffer);
  const std::string trace = "File \"m.py\", line 7, in forward\n    return self.bn(self.c(x))";
  Value* c = b.op(OpKind::Conv2d, "conv2d", {{"input", x}, {"weight", w}, {"bias", cb}}, trace);
  Value* bn = b.op(OpKind::BatchNorm, "batch_norm",
                   {{"input", c}, {"weight", g}, {"bias", be}, {"running_mean", mean}, {"running_var", var},
                    {"training", false}, {"momentum", 0.1}, {"eps", 1.0}, {"cudnn_enabled", false}});
  Value* r = b.op(OpKind::Relu, "relu", {{"self", bn}});
  b.g->outputs = {r};
  auto out = run(fold_batch_norm, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[1, 1, 3, 3]\n"
        "  parameter %p_c_weight: f32[2, 1, 1, 1] = \"c.weight\"\n"
        "  parameter %p_c_bias: f32[2] = \"c.bias\"\n"
        "  parameter %p_bn_weight: f32[2] = \"bn.weight\"\n"
        "  parameter %p_bn_bias: f32[2] = \"bn.bias\"\n"
        "  buffer %b_bn_running_mean: f32[2] = \"bn.running_mean\"\n"
        "  buffer %b_bn_running_var: f32[2] = \"bn.running_var\"\n"
        "  constant %p_c_weight_bn_folded: f32[2, 1, 1, 1] = \"c.weight.bn_folded\"\n"
        "  constant %p_c_bias_bn_folded: f32[2] = \"c.bias.bn_folded\"\n"
        "  %conv2d: f32[1, 2, 3, 3] = aten::conv2d(%x, %p_c_weight_bn_folded, %p_c_bias_bn_folded)\n"
        "  %relu: f32[1, 2, 3, 3] = aten::relu(%conv2d)\n"
        "  return %relu\n"
        "}\n");
  // s = gamma / sqrt(var + eps) = [3/2, 0.5/1]; w' = w*s; b' = (b - mean)*s + beta.
  CHECK(weight_values(*out, "c.weight.bn_folded") == std::vector<double>{3, -0.5});
  CHECK(weight_values(*out, "c.bias.bn_folded") == std::vector<double>{0.25, -2});
  CHECK(find_node(*out, "conv2d")->source.stack_trace == trace);
  // Nothing left to fold: unchanged.
  CHECK(print_graph(*run(fold_batch_norm, *out)) == print_graph(*out));
}

TEST_CASE("fold_batch_norm: core-aten batch norm, no conv bias, and cases it leaves alone", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {1, 1, 4});
  Value* w = b.weight("p_c_weight", "c.weight", DType::Float32, {2, 1, 1}, {1, 2});
  Value* mean = b.weight("b_mean", "bn.running_mean", DType::Float32, {2}, {1, -1}, GraphInput::Role::Buffer);
  Value* var = b.weight("b_var", "bn.running_var", DType::Float32, {2}, {1, 1}, GraphInput::Role::Buffer);
  Value* c = b.op(OpKind::Convolution, "convolution",
                  {{"input", x}, {"weight", w}, {"bias", std::monostate{}}, {"stride", syms({1})}, {"padding", syms({0})},
                   {"dilation", syms({1})}, {"transposed", false}, {"output_padding", syms({0})}, {"groups", Expr(1)}});
  auto bn = b.node(OpKind::UnderscoreNativeBatchNormLegitNoTraining, "bn",
                   {{"input", c}, {"weight", std::monostate{}}, {"bias", std::monostate{}}, {"running_mean", mean},
                    {"running_var", var}, {"momentum", 0.1}, {"eps", 3.0}});
  // A second conv whose output is also read elsewhere: not folded.
  Value* c2 = b.op(OpKind::Conv1d, "conv1d", {{"input", x}, {"weight", w}});
  Value* bn2 = b.op(OpKind::BatchNorm, "batch_norm",
                    {{"input", c2}, {"weight", std::monostate{}}, {"bias", std::monostate{}}, {"running_mean", mean},
                     {"running_var", var}, {"training", false}, {"momentum", 0.1}, {"eps", 1e-5}, {"cudnn_enabled", false}});
  Value* y = b.op(OpKind::AddTensor, "add", {{"self", bn[0]}, {"other", bn2}});
  Value* z = b.op(OpKind::AddTensor, "add_1", {{"self", y}, {"other", c2}});
  b.g->outputs = {z};
  auto out = run(fold_batch_norm, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[1, 1, 4]\n"
        "  parameter %p_c_weight: f32[2, 1, 1] = \"c.weight\"\n"
        "  buffer %b_mean: f32[2] = \"bn.running_mean\"\n"
        "  buffer %b_var: f32[2] = \"bn.running_var\"\n"
        "  constant %p_c_weight_bn_folded: f32[2, 1, 1] = \"c.weight.bn_folded\"\n"
        "  constant %p_c_bias_bn_folded: f32[2] = \"c.bias.bn_folded\"\n"
        "  %convolution: f32[1, 2, 4] = aten::convolution(%x, %p_c_weight_bn_folded, %p_c_bias_bn_folded, [1], [0], [1], False, [0], 1)\n"
        "  %conv1d: f32[1, 2, 4] = aten::conv1d(%x, %p_c_weight)\n"
        "  %batch_norm: f32[1, 2, 4] = aten::batch_norm(%conv1d, None, None, %b_mean, %b_var, False, 0.1, 1e-05, False)\n"
        "  %add: f32[1, 2, 4] = aten::add.Tensor(%convolution, %batch_norm)\n"
        "  %add_1: f32[1, 2, 4] = aten::add.Tensor(%add, %conv1d)\n"
        "  return %add_1\n"
        "}\n");
  // s = 1 / sqrt(1 + 3) = 0.5: w' = [0.5, 1], b' = -mean * s = [-0.5, 0.5].
  CHECK(weight_values(*out, "c.weight.bn_folded") == std::vector<double>{0.5, 1});
  CHECK(weight_values(*out, "c.bias.bn_folded") == std::vector<double>{-0.5, 0.5});
}

TEST_CASE("fold_batch_norm folds linear + batch_norm1d and keeps an output's name", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {3, 2});
  Value* w = b.weight("p_fc_weight", "fc.weight", DType::Float32, {2, 2}, {1, 2, 3, 4});
  Value* mean = b.weight("b_mean", "bn.running_mean", DType::Float32, {2}, {0, 1}, GraphInput::Role::Buffer);
  Value* var = b.weight("b_var", "bn.running_var", DType::Float32, {2}, {3, 0}, GraphInput::Role::Buffer);
  Value* l = b.op(OpKind::Linear, "linear", {{"input", x}, {"weight", w}});
  Value* bn = b.op(OpKind::BatchNorm, "batch_norm",
                   {{"input", l}, {"weight", std::monostate{}}, {"bias", std::monostate{}}, {"running_mean", mean},
                    {"running_var", var}, {"training", false}, {"momentum", 0.1}, {"eps", 1.0}, {"cudnn_enabled", false}});
  b.g->outputs = {bn};
  auto out = run(fold_batch_norm, *b.g);
  CHECK(print_graph(*out) ==
        "graph t {\n"
        "  input %x: f32[3, 2]\n"
        "  parameter %p_fc_weight: f32[2, 2] = \"fc.weight\"\n"
        "  buffer %b_mean: f32[2] = \"bn.running_mean\"\n"
        "  buffer %b_var: f32[2] = \"bn.running_var\"\n"
        "  constant %p_fc_weight_bn_folded: f32[2, 2] = \"fc.weight.bn_folded\"\n"
        "  constant %p_fc_bias_bn_folded: f32[2] = \"fc.bias.bn_folded\"\n"
        "  %batch_norm: f32[3, 2] = aten::linear(%x, %p_fc_weight_bn_folded, %p_fc_bias_bn_folded)\n"
        "  return %batch_norm\n"
        "}\n");
  CHECK(weight_values(*out, "fc.weight.bn_folded") == std::vector<double>{0.5, 1, 3, 4});
  CHECK(weight_values(*out, "fc.bias.bn_folded") == std::vector<double>{0, -1});
}

// ---- fixtures ------------------------------------------------------------------------------------

TEST_CASE("passes on small_cnn: the batch norm is folded and the outputs still match PyTorch", "[passes]") {
  for (const char* suffix : {".pt2", ".core.pt2"}) {
    INFO(suffix);
    auto g = load_pt2(test::fixture(std::string("small_cnn") + suffix));
    auto opt = optimize(*g);
    INFO(print_graph(*opt));
    CHECK(count_kind(*opt, OpKind::BatchNorm) == 0);
    CHECK(count_kind(*opt, OpKind::UnderscoreNativeBatchNormLegitNoTraining) == 0);
    CHECK(opt->nodes().size() == g->nodes().size() - (std::string(suffix) == ".pt2" ? 1 : 2));  // core: + permute
    CHECK(verify_graph(*opt).empty());
    // The first conv keeps its name and source line, and reads the folded weights.
    const Node* conv = opt->nodes()[0].get();
    CHECK(conv->name == g->nodes()[0]->name);
    CHECK(conv->source.stack_trace == g->nodes()[0]->source.stack_trace);
    CHECK(conv->source.stack_trace.find("export_models.py") != std::string::npos);
    CHECK(arg_str(conv->args[1]) == "%p_c1_weight_bn_folded");
    // Optimal already: every pass leaves it textually unchanged.
    for (auto pass : {fold_batch_norm, fold_constants, common_subexpression_elimination, dead_code_elimination})
      CHECK(print_graph(*pass(*opt)) == print_graph(*opt));
    // The unused originals can go; the outputs still match PyTorch's.
    auto pruned = run(prune_unused_weights, *opt);
    CHECK(pruned->weights.count("bn.running_var") == 0);
    CHECK(pruned->weights.count("c1.weight") == 0);
    check_fixture_by_interpreter(*pruned, "small_cnn");
  }
}

TEST_CASE("passes keep every fixture's outputs (both .pt2 flavours)", "[passes]") {
  for (const char* name : kFixtures)
    for (const char* suffix : {".pt2", ".core.pt2"}) {
      INFO(name << suffix);
      auto g = load_pt2(test::fixture(std::string(name) + suffix));
      auto opt = optimize(*g);
      INFO(print_graph(*opt));
      CHECK(opt->nodes().size() <= g->nodes().size());
      check_fixture_by_interpreter(*opt, name);
      for (auto pass : {fold_batch_norm, fold_constants, common_subexpression_elimination, dead_code_elimination})
        CHECK(print_graph(*pass(*opt)) == print_graph(*opt));
    }
}

TEST_CASE("passes leave a graph with nothing to do textually unchanged", "[passes]") {
  auto g = load_pt2(test::fixture("mlp_dyn.pt2"));
  for (auto pass : {fold_batch_norm, fold_constants, common_subexpression_elimination, dead_code_elimination})
    CHECK(print_graph(*run(pass, *g)) == print_graph(*g));
}

TEST_CASE("passes on tfm_dyn.core: cse merges the duplicated arange, weight transposes fold", "[passes]") {
  auto g = load_pt2(test::fixture("tfm_dyn.core.pt2"));
  auto opt = optimize(*g);
  INFO(print_graph(*opt));
  CHECK(count_kind(*g, OpKind::ArangeStartStep) == 2);
  CHECK(count_kind(*opt, OpKind::ArangeStartStep) == 1);
  // sym_size of the batch dim only fed size arithmetic: gone; permutes of weights are constants.
  CHECK(opt->find_value("sym_size_int_10") == nullptr);
  CHECK(count_kind(*opt, OpKind::Permute) == count_kind(*g, OpKind::Permute) - 4);
  for (const auto& in : opt->inputs)
    if (in.role == GraphInput::Role::Constant)  // views of weights: no byte copied
      CHECK(in.value->type.strides != contiguous_strides(in.value->type.sizes));
}

#ifdef PTC_TEST_TORCHSCRIPT
TEST_CASE("passes keep every TorchScript fixture's outputs", "[passes][torchscript]") {
  // index_ops.pt: the TorchScript reader does not follow its data-dependent int arithmetic yet.
  for (const char* name : {"mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "mha"}) {
    INFO(name << ".pt");
    auto g = load_model(test::fixture(std::string(name) + ".pt"));
    bool untyped = false;
    for (const auto& n : g->nodes())
      for (const Value* o : n->outputs) untyped = untyped || o->type.kind == Type::Kind::Unknown;
    if (untyped) g = propagate_shapes(*g, ShapePropMode::Fill);
    auto opt = optimize(*g);
    INFO(print_graph(*opt));
    if (std::string(name) == "small_cnn") CHECK(count_kind(*opt, OpKind::BatchNorm) == 0);
    check_fixture_by_interpreter(*opt, name);
  }
}
#endif

TEST_CASE("library_ops_f32: GEMMs of a bfloat16 model read float32 weights folded at compile time", "[passes][half]") {
  auto g = load_pt2(test::fixture("mlp_dyn_bf16.pt2"));
  auto out = run_graph_passes(*g);
  INFO(print_graph(*out));
  int linears = 0;
  for (const auto& n : out->nodes()) {
    if (n->kind != OpKind::Linear) continue;
    ++linears;
    for (const Value* v : n->inputs()) CHECK(v->type.dtype == DType::Float32);  // x converted, weight and bias folded
    CHECK(n->outputs[0]->type.dtype == DType::Float32);
    // the weight is a constant now (the conversion folded), in float32
    const Value* w = std::get<Value*>(*n->arg("weight"));
    const TensorData* td = rewrite::weight_of(*out, w);
    REQUIRE(td);
    CHECK(td->type.dtype == DType::Float32);
  }
  CHECK(linears == 2);
  // the graph still returns bfloat16
  CHECK(out->outputs[0]->type.dtype == DType::BFloat16);
  // and the weights' values are the bfloat16 ones, exactly
  const TensorData* src = nullptr;
  for (const auto& [name, td] : g->weights)
    if (name.find("l1.weight") != std::string::npos) src = &td;
  REQUIRE(src);
  std::vector<double> want = rewrite::read_all(*src);
  bool found = false;
  for (const auto& [name, td] : out->weights)
    if (td.type.dtype == DType::Float32 && rewrite::read_all(td) == want) found = true;
  CHECK(found);
}

TEST_CASE("autocast: library operations read bfloat16 operands and write bfloat16, converted back to float32", "[passes][half]") {
  auto g = load_pt2(test::fixture("tiny_tfm.pt2"));
  GraphPassOptions o;
  o.autocast = DType::BFloat16;
  auto out = run_graph_passes(*g, {}, o);
  INFO(print_graph(*out));
  int library = 0;
  for (const auto& n : out->nodes()) {
    const LibraryClass c = library_class(n->kind);
    if (c == LibraryClass::None) {
      // everything else computes in float32: softmax, layer norm, reductions, gelu
      if (n->kind == OpKind::SoftmaxInt || n->kind == OpKind::UnderscoreSoftmax || n->kind == OpKind::LayerNorm || n->kind == OpKind::Gelu)
        for (const Value* v : n->outputs) CHECK(v->type.dtype == DType::Float32);
      continue;
    }
    ++library;
    // CPU (no native half kernels): library_ops_f32 widened the rounded operands again
    for (const Value* v : n->inputs())
      if (v->type.is_tensor() && dtype_is_float(v->type.dtype)) CHECK(v->type.dtype == DType::Float32);
  }
  CHECK(library > 0);
  for (const Value* v : out->outputs) CHECK(v->type.dtype == g->outputs[0]->type.dtype);  // the model's dtype
  // With native half GEMMs (CUDA) the GEMMs keep their bfloat16 operands, and every weight they
  // read is a bfloat16 constant folded at compile time.
  o.half_native.gemm = true;
  auto native = run_graph_passes(*g, {}, o);
  int half_gemms = 0;
  for (const auto& n : native->nodes()) {
    if (library_class(n->kind) != LibraryClass::Gemm) continue;
    ++half_gemms;
    for (const Value* v : n->inputs())
      if (v->type.is_tensor() && dtype_is_float(v->type.dtype)) CHECK(v->type.dtype == DType::BFloat16);
    for (const Value* v : n->outputs) CHECK(v->type.dtype == DType::BFloat16);
  }
  CHECK(half_gemms > 0);
  bool bf16_weight = false;
  for (const auto& [name, td] : native->weights) bf16_weight = bf16_weight || td.type.dtype == DType::BFloat16;
  CHECK(bf16_weight);
}

TEST_CASE("autocast: ops on half values run in half, as under torch.autocast, and are stored in half", "[passes][half]") {
  // y = x @ x (bf16), s = silu(y), z = relu(s * mean(s)), out = z + x, e = exp(s)
  Builder b;
  Value* x = b.input("x", DType::Float32, {Expr(4), Expr(4)});
  Value* y = b.op(OpKind::Mm, "mm", {{"self", x}, {"mat2", x}});
  Value* s = b.op(OpKind::Silu, "silu", {{"self", y}});
  Value* m = b.op(OpKind::MeanDim, "mean", {{"self", s}, {"dim", ints({1})}, {"keepdim", true}});
  Value* z = b.op(OpKind::MulTensor, "mul", {{"self", s}, {"other", m}});
  Value* r = b.op(OpKind::Relu, "relu", {{"self", z}});
  Value* out = b.op(OpKind::AddTensor, "add", {{"self", r}, {"other", x}});
  Value* e = b.op(OpKind::Exp, "exp", {{"self", s}});
  b.g->outputs = {out, e};
  auto g = run([](const Graph& x) { return autocast(x, DType::BFloat16); }, *b.g);
  // Which nodes' results are rounded through bfloat16: a to.dtype(bf16) reads them.
  auto rounded = [&](const std::string& name) {
    for (const auto& n : g->nodes()) {
      if (n->kind != OpKind::ToDtype || n->outputs[0]->type.dtype != DType::BFloat16) continue;
      const Value* src = std::get<Value*>(*n->arg("self"));
      if (src->producer && src->producer->name == name) return true;
    }
    return false;
  };
  CHECK(rounded("silu"));   // silu of a bf16 product: bf16
  CHECK(rounded("mean"));   // mean of bf16 values: bf16 (torch accumulates in float32)
  CHECK(rounded("mul"));
  CHECK_FALSE(rounded("relu"));  // exact on bf16 values: nothing to round
  CHECK_FALSE(rounded("add"));   // bf16 + a float32 input promotes to float32
  CHECK_FALSE(rounded("exp"));   // on autocast's float32 list
  for (const Value* v : g->outputs) CHECK(v->type.dtype == DType::Float32);
  // The training form keeps float32 between library operations.
  auto train = autocast(*b.g, DType::BFloat16, /*round_fallthrough=*/false);
  for (const auto& n : train->nodes())
    if (n->kind == OpKind::ToDtype && n->outputs[0]->type.dtype == DType::BFloat16)
      CHECK(std::get<Value*>(*n->arg("self"))->producer == nullptr);  // only the input's rounding
  // silu's result, read by mean, mul and exp, is stored once, in bfloat16.
  GraphPassOptions o;
  o.autocast = DType::BFloat16;
  auto all = run_graph_passes(*b.g, {}, o);
  loop::Program p = lower_to_loops(*all);
  bool half_temp = false;
  for (const auto& buf : p.buffers)
    half_temp = half_temp || (buf.kind == loop::Buffer::Kind::Temp && buf.dtype == DType::BFloat16 && buf.sizes == std::vector<Expr>{Expr(4), Expr(4)});
  CHECK(half_temp);
  check_same_outputs(*b.g, *all, 16, 3e-2f);
}

TEST_CASE("autocast: an attention's additive mask stays float32", "[passes][half]") {
  Builder b;
  masked_attention(b);
  auto out = autocast(*b.g, DType::Float16);
  INFO(print_graph(*out));
  for (const auto& n : out->nodes()) {
    if (n->kind != OpKind::ScaledDotProductAttention) continue;
    for (const char* name : {"query", "key", "value"}) CHECK(std::get<Value*>(*n->arg(name))->type.dtype == DType::Float16);
    CHECK(std::get<Value*>(*n->arg("attn_mask"))->type.dtype == DType::Float32);
    CHECK(n->outputs[0]->type.dtype == DType::Float16);
  }
  CHECK(out->outputs[0]->type.dtype == DType::Float32);
}

TEST_CASE("library_ops_f32: attention stays half where the backend's is native, its float32 mask aside", "[passes][half]") {
  Builder b;
  masked_attention(b);
  auto half = autocast(*b.g, DType::BFloat16);
  for (bool native : {false, true}) {
    INFO("native attention: " << native);
    HalfLibraryOps ops;
    ops.attention = native;
    auto out = library_ops_f32(*half, ops);
    INFO(print_graph(*out));
    int seen = 0;
    for (const auto& n : out->nodes()) {
      if (n->kind != OpKind::ScaledDotProductAttention) continue;
      ++seen;
      for (const char* name : {"query", "key", "value"})
        CHECK(std::get<Value*>(*n->arg(name))->type.dtype == (native ? DType::BFloat16 : DType::Float32));
      CHECK(std::get<Value*>(*n->arg("attn_mask"))->type.dtype == DType::Float32);
      CHECK(n->outputs[0]->type.dtype == (native ? DType::BFloat16 : DType::Float32));
    }
    CHECK(seen == 1);
  }
}

TEST_CASE("merge_sibling_linears: linears of one input become one GEMM whose output they slice", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {Expr(2), Expr(3), Expr(8)});
  auto values = [](int64_t n, double seed) {
    std::vector<double> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(std::sin(seed + 0.37 * static_cast<double>(i)));
    return v;
  };
  Value* wq = b.weight("wq", "q.weight", DType::Float32, {4, 8}, values(32, 1));
  Value* bq = b.weight("bq", "q.bias", DType::Float32, {4}, values(4, 2));
  Value* wk = b.weight("wk", "k.weight", DType::Float32, {4, 8}, values(32, 3));
  Value* bk = b.weight("bk", "k.bias", DType::Float32, {4}, values(4, 4));
  Value* wv = b.weight("wv", "v.weight", DType::Float32, {6, 8}, values(48, 5));
  Value* bv = b.weight("bv", "v.bias", DType::Float32, {6}, values(6, 6));
  Value* wo = b.weight("wo", "o.weight", DType::Float32, {5, 8}, values(40, 7));  // no bias: a group of its own
  Value* q = b.op(OpKind::Linear, "q", {{"input", x}, {"weight", wq}, {"bias", bq}});
  Value* k = b.op(OpKind::Linear, "k", {{"input", x}, {"weight", wk}, {"bias", bk}});
  Value* v = b.op(OpKind::Linear, "v", {{"input", x}, {"weight", wv}, {"bias", bv}});
  Value* o = b.op(OpKind::Linear, "o", {{"input", x}, {"weight", wo}});
  Value* qk = b.op(OpKind::MulTensor, "qk", {{"self", q}, {"other", k}});
  b.g->outputs = {qk, v, o};
  auto out = run(merge_sibling_linears, *b.g);
  CHECK(count_kind(*out, OpKind::Linear) == 2);  // q, k, v merged; o alone
  CHECK(count_kind(*out, OpKind::SliceTensor) == 3);
  bool stacked = false;
  for (const auto& [name, td] : out->weights)
    if (td.type.sizes.size() == 2 && td.type.sizes[0] == Expr(14)) {
      stacked = true;
      std::vector<double> want = values(32, 1), kv = values(32, 3), vv = values(48, 5);
      want.insert(want.end(), kv.begin(), kv.end());
      want.insert(want.end(), vv.begin(), vv.end());
      for (double& w : want) w = static_cast<float>(w);  // (stored as float32)
      CHECK(rewrite::read_all(td) == want);  // q's rows, then k's, then v's
    }
  CHECK(stacked);
  // The same outputs through lowering and the interpreter (within float32 rounding: the fused
  // bias may round once less).
  check_same_outputs(*b.g, *out, 48, 1e-6f);
}

TEST_CASE("pad_linear_weights: a wide linear reads zero-padded weights and its consumer a slice", "[passes]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {Expr(2), Expr(8)});
  std::vector<double> wv(4099 * 8), bv(4099);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::sin(0.01 * static_cast<double>(i));
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.02 * static_cast<double>(i));
  Value* w = b.weight("w", "head.weight", DType::Float32, {4099, 8}, wv);
  Value* bias = b.weight("b", "head.bias", DType::Float32, {4099}, bv);
  Value* y = b.op(OpKind::Linear, "head", {{"input", x}, {"weight", w}, {"bias", bias}});
  Value* r = b.op(OpKind::Relu, "relu", {{"self", y}});
  Value* narrow = b.op(OpKind::Linear, "narrow", {{"input", x}, {"weight", b.weight("w2", "n.weight", DType::Float32, {100, 8}, std::vector<double>(800, 0.5))}});
  b.g->outputs = {r, narrow};
  CHECK(print_graph(*pad_linear_weights(*b.g, 8, false)) == print_graph(*b.g));  // float32 weights: only under autocast
  auto out = run([](const Graph& g) { return pad_linear_weights(g, 8, true); }, *b.g);
  CHECK(count_kind(*out, OpKind::SliceTensor) == 1);  // the narrow one (100 rows) is left alone
  bool padded = false;
  for (const auto& [name, td] : out->weights)
    if (td.type.sizes.size() == 2 && td.type.sizes[0] == Expr(4104)) {
      padded = true;
      std::vector<double> got = rewrite::read_all(td);
      for (size_t i = 4099 * 8; i < got.size(); ++i) CHECK(got[i] == 0.0);
    }
  CHECK(padded);
  CHECK(print_graph(*pad_linear_weights(*b.g, 1, true)) == print_graph(*b.g));  // multiple 1: unchanged
  check_same_outputs(*b.g, *out, 16, 0.f);
}

TEST_CASE("fold_round_trips: a half value widened, rearranged and narrowed again is read as it is", "[passes][half]") {
  Builder b;
  Value* x = b.input("x", DType::BFloat16, {sym::Expr(2), sym::Expr(3), sym::Expr(24)});
  Value* wide = b.op(OpKind::ToDtype, "wide", {{"self", x}, {"dtype", DType::Float32}});
  std::vector<Value*> parts = b.node(OpKind::SplitTensor, "split", {{"self", wide}, {"split_size", sym::Expr(8)}, {"dim", int64_t{2}}});
  REQUIRE(parts.size() == 3);
  std::vector<Value*> heads;
  for (size_t i = 0; i < 3; ++i) {
    Value* view = b.op(OpKind::View, "view" + std::to_string(i), {{"self", parts[i]}, {"size", std::vector<sym::Expr>{2, 3, 2, 4}}});
    Value* t = b.op(OpKind::TransposeInt, "t" + std::to_string(i), {{"self", view}, {"dim0", int64_t{1}}, {"dim1", int64_t{2}}});
    heads.push_back(b.op(OpKind::ToDtype, "narrow" + std::to_string(i), {{"self", t}, {"dtype", DType::BFloat16}}));
  }
  Value* att = b.op(OpKind::ScaledDotProductAttention, "sdpa", {{"query", heads[0]}, {"key", heads[1]}, {"value", heads[2]}});
  // Not exact, so kept: float32 narrowed to float16 (another half dtype than the source's).
  Value* other = b.op(OpKind::ToDtype, "f16", {{"self", wide}, {"dtype", DType::Float16}});
  Value* sum = b.op(OpKind::Sum, "sum", {{"self", other}});
  b.g->outputs = {att, sum};
  auto out = dead_code_elimination(*fold_round_trips(*b.g));
  INFO(print_graph(*out));
  CHECK(verify_graph(*out).empty());
  for (const auto& n : out->nodes()) {
    if (n->kind == OpKind::ScaledDotProductAttention)
      for (const char* name : {"query", "key", "value"}) {
        const Value* in = std::get<Value*>(*n->arg(name));
        CHECK(in->type.dtype == DType::BFloat16);
        REQUIRE(in->producer);
        CHECK(in->producer->kind == OpKind::TransposeInt);  // the views of x itself
      }
  }
  CHECK(count_kind(*out, OpKind::SplitTensor) == 1);  // one split of x, shared by q, k and v
  CHECK(count_kind(*out, OpKind::ToDtype) == 2);      // `wide` and `f16` stay (for the sum)
}

TEST_CASE("channels_last_weights: convolution weights become KRSC constants; channels_last_pays", "[passes]") {
  auto g = load_pt2(test::fixture("small_cnn.pt2"));
  CHECK(channels_last_pays(*g, false));
  CHECK_FALSE(channels_last_pays(*g, true));  // exact fp32: no depthwise layers, its 3x3 ones would run cuDNN's NHWC kernels
  auto mlp = load_pt2(test::fixture("mlp.pt2"));
  CHECK_FALSE(channels_last_pays(*mlp, false));  // no convolutions
  CHECK_FALSE(channels_last_pays(*mlp, true));
  auto mbv2 = load_pt2(test::fixture("mbv2_dyn.pt2"));
  CHECK(channels_last_pays(*mbv2, false));  // 1x1 and depthwise ones
  CHECK(channels_last_pays(*mbv2, true));   // and only the stem left to cuDNN
  // grouped: depthwise (one input channel per group) pays, other groupings do not
  auto grouped = [](int64_t groups, int64_t out, bool exact, int plain_3x3 = 0, int plain_1x1 = 0) {
    Builder b;
    Value* x = b.input("x", DType::Float32, {Expr(1), Expr(16), Expr(8), Expr(8)});
    Value* w = b.weight("p_w", "w", DType::Float32, {out, 16 / groups, 3, 3}, std::vector<double>(out * (16 / groups) * 9, 0.5));
    Value* y = b.op(OpKind::Conv2d, "conv", {{"input", x}, {"weight", w}, {"groups", Expr(groups)}});
    // ungrouped out -> out convolutions after it: 3x3 (cuDNN's under channels-last) or 1x1 (GEMMs)
    for (int i = 0; i < plain_3x3 + plain_1x1; ++i) {
      const int64_t k = i < plain_3x3 ? 3 : 1;
      Value* wi = b.weight("p_w" + std::to_string(i), "w" + std::to_string(i), DType::Float32, {out, out, k, k},
                           std::vector<double>(out * out * k * k, 0.5));
      y = b.op(OpKind::Conv2d, "conv" + std::to_string(i), {{"input", y}, {"weight", wi}, {"padding", std::vector<int64_t>{k / 2, k / 2}}});
    }
    b.g->outputs = {y};
    return channels_last_pays(*b.g, exact);
  };
  CHECK(grouped(16, 16, false));
  CHECK(grouped(16, 32, false));  // depthwise with a channel multiplier of 2
  CHECK_FALSE(grouped(4, 16, false));
  CHECK(grouped(1, 16, false));
  CHECK(grouped(16, 16, true));
  CHECK_FALSE(grouped(4, 16, true));
  CHECK_FALSE(grouped(1, 16, true));       // no depthwise layer
  CHECK(grouped(16, 16, true, 0, 9));      // depthwise + 1x1 GEMMs
  CHECK(grouped(16, 16, true, 1, 6));      // one of eight left to cuDNN
  CHECK_FALSE(grouped(16, 16, true, 1, 5));  // one of seven
  CHECK_FALSE(grouped(16, 16, true, 3, 0));
  auto out = run_graph_passes(*g, {}, test::channels_last_options());
  INFO(print_graph(*out));
  int convs = 0;
  for (const auto& n : out->nodes()) {
    if (n->kind != OpKind::Conv2d) continue;
    ++convs;
    const Value* w = std::get<Value*>(*n->arg("weight"));
    const TensorData* td = rewrite::weight_of(*out, w);
    REQUIRE(td);
    const auto& t = td->type;
    REQUIRE(t.rank() == 4);
    // [O, C, KH, KW] stored O, KH, KW, C
    CHECK(t.strides[1] == Expr(1));
    CHECK(t.strides[3] == t.sizes[1]);
    CHECK(t.strides[2] == t.sizes[1] * t.sizes[3]);
  }
  CHECK(convs == 2);
}
