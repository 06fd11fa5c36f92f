"""Driving a speech server from the checks: ours (`python -m reference.serve`, a process on loopback) or
one at a URL (--server-url: conformance/serving/implementations.py), its metrics, request bodies from the
talker prompts, and the audio they return.

The server is a child process (its own session, so its engine goes with it; SIGTERM when the
test process dies, even killed, so that no server outlives its run), on 127.0.0.1 and a free port; it is healthy when `GET /health` answers 200 (a CPU boot takes about a minute).
`SlowReader` is a client that reads only what it asks for, so that the server's sends block: the
way to hold a stream at a known place without timing anything.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import numpy as np
import torch

from conformance.serving.implementations import REFERENCE, Implementation
from conformance.talker import talker_cases
from reference.codec.streaming import agreement
from reference.serve.metrics import metric, parse_metrics
from reference.serve.wav import HEADER_BYTES, parse_header, pcm16, wav_file

ROOT = Path(__file__).resolve().parents[2]
MODEL_NAME = "higgs-tiny"
BOOT_TIMEOUT_S = 420.0


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """A Popen preexec_fn: the child gets SIGTERM when the process that started it ends. A server
    left behind by a killed pytest (seen: a run stopped by `timeout`) kept its engine and cores."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NARRATOR = {"seconds": 0.5, "seed": 7}  # the server's named voice "narrator": seeded noise


def write_voices(voices: Path) -> None:
    """The server's voice folder: the named voice "narrator" (a reference WAV and its transcript)."""
    voices.mkdir(parents=True, exist_ok=True)
    (voices / "narrator.wav").write_bytes(wav_bytes(talker_cases.reference_audio(NARRATOR)))
    (voices / "narrator.txt").write_text("The narrator's reference recording.")


def serve_command(checkpoint, profile: str, platform: str, overrides: dict, port: int, voices: Path) -> list[str]:
    """The command line of our server as the checks start it (conformance/serving/reference_server.py prints it)."""
    sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    return [sys.executable, "-m", "reference.serve", "--profile", profile, "--model", str(checkpoint),
            "--host", "127.0.0.1", "--port", str(port), "--platform", platform, "--voices", str(voices),
            "--served-model-name", MODEL_NAME, "--log-level", "warning", *sets]


class Server:
    """A speech server at a base URL as the checks see it: an HTTP client, its metrics, the requests in its
    implementation's spelling (conformance/serving/implementations.py)."""

    def __init__(self, url: str, implementation: Implementation = REFERENCE, model: str | None = None,
                 default_max_tokens: int | None = None):
        self.url = url
        self.implementation = implementation
        self.model = model
        self.default_max_tokens = default_max_tokens  # sent where a check names none, if the adapter caps length
        self.client = httpx.Client(base_url=self.url, timeout=120.0)

    def body(self, prompt: dict, **extra) -> dict:
        return body_for(prompt, self.implementation, self.model, default_max_tokens=self.default_max_tokens, **extra)

    def log_tail(self, lines: int = 40) -> str:
        return f"(the log of the server at {self.url} is not the suite's to read)"

    def stop(self) -> None:
        self.client.close()

    def metrics_text(self) -> str:
        response = self.client.get("/metrics")
        response.raise_for_status()
        return response.text

    def metrics(self) -> dict[str, float]:
        return parse_metrics(self.metrics_text())

    def metric_names(self) -> set[str]:
        """The metric names /metrics carries: with a series, or declared by a `# TYPE` line (metric_names)."""
        return metric_names(self.metrics_text())

    def value(self, name: str) -> float:
        return metric(self.metrics(), name)

    def wait_for(self, condition, timeout: float = 30.0, interval: float = 0.05, what: str = "metrics did not settle"
                 ) -> dict[str, float]:
        """Polls /metrics until `condition(values)` holds; AssertionError with the last values if not.
        The timeout bounds a wait for an event the server reports, it times nothing."""
        deadline = time.monotonic() + timeout
        while True:
            values = self.metrics()
            if condition(values):
                return values
            if time.monotonic() > deadline:
                shown = self.implementation.metrics.idle if self.implementation.metrics else ()
                raise AssertionError(f"{what} within {timeout} s: "
                                     + ", ".join(f"{n.removeprefix('higgs_serve_')} {metric(values, n):g}" for n in shown))
            time.sleep(interval)


