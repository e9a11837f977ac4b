// Shape propagation (lib/passes/shape_prop.cpp): the rules reproduce torch.export's recorded
// types on every fixture (Check mode), Fill mode rebuilds them from scratch, and hand-built
// graphs pin down the tricky rules and the error messages.
#include <catch2/catch.hpp>
#include <fstream>

#include "passes/shape_rules.h"    // the rule table (coverage test)
#include "ptc/error.h"
#include "ptc/frontend.h"
#include "ptc/passes.h"
#include "test_util.h"

using namespace ptc;
using sym::Expr;

namespace {

const char* kFixtures[] = {"mlp", "mlp_dyn", "small_cnn", "tiny_tfm", "tfm_dyn", "index_ops", "mha"};

bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

// Types agree as Check mode compares them (strides of size-1 dims do not count).
bool same_type(const Type& a, const Type& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Type::Kind::SymInt)
    return a.value.has_value() == b.value.has_value() && (!a.value || sym::prove_eq(*a.value, *b.value));
  if (!a.is_tensor()) return true;
  if (a.dtype != b.dtype || a.rank() != b.rank() || !sym::prove_eq(a.storage_offset, b.storage_offset)) return false;
  for (size_t i = 0; i < a.rank(); ++i) {
    if (!sym::prove_eq(a.sizes[i], b.sizes[i])) return false;
    if (a.sizes[i] != Expr(1) && !sym::prove_eq(a.strides[i], b.strides[i])) return false;
  }
  return true;
}

// Check mode passes; Fill mode gives the same types; Fill on the graph with every intermediate
// type erased (what a TorchScript graph with dynamic shapes looks like) rebuilds them all.
void check_model(const std::string& path) {
  INFO(path);
  auto g = load_pt2(path);
  std::unique_ptr<Graph> checked;
  REQUIRE_NOTHROW(checked = propagate_shapes(*g, ShapePropMode::Check));
  auto filled = propagate_shapes(*g, ShapePropMode::Fill);
  auto erased = clone_graph(*g);
  for (const auto& n : erased->nodes())
    if (n->kind != OpKind::Unknown)  // unknown ops keep what the reader recorded
      for (Value* v : n->outputs) v->type = Type::unknown();
  auto refilled = propagate_shapes(*erased, ShapePropMode::Fill);
  size_t tensors = 0;
  for (size_t i = 0; i < g->values().size(); ++i) {
    const Type& want = g->values()[i]->type;
    INFO("value %" << g->values()[i]->name << ": recorded " << want.str() << ", filled "
                   << filled->values()[i]->type.str() << ", refilled " << refilled->values()[i]->type.str());
    CHECK(same_type(checked->values()[i]->type, want));
    CHECK(same_type(filled->values()[i]->type, want));
    CHECK(same_type(refilled->values()[i]->type, want));
    tensors += want.is_tensor();
  }
  CHECK(tensors > 0);
  CHECK(print_graph(*clone_graph(*g)) == print_graph(*g));
}

// ---- hand-built graphs

struct Builder {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Expr sym(const std::string& name, int64_t lo = 2, int64_t hi = 1024) {
    g->symbols[name] = sym::Range{lo, hi};
    return sym::symbol(name, {lo, hi});
  }
  Value* input(const std::string& name, DType dt, std::vector<Expr> sizes, std::vector<Expr> strides = {}) {
    return g->add_input(name, Type::tensor(dt, std::move(sizes), std::move(strides)), GraphInput::Role::User);
  }
  // A node of `kind` named `name` with the given arguments (schema defaults for the rest) and
  // `nout` outputs of unknown type ("name", "name_1", ...).
  Node* node(OpKind kind, const std::string& name, std::map<std::string, Arg> given, int nout = 1) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->name = name;
    n->target = op_info(kind).schema.qualified();
    n->args = test::schema_args(kind, std::move(given));
    n->list_output =
        op_info(kind).schema.returns.size() == 1 && op_info(kind).schema.returns[0].type == ArgType::TensorList;
    for (int i = 0; i < nout; ++i)
      n->outputs.push_back(g->add_value(i ? name + "_" + std::to_string(i) : name, Type::unknown()));
    return g->add_node(std::move(n));
  }
  Value* op(OpKind kind, const std::string& name, std::map<std::string, Arg> given) {
    return node(kind, name, std::move(given))->outputs[0];
  }
  std::unique_ptr<Graph> fill() { return propagate_shapes(*g, ShapePropMode::Fill); }
  std::string type_of(const std::string& value) {
    auto out = fill();
    const Value* v = out->find_value(value);
    REQUIRE(v);
    return v->type.str();
  }
};

