#include "checkpoint/local_shards.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "checkpoint/checkpoint_dir.hpp"
#include "core/error.hpp"
#include "core/transfer.hpp"
#include "parallel/agreement.hpp"
#include "parallel/grid.hpp"

namespace mpf::local_tier {

namespace {

constexpr char kMagic[8] = {'M', 'P', 'F', 'S', 'H', 'R', 'D', '1'};
constexpr int64_t kHeaderBytes = 8 + 6 * 8;
// Floats moved between the kernels' memory and the file at a time: a bounded host buffer.
constexpr int64_t kChunk = int64_t(1) << 22;

std::string os_error() {
  return std::strerror(errno);
}

uint64_t hash_text(const std::string& text) {  // FNV-1a: names, not data
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t value, int digits) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return std::string(text + 16 - digits);
}

// A 64-bit checksum of a byte stream fed in pieces of any length, a word at a time (GB/s: a
// shard is read whole at every restart).
class Checksum {
 public:
  void update(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    bytes_ += n;
    while (n > 0 && fill_ > 0) {
      pending_[fill_++] = *p++;
      --n;
      if (fill_ == 8) {
        mix(word(pending_));
        fill_ = 0;
      }
    }
    for (; n >= 8; p += 8, n -= 8) mix(word(p));
    while (n > 0) {
      pending_[fill_++] = *p++;
      --n;
    }
  }
  uint64_t value() const {
    Checksum c = *this;
    if (c.fill_ > 0) {
      std::memset(c.pending_ + c.fill_, 0, 8 - c.fill_);
      c.mix(word(c.pending_));
    }
    c.mix(c.bytes_);
    return c.h_;
  }

 private:
  static uint64_t word(const unsigned char* p) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
  }
  void mix(uint64_t w) {
    h_ ^= w * 0x9E3779B97F4A7C15ull;
    h_ = ((h_ << 27) | (h_ >> 37)) * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
  }
  uint64_t h_ = 0x243F6A8885A308D3ull, bytes_ = 0;
  unsigned char pending_[8] = {};
  size_t fill_ = 0;
};

// The text stored after the header, compared whole on reading (a hash names the file only).
std::string key_text(const ShardKey& key) {
  return "save = " + key.save + "\n" + key.layout;
}

std::string prefix(const ShardKey& key) {
  return "shard-" + key.save_tag() + "-" + key.layout_tag() + "-step_";
}

std::string rank_suffix(const ShardKey& key) {
  char text[32];
  std::snprintf(text, sizeof text, "-rank_%05d", key.rank);
  return text;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The step of `name` if it is a complete shard of this rank and key, else -1.
int64_t step_of(const std::string& name, const ShardKey& key) {
  const std::string head = prefix(key), tail = rank_suffix(key);
  if (name.compare(0, head.size(), head) != 0 || !ends_with(name, tail)) return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.size() != 8 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

bool write_all(int fd, const void* data, size_t n, Checksum* sum) {
  if (sum) sum->update(data, n);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    p += done;
    n -= size_t(done);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t done = ::read(fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done == 0) errno = ENODATA;  // the file ended early (it shrank since its size was read)
    if (done <= 0) return false;
    p += done;
    n -= size_t(done);
  }
  return true;
}

std::string sync_directory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + dir + " (" + os_error() + ")";
  const bool ok = fsync(fd) == 0;
  const std::string why = ok ? "" : "cannot sync " + dir + " (" + os_error() + ")";
  close(fd);
  return why;
}

