# Tests compiler/codegen_revision.cmake on a scratch tree (ctest
# unit.compiler.codegen_revision):
#   cmake -DSCRIPT=<codegen_revision.cmake> -DWORK=<scratch dir> -P codegen_revision_test.cmake
# A change to a .c or .h in the folder or in vmfb/ changes the revision, a change
# elsewhere does not, the same tree gives the same revision, and a run that finds
# the revision unchanged leaves the header untouched.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/vmfb")
file(WRITE "${WORK}/a.c" "int a;\n")
file(WRITE "${WORK}/a.h" "int a(void);\n")
file(WRITE "${WORK}/vmfb/w.c" "int w;\n")
file(WRITE "${WORK}/notes.txt" "not a source\n")
set(out "${WORK}/out/codegen_revision.h")

function(revision var)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${WORK} -DOUT=${out} -P ${SCRIPT} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "codegen_revision.cmake failed: ${rc}")
  endif()
  file(READ "${out}" text)
  if(NOT text MATCHES "#define KILN_CODEGEN_REVISION \"([0-9a-f]+)\"")
    message(FATAL_ERROR "no revision in: ${text}")
  endif()
  string(LENGTH "${CMAKE_MATCH_1}" n)
  if(NOT n EQUAL 12)
    message(FATAL_ERROR "revision ${CMAKE_MATCH_1} is not 12 hex digits")
  endif()
  set(${var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# expect(<message> <a> EQUAL|DIFFERENT <b>)
function(expect what a relation b)
  if(relation STREQUAL "EQUAL" AND NOT a STREQUAL b)
    message(FATAL_ERROR "${what}")
  elseif(relation STREQUAL "DIFFERENT" AND a STREQUAL b)
    message(FATAL_ERROR "${what}")
  endif()
endfunction()

revision(r0)
file(TIMESTAMP "${out}" t0 "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
revision(r1)
file(TIMESTAMP "${out}" t1 "%s")
expect("the same tree gave ${r0}, then ${r1}" ${r0} EQUAL ${r1})
expect("an unchanged revision rewrote the header" ${t0} EQUAL ${t1})

file(WRITE "${WORK}/notes.txt" "changed, still not a source\n")
revision(r2)
expect("a file that is no source changed the revision" ${r2} EQUAL ${r0})

file(APPEND "${WORK}/a.c" "int b;\n")
revision(r3)
expect("a change to a.c left the revision at ${r3}" ${r3} DIFFERENT ${r0})

file(APPEND "${WORK}/vmfb/w.c" "int v;\n")
revision(r4)
expect("a change to vmfb/w.c left the revision at ${r4}" ${r4} DIFFERENT ${r3})

file(RENAME "${WORK}/a.h" "${WORK}/b.h")
revision(r5)
expect("renaming a header left the revision at ${r5}" ${r5} DIFFERENT ${r4})
message(STATUS "codegen revisions: ${r0} ${r3} ${r4} ${r5}")
