# On the GPU host: upstream's server, its _high_throughput deploy file as shipped (its README's command), on our 4b
# no_eoc dummy, started in a session of its own (every descriptor redirected, so the call can return); wait for
# /health up to BOOT s; then its served benchmark, if the call has time left for it (else upstream.sh runs it).
R=$PWD; . .gpu/upstream_env.sh
export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1
t0=$(date +%s)
CK=$(python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
cd ~
PYTHONPATH=$OMNI_PATH setsid python3 -m vllm_omni.entrypoints.cli.main serve $CK --omni --trust-remote-code \
   --host 127.0.0.1 --port 8091 --deploy-config $D/higgs_multimodal_qwen3_high_throughput.yaml \
   > ~/omni-serve.log 2>&1 < /dev/null &
echo $! > ~/omni.pid; cd $R
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/health', timeout=2)" 2>/dev/null; }
until health; do
  sleep 3
  [ $(( $(date +%s) - t0 )) -gt ${BOOT:-520} ] && { echo BOOT_TIMEOUT; break; }
  kill -0 $(cat ~/omni.pid) 2>/dev/null || { echo SERVER_DIED; break; }
done
echo "upstream boot: $(( $(date +%s) - t0 )) s (healthy: $(health && echo yes || echo no))" | tee ~/boot.txt
grep -E "Available KV|warmup (starting|finished)|Application startup|Error|error:|Traceback" ~/omni-serve.log | cut -c1-260 | tail -25
left=$(( 585 - $(date +%s) + t0 ))
if health && [ $left -gt 170 ]; then
  timeout -s INT $left python3 -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16 64 --max-tokens 0 \
    --extra-body '{"max_new_tokens": 257}' --level-timeout 120 --out-dir ~/race/high_throughput_v2-upstream
fi
cp ~/omni-serve.log ~/boot.txt $OUT/; tar czf $OUT/race-upstream.tgz -C ~ race 2>/dev/null; ls -la $OUT
