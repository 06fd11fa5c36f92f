"""Check that the deploy tests catch the removal of each rule (a small mutation run).

    python -m conformance.mutations.deploy [--baseline] [--list] [--jobs N] [INDEX ...]

Each mutation copies the tree to a temporary directory, breaks one rule of reference/ there
(a textual edit that must match exactly once), runs the deploy tests and reports RED (caught)
or GREEN (survived). Exit status 1 if any mutation survives or no longer applies. Not collected by
pytest: it takes a few minutes (one pytest run per mutation). The mechanics (copy, edit, run,
verdict) live in conformance/mutations/run.py.

The three defects of issue #14 (a platform's connector override replacing instead of merging, a
platform stage override landing on the wrong stage_id, a V1 platform fallback keeping the V2
geometry) run against conformance/deploy/test_deploy_upstream.py alone: they are caught on vllm-omni's
own Higgs files (the installed wheel) or overlays on them.

The BOOT mutations plant a difference between what the resolved profile says and what the engine
is started with; each runs one CPU case of conformance/deploy/test_profile_boot.py (an engine boot, about
a minute here), where the read-back of what vLLM built (reference/deploy/readback.py) must catch it.
"""

from __future__ import annotations

import sys

from conformance.mutations.run import Mutation, main, mutations_from_table

TESTS = [
    "conformance/deploy/test_deploy_matrix.py",
    "conformance/deploy/test_deploy_flags.py",
    "conformance/deploy/test_deploy_overlays.py",
    "conformance/deploy/test_deploy_sampling.py",
    "conformance/deploy/test_deploy_precedence.py",
    "conformance/deploy/test_deploy_upstream.py",
    "conformance/deploy/test_deploy_corpus.py",
    "tests/test_deploy_profiles.py",
    "tests/test_deploy_platform_matrix.py",
    "tests/test_feature_switches.py",
    "tests/test_sampling_validation.py",
]
UPSTREAM_TESTS = ["conformance/deploy/test_deploy_upstream.py"]
ORDER_TESTS = [
    "conformance/deploy/test_deploy_precedence.py::test_deploy_rule_order",
    "conformance/deploy/test_deploy_precedence.py::test_runner_rule_order",
]
RS, PC, LA = "reference/deploy/resolve.py", "reference/deploy/precedence.py", "reference/deploy/launch.py"
PM, FS = "reference/deploy/platform_matrix.py", "reference/deploy/switches.py"
SV, LD = "reference/deploy/sampling.py", "reference/deploy/loader.py"
SC, SJ = "reference/deploy/schema.py", "reference/deploy/schema.json"

# (name, file, old text, new text); "REMOVE" mutations run without the rule-order tests, so a
# behaviour test has to catch them; "UPSTREAM" mutations run with UPSTREAM_TESTS only.
MUTATIONS: list[tuple[str, str, str, str]] = []
for _rule in ("override", "first-chunk-switch", "platform-section", "matrix-restore", "profile", "runner-default",
              "schema-default"):
    MUTATIONS.append((f"REMOVE precedence rule {_rule}", PC, "\ndef pick(ctx",
                      f"\nPRECEDENCE = tuple(r for r in PRECEDENCE if r.name != {_rule!r})\n\n\ndef pick(ctx"))
for _rule in ("explicit-v1", "platform-runs-v2", "platform-pins-v1", "explicit-v2-unavailable"):
    MUTATIONS.append((f"REMOVE runner rule {_rule}", PM, "\ndef select_runner(",
                      f"\nRUNNER_RULES = tuple(r for r in RUNNER_RULES if r.name != {_rule!r})\n\n\ndef select_runner("))
