# The exec: door (docs/engine-protocol.md): its engines are Python programs
# (examples/python-engine, tests/doors/exec), so test_exec needs python3. The interpreter is
# resolved past wrappers such as pyenv's shims, whose own start-up adds tens of
# milliseconds to every engine process (docs/BENCHMARKS.md, "Engine protocol").
find_program(KVFUZZ_PYTHON3 python3)
if(NOT KVFUZZ_PYTHON3)
  # Not a silent skip: the suite fails by name until python3 is there (scripts/setup.sh).
  message(WARNING "python3 not found: test_exec (the exec: engine protocol) cannot run")
  add_test(NAME exec_door_needs_python3
           COMMAND sh -c "echo 'python3 not found: install it (scripts/setup.sh) to test the exec: door'; exit 1")
  return()
endif()
execute_process(COMMAND ${KVFUZZ_PYTHON3} -c "import sys; print(sys.executable)"
                OUTPUT_VARIABLE KVFUZZ_PYTHON3_REAL OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE KVFUZZ_PYTHON3_STATUS)
if(KVFUZZ_PYTHON3_STATUS EQUAL 0 AND EXISTS "${KVFUZZ_PYTHON3_REAL}")
  set(KVFUZZ_PYTHON3 "${KVFUZZ_PYTHON3_REAL}")
endif()

kvfuzz_add_test(test_exec kvfuzz_doors kvfuzz_judge kvfuzz_generate kvfuzz_corpus kvfuzz_engines)
if(TARGET test_exec)
  target_compile_definitions(test_exec PRIVATE KVFUZZ_PYTHON="${KVFUZZ_PYTHON3}")
  kvfuzz_test_runs_cli(test_exec)
endif()
