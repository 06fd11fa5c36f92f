# On the GPU host, one call carrying .gpu (each bundle's SHA256SUMS and MANIFEST.json) and .whl (pylibrb 0.1.2,
# pytest 9.0.3: tox.ini's pins): the chunks joined into the bundles' parts, vLLM 0.33.0 installed into ~/vllm-0.33.0
# and the quality bundle into ~/quality with the project's installer (it checks both against their manifests); then
# the gate as docs/gate.md gives it, with the quality area in the same run, inside this one call. GPU memory sampled
# every 5 s beside it. Outputs in $OUT.
c0=$(date +%s); R=$PWD
mkdir -p ~/s033 ~/sq
if [ ! -d ~/vllm-0.33.0/vllm ]; then
  (cd ~/s033 && cat ~/c033/chunk-* | split -b 60M -a 2 - part- && cp $R/.gpu/033/* .) \
    && python3 -m conformance.tools.bundle install ~/s033 --target ~/vllm-0.33.0 || { echo INSTALL_033_FAILED; exit 4; }
  (cd ~/sq && cat ~/cq/chunk-* | split -b 60M -a 2 - part- && cp $R/.gpu/q033/* .) \
    && python3 -m conformance.tools.bundle install ~/sq --target ~/quality || { echo INSTALL_QUALITY_FAILED; exit 5; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target ~/pins $R/.whl/*.whl || { echo INSTALL_PINS_FAILED; exit 6; }
  rm -rf ~/s033 ~/sq ~/c033 ~/cq
fi
echo "installed: $(( $(date +%s) - c0 )) s"
export PYTHONPATH=$HOME/vllm-0.33.0:$HOME/quality:$HOME/pins:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
  HIGGS_ESPEAK_NG_ROOT=$HOME/quality/debroot VLLM_WORKER_MULTIPROC_METHOD=spawn HIGGS_FIXTURE_CACHE=$HOME/ckpts
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
python3 -c "import vllm, torch, pytest, xdist, av, pylibrb, soundfile, faster_whisper, resemblyzer, jiwer
print('vllm', vllm.__version__, 'torch', torch.__version__, 'pytest', pytest.__version__, 'xdist', xdist.__version__)" || exit 7
python3 -c 'from higgs_dummy.cache import cached_checkpoint as c; [c("tiny", 0, f) for f in ("greedy", "sampling", "tied_text_head", "untied_audio_head")]'
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 5 > $OUT/gpu-memory.csv 2>&1 &
left=$(( 575 - $(date +%s) + c0 ))
echo "gate: deadline $(( left - 25 )) s"
timeout -k 10 $left python3 -m conformance.gate --out $OUT/cuda-0.33.0.json --deadline $(( left - 25 )) --test-timeout 240 \
  -- --durations=40 > $OUT/gate.log 2>&1
echo "gate: exit $? after $(( $(date +%s) - c0 )) s of the call"
cp $OUT/cuda-0.33.0.json ~/ 2>/dev/null
tail -25 $OUT/gate.log