std::string fill_error(Builder& b) {
  try {
    b.fill();
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

Arg ints(std::vector<int64_t> v) { return v; }
Arg syms(std::vector<Expr> v) { return v; }

}  // namespace

TEST_CASE("shape rules reproduce torch.export's types on every fixture", "[shape_prop]") {
  for (const char* name : kFixtures) {
    check_model(test::fixture(std::string(name) + ".pt2"));
    check_model(test::fixture(std::string(name) + ".core.pt2"));
  }
}

TEST_CASE("shape rules reproduce torch.export's types on resnet18 (local cache only)", "[shape_prop]") {
  std::string dir = test::fixture("cache/");
  if (!file_exists(dir + "resnet18.pt2")) {
    SUCCEED("models/cache/resnet18.pt2 is not here (git-ignored); skipped");
    return;
  }
  check_model(dir + "resnet18.pt2");
  if (file_exists(dir + "resnet18.core.pt2")) check_model(dir + "resnet18.core.pt2");
}

TEST_CASE("Fill mode types a TorchScript graph with dynamic shapes", "[shape_prop][torchscript]") {
  if (!torchscript_available()) {
    SUCCEED("ptc was built without libtorch; skipped");
    return;
  }
  struct Want {
    const char* file;
    const char* output;
  };
  for (Want w : {Want{"mlp_dyn.pt", "f32[s77, 64]"}, Want{"tfm_dyn.pt", "f32[s77, s27, 64]"}}) {
    INFO(w.file);
    auto g = load_model(test::fixture(w.file));
    REQUIRE(g->outputs.size() == 1);
    // The reader types nodes with the shape rules as it reads them (the trace records none for
    // dynamic inputs) as far as they go — all of mlp_dyn; tfm_dyn's size arithmetic through
    // prim:: nodes stops it — and Fill completes the rest.
    if (std::string(w.file) == "mlp_dyn.pt") CHECK(g->outputs[0]->type.str() == w.output);
    auto f = propagate_shapes(*g, ShapePropMode::Fill);
    CHECK(f->outputs[0]->type.str() == w.output);
    for (const auto& n : f->nodes())
      if (n->kind != OpKind::Unknown && n->target.rfind("prim::", 0) != 0)
        for (const Value* v : n->outputs) {
          INFO(n->name << " " << n->op_name());
          // Only values computed from a prim:: node (NumToTensor) stay unknown.
          bool from_prim = false;
          for (const Value* in : n->inputs())
            from_prim = from_prim || (in->producer && in->producer->kind == OpKind::Unknown);
          CHECK((v->type.kind != Type::Kind::Unknown || from_prim));
        }
  }
}

TEST_CASE("clone_graph copies deeply", "[shape_prop]") {
  auto g = load_pt2(test::fixture("tfm_dyn.core.pt2"));
  auto c = clone_graph(*g);
  CHECK(print_graph(*c) == print_graph(*g));
  CHECK(verify_graph(*c).empty());
  CHECK(c->weights.begin()->second.storage == g->weights.begin()->second.storage);  // bytes shared
  c->find_value("view")->type = Type::unknown();
  CHECK(g->find_value("view")->type.str() == "f32[s27*s77, 64]");
  for (size_t i = 0; i < c->nodes().size(); ++i)
    for (const Value* in : c->nodes()[i]->inputs()) CHECK(c->find_value(in->name) == in);
}

TEST_CASE("every op in the op table has a shape rule", "[shape_prop]") {
  const auto& table = shape::rule_table();
  for (const OpInfo& op : all_ops()) {
    INFO(op.schema.qualified());
    CHECK(table[static_cast<size_t>(op.kind)] != nullptr);
  }
}

TEST_CASE("Check mode names the node, op, source line and both types on a disagreement", "[shape_prop]") {
  auto g = load_pt2(test::fixture("mlp_dyn.pt2"));
  auto bad = clone_graph(*g);
  Value* v = bad->find_value("linear");
  REQUIRE(v);
  v->type.sizes[1] = 255;
  v->type.strides = contiguous_strides(v->type.sizes);
  try {
    propagate_shapes(*bad, ShapePropMode::Check);
    FAIL("no error");
  } catch (const UserError& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.rfind("node 'linear' (aten::linear) at ", 0) == 0);
    CHECK(m.find("export_models.py:") != std::string::npos);
    CHECK(m.find("recorded as f32[s77, 255] but the shape rule gives f32[s77, 256]") != std::string::npos);
  }
  // A stride difference is caught too (permute is a view with known strides).
  auto bad2 = clone_graph(*load_pt2(test::fixture("mlp_dyn.core.pt2")));
  Value* p = nullptr;
  for (const auto& n : bad2->nodes())
    if (n->kind == OpKind::Permute && !p) p = n->outputs[0];
  REQUIRE(p);
  p->type.strides = contiguous_strides(p->type.sizes);
  CHECK_THROWS_WITH(propagate_shapes(*bad2, ShapePropMode::Check), Catch::Contains("(strides differ)"));
}

