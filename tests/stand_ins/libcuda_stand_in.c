/* STAND-IN for the CUDA driver library (libcuda.so.1), built by msopt's tests only. Not the real driver.
 *
 * Implements the six driver API calls msopt's GPU inventory makes, with the CUDA driver API's
 * signatures (cuda.h): two devices, 24576 MiB and 40960 MiB, UUID bytes 0x11.. and 0x22..
 * STANDIN_CUDA_FAIL_INIT=1 makes cuInit fail as on a machine whose driver finds no GPU (100).
 */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct { char bytes[16]; } CUuuid;

static const size_t MEMORY[2] = {24576ull << 20, 40960ull << 20};

CUresult cuInit(unsigned int flags) {
  (void)flags;
  const char *fail = getenv("STANDIN_CUDA_FAIL_INIT");
  return fail && strcmp(fail, "1") == 0 ? 100 : 0;
}
CUresult cuDeviceGetCount(int *count) { *count = 2; return 0; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal < 0 || ordinal > 1) return 101;
  *device = ordinal;
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) { *bytes = MEMORY[device]; return 0; }
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
  memset(uuid->bytes, device == 0 ? 0x11 : 0x22, 16);
  return 0;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
  strncpy(name, device == 0 ? "Stand-in driver GPU 0" : "Stand-in driver GPU 1", len);
  return 0;
}
