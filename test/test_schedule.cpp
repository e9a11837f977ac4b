// The scheduler on hand-built loop programs: which computations share a kernel (row groups,
// GEMM epilogues, horizontal fusion), and which temporaries are written in place.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>

#include "ptc/loop.h"
#include "ptc/schedule.h"

using namespace ptc;
using namespace ptc::loop;

namespace {

sym::Expr S() { return sym::symbol("s0", {1, 64}); }

struct Builder {
  Program p;
  int buffer(const std::string& name, Buffer::Kind kind, std::vector<sym::Expr> sizes) {
    Buffer b;
    b.name = name;
    b.kind = kind;
    b.sizes = sizes;
    sym::Expr st = 1;
    b.strides.assign(sizes.size(), 1);
    for (size_t d = sizes.size(); d-- > 0;) {
      b.strides[d] = st;
      st = st * sizes[d];
    }
    b.offset = 0;
    p.buffers.push_back(b);
    return static_cast<int>(p.buffers.size()) - 1;
  }
  // Row-major flat index of the loop variables over `sizes`, with dims permuted by `perm`.
  static sym::Expr flat(const std::vector<sym::Expr>& sizes, std::vector<int> perm = {}) {
    if (perm.empty())
      for (size_t d = 0; d < sizes.size(); ++d) perm.push_back(static_cast<int>(d));
    sym::Expr f = 0;
    for (int d : perm) f = f * sizes[d] + loop_var(d, sizes[d]);
    return f;
  }
  void pointwise(int out, std::vector<sym::Expr> domain, ExprRef body) {
    Computation c;
    c.kind = Computation::Kind::Pointwise;
    c.out = out;
    c.domain = domain;
    c.body = body;
    p.comps.push_back(c);
  }
  void reduction(int out, std::vector<sym::Expr> domain, std::vector<sym::Expr> rdomain, ReduceOp op, ExprRef body) {
    Computation c;
    c.kind = Computation::Kind::Reduction;
    c.out = out;
    c.domain = domain;
    c.reduce_domain = rdomain;
    c.reduce = op;
    c.body = body;
    p.comps.push_back(c);
  }
};

ExprRef f32(double v) { return constant(v, DType::Float32); }

}  // namespace

TEST_CASE("horizontal fusion: sibling pointwise loops over one domain share a kernel", "[schedule]") {
  Builder b;
  std::vector<sym::Expr> dom{S(), 64};
  int x = b.buffer("x", Buffer::Kind::Input, dom);
  int t0 = b.buffer("t0", Buffer::Kind::Temp, dom);
  int t1 = b.buffer("t1", Buffer::Kind::Temp, dom);
  int t2 = b.buffer("t2", Buffer::Kind::Temp, {64, S()});
  int o0 = b.buffer("o0", Buffer::Kind::Output, dom);
  int o1 = b.buffer("o1", Buffer::Kind::Output, dom);
  int o2 = b.buffer("o2", Buffer::Kind::Output, dom);
  sym::Expr own = Builder::flat(dom);
  b.pointwise(t0, dom, binary(Op::Add, load(x, DType::Float32, own), f32(1)));
  b.pointwise(t2, {64, S()}, load(x, DType::Float32, loop_var(1, S()) * 64 + loop_var(0, 64)));  // x transposed
  b.pointwise(t1, dom, binary(Op::Mul, load(x, DType::Float32, own), f32(2)));  // sibling of t0, past t2
  // reads t0 at its own element: joins; reads t1 transposed: must not join
  b.pointwise(o0, dom, binary(Op::Add, load(t0, DType::Float32, own), load(t1, DType::Float32, own)));
  b.pointwise(o1, dom, load(t1, DType::Float32, loop_var(0, S()) * 64 + (63 - loop_var(1, 64))));
  b.pointwise(o2, dom, load(t2, DType::Float32, loop_var(1, 64) * S() + loop_var(0, S())));
  b.p.outputs = {o0, o1, o2};
  sched::Schedule s = sched::schedule(b.p);
  std::string text = sched::print_schedule(b.p, s);
  INFO(text);
  REQUIRE(s.kernels.size() == 3);
  CHECK(text.find("k0 loop: t0 t1 o0  #") != std::string::npos);  // not o2: it reads t2, computed in between
  CHECK(text.find("k1 loop: t2  #") != std::string::npos);
  CHECK(text.find("k2 loop: o1 o2  #") != std::string::npos);
}

