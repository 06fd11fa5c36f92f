# On the GPU host, each staging call: the chunks it carries moved out of the call's tree into ~/c033 (vLLM 0.33.0's
# bundle, `python -m conformance.tools.bundle build --vllm 0.33.0`) and ~/cq (the quality bundle built against its
# MANIFEST.json). Both bundles' parts were re-split here into 51 MiB chunks (`cat part-* | split -b 51M -d -a 2 - chunk-`).
# The first call also writes, in the background with the host's torch, the 4b dummy checkpoint the speed benchmark
# loads (~/ckpts).
R=$PWD
mkdir -p ~/c033 ~/cq
mv .device-bundle/c033/chunk-* ~/c033/ 2>/dev/null; mv .device-bundle/cq033/chunk-* ~/cq/ 2>/dev/null
echo "staged: $(ls ~/c033 | wc -l) of ${N033:-?}, $(ls ~/cq | wc -l) of ${NQ:-?}"
if [ ! -e ~/ckpt.pid ]; then
  rm -rf ~/ckpt-src && mkdir ~/ckpt-src && cp -a $R/higgs_dummy $R/reference ~/ckpt-src/
  (cd ~ && HIGGS_FIXTURE_CACHE=~/ckpts PYTHONPATH=~/ckpt-src setsid python3 -c "
from higgs_dummy.cache import cached_checkpoint as c; print(c('4b', 0))
" > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
fi
