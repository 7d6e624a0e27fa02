"""The regression test each patch of a transformers series adds, in transformers' own layout.

A site patch routes a cast through `get_module_input_dtype`; its test builds the class whose
method it changes from a tiny config with seeded weights (nothing downloaded), replaces the
layer the cast reads (`self.wo`, `self.patch_embedding`, ...) with the storage a quantizer leaves
there, runs the changed method on CPU and asserts that the output is finite, keeps the
activation's dtype and is close to the unquantized twin (a deep copy of the module before the
layer was replaced). The storage is the one that shows the patched bug:

- "4bit": real bitsandbytes NF4 (`Linear4bit`, uint8 `Params4bit`, computing in float32): the
  release casts the activation to uint8, which destroys it (error about 100%) or fails the matmul;
- "fp8": a linear whose weight is stored in `float8_e4m3fn` and that computes in its input's
  dtype (what FP8 checkpoints' layers keep): for the sites whose guard skips only integer or
  8-bit integer storage (`is_floating_point`, `!= torch.int8 and != torch.uint8`), which bitsandbytes
  4-bit passes; the release casts the activation to fp8, and the CPU matmul raises.

The storage a test uses need not be the backend the triage names for a site (HQQ, which leaves no
`.weight`, for a layer in `_keep_in_fp32_modules` that bitsandbytes skips): the test asserts that the
changed method is right whatever module a quantizer leaves there, and bitsandbytes 4-bit is the
quantizer that runs on CPU. A method whose own output is indices or a sum (a sparse-attention
indexer, an embedder adding positions) is judged by what the replaced layer returns inside it
(`compare="layer"`, a forward hook), which is what the cast decides.

The helper patch's test is a unit test of `get_module_input_dtype` over the storages (it fails at
import before the patch). What each class needs to be built and called is in `LAYER_CASES`, one
entry per class the series changes: a spec the generator refuses to guess. A changed class
without an entry gets no test, and the series README lists it (`missing`).

Every generated test is run against the release tree before and after the series
(:func:`run_tests`): it must fail on the release and pass on the patched tree
(tests/test_hf_regression.py, and the patch's Results section quotes the run).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path, PurePosixPath

from dtype_lint.core.records import record
from dtype_lint.core.writer import write_scratch_files
from dtype_lint.ecosystems.hf.series import PROOF_COMMAND

# The series conventions whose patches get these tests (the registry's `regression` role:
# migrate/migration.py calls `add_tests` and `readme_section` for a series in one of them).
CONVENTIONS: tuple[str, ...] = ("transformers",)


@record(frozen=True)
class LayerCase:
    """How a test builds and calls one changed class."""

    cls: str  # the class whose method the patch changes
    config: str  # expression: its tiny config (the config classes are imported by name)
    build: str  # expression: the module, from `config`
    call: str  # expression: the changed method called on `module` (seeded inputs built inline)
    targets: tuple[str, ...]  # the layers the changed casts read, as attribute paths from the module
    storage: str = "4bit"  # "4bit" | "fp8"
    output: str = "out"  # expression: the tensor compared, from the call's result `out`
    imports: tuple[str, ...] = ()  # config class names imported from `transformers`
    compare: str = "layer"  # "layer": what targets[0] returns inside the call; "output": `output`
    extra_imports: tuple[str, ...] = ()  # further import lines the call needs


_T5 = dict(d_model=64, d_ff=128, dropout_rate=0.0)
_T5_ACT = "dense_act_fn=\"relu\""


def _t5(cls: str, config_cls: str, gated: bool = False, extra: str = "") -> LayerCase:
    act = "dense_act_fn=\"gelu_new\", is_gated_act=True" if gated else _T5_ACT
    keyword_arg = ", ".join(f"{k}={v}" for k, v in _T5.items())
    return LayerCase(cls, f"{config_cls}({keyword_arg}, {act}{extra})", f"{cls}(config)",
                     "module(torch.randn(2, 5, 64))", ("wo",), imports=(config_cls,))


def _vision_mlp(cls: str, config_cls: str, ff: str) -> LayerCase:
    return LayerCase(cls, f"{config_cls}(hidden_size=64, {ff}=128, dropout_rate=0.0, dense_act_fn=\"gelu_new\")",
                     f"{cls}(config)", "module(torch.randn(2, 5, 64))", ("wo",), imports=(config_cls,))


def _ffn(cls: str, config_cls: str, dim: str) -> LayerCase:
    return LayerCase(cls, f"{config_cls}({dim}=64, activation_dropout=0.0, activation_function=\"relu\")",
                     f"{cls}(config, ffn_dim=128)", "module(torch.randn(2, 5, 64))", ("fc2",), storage="fp8",
                     imports=(config_cls,))


_INDEX = "hidden_size=64, index_n_heads=32, index_head_dim=32, index_topk=4"
# hidden_states, q_resid (q_lora_rank 32), (cos, sin) of an identity rotation, an additive causal mask
_HIDDEN, _Q_RESID = "torch.randn(2, 6, 64)", "torch.randn(2, 6, 32)"
_ROPE = "(torch.ones(2, 6, 16), torch.zeros(2, 6, 16))"
_MASK = "torch.zeros(2, 6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float(\"-inf\"))"


def _indexer(cls: str, config_cls: str, call: str, extra: str = ", q_lora_rank=32", rope: int = 16) -> LayerCase:
    """A sparse-attention indexer: `weights_proj` scores the heads; the method returns top-k
    indices, so the test compares what `weights_proj` returns inside it."""
    return LayerCase(cls, f"{config_cls}({_INDEX}, qk_rope_head_dim={rope}{extra}, num_hidden_layers=1)",
                     f"{cls}(config, layer_idx=0)",
                     call, ("weights_proj",), imports=(config_cls,))


_DSA_CALL = f"module({_HIDDEN}, {_Q_RESID}, {_ROPE}, {_MASK}, None)"


def _patch_embedder(cls: str, config_cls: str, config: str, call: str, target: str = "patch_embedding",
                    storage: str = "4bit", build: str = "") -> LayerCase:
    return LayerCase(cls, f"{config_cls}({config})", build or f"{cls}(config)", call, (target,),
                     storage=storage, imports=(config_cls,))


_BLIP2 = ("Blip2Config(vision_config={\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, "
          "\"num_attention_heads\": 4, \"image_size\": 32, \"patch_size\": 8}, qformer_config={\"hidden_size\": 64, "
          "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"intermediate_size\": 128, "
          "\"encoder_hidden_size\": 64, \"vocab_size\": 128, \"max_position_embeddings\": 32, "
          "\"use_qformer_text_input\": True}, num_query_tokens=4, "
          "image_text_hidden_size=32)")
_PIXELS32, _IDS = "torch.rand(2, 3, 32, 32)", "torch.randint(0, 128, (2, 6))"
_IDS_MASK = f"{_IDS}, torch.ones(2, 6, dtype=torch.long)"


def _blip2(cls: str, call: str, target: str) -> LayerCase:
    return LayerCase(cls, _BLIP2, f"{cls}(config)", call, (target,), imports=("Blip2Config",))


# Every replaced linear: in_features >= 64, out_features a multiple of 32 (bitsandbytes' CPU 4-bit).
_SPEECH = ("hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128, conv_dim=(64, 64), "
           "conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, "
           "codevector_dim=64, proj_codevector_dim=64, num_codevector_groups=2, num_codevectors_per_group=32, "
           "do_stable_layer_norm=True, feat_extract_norm=\"layer\", mask_time_prob=0.0")


def _pretraining(cls: str, config_cls: str, extra: str = "") -> LayerCase:
    """A speech model's pre-training head: the quantized codevectors go through `project_q`."""
    return LayerCase(cls, f"{config_cls}({_SPEECH}{extra})", f"{cls}(config)", "module(torch.randn(1, 1600))",
                     ("project_q",), imports=(config_cls,))


