#include <hip/hip_fp8.h>
