#include "strategies/distributed/device_mesh.h"

#include "strategies/distributed/store_backend.h"
#include "strategies/distributed/world.h"

#include <algorithm>
#include <stdexcept>

namespace parbench {
namespace {

std::string known_axes_text() {
  std::string text;
  for (const auto& name : MeshShape::axis_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

const std::vector<std::string>& MeshShape::axis_names() {
  static const std::vector<std::string> names = {"dp", "tp"};
  return names;
}

MeshShape MeshShape::parse(const std::string& text) {
  const auto refuse = [&text](const std::string& why) {
    return std::invalid_argument("mesh '" + text + "': " + why + " (a mesh is axes with their sizes, outer to inner, " +
                                 "joined by '.': dp4, tp4, dp2.tp2; axes: " + known_axes_text() + ")");
  };
  MeshShape shape;
  for (const auto& name : axis_names()) shape.axes_.push_back({name, 1});
  if (text.empty()) throw refuse("empty");
  size_t last_index = 0;
  bool any = false;
  size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find('.', start), text.size());
    const auto part = text.substr(start, end - start);
    size_t digits = part.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(part[digits - 1]))) --digits;
    const auto name = part.substr(0, digits);
    const auto size_text = part.substr(digits);
    const auto known = std::find(axis_names().begin(), axis_names().end(), name);
    if (name.empty() || known == axis_names().end()) throw refuse("unknown axis '" + part + "'");
    if (size_text.empty() || size_text.size() > 6 || size_text.front() == '0') {
      throw refuse("axis " + name + " needs a size of at least 1, as in " + name + "2");
    }
    const auto index = static_cast<size_t>(known - axis_names().begin());
    if (any && index <= last_index) {
      throw refuse(index == last_index ? "axis " + name + " is named twice" : "axis " + name + " comes before " +
                                                                                     axis_names()[last_index]);
    }
    shape.axes_[index].size = std::stoi(size_text);
    last_index = index;
    any = true;
    start = end + 1;
  }
  return shape;
}

std::vector<MeshShape> MeshShape::all_of(int devices) {
  std::vector<MeshShape> meshes;
  for (int tp = 1; tp <= devices; ++tp) {
    if (devices % tp != 0) continue;
    MeshShape shape;
    shape.axes_ = {{"dp", devices / tp}, {"tp", tp}};
    meshes.push_back(shape);
  }
  return meshes;
}

MeshShape MeshShape::along(const std::string& axis, int devices) {
  MeshShape shape;
  for (const auto& name : axis_names()) shape.axes_.push_back({name, name == axis ? devices : 1});
  return shape;
}

int MeshShape::size(const std::string& axis) const {
  for (const auto& entry : axes_) {
    if (entry.name == axis) return entry.size;
  }
  return 1;
}

int MeshShape::product() const {
  int product = 1;
  for (const auto& entry : axes_) product *= entry.size;
  return product;
}

std::string MeshShape::str() const {
  std::string text;
  for (const auto& entry : axes_) {
    if (entry.size > 1) text += (text.empty() ? "" : ".") + entry.name + std::to_string(entry.size);
  }
  return text.empty() ? (axes_.empty() ? axis_names().front() : axes_.front().name) + "1" : text;
}

std::map<std::string, int> MeshShape::coordinates(int rank) const {
  std::map<std::string, int> coordinates;
  for (auto entry = axes_.rbegin(); entry != axes_.rend(); ++entry) {
    coordinates[entry->name] = rank % entry->size;
    rank /= entry->size;
  }
  return coordinates;
}

std::string MeshShape::coordinates_text(int rank) const {
  const auto coordinates = this->coordinates(rank);
  std::string text;
  for (const auto& entry : axes_) {
    text += (text.empty() ? "" : ",") + entry.name + "=" + std::to_string(coordinates.at(entry.name));
  }
  return text;
}

std::vector<int> MeshShape::group_ranks(int rank, const std::string& axis) const {
  int stride = 1;
  bool found = false;
  for (auto entry = axes_.rbegin(); entry != axes_.rend(); ++entry) {
    if (entry->name == axis) {
      found = true;
      break;
    }
    stride *= entry->size;
  }
  if (!found) throw std::invalid_argument("the mesh " + str() + " has no axis " + axis);
  const int coordinate = coordinates(rank).at(axis);
  const int first = rank - coordinate * stride;
  std::vector<int> ranks;
  for (int k = 0; k < size(axis); ++k) ranks.push_back(first + k * stride);
  return ranks;
}

DeviceMesh::DeviceMesh(World& world, MeshShape shape) : shape_(std::move(shape)), rank_(world.rank()) {
  if (shape_.product() != world.size()) {
    throw std::invalid_argument("the mesh " + shape_.str() + " has " + std::to_string(shape_.product()) +
                                " ranks, the run " + std::to_string(world.size()));
  }
  // Every rank makes its group of each axis in the axes' order; a group's name is its axis and
  // its first rank, the same on each member.
  for (const auto& axis : shape_.axes()) {
    const auto ranks = shape_.group_ranks(rank_, axis.name);
    groups_[axis.name] = world.make_group(axis.name + std::to_string(ranks.front()), ranks);
    if (auto* store = dynamic_cast<StoreBackend*>(groups_[axis.name].get())) {
      std::string members;
      for (size_t k = 0; k < ranks.size(); ++k) {
        members += (k > 0 ? ", " : "") + std::to_string(ranks[k]) + " (" + shape_.coordinates_text(ranks[k]) + ")";
      }
      std::string indices;
      for (size_t k = 0; k < ranks.size(); ++k) indices += (k > 0 ? ", " : "") + std::to_string(k);
      store->set_group_note(" in the " + axis.name + " group, whose ranks " + indices + " are the run's ranks " + members);
    }
  }
}

DeviceMesh::~DeviceMesh() {
  if (aborted_) return;
  for (auto& [axis, group] : groups_) {
    try {
      group->shutdown();
    } catch (const std::exception&) {
      // Leaving after a failure, already reported.
    }
  }
}

void DeviceMesh::abort() {
  aborted_ = true;
  for (auto& [axis, group] : groups_) {
    try {
      group->abort();
    } catch (const std::exception&) {
      // Already failing: the first failure is the one reported.
    }
  }
}

}  // namespace parbench
