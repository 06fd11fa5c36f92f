# On the GPU host, one call: the 2026-12-04 sitting's install.sh, this folder's sitting.sh started in the background
# from ~/repo, then the 2026-12-04 poll.sh for what is left of the call's 600 s.
c0=$(date +%s); S=benchmarks/results/2026-12-04-h200-judge/scripts
bash $S/install.sh || { echo INSTALL_FAILED; exit 3; }
(cd ~/repo && setsid bash benchmarks/results/2026-12-05-h200-judge/scripts/sitting.sh > ~/sitting.log 2>&1 < /dev/null &)
WAIT=$(( 560 - $(date +%s) + c0 )) bash $S/poll.sh
