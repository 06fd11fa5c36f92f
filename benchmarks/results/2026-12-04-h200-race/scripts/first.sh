# On the GPU host, the first call (it carries chunk 1 only): the chunk staged, and the 4b no_eoc dummy checkpoint
# written in the background with the host's own torch (no vLLM needed), ready by the time the bundle is installed.
# Run again (the probe's chunk carried once more when the block starts), it starts no second writer.
R=$PWD; mkdir -p ~/chunks; mv .device-bundle/chunks/chunk-* ~/chunks/
[ -e ~/ckpt.pid ] || (cd ~ && PYTHONPATH=$R setsid python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" \
   > ~/ckpt.log 2>&1 < /dev/null & echo $! > ~/ckpt.pid)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
