# fusedcoll-perf --csv-file (ctest perf_csv_file): two runs append to one file under one header,
# every row carries the label and the run's settings, and a run of other columns is refused.
#   cmake -DPERF=path/to/fusedcoll-perf -DOUT=path/to/file.csv -P perf_csv_file_test.cmake
file(REMOVE "${OUT}")
foreach(wire IN ITEMS none fp16)
  execute_process(COMMAND "${PERF}" allreduce -b 8K -e 64K -f 8 -n 1 -w 0 -g 3 --compress ${wire}
                          --csv-file "${OUT}" --label smoke
                  RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fusedcoll-perf --compress ${wire} --csv-file failed: ${rc}")
  endif()
endforeach()
file(STRINGS "${OUT}" lines)
list(LENGTH lines n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "${OUT}: expected a header and 4 rows, got ${n} lines:\n${lines}")
endif()
list(GET lines 0 header)
if(NOT header MATCHES "^label,op,backend,clock,preset,ranks,compute_units,compress,scaling,algo,link_gbps,link_us,symmetric,size,count,type,redop,root,time_us,algbw_gbs,busbw_gbs,wire_bytes,wrong,")
  message(FATAL_ERROR "${OUT}: unexpected header ${header}")
endif()
list(GET lines 1 first)
list(GET lines 4 last)
if(NOT first MATCHES "^smoke,allreduce,emu,wall,,3,2,none,auto,direct,0,0,0,8184,2046,float,sum,-1,[0-9.]+,"
   OR NOT last MATCHES "^smoke,allreduce,emu,wall,,3,2,fp16,auto,direct,0,0,0,65532,16383,float,sum,-1,[0-9.]+,[0-9.]+,[0-9.]+,[0-9]+,0,")
  message(FATAL_ERROR "${OUT}: unexpected rows\n${first}\n${last}")
endif()
execute_process(COMMAND "${PERF}" embedding -b 16K -e 16K -n 1 -w 0 -g 3 --csv-file "${OUT}"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "holds other columns")
  message(FATAL_ERROR "a fused run into a collective file was not refused (${rc}): ${err}")
endif()
