#include <hip/hip_fp16.h>
