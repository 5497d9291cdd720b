// Device: where a tensor's storage lives ({cpu} or {cuda, index}), and device_count().
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

namespace minidl {

enum class DeviceType : uint8_t { cpu = 0, cuda = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // always 0 for cpu

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::cpu ? 0 : i) {}
  // Parses "cpu", "cuda", "cuda:1"; throws on anything else.
  explicit Device(const std::string& spec);

  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

inline constexpr Device kCPU{DeviceType::cpu, 0};
inline constexpr Device kCUDA{DeviceType::cuda, 0};

inline std::ostream& operator<<(std::ostream& os, const Device& d) {
  return os << d.str();
}
inline std::string device_type_name(DeviceType t) {
  return t == DeviceType::cpu ? "CPU" : "CUDA";
}

// Number of devices of a type: 1 for cpu; for cuda the visible GPUs, 0 when the build
// has no CUDA or the machine has no driver/GPU (never throws).
int device_count(DeviceType t);
inline bool cuda_is_available() {
  return device_count(DeviceType::cuda) > 0;
}

}  // namespace minidl
