# Third-party dependencies, all from Debian (scripts/install-deps.sh). Non-CUDA libraries are linked statically
# (or used header-only) so that the `primus` binary built here needs nothing on the GPU machine but CUDA's own
# libraries.

find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)

function(primus_require_static var name)
  find_library(${var} NAMES ${name} PATHS /usr/lib/x86_64-linux-gnu /usr/lib NO_DEFAULT_PATH)
  if(NOT ${var})
    message(FATAL_ERROR "primus: ${name} not found; run scripts/install-deps.sh")
  endif()
endfunction()

primus_require_static(YAMLCPP_STATIC libyaml-cpp.a)
primus_require_static(XXHASH_STATIC libxxhash.a)
primus_require_static(OPENBLAS_STATIC libopenblas.a)
primus_require_static(PCRE2_STATIC libpcre2-8.a)

# OpenBLAS's static archive references a few gfortran runtime symbols (from its LAPACK objects).
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgfortran.a OUTPUT_VARIABLE GFORTRAN_STATIC
                OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libquadmath.a OUTPUT_VARIABLE QUADMATH_STATIC
                OUTPUT_STRIP_TRAILING_WHITESPACE)
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libgomp.a OUTPUT_VARIABLE GOMP_STATIC
                OUTPUT_STRIP_TRAILING_WHITESPACE)

foreach(hdr CLI/CLI.hpp nlohmann/json.hpp fmt/format.h yaml-cpp/yaml.h xxhash.h cblas.h pcre2.h)
  find_path(_inc_${hdr} ${hdr} PATHS /usr/include /usr/include/x86_64-linux-gnu/openblas-pthread
            /usr/include/x86_64-linux-gnu)
  if(NOT _inc_${hdr})
    message(FATAL_ERROR "primus: header ${hdr} not found; run scripts/install-deps.sh")
  endif()
endforeach()

add_library(primus_deps INTERFACE)
target_include_directories(primus_deps INTERFACE /usr/include/x86_64-linux-gnu/openblas-pthread)
target_compile_definitions(primus_deps INTERFACE PCRE2_CODE_UNIT_WIDTH=8)
# libgomp is linked statically as well: the GPU machine's image need not carry it.
target_link_libraries(primus_deps INTERFACE
  ${YAMLCPP_STATIC} ${XXHASH_STATIC} ${PCRE2_STATIC}
  -Wl,--start-group ${OPENBLAS_STATIC} ${GFORTRAN_STATIC} ${QUADMATH_STATIC} -Wl,--end-group
  ${GOMP_STATIC} Threads::Threads ${CMAKE_DL_LIBS} m)