// Reads the shard at `path` and checks it whole; with `slab` (and m, v) not null its arrays go
// into the kernels' memory as they are read. "" or why it is not a good shard.
std::string scan(const std::string& path, const ShardKey& key, int64_t step, CheckpointInfo* info,
                 float* slab, float* m, float* v) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? "missing" : "unreadable (" + os_error() + ")";
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) return "unreadable (" + os_error() + ")";
  const int64_t size = st.st_size;
  char magic[8];
  uint64_t head[6];
  Checksum sum;
  if (size < kHeaderBytes || !read_all(fd, magic, 8) || !read_all(fd, head, sizeof head)) {
    return "truncated (" + std::to_string(size) + " bytes)";
  }
  if (std::memcmp(magic, kMagic, 8) != 0) return "not a shard of this program (its magic)";
  sum.update(magic, 8);
  sum.update(head, sizeof head);
  const std::string expected_key = key_text(key);
  if (head[0] != expected_key.size() || head[2] != uint64_t(key.slab) ||
      head[3] != uint64_t(key.moments) || head[4] != uint64_t(step) ||
      head[5] != uint64_t(key.rank) || head[1] > (uint64_t(64) << 20)) {
    return "its header is not of step " + std::to_string(step) + ", rank " +
           std::to_string(key.rank) + " of this layout (damaged)";
  }
  const int64_t expected = kHeaderBytes + int64_t(head[0] + head[1]) +
                           int64_t(sizeof(float)) * (key.slab + key.moments + key.second_moments) +
                           8;
  if (size != expected) {
    return "truncated or damaged (" + std::to_string(size) + " bytes, expected " +
           std::to_string(expected) + ")";
  }
  std::string stored_key(head[0], '\0'), text(head[1], '\0');
  if (!read_all(fd, stored_key.data(), stored_key.size()) ||
      !read_all(fd, text.data(), text.size())) {
    return "unreadable (" + os_error() + ")";
  }
  if (stored_key != expected_key) return "of another run or layout (its key)";
  sum.update(stored_key.data(), stored_key.size());
  sum.update(text.data(), text.size());
  std::vector<float> buffer(size_t(std::min<int64_t>(
      kChunk, std::max<int64_t>({int64_t(1), key.slab, key.moments, key.second_moments}))));
  // By position, not by pointer: checking reads into no memory at all.
  float* const into[3] = {slab, m, v};
  for (int part = 0; part < 3; ++part) {
    float* const memory = into[part];
    const int64_t n = part == 0 ? key.slab : part == 1 ? key.moments : key.second_moments;
    for (int64_t at = 0; at < n; at += kChunk) {
      const int64_t count = std::min(kChunk, n - at);
      if (!read_all(fd, buffer.data(), size_t(count) * sizeof(float))) {
        return "unreadable (" + os_error() + ")";
      }
      sum.update(buffer.data(), size_t(count) * sizeof(float));
      if (memory) {
        copy_from_host(memory + at, buffer.data(), size_t(count) * sizeof(float),
                       "h2d local shard");
      }
    }
  }
  uint64_t stored = 0;
  if (!read_all(fd, &stored, sizeof stored)) return "unreadable (" + os_error() + ")";
  if (stored != sum.value()) return "fails its checksum (damaged)";
  if (info) {
    try {
      *info = parse_checkpoint_info(text, path);
    } catch (const InputError& e) {
      return std::string("its state text: ") + e.what();
    }
    if (info->step != step) return "its state text says step " + std::to_string(info->step);
  }
  return "";
}

}  // namespace

std::string ShardKey::save_tag() const {
  return hex(hash_text(save), 8);
}
std::string ShardKey::layout_tag() const {
  return hex(hash_text(layout), 16);
}

std::string shard_path(const std::string& dir, const ShardKey& key, int64_t step) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%08lld", static_cast<long long>(step));
  return dir + "/" + prefix(key) + digits + rank_suffix(key);
}