TEST_CASE("horizontal fusion never moves a computation before what it reads", "[schedule]") {
  Builder b;
  std::vector<sym::Expr> dom{S(), 8};
  int x = b.buffer("x", Buffer::Kind::Input, dom);
  int r = b.buffer("r", Buffer::Kind::Temp, {S()});
  int t0 = b.buffer("t0", Buffer::Kind::Temp, dom);
  int o = b.buffer("o", Buffer::Kind::Output, dom);
  sym::Expr own = Builder::flat(dom);
  b.pointwise(t0, dom, unary(Op::Exp, load(x, DType::Float32, own)));
  b.reduction(r, {S()}, {8}, ReduceOp::Sum, load(x, DType::Float32, loop_var(0, S()) * 8 + reduce_var(0, 8)));
  b.pointwise(o, dom, binary(Op::Div, load(t0, DType::Float32, own), load(r, DType::Float32, loop_var(0, S()))));
  b.p.outputs = {o};
  sched::Schedule s = sched::schedule(b.p);
  std::string text = sched::print_schedule(b.p, s);
  INFO(text);
  CHECK(text.find("k0 loop: t0  #") != std::string::npos);  // o reads r, computed after t0
  CHECK(text.find("k1 rows: r o  #") != std::string::npos);
}

TEST_CASE("in-place reuse: a dying temporary read only at the writer's own element is overwritten", "[schedule]") {
  Builder b;
  std::vector<sym::Expr> dom{S(), 16};
  int x = b.buffer("x", Buffer::Kind::Input, dom);
  int t0 = b.buffer("t0", Buffer::Kind::Temp, dom);
  int mx = b.buffer("mx", Buffer::Kind::Temp, {S()});
  int t1 = b.buffer("t1", Buffer::Kind::Temp, dom);
  int t2 = b.buffer("t2", Buffer::Kind::Temp, dom);
  int o = b.buffer("o", Buffer::Kind::Output, {S(), 16});
  sym::Expr own = Builder::flat(dom);
  sym::Expr row = loop_var(0, S()) * 16 + reduce_var(0, 16);
  b.pointwise(t0, dom, unary(Op::Exp, load(x, DType::Float32, own)));
  // softmax-like row group: max over t0's row, then t1 = t0 - max at its own element -> in place
  b.reduction(mx, {S()}, {16}, ReduceOp::Max, load(t0, DType::Float32, row));
  b.pointwise(t1, dom, binary(Op::Sub, load(t0, DType::Float32, own), load(mx, DType::Float32, loop_var(0, S()))));
  // t2 reads t1 reversed along the row: not at its own element, so t1 keeps its storage
  b.pointwise(t2, dom, load(t1, DType::Float32, loop_var(0, S()) * 16 + (15 - loop_var(1, 16))));
  b.pointwise(o, dom, binary(Op::Add, load(t2, DType::Float32, own), load(t1, DType::Float32, own)));
  b.p.outputs = {o};
  sched::Schedule s = sched::schedule(b.p);
  INFO(sched::print_schedule(b.p, s));
  CHECK(s.alias_of[t1] == t0);
  CHECK(s.alias_of[t2] == -1);  // t1 is still read after t2's kernel
  CHECK(s.alias_of[mx] == -1);
  auto lives = sched::temp_lifetimes(b.p, s);
  bool found = false;
  for (const auto& l : lives)
    if (l.buffer == t0) {
      found = true;
      CHECK(l.aliases == std::vector<int>{t1});
      CHECK(l.last == static_cast<int>(s.kernels.size()) - 1);  // t1's last reader
    }
  CHECK(found);
  for (const auto& l : lives) CHECK(l.buffer != t1);
}

