#include "zeroshard.h"

const char *zs_dtype_name(zs_dtype dtype) {
    switch (dtype) {
    case ZS_DTYPE_FP32: return "fp32";
    case ZS_DTYPE_FP16: return "fp16";
    case ZS_DTYPE_BF16: return "bf16";
    }
    return "unknown";
}

size_t zs_dtype_size(zs_dtype dtype) {
    switch (dtype) {
    case ZS_DTYPE_FP32: return 4;
    case ZS_DTYPE_FP16: return 2;
    case ZS_DTYPE_BF16: return 2;
    }
    return 0;
}
