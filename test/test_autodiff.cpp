// Derivative rules (lib/autodiff) checked against central finite differences in double
// precision: each case is a small float64 graph whose inputs require grad; the joint graph's
// gradients (lowered and run by the reference interpreter) must match
//   d/dx_k sum(out * gout) ~ (f(x + h e_k) - f(x - h e_k)) / 2h
// for every input element. Plus the joint graph's structure, the partition and the error paths.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ptc/autodiff.h"
#include "ptc/frontend.h"
#include "ptc/error.h"
#include "ptc/lower.h"
#include "ptc/passes.h"
#include "codegen/wrapper/abi_common.h"
#include "test_util.h"

using namespace ptc;
using sym::Expr;

namespace {

using Bytes = std::vector<std::byte>;

Bytes to_bytes(const std::vector<double>& v) {
  Bytes b(v.size() * 8);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<double> to_doubles(const Bytes& b) {
  std::vector<double> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

int64_t numel(const Value* v) {
  int64_t n = 1;
  for (const auto& s : v->type.sizes) n *= *s.as_const();
  return n;
}

// Positive inputs (log, sqrt, rsqrt) or any sign.
struct Case {
  test::GraphBuilder b;
  std::vector<Value*> xs;
  bool positive = false;
  std::map<std::string, Bytes> fixed;  // inputs with given bytes (index tensors)
  Value* x(const std::string& name, std::vector<int64_t> sizes, DType dt = DType::Float64) {
    Value* v = b.input(name, dt, std::vector<Expr>(sizes.begin(), sizes.end()));
    v->type.requires_grad = dtype_is_float(dt);
    if (v->type.requires_grad) xs.push_back(v);
    return v;
  }
  // An int64 index input with these values.
  Value* ix(const std::string& name, std::vector<int64_t> sizes, std::vector<int64_t> values) {
    Value* v = b.input(name, DType::Int64, std::vector<Expr>(sizes.begin(), sizes.end()));
    Bytes bytes(values.size() * 8);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    fixed[name] = bytes;
    return v;
  }
};

// sum(out_i * gout_i) over the graph's outputs, by the interpreter.
double objective(const loop::Program& p, const Graph& g, const std::vector<Bytes>& ins, const std::vector<std::vector<double>>& gouts) {
  auto outs = interpret(p, g, ins, {});
  double s = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    auto o = to_doubles(outs[i]);
    for (size_t k = 0; k < o.size(); ++k) s += o[k] * gouts[i][k];
  }
  return s;
}

void check_gradients(Case& c, double tol = 1e-6) {
  Graph& g = *c.b.g;
  REQUIRE(verify_graph(g).empty());
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> U(c.positive ? 0.2 : -1.0, c.positive ? 2.0 : 1.0);
  // User inputs in order: the values of the ones requiring grad are random, others (masks) set by the case.
  std::vector<std::vector<double>> vals;
  std::vector<Bytes> ins;
  for (const GraphInput& in : g.inputs) {
    std::vector<double> v(static_cast<size_t>(numel(in.value)));
    for (auto& e : v) e = U(rng);
    vals.push_back(v);
    if (c.fixed.count(in.value->name)) {
      ins.push_back(c.fixed.at(in.value->name));
    } else if (in.value->type.dtype == DType::Bool) {
      Bytes b(v.size());
      for (size_t k = 0; k < v.size(); ++k) b[k] = std::byte(k % 3 != 1);  // keep 2 of 3, never a whole row masked
      ins.push_back(b);
    } else {
      ins.push_back(to_bytes(v));
    }
  }
  std::vector<std::vector<double>> gouts;
  for (const Value* o : g.outputs) {
    std::vector<double> v(static_cast<size_t>(numel(o)));
    for (auto& e : v) e = U(rng) - (c.positive ? 1.0 : 0.0);
    gouts.push_back(v);
  }
  JointGraph j = build_joint_graph(g);
  INFO(print_graph(*j.graph));
  loop::Program jp = lower_to_loops(*j.graph);
  std::vector<Bytes> jins = ins;
  for (size_t i = 0; i < j.grad_outputs.size(); ++i) {
    size_t oi = 0;
    while (g.outputs[oi]->name != j.grad_outputs[i]->name) ++oi;
    jins.push_back(to_bytes(gouts[oi]));
  }
  auto jouts = interpret(jp, *j.graph, jins, {});
  REQUIRE(jouts.size() == g.outputs.size() + j.grad_inputs.size());
  loop::Program fp = lower_to_loops(g);
  const double h = 1e-6;
  for (size_t k = 0; k < j.grad_inputs.size(); ++k) {
    size_t idx = 0;
    while (g.inputs[idx].value->name != j.grad_inputs[k]->name) ++idx;
    auto grad = to_doubles(jouts[g.outputs.size() + k]);
    REQUIRE(grad.size() == vals[idx].size());
    double worst = 0;
    for (size_t e = 0; e < grad.size(); ++e) {
      auto plus = vals[idx], minus = vals[idx];
      plus[e] += h;
      minus[e] -= h;
      auto a = ins, b = ins;
      a[idx] = to_bytes(plus);
      b[idx] = to_bytes(minus);
      double fd = (objective(fp, g, a, gouts) - objective(fp, g, b, gouts)) / (2 * h);
      worst = std::max(worst, std::fabs(fd - grad[e]) / std::max(1.0, std::fabs(fd)));
    }
    INFO("gradient of " << j.grad_inputs[k]->name << ": worst relative error " << worst);
    CHECK(worst < tol);
  }
}

template <class T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The joint graph of `g` run by the interpreter on these inputs (the user inputs, then the output
// gradients); returns output `index` as floats.
std::vector<float> joint_output(const Graph& g, const std::vector<Bytes>& ins, size_t index) {
  JointGraph j = build_joint_graph(g);
  auto outs = interpret(lower_to_loops(*j.graph), *j.graph, ins, {});
  std::vector<float> v(outs.at(index).size() / 4);
  std::memcpy(v.data(), outs[index].data(), v.size() * 4);
  return v;
}

Arg ints(std::vector<int64_t> v) { return v; }
Arg syms(std::vector<int64_t> v) { return std::vector<Expr>(v.begin(), v.end()); }
constexpr DType F64 = DType::Float64;

}  // namespace

TEST_CASE("derivatives of elementwise ops match finite differences", "[autodiff]") {
  struct Unary {
    OpKind k;
    bool positive;
    std::map<std::string, Arg> extra;
  };
  const Unary ops[] = {
      {OpKind::Relu, false, {}},          {OpKind::Gelu, false, {}},
      {OpKind::Gelu, false, {{"approximate", std::string("tanh")}}},
      {OpKind::Silu, false, {}},          {OpKind::Sigmoid, false, {}},
      {OpKind::Tanh, false, {}},          {OpKind::Exp, false, {}},
      {OpKind::Log, true, {}},            {OpKind::Sqrt, true, {}},
      {OpKind::Rsqrt, true, {}},          {OpKind::Reciprocal, true, {}},
      {OpKind::Abs, false, {}},           {OpKind::Neg, false, {}},
      {OpKind::Erf, false, {}},           {OpKind::Mish, false, {}},
      {OpKind::Softplus, false, {}},      {OpKind::Hardswish, false, {}},
      {OpKind::Hardsigmoid, false, {}},   {OpKind::LeakyRelu, false, {}},
      {OpKind::PowTensorScalar, true, {{"exponent", 2.5}}},
      {OpKind::Clamp, false, {{"min", -0.5}, {"max", 0.6}}},
      {OpKind::Hardtanh, false, {{"min_val", -0.5}, {"max_val", 0.6}}},  // masks by its output
      {OpKind::Relu6, false, {}},
      {OpKind::MulScalar, false, {{"other", 1.5}}}, {OpKind::DivScalar, false, {{"other", 4.0}}},
      {OpKind::RsubScalar, false, {{"other", 2.0}, {"alpha", 3.0}}},
  };
  for (const Unary& u : ops) {
    INFO(op_info(u.k).schema.qualified());
    Case c;
    c.positive = u.positive;
    auto args = u.extra;
    args["self"] = c.x("x", {3, 5});
    c.b.g->outputs.push_back(c.b.op(u.k, "y", args));
    check_gradients(c);
  }
}

TEST_CASE("derivatives of broadcasting binary ops match finite differences", "[autodiff]") {
  for (OpKind k : {OpKind::AddTensor, OpKind::SubTensor, OpKind::MulTensor, OpKind::DivTensor, OpKind::Maximum, OpKind::Minimum}) {
    INFO(op_info(k).schema.qualified());
    Case c;
    c.positive = k == OpKind::DivTensor;
    Value* a = c.x("a", {2, 3, 4});
    Value* b = c.x("b", {3, 1});
    std::map<std::string, Arg> args{{"self", a}, {"other", b}};
    if (k == OpKind::AddTensor || k == OpKind::SubTensor) args["alpha"] = 0.5;
    c.b.g->outputs.push_back(c.b.op(k, "y", args));
    check_gradients(c);
  }
  Case w;
  Value* cond = w.x("c", {3, 4}, DType::Bool);
  Value* a = w.x("a", {3, 4});
  Value* b = w.x("b", {4});
  w.b.g->outputs.push_back(w.b.op(OpKind::WhereSelf, "y", {{"condition", cond}, {"self", a}, {"other", b}}));
  check_gradients(w);
}

TEST_CASE("derivatives of matrix products match finite differences", "[autodiff]") {
  {
    Case c;
    Value* x = c.x("x", {2, 3, 4});
    Value* w = c.x("w", {5, 4});
    Value* bias = c.x("bias", {5});
    c.b.g->outputs.push_back(c.b.op(OpKind::Linear, "y", {{"input", x}, {"weight", w}, {"bias", bias}}));
    check_gradients(c);
  }
  {
    Case c;
    Value* bias = c.x("bias", {5});
    Value* m1 = c.x("m1", {3, 4});
    Value* m2 = c.x("m2", {4, 5});
    c.b.g->outputs.push_back(c.b.op(OpKind::Addmm, "y", {{"self", bias}, {"mat1", m1}, {"mat2", m2}, {"beta", 0.5}, {"alpha", 2.0}}));
    check_gradients(c);
  }
  {
    Case c;
    Value* a = c.x("a", {2, 3, 4});
    Value* m = c.x("m", {2, 4, 5});
    c.b.g->outputs.push_back(c.b.op(OpKind::Bmm, "y", {{"self", a}, {"mat2", m}}));
    check_gradients(c);
  }
  {
    Case c;  // batched matmul with a broadcast batch
    Value* a = c.x("a", {2, 2, 3, 4});
    Value* m = c.x("m", {1, 2, 4, 3});
    c.b.g->outputs.push_back(c.b.op(OpKind::Matmul, "y", {{"self", a}, {"other", m}}));
    check_gradients(c);
  }
}

TEST_CASE("derivatives of attention match finite differences", "[autodiff]") {
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant << " (0 causal, 1 bool mask, 2 float mask with scale)");
    Case c;
    Value* q = c.x("q", {1, 2, 4, 3});
    Value* k = c.x("k", {1, 2, 5, 3});
    Value* v = c.x("v", {1, 2, 5, 2});
    std::map<std::string, Arg> args{{"query", q}, {"key", k}, {"value", v}};
    if (variant == 0) args["is_causal"] = true;
    if (variant == 1) args["attn_mask"] = c.x("mask", {4, 5}, DType::Bool);
    if (variant == 2) {
      args["attn_mask"] = c.x("mask", {1, 1, 4, 5});
      args["scale"] = 0.3;
    }
    c.b.g->outputs.push_back(c.b.op(OpKind::ScaledDotProductAttention, "y", args));
    check_gradients(c);
  }
}

