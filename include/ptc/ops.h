// The op table. Every operator ptc knows is one row of include/ptc/ops.def, which names its aten
// schema (name, overload, arguments with types and defaults, returns). This header turns the rows
// into an enum and parsed schemas; later stages add their functions per row (shape rule,
// decomposition, lowering, derivative) keyed by the same enum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ptc {

enum class OpKind : uint16_t {
#define PTC_OP(name, schema) name,
#include "ptc/ops.def"
#undef PTC_OP
  Unknown,  // an operator ptc does not know; the node keeps its target and raw arguments
};

// Types of schema arguments, coarse enough for readers and the verifier.
enum class ArgType : uint8_t {
  Tensor, TensorList, OptionalTensorList,  // Tensor, Tensor[], Tensor?[]
  Int, Ints, SymInt, SymInts, Float, Floats, Bool, Bools, Scalar, Str,
  ScalarType, Layout, Device, MemoryFormat, Generator, Other,
};
const char* arg_type_name(ArgType t);

// A schema default, already typed: None, bool, int, float, string, or an int/float list.
// A scalar default for a list type ("int[2] padding=0") is stored as the scalar; readers
// broadcast it to the declared length.
using DefaultValue = std::variant<std::monostate, bool, int64_t, double, std::string,
                                  std::vector<int64_t>, std::vector<double>>;

struct SchemaArg {
  std::string name;
  ArgType type = ArgType::Other;
  bool optional = false;     // "T?"
  int list_size = 0;         // N in "int[N]", 0 when unsized or not a list
  bool kwarg_only = false;   // after "*"
  bool has_default = false;
  DefaultValue default_value;
  std::string type_text;     // as written, e.g. "SymInt[2]", "Tensor?"
};

struct SchemaReturn {
  std::string name;  // often empty
  ArgType type = ArgType::Tensor;
  bool optional = false;
};

struct Schema {
  std::string ns;        // "aten", "_operator"
  std::string name;      // "add"
  std::string overload;  // "Tensor", "" for the default overload
  std::vector<SchemaArg> args;
  std::vector<SchemaReturn> returns;
  std::string text;      // the full schema string
  std::string qualified() const;  // "aten::add.Tensor" / "aten::linear"
};

// Parses a schema string like "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) ->
// Tensor". Throws std::invalid_argument on malformed text.
Schema parse_schema(const std::string& text);

struct OpInfo {
  OpKind kind;
  const char* enum_name;  // "AddTensor"
  Schema schema;
};

const OpInfo& op_info(OpKind kind);
const std::vector<OpInfo>& all_ops();  // in table order, without Unknown
// By qualified name ("aten::add.Tensor", "aten::linear", "aten::linear.default",
// "_operator::mul"); nullopt when ptc does not know it.
std::optional<OpKind> find_op(const std::string& qualified);
// torch.export target ("torch.ops.aten.add.Tensor", "_operator.mul") -> qualified name
// ("aten::add.Tensor", "_operator::mul"); the "default" overload is dropped.
std::string qualified_from_target(const std::string& target);

// Ops whose outputs are views or copies of their first tensor argument's elements, in its dtype
// (view, reshape, permute, transpose, split, slice, select, expand, squeeze / unsqueeze,
// contiguous, clone, ...): what they compute from x they would compute alike from x in another
// dtype.
bool op_rearranges(OpKind kind);

// torch's elu family as elu(x, alpha, scale, input_scale) = scale x where x > 0, else
// scale alpha (exp(input_scale x) - 1): elu's own arguments; selu's fixed constants; celu's
// alpha with input_scale 1 / alpha. `given`: the node's arguments where it has them.
struct EluConstants {
  double alpha = 1, scale = 1, input_scale = 1;
};
EluConstants elu_constants(OpKind kind, EluConstants given);

}  // namespace ptc
