# On the GPU host, upstream's server up (boot.sh): its served benchmark unless boot.sh finished it, the serving checks
# at its URL (SIGINT at the limit, so pytest stops and what ran is written), then the server stopped.
R=$PWD; export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
t0=$(date +%s)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/health', timeout=2)" 2>/dev/null; }
health && echo "upstream healthy" || echo "UPSTREAM NOT HEALTHY"
if health && ! grep -q '"status": "ok"' ~/race/high_throughput_v2-upstream/served.json 2>/dev/null; then
  timeout -s INT 240 python3 -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16 64 --max-tokens 0 \
    --extra-body '{"max_new_tokens": 257}' --level-timeout 120 --out-dir ~/race/high_throughput_v2-upstream
fi
left=$(( 560 - $(date +%s) + t0 ))
health && timeout -s INT -k 20 $(( left < 300 ? left : 300 )) python3 -m conformance.serving.results run \
  --implementation vllm-omni --server-url http://127.0.0.1:8091 > ~/checks.log 2>&1; echo "checks rc $? after $(( $(date +%s) - t0 )) s"
tail -30 ~/checks.log
kill -TERM -- -$(cat ~/omni.pid) 2>/dev/null; sleep 8; kill -KILL -- -$(cat ~/omni.pid) 2>/dev/null; pkill -9 -f vllm_omni
for i in $(seq 20); do m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits); [ $m -lt 2000 ] && break; sleep 2; done
echo "GPU memory used after stop: $m MiB"
cp ~/omni-serve.log ~/checks.log $OUT/; cp golden/implementations/vllm-omni.json $OUT/ 2>/dev/null
tar czf $OUT/race-upstream.tgz -C ~ race 2>/dev/null; ls -la $OUT