namespace {

// out = body(gemm result) after y = a [s0, 8] x w [8, 16]; bias [16], residual [s0, 16].
struct GemmCase {
  Builder b;
  int a, w, bias, res, y, out;
  std::vector<sym::Expr> dom{S(), 16};
  GemmCase() {
    a = b.buffer("a", Buffer::Kind::Input, {S(), 8});
    w = b.buffer("w", Buffer::Kind::Weight, {8, 16});
    bias = b.buffer("bias", Buffer::Kind::Weight, {16});
    res = b.buffer("res", Buffer::Kind::Input, {S(), 16});
    y = b.buffer("y", Buffer::Kind::Temp, dom);
    out = b.buffer("out", Buffer::Kind::Output, dom);
    Computation g;
    g.kind = Computation::Kind::Extern;
    g.extern_kind = ExternKind::Gemm;
    g.out = y;
    g.domain = dom;
    g.operands = {View{a, {S(), 8}, {8, 1}, 0}, View{w, {8, 16}, {16, 1}, 0}};
    b.p.comps.push_back(g);
  }
  ExprRef gemm() const { return load(y, DType::Float32, Builder::flat(dom)); }
  ExprRef bias_n() const { return load(bias, DType::Float32, loop_var(1, 16)); }
  ExprRef bias_m() const { return load(bias, DType::Float32, loop_var(0, S())); }
  ExprRef residual() const { return load(res, DType::Float32, Builder::flat(dom)); }
  sched::Schedule run(ExprRef body, sched::Epilogues mode) {
    b.pointwise(out, dom, body);
    sched::ScheduleOptions so;
    so.extern_epilogues = mode;
    return sched::schedule(b.p, so);
  }
};

}  // namespace

TEST_CASE("library GEMM epilogues: cuBLASLt's bias + residual + ReLU join the GEMM, other forms do not", "[schedule]") {
  SECTION("relu(residual + (gemm + bias)) is matched in any order of the sum") {
    GemmCase t;
    sched::Schedule s = t.run(unary(Op::Relu, binary(Op::Add, t.residual(), binary(Op::Add, t.gemm(), t.bias_n()))), sched::Epilogues::Library);
    REQUIRE(s.kernels.size() == 1);
    REQUIRE(s.kernels[0].epilogue == 1);
    CHECK(s.elided[t.y]);
    auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]);
    REQUIRE(m.has_value());
    CHECK(m->bias == t.bias);
    CHECK(m->residual == t.res);
    CHECK(m->act == sched::LibraryEpilogue::Act::Relu);
    CHECK(m->bias_offset == sym::Expr(0));
  }
  SECTION("a bias alone") {
    GemmCase t;
    sched::Schedule s = t.run(binary(Op::Add, t.gemm(), t.bias_n()), sched::Epilogues::Library);
    REQUIRE(s.kernels.size() == 1);
    auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]);
    REQUIRE(m.has_value());
    CHECK(m->bias == t.bias);
    CHECK(m->residual == -1);
    CHECK(m->act == sched::LibraryEpilogue::Act::None);
  }
  SECTION("a scale, a bias along rows, or a second bias is no library epilogue, but fits the CPU's") {
    for (int form = 0; form < 3; ++form) {
      GemmCase t;
      ExprRef body = form == 0   ? binary(Op::Mul, t.gemm(), f32(2))
                     : form == 1 ? binary(Op::Add, t.gemm(), t.bias_m())
                                 : binary(Op::Add, binary(Op::Add, t.gemm(), t.bias_n()), t.bias_n());
      GemmCase u = t;
      sched::Schedule lib = t.run(body, sched::Epilogues::Library);
      CHECK(lib.kernels.size() == 2);
      CHECK(lib.kernels[0].epilogue == -1);
      sched::Schedule any = u.run(body, sched::Epilogues::Any);
      CHECK(any.kernels.size() == 1);
      GemmCase v;
      CHECK(v.run(binary(Op::Add, v.gemm(), v.bias_n()), sched::Epilogues::None).kernels.size() == 2);
    }
  }
}

