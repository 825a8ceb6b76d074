"""The models parbench trains, in PyTorch: ResNet-50 (torchvision's, which models/resnet.cpp
copies), the GPT-2-style model of models/gpt.cpp and the Llama-3-style decoder of models/llama.cpp
(Hugging Face's LlamaForCausalLM's parameter names), the first two also as parbench's named stages
(stem, layer1.0..layer4.2 (a block each; layerN names layer N's blocks), head; embed,
h.0..h.<L-1>, head) so that pipelines cut them where parbench does."""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

from baseline_common import GPT_CONFIGS, LLAMA_CONFIGS, LLAMA_NORM_EPS, LLAMA_ROPE_THETA, RESNET_LAYERS, num_classes

try:  # the GPU machines have torchvision; the CPU test machine may not
    from torchvision.models.resnet import Bottleneck, ResNet
    RESNET_SOURCE = "torchvision"
except ImportError:  # the same architecture, written out (torchvision 0.2x's resnet.py, Bottleneck only)
    RESNET_SOURCE = "baseline_models"

    def _conv3x3(inplanes, planes, stride=1):
        return nn.Conv2d(inplanes, planes, kernel_size=3, stride=stride, padding=1, bias=False)

    def _conv1x1(inplanes, planes, stride=1):
        return nn.Conv2d(inplanes, planes, kernel_size=1, stride=stride, bias=False)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = _conv1x1(inplanes, planes)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = _conv3x3(planes, planes, stride)  # stride on the 3x3 (ResNet v1.5)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = _conv1x1(planes, planes * self.expansion)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            if self.downsample is not None:
                identity = self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, block, layers, num_classes=1000):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(block, 64, layers[0])
            self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
            self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
            self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512 * block.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, block, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(_conv1x1(self.inplanes, planes * block.expansion, stride),
                                           nn.BatchNorm2d(planes * block.expansion))
            layers = [block(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * block.expansion
            layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))


def make_resnet(model: str) -> ResNet:
    """torchvision's resnet50(num_classes=1000) (resnet-tiny: one Bottleneck per layer, 10 classes)."""
    return ResNet(Bottleneck, RESNET_LAYERS[model], num_classes=num_classes(model))


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.width, self.heads = width, heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, tokens, width))


