# On the GPU host: wait for sitting.sh's DONE or WAIT s (default 560), then its timeline, the GPU's memory and every
# log so far (gzipped) into $OUT.
W=${WAIT:-560}; t=$(date +%s)
until [ -e ~/log/DONE ] || [ $(( $(date +%s) - t )) -ge $W ]; do sleep 5; done
cat ~/log/timeline.txt 2>/dev/null; tail -5 ~/sitting.log
grep -E "^\[gw|passed|failed" ~/log/tox-gpu.log 2>/dev/null | tail -2 | cut -c1-200
nvidia-smi --query-gpu=memory.used --format=csv,noheader
tar czf $OUT/log.tgz -C ~ log sitting.log 2>/dev/null; ls -la $OUT
