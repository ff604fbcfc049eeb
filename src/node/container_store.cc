#include "node/container_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <sstream>

#include "node/procfs.h"

namespace vgpu::node {
namespace {

bool ValidName(const std::string& s, size_t max, bool allow_underscore) {
  if (s.empty() || s.size() > max || s == "." || s == "..") return false;
  for (const char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && !(c == '_' && allow_underscore)) return false;
  }
  return true;
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

uint64_t NowUnix() { return static_cast<uint64_t>(time(nullptr)); }

// Writes `text` to `path` atomically (temporary file + fsync + rename), mode 0644.
Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::Error(tmp + ": cannot create: " + strerror(errno));
  fchmod(fd, 0644);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return Status::Error(tmp + ": write failed: " + why);
    }
    done += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    return Status::Error(path + ": rename failed: " + why);
  }
  return Status::Ok();
}

}  // namespace

std::string ValidateIdentity(const std::string& pod_uid, const std::string& container_name) {
  // No '_' in the pod uid: the key's first '_' separates the two, so keys never collide.
  if (!ValidName(pod_uid, 128, false)) return "pod uid \"" + pod_uid + "\" is not 1..128 characters of [A-Za-z0-9.-]";
  if (!ValidName(container_name, 120, true)) {
    return "container name \"" + container_name + "\" is not 1..120 characters of [A-Za-z0-9._-]";
  }
  return "";
}

std::string ContainerKey(const std::string& pod_uid, const std::string& container_name) {
  return pod_uid + "_" + container_name;
}

std::string FormatRecord(const ContainerRecord& r) {
  std::ostringstream out;
  out << "# vgpu-node container record; written by the daemon, do not edit\n"
      << "version = 1\n"
      << "pod_uid = " << r.pod_uid << "\n"
      << "container_name = " << r.container_name << "\n"
      << "namespace = " << r.ns << "\n"
      << "pod_name = " << r.pod_name << "\n"
      << "cgroup = " << r.cgroup << "\n"
      << "pinned_cgroup = " << r.pinned_cgroup << "\n"
      << "created_unix = " << r.created_unix << "\n"
      << "released_unix = " << r.released_unix << "\n";
  return out.str();
}

std::string ParseRecord(const std::string& text, ContainerRecord* r) {
  std::istringstream in(text);
  bool version = false;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) return "line " + std::to_string(line_no) + ": expected key = value";
    const std::string key = Trim(t.substr(0, eq));
    const std::string value = Trim(t.substr(eq + 1));
    auto number = [&](uint64_t* field) -> std::string {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = strtoull(value.c_str(), &end, 10);
      if (value.empty() || errno != 0 || *end != '\0') return "line " + std::to_string(line_no) + ": " + key + " is not a number";
      *field = v;
      return "";
    };
    auto cgroup = [&](std::string* field) -> std::string {
      if (!value.empty() && (value[0] != '/' || value.find("/../") != std::string::npos)) {
        return "line " + std::to_string(line_no) + ": " + key + " is not an absolute cgroup path";
      }
      *field = value;
      return "";
    };
    std::string problem;
    if (key == "version") {
      if (value != "1") return "record version " + value + " is not supported (this daemon reads version 1)";
      version = true;
    } else if (key == "pod_uid") {
      r->pod_uid = value;
    } else if (key == "container_name") {
      r->container_name = value;
    } else if (key == "namespace") {
      r->ns = value;
    } else if (key == "pod_name") {
      r->pod_name = value;
    } else if (key == "cgroup") {
      problem = cgroup(&r->cgroup);
    } else if (key == "pinned_cgroup") {
      problem = cgroup(&r->pinned_cgroup);
    } else if (key == "created_unix") {
      problem = number(&r->created_unix);
    } else if (key == "released_unix") {
      problem = number(&r->released_unix);
    }
    if (!problem.empty()) return problem;
  }
  if (!version) return "no version line";
  if (const std::string bad = ValidateIdentity(r->pod_uid, r->container_name); !bad.empty()) return bad;
  return "";
}

ContainerStore::ContainerStore(std::string containers_dir) : dir_(std::move(containers_dir)) {}

Status ContainerStore::Init() {
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Error(dir_ + ": cannot create: " + strerror(errno));
  }
  struct stat st;
  if (lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return Status::Error(dir_ + ": not a directory");
  return Status::Ok();
}

Status ContainerStore::WriteRecordLocked(const ContainerRecord& record) {
  return WriteFileAtomic(record.RecordPath(), FormatRecord(record));
}

std::optional<ContainerRecord> ContainerStore::ReadDir(const std::string& key) const {
  const std::string dir = dir_ + "/" + key;
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  ContainerRecord r;
  r.key = key;
  r.dir = dir;
  const std::optional<std::string> text = ReadSmallFile(r.RecordPath());
  if (!text) {
    r.error = r.RecordPath() + ": cannot read: " + strerror(errno);
    return r;
  }
  if (const std::string bad = ParseRecord(*text, &r); !bad.empty()) {
    r.error = r.RecordPath() + ": " + bad;
    return r;
  }
  if (ContainerKey(r.pod_uid, r.container_name) != key) {
    r.error = r.RecordPath() + ": names pod " + r.pod_uid + " container " + r.container_name + ", not " + key;
    return r;
  }
  ledger::LedgerStatus status;
  const std::unique_ptr<ledger::Ledger> ledger = ledger::Ledger::OpenReadOnly(r.LedgerPath(), &status);
  if (ledger == nullptr) {
    r.error = status.message;
    return r;
  }
  r.limits = ledger->Limits();
  return r;
}

