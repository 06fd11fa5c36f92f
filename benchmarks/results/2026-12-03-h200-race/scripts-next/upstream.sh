# On the GPU host, upstream's server up (boot.sh): its served benchmark unless boot.sh finished it, the serving checks
# at its URL (SIGINT at the limit, so pytest stops and what ran is written). The server stays up (ours.sh stops it), so
# a call cut short can be repeated.
R=$PWD; export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
t0=$(date +%s)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/health', timeout=2)" 2>/dev/null; }
# boot.sh's wait may end before the boot does: wait on, as long as the server lives.
until health; do
  kill -0 $(cat ~/omni.pid) 2>/dev/null || { echo SERVER_DIED; break; }
  [ $(( $(date +%s) - t0 )) -gt ${BOOT_MORE:-300} ] && { echo BOOT_TIMEOUT; break; }
  sleep 3
done
health && echo "upstream healthy after $(( $(date +%s) - t0 )) s more" || echo "UPSTREAM NOT HEALTHY"
if health && ! grep -q '"status": "ok"' ~/race/high_throughput_v2-upstream/served.json 2>/dev/null; then
  timeout -s INT 240 python3 -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16 64 --max-tokens 0 \
    --extra-body '{"max_new_tokens": 257}' --level-timeout 120 --out-dir ~/race/high_throughput_v2-upstream
fi
left=$(( 560 - $(date +%s) + t0 ))
health && timeout -s INT -k 20 $(( left < 300 ? left : 300 )) python3 -m conformance.serving.results run \
  --implementation vllm-omni --server-url http://127.0.0.1:8091 > ~/checks.log 2>&1; echo "checks rc $? after $(( $(date +%s) - t0 )) s"
tail -30 ~/checks.log
cp ~/omni-serve.log ~/checks.log $OUT/; cp golden/implementations/vllm-omni.json $OUT/ 2>/dev/null
# The JIT caches a boot wrote, for the next sitting's boot (when they fit a call).
tar czf $OUT/jit-caches.tgz -C ~ .triton/cache .cache/flashinfer .cache/vllm 2>/dev/null
[ $(stat -c %s $OUT/jit-caches.tgz) -gt 50000000 ] && { echo "jit caches too large: $(du -h $OUT/jit-caches.tgz)"; rm $OUT/jit-caches.tgz; }
tar czf $OUT/race-upstream.tgz -C ~ race 2>/dev/null; ls -la $OUT
