// The device mesh: the ranks of a run laid out on named axes, as torchtitan's and Megatron's are,
// each parallelism running on one axis's group. `dp` (data parallel: ddp, or zero sharding the
// replica's states) is the outer axis and `tp` (tensor parallel) the inner one, so that the ranks
// of one tensor-parallel group are neighbours: on one node, the GPUs NVLink joins most directly.
//   --mesh=dp2.tp2 on 4 ranks: rank = dp * 2 + tp; tp groups {0,1} {2,3}, dp groups {0,2} {1,3}.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <map>
#include <string>
#include <vector>

namespace parbench {

class World;

struct MeshAxis {
  std::string name;
  int size = 1;
};

// A mesh's axes and their sizes, outer to inner. Written "dp2.tp2": each axis's name then its
// size, joined by '.', in the axes' order; an axis of size 1 is left out of the text unless every
// axis has size 1 ("dp1").
class MeshShape {
 public:
  // The known axes, outer to inner.
  static const std::vector<std::string>& axis_names();

  // Throws std::invalid_argument naming what is wrong and what is allowed: an unknown axis, a
  // size that is not a whole number of at least 1, an axis named twice, axes out of order.
  static MeshShape parse(const std::string& text);
  // Every mesh of `devices` ranks over the known axes: each factorisation, the tp degree rising.
  static std::vector<MeshShape> all_of(int devices);
  // `devices` ranks on one axis.
  static MeshShape along(const std::string& axis, int devices);

  int size(const std::string& axis) const;  // 1 where the mesh has no such axis
  int product() const;
  const std::vector<MeshAxis>& axes() const { return axes_; }  // every known axis, outer to inner
  std::string str() const;
  bool operator==(const MeshShape& other) const { return str() == other.str(); }

  // This rank's place on each axis (rank = its coordinates, row-major, the last axis inner).
  std::map<std::string, int> coordinates(int rank) const;
  // "dp=1,tp=0".
  std::string coordinates_text(int rank) const;
  // The ranks of `rank`'s group along `axis`: those that differ from it on that axis alone, in
  // the axis's order.
  std::vector<int> group_ranks(int rank, const std::string& axis) const;

 private:
  std::vector<MeshAxis> axes_;
};

// One rank's mesh: its coordinates and one process group per axis, made from the world's
// rendezvous (World::make_group). Made by every rank of the world, in the same order, since each
// group's members meet to create it. Shuts its groups down when destroyed.
class DeviceMesh {
 public:
  DeviceMesh(World& world, MeshShape shape);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int rank() const { return rank_; }
  int coordinate(const std::string& axis) const { return shape_.coordinates(rank_).at(axis); }
  std::string coordinates_text() const { return shape_.coordinates_text(rank_); }
  // This rank's group along `axis` (its rank there is coordinate(axis)).
  const c10::intrusive_ptr<c10d::Backend>& group(const std::string& axis) const { return groups_.at(axis); }
  // After a failure: abandons the groups' pending work.
  void abort();

 private:
  MeshShape shape_;
  int rank_;
  std::map<std::string, c10::intrusive_ptr<c10d::Backend>> groups_;
  bool aborted_ = false;
};

}  // namespace parbench
