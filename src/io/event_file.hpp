// TensorBoard's event files, written without TensorFlow: a record per event in TFRecord framing
// (little-endian uint64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of the
// bytes) holding an Event protobuf (tensorflow/core/util/event.proto): wall_time (1, double),
// step (2, int64), and one of file_version (3, "brain.Event:2"), summary (5: Summary.value (1),
// each Value's tag (1) and simple_value (2, float)) or session_log (6: status (1) START = 1). A
// SessionLog START at step s tells TensorBoard to drop what earlier files logged from step s on:
// a resumed run's steps replace those its crashed predecessor logged past the checkpoint.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mpf {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord checks its records.
uint32_t crc32c(const void* data, size_t bytes);

class EventFile {
 public:
  // A new file in `dir` (created if missing, one level), named as TensorBoard expects:
  // events.out.tfevents.<seconds>.<host>.<pid>.mpiformer; its first event gives the version.
  // Throws InputError when it cannot be created.
  explicit EventFile(const std::string& dir);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // One event of scalars (tag, value) at `step`, flushed: TensorBoard shows it at once.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // SessionLog START at `step`: a restart; earlier files' events from `step` on are dropped.
  void restart(int64_t step);

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
};

}  // namespace mpf
