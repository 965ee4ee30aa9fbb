# The layering of core/, checked at configure time beside the Qt-free checks: a folder may include
# only itself and the folders listed before it (the models/<family> folders count one by one, so a
# family may use another that is listed earlier: SD's pipeline holds a CLIP encoder and a VAE).
# A new folder must be added here, in its place, or configuring fails.
set(TESSERA_CORE_LAYERS base run text formats graph models/unet models/clip models/t5 models/vae models/upscale models/sd models/lora models/controlnet models/flux sampling
    cpu)

# The layer of a path relative to core/ ("models/sd/SdModel.h" -> "models/sd"), or "" when none.
function(tessera_core_layer path out)
  set(found "")
  foreach(layer IN LISTS TESSERA_CORE_LAYERS)
    string(LENGTH "${layer}/" n)
    string(SUBSTRING "${path}" 0 ${n} head)
    if(head STREQUAL "${layer}/")
      set(found "${layer}")
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

function(tessera_check_core_layering core_dir)
  file(GLOB_RECURSE files RELATIVE ${core_dir} ${core_dir}/*.h ${core_dir}/*.cpp ${core_dir}/*.inc)
  set(problems "")
  foreach(file IN LISTS files)
    tessera_core_layer("${file}" from)
    if(from STREQUAL "")
      string(APPEND problems "\n  core/${file}: in no layer (cmake/Layering.cmake lists them)")
      continue()
    endif()
    list(FIND TESSERA_CORE_LAYERS "${from}" from_rank)
    file(STRINGS ${core_dir}/${file} includes REGEX "^#include \"core/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^#include \"core/([^\"]+)\".*" "\\1" target "${line}")
      tessera_core_layer("${target}" to)
      list(FIND TESSERA_CORE_LAYERS "${to}" to_rank)
      if(to STREQUAL "" OR to_rank GREATER from_rank)
        string(APPEND problems "\n  core/${file} (${from}) includes core/${target} (${to}), a layer above it")
      endif()
    endforeach()
  endforeach()
  if(problems)
    message(FATAL_ERROR "core/ layering (cmake/Layering.cmake: ${TESSERA_CORE_LAYERS}):${problems}")
  endif()
endfunction()
