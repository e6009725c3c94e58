#pragma once
// TensorBoard event files without libprotobuf (reference.md §1.7, docs/metrics.md): TFRecord framing
// (u64 length | masked CRC32C of the length | data | masked CRC32C of the data, little-endian) around
// `Event` protobufs that we encode and decode ourselves -- only the fields scalars need:
// Event{wall_time=1 double, step=2 int64, file_version=3 string, summary=5 Summary},
// Summary{value=1 repeated Value{tag=1 string, simple_value=2 float}}.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace primus::tb {

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view data);
// TFRecord's masking: rotate right by 15 and add 0xA282EAD8.
uint32_t masked_crc32c(std::string_view data);

// Event.wall_time of a record written now.
double unix_seconds_now();

// One decoded Event (the fields above; anything else in a record is skipped).
struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                           // set on the first record only
  std::vector<std::pair<std::string, float>> values;  // Summary.value: (tag, simple_value)
};

// The protobuf bytes of an Event: the file header (file_version) or one step's scalars.
std::string encode_file_version_event(double wall_time, const std::string& version = "brain.Event:2");
std::string encode_scalar_event(double wall_time, int64_t step,
                                const std::vector<std::pair<std::string, float>>& values);
// Throws primus::Error naming `where` on malformed protobuf.
Event decode_event(std::string_view bytes, const std::string& where);

// One TFRecord around `data` (length, its CRC, data, its CRC).
std::string frame_record(std::string_view data);

struct EventFile {
  std::vector<Event> events;
  bool torn_tail = false;  // the last record was cut short (a killed writer); it is left out
};
// Reads every record of an event file and checks both CRCs. A record cut short at the end of the file is
// left out (torn_tail); a CRC mismatch or malformed data anywhere is an Error naming the file and offset.
EventFile read_event_file(const std::string& path);

// events.out.tfevents.<unix seconds>.<hostname>.<pid>: TensorBoard reads every file of this pattern in a
// directory; the pid keeps a resumed run started within the same second from reusing the name.
std::string event_file_name(int64_t unix_seconds, const std::string& hostname, long pid);

// Appends records to a new event file, each batch with a single write() so that a killed process leaves
// whole records plus at most one torn one at the end (which TensorBoard and read_event_file skip).
class EventFileWriter {
 public:
  // Creates `dir` (and parents) and a new event file in it; writes the file_version record.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Queues one Event record (encoded protobuf bytes); it reaches the file at the next flush().
  void add(std::string_view event_bytes);
  size_t pending() const { return pending_records_; }
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string pending_;
  size_t pending_records_ = 0;
};

}  // namespace primus::tb
