# On the GPU host, in the background from ~/repo (go.sh starts it). At once: upstream's server on its default deploy
# file (higgs_multimodal_qwen3.yaml), `tox -e gpu`, and our `default` server, the three sharing the GPU. Upstream's
# stage 0 gets a fixed 20 GiB KV cache (16 x 8192 tokens need 18 GiB), ours 10 GiB, as tox's engines have 1 GiB:
# vLLM's device-level memory profiling counts what other processes allocate meanwhile. Then, upstream's server
# fresh: the seeded probe (docs/implementations.md, item 2), the serving checks at its URL; once tox has ended, the
# race of the two servers at 1 and 16 streams (each alone on the GPU's compute, the other idle); then the same for
# upstream's _low_latency file against our low_latency_v2. Timeline: ~/log/timeline.txt; every log in ~/log.
cd ~/repo; R=$PWD; L=~/log; mkdir -p $L/race; T0=$(date +%s)
stamp() { echo "$(( $(date +%s) - T0 )) s: $*" >> $L/timeline.txt; }
export HIGGS_FIXTURE_CACHE=~/ckpts PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
OURS=~/extras:~/vllm-0.30.0:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
OMNI=~/omni:~/vllm-0.30.0
CK=$(PYTHONPATH=$OURS python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; }
deploy() {  # upstream's deploy file $1 as shipped but for stage 0's memory: written to $2
  PYTHONPATH=$OURS python3 - "$1" "$2" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
stage = doc["stages"][0]
assert stage["stage_id"] == 0, stage
stage["kv_cache_memory_bytes"] = 20 << 30  # vllm_omni/config/omni_config.py:222, 571; worker/base.py:124-128
stage["gpu_memory_utilization"] = 0.25  # the free memory its start asks for (0.6 as shipped)
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
PY
}
upstream() {  # deploy file, port, name
  (cd ~ && PYTHONPATH=$OMNI setsid python3 -m vllm_omni.entrypoints.cli.main serve $CK --omni --trust-remote-code \
     --host 127.0.0.1 --port $2 --deploy-config $1 > $L/$3.log 2>&1 < /dev/null & echo $! > ~/$3.pid)
  stamp "$3 started"
}
ours() {  # profile, port, name
  (PYTHONPATH=$OURS:$R setsid python3 -m reference.serve --profile $1 --model $CK --platform cuda --host 127.0.0.1 \
     --port $2 --served-model-name higgs-4b-no_eoc --set stages.0.gpu_memory_utilization=0.2 \
     --set stages.0.kv_cache_memory_bytes=10737418240 > $L/$3.log 2>&1 < /dev/null & echo $! > ~/$3.pid)
  stamp "$3 started"
}
wait_health() {  # port, name, until (s after T0)
  until health $1; do
    kill -0 $(cat ~/$2.pid) 2>/dev/null || { stamp "$2 DIED"; tail -30 $L/$2.log > $L/$2.died; return 1; }
    [ $(( $(date +%s) - T0 )) -gt $3 ] && { stamp "$2 not healthy by $3 s"; return 1; }
    sleep 3
  done
  stamp "$2 healthy"
}
stop() { for n in "$@"; do [ -e ~/$n.pid ] && kill -TERM -- -$(cat ~/$n.pid) 2>/dev/null; done; sleep 8
         for n in "$@"; do [ -e ~/$n.pid ] && kill -KILL -- -$(cat ~/$n.pid) 2>/dev/null; done; stamp "stopped $*"; }
race() {  # port, name, levels...: upstream's (port 8091/8093) sends max_new_tokens
  p=$1; n=$2; shift 2
  case $n in *upstream) len=(--max-tokens 0 --extra-body '{"max_new_tokens": 257}');; *) len=(--max-tokens 257);; esac
  health $p && PYTHONPATH=$OURS:$R timeout -s INT 400 python3 -m benchmarks.served --base-url http://127.0.0.1:$p \
     --concurrency "$@" "${len[@]}" --level-timeout 150 --out-dir $L/race/$n > $L/race/$n.txt 2>&1
  stamp "race $n: exit $? ($(tail -c 300 $L/race/$n.txt | tr '\n' '|'))"
}

deploy ~/omni/vllm_omni/deploy/higgs_multimodal_qwen3.yaml ~/deploy-default.yaml && cp ~/deploy-default.yaml $L/
upstream ~/deploy-default.yaml 8091 omni-default
(PYTHONPATH=$OURS setsid python3 -m tox -e gpu -- -n 4 --dist loadgroup -v -rfEs > $L/tox-gpu.log 2>&1 < /dev/null
 echo $? > $L/tox.rc; stamp "tox -e gpu: exit $(cat $L/tox.rc); $(grep -E '^=+ .*(passed|failed)' $L/tox-gpu.log | tail -1)") &
stamp "tox -e gpu started"
ours default 8092 ours-default
if ! wait_health 8091 omni-default 1400 && [ -e $L/omni-default.died ] && [ $(( $(date +%s) - T0 )) -lt 400 ]; then
  mv $L/omni-default.log $L/omni-default-first.log
  upstream ~/omni/vllm_omni/deploy/higgs_multimodal_qwen3.yaml 8091 omni-default  # as shipped, its memory too
  wait_health 8091 omni-default 1400
fi
if health 8091; then
  PYTHONPATH=$OURS:$R python3 benchmarks/results/2026-12-04-h200-judge/scripts/seeded_probe.py http://127.0.0.1:8091 > $L/probe.txt 2>&1; stamp "probe: exit $?"
  PYTHONPATH=$OURS:$R timeout -s INT -k 20 720 python3 -m conformance.serving.results run --implementation vllm-omni \
     --server-url http://127.0.0.1:8091 > $L/checks.log 2>&1; stamp "checks: exit $?; $(tail -1 $L/checks.log)"
  cp golden/implementations/vllm-omni.json $L/
fi
wait_health 8092 ours-default 1400
while [ ! -e $L/tox.rc ] && [ $(( $(date +%s) - T0 )) -lt 1400 ]; do sleep 5; done
race 8091 default-upstream 1 16
race 8092 default-ours 1 16
stop omni-default ours-default; pkill -9 -f vllm_omni; pkill -9 -f reference.serve
deploy ~/omni/vllm_omni/deploy/higgs_multimodal_qwen3_low_latency.yaml ~/deploy-low.yaml && cp ~/deploy-low.yaml $L/
upstream ~/deploy-low.yaml 8093 omni-low
ours low_latency_v2 8094 ours-low
wait_health 8093 omni-low 1400 && race 8093 low_latency-upstream 1 16
wait_health 8094 ours-low 1400 && race 8094 low_latency_v2-ours 1 16
stamp DONE; touch $L/DONE