TEST_CASE("derivatives of norms, softmax and reductions match finite differences", "[autodiff]") {
  {
    Case c;
    Value* x = c.x("x", {3, 2, 4});
    Value* w = c.x("w", {2, 4});
    Value* b = c.x("b", {2, 4});
    c.b.g->outputs.push_back(
        c.b.op(OpKind::LayerNorm, "y", {{"input", x}, {"normalized_shape", syms({2, 4})}, {"weight", w}, {"bias", b}}));
    check_gradients(c);
  }
  {
    Case c;
    Value* x = c.x("x", {3, 6});
    Value* w = c.x("w", {6});
    Value* b = c.x("b", {6});
    auto outs = c.b.node(OpKind::NativeLayerNorm, "y", {{"input", x}, {"normalized_shape", syms({6})}, {"weight", w}, {"bias", b}, {"eps", 1e-5}});
    c.b.g->outputs.push_back(outs[0]);
    check_gradients(c);
  }
  {
    Case c;
    Value* x = c.x("x", {3, 6});
    Value* w = c.x("w", {6});
    c.b.g->outputs.push_back(c.b.op(OpKind::RmsNorm, "y", {{"input", x}, {"normalized_shape", syms({6})}, {"weight", w}, {"eps", 1e-6}}));
    check_gradients(c);
  }
  for (OpKind k : {OpKind::SoftmaxInt, OpKind::LogSoftmaxInt}) {
    Case c;
    c.b.g->outputs.push_back(c.b.op(k, "y", {{"self", c.x("x", {3, 5})}, {"dim", int64_t(0)}}));
    check_gradients(c);
  }
  {
    Case c;
    Value* x = c.x("x", {2, 3, 4});
    c.b.g->outputs.push_back(c.b.op(OpKind::SumDimIntList, "s", {{"self", x}, {"dim", ints({0, 2})}, {"keepdim", false}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::MeanDim, "m", {{"self", x}, {"dim", ints({-1})}, {"keepdim", true}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Mean, "mall", {{"self", x}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Sum, "sall", {{"self", x}}));
    check_gradients(c);
  }
  {  // group norm: affine, and without weight and bias
    Case c;
    Value* x = c.x("x", {2, 6, 3, 2});
    c.b.g->outputs.push_back(c.b.op(OpKind::GroupNorm, "y", {{"input", x}, {"num_groups", int64_t(3)}, {"weight", c.x("w", {6})},
                                                             {"bias", c.x("b", {6})}, {"eps", 1e-5}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::GroupNorm, "z", {{"input", x}, {"num_groups", int64_t(2)}, {"eps", 1e-3}}));
    check_gradients(c);
  }
  {  // var with the default correction (1), with correction 0 keepdim, std, and var_mean's two outputs
    Case c;
    Value* x = c.x("x", {3, 4, 5});
    c.b.g->outputs.push_back(c.b.op(OpKind::VarCorrection, "v", {{"self", x}, {"dim", ints({1})}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::VarCorrection, "v0", {{"self", x}, {"dim", ints({0, 2})}, {"correction", 0.0}, {"keepdim", true}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::StdCorrection, "sd", {{"self", x}, {"dim", ints({2})}}));
    auto vm = c.b.node(OpKind::VarMeanCorrection, "vm", {{"self", x}, {"dim", ints({-1})}});
    c.b.g->outputs.push_back(vm[0]);
    c.b.g->outputs.push_back(vm[1]);
    check_gradients(c);
  }
  {
    Case c;
    c.b.g->outputs.push_back(c.b.op(OpKind::AdaptiveAvgPool2d, "y", {{"self", c.x("x", {2, 3, 4, 4})}, {"output_size", syms({1, 1})}}));
    check_gradients(c);
  }
}

TEST_CASE("derivatives of convolution and eval-mode batch norm match finite differences", "[autodiff]") {
  struct Conv {
    int64_t C, O, K, stride, pad, dil, groups, H;
    bool bias;
  };
  const Conv convs[] = {
      {2, 3, 3, 1, 1, 1, 1, 5, true},   // 3x3 same padding
      {2, 4, 3, 2, 1, 1, 2, 6, false},  // stride 2, two groups, a row the forward never reads
      {2, 4, 3, 2, 1, 1, 1, 6, false},
      {2, 4, 3, 2, 0, 1, 1, 6, false},
      {2, 4, 3, 2, 1, 1, 1, 5, false},
      {2, 4, 3, 1, 1, 1, 2, 6, false},
      {3, 3, 3, 1, 2, 2, 3, 5, true},   // dilated depthwise
      {2, 3, 1, 2, 0, 1, 1, 5, false},  // 1x1 stride 2
      {1, 2, 2, 3, 0, 1, 1, 7, true},   // 2x2 kernel, stride 3
      {2, 3, 1, 1, 1, 1, 1, 5, false},  // padding beyond the kernel (the input gradient folds columns)
      {2, 3, 1, 1, 0, 1, 1, 5, true},   // 1x1 stride 1 (the input gradient as a convolution)
      {3, 3, 3, 1, 1, 1, 3, 6, false},  // depthwise 3x3 "same" (the conv's own padding)
      {3, 3, 3, 2, 1, 1, 3, 7, false},  // depthwise stride 2 (ptc::conv2d_input_grad)
      {2, 4, 3, 2, 1, 1, 2, 6, false},  // depthwise with multiplier 2, stride 2
  };
  for (const Conv& k : convs) {
    INFO("C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " pad " << k.pad << " dil " << k.dil << " groups " << k.groups);
    Case c;
    Value* x = c.x("x", {2, k.C, k.H, k.H + 1});
    Value* w = c.x("w", {k.O, k.C / k.groups, k.K, k.K});
    std::map<std::string, Arg> args{{"input", x}, {"weight", w}, {"stride", syms({k.stride, k.stride})},
                                    {"padding", syms({k.pad, k.pad})}, {"dilation", syms({k.dil, k.dil})},
                                    {"groups", Expr(k.groups)}};
    if (k.bias) args["bias"] = c.x("b", {k.O});
    c.b.g->outputs.push_back(c.b.op(OpKind::Conv2d, "y", args));
    check_gradients(c);
  }
  // Transposed convolutions (w [C_in, C_out / groups, K, K]): stride 2 with output padding and
  // a bias, two groups, dilation.
  struct Transposed {
    int64_t C, O, K, stride, pad, out_pad, dil, groups;
    bool bias;
  };
  for (const Transposed& k : {Transposed{2, 3, 3, 2, 1, 1, 1, 1, true}, Transposed{4, 2, 4, 2, 1, 0, 1, 2, false},
                              Transposed{2, 2, 3, 1, 0, 0, 2, 1, false}}) {
    INFO("transposed: C " << k.C << " O " << k.O << " K " << k.K << " stride " << k.stride << " groups " << k.groups);
    Case c;
    std::map<std::string, Arg> args{{"input", c.x("x", {2, k.C, 4, 5})}, {"weight", c.x("w", {k.C, k.O / k.groups, k.K, k.K})},
                                    {"stride", syms({k.stride, k.stride})}, {"padding", syms({k.pad, k.pad})},
                                    {"output_padding", syms({k.out_pad, k.out_pad})}, {"dilation", syms({k.dil, k.dil})},
                                    {"groups", Expr(k.groups)}};
    if (k.bias) args["bias"] = c.x("b", {k.O});
    c.b.g->outputs.push_back(c.b.op(OpKind::ConvTranspose2dInput, "y", args));
    check_gradients(c);
  }
  // A convolution whose output gradient comes from an eval-mode batch norm and a ReLU6: the
  // batch norm's per-channel factor moves onto the weight-sized results (the convolution rule).
  for (int64_t groups : {1, 3}) {
    INFO("convolution + batch norm + relu6, groups " << groups);
    Case c;
    Value* x = c.x("x", {2, 3, 5, 6});
    std::map<std::string, Arg> args{{"input", x}, {"weight", c.x("w", {3, 3 / groups, 3, 3})}, {"stride", syms({2, 2})},
                                    {"padding", syms({1, 1})}, {"dilation", syms({1, 1})}, {"groups", Expr(groups)}};
    args["bias"] = c.x("b", {3});
    Value* y = c.b.op(OpKind::Conv2d, "y", args);
    Value* rm = c.b.input("rm", F64, {Expr(3)});
    Value* rv = c.b.input("rv", F64, {Expr(3)});
    c.fixed["rv"] = to_bytes(std::vector<double>{0.5, 1.5, 0.8});  // a variance above 0
    Value* z = c.b.node(OpKind::UnderscoreNativeBatchNormLegitNoTraining, "z",
                        {{"input", y}, {"weight", c.x("bw", {3})}, {"bias", c.x("bb", {3})}, {"running_mean", rm}, {"running_var", rv},
                         {"momentum", 0.1}, {"eps", 1e-5}})[0];
    c.b.g->outputs.push_back(c.b.op(OpKind::Relu6, "r", {{"self", z}}));
    check_gradients(c);
  }
  Case bn;
  bn.positive = true;
  Value* x = bn.x("x", {2, 3, 2, 2});
  Value* w = bn.x("w", {3});
  Value* bias = bn.x("b", {3});
  Value* rm = bn.b.input("rm", F64, {Expr(3)});
  Value* rv = bn.b.input("rv", F64, {Expr(3)});
  bn.b.g->outputs.push_back(bn.b.node(OpKind::UnderscoreNativeBatchNormLegitNoTraining, "y",
                                      {{"input", x}, {"weight", w}, {"bias", bias}, {"running_mean", rm}, {"running_var", rv},
                                       {"momentum", 0.1}, {"eps", 1e-5}})[0]);
  check_gradients(bn);
}

TEST_CASE("training-mode batch norm, decomposed, matches finite differences", "[autodiff]") {
  for (std::vector<int64_t> sizes : {std::vector<int64_t>{3, 2, 2, 3}, std::vector<int64_t>{5, 3}}) {
    for (bool affine : {true, false}) {
      INFO("input rank " << sizes.size() << (affine ? ", affine" : ""));
      Case bn;
      Value* x = bn.x("x", sizes);
      std::map<std::string, Arg> args{{"input", x},          {"weight", Arg{}},       {"bias", Arg{}},
                                      {"running_mean", Arg{}}, {"running_var", Arg{}}, {"training", true},
                                      {"momentum", 0.1},       {"eps", 1e-5},          {"cudnn_enabled", false}};
      if (affine) {
        args["weight"] = bn.x("w", {sizes[1]});
        args["bias"] = bn.x("b", {sizes[1]});
      }
      bn.b.g->outputs.push_back(bn.b.op(OpKind::BatchNorm, "y", args));
      bn.b.g = decompose_training_batch_norm(*bn.b.g);
      check_gradients(bn);
    }
  }
}

TEST_CASE("training-mode batch norm updates its running statistics as buffer updates", "[autodiff]") {
  test::GraphBuilder b;
  Value* x = b.input("x", F64, {b.sym("n"), Expr(2)});
  Value* rm = b.weight("rm", "bn.running_mean", F64, {2}, {0.5, -1}, GraphInput::Role::Buffer);
  Value* rv = b.weight("rv", "bn.running_var", F64, {2}, {2, 3}, GraphInput::Role::Buffer);
  Value* nbt = b.weight("nbt", "bn.num_batches_tracked", DType::Int64, {}, {7}, GraphInput::Role::Buffer);
  b.g->outputs.push_back(b.op(OpKind::BatchNorm, "y", {{"input", x}, {"weight", Arg{}}, {"bias", Arg{}}, {"running_mean", rm},
                                                        {"running_var", rv}, {"training", true},
                                                        {"momentum", 0.25}, {"eps", 1e-5}, {"cudnn_enabled", false}}));
  b.node(OpKind::AddTensorInplace, "bump", {{"self", nbt}, {"other", int64_t{1}}});
  auto d = decompose_training_batch_norm(*b.g);
  INFO(print_graph(*d));
  REQUIRE(verify_graph(*d).empty());
  REQUIRE(d->updated_buffers == std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  REQUIRE(d->outputs.size() == 4);
  CHECK(print_graph(*d).find("the last 3 outputs update buffers") != std::string::npos);
  // Batch n = 3: x = [[1, 2], [3, 4], [5, 9]]: means 3, 5; unbiased variances 4, 13.
  std::vector<double> xv{1, 2, 3, 4, 5, 9};
  auto outs = interpret(lower_to_loops(*d), *d, {to_bytes(xv)}, {{"n", 3}});
  auto nm = to_doubles(outs[1]), nv = to_doubles(outs[2]);
  CHECK(nm[0] == Approx(0.75 * 0.5 + 0.25 * 3));
  CHECK(nm[1] == Approx(0.75 * -1 + 0.25 * 5));
  CHECK(nv[0] == Approx(0.75 * 2 + 0.25 * 4));
  CHECK(nv[1] == Approx(0.75 * 3 + 0.25 * 13));
  int64_t count = 0;
  std::memcpy(&count, outs[3].data(), 8);
  CHECK(count == 8);
}

TEST_CASE("derivatives of indexing, max reductions, pooling and cumsum match finite differences", "[autodiff]") {
  {
    Case c;  // repeated ids accumulate; a padding row gets none
    Value* w = c.x("w", {5, 3});
    Value* ids = c.ix("ids", {2, 3}, {1, 4, 1, 0, 2, 1});
    c.b.g->outputs.push_back(c.b.op(OpKind::Embedding, "e", {{"weight", w}, {"indices", ids}}));
    check_gradients(c);
  }
  {
    // padding_idx: that row's lookups give it no gradient (the forward still reads it).
    test::GraphBuilder b;
    Value* w = b.weight("w", "w", DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
    Value* ids = b.input("ids", DType::Int64, {Expr(3)});
    b.g->outputs.push_back(b.op(OpKind::Embedding, "e", {{"weight", w}, {"indices", ids}, {"padding_idx", Expr(1)}}));
    auto dw = joint_output(*b.g, {bytes_of(std::vector<int64_t>{1, 1, 2}), bytes_of(std::vector<float>(6, 1.0f))}, 1);
    CHECK(dw == std::vector<float>{0, 0, 0, 0, 1, 1});
  }
  {
    Case c;
    Value* x = c.x("x", {3, 4});
    c.b.g->outputs.push_back(c.b.op(OpKind::IndexSelect, "s", {{"self", x}, {"dim", int64_t(1)}, {"index", c.ix("i", {5}, {3, 0, 3, 1, 2})}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Gather, "g", {{"self", x}, {"dim", int64_t(0)}, {"index", c.ix("j", {2, 4}, {0, 2, 2, 1, 1, 1, 0, 2})}}));
    check_gradients(c);
  }
  {
    Case c;  // x[rows, cols] with broadcast index tensors, negative ones included
    Value* x = c.x("x", {3, 4, 2});
    Value* rows = c.ix("rows", {2, 1}, {0, -1});
    Value* cols = c.ix("cols", {2, 3}, {1, 3, 1, -4, 2, 2});
    c.b.g->outputs.push_back(c.b.op(OpKind::IndexTensor, "t", {{"self", x}, {"indices", std::vector<Value*>{rows, cols}}}));
    check_gradients(c);
  }
  {
    Case c;
    Value* x = c.x("x", {2, 3, 4});
    Value* src = c.x("src", {2, 2, 4});
    c.b.g->outputs.push_back(c.b.op(OpKind::ScatterAdd, "sa", {{"self", x}, {"dim", int64_t(1)}, {"index", c.ix("i", {2, 2, 4}, {0, 2, 2, 1, 1, 1, 0, 2, 0, 0, 1, 2, 2, 2, 1, 0})}, {"src", src}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Amax, "am", {{"self", x}, {"dim", ints({2})}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Amin, "an", {{"self", x}, {"dim", ints({0, 1})}, {"keepdim", true}}));
    c.b.g->outputs.push_back(c.b.op(OpKind::Cumsum, "cs", {{"self", x}, {"dim", int64_t(1)}}));
    check_gradients(c);
  }
  for (int variant = 0; variant < 3; ++variant) {
    INFO("max pool variant " << variant << " (3x3/2 pad 1, 2x2/2, 3x3/1 dilation 2)");
    Case c;
    Value* x = c.x("x", {1, 2, 7, 6});
    std::map<std::string, Arg> args{{"self", x}};
    if (variant == 0) args.insert({{"kernel_size", ints({3, 3})}, {"stride", ints({2, 2})}, {"padding", ints({1, 1})}});
    if (variant == 1) args.insert({{"kernel_size", ints({2, 2})}, {"stride", ints({2, 2})}});
    if (variant == 2) args.insert({{"kernel_size", ints({3, 3})}, {"stride", ints({1, 1})}, {"dilation", ints({2, 2})}});
    c.b.g->outputs.push_back(c.b.op(OpKind::MaxPool2d, "mp", args));
    check_gradients(c);
  }
}

TEST_CASE("max pooling's gradient goes to each window's first maximum, as torch's", "[autodiff]") {
  // A ReLU before the pool leaves windows of equal zeros: torch gives each window's gradient to
  // its first position (row-major), once per window.
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(1), Expr(1), Expr(3), Expr(4)});
  x->type.requires_grad = true;
  Value* y = b.op(OpKind::MaxPool2d, "mp", {{"self", x}, {"kernel_size", ints({2, 2})}, {"stride", ints({1, 2})}});
  b.g->outputs.push_back(y);  // [1, 1, 2, 2]
  std::vector<float> xv{0, 0, 5, 1, 0, 0, 5, 0, 0, 0, 0, 0}, gv{1, 2, 3, 4};
  auto dx = joint_output(*b.g, {bytes_of(xv), bytes_of(gv)}, 1);
  // Windows (rows 0-1, cols 0-1): all zero -> (0,0); (rows 0-1, cols 2-3): 5 first at (0,2);
  // (rows 1-2, cols 0-1): zeros -> (1,0); (rows 1-2, cols 2-3): 5 at (1,2).
  CHECK(dx == std::vector<float>{1, 0, 2, 0, 3, 0, 4, 0, 0, 0, 0, 0});
}

TEST_CASE("max_pool2d_with_indices gives torch's indices, and its gradient follows them", "[autodiff]") {
  // indices: the flat input position (ih * W + iw) of each window's first maximum, padding
  // never chosen; a NaN in a window is its max and its index.
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(1), Expr(1), Expr(3), Expr(4)});
  x->type.requires_grad = true;
  auto outs = b.node(OpKind::MaxPool2dWithIndices, "mp",
                     {{"self", x}, {"kernel_size", ints({2, 2})}, {"stride", ints({2, 2})}, {"padding", ints({1, 1})}});
  b.g->outputs.push_back(outs[0]);  // [1, 1, 2, 3]
  b.g->outputs.push_back(outs[1]);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xv{-1, 2, 2, -3, 0, 7, nan, 1, 4, 4, -2, 9};
  auto run = interpret(lower_to_loops(*b.g), *b.g, {bytes_of(xv)}, {});
  std::vector<int64_t> ix(run.at(1).size() / 8);
  std::memcpy(ix.data(), run[1].data(), ix.size() * 8);
  // Windows (rows -1..0 | 1..2) x (cols -1..0 | 1..2 | 3..4): {-1} {2,2} {-3}; {0,4} {7,nan,4,-2} {1,9}.
  CHECK(ix == std::vector<int64_t>{0, 1, 3, 8, 6, 11});
  // The gradient of the values goes to those positions (the NaN's window: to the NaN).
  std::vector<float> gv{1, 2, 3, 4, 5, 6};
  auto dx = joint_output(*b.g, {bytes_of(xv), bytes_of(gv), bytes_of(std::vector<int64_t>(6, 0))}, 2);
  CHECK(dx == std::vector<float>{1, 2, 0, 3, 0, 0, 5, 0, 4, 0, 0, 6});
}

TEST_CASE("derivatives of views and data movement match finite differences", "[autodiff]") {
  Case c;
  Value* x = c.x("x", {2, 3, 4});
  Value* y = c.x("y", {2, 1, 4});
  auto& b = c.b;
  Value* p = b.op(OpKind::Permute, "p", {{"self", x}, {"dims", ints({2, 0, 1})}});                     // [4, 2, 3]
  Value* r = b.op(OpKind::Reshape, "r", {{"self", p}, {"shape", syms({8, 3})}});                         // [8, 3]
  Value* s = b.op(OpKind::SliceTensor, "s", {{"self", r}, {"dim", int64_t(0)}, {"start", Expr(1)}, {"end", Expr(6)}});
  Value* sel = b.op(OpKind::SelectInt, "sel", {{"self", x}, {"dim", int64_t(1)}, {"index", Expr(-1)}});  // [2, 4]
  Value* cat = b.op(OpKind::Cat, "cat", {{"tensors", std::vector<Value*>{x, y}}, {"dim", int64_t(1)}});   // [2, 4, 4]
  auto parts = b.node(OpKind::SplitWithSizes, "split", {{"self", cat}, {"split_sizes", syms({1, 3})}, {"dim", int64_t(1)}});
  Value* st = b.op(OpKind::Stack, "st", {{"tensors", std::vector<Value*>{sel, sel}}, {"dim", int64_t(0)}});
  Value* e = b.op(OpKind::Expand, "e", {{"self", y}, {"size", syms({3, 2, 5, 4})}});
  Value* t = b.op(OpKind::TransposeInt, "t", {{"self", x}, {"dim0", int64_t(0)}, {"dim1", int64_t(2)}});
  Value* pad = b.op(OpKind::ConstantPadNd, "pad", {{"self", x}, {"pad", syms({1, 2, 0, 1})}});
  Value* u = b.op(OpKind::Unsqueeze, "u", {{"self", sel}, {"dim", int64_t(1)}});
  Value* un = b.node(OpKind::UnbindInt, "un", {{"self", x}, {"dim", int64_t(2)}})[1];
  Value* fl = b.op(OpKind::Flip, "fl", {{"self", x}, {"dims", ints({0, -1})}});
  Value* ro = b.op(OpKind::Roll, "ro", {{"self", x}, {"shifts", syms({1, -3})}, {"dims", ints({0, 2})}});
  Value* rf = b.op(OpKind::Roll, "rf", {{"self", x}, {"shifts", syms({5})}, {"dims", ints({})}});  // flattened
  Value* rp = b.op(OpKind::Repeat, "rp", {{"self", x}, {"repeats", syms({2, 1, 3, 2})}});  // a new leading dim
  Value* x4 = b.op(OpKind::Reshape, "x4", {{"self", x}, {"shape", syms({1, 2, 3, 4})}});
  Value* up = b.op(OpKind::UpsampleNearest2dVec, "up", {{"input", x4}, {"output_size", syms({6, 4})}, {"scale_factors", Arg{}}});  // x2 rows, x1 columns
  for (Value* o : {s, parts[1], st, e, t, pad, u, un, fl, ro, rf, rp, up}) b.g->outputs.push_back(o);
  check_gradients(c);
}

TEST_CASE("flip reverses the listed dims", "[autodiff]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(2), Expr(3)});
  b.g->outputs.push_back(b.op(OpKind::Flip, "f", {{"self", x}, {"dims", ints({1})}}));
  b.g->outputs.push_back(b.op(OpKind::Flip, "g", {{"self", x}, {"dims", ints({0, 1})}}));
  auto run = interpret(lower_to_loops(*b.g), *b.g, {bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5})}, {});
  std::vector<float> f(6), g(6);
  std::memcpy(f.data(), run.at(0).data(), 24);
  std::memcpy(g.data(), run.at(1).data(), 24);
  CHECK(f == std::vector<float>{2, 1, 0, 5, 4, 3});
  CHECK(g == std::vector<float>{5, 4, 3, 2, 1, 0});
}

TEST_CASE("roll moves elements along the listed dims, or along the flattened tensor", "[autodiff]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(2), Expr(3)});
  b.g->outputs.push_back(b.op(OpKind::Roll, "r", {{"self", x}, {"shifts", syms({1})}, {"dims", ints({1})}}));
  b.g->outputs.push_back(b.op(OpKind::Roll, "s", {{"self", x}, {"shifts", syms({-1, 4})}, {"dims", ints({0, -1})}}));
  b.g->outputs.push_back(b.op(OpKind::Roll, "f", {{"self", x}, {"shifts", syms({2})}, {"dims", ints({})}}));
  auto run = interpret(lower_to_loops(*b.g), *b.g, {bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5})}, {});
  std::vector<float> r(6), s(6), f(6);
  std::memcpy(r.data(), run.at(0).data(), 24);
  std::memcpy(s.data(), run.at(1).data(), 24);
  std::memcpy(f.data(), run.at(2).data(), 24);
  // torch.roll(torch.arange(6.).view(2, 3), ...): these are its values.
  CHECK(r == std::vector<float>{2, 0, 1, 5, 3, 4});
  CHECK(s == std::vector<float>{5, 3, 4, 2, 0, 1});
  CHECK(f == std::vector<float>{4, 5, 0, 1, 2, 3});
}

TEST_CASE("a parameter's gradient sums the contributions of all its uses", "[autodiff]") {
  test::GraphBuilder b;
  Value* x = b.input("x", DType::Float32, {Expr(2), Expr(3)});
  Value* w = b.weight("w", "w", DType::Float32, {3}, {1, 2, 3});
  Value* m = b.op(OpKind::MulTensor, "m", {{"self", x}, {"other", w}});
  Value* a = b.op(OpKind::AddTensor, "a", {{"self", m}, {"other", w}});
  b.g->outputs.push_back(a);
  JointGraph j = build_joint_graph(*b.g);
  REQUIRE(j.grad_params.size() == 1);
  REQUIRE(j.grad_inputs.empty());  // x does not require grad
  REQUIRE(j.graph->inputs.size() == 3);  // x, w, a_grad
  // The gradient of w: sum over rows of (g * x) plus sum over rows of g.
  auto gw = joint_output(*b.g, {bytes_of(std::vector<float>{1, 2, 3, 4, 5, 6}), bytes_of(std::vector<float>{1, 1, 1, 2, 2, 2})}, 1);
  REQUIRE(gw.size() == 3);
  CHECK(gw[0] == Approx(1 * 1 + 4 * 2 + 3));
  CHECK(gw[1] == Approx(2 * 1 + 5 * 2 + 3));
  CHECK(gw[2] == Approx(3 * 1 + 6 * 2 + 3));
}

TEST_CASE("the partition saves matmul outputs and recomputes elementwise chains", "[autodiff]") {
  auto saved = [](const TrainGraphs& t) {
    std::vector<std::string> names;
    for (size_t i = t.num_model_outputs; i < t.forward->outputs.size(); ++i) names.push_back(t.forward->outputs[i]->name);
    return names;
  };
  PartitionOptions all;
  all.save_all = true;
  {
    // h = x w1, g = gelu(h), y = g w2: g is recomputed from h (saved: gelu's derivative reads
    // it) for w2's gradient GEMM.
    test::GraphBuilder b;
    Expr n = b.sym("n", 1, 8);
    Value* x = b.input("x", DType::Float32, {n, Expr(3)});
    Value* w1 = b.weight("w1", "w1", DType::Float32, {3, 3}, {1, -2, 3, 0.5, 1, -1, 2, 1, 0.25});
    Value* w2 = b.weight("w2", "w2", DType::Float32, {3, 2}, {1, 2, -1, 0.5, 3, 1});
    Value* h = b.op(OpKind::Mm, "h", {{"self", x}, {"mat2", w1}});
    Value* g = b.op(OpKind::Gelu, "g", {{"self", h}});
    b.g->outputs.push_back(b.op(OpKind::Mm, "y", {{"self", g}, {"mat2", w2}}));
    JointGraph j = build_joint_graph(*b.g);
    TrainGraphs min_cut = partition_joint_graph(j);
    TrainGraphs save_all = partition_joint_graph(j, all);
    CHECK(saved(save_all) == std::vector<std::string>{"x", "h", "g"});
    CHECK(saved(min_cut) == std::vector<std::string>{"x", "h"});
    CHECK(min_cut.saved_bytes_per_sample < save_all.saved_bytes_per_sample);
    CHECK(verify_graph(*min_cut.backward).empty());
  }
  {
    // c = conv(x, w1), r = relu(c * 2), y = conv(r, w2): w2's weight gradient (a convolution)
    // reads r, which is saved rather than recomputed from c.
    test::GraphBuilder b;
    Expr n = b.sym("n", 1, 8);
    Value* x = b.input("x", DType::Float32, {n, Expr(2), Expr(5), Expr(5)});
    std::vector<double> v1(3 * 2 * 3 * 3), v2(2 * 3);
    for (size_t i = 0; i < v1.size(); ++i) v1[i] = 0.1 * static_cast<double>(i % 7) - 0.3;
    for (size_t i = 0; i < v2.size(); ++i) v2[i] = 0.2 * static_cast<double>(i) - 0.5;
    Value* w1 = b.weight("w1", "w1", DType::Float32, {3, 2, 3, 3}, v1);
    Value* w2 = b.weight("w2", "w2", DType::Float32, {2, 3, 1, 1}, v2);
    Value* c = b.op(OpKind::Conv2d, "c", {{"input", x}, {"weight", w1}});
    Value* m = b.op(OpKind::MulScalar, "m", {{"self", c}, {"other", 2.0}});
    Value* r = b.op(OpKind::Relu, "r", {{"self", m}});
    b.g->outputs.push_back(b.op(OpKind::Conv2d, "y", {{"input", r}, {"weight", w2}}));
    TrainGraphs min_cut = partition_joint_graph(build_joint_graph(*b.g));
    std::vector<std::string> names = saved(min_cut);
    CHECK(std::find(names.begin(), names.end(), "r") != names.end());
    CHECK(std::find(names.begin(), names.end(), "m") == names.end());  // relu's mask input: recomputed
    CHECK(verify_graph(*min_cut.backward).empty());
  }
  // The mlp fixture: x, the first linear's output (gelu is recomputed from it) and the layer
  // norm's input.
  auto g = run_training_graph_passes(*load_model(test::fixture("mlp.pt2")));
  JointGraph j = build_joint_graph(*g);
  TrainGraphs min_cut = partition_joint_graph(j);
  TrainGraphs save_all = partition_joint_graph(j, all);
  CHECK(saved(min_cut) == std::vector<std::string>{"x", "linear", "add"});
  CHECK(saved(save_all) == std::vector<std::string>{"x", "linear", "gelu", "add"});
  CHECK(min_cut.params.size() == 6);
  CHECK(min_cut.grad_param_index.size() == 6);
  CHECK(verify_graph(*min_cut.backward).empty());
}

TEST_CASE("a size only a forward input has reaches the backward in an empty saved tensor", "[autodiff]") {
  // y = x * w / (2 m), m a size of t, which the backward does not read: without the carrier the
  // backward library could not bind m.
  test::GraphBuilder b;
  Expr n = b.sym("n", 1, 8), m = b.sym("m", 1, 8);
  Value* x = b.input("x", DType::Float32, {n, Expr(3)});
  b.input("t", DType::Float32, {m, Expr(2)});
  Value* w = b.weight("w", "w", DType::Float32, {3}, {1, 2, 3});
  Value* xw = b.op(OpKind::MulTensor, "xw", {{"self", x}, {"other", w}});
  b.g->outputs.push_back(b.op(OpKind::DivTensor, "y", {{"self", xw}, {"other", m * Expr(2)}}));
  TrainGraphs t = partition_joint_graph(build_joint_graph(*b.g));
  const Value* carrier = t.forward->outputs.back();
  REQUIRE(carrier->type.sizes.size() == 2);
  CHECK(carrier->type.sizes[0] == m);
  CHECK(carrier->type.sizes[1] == Expr(0));
  CHECK(t.backward->inputs[t.num_saved - 1].value->name == "size_m");
  loop::Program bwd = lower_to_loops(*t.backward);
  CHECK_NOTHROW(wrapper::abi_names(bwd, *t.backward));
}

TEST_CASE("training compile errors are one sentence naming the node", "[autodiff][bad_input]") {
  {
    test::GraphBuilder b;  // an op without a derivative on the path
    Value* x = b.input("x", DType::Float32, {Expr(4), Expr(6)});
    Value* w = b.weight("w", "w", DType::Float32, {6}, {1, 2, 3, 4, 5, 6});
    Value* m = b.op(OpKind::MulTensor, "m", {{"self", x}, {"other", w}});
    Value* c = b.op(OpKind::Sin, "sin_1", {{"self", m}}, "File \"net.py\", line 12, in forward\n    y = m.sin()");
    b.g->outputs.push_back(c);
    try {
      build_joint_graph(*b.g);
      FAIL("no error");
    } catch (const UserError& e) {
      std::string msg = e.what();
      CHECK(msg.find("node 'sin_1' (aten::sin)") != std::string::npos);
      CHECK(msg.find("net.py:12") != std::string::npos);
      CHECK(msg.find("no derivative") != std::string::npos);
    }
  }
  {
    test::GraphBuilder b;  // nothing to train
    Value* x = b.input("x", DType::Float32, {Expr(4)});
    b.g->outputs.push_back(b.op(OpKind::Relu, "r", {{"self", x}}));
    CHECK_THROWS_WITH(build_joint_graph(*b.g), Catch::Contains("nothing to train"));
  }
  auto r = test::run_ptc("compile " + test::fixture("mlp.pt2") + " -o " + test::temp_dir() + "/m.so --train --weights external");
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--weights external is not supported") != std::string::npos);
}
