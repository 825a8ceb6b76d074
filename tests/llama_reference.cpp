// Writes what tests/python/test_llama_reference.py compares with Hugging Face's LlamaForCausalLM:
//   llama_reference MODEL|CONFIG.json DIR
// builds the model (a registered one by name, or a Hugging Face config.json) in fp32 from seed 1234,
// its queries' and keys' weights scaled by 8, runs a forward and a backward of the next-token loss on 2 sequences of 12 random tokens, and
// writes DIR/config.json (the model's configuration as Hugging Face reads it) and DIR/tensors.pt
// (torch.load reads it): a dict of "tokens", "targets", "logits", "loss", and "weight/<name>" and
// "grad/<name>" for every parameter, by Hugging Face's names.
#include "models/llama.h"
#include "models/llama_config_file.h"
#include "models/model_zoo.h"
#include "strategies/training.h"

#include <torch/serialize.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

int main(int argc, char** argv) {
  using namespace parbench;
  if (argc != 3) {
    std::fprintf(stderr, "usage: llama_reference MODEL|CONFIG.json DIR\n");
    return 2;
  }
  try {
    std::string model_name = argv[1];
    if (model_name.size() > 5 && model_name.compare(model_name.size() - 5, 5, ".json") == 0) {
      model_name = register_llama_config_file(model_name, nullptr);
    }
    torch::manual_seed(1234);
    auto model = make_model(model_name, /*num_classes=*/1);
    auto* llama = dynamic_cast<LlamaImpl*>(&model->module());
    if (llama == nullptr) throw std::invalid_argument(model_name + " is not a Llama model");
    const auto& config = llama->config();
    // Queries and keys 8 times larger than drawn: attention scores of a few units, so that the
    // softmax is far from uniform and the positions (rotary, its scaling) show in the logits.
    {
      torch::NoGradGuard no_grad;
      for (const auto& item : model->module().named_parameters()) {
        const auto& name = item.key();
        if (name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos) item.value().mul_(8);
      }
    }
    torch::manual_seed(5);
    const auto tokens = torch::randint(config.vocabulary, {2, 12}, torch::kLong);
    const auto targets = torch::randint(config.vocabulary, {2, 12}, torch::kLong);
    const auto logits = model->forward(tokens);
    const auto loss = compute_loss(logits, targets, LossKind::kCrossEntropy);
    loss.backward();

    c10::Dict<std::string, torch::Tensor> tensors;
    tensors.insert("tokens", tokens);
    tensors.insert("targets", targets);
    tensors.insert("logits", logits.detach());
    tensors.insert("loss", loss.detach());
    for (const auto& item : model->module().named_parameters()) {
      tensors.insert("weight/" + item.key(), item.value().detach());
      tensors.insert("grad/" + item.key(), item.value().grad());
    }
    const std::string dir = argv[2];
    const auto bytes = torch::pickle_save(c10::IValue(tensors));
    std::ofstream(dir + "/tensors.pt", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::ofstream(dir + "/config.json") << llama_config_json(config) << "\n";
  } catch (const std::exception& error) {
    std::fprintf(stderr, "llama_reference: %s\n", error.what());
    return 1;
  }
  return 0;
}
