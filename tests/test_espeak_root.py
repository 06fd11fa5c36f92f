"""espeak-ng carried to a host that lacks it (conformance/quality/clips.py, HIGGS_ESPEAK_NG_ROOT):
the program, libraries and voices of a folder where its Debian packages were unpacked, and an
error naming the variable when that folder holds no espeak-ng."""

import os
import stat

import numpy as np
import pytest
from scipy.io import wavfile

from conformance.quality import clips

pytestmark = pytest.mark.cpu

# Stands in for ROOT/usr/bin/espeak-ng: says where it was told to look, and writes a WAV for -w.
FAKE_ESPEAK = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake espeak-ng data=$ESPEAK_DATA_PATH libs=$LD_LIBRARY_PATH"; exit 0; fi
while [ $# -gt 0 ]; do if [ "$1" = "-w" ]; then cp "$(dirname "$0")/clip.wav" "$2"; fi; shift; done
"""


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "debroot"
    program = root / "usr/bin/espeak-ng"
    program.parent.mkdir(parents=True)
    program.write_text(FAKE_ESPEAK)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    wavfile.write(root / "usr/bin/clip.wav", 22050, (np.sin(np.arange(22050) / 7.0) * 8000).astype(np.int16))
    (root / "usr/lib/x86_64-linux-gnu/espeak-ng-data").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/pulseaudio").mkdir()
    (root / "usr/lib/x86_64-linux-gnu/libespeak-ng.so.1").write_bytes(b"")
    (root / "usr/lib/x86_64-linux-gnu/pulseaudio/libpulsecommon-16.1.so").write_bytes(b"")
    (root / "lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "lib/x86_64-linux-gnu/libsystemd.so.0").write_bytes(b"")
    return root


def test_without_the_variable_espeak_ng_comes_from_path(monkeypatch):
    monkeypatch.delenv(clips.ESPEAK_ROOT_ENV, raising=False)
    assert clips.espeak_runtime() == ("espeak-ng", None)


def test_the_carried_espeak_ng_runs_with_its_own_libraries_and_voices(root, tmp_path, monkeypatch):
    monkeypatch.setenv(clips.ESPEAK_ROOT_ENV, str(root))
    monkeypatch.setenv("LD_LIBRARY_PATH", "/elsewhere")
    assert clips.espeak_available()
    program, env = clips.espeak_runtime()
    assert program == str(root / "usr/bin/espeak-ng")
    assert env["ESPEAK_DATA_PATH"] == str(root / "usr/lib/x86_64-linux-gnu")
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(root / "lib/x86_64-linux-gnu"), str(root / "usr/lib/x86_64-linux-gnu"),
        str(root / "usr/lib/x86_64-linux-gnu/pulseaudio"), "/elsewhere"]
    assert clips.espeak_version() == f"fake espeak-ng data={env['ESPEAK_DATA_PATH']} libs={env['LD_LIBRARY_PATH']}"
    audio = clips.synthesise("en-us", "Hello.", 160, 50, cache=tmp_path / "cache")
    assert audio.dtype == np.float32 and len(audio) == 16000  # one second at 22050 Hz, resampled
    assert np.array_equal(audio, clips.synthesise("en-us", "Hello.", 160, 50, cache=tmp_path / "cache"))


def test_a_root_without_espeak_ng_is_an_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(clips.ESPEAK_ROOT_ENV, str(tmp_path))
    assert clips.espeak_available()  # the checks run, and fail saying why, rather than skip
    with pytest.raises(clips.EspeakError, match=f"{clips.ESPEAK_ROOT_ENV}={tmp_path} has no usr/bin/espeak-ng"):
        clips.synthesise("en-us", "Hello.", 160, 50, cache=tmp_path / "cache")


def test_the_skip_reason_names_both_ways_to_get_espeak_ng():
    assert "apt-get install -y espeak-ng" in clips.ESPEAK_MISSING and clips.ESPEAK_ROOT_ENV in clips.ESPEAK_MISSING