TEST_CASE("a GEMM whose only reader comes later is deferred to run with it as its epilogue, unless a computation between writes its operand",
          "[schedule]") {
  // gemm1 -> y1; gemm2 -> y2; t = y2 + bias (gemm2's epilogue); out = relu(y1 + bias + t): the
  // downsample block's shape. gemm1 runs after gemm2's kernel, with the sum as its epilogue.
  auto build = [](bool overwrite_operand) {
    GemmCase t;
    const int y2 = t.b.buffer("y2", Buffer::Kind::Temp, t.dom), t2 = t.b.buffer("t2", Buffer::Kind::Temp, t.dom);
    Computation g = t.b.p.comps[0];
    g.out = y2;
    t.b.p.comps.push_back(g);
    t.b.pointwise(t2, t.dom, binary(Op::Add, load(y2, DType::Float32, Builder::flat(t.dom)), t.bias_n()));
    if (overwrite_operand)  // an in-place update of gemm1's input between the two
      t.b.pointwise(t.a, {S(), 8}, f32(0));
    ExprRef body = unary(Op::Relu, binary(Op::Add, binary(Op::Add, t.gemm(), t.bias_n()), load(t2, DType::Float32, Builder::flat(t.dom))));
    return std::make_pair(t, body);
  };
  {
    auto [t, body] = build(false);
    sched::Schedule s = t.run(body, sched::Epilogues::Library);
    REQUIRE(s.kernels.size() == 2);
    CHECK(s.kernels[0].comps == std::vector<int>{1, 2});  // gemm2 and its bias
    CHECK(s.kernels[1].comps == std::vector<int>{0, 3});  // gemm1, deferred, and the sum
    CHECK(s.kernels[1].epilogue == 3);
    CHECK(s.elided[t.y]);
  }
  {
    auto [t, body] = build(true);
    sched::Schedule s = t.run(body, sched::Epilogues::Library);
    REQUIRE(s.kernels.size() >= 3);
    CHECK(s.kernels[0].comps == std::vector<int>{0});  // in its place, with no epilogue
    CHECK(s.kernels[0].epilogue == -1);
  }
}

