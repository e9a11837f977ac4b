#!/usr/bin/env bash
# Real models on a GPU machine whose weights are too large to carry there: export them there
# (random weights: scripts/export_models.py --real), compile them for CUDA with a ptc built
# elsewhere (-DPTC_WITH_TORCHSCRIPT=OFF: it needs no torch), and check them against eager on the
# GPU and against the recorded CPU eager outputs (scripts/cuda_check.py).
#
#   bash scripts/cuda_real_check.sh PTC_BINARY OUT_DIR MODEL...      (e.g. bert gpt2 resnet18)
#
# PRECISION=tf32 or tf32-conv compiles with --tf32 / --tf32-conv and runs torch in the same
# precision (cuda_check.py --tf32 / --tf32-conv); PRECISION=bf16 or fp16 compiles with --precision
# bf16 / fp16 and runs torch under torch.autocast in that dtype (cuda_check.py --autocast); default: exact fp32 on both sides. GRAPHS=1
# also builds each model with --cuda-graphs (cuda_<model>_pt2_graphs.so, for cuda_check.py's
# bench). Exports already in OUT_DIR/models are reused; the libraries are always compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
ptc=$(readlink -f "$1")
out=$2
shift 2
precision=()
check_flags=()
case "${PRECISION:-exact}" in
  exact) ;;
  tf32 | tf32-conv) precision=("--$PRECISION"); check_flags=("--$PRECISION") ;;
  bf16 | fp16) precision=(--precision "$PRECISION"); check_flags=(--autocast "$PRECISION") ;;
  *) echo "PRECISION=$PRECISION: expected exact, tf32, tf32-conv, bf16 or fp16" >&2; exit 2 ;;
esac
mkdir -p "$out/models" "$out/libs"
# Convolutions link cuDNN: torch's pip one where the system has none.
. "$(dirname "$0")/cuda_env.sh" "$out"
missing=()
for m in "$@"; do [ -f "$out/models/$m.pt2" ] || missing+=("$m"); done
if [ ${#missing[@]} -gt 0 ]; then python3 scripts/export_models.py --real "${missing[@]}" --out "$out/models" --no-trace --no-verify; fi
# Several models at a time (nvcc is single-threaded per translation unit): JOBS, default 4.
printf '%s\n' "$@" | xargs -P "${JOBS:-4}" -I{} sh -c \
  "'$ptc' compile -q '$out/models/{}.pt2' -o '$out/libs/cuda_{}_pt2.so' --device cuda --no-cache ${precision[*]} && echo compiled {} || echo FAILED to compile {}"
if [ "${GRAPHS:-0}" = 1 ]; then
  printf '%s\n' "$@" | xargs -P "${JOBS:-4}" -I{} sh -c \
    "'$ptc' compile -q '$out/models/{}.pt2' -o '$out/libs/cuda_{}_pt2_graphs.so' --device cuda --cuda-graphs --no-cache ${precision[*]} || echo FAILED to compile {} with --cuda-graphs"
fi
python3 scripts/cuda_check.py --libs "$out/libs" --models-dir "$out/models" "${check_flags[@]}" --only "$@"
