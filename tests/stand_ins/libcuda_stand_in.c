/* STAND-IN for the CUDA driver library (libcuda.so.1), built by msopt's tests only. Not the real driver.
 *
 * Implements the six driver API calls msopt's GPU inventory makes, with the CUDA driver API's
 * signatures (cuda.h): two devices, 24576 MiB and 40960 MiB, UUID bytes 0x11.. and 0x22..
 * STANDIN_CUDA_FAIL_INIT=1 makes cuInit fail as on a machine whose driver finds no GPU (100).
 * Like the real driver, cuInit connects to an MPS control daemon serving CUDA_MPS_PIPE_DIRECTORY
 * (default /tmp/nvidia-mps): when that directory holds the stand-in daemon's `control` file, the
 * process attaches as a client the way tests/bin/nvidia-cuda-mps-control expects
 * (a standin-client-<pid> file there).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct { char bytes[16]; } CUuuid;

static const size_t MEMORY[2] = {24576ull << 20, 40960ull << 20};

CUresult cuInit(unsigned int flags) {
  (void)flags;
  const char *fail = getenv("STANDIN_CUDA_FAIL_INIT");
  if (fail && strcmp(fail, "1") == 0) return 100;
  const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
  char path[4096];
  snprintf(path, sizeof path, "%s/control", pipe ? pipe : "/tmp/nvidia-mps");
  if (access(path, F_OK) == 0) {
    snprintf(path, sizeof path, "%s/standin-client-%d", pipe ? pipe : "/tmp/nvidia-mps", (int)getpid());
    FILE *client = fopen(path, "w");
    if (client) fclose(client);
  }
  return 0;
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
