# On the GPU host, a second call: the gate's speed figures (python -m conformance.gate.speed, its benchmark of the
# talker and the bare Qwen3 step and the V2/V1 rounds) added to the verdict the first call wrote (kept in ~ on the
# host). Outputs in $OUT.
c0=$(date +%s)
export PYTHONPATH=$PWD:$HOME/vllm-0.33.0:$HOME/quality:$HOME/pins:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
  VLLM_WORKER_MULTIPROC_METHOD=spawn HIGGS_FIXTURE_CACHE=$HOME/ckpts
while kill -0 $(cat ~/ckpt.pid) 2>/dev/null; do sleep 2; done; tail -1 ~/ckpt.log
python3 -m conformance.gate.speed ~/cuda-0.33.0.json --run --budget $(( 560 - $(date +%s) + c0 )) --out-dir ~/speed \
  > $OUT/speed.log 2>&1
echo "speed: exit $? after $(( $(date +%s) - c0 )) s"; tail -20 $OUT/speed.log
cp ~/cuda-0.33.0.json $OUT/; cp ~/speed/speed.json $OUT/ 2>/dev/null
