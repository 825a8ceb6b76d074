"""The models parbench trains, in PyTorch: ResNet-50 (torchvision's, which models/resnet.cpp
copies) and the GPT-2-style model of models/gpt.cpp, each also as parbench's named stages
(stem, layer1..layer4, head; embed, h.0..h.<L-1>, head) so that pipelines cut them where
parbench does."""
from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

from baseline_common import GPT_CONFIGS, RESNET_LAYERS, num_classes

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


def make_model(model: str) -> nn.Module:
    return GPT(model) if model in GPT_CONFIGS else make_resnet(model)


def named_stages(model_name: str, model: nn.Module) -> list[tuple[str, nn.Module]]:
    """parbench's stages (models/resnet.cpp, models/gpt.cpp), sharing the model's modules."""
    if model_name in GPT_CONFIGS:
        return ([("embed", Embed(model.wte, model.wpe))]
                + [(f"h.{i}", block) for i, block in enumerate(model.h)]
                + [("head", Head(model.ln_f, model.lm_head))])
    return [("stem", nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)),
            ("layer1", model.layer1), ("layer2", model.layer2), ("layer3", model.layer3), ("layer4", model.layer4),
            ("head", nn.Sequential(model.avgpool, nn.Flatten(1), model.fc))]


def stage_names(model_name: str) -> list[str]:
    if model_name in GPT_CONFIGS:
        return ["embed", *(f"h.{i}" for i in range(GPT_CONFIGS[model_name]["layers"])), "head"]
    return ["stem", "layer1", "layer2", "layer3", "layer4", "head"]


def parse_cut(spec: str, names: list[str], parts: int) -> list[list[str]]:
    """parbench's --cut syntax (strategies/partition.cpp): stage names in order, ',' within a
    part, '|' between parts; every stage once. ValueError says what is wrong."""
    cut, next_stage = [], 0
    for part in spec.split("|"):
        chosen = [name for name in part.split(",") if name]
        for name in chosen:
            if name not in names:
                raise ValueError(f"bad cut '{spec}': unknown stage '{name}'")
            if names.index(name) != next_stage:
                raise ValueError(f"bad cut '{spec}': stage '{name}' is out of order, repeated or skips one")
            next_stage += 1
        if not chosen:
            raise ValueError(f"bad cut '{spec}': part {len(cut)} has no stage")
        cut.append(chosen)
    if next_stage != len(names):
        raise ValueError(f"bad cut '{spec}': stage '{names[next_stage]}' is in no part")
    if len(cut) != parts:
        raise ValueError(f"bad cut '{spec}': {len(cut)} parts, {parts} wanted")
    return cut


def default_cut(model_name: str, parts: int) -> str:
    """The cut parbench uses on 2 GPUs where it is fixed: the tutorial's for ResNet; for 4 parts
    (interleaved-1f1b, 2 chunks on 2 GPUs) the one its balanced cut chose on H200s
    (stem,layer1|layer2|layer3|layer4,head). A GPT's balanced cut is measured at run time: these
    split the blocks evenly, the embedding with the first part and the head with the last; pass
    parbench's label `cut` of the same call to match it exactly."""
    if model_name not in GPT_CONFIGS:
        if parts == 2:
            return "stem,layer1,layer2|layer3,layer4,head"
        if parts == 4:
            return "stem,layer1|layer2|layer3|layer4,head"
        raise ValueError(f"no default cut of {model_name} into {parts} parts")
    layers = GPT_CONFIGS[model_name]["layers"]
    bounds = [round(layers * k / parts) for k in range(parts + 1)]
    groups = [[f"h.{i}" for i in range(bounds[k], bounds[k + 1])] for k in range(parts)]
    groups[0].insert(0, "embed")
    groups[-1].append("head")
    return "|".join(",".join(group) for group in groups)


def cut_modules(model_name: str, model: nn.Module, cut: list[list[str]]) -> list[nn.Sequential]:
    """One nn.Sequential per part of the cut, sharing the model's modules."""
    stages = dict(named_stages(model_name, model))
    return [nn.Sequential(*(stages[name] for name in part)) for part in cut]
