"""The suite checks itself: every case file is valid, and a broken one is refused naming file and key."""

import pytest

from conformance import case_files

pytestmark = pytest.mark.cpu


def test_every_case_file_is_valid_and_has_a_schema():
    assert case_files.check_all() == []


@pytest.fixture
def scratch_case(tmp_path, monkeypatch):
    """Writes one case file into an empty cases folder that the loader then reads."""
    monkeypatch.setattr(case_files, "CASES_DIR", tmp_path / "cases")
    case_files._load.cache_clear()

    def write(kind: str, text: str) -> None:
        path = tmp_path / "cases" / f"{kind}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    yield write
    case_files._load.cache_clear()


GOOD_PROMPTS = """\
checkpoint: {size: tiny, seed: 0}
max_tokens: 8
prompts:
  - {id: hello, description: a short prompt, text: Hello.}
"""


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("max_tokens: 8", "max_tokens: eight"), "max_tokens: 'eight' is not of type 'integer'"),
        (("max_tokens: 8", "max_tokens: 8\nmax_token: 9"), "(top level): Additional properties are not allowed ('max_token'"),
        (("text: Hello.}", "text: Hello., colour: red}"), "prompts/0: Unevaluated properties are not allowed ('colour'"),
        (("{id: hello,", "{id: Hello World,"), "prompts/0/id: 'Hello World' does not match"),
        (("description: a short prompt", "description: it should speak"), "prompts/0/description: 'it should speak'"),
        (("{id: hello, description: a short prompt, text: Hello.}",
          "{id: hello, description: one, text: A.}\n  - {id: hello, description: two, text: B.}"),
         "prompts/1/id: id 'hello' repeats"),
    ],
    ids=["wrong_type", "unknown_top_level_key", "unknown_case_key", "bad_id", "should_wording", "repeated_id"],
)
def test_a_broken_case_file_is_refused_naming_the_file_and_the_key(tmp_path, scratch_case, change, named):
    text = GOOD_PROMPTS.replace(*change)
    assert text != GOOD_PROMPTS
    scratch_case("talker/prompts", text)
    with pytest.raises(case_files.CaseFileError) as caught:
        case_files.load("talker/prompts")
    message = str(caught.value)
    assert message.startswith(f"{tmp_path}/cases/talker/prompts.yaml: ") and named in message, message


def test_the_unbroken_file_loads(scratch_case):
    scratch_case("talker/prompts", GOOD_PROMPTS)
    assert case_files.load("talker/prompts")["prompts"][0]["id"] == "hello"


def test_aliases_of_one_anchor_are_independent_copies():
    doc = case_files.independent_copy({"a": (shared := {"x": [1]}), "b": shared})
    doc["a"]["x"].append(2)
    assert doc["b"]["x"] == [1]
