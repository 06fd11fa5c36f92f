# On the GPU host: vLLM 0.26.0's bundle (../shared/device; its tar stream staged as 7 chunks in ~/c, checked against
# the stream's sha256 here) and the serving checks' wheels (.whl: av, pylibrb, soundfile with cffi and pycparser,
# pytest 9.0.3), then `tox -e gpu -- ARGS -n 4 ...` on this tree within LIMIT s (default 575) of the call's start,
# logs in $OUT/gpu.
R=$PWD; t0=$(date +%s)
if [ ! -d ~/w26/w ]; then
  ls ~/c; [ "$(cat ~/c/chunk-* | sha256sum | cut -d' ' -f1)" = e80dd27512e6ccab8d676108f83ad954772acb800b25d1d1a2ce6765553e490e ] || { echo "STAGE_INCOMPLETE"; exit 3; }
  mkdir -p ~/w26 && (cd ~/w26 && cat ~/c/chunk-* | tar xf -) && rm -rf ~/c || exit 3
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target $HOME/site ~/w26/w/*.whl $R/.whl/*.whl || exit 4
echo "install: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$HOME/site:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))') VLLM_WORKER_MULTIPROC_METHOD=spawn
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
python3 -c "import vllm, pytest, av, pylibrb, soundfile; print('vllm', vllm.__version__, 'pytest', pytest.__version__)" || exit 5
python3 -c 'from higgs_dummy.cache import cached_checkpoint as c; [c("tiny", 0, f) for f in ("greedy", "sampling", "tied_text_head", "untied_audio_head")]'
mkdir -p $OUT/gpu; t1=$(date +%s)
timeout -s INT -k 15 $(( ${LIMIT:-575} - t1 + t0 )) python3 -m tox -e gpu -- "$@" -n 4 --dist loadgroup -v -rfEs --durations=20 > $OUT/gpu/tox-gpu.log 2>&1
echo "tox -e gpu: exit $? after $(( $(date +%s) - t1 )) s" | tee $OUT/gpu/summary.txt
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu/tox-gpu.log | tail -30