_TTS = ("hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, intermediate_size=128, "
        "flow_head_config={\"condition_dim\": 64}")


def _tts(cls: str, config_cls: str, prompt_id: int, bos_id: int, prompt_dim: int, extra: str = "") -> tuple:
    """A TTS backbone: latents enter through `audio_latent_proj`, a voice prompt through
    `audio_prompt_proj` (scattered into the prompt token's positions)."""
    config = f"{config_cls}({_TTS}{extra})"
    ids = f"torch.tensor([[{prompt_id}, {prompt_id}, {bos_id}, 7]])"
    return (LayerCase(cls, config, f"{cls}(config)", "module.embed_audio_latents(torch.randn(2, 3, 32))",
                      ("audio_latent_proj",), imports=(config_cls,)),
            LayerCase(cls, config, f"{cls}(config)",
                      f"module({ids}, audio_prompt_latents=torch.randn(1, 2, {prompt_dim}))", ("audio_prompt_proj",),
                      imports=(config_cls,)))


_TEXT = ("\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
         "\"intermediate_size\": 128, \"vocab_size\": 256")
_VISION = ("\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
           "\"image_size\": 32, \"patch_size\": 8")
_TEXT_IDS = "input_ids=torch.randint(0, 200, (2, 6)), attention_mask=torch.ones(2, 6, dtype=torch.long)"


def _retrieval(cls: str, config_cls: str, vlm: str) -> LayerCase:
    """A ColVision retriever: the VLM's last hidden states go through `embedding_proj_layer`
    (a text-only query, as retrieval embeds queries)."""
    return LayerCase(cls, f"{config_cls}(vlm_config={vlm}, embedding_dim=32)", f"{cls}(config)",
                     f"module({_TEXT_IDS})", ("embedding_proj_layer",), imports=(config_cls,))