TEST_CASE("broadcasting with symbols and type promotion", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0"), s1 = b.sym("s1");
  Value* x = b.input("x", DType::Float32, {s0, 1, 8});
  Value* y = b.input("y", DType::Float32, {s1, 8});
  Value* z = b.input("z", DType::Float32, {1, 8});
  Value* i = b.input("i", DType::Int64, {s0, 1, 8});
  Value* k = b.input("k", DType::Int32, {8});
  Value* m = b.input("m", DType::Bool, {s1, 8});
  Value* h = b.input("h", DType::Float16, {8});
  Value* d0 = b.input("d0", DType::Float64, {});
  b.op(OpKind::AddTensor, "xy", {{"self", x}, {"other", y}});
  b.op(OpKind::MulTensor, "yz", {{"self", y}, {"other", z}});
  b.op(OpKind::MulTensor, "zs", {{"self", z}, {"other", x}});
  b.op(OpKind::AddTensor, "i_float", {{"self", i}, {"other", 2.5}});  // int tensor + float scalar
  b.op(OpKind::MulScalar, "i_int", {{"self", i}, {"other", int64_t(3)}});
  b.op(OpKind::MulScalar, "x_int", {{"self", x}, {"other", int64_t(3)}});  // float stays float
  b.op(OpKind::AddScalar, "m_int", {{"self", m}, {"other", int64_t(1)}});  // bool + int -> int64
  b.op(OpKind::AddTensor, "ik", {{"self", i}, {"other", k}});
  b.op(OpKind::AddTensor, "h0d", {{"self", h}, {"other", d0}});  // 0-dim tensors do not lift the category
  b.op(OpKind::AddTensor, "i0d", {{"self", i}, {"other", d0}});  // ... unless it is higher
  b.op(OpKind::DivTensor, "idiv", {{"self", i}, {"other", k}});
  b.op(OpKind::DivTensorMode, "ifloor", {{"self", i}, {"other", k}, {"rounding_mode", std::string("floor")}});
  b.op(OpKind::LtTensor, "cmp", {{"self", x}, {"other", y}});
  b.op(OpKind::WhereScalarOther, "w", {{"condition", m}, {"self", x}, {"other", 0.0}});
  b.op(OpKind::Sigmoid, "isig", {{"self", i}});
  b.op(OpKind::SumDimIntList, "msum", {{"self", m}, {"dim", ints({1})}});
  b.op(OpKind::Clamp, "iclamp", {{"self", i}, {"min", 0.5}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("xy") == "f32[s0, s1, 8]");
  CHECK(t("yz") == "f32[s1, 8]");
  CHECK(t("zs") == "f32[s0, 1, 8]");
  CHECK(t("i_float") == "f32[s0, 1, 8]");
  CHECK(t("i_int") == "i64[s0, 1, 8]");
  CHECK(t("x_int") == "f32[s0, 1, 8]");
  CHECK(t("m_int") == "i64[s1, 8]");
  CHECK(t("ik") == "i64[s0, 1, 8]");
  CHECK(t("h0d") == "f16[8]");
  CHECK(t("i0d") == "f64[s0, 1, 8]");
  CHECK(t("idiv") == "f32[s0, 1, 8]");
  CHECK(t("ifloor") == "i64[s0, 1, 8]");
  CHECK(t("cmp") == "bool[s0, s1, 8]");
  CHECK(t("w") == "f32[s0, s1, 8]");
  CHECK(t("isig") == "f32[s0, 1, 8]");
  CHECK(t("msum") == "i64[s1]");
  CHECK(t("iclamp") == "f32[s0, 1, 8]");
}

TEST_CASE("elementwise ops keep their input's layout", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 4, 6});
  Value* bias = b.input("bias", DType::Float32, {6});
  Value* p = b.op(OpKind::Permute, "p", {{"self", x}, {"dims", ints({1, 0, 2})}});
  b.op(OpKind::AddTensor, "pb", {{"self", p}, {"other", bias}});
  b.op(OpKind::Relu, "r", {{"self", p}});
  b.op(OpKind::Clone, "cl", {{"self", p}});
  b.op(OpKind::Clone, "cc", {{"self", p}, {"memory_format", std::string("contiguous_format")}});
  b.op(OpKind::Contiguous, "ct", {{"self", p}});
  b.op(OpKind::SoftmaxInt, "sm", {{"self", p}, {"dim", int64_t(-1)}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("p") == "f32[4, s0, 6]{6, 24, 1}");
  CHECK(t("pb") == "f32[4, s0, 6]{6, 24, 1}");
  CHECK(t("r") == "f32[4, s0, 6]{6, 24, 1}");
  CHECK(t("cl") == "f32[4, s0, 6]{6, 24, 1}");
  CHECK(t("cc") == "f32[4, s0, 6]");
  CHECK(t("ct") == "f32[4, s0, 6]");
  CHECK(t("sm") == "f32[4, s0, 6]");
}

