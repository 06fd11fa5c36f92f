"""`python -m conformance.talker.check_checkpoint DIR` on the dummy checkpoints, and on broken copies."""

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from conformance.talker import check_checkpoint
from higgs_dummy.cache import cached_checkpoint

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("flavour", ["greedy", "tied_text_head", "untied_audio_head"])
def test_every_dummy_flavour_matches_every_fact(flavour):
    findings = check_checkpoint.check(cached_checkpoint("tiny", 0, flavour))
    assert [str(f) for f in findings if not f.ok] == []
    assert len(findings) >= 15


def _broken_copy(tmp_path, edit_config=None, drop_tensor=None, add_token=None):
    folder = shutil.copytree(cached_checkpoint("tiny", 0), tmp_path / "ckpt")
    if edit_config:
        config = json.loads((folder / "config.json").read_text())
        edit_config(config)
        (folder / "config.json").write_text(json.dumps(config))
    if drop_tensor:
        tensors = load_file(str(folder / "model.safetensors"))
        del tensors[drop_tensor]
        save_file(tensors, str(folder / "model.safetensors"))
    if add_token:
        data = json.loads((folder / "tokenizer.json").read_text())
        data["added_tokens"].append({**data["added_tokens"][-1], "id": data["added_tokens"][-1]["id"] + 1,
                                     "content": add_token})
        (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("breakage", "what", "detail"),
    [
        ({"drop_tensor": "tied.head.text_head.weight"}, "talker tensors the tie flags require",
         "tied.head.text_head.weight"),
        ({"edit_config": lambda c: c["audio_encoder_config"].update(tie_word_embeddings=False),
          "drop_tensor": "tied.head.modality_heads.0.weight"}, "talker tensors the tie flags require",
         "tied.head.modality_heads.0.weight"),
        ({"add_token": "<|audio_placeholder|>"}, "no specials beyond upstream's", "<|audio_placeholder|>"),
        ({"edit_config": lambda c: c["audio_encoder_config"].update(num_codebooks=9)},
         "audio_encoder_config.num_codebooks", "9, expected 8"),
        ({"drop_tensor": "tied.embedding.modality_embeddings.0.model.fc.weight"},
         "audio tokenizer encoder tensors", "fc.weight"),
        ({"drop_tensor": "tied.embedding.modality_embeddings.0.model.fc2.weight"}, "codec decode tensors", "missing"),
    ],
    ids=["text_head_missing", "untied_audio_head_missing", "project_only_token", "codebooks", "encoder_fc", "decoder_fc2"],
)
def test_a_broken_checkpoint_is_reported_naming_the_fact(tmp_path, breakage, what, detail):
    findings = check_checkpoint.check(_broken_copy(tmp_path, **breakage))
    bad = [f for f in findings if not f.ok]
    assert [f.what for f in bad] == [what], [str(f) for f in bad]
    assert detail in bad[0].detail


def test_the_command_exits_nonzero_on_a_mismatch(tmp_path, capsys):
    assert check_checkpoint.main([str(cached_checkpoint("tiny", 0))]) == 0
    folder = _broken_copy(tmp_path, drop_tensor="tied.head.text_head.weight")
    assert check_checkpoint.main([str(folder)]) == 1
    assert "MISMATCH talker tensors the tie flags require" in capsys.readouterr().out
