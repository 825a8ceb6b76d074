// Models by name.
#pragma once

#include "models/staged_model.h"

namespace parbench {

// Names accepted by make_model, in a stable order.
std::vector<std::string> model_names();

// A freshly initialised model on the CPU; throws std::invalid_argument for an unknown name.
ModelPtr make_model(const std::string& name, int64_t num_classes);

}  // namespace parbench