TEST_CASE("views: -1 over a symbolic numel, strides and storage offsets", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0"), s1 = b.sym("s1");
  Value* x = b.input("x", DType::Float32, {s0, s1, 64});
  Value* v = b.op(OpKind::View, "v", {{"self", x}, {"size", syms({-1, 64})}});
  b.op(OpKind::View, "v2", {{"self", x}, {"size", syms({s0, -1})}});
  b.op(OpKind::View, "v3", {{"self", v}, {"size", syms({s0, s1, 4, 16})}});
  Value* t = b.op(OpKind::TransposeInt, "t", {{"self", x}, {"dim0", int64_t(0)}, {"dim1", int64_t(1)}});
  b.op(OpKind::Reshape, "r", {{"self", t}, {"shape", syms({-1, 64})}});  // not viewable: copies
  b.op(OpKind::View, "tv", {{"self", t}, {"size", syms({s1, s0, 4, 16})}});
  b.op(OpKind::Expand, "e",
       {{"self", b.op(OpKind::Unsqueeze, "u", {{"self", x}, {"dim", int64_t(1)}})}, {"size", syms({-1, 3, -1, -1})}});
  b.op(OpKind::SelectInt, "sel", {{"self", x}, {"dim", int64_t(1)}, {"index", Expr(-1)}});
  b.op(OpKind::FlattenUsingInts, "f", {{"self", x}, {"start_dim", int64_t(1)}});
  b.op(OpKind::UnflattenInt, "uf", {{"self", x}, {"dim", int64_t(2)}, {"sizes", syms({4, -1})}});
  b.op(OpKind::SqueezeDim, "sq",
       {{"self", b.op(OpKind::Unsqueeze, "u2", {{"self", x}, {"dim", int64_t(-1)}})}, {"dim", int64_t(-1)}});
  auto out = b.fill();
  auto ty = [&](const char* n) { return out->find_value(n)->type; };
  CHECK(ty("v").str() == "f32[s0*s1, 64]");
  CHECK(ty("v2").str() == "f32[s0, 64*s1]");
  CHECK(ty("v3").str() == "f32[s0, s1, 4, 16]");
  CHECK(ty("t").str() == "f32[s1, s0, 64]{64, 64*s1, 1}");
  CHECK(ty("r").str() == "f32[s0*s1, 64]");
  CHECK(ty("tv").str() == "f32[s1, s0, 4, 16]{64, 64*s1, 16, 1}");
  CHECK(ty("u").str() == "f32[s0, 1, s1, 64]");
  CHECK(ty("u").strides == std::vector<Expr>{s1 * 64, s1 * 64, 64, 1});
  CHECK(ty("e").str() == "f32[s0, 3, s1, 64]{64*s1, 0, 64, 1}");
  CHECK(ty("sel").str() == "f32[s0, 64]{64*s1, 1}");
  CHECK(ty("sel").storage_offset.str() == "64*s1 - 64");
  CHECK(ty("f").str() == "f32[s0, 64*s1]");
  CHECK(ty("uf").str() == "f32[s0, s1, 4, 16]");
  CHECK(ty("sq").str() == "f32[s0, s1, 64]");
}

TEST_CASE("slice with None, negative, clamped and stepped bounds", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0", 4, 64);
  Value* x = b.input("x", DType::Float32, {s0, 10});
  auto slice = [&](const char* name, int64_t dim, Arg start, Arg end, int64_t step) {
    b.op(OpKind::SliceTensor, name, {{"self", x}, {"dim", dim}, {"start", start}, {"end", end}, {"step", Expr(step)}});
  };
  const Arg none = std::monostate{};
  slice("a", 1, Expr(-3), none, 1);            // x[:, -3:]
  slice("b", 1, Expr(2), Expr(100), 3);        // x[:, 2:100:3] (end clamped)
  slice("c", 0, Expr(1), Expr(INT64_MAX), 1);  // x[1:]
  slice("d", 0, none, Expr(-1), 1);            // x[:-1]
  slice("e", 1, Expr(-100), Expr(4), 2);       // start clamped to 0
  slice("f", 1, Expr(7), Expr(3), 1);          // empty
  b.op(OpKind::Narrow, "n", {{"self", x}, {"dim", int64_t(1)}, {"start", Expr(-4)}, {"length", Expr(2)}});
  auto out = b.fill();
  auto ty = [&](const char* n) { return out->find_value(n)->type; };
  CHECK(ty("a").str() == "f32[s0, 3]{10, 1}");
  CHECK(ty("a").storage_offset == Expr(7));
  CHECK(ty("b").str() == "f32[s0, 3]{10, 3}");
  CHECK(ty("b").storage_offset == Expr(2));
  CHECK(ty("c").str() == "f32[s0 - 1, 10]");
  CHECK(ty("c").storage_offset == Expr(10));
  CHECK(ty("d").str() == "f32[s0 - 1, 10]");
  CHECK(ty("d").storage_offset == Expr(0));
  CHECK(ty("e").str() == "f32[s0, 2]{10, 2}");
  CHECK(ty("f").str() == "f32[s0, 0]{10, 1}");
  CHECK(ty("n").str() == "f32[s0, 2]{10, 1}");
  CHECK(ty("n").storage_offset == Expr(6));
}

