# Run the CPU suite on an AVX-512 machine with every library that picks its kernels by the CPU on its AVX2 ones:
# an emulation of CI's AVX2 machine as far as instruction sets go (not its clock, caches or cores).
# Usage, in a clean clone: bash THIS  (builds .tox/cpu as tox -e cpu-dummy does, patches it, runs the suite).
set -euo pipefail
python3 -m tox -e cpu-dummy --notest
P=.tox/cpu/bin/python; SITE=$($P -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
$P -m pip uninstall -y -q torchvision torchaudio torchcodec
$P -m pip install -q --no-deps resemblyzer==0.1.4
$P -m conformance.deploy.deploy_cases --install-upstream
# torch.cpu.get_capabilities() reports no AVX-512 or AMX when EMULATE_AVX2 is set: vLLM then loads vllm/_C_AVX2
# (platforms/cpu.py import_kernels) and takes its AVX2 paths wherever it asks torch.cpu._is_avx512_*.
$P - "$SITE/torch/cpu/__init__.py" <<'PY'
import sys; p = sys.argv[1]; s = open(p).read()
old = "    return MappingProxyType(torch._C._cpu._get_cpu_capability())\n"
new = ("    caps = dict(torch._C._cpu._get_cpu_capability())\n    import os\n"
       "    if os.environ.get('EMULATE_AVX2'):\n"
       "        caps = {k: (False if k.startswith(('avx512', 'amx', 'avx10')) else v) for k, v in caps.items()}\n"
       "    return MappingProxyType(caps)\n")
assert old in s; open(p, "w").write(s.replace(old, new))
PY
# torch's own kernels, oneDNN, MKL, OpenBLAS (numpy, scipy), CTranslate2 (faster-whisper), numba (librosa)
export EMULATE_AVX2=1 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
  OPENBLAS_CORETYPE=Haswell CT2_FORCE_CPU_ISA=AVX2 NUMBA_CPU_NAME=haswell
export TOKENIZERS_PARALLELISM=false HIGGS_WEIGHTS=dummy VLLM_CPU_KVCACHE_SPACE=1 PATH=$PWD/.tox/cpu/bin:$PATH
python -c "import torch; assert not torch.cpu._is_avx512_supported(); print(torch.backends.cpu.get_cpu_capability())"
/usr/bin/time -f "wall %e s, user %U s, sys %S s" python -m pytest -m "not gpu" -n 3 --dist loadgroup --durations=25
