# On the GPU host, upstream's server stopped if it runs: our server per profile (benchmarks/served.py starts, measures, stops it) on
# the same vLLM 0.30.0, checkpoint, text and load.  ours.sh "PROFILE LEVELS..." ...; a profile whose served.json says ok
# is skipped; one is started only while the call has NEED s (default 200) left for it.
R=$PWD; export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
t0=$(date +%s)
if [ -e ~/omni.pid ] && kill -0 $(cat ~/omni.pid) 2>/dev/null; then  # upstream's server (boot.sh) first stopped
  kill -TERM -- -$(cat ~/omni.pid); sleep 8; kill -KILL -- -$(cat ~/omni.pid) 2>/dev/null; pkill -9 -f vllm_omni
  for i in $(seq 20); do m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits); [ $m -lt 2000 ] && break; sleep 2; done
  echo "upstream stopped; GPU memory used: $m MiB"
fi
for spec in "$@"; do
  set -- $spec; p=$1; shift
  grep -q '"status": "ok"' ~/race/$p-ours/served.json 2>/dev/null && continue
  left=$(( 585 - $(date +%s) + t0 )); [ $left -lt ${NEED:-200} ] && { echo "SKIPPED $p: $left s left"; continue; }
  timeout -s INT $left python3 -m benchmarks.served --size 4b --profile $p --concurrency "$@" --max-tokens 257 \
    --boot-timeout 300 --level-timeout 120 --out-dir ~/race/$p-ours
  echo "$p: $(( $(date +%s) - t0 )) s"; tail -5 ~/race/$p-ours/server.log | cut -c1-300
  tar czf $OUT/race-ours.tgz -C ~ race 2>/dev/null
done
ls -la $OUT