TEST_CASE("split, chunk and unbind give one view per element", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 10});
  Node* sp = b.node(OpKind::SplitTensor, "sp", {{"self", x}, {"split_size", Expr(4)}, {"dim", int64_t(1)}}, 3);
  b.node(OpKind::SplitWithSizes, "sw", {{"self", x}, {"split_sizes", syms({3, 7})}, {"dim", int64_t(-1)}}, 2);
  b.node(OpKind::Chunk, "ch", {{"self", x}, {"chunks", int64_t(3)}, {"dim", int64_t(1)}}, 3);
  b.node(OpKind::UnbindInt, "ub", {{"self", x}, {"dim", int64_t(1)}}, 10);
  b.node(OpKind::SplitTensor, "sd", {{"self", x}, {"split_size", Expr(2)}, {"dim", int64_t(0)}},
         4);  // s0: count from the node
  auto out = b.fill();
  auto ty = [&](const std::string& n) { return out->find_value(n)->type; };
  CHECK(sp->list_output);
  CHECK(ty("sp").str() == "f32[s0, 4]{10, 1}");
  CHECK(ty("sp_2").str() == "f32[s0, 2]{10, 1}");
  CHECK(ty("sp_2").storage_offset == Expr(8));
  CHECK(ty("sw_1").str() == "f32[s0, 7]{10, 1}");
  CHECK(ty("sw_1").storage_offset == Expr(3));
  CHECK(ty("ch_2").str() == "f32[s0, 2]{10, 1}");
  CHECK(ty("ub_9").str() == "f32[s0]{10}");
  CHECK(ty("ub_9").storage_offset == Expr(9));
  CHECK(ty("sd_3").str() == "f32[s0 - 6, 10]");
  CHECK(ty("sd_3").storage_offset == Expr(60));

  Builder bad;
  Value* y = bad.input("y", DType::Float32, {4, 10});
  bad.node(OpKind::SplitTensor, "sp", {{"self", y}, {"split_size", Expr(4)}, {"dim", int64_t(1)}}, 2);
  CHECK(fill_error(bad) == "node 'sp' (aten::split.Tensor): has 2 outputs, but aten::split.Tensor returns 3 here");
}

TEST_CASE("matmul over every rank combination", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* v3 = b.input("v3", DType::Float32, {3});
  Value* m23 = b.input("m23", DType::Float32, {2, 3});
  Value* m34 = b.input("m34", DType::Float32, {3, 4});
  Value* b4 = b.input("b4", DType::Float32, {s0, 1, 2, 3});
  Value* b3 = b.input("b3", DType::Float32, {5, 3, 4});
  Value* s3 = b.input("s3", DType::Float32, {s0, 3, 4});
  auto mm = [&](const char* n, Value* a, Value* c) { b.op(OpKind::Matmul, n, {{"self", a}, {"other", c}}); };
  mm("dot", v3, v3);
  mm("mv", m23, v3);
  mm("vm", v3, m34);
  mm("mm", m23, m34);
  mm("bb", b4, b3);
  mm("vb", v3, s3);
  mm("bv", b4, v3);
  mm("mb", m23, s3);
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("dot") == "f32[]");
  CHECK(t("mv") == "f32[2]");
  CHECK(t("vm") == "f32[4]");
  CHECK(t("mm") == "f32[2, 4]");
  CHECK(t("bb") == "f32[s0, 5, 2, 4]");
  CHECK(t("vb") == "f32[s0, 4]");
  CHECK(t("bv") == "f32[s0, 1, 2]");
  CHECK(t("mb") == "f32[s0, 2, 4]");

  Builder bad;
  Value* a = bad.input("a", DType::Float32, {2, 3});
  Value* c = bad.input("c", DType::Float32, {4, 5});
  bad.op(OpKind::Matmul, "matmul", {{"self", a}, {"other", c}});
  CHECK(fill_error(bad) ==
        "node 'matmul' (aten::matmul): the contracted sizes do not match: 3 vs 4 (f32[2, 3] and f32[4, 5])");
}

