"""Check that the deploy-profile tests catch the removal of each rule (a small mutation run).

    python -m conformance.mutate_deploy [--baseline] [--list] [INDEX ...]

Each mutation copies the tree to a temporary directory, breaks one rule of reference/ there
(a textual edit that must match exactly once), runs the deploy tests and reports RED (caught)
or GREEN (survived). Exit status 1 if any mutation survives or no longer applies. Not collected by
pytest: it takes a few minutes (one pytest run per mutation). The mechanics (copy, edit, run,
verdict) live in conformance/mutation_run.py.
"""

from __future__ import annotations

import sys

from conformance.mutation_run import Mutation, main

TESTS = [
    "conformance/test_deploy_matrix.py",
    "conformance/test_deploy_flags.py",
    "conformance/test_deploy_overlays.py",
    "conformance/test_deploy_sampling.py",
    "conformance/test_deploy_precedence.py",
    "tests/test_deploy_profiles.py",
    "tests/test_deploy_platform_matrix.py",
    "tests/test_feature_switches.py",
    "tests/test_sampling_validation.py",
]
ORDER_TESTS = [
    "conformance/test_deploy_precedence.py::test_deploy_rule_order",
    "conformance/test_deploy_precedence.py::test_runner_rule_order",
]
DP, PM, FS = "reference/deploy/resolve.py", "reference/deploy/platform_matrix.py", "reference/deploy/switches.py"
SV, PS, PL = "reference/deploy/sampling.py", "reference/deploy/schema.py", "reference/deploy/loader.py"

# (name, file, old text, new text); "REMOVE" mutations run without the rule-order tests, so a
# behaviour test has to catch them.
MUTATIONS: list[tuple[str, str, str, str]] = []
for _rule in ("override", "first-chunk-switch", "platform-section", "matrix-restore", "profile", "runner-default",
              "schema-default"):
    MUTATIONS.append((f"REMOVE precedence rule {_rule}", DP, "\ndef pick(ctx",
                      f"\nPRECEDENCE = tuple(r for r in PRECEDENCE if r.name != {_rule!r})\n\n\ndef pick(ctx"))
for _rule in ("explicit-v1", "platform-runs-v2", "platform-pins-v1", "explicit-v2-unavailable"):
    MUTATIONS.append((f"REMOVE runner rule {_rule}", PM, "\ndef select_runner(",
                      f"\nRUNNER_RULES = tuple(r for r in RUNNER_RULES if r.name != {_rule!r})\n\n\ndef select_runner("))
