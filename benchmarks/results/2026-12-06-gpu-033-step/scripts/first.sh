# On the GPU host, the first call (it carries the 0.33.0 bundle's first 51 MiB chunk: the tree is 11 MiB of the 64 a
# call carries): staged, and in the background, with the host's own torch, the 4b dummy checkpoint the benchmarks load
# written into ~/ckpts, from a copy of the tree (each later call replaces the call's own tree).
R=$PWD; bash benchmarks/results/2026-12-06-gpu-033-step/scripts/stage.sh
rm -rf ~/ckpt-src && mkdir ~/ckpt-src && cp -a $R/higgs_dummy $R/reference ~/ckpt-src/
[ -e ~/ckpt.pid ] || (cd ~ && HIGGS_FIXTURE_CACHE=~/ckpts PYTHONPATH=~/ckpt-src setsid python3 -c "
from higgs_dummy.cache import cached_checkpoint as c; print(c('4b', 0, 'no_eoc'))
" > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader
