# On the GPU host, in the background from ~/repo: issue #33 item 8, the talker's decode step on vLLM 0.33.0 against
# 0.26.0 on one machine, most wanted first (a later step may not get device time). Results in ~/res, logs in ~/log.
mkdir -p ~/res ~/log; T=~/log/timeline.txt; t0=$(date +%s)
mark() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $T; }
PURE=$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
export VLLM_WORKER_MULTIPROC_METHOD=spawn HIGGS_FIXTURE_CACHE=~/ckpts
v033() { PYTHONPATH=~/vllm-0.33.0:$PURE "$@"; }
v026() { PYTHONPATH=~/site:$PURE "$@"; }
# ENGINE: the gate's engine phases, talker and bare (conformance/gate/speed.py BENCHMARK_ARGS less its end-to-end
# rounds); EAGER: the talker alone, its sampling step launched eagerly (as when 0.33.0's verdict was made)
ENGINE="--size 4b --modes engine --profiles default --engine-profiles default --engine-concurrency 1 16 64
        --sampling default --engine-repeats 3 --phase-timeout 300"
EAGER="$ENGINE --no-bare --set features.sampler_cudagraphs=false"
mark "start"
v033 python3 -c 'import torch, vllm; print("0.33:", torch.__version__, vllm.__version__)' >> $T 2>&1
v026 python3 -c 'import torch, vllm; print("0.26:", torch.__version__, vllm.__version__)' >> $T 2>&1
v033 python3 -m benchmarks.step_breakdown --micro-only --out-dir ~/res/micro-033 > ~/log/micro-033.log 2>&1; mark "micro 0.33.0 exit $?"
v026 python3 -m benchmarks.step_breakdown --micro-only --out-dir ~/res/micro-026 > ~/log/micro-026.log 2>&1; mark "micro 0.26.0 exit $?"
v033 python3 -m benchmarks $ENGINE --budget 400 --out-dir ~/res/engine-033 > ~/log/engine-033.log 2>&1; mark "engine 0.33.0 exit $?"
v033 python3 -m benchmarks $EAGER --budget 300 --out-dir ~/res/eager-033 > ~/log/eager-033.log 2>&1; mark "eager 0.33.0 exit $?"
v026 python3 -m benchmarks $ENGINE --budget 400 --out-dir ~/res/engine-026 > ~/log/engine-026.log 2>&1; mark "engine 0.26.0 exit $?"
v026 python3 -m benchmarks $EAGER --budget 300 --out-dir ~/res/eager-026 > ~/log/eager-026.log 2>&1; mark "eager 0.26.0 exit $?"
touch ~/log/DONE
