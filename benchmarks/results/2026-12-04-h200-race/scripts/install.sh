# On the GPU host: reassemble the staged chunks into the bundle's parts, install, split vllm-omni off; the serving
# checks' extras (librosa, pylibrb) beside; bytecode compiled; the checkpoint first.sh writes awaited.
R=$PWD; S=~/stage; mkdir -p $S
t0=$(date +%s)
(cd $S && cat ~/chunks/chunk-* | split -b 62914560 -a 2 - part- && cp $R/.gpu/SHA256SUMS $R/.gpu/MANIFEST.json . ) || exit 3
rm -rf ~/chunks
python3 -m conformance.tools.bundle install $S --target ~/vllm-0.30.0 || exit 4
mkdir -p ~/omni && mv ~/vllm-0.30.0/vllm_omni ~/vllm-0.30.0/vllm_omni-0.30.0.dist-info ~/omni/ || exit 5
rm -rf $S
python3 -m pip install -q --no-index --no-deps --no-compile --target ~/extras $R/.gpu/x/*.whl || exit 6
echo "install: $(( $(date +%s) - t0 )) s"
t2=$(date +%s); python3 -m compileall -q -j 0 ~/vllm-0.30.0 ~/omni ~/extras > /dev/null 2>&1
echo "bytecode compiled: $(( $(date +%s) - t2 )) s"
export PYTHONPATH=~/vllm-0.30.0:~/extras:$R
python3 -c "import torch, vllm, flashinfer, librosa, pylibrb, av; print('torch', torch.__version__, 'vllm', vllm.__version__, torch.cuda.is_available())"
if python3 -c "import torchaudio, torchvision; print('torchaudio', torchaudio.__version__)"; then : > ~/torchaudio_ok; else echo TORCHAUDIO_FAILS; fi
while kill -0 $(cat ~/ckpt.pid) 2>/dev/null; do sleep 2; done; tail -2 ~/ckpt.log
t1=$(date +%s)
python3 -c "from higgs_dummy.cache import cached_checkpoint; print(cached_checkpoint('4b', 0, 'no_eoc'))" | tail -1
echo "checkpoint (if first.sh's failed): $(( $(date +%s) - t1 )) s; all: $(( $(date +%s) - t0 )) s"
