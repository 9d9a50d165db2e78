/* The DLPack structures the extension exchanges (dmlc/dlpack v0.8 ABI, the "dltensor" capsule
 * every consumer of __dlpack__ accepts). Only the fields are declared: the ABI is the contract. */
#ifndef OPTITPU_PY_DLPACK_H
#define OPTITPU_PY_DLPACK_H

#include <stdint.h>

enum { kDLCPU = 1, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#endif /* OPTITPU_PY_DLPACK_H */
