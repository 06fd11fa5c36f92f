# On the GPU host, upstream's server booting (boot.sh): wait on as long as it lives; its served benchmark (1, 16, 64
# streams) alone on the GPU; then our high_throughput_v2 server started beside it (--set stages.0.gpu_memory_utilization
# =0.10: the memory upstream leaves; 64 streams need a fifth of that KV cache) while the serving checks judge upstream's.
R=$PWD; export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
t0=$(date +%s)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; }
until health 8091; do
  kill -0 $(cat ~/omni.pid) 2>/dev/null || { echo SERVER_DIED; break; }
  [ $(( $(date +%s) - t0 )) -gt ${BOOT_MORE:-420} ] && { echo BOOT_TIMEOUT; break; }
  sleep 3
done
health 8091 && echo "upstream healthy $(( $(date +%s) - $(cat ~/omni.t0) )) s after its start" | tee -a ~/boot.txt || { echo "UPSTREAM NOT HEALTHY"; tail -5 ~/omni-serve.log | cut -c1-300; }
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
if health 8091; then
  timeout -s INT 200 python3 -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16 64 --max-tokens 0 \
    --extra-body '{"max_new_tokens": 257}' --level-timeout 100 --out-dir ~/race/high_throughput-upstream
  echo "upstream bench done after $(( $(date +%s) - t0 )) s"
fi
CK=$(python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
setsid python3 -m reference.serve --profile high_throughput_v2 --model $CK --platform cuda --host 127.0.0.1 --port 8092 \
  --served-model-name higgs-4b-no_eoc --set stages.0.gpu_memory_utilization=0.10 > ~/ours-ht.log 2>&1 < /dev/null &
echo $! > ~/ours.pid; date +%s > ~/ours.t0
left=$(( 575 - $(date +%s) + t0 ))
health 8091 && [ $left -gt 60 ] && timeout -s INT -k 20 $(( left - 25 )) python3 -m conformance.serving.results run \
  --implementation vllm-omni --server-url http://127.0.0.1:8091 > ~/checks.log 2>&1; echo "checks rc $? after $(( $(date +%s) - t0 )) s"
tail -25 ~/checks.log
cp ~/omni-serve.log ~/checks.log ~/boot.txt $OUT/; cp golden/implementations/vllm-omni.json $OUT/ 2>/dev/null
tar czf $OUT/race-upstream.tgz -C ~ race 2>/dev/null; ls -la $OUT
