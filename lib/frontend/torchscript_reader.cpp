// The TorchScript reader (.pt): torch::jit::load, freeze (parameters become constants, method
// calls are inlined), then map each aten node to the graph IR through the same op table as the
// .pt2 reader. The only file outside tests that includes torch headers.
//
// TorchScript archives do not record input shapes: they come from LoadOptions or from the
// archive's extra file ptc_inputs.json (written by scripts/export_models.py). With static input
// shapes, node output types come from torch's shape propagation; otherwise they stay unknown
// until ptc's own shape propagation runs.
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>
#include <torch/script.h>

#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "ptc/error.h"
#include "ptc/passes.h"
#include "ptc/frontend.h"

namespace ptc {
namespace {

namespace jit = torch::jit;

struct InputSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<sym::Expr> sizes;
  std::vector<int64_t> hints;  // concrete sizes for shape propagation
};

// The attribute paths ("fc.weight") that forward reads through prim::GetAttr, after inlining.
std::set<std::string> attributes_read(const jit::Module& module) {
  std::shared_ptr<jit::Graph> g = module.get_method("forward").graph()->copy();
  jit::Inline(*g);
  std::map<const jit::Value*, std::string> path{{g->inputs()[0], ""}};
  std::set<std::string> used;
  for (jit::DepthFirstGraphNodeIterator it(g); const jit::Node* n = it.next();) {
    if (n->kind() != c10::prim::GetAttr) continue;
    auto base = path.find(n->input(0));
    if (base == path.end()) continue;
    const std::string p = base->second.empty() ? n->s(c10::attr::name) : base->second + "." + n->s(c10::attr::name);
    path[n->output()] = p;
    used.insert(p);
  }
  return used;
}

class Reader {
 public:
  Reader(std::string path, const LoadOptions& opts) : path_(std::move(path)), opts_(opts) {}
  std::unique_ptr<Graph> run();

 private:
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    user_error(path_, ": ", where_.empty() ? std::string() : where_ + ": ", parts...);
  }
  void read_input_specs(const std::string& extra_json, size_t n_inputs);
  Type type_of(const jit::Value* v) const;
  Arg constant_arg(const c10::IValue& iv, const SchemaArg* sa);
  Arg convert(const jit::Value* v, const SchemaArg* sa);
  void add_node(const jit::Node* n);
  std::string fresh_name(const jit::Value* v);

  std::string path_;
  const LoadOptions& opts_;
  std::string where_;
  std::unique_ptr<Graph> g_;
  std::vector<InputSpec> specs_;
  std::map<const jit::Value*, Value*> values_;
  std::map<const jit::Value*, c10::IValue> constants_;
  std::map<const jit::Value*, std::vector<const jit::Value*>> lists_;  // prim::ListConstruct
  // Integer-valued results (sizes and arithmetic on them, also as 0-dim tensors in traces).
  std::map<const jit::Value*, sym::Expr> exprs_;
  // The module's floating-point parameters ("fc.weight"), and those read as frozen constants
  // (graph inputs of role Parameter).
  std::set<std::string> params_, read_params_;
  // --train: the parameters' values, while the module's own hold a distinct fill each (so that
  // freezing cannot merge two equal parameters, e.g. two zero biases, into one constant).
  std::map<std::string, at::Tensor> originals_;
  std::optional<sym::Expr> int_expr(const jit::Value* v) const;
  void track_int(const jit::Node* n);
  Value* int_scalar_constant(const jit::Value* v, int64_t x);
  bool div_rounds_down(const jit::Node* n) const;
  void infer_unknown_types(Node& node);
  void propagate_static_shapes(jit::Graph& graph);
  int n_tensor_constants_ = 0;
};

sym::Expr parse_dim(const std::string& d, const std::map<std::string, sym::Range>& ranges) {
  return sym::parse(d, [&](const std::string& n) {
    auto it = ranges.find(n);
    return it == ranges.end() ? sym::Range{1, sym::Range::kPosInf} : it->second;
  });
}

