// Stand-in (bench/build_calibration.py): everything HipKittens uses from it is in <hip/hip_runtime.h>.
#pragma once
#include <hip/hip_runtime.h>