MUTATIONS += [
    ("reorder: matrix-restore before platform-section", DP, "\ndef pick(ctx",
     "\nPRECEDENCE = (*PRECEDENCE[:2], PRECEDENCE[3], PRECEDENCE[2], *PRECEDENCE[4:])\n\n\ndef pick(ctx"),
    ("top-level codec beats a platform restore", DP, "lambda c, p: p in c.platform_section,",
     "lambda c, p: p in c.platform_section and p not in c.profile,"),
    ("explicit v2 falls back to V1 silently", PM,
     '_RunnerRule("explicit-v2-unavailable", lambda req, row: True, _raise_unavailable)',
     '_RunnerRule("explicit-v2-unavailable", lambda req, row: True, lambda req, row, o: RunnerChoice("v1", True, "x", "x"))'),
    ("cpu marked as running V2", PM, '"cpu", runs_v2=False,', '"cpu", runs_v2=True,'),
    ("env left unset for v1", PM, 'return {"VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "v2" else "0"}',
     'return {"VLLM_USE_V2_MODEL_RUNNER": "1"} if runner == "v2" else {}'),
    ("structural switch off accepted under V2", FS, "if switch.structural and value is False:", "if False:"),
    ("V1 switch warning dropped", FS,
     "            warnings.append(v1_ignored_warning([n for n in SWITCH_NAMES if n in explicit]))", "            pass"),
    ("V1 switch warning once per switch", FS,
     "            warnings.append(v1_ignored_warning([n for n in SWITCH_NAMES if n in explicit]))",
     "            warnings.extend(v1_ignored_warning([n]) for n in SWITCH_NAMES if n in explicit)"),
    ("resolve_switches logs (once per worker)", FS,
     "    return SwitchResolution(TalkerOptions(runner=runner, **values), where, tuple(warnings))",
     "    import logging\n    for w in warnings:\n        logging.getLogger('higgs_ref.deploy').warning(w)\n"
     "    return SwitchResolution(TalkerOptions(runner=runner, **values), where, tuple(warnings))"),
    ("V1 honours explicit switches", FS, "        values = {n: False for n in SWITCH_NAMES}",
     "        values = {n: bool(explicit.get(n, False)) for n in SWITCH_NAMES}"),
    ("enforce_eager keeps full decode graphs", FS, '        if enforce_eager and values["full_decode_cudagraphs"]:',
     "        if False:"),
    ("full_decode_cudagraphs does not change the cudagraph mode", FS,
     'return "FULL_AND_PIECEWISE" if options.full_decode_cudagraphs else "PIECEWISE"', 'return "FULL_AND_PIECEWISE"'),
    ("first chunk window alignment unchecked", FS, "    if profile_frames % CODEC_WINDOW_FRAMES:", "    if False:"),
    ("TalkerOptions.from_dict accepts unknown keys", "reference/talker/options.py", "        if unknown or missing:", "        if missing:"),
    ("V1 async warning dropped", DP, 'if ctx.choice.runner == "v1" and values[("async_scheduling",)]:', "if False:"),
    ("warnings logged twice", DP, "        logger.warning(message)",
     "        logger.warning(message)\n        logger.warning(message)"),
    ("capture sizes passed while eager", DP, "    if not eager and sizes is not None:", "    if sizes is not None:"),
    ("default_sampling_params not validated", DP,
     "        sampling.update(validate_sampling_params({path[1]: values[path]}, ctx.choice.runner, where=where))",
     "        sampling[path[1]] = values[path]"),
    ("connector topology unchecked", DP, "    _check_topology(config, profile_name)\n", ""),
    ("overlay may clear an inherited restore", PL, "            continue  # nothing to clear",
     "            pass\n        continue  # nothing to clear"),
    ("unknown connector in a platform section accepted", PL,
     '        if path[2] == "connectors" and path[3] not in connectors:', "        if False:"),
    ("unknown stage in a platform section accepted", PL, '        if path[2] == "stages" and path[3] not in stages:',
     "        if False:"),
    ("anchors stay shared", PL, "return independent_copy(yaml.safe_load(fh))", "return yaml.safe_load(fh)"),
    ("base_config cycle unchecked", PL, "        if resolved in seen:", "        if False:"),
    ("non-mapping connector override accepted", PS,
     '            self.fail(path, f"must be a mapping, got {type(value).__name__} {value!r}")', "            return {}"),
    ("stage without stage_id accepted", PS, 'if not isinstance(stage, Mapping) or "stage_id" not in stage:',
     "if not isinstance(stage, Mapping):"),
    ("unknown profile key accepted", PS, '                self.fail(path, "unknown key (see reference/deploy/schema.py)")',
     "                pass"),
    ("logprobs 0 accepted", SV, '    "logprobs": (None,),', '    "logprobs": (None, 0),'),
    ("unknown sampling field passes", SV, '            raise SamplingParamsError(\n                f"{where}: unknown',
     '            if False: raise SamplingParamsError(\n                f"{where}: unknown'),
    ("bool counted as a neutral number", SV, "        if isinstance(value, bool) != isinstance(n, bool):\n            continue\n",
     ""),
    ("non-neutral values pass", SV, "            if not _is_neutral(value, neutral):\n                runner_name",
     "            if False:\n                runner_name"),
    ("neutral table misses a vLLM field", SV, '    "trace_decode_token_ids": (None,),\n', ""),
    ("supported-field range check dropped", SV, "    if not ok:\n        raise SamplingParamsError",
     "    if False:\n        raise SamplingParamsError"),
    ("V1 message promises V1 support", SV, '"Model Runner V1 does not add it either', '"Use Model Runner V1 for it'),
]


def pytest_args(name: str) -> tuple[str, ...]:
    deselect = [a for t in ORDER_TESTS for a in ("--deselect", t)] if name.startswith("REMOVE") else []
    return (*deselect, *TESTS)


def mutations() -> list[Mutation]:
    return [Mutation(name, path, old, new, pytest_args(name)) for name, path, old, new in MUTATIONS]


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_deploy_"))
