# On the GPU host, after install.sh: upstream's server (its default deploy file, our 4b no_eoc dummy) started in a
# session of its own so it outlives the call; the serving checks at its URL; then its served benchmark.
set -x
R=$PWD; . .gpu/upstream_env.sh
export PYTHONPATH=~/vllm-0.30.0:$R PYTHONUNBUFFERED=1
CK=$(python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
echo "checkpoint $CK"
(cd ~ && PYTHONPATH=$OMNI_PATH setsid nohup python3 -m vllm_omni.entrypoints.cli.main serve $CK --omni \
   --trust-remote-code --host 127.0.0.1 --port 8091 --deploy-config $D/higgs_multimodal_qwen3.yaml \
   > ~/omni-serve.log 2>&1 < /dev/null &)
t0=$(date +%s)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8091/health', timeout=2)" 2>/dev/null; }
until health; do
  sleep 3
  [ $(( $(date +%s) - t0 )) -gt ${BOOT:-420} ] && { echo BOOT_TIMEOUT; break; }
  pgrep -f vllm_omni.entrypoints >/dev/null || { echo SERVER_DIED; break; }
done
echo "upstream boot: $(( $(date +%s) - t0 )) s"
health && timeout ${CHECKS:-240} python3 -m conformance.serving.results run --implementation vllm-omni \
   --server-url http://127.0.0.1:8091 > ~/checks.log 2>&1; echo "checks rc $?"
tail -40 ~/checks.log
cp golden/implementations/vllm-omni.json ~/vllm-omni.json 2>/dev/null
health && timeout ${BENCH:-200} python3 -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16 64 \
   --max-tokens 0 --extra-body '{"max_new_tokens": 257}' --level-timeout 120 --out-dir ~/race/default-upstream
tar czf $OUT/upstream.tgz -C ~ omni-serve.log checks.log vllm-omni.json race 2>/dev/null; ls -la $OUT
