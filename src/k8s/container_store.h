// Where a granted container's ledger lives. The device plugin asks the store to create the
// container's directory and write its limits before it answers Allocate; the directory is then
// mounted into the container (container_grant.h).
//
// ContainerStore is the seam to vgpu-node: the daemon owns the directories (its record of the
// container's identity, housekeeping, removal when the container is gone) and supplies its own
// store; LedgerDirectoryStore is the plain implementation of the layout in CONTRACT.md, for
// tools and tests that run the plugin without the daemon:
//   <containers_dir>/<key>/          0755, created when missing
//   <containers_dir>/<key>/ledger    ledger::Ledger::WriteLimits, authority kNodeDaemon
// Thread safety: Prepare may be called from any thread; calls for different keys are
// independent, calls for one key are serialised by the ledger's own lock.
#pragma once

#include <string>

#include "k8s/container_grant.h"
#include "k8s/status.h"
#include "ledger/ledger.h"

namespace vgpu::k8s {

class ContainerStore {
 public:
  virtual ~ContainerStore() = default;
  // Creates the directory <grant.key> if needed and writes `limits` into its ledger (an existing
  // ledger keeps its charges; ledger::Ledger::WriteLimits). The grant names the container
  // (pod uid, container name, namespace, pod name) for the daemon's records. Errors name the path.
  // REQUIRES: grant.key passes ValidateContainerKey.
  virtual Status Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) = 0;
};

class LedgerDirectoryStore : public ContainerStore {
 public:
  explicit LedgerDirectoryStore(std::string containers_dir);
  Status Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) override;

 private:
  const std::string containers_dir_;
};

}  // namespace vgpu::k8s
