# CTest driver for the install test (label `install`):
#   1. cmake --install FC_BUILD_DIR into a fresh prefix under FC_WORK_DIR;
#   2. configure tests/consumer against that prefix only (CMAKE_PREFIX_PATH), with the same
#      compiler, build type and sanitizer flags as the main build;
#   3. build it and run it. Any nonzero step fails the test with its output.
#
# Inputs: FC_BUILD_DIR, FC_SOURCE_DIR (this directory), FC_WORK_DIR, and optionally FC_CONFIG,
# FC_CXX_COMPILER, FC_GENERATOR, FC_SANITIZE.

foreach(var FC_BUILD_DIR FC_SOURCE_DIR FC_WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT FC_CONFIG)
  set(FC_CONFIG Release)
endif()

set(prefix "${FC_WORK_DIR}/prefix")
set(build "${FC_WORK_DIR}/build")
file(REMOVE_RECURSE "${FC_WORK_DIR}")
file(MAKE_DIRECTORY "${FC_WORK_DIR}")

function(run_step name)
  execute_process(COMMAND ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${rc})\n"
                        "command: ${ARGN}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
  endif()
  message(STATUS "install_consumer: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step(install "${CMAKE_COMMAND}" --install "${FC_BUILD_DIR}" --prefix "${prefix}"
         --config "${FC_CONFIG}")

if(NOT EXISTS "${prefix}/include/fusedcoll/version.hpp")
  message(FATAL_ERROR "install_consumer: the install did not put version.hpp in ${prefix}")
endif()

set(configure_args -S "${FC_SOURCE_DIR}" -B "${build}"
    "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCMAKE_BUILD_TYPE=${FC_CONFIG}"
    # Only the scratch prefix may satisfy find_package: never the build tree or a system copy.
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(FC_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${FC_CXX_COMPILER}")
endif()
if(FC_GENERATOR)
  list(APPEND configure_args -G "${FC_GENERATOR}")
endif()
if(FC_SANITIZE)
  # An instrumented static library needs the sanitizer runtime at link time.
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${FC_SANITIZE}"
       "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${FC_SANITIZE}")
endif()

run_step(configure "${CMAKE_COMMAND}" ${configure_args})
# Make sure the package came from the scratch prefix.
file(STRINGS "${build}/CMakeCache.txt" found_dir REGEX "^fusedcoll_DIR:")
string(FIND "${found_dir}" "${prefix}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "install_consumer: fusedcoll was not found in ${prefix}: ${found_dir}")
endif()

run_step(build "${CMAKE_COMMAND}" --build "${build}" --config "${FC_CONFIG}")

# Single-config generators put the executable at the top of the build tree, multi-config ones in
# a per-configuration folder.
set(exe "${build}/consumer")
if(NOT EXISTS "${exe}")
  set(exe "${build}/${FC_CONFIG}/consumer")
endif()
run_step(run "${exe}")
message(STATUS "${step_output}")
