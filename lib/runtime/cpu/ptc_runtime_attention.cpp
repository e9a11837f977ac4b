// ptc_runtime_attention.cpp — the fused attention (ptc_attention.h) behind ptc_rt.h's
// attention_call; part of a generated CPU library when it has an attention kernel.
#include "ptc_attention.h"
#include "ptc_rt.h"

namespace ptc_rt {

void attention_call(const AttentionArgs& a) {
  if (a.bf16_io)
    attention_bf16_io(a);
  else if (a.bf16_values && amx::ready())
    attention_amx(a);
  else
    attention(a);
}

}  // namespace ptc_rt