# One entry per class the transformers 5.23.0 series changes, keyed by the modeling module.
LAYER_CASES: dict[str, tuple[LayerCase, ...]] = {
    "transformers.models.t5.modeling_t5": (_t5("T5DenseActDense", "T5Config"),
                                          _t5("T5DenseGatedActDense", "T5Config", gated=True)),
    "transformers.models.mt5.modeling_mt5": (_t5("MT5DenseActDense", "MT5Config"),
                                            _t5("MT5DenseGatedActDense", "MT5Config", gated=True)),
    "transformers.models.umt5.modeling_umt5": (_t5("UMT5DenseActDense", "UMT5Config"),
                                              _t5("UMT5DenseGatedActDense", "UMT5Config", gated=True)),
    "transformers.models.udop.modeling_udop": (_t5("UdopDenseActDense", "UdopConfig"),
                                              _t5("UdopDenseGatedActDense", "UdopConfig", gated=True)),
    "transformers.models.pop2piano.modeling_pop2piano": (
        _t5("Pop2PianoDenseActDense", "Pop2PianoConfig"),
        _t5("Pop2PianoDenseGatedActDense", "Pop2PianoConfig", gated=True)),
    "transformers.models.longt5.modeling_longt5": (_t5("LongT5DenseActDense", "LongT5Config"),),
    "transformers.models.switch_transformers.modeling_switch_transformers": (
        _t5("SwitchTransformersDenseActDense", "SwitchTransformersConfig"),),
    "transformers.models.kosmos2_5.modeling_kosmos2_5": (
        _vision_mlp("Kosmos2_5VisionMlp", "Kosmos2_5VisionConfig", "intermediate_size"),),
    "transformers.models.pix2struct.modeling_pix2struct": (
        _vision_mlp("Pix2StructVisionMlp", "Pix2StructVisionConfig", "d_ff"),
        _vision_mlp("Pix2StructTextDenseGatedActDense", "Pix2StructTextConfig", "d_ff")),
    "transformers.models.nllb_moe.modeling_nllb_moe": (_ffn("NllbMoeDenseActDense", "NllbMoeConfig", "d_model"),),
    "transformers.models.seamless_m4t.modeling_seamless_m4t": (
        _ffn("SeamlessM4TFeedForwardNetwork", "SeamlessM4TConfig", "hidden_size"),),
    "transformers.models.seamless_m4t_v2.modeling_seamless_m4t_v2": (
        _ffn("SeamlessM4Tv2FeedForwardNetwork", "SeamlessM4Tv2Config", "hidden_size"),),
    "transformers.models.siglip2.modeling_siglip2": (
        LayerCase("Siglip2VisionEmbeddings",
                  "Siglip2VisionConfig(hidden_size=64, num_channels=3, patch_size=4, num_patches=16)",
                  "Siglip2VisionEmbeddings(config)",
                  "module(torch.rand(2, 16, 48), torch.tensor([[4, 4], [4, 4]]))", ("patch_embedding",),
                  imports=("Siglip2VisionConfig",)),),
    "transformers.models.ernie4_5_vl_moe.modeling_ernie4_5_vl_moe": (
        LayerCase("Ernie4_5_VLMoePatchEmbed", "None",
                  "Ernie4_5_VLMoePatchEmbed(patch_size=4, in_channels=4, embed_dim=64)",
                  "module(torch.rand(6, 64))", ("proj",)),),
    "transformers.models.neomme.modeling_neomme": (
        LayerCase("NeoMMEMultiVectorHead", "NeoMMEConfig(hidden_size=64, embedding_dim=32)",
                  "NeoMMEMultiVectorHead(config)",
                  "module(torch.randn(2, 5, 64), torch.ones(2, 5, dtype=torch.long))", ("proj",),
                  imports=("NeoMMEConfig",)),),
    "transformers.models.timesfm2_5.modeling_timesfm2_5": (
        LayerCase("TimesFm2_5ResidualBlock", "TimesFm2_5Config()",
                  "TimesFm2_5ResidualBlock(config, input_dims=64, hidden_dims=128, output_dims=64, use_bias=True)",
                  "module(torch.randn(2, 5, 64))", ("input_layer",), storage="fp8",
                  imports=("TimesFm2_5Config",)),),
    "transformers.models.deepseek_v32.modeling_deepseek_v32": (
        _indexer("DeepseekV32Indexer", "DeepseekV32Config", _DSA_CALL),),
    "transformers.models.glm_moe_dsa.modeling_glm_moe_dsa": (
        _indexer("GlmMoeDsaIndexer", "GlmMoeDsaConfig", _DSA_CALL),),
    "transformers.models.axk2.modeling_axk2": (_indexer("AXK2Indexer", "AXK2Config", _DSA_CALL),),
    "transformers.models.dots3_note.modeling_dots3_note": (
        _indexer("Dots3NoteTextIndexer", "Dots3NoteTextConfig", _DSA_CALL),),
    "transformers.models.hy_v4.modeling_hy_v4": (_indexer("HYV4Indexer", "HYV4Config", _DSA_CALL),),
    "transformers.models.mistral_large4.modeling_mistral_large4": (
        _indexer("MistralLarge4TextIndexer", "MistralLarge4TextConfig",
                 f"module({_HIDDEN}, {_ROPE}, {_MASK}, torch.arange(6).expand(2, 6), None)", extra=""),),
    "transformers.models.glm5_next.modeling_glm5_next": (
        _indexer("Glm5NextTextIndexer", "Glm5NextTextConfig",
                 f"module({_HIDDEN}, {_Q_RESID}, torch.ones(2, 6, dtype=torch.bool), None)",
                 extra=", q_lora_rank=32, index_kpool=2", rope=0),),
    "transformers.models.gemma4.modeling_gemma4": (
        _patch_embedder("Gemma4VisionPatchEmbedder", "Gemma4VisionConfig",
                        "hidden_size=64, patch_size=4, position_embedding_size=8",
                        "module(torch.rand(2, 6, 48), torch.randint(0, 8, (2, 6, 2)), "
                        "torch.zeros(2, 6, dtype=torch.bool))",
                        target="input_proj", storage="fp8"),),
    "transformers.models.gemma4_unified.modeling_gemma4_unified": (
        _patch_embedder("Gemma4UnifiedVisionEmbedder", "Gemma4UnifiedVisionConfig",
                        "patch_size=2, pooling_kernel_size=2, model_patch_size=4, mm_embed_dim=64, mm_posemb_size=8, "
                        "output_proj_dims=64",
                        "module(torch.rand(2, 6, 48), torch.randint(0, 8, (2, 6, 2)))", target="patch_dense",
                        storage="fp8",
                        build="Gemma4UnifiedVisionEmbedder(config, Gemma4UnifiedTextConfig(hidden_size=64))"),
        LayerCase("Gemma4UnifiedMultimodalEmbedder", "Gemma4UnifiedVisionConfig(output_proj_dims=64)",
                  "Gemma4UnifiedMultimodalEmbedder(config, Gemma4UnifiedTextConfig(hidden_size=64))",
                  "module(torch.randn(2, 6, 64))", ("embedding_projection",), storage="fp8",
                  imports=("Gemma4UnifiedVisionConfig", "Gemma4UnifiedTextConfig"))),
    "transformers.models.cosmos3_edge.modeling_cosmos3_edge": (
        _patch_embedder("Cosmos3EdgeVisionEmbeddings", "Cosmos3EdgeVisionConfig",
                        "hidden_size=64, num_channels=3, patch_size=4, num_patches=16, spatial_merge_size=2",
                        "module(torch.rand(16, 48), torch.tensor([[1, 4, 4]]))"),),
    "transformers.models.muse_glimmer.modeling_muse_glimmer": (
        _patch_embedder("MuseGlimmerVisionPatchEmbedder", "MuseGlimmerVisionConfig",
                        "hidden_size=64, patch_size=4, patch_temporal=2, pos_emb_height=4, pos_emb_width=4",
                        "module(torch.rand(16, 96), torch.tensor([[1, 4, 4]]))"),),
    "transformers.models.muse_spark.modeling_muse_spark": (
        _patch_embedder("MuseSparkVisionPatchEmbedder", "MuseSparkVisionConfig",
                        "hidden_size=64, patch_size=4, patch_temporal=2, pos_emb_height=4, pos_emb_width=4",
                        "module(torch.rand(16, 96), torch.tensor([[1, 4, 4]]))"),),
    "transformers.models.blip_2.modeling_blip_2": (
        _blip2("Blip2TextModelWithProjection", f"module({_IDS})", "text_projection"),
        _blip2("Blip2VisionModelWithProjection", f"module({_PIXELS32})", "vision_projection"),
        _blip2("Blip2ForImageTextRetrieval", f"module({_PIXELS32}, {_IDS_MASK}, use_image_text_matching_head=True)",
               "itm_head"),
        _blip2("Blip2ForImageTextRetrieval", f"module({_PIXELS32}, {_IDS_MASK}, use_image_text_matching_head=False)",
               "vision_projection"),
        _blip2("Blip2ForImageTextRetrieval", f"module({_PIXELS32}, {_IDS_MASK}, use_image_text_matching_head=False)",
               "text_projection")),
    "transformers.models.wav2vec2.modeling_wav2vec2": (_pretraining("Wav2Vec2ForPreTraining", "Wav2Vec2Config"),),
    "transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer": (
        _pretraining("Wav2Vec2ConformerForPreTraining", "Wav2Vec2ConformerConfig"),),
    "transformers.models.unispeech.modeling_unispeech": (
        _pretraining("UniSpeechForPreTraining", "UniSpeechConfig", ", num_ctc_classes=64"),),
    "transformers.models.mamba.modeling_mamba": (
        LayerCase("MambaForCausalLM", "MambaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1, state_size=4)",
                  "MambaForCausalLM(config)", f"module({_IDS})", ("lm_head",), imports=("MambaConfig",)),),
    "transformers.models.pocket_tts.modeling_pocket_tts": _tts("PocketTTSModel", "PocketTTSConfig", 4000, 4003, 32),
    "transformers.models.gradium_phonon_tts.modeling_gradium_phonon_tts": _tts(
        "GradiumPhononTTSModel", "GradiumPhononTTSConfig", 5, 4, 64, ", audio_prompt_dim=64"),
    "transformers.models.granite_speech5.modeling_granite_speech5": (
        LayerCase("GraniteSpeech5Encoder",
                  "GraniteSpeech5EncoderConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, "
                  "num_attention_heads=4, num_mel_bins=16, vocab_size=64, subsample_layers=[], context_size=8, "
                  "max_position_embeddings=16)",
                  "GraniteSpeech5Encoder(config)", "module(torch.randn(1, 10, 64))", ("input_linear",),
                  imports=("GraniteSpeech5EncoderConfig",)),),
    "transformers.models.esmfold2.modeling_esmfold2": (
        LayerCase("EsmFold2LanguageModelEncoder",
                  "EsmFold2Config(pairwise_hidden_size=64, esmc_config={\"hidden_size\": 64, \"num_hidden_layers\": 1, "
                  "\"num_attention_heads\": 4})",
                  "EsmFold2LanguageModelEncoder(config)", "module(torch.randn(1, 4, 2, 64))", ("pair_proj",),
                  imports=("EsmFold2Config",)),
        LayerCase("EsmFold2AtomEncoder", "EsmFold2Config()", "EsmFold2AtomEncoder(config, config.atom_encoder)",
                  "module.embed_atoms(EsmFold2AtomInputs(ref_pos=torch.randn(1, 6, 3), ref_charge=torch.zeros(1, 6), "
                  "atom_attention_mask=torch.ones(1, 6), ref_element=torch.zeros(1, 6, 128), "
                  "ref_atom_name_chars=torch.zeros(1, 6, 4, 64), ref_space_uid=torch.zeros(1, 6, dtype=torch.long), "
                  "atom_to_token=torch.zeros(1, 6, dtype=torch.long)))",
                  ("atom_linear",), imports=("EsmFold2Config",),
                  extra_imports=("from transformers.models.esmfold2.modeling_esmfold2 import EsmFold2AtomInputs",)),
        LayerCase("EsmFold2MSAEncoder", "EsmFold2Config(msa_encoder={\"num_hidden_layers\": 1})",
                  "EsmFold2MSAEncoder(config)",
                  "module(torch.randn(1, 4, 4, config.pairwise_hidden_size), "
                  "torch.randn(1, 4, config.single_inputs_size), "
                  "torch.nn.functional.one_hot(torch.randint(0, config.num_res_types, (1, 4, 3)), config.num_res_types)"
                  ".float(), torch.zeros(1, 4, 3), torch.zeros(1, 4, 3), torch.ones(1, 4, 3))",
                  ("embed",), imports=("EsmFold2Config",)),
    ),
    "transformers.models.colpali.modeling_colpali": (
        _retrieval("ColPaliForRetrieval", "ColPaliConfig",
                   f"{{\"model_type\": \"paligemma\", \"text_config\": {{\"model_type\": \"gemma\", {_TEXT}, "
                   f"\"head_dim\": 16}}, \"vision_config\": {{{_VISION}}}, \"projection_dim\": 64}}"),),
    "transformers.models.colqwen2.modeling_colqwen2": (
        _retrieval("ColQwen2ForRetrieval", "ColQwen2Config",
                   f"{{\"model_type\": \"qwen2_vl\", \"text_config\": {{{_TEXT}, "
                   f"\"rope_parameters\": {{\"rope_type\": \"default\", \"mrope_section\": [2, 3, 3]}}}}, "
                   f"\"vision_config\": {{\"depth\": 1, \"embed_dim\": 64, \"hidden_size\": 64, "
                   f"\"num_heads\": 4}}}}"),),
    "transformers.models.colmodernvbert.modeling_colmodernvbert": (
        _retrieval("ColModernVBertForRetrieval", "ColModernVBertConfig",
                   f"{{\"model_type\": \"modernvbert\", \"text_config\": {{\"model_type\": \"modernbert\", "
                   f"\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                   f"\"intermediate_size\": 128, \"vocab_size\": 256, \"pad_token_id\": 0, \"bos_token_id\": 1, "
                   f"\"eos_token_id\": 2, \"cls_token_id\": 1, \"sep_token_id\": 2}}, "
                   f"\"vision_config\": {{{_VISION}}}, "
                   f"\"image_token_id\": 255}}"),),
    "transformers.models.inkling2.modeling_inkling2": (
        LayerCase("Inkling2VisionModel",
                  "Inkling2VisionConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, patch_size=4, "
                  "spatial_merge_size=2, posemb_grid_size=4, projection_hidden_dim=64, text_hidden_size=64)",
                  "Inkling2VisionModel(config)", "module(torch.rand(4, 8, 8, 3) * 2 - 1, torch.tensor([[1, 2, 2]]))",
                  ("embeddings.patch_embedding",), imports=("Inkling2VisionConfig",)),),
    "transformers.models.jev.modeling_jev": (
        LayerCase("JevForDecision",
                  "JevConfig(hidden_size=64, num_verbalizers=32, text_config={\"model_type\": \"qwen3\", "
                  "\"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
                  "\"num_key_value_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 256, \"head_dim\": 16})",
                  "JevForDecision(config)",
                  "module(torch.randint(0, 200, (1, 6)), torch.tensor([[4]]), torch.tensor([[2]]), "
                  "torch.tensor([[0]]))",
                  ("proj",), imports=("JevConfig",)),),
}


