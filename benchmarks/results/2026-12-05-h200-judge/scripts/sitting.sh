# On the GPU host, in the background from ~/repo (go.sh starts it). At once: upstream's server on its default deploy
# file (higgs_multimodal_qwen3.yaml, stage 0's memory fixed as in the 2026-12-04 sitting) and `tox -e gpu` on this
# tree (on a card of more than 100 GB). Once upstream is healthy, the speed and compressed-format checks, then every
# serving check at its URL (the judge of golden/implementations/vllm-omni.json).
# Timeline: ~/log/timeline.txt; every log in ~/log.
cd ~/repo; R=$PWD; L=~/log; mkdir -p $L; T0=$(date +%s)
stamp() { echo "$(( $(date +%s) - T0 )) s: $*" >> $L/timeline.txt; }
export HIGGS_FIXTURE_CACHE=~/ckpts PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
OURS=~/extras:~/vllm-0.30.0:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
OMNI=~/omni:~/vllm-0.30.0
CK=$(PYTHONPATH=$OURS python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1)
health() { python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$1/health', timeout=2)" 2>/dev/null; }

PYTHONPATH=$OURS python3 - ~/omni/vllm_omni/deploy/higgs_multimodal_qwen3.yaml ~/deploy-default.yaml <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
stage = doc["stages"][0]
assert stage["stage_id"] == 0, stage
stage["kv_cache_memory_bytes"] = 20 << 30  # vllm_omni/config/omni_config.py:222, 571; worker/base.py:124-128
stage["gpu_memory_utilization"] = 0.25  # the free memory its start asks for (0.6 as shipped)
yaml.safe_dump(doc, open(sys.argv[2], "w"), sort_keys=False)
PY
cp ~/deploy-default.yaml $L/
(cd ~ && PYTHONPATH=$OMNI setsid python3 -m vllm_omni.entrypoints.cli.main serve $CK --omni --trust-remote-code \
   --host 127.0.0.1 --port 8091 --deploy-config ~/deploy-default.yaml > $L/omni-default.log 2>&1 < /dev/null &
 echo $! > ~/omni-default.pid)
stamp "upstream started"
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$MIB" -gt 100000 ]; then
  (PYTHONPATH=$OURS setsid python3 -m tox -e gpu -- -n 4 --dist loadgroup -v -rfEs > $L/tox-gpu.log 2>&1 < /dev/null
   echo $? > $L/tox.rc; stamp "tox -e gpu: exit $(cat $L/tox.rc); $(grep -E '^=+ .*(passed|failed)' $L/tox-gpu.log | tail -1)") &
  stamp "tox -e gpu started"
else  # 80 GiB: upstream's stage 1 asks at its start for a quarter of the card free, which tox's engines would hold
  echo skipped > $L/tox.rc; stamp "tox -e gpu not started: the card has $MIB MiB"
fi
until health 8091; do
  kill -0 $(cat ~/omni-default.pid) 2>/dev/null || { stamp "upstream DIED"; break; }
  [ $(( $(date +%s) - T0 )) -gt 1300 ] && { stamp "upstream not healthy by 1300 s"; break; }
  sleep 3
done
if health 8091; then
  stamp "upstream healthy"
  # First the two checks this sitting is for (in case the lease ends before the whole run): into $L/first.
  PYTHONPATH=$OURS:$R timeout -s INT -k 20 240 python3 -m conformance.serving.results run --implementation vllm-omni \
     --server-url http://127.0.0.1:8091 --out $L/first -- -k "test_speed_scales or compressed_answers_decode" > $L/first.log 2>&1
  stamp "the speed and format checks: exit $?; $(tail -1 $L/first.log)"
  PYTHONPATH=$OURS:$R timeout -s INT -k 20 720 python3 -m conformance.serving.results run --implementation vllm-omni \
     --server-url http://127.0.0.1:8091 > $L/checks.log 2>&1; stamp "checks: exit $?; $(tail -1 $L/checks.log)"
  cp golden/implementations/vllm-omni.json $L/
fi
kill -TERM -- -$(cat ~/omni-default.pid) 2>/dev/null
while [ ! -e $L/tox.rc ] && [ $(( $(date +%s) - T0 )) -lt 1400 ]; do sleep 5; done
stamp DONE; touch $L/DONE
