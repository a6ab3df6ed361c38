# The step-code digest (cmake/step_code_digest.cmake): the same files give the
# same digest in any order and any checkout, a changed file or a renamed one
# another, and a rerun that changes nothing leaves the header untouched (so
# nothing recompiles). Run by ctest: cmake -DSCRIPT=… -DWORK=… -P this file.
set(root "${WORK}/src")
set(out "${WORK}/step_code.h")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${root}/model")
file(WRITE "${root}/model/a.cc" "int a() { return 1; }\n")
file(WRITE "${root}/model/b.h" "int b();\n")

function(digest list_text result)
  file(WRITE "${WORK}/list.txt" "${list_text}")
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DOUT=${out} -DLIST=${WORK}/list.txt -P ${SCRIPT}
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    set(${result} "failed: ${err}" PARENT_SCOPE)
    return()
  endif()
  file(READ "${out}" header)
  string(REGEX MATCH "kStepCodeDigest = \"([0-9a-f]+)\"" _ "${header}")
  set(${result} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# expect(WHAT CONDITION...): fails with WHAT unless the condition holds.
macro(expect what)
  if(NOT (${ARGN}))
    message(FATAL_ERROR "step_code_digest: expected ${what}")
  endif()
endmacro()

digest("model/a.cc\nmodel/b.h\n" d1)
string(LENGTH "${d1}" n)
expect("a 64-digit SHA-256 in the header, got '${d1}'" n EQUAL 64)
file(TIMESTAMP "${out}" t1 "%s")
execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 1.1)
digest("model/b.h\nmodel/a.cc\n" d2)
expect("the same digest for the files in another order, got ${d1} and ${d2}" d1 STREQUAL d2)
file(TIMESTAMP "${out}" t2 "%s")
expect("an unchanged digest to leave the header as it was (written at ${t1}, then ${t2})" t1 STREQUAL t2)
file(WRITE "${root}/model/a.cc" "int a() { return 2; }\n")
digest("model/a.cc\nmodel/b.h\n" d3)
expect("another digest after a file changed, got ${d3} twice" NOT d3 STREQUAL d1)
file(RENAME "${root}/model/b.h" "${root}/model/c.h")
digest("model/a.cc\nmodel/c.h\n" d4)
expect("another digest after a file was renamed" NOT d4 STREQUAL d3)
digest("model/a.cc\nmodel/gone.h\n" d5)
expect("a missing file to stop the digest naming it, got '${d5}'" d5 MATCHES "failed:.*model/gone.h")
file(REMOVE_RECURSE "${WORK}")