TEST_CASE("library GEMM epilogues: GELU (erf and tanh forms) and SiLU join a GEMM whose library runs them", "[schedule]") {
  using Act = sched::LibraryEpilogue::Act;
  const sched::LibraryActs all = sched::LibraryEpilogue::act_bit(Act::Gelu) | sched::LibraryEpilogue::act_bit(Act::GeluTanh) |
                                 sched::LibraryEpilogue::act_bit(Act::Silu);
  auto c = [](double v) { return f32(v); };
  auto mul = [](ExprRef a, ExprRef b) { return binary(Op::Mul, a, b); };
  auto add = [](ExprRef a, ExprRef b) { return binary(Op::Add, a, b); };
  // each form of act(x), x = gemm + bias (built anew at each use, as fusion substitutes it)
  struct Form {
    const char* name;
    std::function<ExprRef(std::function<ExprRef()>)> body;
    Act act;
  };
  const std::vector<Form> forms = {
      {"gelu (erf), as ptc lowers aten.gelu", [&](auto x) { return mul(mul(c(0.5), x()), add(c(1), unary(Op::Erf, mul(x(), c(M_SQRT1_2))))); },
       Act::Gelu},
      {"gelu (tanh), as ptc lowers aten.gelu(approximate='tanh')",
       [&](auto x) {
         ExprRef inner = mul(c(std::sqrt(2.0 / M_PI)), add(x(), mul(c(0.044715), mul(mul(x(), x()), x()))));
         return mul(mul(c(0.5), x()), add(c(1), unary(Op::Tanh, inner)));
       },
       Act::GeluTanh},
      {"gelu (tanh), as transformers' GPT-2 writes it (operands commuted)",
       [&](auto x) {
         ExprRef inner = mul(add(x(), mul(mul(mul(x(), x()), x()), c(0.044715))), c(0.7978845608028654));
         return mul(mul(x(), c(0.5)), add(unary(Op::Tanh, inner), c(1.0)));
       },
       Act::GeluTanh},
      {"silu", [&](auto x) { return mul(x(), unary(Op::Sigmoid, x())); }, Act::Silu},
      {"silu, commuted", [&](auto x) { return mul(unary(Op::Sigmoid, x()), x()); }, Act::Silu},
  };
  for (const Form& f : forms) {
    INFO(f.name);
    GemmCase t;
    ExprRef body = f.body([&] { return add(t.gemm(), t.bias_n()); });
    t.run(body, sched::Epilogues::Any);
    auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1], all);
    REQUIRE(m.has_value());
    CHECK(m->act == f.act);
    CHECK(m->bias == t.bias);
    // not among the library's activations (cuBLASLt's plain set): no library epilogue
    CHECK_FALSE(sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]).has_value());
  }
  SECTION("near misses: another constant, or the activation of something else") {
    GemmCase t;
    auto x = [&] { return add(t.gemm(), t.bias_n()); };
    t.run(mul(mul(c(0.5), x()), add(c(1), unary(Op::Erf, mul(x(), c(0.75))))), sched::Epilogues::Any);
    CHECK_FALSE(sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1], all).has_value());
    GemmCase u;
    u.run(mul(u.gemm(), unary(Op::Sigmoid, add(u.gemm(), u.bias_n()))), sched::Epilogues::Any);
    CHECK_FALSE(sched::match_library_epilogue(u.b.p, u.b.p.comps[0], u.b.p.comps[1], all).has_value());
  }
}

TEST_CASE("library GEMM epilogues: a bf16 GEMM's tanh-GELU matches through autocast's intermediate roundings", "[schedule]") {
  // GPT-2's gelu_new under --precision bf16: 0.5 x and the result rounded to bf16 (autocast's
  // fall-through ops), x^3 and the tanh in float32; the library computes it from its float32
  // accumulator and rounds once.
  using Act = sched::LibraryEpilogue::Act;
  GemmCase t;
  for (int buf : {t.a, t.w, t.bias, t.y, t.out}) t.b.p.buffers[buf].dtype = DType::BFloat16;
  auto c = [](double v) { return f32(v); };
  auto mul = [](ExprRef a, ExprRef b) { return binary(Op::Mul, a, b); };
  auto add = [](ExprRef a, ExprRef b) { return binary(Op::Add, a, b); };
  auto round = [](ExprRef v) { return cast(cast(v, DType::BFloat16), DType::Float32); };
  auto x = [&] {
    return add(cast(load(t.y, DType::BFloat16, Builder::flat(t.dom)), DType::Float32),
               cast(load(t.bias, DType::BFloat16, loop_var(1, 16)), DType::Float32));
  };
  ExprRef inner = mul(add(x(), mul(mul(mul(x(), x()), x()), c(0.044715))), c(0.7978845608028654));
  ExprRef body = cast(mul(round(mul(x(), c(0.5))), add(unary(Op::Tanh, inner), c(1.0))), DType::BFloat16);
  const sched::LibraryActs acts = sched::LibraryEpilogue::act_bit(Act::GeluTanh);
  t.run(body, sched::Epilogues::Any);
  auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1], acts);
  REQUIRE(m.has_value());
  CHECK(m->act == Act::GeluTanh);
  CHECK(m->bias == t.bias);
  // a rounding that changes the form (x^3 taken of a value rounded to float16) does not match
  GemmCase u;
  for (int buf : {u.a, u.w, u.bias, u.y, u.out}) u.b.p.buffers[buf].dtype = DType::BFloat16;
  auto xu = [&] {
    return add(cast(load(u.y, DType::BFloat16, Builder::flat(u.dom)), DType::Float32),
               cast(load(u.bias, DType::BFloat16, loop_var(1, 16)), DType::Float32));
  };
  auto r16 = [](ExprRef v) { return cast(cast(v, DType::Float16), DType::Float32); };
  ExprRef inner_u = mul(add(xu(), mul(r16(mul(mul(xu(), xu()), xu())), c(0.044715))), c(0.7978845608028654));
  u.run(cast(mul(mul(xu(), c(0.5)), add(unary(Op::Tanh, inner_u), c(1.0))), DType::BFloat16), sched::Epilogues::Any);
  CHECK_FALSE(sched::match_library_epilogue(u.b.p, u.b.p.comps[0], u.b.p.comps[1], acts).has_value());
}

