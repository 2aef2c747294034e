// Default tile parameters of the 3xTF32 kernels (ladder step 8 and the batched MLP trainer), for
// a compile without -D macros; the registry's defaults (nnbench/registry.py, _TF32X3) match.
#pragma once
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 16
#endif
#ifndef WM
#define WM 32
#endif
#ifndef WN
#define WN 64
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
