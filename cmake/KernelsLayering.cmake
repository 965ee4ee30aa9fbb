# The layering of kernels/, checked at configure time (kernels/CMakeLists.txt), as
# cmake/Layering.cmake checks core/: a folder may include only itself, the folders listed before
# it, and core/ (never app/ or ui/). kernels/README.md says what each folder holds.
#   device   the check macro, RAII device resources, dtypes, graph capture
#   ops      one operation per .cu/.cuh pair (as ggml-cuda): the .cuh declares the host launcher,
#            the kernels stay in the .cu's anonymous namespace (no __global__ in a header); the
#            headers listed in TESSERA_KERNELS_OPS_SHARED hold the types several ops share
#   backend  lowering of a graph onto cuDNN/cuBLAS and the ops, memory plan, tuning, execution
#   engine   the tile device, the graph cache, the CUDA engine
# A new folder must be added here, in its place, or configuring fails.
# As a script: cmake -DKERNELS_DIR=<source>/kernels -P cmake/KernelsLayering.cmake
set(TESSERA_KERNELS_LAYERS device ops backend engine)
set(TESSERA_KERNELS_OPS_SHARED TiledCanvas.cuh)

function(tessera_check_kernels_layering kernels_dir)
  file(GLOB_RECURSE files RELATIVE ${kernels_dir} ${kernels_dir}/*.h ${kernels_dir}/*.cpp ${kernels_dir}/*.cu
       ${kernels_dir}/*.cuh)
  set(problems "")
  foreach(file IN LISTS files)
    string(REGEX MATCH "^[^/]+" from "${file}")
    list(FIND TESSERA_KERNELS_LAYERS "${from}" from_rank)
    if(from_rank LESS 0 OR NOT file MATCHES "/")
      string(APPEND problems "\n  kernels/${file}: in no layer")
      continue()
    endif()
    file(STRINGS ${kernels_dir}/${file} includes REGEX "^#include \"(kernels|app|ui)/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" target "${line}")
      if(target MATCHES "^(app|ui)/")
        string(APPEND problems "\n  kernels/${file} includes ${target}: kernels/ uses core/ only")
        continue()
      endif()
      string(REGEX REPLACE "^kernels/([^/]+)/.*" "\\1" to "${target}")
      list(FIND TESSERA_KERNELS_LAYERS "${to}" to_rank)
      if(to_rank LESS 0 OR to_rank GREATER from_rank)
        string(APPEND problems "\n  kernels/${file} (${from}) includes ${target} (${to}), a layer above it")
      endif()
    endforeach()
    if(file MATCHES "^ops/.*\\.cuh$")
      file(STRINGS ${kernels_dir}/${file} kernels REGEX "__global__")
      if(kernels)
        string(APPEND problems "\n  kernels/${file}: a __global__ kernel in a header (kernels stay in their .cu)")
      endif()
      get_filename_component(name "${file}" NAME)
      string(REGEX REPLACE "\\.cuh$" ".cu" source "${file}")
      list(FIND TESSERA_KERNELS_OPS_SHARED "${name}" shared)
      if(shared LESS 0 AND NOT EXISTS ${kernels_dir}/${source})
        string(APPEND problems "\n  kernels/${file}: no ${source} (one op per .cu/.cuh pair; shared types are listed)")
      endif()
    elseif(file MATCHES "^ops/.*\\.cu$" AND NOT EXISTS ${kernels_dir}/${file}h)
      string(APPEND problems "\n  kernels/${file}: no ${file}h declaring its launcher")
    endif()
  endforeach()
  if(problems)
    message(FATAL_ERROR "kernels/ layering (cmake/KernelsLayering.cmake: ${TESSERA_KERNELS_LAYERS}):${problems}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED KERNELS_DIR)
  tessera_check_kernels_layering(${KERNELS_DIR})
  message(STATUS "kernels/ layering holds: ${TESSERA_KERNELS_LAYERS}")
endif()