TEST_CASE("library GEMM epilogues: a bf16 GEMM writes its float32 accumulator where only a widening (and ReLU) follows",
          "[schedule]") {
  // The GEMM computes in bf16 (its operands, its result y); the program's output is float32.
  auto half_case = [] {
    GemmCase t;
    for (int buf : {t.a, t.w, t.bias, t.y}) t.b.p.buffers[buf].dtype = DType::BFloat16;
    return t;
  };
  auto y16 = [](const GemmCase& t) { return load(t.y, DType::BFloat16, Builder::flat(t.dom)); };
  SECTION("float32(y) and relu(float32(y)) join the GEMM, which writes the float32 output") {
    for (bool relu : {false, true}) {
      GemmCase t = half_case();
      ExprRef body = cast(y16(t), DType::Float32);
      if (relu) body = unary(Op::Relu, body);
      sched::Schedule s = t.run(body, sched::Epilogues::Library);
      REQUIRE(s.kernels.size() == 1);
      CHECK(s.kernels[0].epilogue == 1);
      auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]);
      REQUIRE(m.has_value());
      CHECK(m->widens);
      CHECK(m->bias == -1);
      CHECK(m->act == (relu ? sched::LibraryEpilogue::Act::Relu : sched::LibraryEpilogue::Act::None));
    }
  }
  SECTION("with a bias (cuBLASLt takes a float32 result's bias only in float32) or a residual, or in generated code "
          "(the CPU's), the widening stays a kernel of its own") {
    GemmCase t = half_case();
    ExprRef bias = cast(load(t.bias, DType::BFloat16, loop_var(1, 16)), DType::Float32);
    CHECK(t.run(binary(Op::Add, cast(y16(t), DType::Float32), bias), sched::Epilogues::Library).kernels.size() == 2);
    CHECK_FALSE(sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]).has_value());
    GemmCase r = half_case();
    r.b.p.buffers[r.res].dtype = DType::BFloat16;
    ExprRef res = cast(load(r.res, DType::BFloat16, Builder::flat(r.dom)), DType::Float32);
    CHECK(r.run(binary(Op::Add, cast(y16(r), DType::Float32), res), sched::Epilogues::Library).kernels.size() == 2);
    CHECK_FALSE(sched::match_library_epilogue(r.b.p, r.b.p.comps[0], r.b.p.comps[1]).has_value());
    GemmCase u = half_case();
    CHECK(u.run(cast(y16(u), DType::Float32), sched::Epilogues::Any).kernels.size() == 2);
  }
  SECTION("a bf16 epilogue of a bf16 GEMM does not widen") {
    GemmCase t = half_case();
    t.b.p.buffers[t.out].dtype = DType::BFloat16;
    t.run(unary(Op::Relu, y16(t)), sched::Epilogues::Library);
    auto m = sched::match_library_epilogue(t.b.p, t.b.p.comps[0], t.b.p.comps[1]);
    REQUIRE(m.has_value());
    CHECK_FALSE(m->widens);
  }
}