TEST_CASE("convolution with groups, dilation, stride, padding modes and transposition", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0"), h = b.sym("h", 8, 512);
  Value* x = b.input("x", DType::Float32, {s0, 8, 32, 32});
  Value* w = b.input("w", DType::Float32, {16, 2, 3, 3});
  Value* xh = b.input("xh", DType::Float32, {1, 3, h, 20});
  Value* w3 = b.input("w3", DType::Float32, {4, 3, 3, 3});
  Value* wt = b.input("wt", DType::Float32, {8, 3, 3, 3});
  b.op(OpKind::Conv2d, "grouped",
       {{"input", x},
        {"weight", w},
        {"stride", syms({2, 2})},
        {"padding", syms({2, 2})},
        {"dilation", syms({2, 2})},
        {"groups", Expr(4)}});
  b.op(OpKind::Conv2d, "symbolic",
       {{"input", xh}, {"weight", w3}, {"stride", syms({2, 2})}, {"padding", syms({1, 1})}});
  b.op(OpKind::Convolution, "transposed",
       {{"input", x},
        {"weight", wt},
        {"bias", std::monostate{}},
        {"stride", syms({2, 2})},
        {"padding", syms({1, 1})},
        {"dilation", syms({1, 1})},
        {"transposed", true},
        {"output_padding", syms({1, 1})},
        {"groups", Expr(1)}});
  b.op(OpKind::Conv2d, "unbatched",
       {{"input", b.op(OpKind::SelectInt, "x0", {{"self", x}, {"dim", int64_t(0)}, {"index", Expr(0)}})},
        {"weight", w},
        {"groups", Expr(4)}});
  Value* cl = b.op(OpKind::Clone, "cl", {{"self", x}, {"memory_format", std::string("channels_last")}});
  b.op(OpKind::Conv2d, "channels_last", {{"input", cl}, {"weight", w}, {"groups", Expr(4)}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("grouped") == "f32[s0, 16, 16, 16]");
  CHECK(t("symbolic") == "f32[1, 4, (h + 1)//2, 10]");
  CHECK(t("transposed") == "f32[s0, 3, 64, 64]");
  CHECK(t("unbatched") == "f32[16, 30, 30]");
  CHECK(t("channels_last") == "f32[s0, 16, 30, 30]{14400, 1, 480, 16}");

  Builder bad;
  Value* bx = bad.input("x", DType::Float32, {1, 8, 32, 32});
  Value* bw = bad.input("w", DType::Float32, {16, 3, 3, 3});
  Node* n = bad.node(OpKind::Conv2d, "conv", {{"input", bx}, {"weight", bw}});
  n->source.stack_trace = "File \"/home/u/models.py\", line 9, in forward\n    return self.conv(x)\n";
  CHECK(fill_error(bad) ==
        "node 'conv' (aten::conv2d) at /home/u/models.py:9: return self.conv(x): input channels and weight.size(1) * "
        "groups do not match: 8 vs 3 (f32[1, 8, 32, 32] and f32[16, 3, 3, 3])");
}

TEST_CASE("pooling with padding, dilation and ceil_mode", "[shape_prop]") {
  Builder b;
  Expr h = b.sym("h", 8, 512);
  Value* x5 = b.input("x5", DType::Float32, {1, 2, 5, 5});
  Value* xh = b.input("xh", DType::Float32, {1, 2, h, 9});
  auto pool = [&](const char* name, OpKind k, Value* x, std::vector<int64_t> ks, std::vector<int64_t> st,
                  std::vector<int64_t> pad, bool ceil) {
    std::map<std::string, Arg> a{
        {"self", x}, {"kernel_size", ints(ks)}, {"stride", ints(st)}, {"padding", ints(pad)}, {"ceil_mode", ceil}};
    b.op(k, name, a);
  };
  pool("p1", OpKind::MaxPool2d, x5, {2, 2}, {2, 2}, {0, 0}, true);  // 3
  pool("p2", OpKind::MaxPool2d, x5, {2, 2}, {}, {0, 0}, false);     // stride = kernel: 2
  pool("p3", OpKind::AvgPool2d, x5, {3, 3}, {3, 3}, {1, 1}, true);  // last window starts in padding: 2
  pool("p4", OpKind::MaxPool2d, xh, {3, 3}, {2, 2}, {1, 1}, false);
  pool("p5", OpKind::AvgPool2d, xh, {2, 2}, {2, 2}, {0, 0}, true);
  b.op(OpKind::MaxPool2d, "dil",
       {{"self", x5}, {"kernel_size", ints({2, 2})}, {"dilation", ints({2, 2})}, {"stride", ints({1, 1})}});
  b.op(OpKind::AdaptiveAvgPool2d, "ad", {{"self", xh}, {"output_size", syms({1, 1})}});
  b.node(OpKind::MaxPool2dWithIndices, "wi", {{"self", xh}, {"kernel_size", ints({2, 2})}}, 2);
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("p1") == "f32[1, 2, 3, 3]");
  CHECK(t("p2") == "f32[1, 2, 2, 2]");
  CHECK(t("p3") == "f32[1, 2, 2, 2]");
  CHECK(t("p4") == "f32[1, 2, (h + 1)//2, 5]");
  CHECK(t("p5") == "f32[1, 2, (h + 1)//2, 5]");
  CHECK(t("dil") == "f32[1, 2, 3, 3]");
  CHECK(t("ad") == "f32[1, 2, 1, 1]");
  CHECK(t("wi_1") == "i64[1, 2, h//2, 4]");
}

