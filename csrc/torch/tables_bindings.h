// The settings table (csrc/core/settings.h) and the routing table
// (csrc/core/routing.h) as pycomm._C's module-level names, for the Python that
// reads the rules the backend runs instead of restating them: pycomm.config,
// pycomm.routing, `pycomm doctor` and the scaling model.
#pragma once

#include <pybind11/pybind11.h>

#include "../core/tuning.h"

namespace pycomm {

// COLLECTIVES, PLANS, ALGORITHMS, REDUCE_OPS, ALL_REDUCE_ALGORITHMS (tuples of
// names, in the tables' order), settings(), default_config(world, cores) and
// route(collective, **query).
void bind_tables(pybind11::module_& m);

// A communicator's settings as the dict Python holds (config.communicator_config)
// and back. The dict must name every setting of the table, and only those: the
// defaults come from Python, which knows the cores this process may use.
pybind11::dict config_dict(const core::CommConfig& c);
core::CommConfig config_from(const pybind11::dict& d);

}  // namespace pycomm