Status ContainerStore::Ensure(const ContainerSpec& spec, ContainerRecord* out) {
  if (const std::string bad = ValidateIdentity(spec.pod_uid, spec.container_name); !bad.empty()) {
    return Status::Error("container: " + bad);
  }
  if (!spec.cgroup.empty() && (spec.cgroup[0] != '/' || spec.cgroup.find("/../") != std::string::npos)) {
    return Status::Error("container: cgroup \"" + spec.cgroup + "\" is not an absolute cgroup path");
  }
  ledger::LimitSet limits = spec.limits;
  limits.authority = ledger::Authority::kNodeDaemon;
  if (const std::string bad = ledger::ValidateLimitSet(limits); !bad.empty()) {
    return Status::Error("container: invalid limits: " + bad);
  }
  const std::string key = ContainerKey(spec.pod_uid, spec.container_name);
  std::lock_guard<std::mutex> lock(mu_);
  ContainerRecord r;
  if (std::optional<ContainerRecord> existing = ReadDir(key); existing && existing->error.empty()) {
    r = *existing;
  } else {
    r.key = key;
    r.dir = dir_ + "/" + key;
    r.created_unix = NowUnix();
    if (mkdir(r.dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::Error(r.dir + ": cannot create: " + strerror(errno));
    }
    chmod(r.dir.c_str(), 0755);
  }
  r.pod_uid = spec.pod_uid;
  r.container_name = spec.container_name;
  r.ns = spec.ns;
  r.pod_name = spec.pod_name;
  r.cgroup = spec.cgroup;
  r.released_unix = 0;
  r.error.clear();
  // The ledger first: a record without a valid ledger is never served.
  const ledger::LedgerStatus written = ledger::Ledger::WriteLimits(r.LedgerPath(), limits);
  if (!written.ok) return Status::Error(written.message);
  r.limits = limits;
  if (Status s = WriteRecordLocked(r); !s.ok) return s;
  records_[key] = r;
  ++generation_;
  if (out != nullptr) *out = r;
  return Status::Ok();
}

Status ContainerStore::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(key);
  if (it == records_.end()) return Status::Error("container " + key + ": unknown");
  if (!it->second.error.empty()) return Status::Error("container " + key + ": " + it->second.error);
  if (it->second.released()) return Status::Ok();
  ContainerRecord r = it->second;
  r.released_unix = NowUnix();
  if (Status s = WriteRecordLocked(r); !s.ok) return s;
  it->second = r;
  ++generation_;
  return Status::Ok();
}

Status ContainerStore::Pin(const std::string& key, const std::string& cgroup) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(key);
  if (it == records_.end()) return Status::Error("container " + key + ": unknown");
  if (it->second.pinned_cgroup == cgroup) return Status::Ok();
  ContainerRecord r = it->second;
  r.pinned_cgroup = cgroup;
  if (Status s = WriteRecordLocked(r); !s.ok) return s;
  it->second = r;
  ++generation_;
  return Status::Ok();
}

Status ContainerStore::Remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string dir = dir_ + "/" + key;
  if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..") {
    return Status::Error("container key \"" + key + "\" is not a directory name");
  }
  // Only what we put there, then the directory: anything else (a stray file) keeps it.
  for (const char* leaf : {"ledger", "record"}) {
    const std::string path = dir + "/" + leaf;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::Error(path + ": cannot remove: " + strerror(errno));
    }
  }
  ++generation_;
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    records_.erase(key);
    return Status::Error(dir + ": cannot remove: " + strerror(errno));
  }
  records_.erase(key);
  return Status::Ok();
}

size_t ContainerStore::Rescan() {
  // Read without the lock (registrations keep being served), then swap in the result unless a
  // change was made through this object meanwhile; then read again (bounded).
  for (int attempt = 0;; ++attempt) {
    uint64_t generation = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation = generation_;
    }
    std::map<std::string, ContainerRecord> fresh;
    if (DIR* d = opendir(dir_.c_str())) {
      while (const dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == ".." || name.find(".tmp.") != std::string::npos) continue;
        if (std::optional<ContainerRecord> r = ReadDir(name)) fresh.emplace(name, std::move(*r));
      }
      closedir(d);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (generation_ != generation && attempt < 3) continue;
    records_.swap(fresh);
    return records_.size();
  }
}

bool ContainerStore::Load(const std::string& key) {
  if (key.empty() || key.find('/') != std::string::npos || key == "." || key == "..") return false;
  std::optional<ContainerRecord> r = ReadDir(key);
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  if (!r) {
    records_.erase(key);
    return false;
  }
  records_[key] = std::move(*r);
  return true;
}

std::optional<ContainerRecord> ContainerStore::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = records_.find(key);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::vector<ContainerRecord> ContainerStore::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ContainerRecord> out;
  out.reserve(records_.size());
  for (const auto& [key, r] : records_) out.push_back(r);
  return out;
}

std::vector<ContainerRecord> ContainerStore::ForPod(const std::string& pod_uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ContainerRecord> out;
  for (const auto& [key, r] : records_) {
    if (r.pod_uid == pod_uid) out.push_back(r);
  }
  return out;
}

}  // namespace vgpu::node
