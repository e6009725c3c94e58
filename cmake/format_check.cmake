# Fails when any C++/CUDA source under src/ or tests/ differs from its clang-format output. One clang-format
# process checks every file (one process per file cost ~75 s of CI's two cores in process start-ups alone);
# the files that differ are read back from its diagnostics.
file(GLOB_RECURSE sources ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh
     ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.h)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror ${sources} RESULT_VARIABLE rc OUTPUT_QUIET
                ERROR_VARIABLE diagnostics)
if(NOT rc EQUAL 0)
  # "<file>:<line>:<col>: error: code should be clang-formatted [-Wclang-format-violations]"
  string(REGEX MATCHALL "[^\n]+:[0-9]+:[0-9]+: error: code should be clang-formatted" hits "${diagnostics}")
  set(bad "")
  foreach(h ${hits})
    string(REGEX REPLACE ":[0-9]+:[0-9]+: error: code should be clang-formatted$" "" f "${h}")
    list(APPEND bad ${f})
  endforeach()
  list(REMOVE_DUPLICATES bad)
  if(NOT bad)  # clang-format failed for another reason (a file it could not read, a bad .clang-format)
    message(FATAL_ERROR "clang-format exited ${rc}:\n${diagnostics}")
  endif()
  string(REPLACE ";" "\n  " bad_lines "${bad}")
  message(FATAL_ERROR "clang-format differs for:\n  ${bad_lines}\nrun: clang-format -i <files>")
endif()
