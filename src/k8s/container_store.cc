#include "k8s/container_store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>


namespace vgpu::k8s {
namespace {

Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return Status::Ok();
  if (errno != EEXIST) return Status::Error("cannot create " + path + ": " + strerror(errno));
  struct stat info {};
  if (lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return Status::Error(path + " exists and is not a directory");
  }
  return Status::Ok();
}

Status MakeDirectories(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1)) {
    if (Status status = MakeDirectory(path.substr(0, at)); !status.ok) return status;
  }
  return MakeDirectory(path);
}

}  // namespace

LedgerDirectoryStore::LedgerDirectoryStore(std::string containers_dir) : containers_dir_(std::move(containers_dir)) {}

Status LedgerDirectoryStore::Prepare(const ContainerGrant& grant, const ledger::LimitSet& limits) {
  if (Status status = ValidateContainerKey(grant.key); !status.ok) return status;
  const std::string dir = containers_dir_ + "/" + grant.key;
  if (Status status = MakeDirectories(dir); !status.ok) return status;
  ledger::LedgerStatus written = ledger::Ledger::WriteLimits(dir + "/ledger", limits);
  if (!written.ok) return Status::Error(written.message);
  return Status::Ok();
}

}  // namespace vgpu::k8s