TEST_CASE("library convolution epilogues: cuDNN's bias + residual + ReLU / ReLU6 join a convolution that cuDNN runs", "[schedule]") {
  // y = conv(x [2, 3, 8, 8], w [4, 3, 3, 3]) as [2, 4, 8, 8]; bias [4]; residual [2, 4, 8, 8].
  auto build = [](Builder& b, std::vector<sym::Expr> wstrides, int* y, int* bias, int* res, int* out) {
    std::vector<sym::Expr> dom{2, 4, 8, 8};
    int x = b.buffer("x", Buffer::Kind::Input, {2, 3, 8, 8});
    int w = b.buffer("w", Buffer::Kind::Weight, {4, 3, 3, 3});
    *bias = b.buffer("bias", Buffer::Kind::Weight, {4});
    *res = b.buffer("res", Buffer::Kind::Input, dom);
    *y = b.buffer("y", Buffer::Kind::Temp, dom);
    *out = b.buffer("out", Buffer::Kind::Output, dom);
    Computation c;
    c.kind = Computation::Kind::Extern;
    c.extern_kind = ExternKind::Convolution;
    c.out = *y;
    c.domain = dom;
    c.operands = {View{x, {2, 3, 8, 8}, {192, 64, 8, 1}, 0}, View{w, {4, 3, 3, 3}, wstrides, 0}};
    ConvAttrs attrs;
    attrs.padding = {1, 1};
    c.attrs = attrs;
    b.p.comps.push_back(c);
    return dom;
  };
  SECTION("min(max(conv + bias[c] + residual, 0), 6)") {
    Builder b;
    int y, bias, res, out;
    auto dom = build(b, {27, 9, 3, 1}, &y, &bias, &res, &out);
    ExprRef sum = binary(Op::Add, binary(Op::Add, load(y, DType::Float32, Builder::flat(dom)), load(bias, DType::Float32, loop_var(1, 4))),
                         load(res, DType::Float32, Builder::flat(dom)));
    b.pointwise(out, dom, binary(Op::Min, binary(Op::Max, sum, f32(0)), f32(6)));
    sched::ScheduleOptions so;
    so.extern_epilogues = sched::Epilogues::Library;
    sched::Schedule s = sched::schedule(b.p, so);
    REQUIRE(s.kernels.size() == 1);
    CHECK(s.kernels[0].epilogue == 1);
    auto m = sched::match_library_epilogue(b.p, b.p.comps[0], b.p.comps[1]);
    REQUIRE(m.has_value());
    CHECK(m->act == sched::LibraryEpilogue::Act::Relu6);
    CHECK(m->bias == bias);
    CHECK(m->residual == res);
  }
  SECTION("no bias, a bias along the width, or a weight cuDNN does not take (not dense): no library epilogue") {
    for (int form = 0; form < 3; ++form) {
      Builder b;
      int y, bias, res, out;
      auto dom = build(b, form == 2 ? std::vector<sym::Expr>{1, 12, 36, 108} : std::vector<sym::Expr>{27, 9, 3, 1}, &y, &bias, &res, &out);
      ExprRef g = load(y, DType::Float32, Builder::flat(dom));
      ExprRef body = form == 0   ? unary(Op::Relu, binary(Op::Add, g, load(res, DType::Float32, Builder::flat(dom))))
                     : form == 1 ? unary(Op::Relu, binary(Op::Add, g, load(bias, DType::Float32, loop_var(3, 8))))
                                 : unary(Op::Relu, binary(Op::Add, g, load(bias, DType::Float32, loop_var(1, 4))));
      b.pointwise(out, dom, body);
      sched::ScheduleOptions so;
      so.extern_epilogues = sched::Epilogues::Library;
      CHECK(sched::schedule(b.p, so).kernels.size() == 2);
    }
  }
}
