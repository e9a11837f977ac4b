// The graph IR: a functional SSA graph of aten-level ops with symbolic shapes.
//
// A Graph owns its Values and Nodes; nodes are kept in topological order. A Value is a tensor
// (dtype, symbolic sizes and strides, device) or a symbolic scalar (SymInt/SymFloat/SymBool,
// with its expression when known). A Node has one OpKind from the op table, arguments aligned
// with the op's schema (defaults filled in by the readers), and output Values. Views are ordinary
// ops. Graph inputs carry a role (user input, parameter, buffer, constant); the bytes of
// parameters, buffers and constants live in `weights`, borrowed from the model file where the
// format allows (mmap) — a Graph never copies weight bytes it can borrow.
//
// Readers build a Graph with the mutating methods below; everything after the readers treats a
// Graph as immutable (passes build new graphs).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ptc/dtype.h"
#include "ptc/ops.h"
#include "ptc/sym.h"

namespace ptc {

struct Type {
  enum class Kind : uint8_t { Tensor, SymInt, SymFloat, SymBool, Unknown };
  Kind kind = Kind::Unknown;
  // Tensor:
  DType dtype = DType::Float32;
  std::vector<sym::Expr> sizes;
  std::vector<sym::Expr> strides;
  sym::Expr storage_offset;
  Device device;
  bool requires_grad = false;
  // SymInt: its value as an expression over the graph's symbols, when known.
  std::optional<sym::Expr> value;

  static Type tensor(DType dt, std::vector<sym::Expr> sizes, std::vector<sym::Expr> strides = {});
  static Type sym_int(std::optional<sym::Expr> value);
  static Type unknown() { return Type{}; }
  bool is_tensor() const { return kind == Kind::Tensor; }
  size_t rank() const { return sizes.size(); }
  std::optional<int64_t> static_numel() const;  // nullopt when a size is symbolic
  std::string str() const;                       // "f32[s0, 64]", "SymInt(s0*4)", "?"
};

// Row-major strides for `sizes`.
std::vector<sym::Expr> contiguous_strides(const std::vector<sym::Expr>& sizes);

class Node;

class Value {
 public:
  int id = -1;
  std::string name;
  Type type;
  Node* producer = nullptr;  // nullptr for graph inputs
  int output_index = 0;
};

// Where an operator came from in the user's program (from the export's metadata).
struct SourceInfo {
  std::string stack_trace;   // as exported: "File \"m.py\", line 9, in forward\n    ..."
  std::string module_stack;  // nn_module_stack, e.g. "L__self__l1,l1,torch.nn.Linear"
  // The user's innermost frame outside torch: "m.py:9: return s.ln(x)". Empty if unknown.
  std::string user_frame() const;
};

// One argument of a node. For known ops, args are aligned with the schema's arguments; for
// Unknown ops they are the arguments as the file gave them (see Node::arg_names).
using Arg = std::variant<std::monostate,                             // None
                         Value*,                                     // Tensor / SymInt value
                         std::vector<Value*>,                        // Tensor[] (nullptr = None)
                         int64_t, double, bool, std::string,         // int, float, bool, str
                         std::vector<int64_t>, std::vector<double>,  // int[], float[]
                         std::vector<bool>,                          // bool[]
                         sym::Expr, std::vector<sym::Expr>,          // SymInt, SymInt[]
                         DType, Device>;                             // ScalarType, Device
std::string arg_str(const Arg& a);
// The Arg a schema default stands for (SymInt defaults as expressions, int-list defaults of
// "int[N]" broadcast to N, ScalarType names as DTypes).
Arg schema_default(const SchemaArg& sa);
// The argument as a number when it is one (int, float, bool or a constant SymInt).
std::optional<double> arg_number(const Arg& a);

class Node {
 public:
  OpKind kind = OpKind::Unknown;
  std::string target;  // as the file named it: "torch.ops.aten.linear.default", "aten::linear"
  std::string name;
  std::vector<Arg> args;
  std::vector<std::string> arg_names;  // for Unknown ops only (known ops: the schema's names)
  std::vector<Value*> outputs;
  bool list_output = false;  // the op returns Tensor[]; outputs are its elements
  SourceInfo source;

  const OpInfo* op() const;  // nullptr for Unknown
  std::string op_name() const;  // "aten::linear", or the raw target for Unknown
  // Every Value this node reads, in argument order.
  std::vector<Value*> inputs() const;
  // Argument by schema name (known ops); nullptr when absent.
  const Arg* arg(const std::string& name) const;
};

struct GraphInput {
  enum class Role : uint8_t { User, Parameter, Buffer, Constant };
  Value* value = nullptr;
  Role role = Role::User;
  std::string target;  // state-dict name for parameters/buffers/constants; empty for user inputs
};
const char* role_name(GraphInput::Role r);

// The bytes of one parameter, buffer or constant: a span of a storage (as_strided semantics:
// sizes, strides and storage offset are in `type`, in elements).
struct TensorData {
  Type type;
  const std::byte* storage = nullptr;  // start of the storage
  size_t storage_bytes = 0;
  std::shared_ptr<const void> owner;   // keeps the storage alive (an mmap, or owned bytes)
  size_t nbytes() const;               // bytes the tensor's elements span (numel * itemsize)
};

class Graph {
 public:
  std::string name;
  std::string source_format;  // "torch.export (schema 8.17, torch 2.11.0)", "TorchScript"
  std::vector<GraphInput> inputs;
  std::vector<Value*> outputs;
  std::map<std::string, TensorData> weights;  // state-dict name -> bytes
  std::map<std::string, sym::Range> symbols;  // dynamic dimensions and their ranges
  // Buffers the program updates (torch.export's buffer mutations, in-place updates of buffers
  // that functionalize finds, batch-norm running statistics): the last updated_buffers.size()
  // outputs are the new contents of the Buffer inputs with these state-dict names, in order. A
  // library holds them as state (inference: loop::Buffer::Kind::State; training: ptc_train.h).
  std::vector<std::string> updated_buffers;

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_value(std::string name, Type type);
  Value* add_input(std::string name, Type type, GraphInput::Role role, std::string target = {});
  Node* add_node(std::unique_ptr<Node> node);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  Value* find_value(const std::string& name) const;

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Value*> by_name_;
};

// Text form of a graph (see printer.cpp for the grammar); deterministic.
std::string print_graph(const Graph& g);
// Checks the invariants: names unique, every use after its definition, outputs defined, known
// ops' arguments match their schemas, weights present for non-user inputs and large enough.
// Returns the problems found (empty when the graph is well formed).
std::vector<std::string> verify_graph(const Graph& g);

}  // namespace ptc
