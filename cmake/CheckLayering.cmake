# `cmake -DCORE_DIR=... -P cmake/CheckLayering.cmake`: the configure-time layering check of core/
# as a script, so CTest can run it on the tree as it is now.
include(${CMAKE_CURRENT_LIST_DIR}/Layering.cmake)
tessera_check_core_layering(${CORE_DIR})
message(STATUS "core/ layering holds: ${TESSERA_CORE_LAYERS}")
