# ptc_add_model(<target> MODEL <model.pt2|model.pt>
#               [DEVICE cpu|cuda] [TRAIN] [WEIGHTS embedded|external]
#               [DYNAMIC <sym>=<lo>..<hi> ...] [INPUT_SHAPES <shape> ...]
#               [CPU_ARCH <march>] [CUDA_ARCH <sm_XX>] [CUDA_GRAPHS] [OPTIONS <ptc compile flags> ...])
#
# Compiles the model with `ptc compile` at build time into <binary dir>/ptc/<target>/<target>.so
# and its header <target>.h, and defines <target>: an imported shared library to link against,
# with that folder on its include path (#include "<target>.h"). The compile re-runs only when the
# model file, ptc itself or the arguments change (the arguments are kept in a file that is
# rewritten only when they differ). DYNAMIC and INPUT_SHAPES are for TorchScript models (a .pt2
# carries its own dynamic dimensions). TRAIN asks for a training library (`--train`).
include_guard(GLOBAL)

function(ptc_add_model target)
  cmake_parse_arguments(PARSE_ARGV 1 PTC "TRAIN;CUDA_GRAPHS" "MODEL;DEVICE;WEIGHTS;CPU_ARCH;CUDA_ARCH"
                        "DYNAMIC;INPUT_SHAPES;OPTIONS")
  if(PTC_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ptc_add_model(${target}): unknown arguments ${PTC_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT PTC_MODEL)
    message(FATAL_ERROR "ptc_add_model(${target}): MODEL <file> is required")
  endif()
  get_filename_component(model "${PTC_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${model}")
    message(FATAL_ERROR "ptc_add_model(${target}): the model ${model} does not exist")
  endif()
  if(NOT PTC_DEVICE)
    set(PTC_DEVICE cpu)
  endif()
  if(NOT PTC_DEVICE MATCHES "^(cpu|cuda)$")
    message(FATAL_ERROR "ptc_add_model(${target}): DEVICE ${PTC_DEVICE}: expected cpu or cuda")
  endif()

  set(dir "${CMAKE_CURRENT_BINARY_DIR}/ptc/${target}")
  set(lib "${dir}/${target}.so")
  set(header "${dir}/${target}.h")
  set(args compile "${model}" -o "${lib}" --device ${PTC_DEVICE})
  if(PTC_TRAIN)
    # Only a ptc that compiles training libraries has --train: say so now, not at build time.
    get_target_property(ptc_exe ptc::ptc LOCATION)
    execute_process(COMMAND "${ptc_exe}" compile --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
    if(NOT help MATCHES "--train")
      message(FATAL_ERROR "ptc_add_model(${target}): TRAIN needs a ptc that compiles training libraries (--train); ${ptc_exe} has no --train")
    endif()
    list(APPEND args --train)
  endif()
  if(PTC_CUDA_GRAPHS)
    list(APPEND args --cuda-graphs)
  endif()
  if(PTC_WEIGHTS)
    list(APPEND args --weights ${PTC_WEIGHTS})
  endif()
  if(PTC_CPU_ARCH)
    list(APPEND args --cpu-arch ${PTC_CPU_ARCH})
  endif()
  if(PTC_CUDA_ARCH)
    list(APPEND args --cuda-arch ${PTC_CUDA_ARCH})
  endif()
  foreach(s IN LISTS PTC_DYNAMIC)
    list(APPEND args --symbol ${s})
  endforeach()
  foreach(s IN LISTS PTC_INPUT_SHAPES)
    list(APPEND args --input-shape ${s})
  endforeach()
  foreach(o IN ITEMS -o --output --weights --package --device)
    if(o IN_LIST PTC_OPTIONS)
      message(FATAL_ERROR "ptc_add_model(${target}): pass ${o} through its own argument (DEVICE, WEIGHTS), not OPTIONS: "
                          "the outputs it declares depend on it")
    endif()
  endforeach()
  list(APPEND args ${PTC_OPTIONS})
  set(outputs "${lib}" "${header}")
  if(PTC_WEIGHTS STREQUAL "external")
    list(APPEND outputs "${dir}/${target}.weights")
  endif()

  # Rewritten only when the arguments change, so that the compile re-runs exactly then.
  string(REPLACE ";" "\n" flags_text "${args}")
  file(CONFIGURE OUTPUT "${dir}/ptc_args.txt" CONTENT "${flags_text}\n" @ONLY)

  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ptc::ptc ${args}
    DEPENDS "${model}" "${dir}/ptc_args.txt" "$<TARGET_FILE:ptc::ptc>"
    COMMENT "ptc: compiling ${PTC_MODEL} for ${PTC_DEVICE}"
    VERBATIM)
  add_custom_target(${target}_ptc DEPENDS ${outputs})

  add_library(${target} SHARED IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${lib}"
    IMPORTED_SONAME "${target}.so"
    INTERFACE_INCLUDE_DIRECTORIES "${dir}")
  add_dependencies(${target} ${target}_ptc)
endfunction()
