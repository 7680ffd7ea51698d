# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer project
# against it with find_package(mxmoe). Run by ctest:
#   cmake -DSOURCE_DIR=.. -DBINARY_DIR=.. -DCUDA_ARCHS=.. -DGENERATOR=.. -P run_install_test.cmake
foreach(var SOURCE_DIR BINARY_DIR GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

set(work_dir "${BINARY_DIR}/install_test")
set(prefix "${work_dir}/prefix")
set(consumer_build "${work_dir}/consumer-build")
file(REMOVE_RECURSE "${work_dir}")
file(MAKE_DIRECTORY "${work_dir}")

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${result})\n${out}\n${err}")
  endif()
  message(STATUS "install test: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("cmake --install" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/include/mxmoe/mxmoe.hpp")
  message(FATAL_ERROR "install test: ${prefix}/include/mxmoe/mxmoe.hpp was not installed")
endif()
# The command goes to bin/ (where a build with tools has it), and runs from there: --version, and
# `probe`, which needs no GPU.
file(STRINGS "${BINARY_DIR}/CMakeCache.txt" tools_line REGEX "^MXMOE_BUILD_TOOLS:BOOL=(ON|TRUE|1)$")
if(tools_line)
  if(NOT EXISTS "${prefix}/bin/mxmoe")
    message(FATAL_ERROR "install test: ${prefix}/bin/mxmoe was not installed")
  endif()
  run_step("bin/mxmoe --version" "${prefix}/bin/mxmoe" --version)
  if(NOT step_output MATCHES "^mxmoe [0-9]+\\.[0-9]+\\.[0-9]+")
    message(FATAL_ERROR "install test: bin/mxmoe --version printed '${step_output}'")
  endif()
  run_step("bin/mxmoe probe" "${prefix}/bin/mxmoe" probe)
endif()

# The consumer sees only the prefix (and the system), never the source or build tree.
# The consumer is host C++ only, so CUDA_ARCHS is not needed there. A sanitizer build installs an
# instrumented static library, which links only into a program that links the sanitizer runtimes too.
set(consumer_args -DCMAKE_BUILD_TYPE=Release)
file(STRINGS "${BINARY_DIR}/CMakeCache.txt" sanitize_line REGEX "^MXMOE_SANITIZE:BOOL=(ON|TRUE|1)$")
if(sanitize_line)
  list(APPEND consumer_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()
run_step("configure consumer" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/consumer" -B "${consumer_build}"
         -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}" ${consumer_args})
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")
run_step("run consumer" "${consumer_build}/consumer")
message(STATUS "${step_output}")