HELPER_TEST_PATH = "tests/utils/test_get_module_input_dtype.py"
_LICENSE = """\
# Copyright 2026 The HuggingFace Team. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""

# The storages a test puts in place of a layer; the text is part of each generated test file.
# The helpers a generated test file holds, by the storages its cases use.
_HELPER_4BIT = '''

def _linear_4bit(linear):
    """`linear` as bitsandbytes 4-bit leaves it: an NF4 `Linear4bit` (uint8 `Params4bit`) computing in float32."""
    import bitsandbytes as bnb

    quantized = bnb.nn.Linear4bit(
        linear.in_features,
        linear.out_features,
        bias=linear.bias is not None,
        compute_dtype=torch.float32,
        quant_type="nf4",
    )
    quantized.weight = bnb.nn.Params4bit(linear.weight.data.clone(), requires_grad=False, quant_type="nf4")
    if linear.bias is not None:
        quantized.bias = nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return quantized.to("cpu")

'''
_HELPER_FP8 = '''

class _Fp8StorageLinear(nn.Linear):
    """A linear whose weight is stored in float8_e4m3fn and that computes in its input's dtype, as
    the layers of FP8 checkpoints do (the weight passes `is_floating_point`, but is no compute dtype)."""

    def forward(self, input):
        return nn.functional.linear(input, self.weight.to(input.dtype), self.bias)


def _linear_fp8(linear):
    stored = _Fp8StorageLinear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    stored.weight = nn.Parameter(linear.weight.data.to(torch.float8_e4m3fn), requires_grad=False)
    if linear.bias is not None:
        stored.bias = nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return stored



def _round_to_fp8(linear):
    """The twin of an fp8-stored layer: the same rounded weight, kept in the compute dtype."""
    linear.weight.data = linear.weight.data.to(torch.float8_e4m3fn).to(linear.weight.dtype)
    return linear
'''
_HELPER_COMMON = '''

def _replace(module, path, make):
    """Replace the submodule at dotted `path` with `make(submodule)`; return the replaced original."""
    *parents, name = path.split(".")
    owner = module
    for part in parents:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    return original


def _outputs_of(module, path, call):
    """What the submodule at `path` returns during `call()` (its first call): seeded inputs, so the
    module and its twin see the same ones."""
    layer = module.get_submodule(path)
    seen = []
    handle = layer.register_forward_hook(lambda _layer, _args, result: seen.append(result))
    try:
        torch.manual_seed(1)
        call()
    finally:
        handle.remove()
    return seen[0]
'''

# The relative error of a replaced layer's output against the unquantized twin: NF4 costs about
# 10% on these random layers, fp8 storage (rounded weights, compared with the twin holding the
# same rounded weights) almost nothing; the release's uint8/fp8 cast costs about 100% or raises.
MAX_ERROR = {"4bit": 0.3, "fp8": 1e-3}


@record(frozen=True)
class SiteTest:
    path: str
    text: str
    classes: tuple[str, ...]
    storages: tuple[str, ...]


def _changed_classes(before: str, lines: set[int]) -> list[str]:
    tree = ast.parse(before)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(node.lineno <= line <= (node.end_lineno or node.lineno)
                                                  for line in lines):
            out.append(node.name)
    return out


def modeling_module(path: str) -> str:
    """The runtime module of a changed file: a `modular_x.py` source stands for `modeling_x.py`."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    parts[-1] = re.sub(r"^modular_", "modeling_", parts[-1])
    return ".".join(parts)


