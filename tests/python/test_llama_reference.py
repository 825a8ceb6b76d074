"""parbench's Llama against Hugging Face's LlamaForCausalLM, an independent implementation: built from
the configuration parbench writes and given parbench's weights, it gives parbench's logits, next-token
loss and every parameter's gradient, in fp32 within 1e-5 (tests/llama_reference.cpp writes them).
tinyllama covers grouped-query attention and Llama 3.1's rope scaling; tests/fixtures/tinyllama-tied.json
a head tied to the embedding, a head size that is not the width over the heads, and another theta and eps."""
import json
import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch.jit._pickle import restore_type_tag  # noqa: E402  (after the skip where torch is absent)

BINARY = os.environ.get("LLAMA_REFERENCE")
pytestmark = pytest.mark.skipif(not BINARY, reason="LLAMA_REFERENCE names no binary (ctest sets it)")

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-5  # relative, per tensor


def relative_difference(value, reference):
    value, reference = value.double(), reference.double()
    scale = reference.norm().item()
    return (value - reference).norm().item() / (scale if scale > 0 else 1.0)


def parbench_step(model, directory):
    result = subprocess.run([BINARY, model, str(directory)], capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    config = json.loads((directory / "config.json").read_text())
    # LibTorch's pickle_save tags a dict's key and value types with restore_type_tag.
    with torch.serialization.safe_globals([restore_type_tag]):
        tensors = torch.load(directory / "tensors.pt", weights_only=True)
    return config, tensors


def hugging_face_step(config, tensors):
    """Hugging Face's model from the configuration, parbench's weights loaded by name, one forward and
    backward of the mean next-token cross-entropy over every token."""
    torch.manual_seed(0)
    hf_config = transformers.LlamaConfig(**config)
    hf_config._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(hf_config).float()
    weights = {name[len("weight/"):]: value for name, value in tensors.items() if name.startswith("weight/")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # A tied head is the embedding: Hugging Face's lm_head.weight, parbench's model.embed_tokens.weight.
    assert unexpected == []
    assert missing == (["lm_head.weight"] if config["tie_word_embeddings"] else [])
    if config["tie_word_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    logits = model(input_ids=tensors["tokens"]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), tensors["targets"].reshape(-1))
    loss.backward()
    gradients = {name: parameter.grad for name, parameter in model.named_parameters()}
    return logits.detach(), loss.detach(), gradients


@pytest.mark.parametrize("model", ["tinyllama", str(REPO / "tests" / "fixtures" / "tinyllama-tied.json")],
                         ids=["tinyllama", "tied"])
def test_logits_loss_and_gradients_match_hugging_face(model, tmp_path):
    config, tensors = parbench_step(model, tmp_path)
    logits, loss, gradients = hugging_face_step(config, tensors)
    assert logits.shape == tensors["logits"].shape
    assert relative_difference(tensors["logits"], logits) < TOLERANCE
    assert abs(tensors["loss"].item() - loss.item()) < TOLERANCE * abs(loss.item())
    parbench_gradients = {name[len("grad/"):]: value for name, value in tensors.items() if name.startswith("grad/")}
    # Every parameter but a tied head (the embedding's gradient holds both uses there).
    assert set(parbench_gradients) == set(gradients) - ({"lm_head.weight"} if config["tie_word_embeddings"] else set())
    for name, gradient in parbench_gradients.items():
        assert relative_difference(gradient, gradients[name]) < TOLERANCE, name


@pytest.mark.parametrize("change", ["weight", "rope_scaling", "rope_theta", "kv_heads_order"])
def test_the_comparison_sees_a_small_difference(change, tmp_path):
    """The comparison is not vacuous: a weight 1% off, Llama 3.1's rope scaling left out, another
    theta, or kv heads shared by the wrong query heads each moves Hugging Face's logits far past
    the tolerance."""
    config, tensors = parbench_step("tinyllama", tmp_path)
    if change == "weight":
        tensors["weight/model.layers.1.self_attn.k_proj.weight"] *= 1.01
    elif change == "rope_scaling":
        config["rope_scaling"] = None
    elif change == "rope_theta":
        config["rope_theta"] = 10000.0
    else:
        # kv head h serves query heads 2h and 2h + 1; swapping two query heads' rows pairs them otherwise.
        q = tensors["weight/model.layers.0.self_attn.q_proj.weight"].view(8, 8, 64)
        tensors["weight/model.layers.0.self_attn.q_proj.weight"] = q[[1, 2, 0, 3, 4, 5, 6, 7]].reshape(64, 64)
    logits, _, _ = hugging_face_step(config, tensors)
    assert relative_difference(tensors["logits"], logits) > 100 * TOLERANCE
