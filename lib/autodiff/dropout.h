// Training-mode dropout for --train (lib/autodiff/dropout.cpp). Internal to lib/autodiff.
#pragma once

#include "ptc/graph.h"

namespace ptc::autodiff {

// Rewrites, in place, every training-mode dropout of `g` with p > 0 (aten::dropout,
// aten::dropout_ whose input nothing reads afterwards, aten::native_dropout whose mask nothing
// reads) into ptc::dropout(x, seed, p, stream): stream k for the k-th dropout, `seed` a new 0-d
// int64 user input named "ptc_rng_seed" (appended to g.inputs) that the training library fills
// per forward call. Returns that input, or nullptr when the graph has no such dropout.
// Errors (UserError): an in-place dropout whose input is read afterwards, a native_dropout whose
// mask is used (names the node and the user's line).
Value* seed_dropout(Graph& g);

}  // namespace ptc::autodiff