def plan_tests(changes) -> tuple[list[LayerCase], list[str]]:
    """(the cases covering the changed classes of these file changes, the classes none covers).
    A class changed in both `modular_x.py` and `modeling_x.py` is one case: the test runs the
    generated module, which the modular source regenerates."""
    cases: list[LayerCase] = []
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    for change in changes:
        if change.test or change.before is None or not change.findings:
            continue
        module = modeling_module(change.path)
        for cls in _changed_classes(change.before.decode("utf-8"), {f.span.line for f in change.findings}):
            if (module, cls) in seen:
                continue
            seen.add((module, cls))
            found = [c for c in LAYER_CASES.get(module, ()) if c.cls == cls]
            if not found:
                missing.append(f"{module}.{cls}")
            cases += found
    return cases, missing


def _module_of_case(case: LayerCase) -> str:
    return next(m for m, cs in LAYER_CASES.items() if case in cs)


def test_path(cases: list[LayerCase]) -> str:
    module = _module_of_case(cases[0])
    model = module.split(".")[2]
    return f"tests/models/{model}/test_modeling_{model}_quantized_input.py"


def site_test(cases: list[LayerCase], style: bool = True) -> SiteTest:
    """One test file for the cases of one patch (one model directory); `style`: through ruff."""
    modules: dict[str, list[str]] = {}
    configs: set[str] = set()
    for case in cases:
        modules.setdefault(_module_of_case(case), []).append(case.cls)
        configs.update(case.imports)
    imports = [f"    from transformers import {', '.join(sorted(configs))}"] if configs else []
    for module, classes in modules.items():
        imports.append(f"    from {module} import {', '.join(dict.fromkeys(classes))}")
    imports += [f"    {line}" for line in dict.fromkeys(i for c in cases for i in c.extra_imports)]
    classes = [c.cls for c in cases]
    doc = (textwrap.fill(f'"""Quantized layers inside {", ".join(f"`{c}`" for c in dict.fromkeys(classes))}: the '
                         "input keeps its dtype.", 100, break_long_words=False) + "\n\n"
           "A quantizer replaces the layer when the model is loaded, and its weight's dtype is then a storage\n"
           "dtype (uint8 under bitsandbytes 4-bit, float8_e4m3fn in FP8 checkpoints): casting the activation\n"
           "to it destroys it or breaks the matmul. Each test replaces the layer in a tiny module with seeded\n"
           "weights and compares the output with the unquantized module's.\n"
           '"""\n')
    body = [_LICENSE + doc, "import copy", "import unittest", "",
            "from transformers import is_torch_available",
            "from transformers.testing_utils import " + ("require_bitsandbytes, require_torch" if any(
                c.storage == "4bit" for c in cases) else "require_torch"), "", "",
            "if is_torch_available():", "    import torch", "    from torch import nn", "", *imports, "",
            _HELPER_COMMON.rstrip("\n")]
    storages = {c.storage for c in cases}
    body += [_HELPER_4BIT.rstrip("\n")] if "4bit" in storages else []
    body += [_HELPER_FP8.rstrip("\n")] if "fp8" in storages else []
    for cls in dict.fromkeys(classes):  # one TestCase per class, one method per case
        same = [c for c in cases if c.cls == cls]
        decorators = "@require_torch\n@require_bitsandbytes\n" if any(c.storage == "4bit" for c in same) \
            else "@require_torch\n"
        body.append(f"\n\n{decorators}class {cls}QuantizedInputTest(unittest.TestCase):"
                    + "".join(_case_method(c) for c in same))
    # Two blank lines between top-level definitions, as ruff formats transformers.
    text = re.sub(r"\n{4,}", "\n\n\n", "\n".join(body)).rstrip() + "\n"
    return SiteTest(test_path(cases), ruff_format(text) if style else text, tuple(dict.fromkeys(classes)),
                    tuple(sorted({c.storage for c in cases})))