MUTATIONS += [
    # issue #14: caught on upstream's files
    ("UPSTREAM platform connector override replaces instead of merging", RS,
     '        profile={p: e for p, e in merged.items() if p[0] != "platforms"},',
     '        profile={p: e for p, e in merged.items() if p[0] != "platforms" and not (p[0] == "connectors"'
     ' and any(q[2:4] == p[:2] for q in merged if q[:2] == prefix))},'),
    ("UPSTREAM platform stage override applied to the next stage_id", RS,
     '        platform_section={p[2:]: (v, f"{o} platforms.{platform}") for p, (v, o) in merged.items() if p[:2] == prefix},',
     '        platform_section={(p[2:] if p[2] != "stages" else ("stages", p[3] + 1, *p[4:])): (v, o) '
     'for p, (v, o) in merged.items() if p[:2] == prefix},'),
    ("UPSTREAM V1 platform fallback keeps the V2 geometry", PC,
     '    if request_rule == "platform-section" and requested == "v1" and file_request in ("v2", "prefer-v2"):',
     "    if False:"),
    # precedence and runner
    ("reorder: matrix-restore before platform-section", PC, "\ndef pick(ctx",
     "\nPRECEDENCE = (*PRECEDENCE[:2], PRECEDENCE[3], PRECEDENCE[2], *PRECEDENCE[4:])\n\n\ndef pick(ctx"),
    ("file geometry beats a platform restore", PC, "lambda c, p: p in c.platform_section,",
     "lambda c, p: p in c.platform_section and p not in c.profile,"),
    ("platform connectors dropped (upstream's behaviour)", RS,
     "for p, (v, o) in merged.items() if p[:2] == prefix},",
     'for p, (v, o) in merged.items() if p[:2] == prefix and p[2] != "connectors"},'),
    ("explicit v2 falls back to V1 silently", PM,
     '_RunnerRule("explicit-v2-unavailable", lambda req, row: True, _raise_unavailable)',
     '_RunnerRule("explicit-v2-unavailable", lambda req, row: True, lambda req, row, o: RunnerChoice("v1", True, "x", "x"))'),
    ("cpu marked as running V2", PM, '"cpu", runs_v2=False,', '"cpu", runs_v2=True,'),
    ("env left unset for v1", PM, 'return {"VLLM_USE_V2_MODEL_RUNNER": "1" if runner == "v2" else "0"}',
     'return {"VLLM_USE_V2_MODEL_RUNNER": "1"} if runner == "v2" else {}'),
    # switches
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
    ("enforce_eager keeps the graph switches on", FS, "            if enforce_eager and values[name]:",
     "            if False:"),
    ("full_decode_cudagraphs does not change the cudagraph mode", FS,
     'return "FULL_AND_PIECEWISE" if options.full_decode_cudagraphs else "PIECEWISE"', 'return "FULL_AND_PIECEWISE"'),
    ("first chunk window alignment unchecked", FS, "    if profile_frames % CODEC_WINDOW_FRAMES:", "    if False:"),
    ("TalkerOptions.from_dict accepts unknown keys", "reference/talker/options.py", "        if unknown or missing:",
     "        if missing:"),
    # resolution and the launcher's view of stage 0
    ("V1 async warning dropped", RS, 'if ctx.choice.runner == "v1" and stage0.get("async_scheduling"):', "if False:"),
    ("warnings logged twice", RS, "        logger.warning(message)",
     "        logger.warning(message)\n        logger.warning(message)"),
    ("connector references unchecked", RS, "    _check_topology(config, origins, name)\n", ""),
    ("capture sizes passed while eager", LA, '        compilation.pop("cudagraph_capture_sizes", None)', "        pass"),
    ("cudagraph_mode set in the file ignored", LA,
     '    compilation["cudagraph_mode"] = asked if asked is not None and not eager else derived',
     '    compilation["cudagraph_mode"] = derived'),
    ("default_sampling_params not validated", LA,
     "        sampling.update(validate_sampling_params({field_name: value}, runner, where=where))",
     "        sampling[field_name] = value"),
    ("CUDA-only attention backend not flagged", LA,
     '        if stage.get("attention_backend") in CUDA_ONLY_ATTENTION', "        if False"),
    ("reserved stage keys passed to the engine", LA,
     "    kwargs = {k: independent_copy(v) for k, v in stage0.items() if k not in RESERVED_STAGE_KEYS}",
     "    kwargs = {k: independent_copy(v) for k, v in stage0.items()}"),
    # loader and merge
    ("overlay may clear an inherited platform section", LD,
     "            continue  # `cpu:` with nothing under it is just an empty section", "            pass\n        continue"),
    ("unknown connector in a platform section accepted", LD,
     '        if path[2] == "connectors" and path[3] not in connectors:', "        if False:"),
    ("unknown stage in a platform section accepted (upstream skips it)", LD,
     '        if path[2] == "stages" and path[3] not in stages:', "        if False:"),
    ("anchors stay shared", LD, "return independent_copy(yaml.load(fh, Loader=_NoDuplicates))",
     "return yaml.load(fh, Loader=_NoDuplicates)"),
    ("duplicate keys accepted", LD, "            if key in seen:", "            if False:"),
    ("base_config cycle unchecked", LD, "        if resolved in seen:", "        if False:"),
    ("sampling defaults replaced whole by an overlay", SC, 'DEEP_MERGE_KEYS = (\n    "default_sampling_params",',
     "DEEP_MERGE_KEYS = ("),
    ("compilation_config merged key by key", SC, 'DEEP_MERGE_KEYS = (\n', 'DEEP_MERGE_KEYS = (\n    "compilation_config",\n'),
    ("stage_id listed twice accepted", SC, "            if sid in seen:", "            if False:"),
    # the JSON Schema
    ("unknown top-level key accepted", SJ, '  "additionalProperties": false,\n  "patternProperties": {"^x-"',
     '  "additionalProperties": true,\n  "patternProperties": {"^x-"'),
    ("unknown platform-section key accepted", SJ,
     '"platform": {\n      "type": ["object", "null"],\n      "additionalProperties": false,',
     '"platform": {\n      "type": ["object", "null"],\n      "additionalProperties": true,'),
    ("stage without stage_id accepted", SJ, '"required": ["stage_id"],', '"required": [],'),
    ("non-mapping connector accepted", SJ, '"connector": {\n      "type": ["object", "null"],',
     '"connector": {\n      "type": ["object", "null", "integer"],'),
    # sampling
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




def boot_case(case_id: str) -> tuple[str, ...]:
    return (f"conformance/deploy/test_profile_boot.py::test_profile_boots_the_runner_it_resolved[{case_id}]",)


# (name, file, old text, new text, pytest arguments that must fail): the read-back at engine boot.
BOOT_MUTATIONS: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    ("BOOT the talker engine gets the codec stage's max_num_seqs", RS,
     "    kwargs, mode_warnings = engine_kwargs(stage0, ctx.options, origins)",
     '    kwargs, mode_warnings = engine_kwargs({**stage0, "max_num_seqs": config["stages"][CODEC_STAGE]["max_num_seqs"]},'
     " ctx.options, origins)", boot_case("default_on_cpu")),
    ("BOOT the launcher fills in an attention backend the profile did not ask for (the CPU ignores it)", LA,
     '    kwargs.setdefault("enforce_eager", eager)',
     '    kwargs.setdefault("enforce_eager", eager)\n    kwargs.setdefault("attention_backend", "TRITON_ATTN")',
     boot_case("default_on_cpu")),
    ("BOOT enable_prefix_caching never reaches the engine (treated as a reserved key)", LA,
     "    kwargs = {k: independent_copy(v) for k, v in stage0.items() if k not in RESERVED_STAGE_KEYS}",
     '    kwargs = {k: independent_copy(v) for k, v in stage0.items() if k not in (*RESERVED_STAGE_KEYS, "enable_prefix_caching")}',
     boot_case("default_on_cpu_explicit_engine_settings")),
]


def pytest_args(name: str) -> tuple[str, ...]:
    if name.startswith("UPSTREAM"):
        return tuple(UPSTREAM_TESTS)
    deselect = [a for t in ORDER_TESTS for a in ("--deselect", t)] if name.startswith("REMOVE") else []
    return (*deselect, *TESTS)


def mutations() -> list[Mutation]:
    table = [Mutation(name, path, old, new, pytest_args(name)) for name, path, old, new in MUTATIONS]
    return table + mutations_from_table(BOOT_MUTATIONS)


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_deploy_"))
