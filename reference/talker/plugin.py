"""vLLM plugin (entry point group `vllm.general_plugins`): registers the Higgs v3 config and talker."""

from reference.talker.config import ARCHITECTURE, register_with_transformers


def register() -> None:
    from vllm import ModelRegistry

    register_with_transformers()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "reference.talker.model:HiggsMultimodalQwen3ForConditionalGeneration")
