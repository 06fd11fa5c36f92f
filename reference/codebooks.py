"""The audio vocabulary of Higgs Audio v3, and where a checkpoint stores the audio side.

8 codebooks of 1026 ids each: codes 0..1023, then BOC (begin of codes: the delay pattern's
lead-in) and EOC (end of codes: its ramp-down). Read from the checkpoint's
`audio_encoder_config` upstream; these are the values every published checkpoint uses.
"""

NUM_CODEBOOKS = 8
CODEBOOK_SIZE = 1024  # real codes: 0 .. 1023
CODEBOOK_VOCAB = CODEBOOK_SIZE + 2  # + BOC + EOC
BOC = 1024
EOC = 1025

# Checkpoint name prefixes of the audio side (the rest is the Qwen3 backbone and text head).
CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."  # the bundled audio tokenizer
AUDIO_EMBEDDING = "tied.embedding.modality_embeddings.0.embedding.weight"  # fused [8 * 1026, D]
AUDIO_HEAD_PREFIX = "tied.head.modality_heads.0."  # the audio head when not tied to the embedding