def _case_method(case: LayerCase) -> str:
    make = "_linear_4bit" if case.storage == "4bit" else "_linear_fp8"
    what = ("bitsandbytes 4-bit" if case.storage == "4bit" else "fp8 storage")
    targets = " and ".join(f"`{t}`" for t in case.targets)
    name = "_and_".join(t.replace(".", "_") for t in case.targets)
    lines = [f"        _replace(module, \"{t}\", {make})" for t in case.targets]
    if case.storage == "fp8":
        # The twin holds the same rounded weights in the compute dtype: only the cast differs.
        lines += [f"        _replace(twin, \"{t}\", _round_to_fp8)" for t in case.targets]
    config_line = f"        config = {case.config}\n" if case.config != "None" else ""
    twin_call = case.call.replace("module(", "twin(", 1).replace("module.", "twin.", 1)
    if case.compare == "layer":
        # What the layer the cast feeds returns, inside the changed method (its own output may be
        # indices or a sum in which the layer's share is small).
        target = case.targets[0]
        run = (f"        expected = _outputs_of(twin, \"{target}\", lambda: {twin_call})\n"
               f"        output = _outputs_of(module, \"{target}\", lambda: {case.call})\n")
        checked = "what it returns inside the call"
    else:
        run = (f"        out = {twin_call}\n        expected = {case.output}\n"
               f"        torch.manual_seed(1)\n"
               f"        out = {case.call}\n        output = {case.output}\n")
        checked = "the output"
    docstring = textwrap.fill(f'"""{targets} in {what}: {checked} is finite, in the activation dtype, and close '
                              'to the unquantized module\'s."""', 100, initial_indent=" " * 8,
                              subsequent_indent=" " * 8,
                              break_long_words=False)
    return f'''
    def test_{name}_in_{case.storage}(self):
{docstring}
        torch.manual_seed(0)
{config_line}        module = {case.build}.eval()
        twin = copy.deepcopy(module)
{chr(10).join(lines)}
        torch.manual_seed(1)
        with torch.no_grad():
{_indent(run)}
        self.assertEqual(output.dtype, expected.dtype)
        self.assertTrue(torch.isfinite(output).all())
        error = ((output.float() - expected.float()).norm() / expected.float().norm()).item()
        self.assertLess(error, {MAX_ERROR[case.storage]})
'''


def _indent(block: str) -> str:
    return "\n".join("    " + line if line else line for line in block.rstrip("\n").split("\n"))




