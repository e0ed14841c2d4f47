# Warnings and sanitizers shared by every fusedcoll target.

function(fusedcoll_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wno-sign-compare)
  if(FUSEDCOLL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# FUSEDCOLL_SANITIZE applies to the whole build (library, tests, tools) so that instrumented and
# uninstrumented code never mix.
if(FUSEDCOLL_SANITIZE)
  string(REPLACE "," ";" _fc_sanitizers "${FUSEDCOLL_SANITIZE}")
  foreach(_s IN LISTS _fc_sanitizers)
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "FUSEDCOLL_SANITIZE: unknown sanitizer '${_s}' "
                          "(expected address, undefined or thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _fc_sanitizers AND "address" IN_LIST _fc_sanitizers)
    message(FATAL_ERROR "FUSEDCOLL_SANITIZE: thread and address cannot be combined")
  endif()
  set(_fc_flags "-fsanitize=${FUSEDCOLL_SANITIZE}" -fno-omit-frame-pointer -g)
  if("undefined" IN_LIST _fc_sanitizers)
    list(APPEND _fc_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_fc_flags})
  add_link_options("-fsanitize=${FUSEDCOLL_SANITIZE}")
  message(STATUS "fusedcoll: sanitizers ${FUSEDCOLL_SANITIZE}")
endif()

# A target that includes its own folder's private headers, spelled from the project root
# ("emu/state.hpp"). PRIVATE, so nothing that links it sees them (docs/design.md, "Layout").
function(fusedcoll_private_headers target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
endfunction()
