# MLX (adapters/mlx): mlx-lm's KVCache, its attention mask and its
# scaled_dot_product_attention (mx.fast's, MLX's CPU backend) must pass kvfuzz check on all
# six properties at the default sizes, f32 with windows and sinks, and f16; the same
# library's llama model passes kvfuzz's model checks; a mapping broken on
# purpose (--bug) must be caught on a row.
#
# They need mlx and mlx-lm in the project's .venv (scripts/setup.sh): mlx_venv.
adapter_venv(mlx_venv numpy mlx mlx_lm)
if(KVFUZZ_SANITIZE)
  return()  # kvfuzz's side of the exec door under ASan is the ORT and torch tests'
endif()

# kvfuzz_mlx_test(NAME EXIT CASES SCRIPT ENGINE_FLAGS...): adapter_check of adapters/mlx/SCRIPT;
# importing mlx-lm takes about 3 s beside other tests.
function(kvfuzz_mlx_test name exit cases script)
  adapter_check(${name} ${exit} ${cases} ${PROJECT_SOURCE_DIR}/adapters/mlx/${script} mlx_venv
                ${ARGN} LONG_CASES 300 START_UP_SECONDS 60)
endfunction()

kvfuzz_mlx_test(mlx_sdpa 0 ${KVFUZZ_HONEST_CASES} mlx_sdpa_engine.py FORK)
# f16, declared loosely (score_accumulation f16 holds MLX's q * scale and scores rounded to
# f16; about a third of the rows are then only checked finite: adapters/mlx/README.md), and
# its window control.
kvfuzz_mlx_test(mlx_sdpa_f16 0 ${KVFUZZ_HONEST_CASES} mlx_sdpa_engine.py --dtype f16)
kvfuzz_mlx_test(mlx_sdpa_f16_bug_window 1 60 mlx_sdpa_engine.py --dtype f16 --bug window)
# The negative controls, each caught within 20 cases of seed 1 (adapters/mlx/README.md): a
# window one key wider, the default scale, GPT-J RoPE pairs, each q head given its
# neighbour's sink, kv heads tiled where they should repeat (the GQA mapping).
kvfuzz_mlx_test(mlx_sdpa_bug_window 1 60 mlx_sdpa_engine.py --bug window)
kvfuzz_mlx_test(mlx_sdpa_bug_scale 1 60 mlx_sdpa_engine.py --bug scale)
kvfuzz_mlx_test(mlx_sdpa_bug_rope 1 60 mlx_sdpa_engine.py --bug rope)
kvfuzz_mlx_test(mlx_sdpa_bug_sinks 1 60 mlx_sdpa_engine.py --bug sinks)
kvfuzz_mlx_test(mlx_sdpa_bug_gqa 1 60 mlx_sdpa_engine.py --bug gqa)
# mlx-lm's RotatingKVCache(max_size=W) for windowed layouts (its ring buffer wraps in
# decode; no truncate, which it cannot do once wrapped), every scenario with a window: 100
# cases of seed 2 slid the window 5,444 times and passed; one key wider is caught at case 1.
kvfuzz_mlx_test(mlx_sdpa_rotating 0 ${KVFUZZ_HONEST_CASES} mlx_sdpa_engine.py --cache rotating CHECK --window on)
kvfuzz_mlx_test(mlx_sdpa_rotating_bug_window 1 60 mlx_sdpa_engine.py --cache rotating --bug window CHECK --window on)
# mlx-lm's QuantizedKVCache for layouts in kvfuzz's affine formats (MLX's own quantizer: K and
# V in one format and group, every scenario with one), its attention through
# quantized_matmul in f32; a cache of another bit width than the layout's is caught at case 1.
kvfuzz_mlx_test(mlx_sdpa_quantized 0 ${KVFUZZ_HONEST_CASES} mlx_sdpa_engine.py --cache quantized CHECK --kv-format
                affine2,affine4,affine8)
kvfuzz_mlx_test(mlx_sdpa_quantized_bug_bits 1 60 mlx_sdpa_engine.py --cache quantized --bug bits
                CHECK --kv-format affine2,affine4,affine8)

# The model level (adapters/mlx/mlx_model_engine.py): kvfuzz's tiny transformer as an mlx-lm
# llama model, its cached decode through the model's own __call__ and per-layer KVCaches,
# judged as a whole model (ids in, logits out) against the double full-prefix logits; f32,
# no windows (mlx-lm's llama cannot make every layer slide). The controls: rope_theta
# doubled, llama's own head_dim^-0.5 scale kept; each caught at case 2.
kvfuzz_mlx_test(mlx_model 0 ${KVFUZZ_HONEST_MODEL_CASES} mlx_model_engine.py FORK)
kvfuzz_mlx_test(mlx_model_bug_rope 1 30 mlx_model_engine.py --bug rope)
kvfuzz_mlx_test(mlx_model_bug_scale 1 30 mlx_model_engine.py --bug scale)
# The model with mlx-lm's QuantizedKVCache in every layer, every scenario in one of kvfuzz's
# affine formats (K and V in one format and group), judged with each stored element's error
# in its group as the model tolerance's noise; a cache of another bit width is caught.
kvfuzz_mlx_test(mlx_model_quantized 0 ${KVFUZZ_HONEST_MODEL_CASES} mlx_model_engine.py CHECK --kv-format
                affine2,affine4,affine8)
kvfuzz_mlx_test(mlx_model_quantized_bug_bits 1 30 mlx_model_engine.py --bug bits CHECK
                --kv-format affine2,affine4,affine8)

# In-process: the same class through kvfuzz.check (the package python_install puts in .venv).
adapter_pytest(mlx_inprocess test_mlx_inprocess.py mlx_venv)
