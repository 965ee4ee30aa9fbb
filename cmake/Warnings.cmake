# Warnings for our own targets; -Werror when TESSERA_WERROR (CI turns it on).
function(tessera_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wno-missing-field-initializers
    # GCC 12 reports std::string concatenation at -O2/-O3 as overlapping memcpy (GCC bug 105329).
    $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local -Wno-restrict>>)
  if(TESSERA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
  # TESSERA_FUZZ turns this on too; libFuzzer's coverage counters are added by tests/fuzz to the
  # libraries the fuzz targets exercise.
  if(TESSERA_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()
