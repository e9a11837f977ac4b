// State: in-place updates made functional (lib/passes/functionalize.cpp), buffers the program
// updates lowered as state (in place for a KV-cache index_copy_, through a StateNext buffer
// otherwise), and grouped-query attention reading the cache's own heads. Checked on hand-built
// graphs through the reference interpreter; test/llm_test.py checks compiled decoders.
#include <catch2/catch.hpp>
#include <cstring>

#include "ptc/error.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "test_util.h"

using namespace ptc;
using sym::Expr;

namespace {

using Bytes = std::vector<std::byte>;

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
Bytes i64_bytes(const std::vector<int64_t>& v) {
  Bytes b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<float> f32s(const Bytes& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
std::vector<int64_t> i64s(const Bytes& b) {
  std::vector<int64_t> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

const loop::Computation* find_extern(const loop::Program& p, loop::ExternKind k) {
  for (const auto& c : p.comps)
    if (c.kind == loop::Computation::Kind::Extern && c.extern_kind == k) return &c;
  return nullptr;
}

std::string refusal(const Graph& g) {
  try {
    functionalize(g);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("functionalize: in-place updates of a buffer become buffer updates that later reads see", "[state]") {
  // The static cache's step counter: copy_ the position in, read it through a no-op `to`, then
  // add_ 1 through that alias (which updates the buffer itself), and read the buffer again.
  test::GraphBuilder b;
  Value* pos = b.input("pos", DType::Int64, {Expr(1)});
  Value* cl = b.weight("b_cl", "cumulative_length", DType::Int64, {}, {0}, GraphInput::Role::Buffer);
  Value* sel = b.op(OpKind::SelectInt, "select", {{"self", pos}, {"dim", int64_t(0)}, {"index", Expr(0)}});
  Value* c = b.op(OpKind::CopyInplace, "copy_", {{"self", cl}, {"src", sel}});
  Value* to = b.op(OpKind::ToDtype, "to", {{"self", c}, {"dtype", DType::Int64}});
  Value* before = b.op(OpKind::MulScalar, "before", {{"self", to}, {"other", int64_t(10)}});
  b.op(OpKind::AddTensorInplace, "add_", {{"self", to}, {"other", int64_t(1)}});
  Value* after = b.op(OpKind::MulScalar, "after", {{"self", cl}, {"other", int64_t(10)}});
  b.g->outputs = {before, after};
  auto f = functionalize(*b.g);
  INFO(print_graph(*f));
  REQUIRE(verify_graph(*f).empty());
  CHECK(f->updated_buffers == std::vector<std::string>{"cumulative_length"});
  REQUIRE(f->outputs.size() == 3);
  const std::string text = print_graph(*f);
  CHECK(text.find("aten::copy(") != std::string::npos);       // the functional twins
  CHECK(text.find("aten::add.Tensor(%copy_, 1)") != std::string::npos);  // through the dropped alias
  CHECK(text.find("aten::mul.Scalar(%add_, 10)") != std::string::npos);  // `after` reads the new version
  CHECK(text.find("aten::to.dtype") == std::string::npos);
  CHECK(print_graph(*functionalize(*f)) == text);  // idempotent

  // Lowered: the counter is state written through a StateNext buffer; the run gives 10 * pos,
  // 10 * (pos + 1), and the new counter pos + 1.
  loop::Program p = lower_to_loops(*f);
  REQUIRE(p.states.size() == 1);
  CHECK(p.buffers[p.states[0]].kind == loop::Buffer::Kind::State);
  REQUIRE(p.state_next[0] >= 0);
  CHECK(p.buffers[p.state_next[0]].kind == loop::Buffer::Kind::StateNext);
  auto outs = interpret(p, *f, {i64_bytes({6})}, {});
  REQUIRE(outs.size() == 3);
  CHECK(i64s(outs[0]) == std::vector<int64_t>{60});
  CHECK(i64s(outs[1]) == std::vector<int64_t>{70});
  CHECK(i64s(outs[2]) == std::vector<int64_t>{7});
}

TEST_CASE("functionalize refuses what a functional graph cannot express", "[state][bad_input]") {
  SECTION("an update of a parameter") {
    test::GraphBuilder b;
    Value* w = b.weight("p_w", "w", DType::Float32, {2}, {1, 2});
    b.g->outputs = {b.op(OpKind::MulScalarInplace, "scale_", {{"self", w}, {"other", 2.0}})};
    CHECK_THAT(refusal(*b.g), Catch::Contains("node 'scale_'") && Catch::Contains("parameter 'w'") &&
                                  Catch::Contains("only buffers are state"));
  }
  SECTION("part of a buffer through a view other than slice / select") {
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {Expr(2), Expr(2)});
    Value* buf = b.weight("b_c", "cache", DType::Float32, {4}, {0, 0, 0, 0}, GraphInput::Role::Buffer);
    Value* v = b.op(OpKind::View, "view", {{"self", buf}, {"size", std::vector<Expr>{2, 2}}});
    b.g->outputs = {b.op(OpKind::CopyInplace, "copy_", {{"self", v}, {"src", x}})};
    CHECK_THAT(refusal(*b.g), Catch::Contains("node 'copy_'") && Catch::Contains("buffer 'cache'") &&
                                  Catch::Contains("node 'view'") && Catch::Contains("slice and select views only"));
  }
  SECTION("part of a parameter through a view") {
    test::GraphBuilder b;
    Value* w = b.weight("p_w", "w", DType::Float32, {4}, {1, 2, 3, 4});
    Value* v = b.op(OpKind::SliceTensor, "slice", {{"self", w}, {"dim", int64_t(0)}, {"start", Expr(0)}, {"end", Expr(2)}});
    b.g->outputs = {b.op(OpKind::MulScalarInplace, "scale_", {{"self", v}, {"other", 2.0}})};
    CHECK_THAT(refusal(*b.g), Catch::Contains("node 'scale_'") && Catch::Contains("parameter 'w'") &&
                                  Catch::Contains("only buffers are state"));
  }
  // y = relu(x) and its view y[:2]; `update_view` picks which of the two mul_ updates in place,
  // and the other is read afterwards.
  auto view_and_base = [](bool update_view) {
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {Expr(4)});
    Value* y = b.op(OpKind::Relu, "y", {{"self", x}});
    Value* v = b.op(OpKind::SliceTensor, "head", {{"self", y}, {"dim", int64_t(0)}, {"start", Expr(0)}, {"end", Expr(2)}});
    b.op(OpKind::MulScalarInplace, "mul_", {{"self", update_view ? v : y}, {"other", 2.0}});
    b.g->outputs = {b.op(OpKind::Neg, "neg", {{"self", update_view ? y : v}})};
    return refusal(*b.g);
  };
  SECTION("a view read after its base was updated") {
    CHECK_THAT(view_and_base(false), Catch::Contains("node 'neg'") && Catch::Contains("a view of %y taken before node 'mul_'"));
  }
}

TEST_CASE("functionalize: updates through slice / select views scatter back into the base", "[state]") {
  SECTION("a buffer: cache[1:3] = x; cache[0] += x[0]") {
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {Expr(2)});
    Value* buf = b.weight("b_c", "cache", DType::Float32, {4}, {1, 1, 1, 1}, GraphInput::Role::Buffer);
    Value* v = b.op(OpKind::SliceTensor, "slice", {{"self", buf}, {"dim", int64_t(0)}, {"start", Expr(1)}, {"end", Expr(3)}});
    b.op(OpKind::CopyInplace, "copy_", {{"self", v}, {"src", x}});
    Value* s = b.op(OpKind::SelectInt, "select", {{"self", buf}, {"dim", int64_t(0)}, {"index", Expr(0)}});
    Value* x0 = b.op(OpKind::SelectInt, "x0", {{"self", x}, {"dim", int64_t(0)}, {"index", Expr(0)}});
    b.op(OpKind::AddTensorInplace, "add_", {{"self", s}, {"other", x0}});
    b.g->outputs = {b.op(OpKind::MulScalar, "twice", {{"self", buf}, {"other", 2.0}})};
    auto f = functionalize(*b.g);
    INFO(print_graph(*f));
    REQUIRE(verify_graph(*f).empty());
    CHECK(f->updated_buffers == std::vector<std::string>{"cache"});
    const std::string text = print_graph(*f);
    CHECK(text.find("aten::slice_scatter(") != std::string::npos);
    CHECK(text.find("aten::select_scatter(") != std::string::npos);
    loop::Program p = lower_to_loops(*f);
    auto outs = interpret(p, *f, {f32_bytes({5, 7})}, {});
    REQUIRE(outs.size() == 2);
    CHECK(f32s(outs[0]) == std::vector<float>{12, 10, 14, 2});  // 2 * [1 + 5, 5, 7, 1]
    CHECK(f32s(outs[1]) == std::vector<float>{6, 5, 7, 1});    // the buffer's new contents
  }
  SECTION("a tensor the graph made: y = relu(x); y[:2] *= 2; -y") {
    test::GraphBuilder b;
    Value* x = b.input("x", DType::Float32, {Expr(4)});
    Value* y = b.op(OpKind::Relu, "y", {{"self", x}});
    Value* v = b.op(OpKind::SliceTensor, "head", {{"self", y}, {"dim", int64_t(0)}, {"start", Expr(0)}, {"end", Expr(2)}});
    b.op(OpKind::MulScalarInplace, "mul_", {{"self", v}, {"other", 2.0}});
    b.g->outputs = {b.op(OpKind::Neg, "neg", {{"self", y}}), b.op(OpKind::AddScalar, "head1", {{"self", v}, {"other", 1.0}})};
    auto f = functionalize(*b.g);
    INFO(print_graph(*f));
    REQUIRE(verify_graph(*f).empty());
    CHECK(f->updated_buffers.empty());
    loop::Program p = lower_to_loops(*f);
    auto outs = interpret(p, *f, {f32_bytes({1, -2, 3, 4})}, {});
    REQUIRE(outs.size() == 2);
    CHECK(f32s(outs[0]) == std::vector<float>{-2, 0, -3, -4});
    CHECK(f32s(outs[1]) == std::vector<float>{3, 1});  // the updated view reads its new contents
  }
}

TEST_CASE("a KV-cache index_copy_ writes the state buffer in place, and attention reads the cache's own heads", "[state]") {
  // cache [1, Hkv=2, T=4, D=2]; one new key row at position `pos`; 4 query heads (2 per cache
  // head) attend over the cache expanded as transformers' repeat_kv writes it.
  test::GraphBuilder b;
  Value* q = b.input("q", DType::Float32, {Expr(1), Expr(4), Expr(1), Expr(2)});
  Value* k = b.input("k", DType::Float32, {Expr(1), Expr(2), Expr(1), Expr(2)});
  Value* pos = b.input("pos", DType::Int64, {Expr(1)});
  std::vector<double> init(16);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.1 * static_cast<double>(i);
  Value* cache = b.weight("b_cache", "key_cache", DType::Float32, {1, 2, 4, 2}, init, GraphInput::Role::Buffer);
  Value* upd = b.op(OpKind::IndexCopyInplace, "index_copy_", {{"self", cache}, {"dim", int64_t(2)}, {"index", pos}, {"source", k}});
  Value* u = b.op(OpKind::Unsqueeze, "unsqueeze", {{"self", upd}, {"dim", int64_t(2)}});
  Value* e = b.op(OpKind::Expand, "expand", {{"self", u}, {"size", std::vector<Expr>{1, 2, 2, 4, 2}}});
  Value* kv = b.op(OpKind::Reshape, "reshape", {{"self", e}, {"shape", std::vector<Expr>{1, 4, 4, 2}}});
  b.g->outputs = {b.op(OpKind::ScaledDotProductAttention, "sdpa", {{"query", q}, {"key", kv}, {"value", kv}})};
  auto f = functionalize(*b.g);
  REQUIRE(f->updated_buffers == std::vector<std::string>{"key_cache"});

  std::vector<float> qv(8), kv_new{5, -3, 2, 7};
  for (size_t i = 0; i < qv.size(); ++i) qv[i] = 0.25f * static_cast<float>(i) - 1;
  // The expected result: the cache with the new row at position 2, then attention per head.
  std::vector<float> c(16);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(0.1 * static_cast<double>(i));
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 2; ++d) c[static_cast<size_t>(h * 8 + 2 * 2 + d)] = kv_new[static_cast<size_t>(h * 2 + d)];
  std::vector<float> want(8);
  for (int h = 0; h < 4; ++h) {
    const float* kh = &c[static_cast<size_t>((h / 2) * 8)];
    double s[4], mx = -1e30, sum = 0;
    for (int j = 0; j < 4; ++j) {
      s[j] = (qv[static_cast<size_t>(h * 2)] * kh[j * 2] + qv[static_cast<size_t>(h * 2 + 1)] * kh[j * 2 + 1]) / std::sqrt(2.0);
      mx = std::max(mx, s[j]);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int d = 0; d < 2; ++d) {
      double acc = 0;
      for (int j = 0; j < 4; ++j) acc += s[j] / sum * kh[j * 2 + d];
      want[static_cast<size_t>(h * 2 + d)] = static_cast<float>(acc);
    }
  }
  for (bool fused : {true, false}) {
    INFO("fused attention: " << fused);
    LowerOptions opts;
    opts.fused_attention = fused;
    loop::Program p = lower_to_loops(*f, opts);
    REQUIRE(p.states.size() == 1);
    CHECK(p.state_next[0] == -1);  // in place: no second copy of the cache
    const loop::Computation* sc = find_extern(p, loop::ExternKind::Scatter);
    REQUIRE(sc);
    CHECK(sc->out == p.states[0]);
    CHECK(sc->as<loop::ScatterAttrs>().in_place);
    if (fused) {
      const loop::Computation* at = find_extern(p, loop::ExternKind::Attention);
      REQUIRE(at);
      CHECK(at->as<loop::AttentionAttrs>().kv_group == 2);
      CHECK(at->operands[1].buffer == p.states[0]);  // the cache itself, not a repeated copy
    }
    auto outs = interpret(p, *f, {f32_bytes(qv), f32_bytes(kv_new), i64_bytes({2})}, {});
    REQUIRE(outs.size() == 2);
    std::vector<float> got = f32s(outs[0]);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
    CHECK(f32s(outs[1]) == c);  // the new cache
  }
}

TEST_CASE("index_put with one index tensor scatters along its dimension, accumulating or not", "[state]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(3), Expr(2)});
  Value* idx = b.input("idx", DType::Int64, {Expr(3)});
  Value* v = b.input("v", DType::Float32, {Expr(3), Expr(2)});
  Value* put = b.op(OpKind::IndexPut, "put", {{"self", x}, {"indices", std::vector<Value*>{idx}}, {"values", v}});
  Value* acc = b.op(OpKind::IndexPut, "acc", {{"self", x}, {"indices", std::vector<Value*>{idx}}, {"values", v}, {"accumulate", true}});
  b.g->outputs = {put, acc};
  auto f = functionalize(*b.g);
  loop::Program p = lower_to_loops(*f);
  auto outs = interpret(p, *f, {f32_bytes({1, 2, 3, 4, 5, 6}), i64_bytes({2, 0, 2}), f32_bytes({10, 20, 30, 40, 50, 60})}, {});
  // put: row 0 <- v[1]; row 2 <- v[0] then v[2] (the last write wins here; torch leaves the
  // order of duplicate writes unspecified); acc: rows add up.
  CHECK(f32s(outs[0]) == std::vector<float>{30, 40, 3, 4, 50, 60});
  CHECK(f32s(outs[1]) == std::vector<float>{31, 42, 3, 4, 65, 86});
}