void Reader::read_input_specs(const std::string& extra_json, size_t n_inputs) {
  using json = nlohmann::json;
  for (const auto& r : opts_.symbol_ranges) {  // "s0=1..1024"
    size_t eq = r.find('='), dots = r.find("..");
    if (eq == std::string::npos || dots == std::string::npos || dots < eq)
      fail("symbol range '", r, "' must look like s0=1..1024");
    try {
      g_->symbols[r.substr(0, eq)] = sym::Range{std::stoll(r.substr(eq + 1, dots - eq - 1)), std::stoll(r.substr(dots + 2))};
    } catch (const std::exception&) {
      fail("symbol range '", r, "' must look like s0=1..1024");
    }
  }
  if (!opts_.input_shapes.empty()) {
    if (opts_.input_shapes.size() != n_inputs)
      fail("the model has ", n_inputs, " inputs but ", opts_.input_shapes.size(), " input shapes were given");
    for (size_t i = 0; i < n_inputs; ++i) {
      InputSpec s;
      std::string shape = opts_.input_shapes[i];
      size_t colon = shape.find(':');  // optional "int64:1x128"
      if (colon != std::string::npos) {
        auto dt = dtype_from_name(shape.substr(0, colon));
        if (!dt) fail("unknown dtype in input shape '", shape, "'");
        s.dtype = *dt;
        shape = shape.substr(colon + 1);
      }
      std::stringstream ss(shape);
      std::string d;
      try {
        while (std::getline(ss, d, 'x')) s.sizes.push_back(parse_dim(d, g_->symbols));
      } catch (const std::exception&) {
        fail("input shape '", opts_.input_shapes[i], "' is not sizes (numbers or symbols) separated by 'x', e.g. 1x3x224x224 or s0x128");
      }
      specs_.push_back(std::move(s));
    }
  } else if (!extra_json.empty()) {
    try {
      json j = json::parse(extra_json);
      for (const auto& [name, r] : j.at("symbols").items())
        g_->symbols[name] = sym::Range{r.at("min").get<int64_t>(), r.at("max").is_null() ? sym::Range::kPosInf : r.at("max").get<int64_t>()};
      for (const auto& in : j.at("inputs")) {
        InputSpec s;
        s.name = in.at("name").get<std::string>();
        auto dt = dtype_from_name(in.at("dtype").get<std::string>());
        if (!dt) fail("ptc_inputs.json: unknown dtype ", in.at("dtype").dump());
        s.dtype = *dt;
        for (const auto& d : in.at("sizes"))
          s.sizes.push_back(d.is_string() ? parse_dim(d.get<std::string>(), g_->symbols) : sym::Expr(d.get<int64_t>()));
        specs_.push_back(std::move(s));
      }
    } catch (const nlohmann::json::exception& e) {
      fail("its ptc_inputs.json is malformed (", e.what(), ")");
    } catch (const std::invalid_argument& e) {
      fail("its ptc_inputs.json has a bad size: ", e.what());
    }
    if (specs_.size() != n_inputs) fail("ptc_inputs.json describes ", specs_.size(), " inputs but the model takes ", n_inputs);
  } else {
    fail("a TorchScript archive does not record its input shapes; give them with --input-shape (e.g. --input-shape 1x3x224x224)");
  }
  for (auto& s : specs_) {
    for (const auto& e : s.sizes) {
      if (auto c = e.as_const()) {
        s.hints.push_back(*c);
      } else {
        s.hints.clear();
        break;
      }
    }
  }
}

Type Reader::type_of(const jit::Value* v) const {
  auto tt = v->type()->cast<c10::TensorType>();
  if (!tt) {
    if (v->type()->kind() == c10::TypeKind::IntType) return Type::sym_int(std::nullopt);
    return Type::unknown();
  }
  auto sizes = tt->sizes().concrete_sizes();
  auto st = tt->scalarType();
  if (!sizes || !st) return Type::unknown();
  auto dt = dtype_from_c10(static_cast<int64_t>(*st));
  if (!dt) return Type::unknown();
  return Type::tensor(*dt, std::vector<sym::Expr>(sizes->begin(), sizes->end()));
}

