"""An OpenAI-compatible speech server over the reference talker (AsyncLLM) and codec.

    higgs-serve --model DIR [--profile default] [--host 127.0.0.1 --port 8000]    (or python -m reference.serve)

- protocol.py  the request body: OpenAI's speech fields plus the talker's, each error naming its field
- voices.py    named voices (a folder of WAVs) and reference WAVs sent in the request
- wav.py       PCM16 and WAV headers (exact lengths, or the "unknown length" header when streaming)
- metrics.py   Prometheus metrics of the server (vLLM's own metrics are served beside them)
- audio.py     the audio of one request: streamed chunk by chunk, or whole with the offline decode
- app.py       the FastAPI app: /v1/audio/speech, /v1/models, /health, /metrics
- __main__.py  the command line: resolve the profile, start AsyncLLM and the codec, run uvicorn
"""