class RemoteServer(Server):
    """A server someone else started (--server-url): the suite reads it and never stops it."""

    def __init__(self, url: str, implementation: Implementation, default_max_tokens: int | None = None):
        super().__init__(url, implementation, default_max_tokens=default_max_tokens)
        try:
            listed = self.client.get("/v1/models", timeout=30.0)
        except httpx.TransportError as error:
            raise RuntimeError(f"--server-url {url}: no server answers there ({error}): start "
                               f"{implementation.name}'s server first (docs/implementations.md); the suite judges "
                               f"only the server at the URL given, never another in its place") from None
        assert listed.status_code == 200, f"GET {url}/v1/models answered {listed.status_code}: {listed.text[:300]}"
        served = [m["id"] for m in listed.json()["data"]]
        assert served, f"GET {url}/v1/models lists no model"
        self.model = implementation.model or served[0]
        assert self.model in served, f"the adapter sends model {self.model!r}; {url} serves {served}"


class ServerProcess(Server):
    def __init__(self, checkpoint, profile: str, platform: str, overrides: dict, workdir: Path, voices: Path):
        port = free_port()
        super().__init__(f"http://127.0.0.1:{port}", REFERENCE, MODEL_NAME)
        self.port = port
        self.log_path = workdir / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(serve_command(checkpoint, profile, platform, overrides, port, voices), cwd=ROOT,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)

    def wait_healthy(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if self.client.get("/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the server was not healthy within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # uvicorn shuts down, the app shuts the engine down
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the server's own session: it and its engine
                self.proc.wait(timeout=30)
        self._log.close()


def metric_names(text: str) -> set[str]:
    """The metric names of Prometheus text: each series' name, and each name a `# TYPE NAME KIND` line declares.
    A labelled family has no series until its first label set is used (prometheus_client writes only its # HELP
    and # TYPE lines), so a counter of aborts that no client has caused yet is declared, not absent. A counter
    declared without its _total suffix (OpenMetrics) declares the NAME_total its series carry."""
    names = {name.split("{", 1)[0] for name in parse_metrics(text)}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[:2] == ["#", "TYPE"]:
            names.add(parts[2])
            if parts[3] == "counter" and not parts[2].endswith("_total"):
                names.add(parts[2] + "_total")
    return names


def body_for(prompt: dict, implementation: Implementation = REFERENCE, model: str | None = None, **extra) -> dict:
    """A repeatable speech request for a talker prompt (greedy on ours; its reference audio as a WAV, drawn at
    a duration the implementation accepts: Implementation.fit_ref_audio), in the implementation's spelling
    (conformance/serving/implementations.py)."""
    voice = extra.get("voice", implementation.voice)
    spec = implementation.fit_ref_audio(prompt["ref_audio"]) if prompt.get("ref_audio") else None
    ref_wav = wav_bytes(talker_cases.reference_audio(spec)) if spec else None
    ref_text = prompt.get("ref_text") if (ref_wav is not None or voice != implementation.voice) else None
    return implementation.body(model or MODEL_NAME, prompt["text"], ref_wav=ref_wav, ref_text=ref_text, **extra)


def wav_bytes(samples: np.ndarray, sample_rate: int = talker_cases.REF_AUDIO_RATE) -> bytes:
    return wav_file(pcm16(samples), sample_rate)


def pcm_of_wav(data: bytes, streamed: bool) -> bytes:
    """The PCM of a WAV response, after checking its header: exact sizes when whole, the
    "unknown length" sizes (0xFFFFFFFF) when streamed."""
    header = parse_header(data)
    assert (header["channels"], header["sample_rate"], header["bits"]) == (1, 24000, 16), (
        f"the WAV header describes other audio than 24 kHz mono 16-bit: {header}")
    assert (header["byte_rate"], header["block_align"]) == (48000, 2), (
        f"byte rate / block align of another format: {header}")
    pcm = data[HEADER_BYTES:]
    if streamed:
        assert (header["riff_size"], header["data_size"]) == (0xFFFFFFFF, 0xFFFFFFFF), (
            f"a streamed WAV header claims a length: {header}")
    else:
        assert header["data_size"] == len(pcm), f"the header claims {header['data_size']} data bytes, sent {len(pcm)}"
        assert header["riff_size"] == 36 + len(pcm), f"RIFF size {header['riff_size']} for {len(pcm)} data bytes"
    return pcm


def as_float(pcm: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0)


def within(bound: dict, stream: bytes, whole: bytes) -> None:
    """Streamed 16-bit PCM against the whole answer's: equal lengths, and `bound`'s SNR and largest
    difference (reference.codec.streaming.agreement)."""
    assert len(stream) == len(whole) > 0, f"streamed {len(stream)} bytes, whole {len(whole)}: a gap or a truncation"
    measured = agreement(as_float(stream), as_float(whole))
    print(f"stream vs whole: {measured}")
    assert measured.snr_db >= bound["min_snr_db"] and measured.max_abs_err <= bound["max_abs_err"], measured


class SlowReader:
    """A streamed speech request over a raw socket that reads only what it is asked for, then
    leaves (close with unread bytes: a reset, as when a client goes away mid-stream).

    Its receive window is small and fixed (SO_RCVBUF: no autotuning) and its segments are small
    (TCP_MAXSEG): Linux sizes the server's send buffer from the segment size, so the bytes the
    server can hand to the kernel for this client stay small (182 KiB measured with these
    values, against 3.9 MB with loopback's 64 KiB segments, which took a whole 600-row answer of
    1.1 MB). Past that, plus the transport's 64 KiB and the stage's in-flight chunks, the
    server's send waits: a streamed answer of a few hundred rows cannot end while this client
    reads nothing, however slow or fast the server and the engine run.
    """

    RCVBUF = 4096  # the kernel doubles it
    MSS = 536

    def __init__(self, url: str, body: dict, timeout: float = 300.0):
        address = urlparse(url)
        payload = json.dumps(body).encode()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.RCVBUF)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, self.MSS)
        self.sock.settimeout(timeout)
        self.sock.connect((address.hostname, address.port))
        self.sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (address.netloc.encode(), len(payload)) + payload)
        self._buffer = b""
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        self.status = int(head[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:] if line)}
        self.body = b""  # what read_body has taken so far

    def __enter__(self) -> SlowReader:
        return self

    def __exit__(self, *exc) -> None:
        self.leave()

    def _until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            self._receive()
        head, _, self._buffer = self._buffer.partition(marker)
        return head

    def _exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._receive()
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _receive(self) -> None:
        data = self.sock.recv(4096)
        if not data:
            raise EOFError(f"the server closed the connection after {len(self.body)} body bytes")
        self._buffer += data

    def _chunk(self) -> bytes | None:
        """The next HTTP chunk of the body (chunked transfer encoding); None after the last."""
        assert self.headers.get("transfer-encoding") == "chunked", self.headers
        size = int(self._until(b"\r\n").split(b";")[0], 16)
        if size == 0:
            self._until(b"\r\n")  # no trailer fields: the empty line that ends the body
            return None
        data = self._exactly(size)
        self._exactly(2)  # the chunk's CRLF
        return data

    def read_body(self, at_least: int) -> bytes:
        """Whole HTTP chunks until the body read so far holds at least `at_least` bytes; returns
        the body so far. EOFError if the body ends first."""
        while len(self.body) < at_least:
            data = self._chunk()
            if data is None:
                raise EOFError(f"the body ended after {len(self.body)} bytes, {at_least} asked for")
            self.body += data
        return self.body

    def read_rest(self) -> bytes:
        """The rest of the body, to its last chunk; returns the whole body."""
        while (data := self._chunk()) is not None:
            self.body += data
        return self.body

    def leave(self) -> None:
        self.sock.close()
