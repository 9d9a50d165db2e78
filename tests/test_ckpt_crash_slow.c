/* The full crash-consistency run: 200 SIGKILLs (label "slow"; see test_ckpt_crash.c). */
#define CRASH_KILLS 200
#include "test_ckpt_crash.c"
