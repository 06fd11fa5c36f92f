# On the GPU host, one call carrying .gpu (each bundle's SHA256SUMS, 0.33.0's MANIFEST.json): the chunks joined into
# the bundles' parts and checked, 0.33.0 installed into ~/vllm-0.33.0 with the project's installer, 0.26.0 into ~/site
# as ../shared/device/README.md does; the checkpoint awaited, the tree copied to ~/repo, step.sh started in the
# background there, then poll.sh for what is left of the call.
c0=$(date +%s); R=$PWD; D=benchmarks/results/2026-12-06-gpu-033-step/scripts
mkdir -p ~/stage033 ~/stage026
(cd ~/stage033 && cat ~/chunks033/chunk-* | split -b 60M -a 2 - part- && cp $R/.gpu/033/* .) || exit 3
python3 -m conformance.tools.bundle install ~/stage033 --target ~/vllm-0.33.0 || { echo INSTALL_033_FAILED; exit 4; }
# 0.26.0 only where all its chunks were staged (the 2026-12-06 sitting had no device time left for them)
[ "$(ls ~/chunks026 | wc -l)" = 8 ] && { (cd ~/stage026 && cat ~/chunks026/chunk-* | split -b 60m -a 2 - part- && cp $R/.gpu/026/* . \
  && sha256sum -c --quiet SHA256SUMS && cat part-* | tar xf - \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target ~/site w/*.whl) || { echo INSTALL_026_FAILED; exit 5; }; }
rm -rf ~/stage033 ~/stage026 ~/chunks033 ~/chunks026
echo "installed: $(( $(date +%s) - c0 )) s"
while kill -0 $(cat ~/ckpt.pid) 2>/dev/null; do sleep 2; done; tail -1 ~/ckpt.log
rm -rf ~/repo && mkdir ~/repo && cp -a $R/. ~/repo/ && rm -rf ~/repo/.device-bundle ~/repo/.gpu
(cd ~/repo && setsid bash $D/step.sh > ~/step.log 2>&1 < /dev/null &)
WAIT=$(( 570 - $(date +%s) + c0 )) bash $D/poll.sh
