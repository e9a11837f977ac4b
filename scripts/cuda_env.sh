# Sourced by the GPU-machine scripts (cuda_real_check.sh, cuda_accept.sh, build_cuda_fixtures.sh):
# where the system has no cuDNN, builds and runs use the one torch's pip packages carry. Those ship
# libcudnn.so.9 but no libcudnn.so for the linker, hence a link in $1 (a scratch folder).
#   . scripts/cuda_env.sh SCRATCH_DIR
if [ ! -e /usr/local/cuda/include/cudnn.h ]; then
  _ptc_dnn=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null || true)
  if [ -n "$_ptc_dnn" ]; then
    mkdir -p "$1/cudnn-link" && ln -sf "$_ptc_dnn/lib/libcudnn.so.9" "$1/cudnn-link/libcudnn.so"
    export CPATH="$_ptc_dnn/include${CPATH:+:$CPATH}" LIBRARY_PATH="$1/cudnn-link:$_ptc_dnn/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$_ptc_dnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  unset _ptc_dnn
fi
