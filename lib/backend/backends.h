// The backends this build of ptc knows, one per folder of lib/backend (internal to lib/backend:
// everything else asks ptc/backend.h's backends() / backend_named()).
#pragma once

#include "ptc/backend.h"

namespace ptc {

const Backend& cpu_backend();   // lib/backend/cpu
const Backend& cuda_backend();  // lib/backend/cuda

}  // namespace ptc