class Mlp(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Embed(nn.Module):
    def __init__(self, wte: nn.Embedding, wpe: nn.Embedding):
        super().__init__()
        self.wte, self.wpe = wte, wpe

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.wte(tokens) + self.wpe(positions)


class Head(nn.Module):
    def __init__(self, ln_f: nn.LayerNorm, lm_head: nn.Linear):
        super().__init__()
        self.ln_f, self.lm_head = ln_f, lm_head

    def forward(self, x):
        return self.lm_head(self.ln_f(x))


class GPT(nn.Module):
    """models/gpt.cpp: GPT-2's pre-LayerNorm blocks, no dropout, the head untied from the token
    embedding (so that stages own their parameters) and the vocabulary padded to 50304."""

    def __init__(self, model: str):
        super().__init__()
        config = GPT_CONFIGS[model]
        d = config["width"]
        self.wte = nn.Embedding(config["vocabulary"], d)
        self.wpe = nn.Embedding(config["context"], d)
        self.h = nn.ModuleList(Block(d, config["heads"]) for _ in range(config["layers"]))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, config["vocabulary"], bias=False)
        self._initialise_like_gpt2(config["layers"])

    def _initialise_like_gpt2(self, layers: int):
        residual_std = 0.02 / math.sqrt(2.0 * layers)
        with torch.no_grad():
            for name, parameter in self.named_parameters():
                if "ln_" in name:
                    continue
                if parameter.dim() == 1:
                    parameter.zero_()
                else:
                    parameter.normal_(0.0, residual_std if name.endswith("c_proj.weight") else 0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RmsNorm(nn.Module):
    """Statistics in fp32, the result in the input's dtype times the weight (models/llama.cpp)."""

    def __init__(self, width: int, eps: float = LLAMA_NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def llama_inverse_frequencies(model: str) -> torch.Tensor:
    """Rotary inverse frequencies with Llama 3.1's "llama3" scaling, as Hugging Face computes them:
    long wavelengths divided by the factor, short ones kept, those between blended."""
    c = LLAMA_CONFIGS[model]
    dim = c["width"] // c["heads"]
    inverse = 1.0 / (LLAMA_ROPE_THETA ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  # fp32, as HF
    factor, original, low, high = c["rope_factor"], float(c["rope_original_context"]), 1.0, 4.0
    wavelength = 2 * math.pi / inverse
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inverse / factor + smooth * inverse
    scaled = torch.where(wavelength > original / low, inverse / factor,
                         torch.where(wavelength < original / high, inverse, blended))
    return scaled


def rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(x, inv_freq):
    """Each feature pair (i, i + h/2) of x (batch, heads, tokens, h) rotated by position x inv_freq[i],
    angles in fp32, applied in x's dtype (Hugging Face's rotation of halves)."""
    positions = torch.arange(x.size(-2), device=x.device, dtype=inv_freq.dtype)
    angles = torch.outer(positions, inv_freq)
    both = torch.cat((angles, angles), dim=-1)
    return x * both.cos().to(x.dtype) + rotate_half(x) * both.sin().to(x.dtype)


class LlamaAttention(nn.Module):
    """Grouped-query causal self-attention with rotary positions. The heads a rank holds follow from
    its projections' width, so tensor parallelism's column shards (by heads) run unchanged."""

    def __init__(self, model: str):
        super().__init__()
        c = LLAMA_CONFIGS[model]
        self.head_dim = c["width"] // c["heads"]
        self.q_proj = nn.Linear(c["width"], c["heads"] * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c["width"], c["kv_heads"] * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["width"], c["kv_heads"] * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c["heads"] * self.head_dim, c["width"], bias=False)
        self.register_buffer("inv_freq", llama_inverse_frequencies(model), persistent=False)

    def forward(self, x):
        batch, tokens, _ = x.shape
        q, k, v = (proj(x).view(batch, tokens, -1, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rotary(q, self.inv_freq), rotary(k, self.inv_freq)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.size(1) != q.size(1))
        return self.o_proj(y.transpose(1, 2).reshape(batch, tokens, -1))


class LlamaMlp(nn.Module):
    def __init__(self, width: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(width, ffn, bias=False)  # w1
        self.up_proj = nn.Linear(width, ffn, bias=False)  # w3
        self.down_proj = nn.Linear(ffn, width, bias=False)  # w2

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, model: str):
        super().__init__()
        c = LLAMA_CONFIGS[model]
        self.input_layernorm = RmsNorm(c["width"])
        self.self_attn = LlamaAttention(model)
        self.post_attention_layernorm = RmsNorm(c["width"])
        self.mlp = LlamaMlp(c["width"], c["ffn"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """Hugging Face's LlamaModel: the embedding, the blocks and the final norm."""

    def __init__(self, model: str):
        super().__init__()
        c = LLAMA_CONFIGS[model]
        self.embed_tokens = nn.Embedding(c["vocabulary"], c["width"])
        self.layers = nn.ModuleList(LlamaBlock(model) for _ in range(c["layers"]))
        self.norm = RmsNorm(c["width"])


class Llama(nn.Module):
    """models/llama.cpp: no biases, no dropout; the head untied (llama3-8b) or the embedding's weight
    (llama3-1b, llama3-3b). Weights N(0, 0.02), o_proj and down_proj 0.02 / sqrt(2 L), norms 1, drawn
    from torch's generator (parbench draws the same distribution from its own)."""

    def __init__(self, model: str):
        super().__init__()
        c = LLAMA_CONFIGS[model]
        self.tied = c["tied"]
        self.model = LlamaBody(model)
        self.lm_head = nn.Linear(c["width"], c["vocabulary"], bias=False)
        if self.tied:
            self.lm_head.weight = self.model.embed_tokens.weight
        residual_std = 0.02 / math.sqrt(2.0 * c["layers"])
        with torch.no_grad():
            for name, parameter in self.named_parameters():  # a tied weight once
                if name.endswith("norm.weight"):
                    continue
                into_residual = name.endswith(("o_proj.weight", "down_proj.weight"))
                parameter.normal_(0.0, residual_std if into_residual else 0.02)

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for block in self.model.layers:
            x = block(x)
        return self.lm_head(self.model.norm(x))


def make_model(model: str) -> nn.Module:
    if model in LLAMA_CONFIGS:
        return Llama(model)
    return GPT(model) if model in GPT_CONFIGS else make_resnet(model)


def named_stages(model_name: str, model: nn.Module) -> list[tuple[str, nn.Module]]:
    """parbench's stages (models/resnet.cpp, models/gpt.cpp), sharing the model's modules."""
    if model_name in GPT_CONFIGS:
        return ([("embed", Embed(model.wte, model.wpe))]
                + [(f"h.{i}", block) for i, block in enumerate(model.h)]
                + [("head", Head(model.ln_f, model.lm_head))])
    layers = [model.layer1, model.layer2, model.layer3, model.layer4]
    return ([("stem", nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool))]
            + [(f"layer{n}.{i}", block) for n, layer in enumerate(layers, 1) for i, block in enumerate(layer)]
            + [("head", nn.Sequential(model.avgpool, nn.Flatten(1), model.fc))])


def stage_groups(model_name: str) -> dict[str, list[str]]:
    """parbench's named runs of stages (ResNet's layers, each its blocks), which a cut may name."""
    if model_name in GPT_CONFIGS:
        return {}
    return {f"layer{n}": [f"layer{n}.{i}" for i in range(blocks)]
            for n, blocks in enumerate(RESNET_LAYERS[model_name], 1)}


def stage_names(model_name: str) -> list[str]:
    if model_name in GPT_CONFIGS:
        return ["embed", *(f"h.{i}" for i in range(GPT_CONFIGS[model_name]["layers"])), "head"]
    return ["stem", *(name for blocks in stage_groups(model_name).values() for name in blocks), "head"]


def parse_cut(spec: str, names: list[str], parts: int, groups: dict[str, list[str]] | None = None) -> list[list[str]]:
    """parbench's --cut syntax (strategies/partition.cpp): stage names in order, a group's name
    standing for its stages, ',' within a part, '|' between parts; every stage once. ValueError
    says what is wrong."""
    groups = groups or {}
    cut, next_stage = [], 0
    for part in spec.split("|"):
        chosen = []
        for name in (name for name in part.split(",") if name):
            if name not in names and name not in groups:
                raise ValueError(f"bad cut '{spec}': unknown stage '{name}'")
            for member in [name] if name in names else groups[name]:
                if next_stage >= len(names) or names[next_stage] != member:
                    raise ValueError(f"bad cut '{spec}': '{name}' is out of order, repeated or skips one")
                next_stage += 1
                chosen.append(member)
        if not chosen:
            raise ValueError(f"bad cut '{spec}': part {len(cut)} has no stage")
        cut.append(chosen)
    if next_stage != len(names):
        raise ValueError(f"bad cut '{spec}': stage '{names[next_stage]}' is in no part")
    if len(cut) != parts:
        raise ValueError(f"bad cut '{spec}': {len(cut)} parts, {parts} wanted")
    return cut


def format_cut(cut: list[list[str]], groups: dict[str, list[str]] | None = None) -> str:
    """parbench's format_cut: a group whose stages all lie in one part is written by its name."""
    texts = []
    for part in cut:
        names, i = [], 0
        while i < len(part):
            whole = next((group for group, members in (groups or {}).items()
                          if part[i:i + len(members)] == members), None)
            names.append(whole or part[i])
            i += len(groups[whole]) if whole else 1
        texts.append(",".join(names))
    return "|".join(texts)


def default_cut(model_name: str, parts: int) -> str:
    """The cut parbench uses where it is fixed: the tutorial's for ResNet on 2 parts. Elsewhere
    parbench's cut is balanced by measured times; these put the first stage (stem, embed) with the
    first part, the last (head) with the last, and the blocks between in equal parts (ResNet-50's
    bottleneck blocks are of similar FLOPs). Pass parbench's label `cut` of the same call
    (--cuts-from) to match it exactly."""
    names = stage_names(model_name)
    if model_name not in GPT_CONFIGS and parts == 2:
        return "stem,layer1,layer2|layer3,layer4,head"
    blocks = names[1:-1]
    bounds = [round(len(blocks) * k / parts) for k in range(parts + 1)] if parts > 0 else [0]
    cut = [blocks[bounds[k]:bounds[k + 1]] for k in range(parts)]
    if cut:
        cut[0].insert(0, names[0])
        cut[-1].append(names[-1])
    if not cut or not all(cut):
        raise ValueError(f"no default cut of {model_name} into {parts} parts: it has {len(names)} stages")
    return format_cut(cut, stage_groups(model_name))


def cut_modules(model_name: str, model: nn.Module, cut: list[list[str]]) -> list[nn.Sequential]:
    """One nn.Sequential per part of the cut, sharing the model's modules."""
    stages = dict(named_stages(model_name, model))
    return [nn.Sequential(*(stages[name] for name in part)) for part in cut]
