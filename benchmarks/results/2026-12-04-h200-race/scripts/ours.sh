# On the GPU host: our high_throughput_v2 server (upstream.sh started it beside upstream's) measured alone on the GPU
# with upstream's idle; then both stopped, and each "PROFILE LEVELS..." of the arguments served as shipped
# (benchmarks/served.py starts, measures, stops it) while the call has NEED s (default 200) left.
R=$PWD; export PYTHONPATH=~/vllm-0.30.0:~/extras:$R PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
t0=$(date +%s)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; }
if [ -e ~/ours.pid ] && ! grep -q '"status": "ok"' ~/race/high_throughput_v2-ours/served.json 2>/dev/null; then
  until health 8092; do
    kill -0 $(cat ~/ours.pid) 2>/dev/null || { echo OURS_DIED; tail -20 ~/ours-ht.log | cut -c1-300; break; }
    [ $(( $(date +%s) - t0 )) -gt 240 ] && { echo OURS_BOOT_TIMEOUT; break; }
    sleep 2
  done
  if health 8092; then
    echo "ours healthy $(( $(date +%s) - $(cat ~/ours.t0) )) s after its start"; nvidia-smi --query-gpu=memory.used --format=csv,noheader
    timeout -s INT 200 python3 -m benchmarks.served --base-url http://127.0.0.1:8092 --concurrency 1 16 64 --max-tokens 257 \
      --level-timeout 100 --out-dir ~/race/high_throughput_v2-ours
  fi
  cp ~/ours-ht.log ~/race/ 2>/dev/null; tar czf $OUT/race-ours.tgz -C ~ race 2>/dev/null
fi
for f in ~/omni.pid ~/ours.pid; do [ -e $f ] && kill -0 $(cat $f) 2>/dev/null && { kill -TERM -- -$(cat $f); sleep 6; kill -KILL -- -$(cat $f) 2>/dev/null; }; done
pkill -9 -f vllm_omni; pkill -9 -f reference.serve
for i in $(seq 20); do m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits); [ $m -lt 2000 ] && break; sleep 2; done
echo "servers stopped; GPU memory used: $m MiB; $(( $(date +%s) - t0 )) s"
for spec in "$@"; do
  set -- $spec; p=$1; shift
  grep -q '"status": "ok"' ~/race/$p-ours/served.json 2>/dev/null && continue
  left=$(( 585 - $(date +%s) + t0 )); [ $left -lt ${NEED:-200} ] && { echo "SKIPPED $p: $left s left"; continue; }
  timeout -s INT $left python3 -m benchmarks.served --size 4b --profile $p --concurrency "$@" --max-tokens 257 \
    --boot-timeout 300 --level-timeout 100 --out-dir ~/race/$p-ours
  echo "$p: $(( $(date +%s) - t0 )) s"
  tar czf $OUT/race-ours.tgz -C ~ race 2>/dev/null
done
ls -la $OUT
