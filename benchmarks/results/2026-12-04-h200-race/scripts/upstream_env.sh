# source me: PYTHONPATH for upstream's server (its own folder first; the torchaudio stand-in if the host's does not load)
R=$PWD
export VLLM_WORKER_MULTIPROC_METHOD=spawn
OMNI_PATH=~/omni:~/vllm-0.30.0:$R
[ -e ~/torchaudio_ok ] || OMNI_PATH=$R/.gpu/stubs:$OMNI_PATH
D=~/omni/vllm_omni/deploy
