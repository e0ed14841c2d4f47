# CTest driver of torch_install: cmake --install FC_BUILD_DIR into a fresh prefix under
# FC_WORK_DIR, then import fusedcoll from <prefix>/FC_PYTHON_DIR alone (the build tree off the
# path) and run an AllReduce on the emulator and a codec round trip.

foreach(var FC_BUILD_DIR FC_WORK_DIR FC_PYTHON FC_PYTHON_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install.cmake: ${var} is not set")
  endif()
endforeach()
if(NOT FC_CONFIG)
  set(FC_CONFIG Release)
endif()

set(prefix "${FC_WORK_DIR}/prefix")
file(REMOVE_RECURSE "${FC_WORK_DIR}")
file(MAKE_DIRECTORY "${FC_WORK_DIR}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${FC_BUILD_DIR}" --prefix "${prefix}"
                        --config "${FC_CONFIG}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "torch_install: cmake --install failed (${rc})\n${out}\n${err}")
endif()

set(site "${prefix}/${FC_PYTHON_DIR}")
foreach(f fusedcoll/__init__.py fusedcoll/libfusedcoll_torch.so)
  if(NOT EXISTS "${site}/${f}")
    message(FATAL_ERROR "torch_install: the install did not put ${f} in ${site}")
  endif()
endforeach()

set(script [=[
import os, sys, torch
import fusedcoll
site = sys.argv[1]
assert os.path.realpath(fusedcoll.__file__).startswith(os.path.realpath(site)), fusedcoll.__file__
out = fusedcoll.run(lambda r: fusedcoll.all_reduce(torch.ones(3) * (r + 1)), world_size=2,
                    compute_units=1)
assert all(torch.equal(o, torch.full((3,), 3.0)) for o in out), out
x = torch.tensor([0.5, -3.0])
assert torch.equal(fusedcoll.decode(fusedcoll.encode(x, "fp8_e4m3"), "fp8_e4m3"), x)
print("torch_install: fusedcoll imported from", os.path.dirname(fusedcoll.__file__))
]=])
file(WRITE "${FC_WORK_DIR}/check.py" "${script}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${site}" "OMP_NUM_THREADS=1"
                        "${FC_PYTHON}" "${FC_WORK_DIR}/check.py" "${site}"
                WORKING_DIRECTORY "${FC_WORK_DIR}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "torch_install: importing the installed package failed (${rc})\n${out}\n${err}")
endif()
message(STATUS "${out}")
