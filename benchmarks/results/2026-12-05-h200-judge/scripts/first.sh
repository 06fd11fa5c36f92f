# On the GPU host, the first call (it carries chunk 1 only): the chunk staged, and in the background, with the host's
# own torch (no vLLM needed), the dummy checkpoints written into ~/ckpts: the 4b no_eoc one the servers load, the tiny
# ones `tox -e gpu` reads. The writer runs from a copy of the tree: each later call replaces the call's own tree,
# and a writer importing from it then fails (seen on this sitting's first try: "No module named 'reference.codebooks'").
R=$PWD; mkdir -p ~/chunks; mv .device-bundle/chunks/chunk-* ~/chunks/
rm -rf ~/ckpt-src && mkdir ~/ckpt-src && cp -a $R/higgs_dummy $R/reference ~/ckpt-src/
[ -e ~/ckpt.pid ] || (cd ~ && HIGGS_FIXTURE_CACHE=~/ckpts PYTHONPATH=~/ckpt-src setsid python3 -c "
from higgs_dummy.cache import cached_checkpoint as c
print(c('4b', 0, 'no_eoc')); [c('tiny', 0, f) for f in ('greedy', 'sampling', 'tied_text_head', 'untied_audio_head')]
" > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
# The bundle leaves out what the host has (golden/gate/host-h200-2026-12-01.txt): any difference on this host shows here.
python3 -m conformance.tools.bundle host | diff golden/gate/host-h200-2026-12-01.txt - | grep '^[<>]' | head -12