TEST_CASE("arange, full and friends", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  b.op(OpKind::ArangeDefault, "a", {{"end", s0}});
  b.op(OpKind::ArangeStartStep, "b", {{"start", int64_t(1)}, {"end", s0}, {"step", int64_t(2)}});
  b.op(OpKind::ArangeStartStep, "c", {{"start", s0}, {"end", int64_t(0)}, {"step", int64_t(-3)}});
  b.op(OpKind::ArangeStartStep, "d", {{"start", 0.5}, {"end", 4.2}, {"step", 0.7}});
  b.op(OpKind::ArangeStart, "e", {{"start", int64_t(2)}, {"end", int64_t(9)}, {"dtype", DType::Float32}});
  b.op(OpKind::Full, "f", {{"size", syms({s0, 3})}, {"fill_value", int64_t(7)}});
  b.op(OpKind::Full, "g", {{"size", syms({2})}, {"fill_value", true}});
  b.op(OpKind::Zeros, "z", {{"size", syms({s0})}});
  b.op(OpKind::ScalarTensor, "st", {{"s", int64_t(1)}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("a") == "i64[s0]");
  CHECK(t("b") == "i64[s0//2]");
  CHECK(t("c") == "i64[(s0 + 2)//3]");
  CHECK(t("d") == "f32[6]");
  CHECK(t("e") == "f32[7]");
  CHECK(t("f") == "i64[s0, 3]");
  CHECK(t("g") == "bool[2]");
  CHECK(t("z") == "f32[s0]");
  CHECK(t("st") == "f32[]");
}

TEST_CASE("advanced indexing, gather, embedding, cat and stack", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 6, 5, 4});
  Value* i = b.input("i", DType::Int64, {2, 3});
  Value* j = b.input("j", DType::Int64, {3});
  Value* w = b.input("w", DType::Float32, {100, 16});
  auto index = [&](const char* name, std::vector<Value*> idx) {
    b.op(OpKind::IndexTensor, name, {{"self", x}, {"indices", idx}});
  };
  index("one", {nullptr, i});          // x[:, i]
  index("adjacent", {nullptr, i, j});  // x[:, i, j]: broadcast, in place
  index("apart", {i, nullptr, j});     // x[i, :, j]: to the front
  index("last", {nullptr, nullptr, nullptr, j});
  b.op(OpKind::IndexSelect, "is", {{"self", x}, {"dim", int64_t(2)}, {"index", j}});
  b.op(OpKind::Embedding, "emb", {{"weight", w}, {"indices", i}});
  b.op(OpKind::Cat, "cat", {{"tensors", std::vector<Value*>{x, x}}, {"dim", int64_t(1)}});
  b.op(OpKind::Stack, "stack", {{"tensors", std::vector<Value*>{j, j}}, {"dim", int64_t(1)}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("one") == "f32[s0, 2, 3, 5, 4]");
  CHECK(t("adjacent") == "f32[s0, 2, 3, 4]");
  CHECK(t("apart") == "f32[2, 3, 6, 4]");
  CHECK(t("last") == "f32[s0, 6, 5, 3]");
  CHECK(t("is") == "f32[s0, 6, 3, 4]");
  CHECK(t("emb") == "f32[2, 3, 16]");
  CHECK(t("cat") == "f32[s0, 12, 5, 4]");
  CHECK(t("stack") == "i64[3, 2]");

  Builder bad;
  Value* y = bad.input("y", DType::Float32, {4, 5});
  Value* mask = bad.input("mask", DType::Bool, {4});
  bad.op(OpKind::IndexTensor, "index", {{"self", y}, {"indices", std::vector<Value*>{mask}}});
  CHECK(fill_error(bad) ==
        "node 'index' (aten::index.Tensor): indexes with a boolean mask: the output size depends on data");
}

TEST_CASE("norms, reductions and multi-output ops", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0");
  Value* x = b.input("x", DType::Float32, {s0, 8, 16});
  Value* img = b.input("img", DType::Float32, {s0, 4, 6, 6});
  Value* c4 = b.input("c4", DType::Float32, {4});
  b.node(OpKind::NativeLayerNorm, "ln",
         {{"input", x},
          {"normalized_shape", syms({16})},
          {"weight", std::monostate{}},
          {"bias", std::monostate{}},
          {"eps", 1e-5}},
         3);
  b.node(OpKind::UnderscoreNativeBatchNormLegitNoTraining, "bn",
         {{"input", img},
          {"weight", c4},
          {"bias", c4},
          {"running_mean", c4},
          {"running_var", c4},
          {"momentum", 0.1},
          {"eps", 1e-5}},
         3);
  b.node(OpKind::NativeGroupNorm, "gn",
         {{"input", img},
          {"weight", c4},
          {"bias", c4},
          {"N", s0},
          {"C", Expr(4)},
          {"HxW", Expr(36)},
          {"group", int64_t(2)},
          {"eps", 1e-5}},
         3);
  b.node(OpKind::MaxDim, "mx", {{"self", x}, {"dim", int64_t(1)}, {"keepdim", true}}, 2);
  b.node(OpKind::Topk, "tk", {{"self", x}, {"k", Expr(3)}}, 2);
  b.node(OpKind::VarMeanCorrection, "vm", {{"self", x}, {"dim", ints({0, 2})}}, 2);
  b.op(OpKind::MeanDim, "mean", {{"self", x}, {"dim", ints({-1, -2})}, {"keepdim", true}});
  b.op(OpKind::Sum, "sum", {{"self", x}});
  b.op(OpKind::Argmax, "am", {{"self", x}, {"keepdim", true}});
  b.op(OpKind::AnyDim, "any", {{"self", x}, {"dim", int64_t(0)}});
  b.op(OpKind::Cumsum, "cs", {{"self", x}, {"dim", int64_t(1)}, {"dtype", DType::Float64}});
  b.node(OpKind::UnderscoreScaledDotProductFlashAttentionForCpu, "fa", {{"query", img}, {"key", img}, {"value", img}},
         2);
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("ln") == "f32[s0, 8, 16]");
  CHECK(t("ln_1") == "f32[s0, 8, 1]");
  CHECK(t("bn") == "f32[s0, 4, 6, 6]");
  CHECK(t("bn_2") == "f32[0]");
  CHECK(t("gn_1") == "f32[s0, 2]");
  CHECK(t("mx") == "f32[s0, 1, 16]");
  CHECK(t("mx_1") == "i64[s0, 1, 16]");
  CHECK(t("tk") == "f32[s0, 8, 3]");
  CHECK(t("vm") == "f32[8]");
  CHECK(t("mean") == "f32[s0, 1, 1]");
  CHECK(t("sum") == "f32[]");
  CHECK(t("am") == "i64[1, 1, 1]");
  CHECK(t("any") == "bool[8, 16]");
  CHECK(t("cs") == "f64[s0, 8, 16]");
  CHECK(t("fa") == "f32[s0, 4, 6, 6]");
  CHECK(t("fa_1") == "f32[s0, 4, 6]{24, 1, 4}");
}

