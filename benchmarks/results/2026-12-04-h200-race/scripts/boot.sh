# On the GPU host: upstream's server, its _high_throughput deploy file as shipped (its README's command), on our 4b
# no_eoc dummy, started in a session of its own (every descriptor redirected, so the call can return); wait for
# /health up to BOOT s (upstream.sh waits on).
R=$PWD; . .gpu/upstream_env.sh
export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1
t0=$(date +%s); date +%s > ~/omni.t0
CK=$(python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
cd ~
PYTHONPATH=$OMNI_PATH setsid python3 -m vllm_omni.entrypoints.cli.main serve $CK --omni --trust-remote-code \
   --host 127.0.0.1 --port 8091 --deploy-config $D/higgs_multimodal_qwen3_high_throughput.yaml \
   > ~/omni-serve.log 2>&1 < /dev/null &
echo $! > ~/omni.pid; cd $R
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; }
n=0
until health 8091; do
  sleep 5; n=$((n+1))
  [ $(( $(date +%s) - t0 )) -gt ${BOOT:-560} ] && { echo BOOT_WAIT_ENDS; break; }
  kill -0 $(cat ~/omni.pid) 2>/dev/null || { echo SERVER_DIED; break; }
  [ $((n % 12)) = 0 ] && echo "$(( $(date +%s) - t0 )) s: $(grep -v '^\s*$' ~/omni-serve.log | tail -1 | cut -c1-200)"
done
echo "upstream boot: $(( $(date +%s) - t0 )) s (healthy: $(health 8091 && echo yes || echo no))" | tee ~/boot.txt
grep -E "Available KV|warmup (starting|finished)|Application startup|Error|error:|Traceback" ~/omni-serve.log | cut -c1-260 | tail -25
cp ~/omni-serve.log ~/boot.txt $OUT/
