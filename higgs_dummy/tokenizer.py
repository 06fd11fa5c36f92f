"""A byte-level tokenizer in the Hugging Face format with the Higgs v3 special tokens at fixed ids.

The specials are exactly upstream's: <|tts|>, <|text|>, <|audio|>, <|ref_text|>, <|ref_audio|>,
plus <|endoftext|> (eos) and <|audio_end|>.

Text is tokenized byte by byte (ids 0..255); ids between the bytes and the special tokens are
reserved fillers, so every special token sits at the id the size table asks for.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from reference.talker import special_tokens as st

# id -> token; the 4b ids of <|endoftext|> and <|audio_end|> are the real checkpoint's.
SPECIAL_IDS = {
    "tiny": {
        256: st.END_OF_TEXT,
        257: st.TTS,
        258: st.TEXT,
        259: st.AUDIO,
        260: st.REF_TEXT,
        261: st.REF_AUDIO,
        262: st.AUDIO_END,
    },
    "4b": {
        151643: st.END_OF_TEXT,
        151671: st.AUDIO_END,
        151672: st.TTS,
        151673: st.TEXT,
        151674: st.AUDIO,
        151675: st.REF_TEXT,
        151676: st.REF_AUDIO,
    },
}
NUM_BYTES = 256


def _added_token(token_id: int, content: str, special: bool) -> dict:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def write_tokenizer(out_dir: Path, size: str, model_max_length: int) -> None:
    """Writes tokenizer.json and tokenizer_config.json; `AutoTokenizer` loads them offline."""
    specials = SPECIAL_IDS[size]
    first_special = min(specials)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    # Fillers below the first special keep the plain vocabulary contiguous.
    vocab.update({f"<|reserved_{i}|>": i for i in range(NUM_BYTES, first_special)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    data = json.loads(tokenizer.to_str())
    # Added tokens get consecutive ids on load, so gaps between specials are filled too.
    data["added_tokens"] = [
        _added_token(i, specials[i], True) if i in specials else _added_token(i, f"<|reserved_{i}|>", False)
        for i in range(first_special, max(specials) + 1)
    ]
    (out_dir / "tokenizer.json").write_text(json.dumps(data, sort_keys=True, ensure_ascii=False))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": st.END_OF_TEXT,
        "pad_token": st.END_OF_TEXT,
        "model_max_length": model_max_length,
        "additional_special_tokens": [specials[i] for i in sorted(specials)],
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, sort_keys=True, indent=1))
