# On the GPU host, each staging call: the chunks it carries moved out of the call's tree into ~/c026 (vLLM 0.26.0's
# bundle, ../shared/device/make-bundle.sh) and ~/cq (the quality bundle built against it). Both bundles' parts were
# re-split here into 51 MiB chunks (`cat part-* | split -b 51M -d -a 2 - chunk-`): 8 and 5. The first call also
# writes, in the background with the host's torch, the 4b dummy checkpoint the speed benchmark loads (~/ckpts).
R=$PWD
mkdir -p ~/c026 ~/cq
mv .device-bundle/chunks026/chunk-* ~/c026/ 2>/dev/null; mv .device-bundle/chunksq/chunk-* ~/cq/ 2>/dev/null
echo "staged: $(ls ~/c026 | wc -l) of 8, $(ls ~/cq | wc -l) of 5"
if [ ! -e ~/ckpt.pid ]; then
  rm -rf ~/ckpt-src && mkdir ~/ckpt-src && cp -a $R/higgs_dummy $R/reference ~/ckpt-src/
  (cd ~ && HIGGS_FIXTURE_CACHE=~/ckpts PYTHONPATH=~/ckpt-src setsid python3 -c "
from higgs_dummy.cache import cached_checkpoint as c; print(c('4b', 0))
" > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
fi
