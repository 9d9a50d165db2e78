/* Internal hooks of the MPI module, for its tests. */
#ifndef OT_MPI_INTERNAL_H
#define OT_MPI_INTERNAL_H

#include "optitpu/mpi.h"

#include <mpi.h>

/* The job's communicator (a dup of MPI_COMM_WORLD with MPI_ERRORS_RETURN). */
MPI_Comm ot_mpi_world_comm(const ot_mpi *m);
/* The ot_status an MPI return code becomes (OT_OK for MPI_SUCCESS). */
ot_status ot_mpi_status(int rc, const char *what);

#endif
