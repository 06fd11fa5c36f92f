# On the GPU host: vLLM 0.26.0's bundle (staged as chunks of its tar stream in ~/c), then every GPU check.
R=$PWD; t0=$(date +%s)
mkdir -p ~/w26 && (cd ~/w26 && cat ~/c/chunk-* | tar xf -) || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --target $HOME/site ~/w26/w/*.whl $R/.whl/pytest-*.whl || exit 4
echo "install: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$HOME/site:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))') VLLM_WORKER_MULTIPROC_METHOD=spawn
python3 -c "import vllm, pytest; print('vllm', vllm.__version__, 'pytest', pytest.__version__)"
bash .ci/gpu $OUT/gpu; rc=$?
tail -5 $OUT/gpu/tox-gpu.log; cat $OUT/gpu/summary.txt; exit $rc
