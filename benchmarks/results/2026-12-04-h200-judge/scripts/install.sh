# On the GPU host: the staged chunks reassembled into the bundle's parts and installed (vllm-omni split off into
# ~/omni, so our side never imports it); beside them (~/extras) pylibrb (the server's tempo), pytest 9.0.3 and tox
# with what it needs beyond the host and the bundle; bytecode compiled; the checkpoints first.sh writes awaited; the
# checkout copied to ~/repo, where the background run works (each call re-syncs the call's own tree).
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
export PYTHONPATH=~/extras:~/vllm-0.30.0:$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
python3 -c "import torch, vllm, flashinfer, pylibrb, av, soundfile, pytest, xdist, tox
print('torch', torch.__version__, 'vllm', vllm.__version__, 'pytest', pytest.__version__, 'tox', tox.__version__, torch.cuda.is_available())" || echo "IMPORT_CHECK_FAILED (the run goes on: each part logs its own failure)"
PYTHONPATH=~/omni:~/vllm-0.30.0 python3 -c "import torchaudio" || echo "TORCHAUDIO_FAILS (upstream's server may not start)"
while kill -0 $(cat ~/ckpt.pid) 2>/dev/null; do sleep 2; done; tail -1 ~/ckpt.log
rm -rf ~/repo && mkdir ~/repo && cp -a $R/. ~/repo/ && rm -rf ~/repo/.device-bundle
echo "ready: $(( $(date +%s) - t0 )) s"
