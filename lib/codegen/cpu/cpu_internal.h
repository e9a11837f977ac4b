// Internal interface between the CPU kernel printer and the wrapper printer.
#pragma once

#include <ostream>

#include "ptc/codegen.h"
#include "ptc/schedule.h"

namespace ptc::cpu {

const char* ctype(DType t);
int dtype_code(DType t);  // runtime.h's PTC_* numbering
// Prints one kernel as a block of C++ statements (buffers are pointers named b<id>, size symbols
// and loop variables are int64_t locals named as in the IR).
void emit_kernel(std::ostream& os, const loop::Program& p, const sched::Kernel& k);

}  // namespace ptc::cpu