std::string write_shard(const std::string& dir, const ShardKey& key, const CheckpointInfo& info,
                        const float* slab, const float* m, const float* v) {
  const std::string path = shard_path(dir, key, info.step);
  const std::string tmp = path + ".partial-" + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp + " (" + os_error() + ")";
  const std::string stored_key = key_text(key), text = to_text(info);
  const uint64_t head[6] = {stored_key.size(),     text.size(),         uint64_t(key.slab),
                            uint64_t(key.moments), uint64_t(info.step), uint64_t(key.rank)};
  Checksum sum;
  bool ok = write_all(fd, kMagic, 8, &sum) && write_all(fd, head, sizeof head, &sum) &&
            write_all(fd, stored_key.data(), stored_key.size(), &sum) &&
            write_all(fd, text.data(), text.size(), &sum);
  std::vector<float> buffer(size_t(std::min<int64_t>(
      kChunk, std::max<int64_t>({int64_t(1), key.slab, key.moments, key.second_moments}))));
  const float* const from[3] = {slab, m, v};
  for (int part = 0; part < 3; ++part) {
    const float* const memory = from[part];
    const int64_t n = part == 0 ? key.slab : part == 1 ? key.moments : key.second_moments;
    for (int64_t at = 0; ok && at < n; at += kChunk) {
      const int64_t count = std::min(kChunk, n - at);
      copy_to_host(buffer.data(), memory + at, size_t(count) * sizeof(float), "d2h local shard");
      ok = write_all(fd, buffer.data(), size_t(count) * sizeof(float), &sum);
    }
  }
  const uint64_t checksum = sum.value();
  ok = ok && write_all(fd, &checksum, sizeof checksum, nullptr);
  std::string error = ok ? "" : "cannot write " + tmp + " (" + os_error() + ")";
  if (error.empty() && fsync(fd) != 0) error = "cannot sync " + tmp + " (" + os_error() + ")";
  if (close(fd) != 0 && error.empty()) error = "cannot close " + tmp + " (" + os_error() + ")";
  // A shard of this step left by an earlier attempt of the run is its own: replaced.
  if (error.empty() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename " + tmp + " to " + path + " (" + os_error() + ")";
  }
  if (!error.empty()) {
    unlink(tmp.c_str());
    return error;
  }
  return sync_directory(dir);
}

std::string check_shard(const std::string& dir, const ShardKey& key, int64_t step,
                        CheckpointInfo& info) {
  return scan(shard_path(dir, key, step), key, step, &info, nullptr, nullptr, nullptr);
}

std::string read_shard(const std::string& dir, const ShardKey& key, int64_t step, float* slab,
                       float* m, float* v) {
  return scan(shard_path(dir, key, step), key, step, nullptr, slab, m, v);
}

