/* optitpu umbrella header: includes every public module. */
#ifndef OPTITPU_OPTITPU_H
#define OPTITPU_OPTITPU_H

#include "optitpu/core.h"
#include "optitpu/bench.h"
#include "optitpu/clock.h"
#include "optitpu/ir.h"
#include "optitpu/exec.h"
#include "optitpu/pod.h"
#include "optitpu/collectives.h"
#include "optitpu/safetensors.h"
#include "optitpu/ft.h"
#include "optitpu/mpi.h"
#include "optitpu/compiler.h"
#include "optitpu/runtime.h"
#include "optitpu/optim.h"
#include "optitpu/tpu_optim.h"
#include "optitpu/autodiff.h"
#include "optitpu/train.h"
#include "optitpu/sim.h"

#endif /* OPTITPU_OPTITPU_H */
