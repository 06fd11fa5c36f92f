# On the GPU host, one call (this folder's scripts): install.sh, sitting.sh started in the background from ~/repo, then poll.sh for what is
# left of the call's 600 s.
c0=$(date +%s)
bash benchmarks/results/2026-12-04-h200-judge/scripts/install.sh || { echo INSTALL_FAILED; exit 3; }
(cd ~/repo && setsid bash benchmarks/results/2026-12-04-h200-judge/scripts/sitting.sh > ~/sitting.log 2>&1 < /dev/null &)
WAIT=$(( 560 - $(date +%s) + c0 )) bash benchmarks/results/2026-12-04-h200-judge/scripts/poll.sh
