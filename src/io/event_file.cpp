#include "io/event_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.hpp"
#include "io/output_file.hpp"

namespace mpf {

uint32_t crc32c(const void* data, size_t bytes) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

namespace {

// TFRecord stores CRCs masked: rotated right by 15 bits plus a constant, so that a CRC of data
// holding CRCs stays informative.
uint32_t masked_crc(const void* data, size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

// Protocol buffer wire format, the few pieces an Event needs.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += char(v);
}
void key(std::string& out, int field, int wire_type) {
  varint(out, uint64_t(field) << 3 | wire_type);
}
void fixed(std::string& out, const void* v, size_t bytes) {  // little-endian hosts only (x86, Arm)
  out.append(static_cast<const char*>(v), bytes);
}
void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

std::string event_head(int64_t step) {
  std::string e;
  const double wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  key(e, 1, 1);  // wall_time, fixed64
  fixed(e, &wall, 8);
  key(e, 2, 0);  // step, varint
  varint(e, uint64_t(step));
  return e;
}

std::string host_name() {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

EventFile::EventFile(const std::string& dir) {
  // A file there would pass mkdir's EEXIST and then be reported as a missing directory.
  require(is_directory(dir) || !path_exists(dir),
          "--tensorboard " + dir +
              " is a file, not a directory; pass a directory for the event file (it is created "
              "if missing)");
  if (!is_directory(dir)) {
    require(::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST,
            "--tensorboard " + dir + ": cannot create the directory (" + std::strerror(errno) +
                "); create it, or pass a directory whose parent exists");
  }
  const long long now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  path_ = dir + "/events.out.tfevents." + std::to_string(now) + "." + host_name() + "." +
          std::to_string(::getpid()) + ".mpiformer";
  check_new_output(path_, "--tensorboard " + path_);
  file_ = std::fopen(path_.c_str(), "wbx");  // x: never over a file
  require(file_ != nullptr, "--tensorboard " + path_ + ": cannot create it (" +
                                std::strerror(errno) + "); check the directory's permissions");
  std::string e = event_head(0);
  bytes_field(e, 3, "brain.Event:2");
  write_event(e);
}

EventFile::~EventFile() {
  if (file_) std::fclose(file_);
}

void EventFile::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    bytes_field(v, 1, tag);
    const float f = float(value);
    key(v, 2, 5);  // simple_value, fixed32
    fixed(v, &f, 4);
    bytes_field(summary, 1, v);
  }
  std::string e = event_head(step);
  bytes_field(e, 5, summary);
  write_event(e);
}

void EventFile::restart(int64_t step) {
  std::string log;
  key(log, 1, 0);  // status: START
  varint(log, 1);
  std::string e = event_head(step);
  bytes_field(e, 6, log);
  write_event(e);
}

void EventFile::write_event(const std::string& event) {
  if (failed_) return;
  const uint64_t length = event.size();
  const uint32_t length_crc = masked_crc(&length, 8),
                 data_crc = masked_crc(event.data(), event.size());
  std::string record;
  fixed(record, &length, 8);
  fixed(record, &length_crc, 4);
  record += event;
  fixed(record, &data_crc, 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
      std::fflush(file_) == 0) {
    return;
  }
  failed_ = true;
  std::fprintf(stderr,
               "warning: --tensorboard %s: an event could not be written (%s); the file "
               "stops here, the run goes on\n",
               path_.c_str(), std::strerror(errno));
}

}  // namespace mpf