def helper_test(module: str, func: str) -> SiteTest:
    """The unit test of the helper the first patch adds: each storage a quantizer leaves."""
    doc = (f'"""`{func}`: the dtype a module\'s forward expects of its input, whatever a quantizer left.\n'
           '"""\n')
    text = _LICENSE + doc + f'''
import unittest

from transformers import is_torch_available
from transformers.testing_utils import require_bitsandbytes, require_torch


if is_torch_available():
    import torch
    from torch import nn

    from {module} import {func}


@require_torch
class GetModuleInputDtypeTest(unittest.TestCase):
    def _linear(self, dtype):
        return nn.Linear(64, 32).to(dtype)

    def test_float_weight_is_the_input_dtype(self):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            with self.subTest(dtype=dtype):
                self.assertEqual({func}(self._linear(dtype)), dtype)

    def test_storage_dtypes_keep_the_activation(self):
        for dtype in (torch.float8_e4m3fn, torch.int8, torch.uint8):
            with self.subTest(dtype=dtype):
                linear = nn.Linear(64, 32)
                linear.weight = nn.Parameter(linear.weight.data.to(dtype), requires_grad=False)
                self.assertIsNone({func}(linear))

    def test_no_weight_keeps_the_activation(self):
        class QWeightOnly(nn.Module):  # GPTQ/AWQ/HQQ layers keep packed tensors under other names
            def __init__(self):
                super().__init__()
                self.register_buffer("qweight", torch.zeros(8, 32, dtype=torch.int32))

        self.assertIsNone({func}(QWeightOnly()))

    @require_bitsandbytes
    def test_bitsandbytes_4bit_is_its_compute_dtype(self):
        import bitsandbytes as bnb

        linear = bnb.nn.Linear4bit(64, 32, compute_dtype=torch.bfloat16, quant_type="nf4")
        linear.weight = bnb.nn.Params4bit(torch.randn(32, 64), requires_grad=False, quant_type="nf4")
        linear = linear.to("cpu")
        self.assertEqual(linear.weight.dtype, torch.uint8)
        self.assertEqual({func}(linear), torch.bfloat16)
'''
    return SiteTest(HELPER_TEST_PATH, ruff_format(text), (func,), ("unit",))


def ruff_format(text: str) -> str:
    """`text` as transformers' `make style` leaves it (ruff: imports sorted, formatted, 119
    columns), when ruff is installed (the `test` extra has it); else as written."""
    import shutil

    beside = Path(sys.executable).with_name("ruff")
    ruff = str(beside) if beside.is_file() else shutil.which("ruff")
    if not ruff:
        return text
    settings = ["--isolated", "--line-length", "119"]
    isort = ["--select", "I", "--fix", "--config", "lint.isort.known-first-party = ['transformers']",
             "--config", "lint.isort.lines-after-imports = 2"]
    try:
        for args in (["check", "--quiet", *isort], ["format", "--quiet"]):
            proc = subprocess.run([ruff, *args[:1], *settings, *args[1:], "--stdin-filename", "test.py", "-"],
                                  input=text, capture_output=True, text=True, timeout=60)
            if proc.returncode not in (0, 1) or not proc.stdout.strip():
                return text
            text = proc.stdout
    except (OSError, subprocess.SubprocessError):
        return text
    return text


# --- running the tests against a release tree -------------------------------------------------


@record(frozen=True)
class Outcome:
    passed: bool
    message: str  # the first line of the failure or error, "" when passed


def run_tests(tree: Path, test_paths: list[str], timeout: int = 900) -> dict[str, dict[str, Outcome]]:
    """Run the test files (relative to `tree`) with `tree` first on sys.path, so `transformers` is
    the tree's copy (the installed package's dependencies serve it). Returns file -> test id ->
    outcome; a file whose tests were not collected maps to {"<collection>": failure}."""
    with tempfile.TemporaryDirectory(prefix="dtype-lint-hf-tests-") as tmp:
        report = Path(tmp) / "junit.xml"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        # -p no:cacheprovider: write nothing into the tree; rootdir = the tree: its tests/ layout.
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "--continue-on-collection-errors", "--rootdir", str(tree), f"--junitxml={report}", *test_paths]
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
        if not report.is_file():
            raise RuntimeError(f"pytest wrote no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        return _parse_junit(report.read_text(encoding="utf-8"), test_paths, tree)


IMPORT = "<import>"  # the test id of a module that failed to import


def _first_error(problem) -> str:
    """The error a failure report ends with (pytest's `E   ` lines), else its message."""
    lines = [line[1:].strip() for line in (problem.text or "").splitlines() if line.startswith("E ")]
    errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception):", line)]
    return errors[-1] if errors else (problem.get("message") or "failed").strip().splitlines()[0]


def _parse_junit(xml: str, test_paths: list[str], tree: Path) -> dict[str, dict[str, Outcome]]:
    out: dict[str, dict[str, Outcome]] = {p: {} for p in test_paths}
    by_module = {p.replace("/", ".").removesuffix(".py"): p for p in test_paths}
    for case in ElementTree.fromstring(xml).iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "")
        path = next((p for m, p in by_module.items() if classname == m or classname.startswith(m + ".")), None)
        if path is None:
            path = next((p for p in test_paths if PurePosixPath(p).stem in classname or PurePosixPath(p).stem in name),
                        None)
        if path is None:
            continue
        problem = next(iter(case.findall("failure") + case.findall("error")), None)
        skipped = case.find("skipped")
        # A module that fails at import is one case named after the module, with no class.
        test_id = f"{classname.rsplit('.', 1)[-1]}.{name}" if classname else IMPORT
        if problem is not None:
            # The scratch tree's path would make the message differ from run to run.
            out[path][test_id] = Outcome(False, _first_error(problem).replace(f"{tree}{os.sep}", "")[:160])
        elif skipped is not None:
            out[path][test_id] = Outcome(False, "skipped: " + (skipped.get("message") or "")[:140])
        else:
            out[path][test_id] = Outcome(True, "")
    return out


def result_lines(before: dict[str, Outcome], after: dict[str, Outcome], label: str) -> list[str]:
    """A patch's Results section: each test on the release and with the patch."""
    lines = ["The new test on CPU, on the release's code and with this patch:", ""]
    if IMPORT in before and IMPORT not in after:
        lines.append(f"    {label}: the test module fails at import:")
        lines.append(f"      {before[IMPORT].message}")
        for test_id in sorted(after):
            outcome = after[test_id]
            lines.append(f"    patched: {test_id} {'passed' if outcome.passed else 'FAILED: ' + outcome.message}")
        return lines
    for test_id in sorted(set(before) | set(after)):
        b, a = before.get(test_id), after.get(test_id)
        lines.append(f"    {test_id}")
        lines.append(f"      {label}: {'passed' if b and b.passed else 'FAILED: ' + (b.message if b else 'not run')}")
        lines.append(f"      patched: {'passed' if a and a.passed else 'FAILED: ' + (a.message if a else 'not run')}")
    return lines


