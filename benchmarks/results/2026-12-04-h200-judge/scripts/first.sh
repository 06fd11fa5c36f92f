# On the GPU host, the first call (it carries chunk 1 only): the chunk staged, and in the background, with the host's
# own torch (no vLLM needed), the dummy checkpoints written into ~/ckpts: the 4b no_eoc one the servers load, the tiny
# ones `tox -e gpu` reads (.ci/gpu writes them before its parallel run for the same reason).
R=$PWD; mkdir -p ~/chunks; mv .device-bundle/chunks/chunk-* ~/chunks/
[ -e ~/ckpt.pid ] || (cd ~ && HIGGS_FIXTURE_CACHE=~/ckpts PYTHONPATH=$R setsid python3 -c "
from higgs_dummy.cache import cached_checkpoint as c
print(c('4b', 0, 'no_eoc')); [c('tiny', 0, f) for f in ('greedy', 'sampling', 'tied_text_head', 'untied_audio_head')]
" > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
