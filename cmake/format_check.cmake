# Fails when any C++/CUDA source under src/ or tests/ differs from its clang-format output.
file(GLOB_RECURSE sources ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh
     ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.h)
set(bad "")
foreach(f ${sources})
  execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${f} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad ${f})
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " bad_lines "${bad}")
  message(FATAL_ERROR "clang-format differs for:\n  ${bad_lines}\nrun: clang-format -i <files>")
endif()
