// Helpers shared by the scheduler's files (schedule.cpp, library_epilogue.cpp).
#pragma once

#include <vector>

#include "ptc/loop.h"

namespace ptc::sched {

// The loop variables x0..x{n-1} of a domain of these sizes.
std::vector<sym::Expr> loop_vars(const std::vector<sym::Expr>& sizes, size_t n);
// The row-major flat position of index `idx` in a domain of these sizes.
sym::Expr row_major_flat(const std::vector<sym::Expr>& idx, const std::vector<sym::Expr>& sizes);

}  // namespace ptc::sched
