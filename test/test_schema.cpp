#include <catch2/catch.hpp>

#include "ptc/ops.h"

using namespace ptc;

TEST_CASE("schema parser reads names, types, defaults and returns", "[schema]") {
  Schema s = parse_schema("aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)");
  CHECK(s.qualified() == "aten::max_pool2d_with_indices");
  REQUIRE(s.args.size() == 6);
  CHECK(s.args[1].type == ArgType::Ints);
  CHECK(s.args[1].list_size == 2);
  CHECK_FALSE(s.args[1].has_default);
  CHECK(std::get<std::vector<int64_t>>(s.args[2].default_value).empty());
  CHECK(std::get<int64_t>(s.args[3].default_value) == 0);
  CHECK(std::get<bool>(s.args[5].default_value) == false);
  CHECK(s.returns.size() == 2);

  Schema add = parse_schema("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  CHECK(add.qualified() == "aten::add.Tensor");
  CHECK(add.args[2].kwarg_only);
  CHECK(add.args[2].type == ArgType::Scalar);

  Schema split = parse_schema("aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]");
  CHECK(split.args[0].name == "self");
  CHECK(split.args[0].type == ArgType::Tensor);
  CHECK(split.returns[0].type == ArgType::TensorList);

  Schema gelu = parse_schema("aten::gelu(Tensor self, *, str approximate=\"none\") -> Tensor");
  CHECK(std::get<std::string>(gelu.args[1].default_value) == "none");

  Schema idx = parse_schema("aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor");
  CHECK(idx.args[1].type == ArgType::OptionalTensorList);

  Schema sdpa = parse_schema("aten::_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)");
  CHECK(sdpa.returns[1].name == "logsumexp");
  CHECK(std::get<double>(sdpa.args[3].default_value) == 0.0);
  CHECK(sdpa.args[5].optional);

  CHECK_THROWS_AS(parse_schema("no namespace"), std::invalid_argument);
  CHECK_THROWS_AS(parse_schema("aten::f(Tensor self"), std::invalid_argument);
  CHECK_THROWS_AS(parse_schema("aten::f(Tensor) -> Tensor"), std::invalid_argument);
}

TEST_CASE("op table: every row parses and is found by its names", "[schema]") {
  const auto& ops = all_ops();
  REQUIRE(ops.size() > 150);
  for (const auto& op : ops) {
    INFO(op.enum_name);
    CHECK(find_op(op.schema.qualified()) == op.kind);
    CHECK(&op_info(op.kind) == &op);
  }
  CHECK(find_op("aten::linear.default") == OpKind::Linear);
  CHECK(find_op("aten::add.Tensor") == OpKind::AddTensor);
  CHECK_FALSE(find_op("aten::no_such_op"));
  CHECK(qualified_from_target("torch.ops.aten.linear.default") == "aten::linear");
  CHECK(qualified_from_target("torch.ops.aten.add.Tensor") == "aten::add.Tensor");
  CHECK(qualified_from_target("_operator.mul") == "_operator::mul");
  CHECK(find_op(qualified_from_target("_operator.floordiv")) == OpKind::SymFloorDiv);
}
