# On the GPU host: reassemble the staged chunks into the bundle's parts, install, split vllm-omni off.
set -x
R=$PWD; S=~/stage; mkdir -p $S
t0=$(date +%s)
(cd $S && cat ~/chunks/chunk-* | split -b 62914560 -a 2 - part- && cp $R/.gpu/SHA256SUMS $R/.gpu/MANIFEST.json . ) || exit 3
echo "stream sha256: $(cat $S/part-* | sha256sum)"
rm -rf ~/chunks
python3 -m conformance.tools.bundle install $S --target ~/vllm-0.30.0 || exit 4
mkdir -p ~/omni && mv ~/vllm-0.30.0/vllm_omni ~/vllm-0.30.0/vllm_omni-0.30.0.dist-info ~/omni/ || exit 5
rm -rf $S
echo "install: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=~/vllm-0.30.0:$R
python3 -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'vllm', vllm.__version__, torch.cuda.is_available())"
if python3 -c "import torchaudio, torchvision; print('torchaudio', torchaudio.__version__)"; then : > ~/torchaudio_ok; else echo TORCHAUDIO_FAILS; fi
