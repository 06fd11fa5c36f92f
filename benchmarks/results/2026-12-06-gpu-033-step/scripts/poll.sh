# On the GPU host: wait for step.sh's DONE or WAIT s (default 560), then its timeline and everything so far into $OUT.
W=${WAIT:-560}; t=$(date +%s)
until [ -e ~/log/DONE ] || [ $(( $(date +%s) - t )) -ge $W ]; do sleep 5; done
cat ~/log/timeline.txt 2>/dev/null; tail -3 ~/step.log; nvidia-smi --query-gpu=memory.used --format=csv,noheader
for f in ~/log/*.log; do echo "== $f"; grep -vE "^\s*$|Warning|warn" $f | tail -4 | cut -c1-220; done
tar czf $OUT/res.tgz -C ~ res log 2>/dev/null; ls -la $OUT