TEST_CASE("SymInt ops follow the sizes symbolically", "[shape_prop]") {
  Builder b;
  Expr s0 = b.sym("s0"), s1 = b.sym("s1");
  Value* x = b.input("x", DType::Float32, {s0, s1, 8});
  b.op(OpKind::SymSizeInt, "sz", {{"self", x}, {"dim", int64_t(1)}});
  b.op(OpKind::SymNumel, "n", {{"self", x}});
  b.op(OpKind::SymMul, "mul", {{"a", s0}, {"b", s1}});
  b.op(OpKind::SymFloorDiv, "fd", {{"a", s0 * 8}, {"b", Expr(4)}});
  b.op(OpKind::SymMod, "md", {{"a", s0 * 8 + 3}, {"b", Expr(4)}});
  auto out = b.fill();
  auto t = [&](const char* n) { return out->find_value(n)->type.str(); };
  CHECK(t("sz") == "SymInt(s1)");
  CHECK(t("n") == "SymInt(8*s0*s1)");
  CHECK(t("mul") == "SymInt(s0*s1)");
  CHECK(t("fd") == "SymInt(2*s0)");
  CHECK(t("md") == "SymInt(3)");

  Builder bad;
  bad.op(OpKind::SymFloorDiv, "fd", {{"a", Expr(8)}, {"b", Expr(0)}});
  CHECK(fill_error(bad).find("node 'fd' (_operator::floordiv): ") == 0);
}

TEST_CASE("Fill mode leaves unknown ops and what depends on them unknown", "[shape_prop]") {
  Builder b;
  Value* x = b.input("x", DType::Float32, {4, 8});
  auto n = std::make_unique<Node>();
  n->target = "torch.ops.mylib.custom.default";
  n->name = "custom";
  n->args = {x};
  n->arg_names = {"x"};
  n->outputs = {b.g->add_value("custom", Type::unknown())};
  b.g->add_node(std::move(n));
  b.op(OpKind::Relu, "r", {{"self", b.g->find_value("custom")}});
  b.op(OpKind::Relu, "r2", {{"self", x}});
  auto out = b.fill();
  CHECK(out->find_value("custom")->type.str() == "?");
  CHECK(out->find_value("r")->type.str() == "?");
  CHECK(out->find_value("r2")->type.str() == "f32[4, 8]");
  CHECK(infer_node_types(*out->nodes()[1]).empty());
  CHECK(infer_node_types(*out->nodes()[2]).at(0).str() == "f32[4, 8]");
}

TEST_CASE("bad inputs are user errors naming the node and op", "[shape_prop]") {
  auto expect = [](const std::function<void(Builder&)>& build, const std::string& msg) {
    Builder b;
    build(b);
    CHECK(fill_error(b) == msg);
  };
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3, 4});
        b.op(OpKind::Mm, "mm", {{"self", x}, {"mat2", x}});
      },
      "node 'mm' (aten::mm): self must have rank 2, got f32[2, 3, 4]");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {3});
        Value* y = b.input("y", DType::Float32, {2, 4});
        b.op(OpKind::AddTensor, "add", {{"self", x}, {"other", y}});
      },
      "node 'add' (aten::add.Tensor): shapes [3] and [2, 4] do not broadcast (3 vs 4 in dim -1)");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3});
        b.op(OpKind::SoftmaxInt, "softmax", {{"self", x}, {"dim", int64_t(2)}});
      },
      "node 'softmax' (aten::softmax.int): dim 2 is out of range for a tensor of rank 2 (expected a dim in [-2, 1])");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3});
        Value* w = b.input("w", DType::Float32, {5, 4});
        b.op(OpKind::Linear, "linear", {{"input", x}, {"weight", w}});
      },
      "node 'linear' (aten::linear): input features and weight columns do not match: 3 vs 4 (f32[2, 3] and f32[5, 4])");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3});
        b.op(OpKind::View, "view", {{"self", x}, {"size", syms({4, -1})}});
      },
      "node 'view' (aten::view): shape [4, -1] is invalid for an input of 6 elements");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3});
        b.op(OpKind::Expand, "expand", {{"self", x}, {"size", syms({2, 4})}});
      },
      "node 'expand' (aten::expand): cannot expand f32[2, 3] to [2, 4]: size 3 vs 4 in a dim that is not 1");
  expect(
      [](Builder& b) {
        Value* x = b.input("x", DType::Float32, {2, 3});
        b.op(OpKind::Relu, "relu", {{"self", Expr(3)}});
        (void)x;
      },
      "node 'relu' (aten::relu): argument 'self' must be a tensor, but it is a SymInt");
}
