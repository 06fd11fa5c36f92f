"""Quality floors (issue #9): word error rate and speaker similarity of synthesised speech.

- `wer`: English normalisation and WER (jiwer);
- `asr`, `speaker`: the scorers (Whisper base through faster-whisper and Resemblyzer from the
  registry, or production models from local folders named by environment variables);
- `scorers`: which scorers run, with the floors each carries (cases/quality/floors.yaml);
- `clips`: reference and control audio made with espeak-ng, and the degradations of the controls;
- `stats`: confidence intervals over the prompt set and the V2 - V1 parity bound;
- `case_data`: the quality case files (cases/quality/);
- `talker_audio`: the one module that imports the rest of the project (engine, codec, speech API).

Everything here works on 16 kHz mono float32 numpy arrays.
"""

SAMPLE_RATE = 16_000