# --- the tests in a series ----------------------------------------------------------------------


@record
class SeriesTests:
    """What add_tests did: each patch's test file (or the classes it could not test), and the run."""

    tests: dict[int, str]  # patch index -> the test file it adds
    missing: dict[int, list[str]]  # patch index -> changed classes with no LAYER_CASES entry
    before: dict[str, dict[str, Outcome]]  # test file -> test id -> outcome on the release
    after: dict[str, dict[str, Outcome]]  # ... on the release with the whole series applied
    ran: str  # "" when run, else why not


def runnable() -> str:
    """"" when the tests can run here (torch, transformers and bitsandbytes importable), else why not."""
    import importlib.util

    for name in ("torch", "transformers", "bitsandbytes", "pytest"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed"
    return ""


def add_tests(patches, helper_patch, style, run: bool = True) -> SeriesTests:
    """Add each transformers patch's regression test to it, run them all on the release tree
    before and after the series, and write each outcome into its patch's Tests/Results."""
    from dtype_lint.ecosystems.hf.helper import HF_HELPER_NAME
    from dtype_lint.migrate import messages, series

    tests: dict[int, str] = {}
    missing: dict[int, list[str]] = {}
    for index, patch in enumerate(patches):
        if patch is helper_patch:
            home = next((c.path for c in patch.changes if not c.test and c.path.endswith(".py")), "")
            test = helper_test(messages.module_of(home, "transformers"), HF_HELPER_NAME)
        else:
            cases, lacking = plan_tests(patch.changes)
            if lacking:
                missing[index] = lacking
            if not cases:
                continue
            test = site_test(cases)
        if style.root is not None and (Path(style.root) / test.path).exists() or test.path in style.taken:
            raise ValueError(f"{test.path}: the tree already has this test file")
        style.taken.add(test.path)
        patch.changes.append(series.FileChange(test.path, None, test.text.encode("utf-8"), test=True))
        tests[index] = test.path
    why_not = runnable() if run else "not run (asked not to)"
    before: dict[str, dict[str, Outcome]] = {}
    after: dict[str, dict[str, Outcome]] = {}
    if not why_not and tests and style.root is not None:
        before, after = run_before_after(Path(style.root), patches)
    for index, path in tests.items():
        _write_outcome(patches[index], patches[index] is helper_patch, path, before.get(path), after.get(path),
                       why_not, style)
    return SeriesTests(tests, missing, before, after, why_not)


def run_before_after(root: Path, patches) -> tuple[dict, dict]:
    """The series' tests on a copy of the release holding only the tests, and on a copy with the
    whole series applied (each test imports one modeling module, which only its own patch changes,
    and the helper of the first patch)."""
    import shutil

    test_files = {c.path: c.after for p in patches for c in p.changes if c.test}
    with tempfile.TemporaryDirectory(prefix="dtype-lint-hf-trees-") as tmp:
        trees = {}
        for name in ("before", "after"):
            tree = Path(tmp) / name
            shutil.copytree(root, tree, ignore=shutil.ignore_patterns(".git", "__pycache__", ".dtype_lint_cache"))
            files = dict(test_files)
            if name == "after":
                files.update({c.path: c.after for p in patches for c in p.changes if not c.test})
            write_scratch_files(tree, files)
            trees[name] = tree
        paths = sorted(test_files)
        return run_tests(trees["before"], paths), run_tests(trees["after"], paths)


def _write_outcome(patch, is_helper: bool, path: str, before, after, why_not: str, style) -> None:
    from dtype_lint.migrate import messages

    command = f"    python -m pytest {path} -v"
    if why_not:
        result = [f"The new test was not run here: {why_not}."]
    else:
        result = result_lines(before or {}, after or {}, "release")
    if is_helper:
        text = "\n".join(["Tests:", "", command, "", "Results:", "", *result])
        body, sep, trailer = patch.body.partition("\n\nSigned-off-by:")
        patch.body = body.rstrip("\n") + "\n\n" + text + (sep + trailer if sep else "")
        messages.check_clean(patch.body)
        return
    message = patch.message
    plan = [line for line in message.test_plan if "py_compile" in line]
    message.test_plan = plan + [command]
    # The proof paragraph (series.patch_proof) stays after the test's run. It was matched by the
    # command's old name, `hf_verify`, and dropped from every patch once the module moved.
    message.test_result = result + ([""] + message.test_result if any(PROOF_COMMAND in line for line in
                                                                       message.test_result) else [])
    patch.body = message.body(style.convention)
    messages.check_clean(patch.subject + "\n" + patch.body)


def readme_section(patches, found: SeriesTests) -> list[str]:
    """The series README's section on the tests: each patch's test and its run, and what has none."""
    lines = ["## Regression tests", ""]
    if found.ran:
        lines += [f"Not run when the series was written: {found.ran}.", ""]
    else:
        lines += ["Each test was run when the series was written: on the release tree with only the tests "
                  "added (each must fail), and with the whole series applied (each must pass).", ""]
    lines += ["| patch | test | release | patched |", "|---|---|---|---|"]
    for index, patch in enumerate(patches):
        name = patch.file.name if patch.file is not None else f"patch {index + 1}"
        path = found.tests.get(index)
        if path is None:
            lines.append(f"| `{name}` | none: no case for {', '.join(f'`{m}`' for m in found.missing.get(index, []))} "
                         "| — | — |")
            continue
        before, after = found.before.get(path, {}), found.after.get(path, {})
        failed = sum(not o.passed for o in before.values())
        passed = sum(o.passed for o in after.values())
        release = "fails at import" if set(before) == {IMPORT} else f"{failed}/{len(before)} failed"
        uncovered = found.missing.get(index)
        cell = f"`{path}`" + (f" (no case for {', '.join(f'`{m}`' for m in uncovered)})" if uncovered else "")
        lines.append(f"| `{name}` | {cell} | {release} | {passed}/{len(after)} passed |")
    return lines + [""]
