# How fusedcoll's GPU sources are compiled (docs/gpu.md), for gpu/, tests/gpu/ and bench/: the same
# files by nvcc (FUSEDCOLL_ENABLE_CUDA) or hipcc (FUSEDCOLL_ENABLE_HIP).
#   fusedcoll_gpu_sources(out src...)  what to put in add_library/add_executable for device sources
#   fusedcoll_gpu_target(target)       the vendor's flags and runtime on a target that has them
#   fusedcoll_host_warnings(target)    the project's warnings on its host-compiled (CXX) sources
#   fusedcoll_add_kernel(target HEADER h KERNELS K... [INCLUDES dir...])
#                                      users' kernels registered with the GPU backend for target
#
# Floating point: the kernels follow ref/'s per-element orders, so contraction into FMA is off
# (nvcc -fmad=false, hipcc -ffp-contract=off) as in the CPU build (docs/semantics.md); the kernels
# also spell every product and sum with the _rn intrinsics (gpu/portability.hpp).

function(fusedcoll_host_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-sign-compare>)
  if(FUSEDCOLL_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

if(FUSEDCOLL_ENABLE_CUDA)
  # ---------------------------------------------------------------------------------- NVIDIA
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 does not know that nvcc 12+ supports C++20 (fusedcoll_core's cxx_std_20 reaches the
  # CUDA targets as CUDA20): teach it the flag.
  if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
  # Source properties are per directory: call this where the target that lists them is made.
  function(fusedcoll_gpu_sources out_var)
    set_source_files_properties(${ARGN} PROPERTIES LANGUAGE CUDA)
    set(${out_var} ${ARGN} PARENT_SCOPE)
  endfunction()
  function(fusedcoll_gpu_target target)
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${FUSEDCOLL_CUDA_ARCHITECTURES}")
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-fmad=false -Xcompiler=-ffp-contract=off,-Wall,-Wextra>)
    target_link_libraries(${target} PRIVATE CUDA::cudart)
  endfunction()
  set(FUSEDCOLL_GPU_RUNTIME CUDA::cudart)
else()
  # ------------------------------------------------------------------------------------- AMD
  # hipcc drives the compile through custom commands: CMake 3.25's HIP language wants a ROCm
  # layout (/usr/lib/cmake/hip-lang) that Debian's packages do not have. Objects are linked by the
  # host compiler against libamdhip64 (no relocatable device code, so no device link step).
  find_program(FUSEDCOLL_HIPCC hipcc REQUIRED)
  find_library(FUSEDCOLL_AMDHIP64 amdhip64 REQUIRED)
  file(GLOB FC_GPU_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/gpu/*.hpp
       ${PROJECT_SOURCE_DIR}/include/fusedcoll/*.hpp ${PROJECT_SOURCE_DIR}/include/fusedcoll/detail/*.hpp)
  set(FC_HIP_ARCH_FLAGS "")
  foreach(arch IN LISTS FUSEDCOLL_HIP_ARCHITECTURES)
    list(APPEND FC_HIP_ARCH_FLAGS "--offload-arch=${arch}")
  endforeach()
  set(FC_HIP_FLAGS -x hip -std=c++20 -O2 -fPIC -ffp-contract=off -Wall -Wextra -Wno-unused-parameter)
  if(FUSEDCOLL_WERROR)
    list(APPEND FC_HIP_FLAGS -Werror)
  endif()
  # Compiles the sources with hipcc; the object files go into `out_var`. FC_GTEST_INCLUDES, when
  # the caller has it, reaches the test probes.
  function(fusedcoll_gpu_sources out_var)
    set(objs "")
    set(incs -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_BINARY_DIR}/include -I${PROJECT_SOURCE_DIR})
    # Process mode's sources include <mpi.h> (gpu/process.hpp).
    if(FUSEDCOLL_GPU_PROCESS)
      list(APPEND incs -DFC_GPU_PROCESS=1)
      foreach(dir IN LISTS MPI_CXX_INCLUDE_DIRS)
        list(APPEND incs -I${dir})
      endforeach()
      foreach(def IN LISTS MPI_CXX_COMPILE_DEFINITIONS)
        list(APPEND incs -D${def})
      endforeach()
    endif()
    foreach(dir IN LISTS FC_GPU_EXTRA_INCLUDES)  # fusedcoll_add_kernel's INCLUDES
      list(APPEND incs -I${dir})
    endforeach()
    foreach(dir IN LISTS FC_GTEST_INCLUDES)
      if(NOT dir MATCHES "^\\$<INSTALL_INTERFACE")
        string(REGEX REPLACE "^\\$<BUILD_INTERFACE:(.*)>$" "\\1" dir "${dir}")
        list(APPEND incs -I${dir})
      endif()
    endforeach()
    foreach(src IN LISTS ARGN)
      get_filename_component(abs "${src}" ABSOLUTE)
      get_filename_component(name "${src}" NAME_WE)
      set(obj "${CMAKE_CURRENT_BINARY_DIR}/hipcc/${name}.o")
      add_custom_command(OUTPUT "${obj}"
        COMMAND ${CMAKE_COMMAND} -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/hipcc"
        COMMAND ${FUSEDCOLL_HIPCC} ${FC_HIP_FLAGS} ${FC_HIP_ARCH_FLAGS} ${incs} -c "${abs}" -o "${obj}"
        DEPENDS "${abs}" ${FC_GPU_HEADERS} ${FC_GPU_EXTRA_DEPENDS}
        COMMENT "hipcc ${name}.cpp (${FUSEDCOLL_HIP_ARCHITECTURES})"
        VERBATIM)
      list(APPEND objs "${obj}")
    endforeach()
    set(${out_var} ${objs} PARENT_SCOPE)
  endfunction()
  function(fusedcoll_gpu_target target)
    set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  endfunction()
  set(FUSEDCOLL_GPU_RUNTIME ${FUSEDCOLL_AMDHIP64})
endif()

# fusedcoll_add_kernel(<target> HEADER <header> KERNELS <type>... [INCLUDES <dir>...])
# Registers users' kernels with the GPU backend (docs/kernels.md, "On the GPU"): writes a
# translation unit that includes <header> (spelled as in an #include, found through INCLUDES) and
# registers each <type> (a kernel written against fusedcoll/kernel.hpp) with FUSEDCOLL_GPU_KERNEL,
# compiles it with nvcc or hipcc, adds it to <target> and links fusedcoll_gpu. Call it in the
# directory that makes <target>, an executable or a shared library (a static library would drop
# the registration unless linked whole). fusedcoll::launch<type> then runs on a gpu::World.
function(fusedcoll_add_kernel target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "HEADER" "KERNELS;INCLUDES")
  if(NOT arg_HEADER OR NOT arg_KERNELS OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fusedcoll_add_kernel(${target} HEADER <header> KERNELS <type>... "
                        "[INCLUDES <dir>...]): got '${ARGN}'")
  endif()
  get_property(units_before TARGET ${target} PROPERTY FUSEDCOLL_KERNEL_UNITS)
  if(NOT units_before)
    set(units_before 0)
  endif()
  math(EXPR next "${units_before} + 1")
  set_property(TARGET ${target} PROPERTY FUSEDCOLL_KERNEL_UNITS ${next})
  set(src "${CMAKE_CURRENT_BINARY_DIR}/fusedcoll_kernels/${target}_kernels_${units_before}.cpp")
  set(text "// Written by fusedcoll_add_kernel (cmake/FusedcollGpu.cmake) for ${target}: the GPU\n")
  string(APPEND text "// instantiations of kernels declared in ${arg_HEADER}.\n")
  string(APPEND text "#include \"${arg_HEADER}\"\n#include \"gpu/kernel_register.hpp\"\n\n")
  foreach(k IN LISTS arg_KERNELS)
    string(APPEND text "FUSEDCOLL_GPU_KERNEL(${k});\n")
  endforeach()
  file(CONFIGURE OUTPUT "${src}" CONTENT "${text}" @ONLY)  # rewritten only when it changes
  set(FC_GPU_EXTRA_INCLUDES ${arg_INCLUDES})
  set(FC_GPU_EXTRA_DEPENDS "")
  foreach(dir IN LISTS arg_INCLUDES)
    if(EXISTS "${dir}/${arg_HEADER}")
      list(APPEND FC_GPU_EXTRA_DEPENDS "${dir}/${arg_HEADER}")
    endif()
  endforeach()
  fusedcoll_gpu_sources(units "${src}")
  target_sources(${target} PRIVATE ${units})
  target_include_directories(${target} PRIVATE ${arg_INCLUDES})
  fusedcoll_private_headers(${target})  # gpu/kernel_register.hpp
  get_property(done TARGET ${target} PROPERTY FUSEDCOLL_GPU_TARGET)
  if(NOT done)
    fusedcoll_gpu_target(${target})
    set_property(TARGET ${target} PROPERTY FUSEDCOLL_GPU_TARGET ON)
  endif()
  target_link_libraries(${target} PRIVATE fusedcoll_gpu)
endfunction()