std::vector<int64_t> list_steps(const std::string& dir, const ShardKey& key) {
  std::vector<int64_t> steps;
  for (const std::string& name : checkpoint::directory_entries(dir)) {
    const int64_t step = step_of(name, key);
    if (step >= 0) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool other_layouts(const std::string& dir, const ShardKey& key) {
  const std::string run = "shard-" + key.save_tag() + "-", mine = prefix(key);
  for (const std::string& name : checkpoint::directory_entries(dir)) {
    if (name.compare(0, run.size(), run) == 0 && name.compare(0, mine.size(), mine) != 0 &&
        name.find(".partial-") == std::string::npos) {
      return true;
    }
  }
  return false;
}

void remove_stale(const std::string& dir, const ShardKey& key, int64_t keep) {
  const std::string run = "shard-" + key.save_tag() + "-", mine = prefix(key);
  const std::string partial = rank_suffix(key) + ".partial-";
  for (const std::string& name : checkpoint::directory_entries(dir)) {
    if (name.compare(0, run.size(), run) != 0) continue;  // not this run's
    bool stale = false;
    if (name.compare(0, mine.size(), mine) != 0) {
      stale = true;  // another layout's: the run has gone on without it
    } else if (name.find(partial) != std::string::npos) {
      stale = true;  // a write of this rank cut off (one run per --save: not in progress)
    } else {
      const int64_t step = step_of(name, key);
      stale = step >= 0 && step != keep;
    }
    if (stale) unlink((dir + "/" + name).c_str());  // ENOENT: another rank of the node's
  }
}

std::string check_node_local(MPI_Comm world, const std::string& dir, const ShardKey& key,
                             std::string host) {
  if (const char* fake = std::getenv("MPIFORMER_TEST_HOST"); fake && *fake) host = fake;
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  // Every rank's host, in fixed-size slots.
  constexpr int kSlot = 256;
  std::vector<char> hosts(size_t(size) * kSlot, '\0');
  char mine[kSlot] = {};
  std::snprintf(mine, sizeof mine, "%s", host.c_str());
  MPF_MPI_CHECK(MPI_Allgather(mine, kSlot, MPI_CHAR, hosts.data(), kSlot, MPI_CHAR, world));
  auto host_of = [&](int r) { return std::string(&hosts[size_t(r) * kSlot]); };
  // Named by this start of the run (rank 0's pid): another run's, or an earlier start's, are not
  // looked at.
  const std::string start = broadcast(std::to_string(getpid()), 0, world);
  auto marker = [&](int r) {
    char name[64];
    std::snprintf(name, sizeof name, "-rank_%05d", r);
    return dir + "/.node-" + key.save_tag() + "-" + start + name;
  };
  const int fd = open(marker(rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
  MPF_MPI_CHECK(MPI_Barrier(world));
  std::string shared;
  for (int k = 1; k < size; ++k) {
    const int other = (rank + k) % size;
    if (host_of(other) == host) continue;
    struct stat st;
    if (stat(marker(other).c_str(), &st) == 0) {
      shared = "--save-local " + dir + " is one directory on host " + host + " and host " +
               host_of(other) + " (rank " + std::to_string(other) +
               "'s marker file is there): it is not node-local storage; pass a directory on "
               "each node's own disk (e.g. /tmp/$USER/run1), or drop --save-local (--save "
               "already writes to storage every node reads)";
    }
    // One rank on another host: where every node mounts the same file system (as shared ones
    // are), its marker is there.
    break;
  }
  MPF_MPI_CHECK(MPI_Barrier(world));
  unlink(marker(rank).c_str());
  return first_error(world, shared);
}

int64_t choose_local_set(MPI_Comm world, const std::string& dir, const ShardKey& key,
                         int64_t global_step, const std::string& global, CheckpointInfo& info,
                         std::string& line) {
  line.clear();
  std::vector<int64_t> steps;
  for (const int64_t s : list_steps(dir, key)) {
    if (s > global_step) steps.push_back(s);
  }
  // This rank's newest intact shard newer than the global checkpoint, and why newer ones are not.
  int64_t newest = -1;
  std::string damaged;  // the newest shard's fault, if it has one
  for (auto it = steps.rbegin(); it != steps.rend() && newest < 0; ++it) {
    const std::string why = check_shard(dir, key, *it, info);
    if (why.empty()) {
      newest = *it;
    } else if (damaged.empty()) {
      damaged = "rank " + std::to_string(key.rank) + "'s shard of step " + std::to_string(*it) +
                " (" + shard_path(dir, key, *it) + ") " + why;
    }
  }
  // Over the ranks: the newest step any holds, the lowest newest intact one, another layout.
  int64_t agreed[3] = {steps.empty() ? -1 : steps.back(), -newest, other_layouts(dir, key) ? 1 : 0};
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, agreed, 3, MPI_INT64_T, MPI_MAX, world));
  const int64_t any = agreed[0], set = -agreed[1];
  const std::string resume = "; every rank resumes from the global checkpoint " + global;
  if (any < 0) {  // nothing newer than the global checkpoint on any rank
    if (agreed[2] != 0) {
      line = "--save-local " + dir +
             " holds local shards of this run written by another layout (world size, "
             "parallelism or model): they are never used to reshard, so they are not used" +
             resume;
    }
    return -1;
  }
  std::string problem;
  if (set > global_step) {
    // Every rank's newest intact shard is at least `set`: each must hold that one intact too.
    if (newest != set) {
      const std::string why = check_shard(dir, key, set, info);
      if (!why.empty()) {
        problem = "rank " + std::to_string(key.rank) + "'s shard of step " + std::to_string(set) +
                  " (" + shard_path(dir, key, set) + ") " + why;
      }
    }
  } else if (newest < 0) {
    problem = !damaged.empty() ? damaged
                               : "rank " + std::to_string(key.rank) +
                                     " has no shard newer than "
                                     "step " +
                                     std::to_string(global_step) + " in " + dir + " (missing)";
  }
  const std::string first = first_error(world, problem);
  if (!first.empty()) {
    line = "the local shards in " + dir + " are not used: " + first + resume;
    return -1;
  }
  return set;
}

}  // namespace mpf::local_tier
