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
  if(TESSERA_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(TESSERA_FUZZ)
    # Coverage counters for libFuzzer's guidance in every object of ours; libFuzzer's main is
    # linked into the fuzz targets only (tests/fuzz/CMakeLists.txt).
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined
      -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  endif()
endfunction()