// With static input shapes, runs the graph once, node by node, on zero inputs and records each
// tensor result's dtype and sizes on the TorchScript value (best effort: it stops at the first
// node it cannot run; ptc's own shape propagation fills what is left).
void Reader::propagate_static_shapes(jit::Graph& graph) {
  std::map<const jit::Value*, c10::IValue> env;
  for (size_t i = 0; i < specs_.size(); ++i) {
    int64_t c10_code = -1;
    for (int64_t c = 0; c < 32 && c10_code < 0; ++c)
      if (dtype_from_c10(c) == specs_[i].dtype) c10_code = c;
    if (c10_code < 0) return;
    env[graph.inputs()[i + 1]] = at::zeros(specs_[i].hints, at::TensorOptions().dtype(static_cast<c10::ScalarType>(c10_code)));
  }
  try {
    for (jit::Node* n : graph.nodes()) {
      if (n->kind() == c10::prim::Constant) {
        auto iv = jit::toIValue(n->output());
        if (!iv) return;
        env[n->output()] = *iv;
        continue;
      }
      if (n->kind() == c10::prim::ListUnpack) {
        auto list = env.at(n->input()).toList();
        for (size_t i = 0; i < n->outputs().size(); ++i) env[n->output(i)] = list.get(i);
      } else if (n->kind() == c10::prim::ListConstruct) {
        std::vector<int64_t> ints;
        std::vector<at::Tensor> tensors;
        for (const jit::Value* in : n->inputs()) {
          const c10::IValue& iv = env.at(in);
          if (iv.isInt()) ints.push_back(iv.toInt());
          else if (iv.isTensor()) tensors.push_back(iv.toTensor());
          else return;
        }
        if (!ints.empty() && !tensors.empty()) return;
        env[n->output()] = tensors.empty() ? c10::IValue(ints) : c10::IValue(tensors);
      } else {
        jit::Stack stack;
        for (const jit::Value* in : n->inputs()) stack.push_back(env.at(in));
        if (!n->maybeOperator()) return;
        n->getOperation()(stack);
        if (stack.size() != n->outputs().size()) return;
        for (size_t i = 0; i < stack.size(); ++i) env[n->output(i)] = stack[i];
      }
      for (jit::Value* o : n->outputs()) {
        const c10::IValue& iv = env.at(o);
        if (iv.isTensor()) o->setType(c10::TensorType::create(iv.toTensor()));
      }
    }
  } catch (const std::exception&) {
    // Leave the remaining types unknown.
  }
}

