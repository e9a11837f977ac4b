#!/usr/bin/env bash
# The CUDA backend's acceptance checks on a GPU machine, in one command (docs/cuda.md, "Checking
# on a GPU"): correctness of every fixture and suite model against eager on the GPU,
# compute-sanitizer, and the benches against eager and torch.compile.
#
#   bash scripts/cuda_accept.sh PTC_BINARY FIXTURE_LIBS WORK_DIR [STEP...]
#
# PTC_BINARY: a ptc (one built with -DPTC_WITH_TORCHSCRIPT=OFF will do: it needs no torch);
# FIXTURE_LIBS: what scripts/build_cuda_fixtures.sh wrote (nvcc needs no GPU, so build them
# anywhere); WORK_DIR: exports and libraries of the real models (random weights), reused when
# there (use a fresh one for another ptc). Steps, all by default, in this order:
#   fixtures     every fixture library against eager on the GPU and the recorded CPU outputs
#   memcheck     the fixture libraries under compute-sanitizer memcheck
#   small        the small fixtures' bench: eager, torch.compile (both modes), ptc
#   bandwidth    fused pointwise kernels against device-to-device copy bandwidth
#   suite        every real model of the suite (export_models.py REAL) in exact fp32 against eager
#   bench        the six acceptance models in torch's default precision (TF32 for cuDNN
#                convolutions only, matmuls exact: ptc --tf32-conv), checked, then eager,
#                torch.compile (default and reduce-overhead) and ptc (with and without
#                --cuda-graphs) side by side, with the geomeans
#   bench-exact  the same with TF32 off everywhere (exact fp32 on both sides)
#   suite-bf16, suite-fp16
#                every real model with --precision bf16 / fp16 against eager under torch.autocast
#                (the relative-RMS rule of cuda_check.py --autocast)
#   ops          test/ops_test.py --device cuda: the operators' modules (group norm, upsampling,
#                topk, sort, scatter, ...) compiled for CUDA and run against eager
#   llm          test/llm_test.py --device cuda: the decoders' whole-sequence forward and
#                static-cache decode step (LLM_FAMILIES, default all four) against the modules
#   attention-bf16, attention-fp16
#                scripts/cuda_attention_check.py --half: the half-precision attention kernel on
#                its cases against torch's SDPA in float64
#   bench-bf16, bench-fp16
#                the bench with --precision bf16 / fp16 against eager and torch.compile under
#                torch.autocast, at the small sizes and at serving sizes (CNNs at batch 32,
#                transformers at 16x128)
# NO_INDUCTOR=1 leaves torch.compile out of the benches (eager and ptc only).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ptc=$(readlink -f "${1:?usage: cuda_accept.sh PTC_BINARY FIXTURE_LIBS WORK_DIR [STEP...]}")
fixtures=${2:?fixture libraries}
work=${3:?work folder}
shift 3
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fixtures memcheck small bandwidth suite bench bench-exact)
SUITE="resnet18 resnet50 mobilenet_v2 vit_b_16 vit_small_patch16_224 mobilenet_v3_small squeezenet1_1 shufflenet_v2_x1_0
       densenet121 convnext_tiny resnet50d efficientnet_b0 bert gpt2 t5_encoder t5 distilbert"
SIX="mobilenet_v2 resnet18 resnet50 bert gpt2 vit_small_patch16_224"
SIZES="mobilenet_v2:8 resnet18:8 resnet50:32 bert:8,128 gpt2:4,128 vit_small_patch16_224:8"
SERVING="mobilenet_v2:32 resnet18:32 resnet50:32 bert:16,128 gpt2:16,128 vit_small_patch16_224:32 efficientnet_b0:32
         convnext_tiny:32 densenet121:32 distilbert:16,128"
inductor=()
[ "${NO_INDUCTOR:-0}" = 1 ] && inductor=(--no-inductor)
# cuDNN for the libraries: torch's pip package where the system has none.
mkdir -p "$work"
. scripts/cuda_env.sh "$work"
status=0
run() {  # run STEP-NAME COMMAND...: time it, remember a failure, go on
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" || { status=1; echo "== $name FAILED"; }
  echo "== $name: $((SECONDS - t0)) s"
}
# bench PRECISION DIR: compile the six (and their --cuda-graphs builds), check, bench
bench() {
  local flag=() sizes=$SIZES models=$SIX
  case $1 in
    exact) ;;
    bf16 | fp16) flag=(--autocast "$1"); sizes="$SIZES $SERVING"; models="$SIX efficientnet_b0 convnext_tiny densenet121 distilbert" ;;
    *) flag=("--$1") ;;
  esac
  mkdir -p "$2"
  # the suite step's exports, where it ran
  if [ "$2" != "$work/exact" ] && [ -d "$work/exact/models" ] && [ ! -e "$2/models" ]; then ln -s "$(readlink -f "$work/exact/models")" "$2/models"; fi
  PRECISION=$1 GRAPHS=1 bash scripts/cuda_real_check.sh "$ptc" "$2" $models &&
    python3 scripts/cuda_check.py --libs "$2/libs" --models-dir "$2/models" "${flag[@]}" "${inductor[@]}" --no-check --sizes $sizes
}
for step in "${steps[@]}"; do
  case $step in
    fixtures) run fixtures python3 scripts/cuda_check.py --libs "$fixtures" ;;
    memcheck) run memcheck compute-sanitizer --tool memcheck --leak-check no --error-exitcode 1 python3 scripts/cuda_check.py --libs "$fixtures" --ref-only ;;
    small) run small python3 scripts/cuda_check.py --libs "$fixtures" --bench --no-check "${inductor[@]}" ;;
    bandwidth) run bandwidth python3 scripts/cuda_bandwidth.py --ptc-binary "$ptc" --work "$work/bandwidth" ;;
    suite) run suite bash scripts/cuda_real_check.sh "$ptc" "$work/exact" $SUITE ;;
    bench) run "bench (torch's default precision)" bench tf32-conv "$work/default" ;;
    bench-exact) run "bench (exact fp32)" bench exact "$work/exact" ;;
    suite-bf16 | suite-fp16) run "$step" env PRECISION="${step#suite-}" bash scripts/cuda_real_check.sh "$ptc" "$work/${step#suite-}" $SUITE ;;
    bench-bf16 | bench-fp16) run "bench (${step#bench-})" bench "${step#bench-}" "$work/${step#bench-}" ;;
    ops) run ops python3 test/ops_test.py --device cuda --ptc-binary "$ptc" --keep "$work/ops" ;;
    llm) run llm python3 test/llm_test.py --device cuda --ptc-binary "$ptc" --families "${LLM_FAMILIES:-llama,mistral,qwen2,phi}" --steps 8 \
           --work "$work/llm" ;;
    attention-bf16 | attention-fp16)
      run "$step" python3 scripts/cuda_attention_check.py --build "$work/$step" --check "$work/$step" --half "${step#attention-}" --ptc-binary "$ptc" --jobs 8 ;;
    *) echo "unknown step '$step' (fixtures memcheck small bandwidth suite bench bench-exact suite-bf16 suite-fp16 bench-bf16 bench-fp16" \
            "ops llm attention-bf16 attention-fp16)" >&2; exit 2 ;;
  esac
done
exit $status