std::string Reader::fresh_name(const jit::Value* v) {
  std::string base = v->debugName();
  size_t dot = base.find_last_of('.');  // "x.1" -> "x"
  if (dot != std::string::npos && dot + 1 < base.size() &&
      base.find_first_not_of("0123456789", dot + 1) == std::string::npos)
    base.resize(dot);
  for (char& c : base)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0]))) base = "v" + base;
  std::string name = base;
  for (int i = 1; g_->find_value(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

Arg Reader::constant_arg(const c10::IValue& iv, const SchemaArg* sa) {
  ArgType t = sa ? sa->type : ArgType::Other;
  if (iv.isNone()) return std::monostate{};
  if (iv.isBool()) return iv.toBool();
  if (iv.isInt()) {
    int64_t i = iv.toInt();
    if (t == ArgType::SymInt) return sym::Expr(i);
    if (t == ArgType::Float) return static_cast<double>(i);
    if (t == ArgType::ScalarType) {
      if (auto dt = dtype_from_c10(i)) return *dt;
    }
    if (t == ArgType::Ints || t == ArgType::SymInts) {
      std::vector<int64_t> v(sa->list_size ? sa->list_size : 1, i);
      if (t == ArgType::SymInts) return std::vector<sym::Expr>(v.begin(), v.end());
      return v;
    }
    if (t == ArgType::MemoryFormat) return std::string(i == 0 ? "contiguous_format" : "other");
    if (t == ArgType::Layout) return std::string(i == 0 ? "strided" : "sparse");  // c10::Layout numbering
    return i;
  }
  if (iv.isDouble()) return iv.toDouble();
  if (iv.isString()) return iv.toStringRef();
  if (iv.isIntList()) {
    auto v = iv.toIntVector();
    if (t == ArgType::SymInts) return std::vector<sym::Expr>(v.begin(), v.end());
    return v;
  }
  if (iv.isDoubleList()) return iv.toDoubleVector();
  if (iv.isBoolList()) {
    std::vector<bool> out;
    for (bool b : iv.toBoolList()) out.push_back(b);
    return out;
  }
  if (iv.isDevice()) {
    Device d;
    d.type = iv.toDevice().is_cuda() ? Device::Type::CUDA : iv.toDevice().is_cpu() ? Device::Type::CPU : Device::Type::Other;
    d.index = iv.toDevice().has_index() ? iv.toDevice().index() : -1;
    return d;
  }
  fail("has a constant of type ", iv.tagKind(), " that ptc does not read");
}

std::optional<sym::Expr> Reader::int_expr(const jit::Value* v) const {
  if (auto it = exprs_.find(v); it != exprs_.end()) return it->second;
  if (auto it = constants_.find(v); it != constants_.end() && it->second.isInt()) return sym::Expr(it->second.toInt());
  return std::nullopt;
}

// aten::div with rounding_mode "floor" (what `//` on tensors traces as): an integer result.
bool Reader::div_rounds_down(const jit::Node* n) const {
  if (n->inputs().size() < 3) return false;
  auto it = constants_.find(n->input(2));
  return it != constants_.end() && it->second.isString() && it->second.toStringRef() == "floor";
}

// Follows size arithmetic (aten::size, NumToTensor/Int, + - * // %, rsub) symbolically, so that view and
// reshape sizes computed from dynamic dimensions become expressions over the input symbols.
void Reader::track_int(const jit::Node* n) {
  const std::string k = n->kind().toQualString();
  if (n->outputs().size() != 1) return;
  std::optional<sym::Expr> r;
  auto in = [&](size_t i) { return i < n->inputs().size() ? int_expr(n->input(i)) : std::nullopt; };
  if (k == "aten::size" && n->inputs().size() == 2) {
    auto vit = values_.find(n->input(0));
    auto dim = in(1);
    if (vit != values_.end() && vit->second->type.is_tensor() && dim && dim->as_const()) {
      int64_t d = *dim->as_const(), rank = static_cast<int64_t>(vit->second->type.rank());
      if (d < 0) d += rank;
      if (d >= 0 && d < rank) r = vit->second->type.sizes[static_cast<size_t>(d)];
    }
  } else if (k == "prim::NumToTensor" || k == "aten::Int" || k == "aten::ScalarImplicit") {
    r = in(0);
  } else if (n->inputs().size() >= 2 && in(0) && in(1)) {
    sym::Expr a = *in(0), b = *in(1);
    try {
      // add / sub with an alpha other than 1 (Tensor overloads) are not size arithmetic to follow.
      const bool unit_alpha = n->inputs().size() < 3 || (in(2) && in(2)->as_const() == 1);
      if (k == "aten::add" && unit_alpha) r = a + b;
      else if (k == "aten::sub" && unit_alpha) r = a - b;
      else if (k == "aten::mul") r = a * b;
      else if (k == "aten::floor_divide" || k == "aten::floordiv" || k == "aten::div") {
        // `//` on a trace's size tensors is div(rounding_mode="floor"); a true division is
        // followed only where it is exact.
        if (k != "aten::div" || div_rounds_down(n) || (b.as_const() && a == sym::floordiv(a, b) * b)) r = sym::floordiv(a, b);
      }
      else if (k == "aten::remainder") r = sym::mod(a, b);
      else if (k == "aten::rsub") {  // other - alpha * self
        auto alpha = n->inputs().size() > 2 ? in(2) : std::optional<sym::Expr>(sym::Expr(1));
        if (alpha) r = b - *alpha * a;
      }
    } catch (const std::domain_error&) {
      r.reset();
    }
  }
  if (r) {
    exprs_[n->output()] = *r;
    if (n->output()->type()->kind() == c10::TypeKind::IntType) {
      values_.at(n->output())->type = Type::sym_int(*r);
    } else if (auto tt = n->output()->type()->cast<c10::TensorType>();
               tt && r->as_const() && (k != "aten::div" || div_rounds_down(n)) &&
               (!tt->scalarType() || *tt->scalarType() == c10::ScalarType::Long)) {
      // A trace keeps size arithmetic as 0-dim int64 tensors (NumToTensor, then aten ops on it;
      // a true division's result is float and keeps its node; a saved trace's types carry no dtype).
      // Where the size is static, later tensor math on it (swin_t's head-size scale,
      // (C // heads) ** -0.5) reads a constant instead of the node, which has no lowering.
      values_[n->output()] = int_scalar_constant(n->output(), *r->as_const());
    }
  }
}

Value* Reader::int_scalar_constant(const jit::Value* v, int64_t x) {
  std::string target = "constant_" + std::to_string(n_tensor_constants_++);
  while (g_->weights.count(target)) target += "_";
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(&x), sizeof x);
  TensorData td;
  td.type = Type::tensor(DType::Int64, {});
  td.storage = reinterpret_cast<const std::byte*>(bytes->data());
  td.storage_bytes = bytes->size();
  td.owner = bytes;
  Type vt = td.type;
  g_->weights[target] = std::move(td);
  std::string name = fresh_name(v) + "_const";
  while (g_->find_value(name)) name += "_";
  return g_->add_input(name, vt, GraphInput::Role::Constant, target);
}

Arg Reader::convert(const jit::Value* v, const SchemaArg* sa) {
  if (sa && (sa->type == ArgType::SymInt || sa->type == ArgType::Int))
    if (auto e = int_expr(v); e && exprs_.count(v)) {
      if (sa->type == ArgType::SymInt) return *e;
      if (auto c = e->as_const()) return *c;
    }
  if (auto it = values_.find(v); it != values_.end()) return it->second;
  if (auto it = constants_.find(v); it != constants_.end()) return constant_arg(it->second, sa);
  if (auto it = lists_.find(v); it != lists_.end()) {
    const auto& elems = it->second;
    bool all_values = true, all_ints = true, all_exprs = true;
    for (const jit::Value* e : elems) {
      all_values = all_values && values_.count(e) && values_.at(e)->type.kind != Type::Kind::SymInt;
      all_ints = all_ints && constants_.count(e) && constants_.at(e).isInt();
      all_exprs = all_exprs && int_expr(e).has_value();
    }
    bool want_ints = sa && (sa->type == ArgType::SymInts || sa->type == ArgType::Ints);
    if (all_values && !(want_ints && all_exprs)) {
      std::vector<Value*> out;
      for (const jit::Value* e : elems) out.push_back(values_.at(e));
      return out;
    }
    if (all_ints) {
      std::vector<int64_t> out;
      for (const jit::Value* e : elems) out.push_back(constants_.at(e).toInt());
      if (sa && sa->type == ArgType::SymInts) return std::vector<sym::Expr>(out.begin(), out.end());
      return out;
    }
    if (all_exprs) {
      std::vector<sym::Expr> out;
      for (const jit::Value* e : elems) out.push_back(*int_expr(e));
      return out;
    }
    // A list mixing computed sizes and constants: computed sizes are not tracked as expressions
    // by this reader yet; keep the list opaque.
    fail("builds a list from values ptc cannot follow symbolically");
  }
  fail("uses value %", v->debugName(), " that ptc could not read");
}

void Reader::add_node(const jit::Node* n) {
  const auto kind = n->kind();
  std::ostringstream src;
  n->sourceRange().highlight(src);
  where_ = std::string("node %") + (n->outputs().empty() ? "?" : n->output(0)->debugName()) + " (" + kind.toQualString() + ")";
  if (kind == c10::prim::Constant) {
    auto iv = jit::toIValue(n->output());
    if (!iv) fail("has a constant ptc cannot read");
    if (iv->isTensor()) {
      at::Tensor t = iv->toTensor().contiguous();
      auto dt = dtype_from_c10(static_cast<int64_t>(t.scalar_type()));
      if (!dt) fail("has a tensor constant of unsupported dtype ", t.dtype().name());
      // Frozen parameters keep their attribute path as debug name ("self.fc.weight").
      std::string target = n->output()->debugName();
      if (target.rfind("self.", 0) == 0) target = target.substr(5);
      else target = "constant_" + std::to_string(n_tensor_constants_++);
      while (g_->weights.count(target)) target += "_";
      const bool param = params_.count(target) > 0;
      if (param) read_params_.insert(target);
      if (auto o = originals_.find(target); o != originals_.end()) t = o->second.contiguous();
      auto bytes = std::make_shared<std::string>(static_cast<const char*>(t.data_ptr()), t.nbytes());
      TensorData td;
      td.type = Type::tensor(*dt, std::vector<sym::Expr>(t.sizes().begin(), t.sizes().end()));
      td.storage = reinterpret_cast<const std::byte*>(bytes->data());
      td.storage_bytes = bytes->size();
      td.owner = bytes;
      Type vt = td.type;
      g_->weights[target] = std::move(td);
      values_[n->output()] = g_->add_input(fresh_name(n->output()), vt, param ? GraphInput::Role::Parameter : GraphInput::Role::Constant, target);
      if (t.dim() == 0 && !t.is_floating_point() && !t.is_complex() && t.scalar_type() != at::kBool)
        exprs_[n->output()] = sym::Expr(t.item<int64_t>());  // traces keep sizes as 0-dim tensors
    } else {
      constants_[n->output()] = *iv;
    }
    return;
  }
  if (kind == c10::prim::ListConstruct) {
    lists_[n->output()] = std::vector<const jit::Value*>(n->inputs().begin(), n->inputs().end());
    return;
  }
  if (kind == c10::prim::ListUnpack) {
    // The elements of a Tensor[] result become outputs of the producing node.
    auto it = values_.find(n->input());
    if (it == values_.end() || !it->second->producer) fail("unpacks a list ptc could not read");
    Node* prod = it->second->producer;
    prod->outputs.clear();
    prod->list_output = true;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      Value* v = g_->add_value(fresh_name(n->output(i)), type_of(n->output(i)));
      v->producer = prod;
      v->output_index = static_cast<int>(i);
      prod->outputs.push_back(v);
      values_[n->output(i)] = v;
    }
    infer_unknown_types(*prod);  // now that its results are separate values
    return;
  }
  if (kind == c10::prim::If || kind == c10::prim::Loop)
    fail("is control flow; ptc does not support control flow in TorchScript models yet");
  auto node = std::make_unique<Node>();
  node->target = kind.toQualString();
  node->source.stack_trace = src.str();
  std::string qualified = node->target;
  const c10::FunctionSchema* fs = n->maybeSchema();
  if (fs && !fs->overload_name().empty()) qualified += "." + fs->overload_name();
  if (auto k = find_op(qualified)) node->kind = *k;
  const OpInfo* info = node->op();
  if (info && info->schema.args.size() != n->inputs().size())
    fail("has ", n->inputs().size(), " arguments, but ptc's schema has ", info->schema.args.size());
  for (size_t i = 0; i < n->inputs().size(); ++i) {
    const SchemaArg* sa = info ? &info->schema.args[i] : nullptr;
    node->args.push_back(convert(n->input(i), sa));
    if (!info) node->arg_names.push_back(fs && i < fs->arguments().size() ? fs->arguments()[i].name() : "");
  }
  for (const jit::Value* o : n->outputs()) {
    Value* v = g_->add_value(fresh_name(o), type_of(o));
    values_[o] = v;
    node->outputs.push_back(v);
  }
  node->name = node->outputs.empty() ? "node" + std::to_string(g_->nodes().size()) : node->outputs[0]->name;
  Node* added = g_->add_node(std::move(node));
  infer_unknown_types(*added);
  track_int(n);
}

// Dynamic shapes: the trace records no intermediate types, so each node's outputs get the types
// ptc's shape rules give as the graph is read. Sizes taken from intermediate tensors
// (aten::size on a computed value) then become expressions over the input symbols, and lists
// built from them can be followed. A rule that cannot decide yet leaves the type unknown (the
// shape-propagation pass tries again on the whole graph).
void Reader::infer_unknown_types(Node& node) {
  bool unknown = false;
  for (const Value* o : node.outputs) unknown = unknown || o->type.kind == Type::Kind::Unknown;
  if (!unknown || node.kind == OpKind::Unknown) return;
  for (const Value* in : node.inputs())
    if (in->type.kind == Type::Kind::Unknown) return;
  std::vector<Type> types;
  try {
    types = infer_node_types(node);
  } catch (const std::exception&) {
    return;
  }
  if (types.size() != node.outputs.size()) return;
  for (size_t i = 0; i < types.size(); ++i)
    if (node.outputs[i]->type.kind == Type::Kind::Unknown && types[i].kind != Type::Kind::Unknown) node.outputs[i]->type = types[i];
}

std::unique_ptr<Graph> Reader::run() {
  jit::ExtraFilesMap extra{{"ptc_inputs.json", ""}};
  jit::Module module;
  try {
    module = jit::load(path_, c10::kCPU, extra);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    fail("not a TorchScript archive torch::jit::load can read (", what.substr(0, what.find('\n')), ")");
  }
  std::shared_ptr<jit::Graph> graph;
  std::set<std::string> used;  // attribute paths forward reads, before freezing
  try {
    // Every floating-point parameter, as for .pt2 archives (torch.jit.trace under no_grad saves
    // them with requires_grad off). For training each first gets a distinct fill (freezing
    // pools equal constants), its real values kept to restore.
    if (opts_.train) used = attributes_read(module);
    torch::NoGradGuard no_grad;
    double fill = 1;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      if (!p.value.is_floating_point()) continue;
      params_.insert(p.name);
      if (opts_.train) {
        originals_[p.name] = p.value.detach().clone();
        p.value.detach().fill_(fill++);
      }
    }
    module.eval();
    jit::Module frozen = jit::freeze(module, std::nullopt, /*optimize_numerics=*/false);
    graph = frozen.get_method("forward").graph()->copy();
    jit::Inline(*graph);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    fail("torch could not freeze the module (", what.substr(0, what.find('\n')), ")");
  }
  g_ = std::make_unique<Graph>();
  std::string base = path_.substr(path_.find_last_of('/') + 1);
  g_->name = base.substr(0, base.find('.'));
  g_->source_format = "TorchScript";
  size_t n_inputs = graph->inputs().size() - 1;  // input 0 is the module itself
  read_input_specs(extra["ptc_inputs.json"], n_inputs);

  bool all_static = true;
  for (size_t i = 0; i < n_inputs; ++i) {
    const jit::Value* in = graph->inputs()[i + 1];
    const InputSpec& s = specs_[i];
    if (s.hints.empty()) all_static = false;
    std::string name = s.name.empty() ? fresh_name(in) : s.name;
    values_[in] = g_->add_input(name, Type::tensor(s.dtype, s.sizes), GraphInput::Role::User);
  }
  if (all_static) propagate_static_shapes(*graph);
  for (const jit::Node* n : graph->nodes()) add_node(n);
  where_.clear();
  const jit::Value* ret = graph->outputs()[0];
  std::vector<const jit::Value*> outs{ret};
  if (ret->node()->kind() == c10::prim::TupleConstruct) outs.assign(ret->node()->inputs().begin(), ret->node()->inputs().end());
  for (const jit::Value* o : outs) {
    auto it = values_.find(o);
    if (it == values_.end()) fail("returns %", o->debugName(), ", which is not a tensor ptc computes");
    g_->outputs.push_back(it->second);
  }
  std::vector<std::string> problems = verify_graph(*g_);
  if (!problems.empty()) fail("the graph read is malformed: ", problems.front());
  if (opts_.train)
    for (const std::string& p : params_)
      if (used.count(p) && !read_params_.count(p))
        fail("--train: torch.jit.freeze folded parameter '", p, "' into another constant, so ptc cannot compute its gradient; ",
             "export the model with torch.export (.pt2) for training");
  return std::move(g_);
}

}  // namespace

bool torchscript_available() { return true; }

std::unique_ptr<Graph> load_torchscript(const std::string& path, const LoadOptions& opts) {
  return Reader(path, opts).run();
}

}  // namespace ptc
