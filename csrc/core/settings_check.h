// A setting's value against its bounds (settings.h), wherever the value comes
// from: a PYCOMM_* variable (pycomm/config.py asks through pycomm._C), an
// argument (pycomm.init's timeout) or the config dict a communicator is made
// from, defaults included. Checked before anything is sized from it: a value
// out of bounds is InvalidArgument (ValueError in Python) naming where it came
// from and what it may be, in the variable's unit.
#pragma once

#include <string>

#include "tuning.h"

namespace pycomm::core {

// `value`, in the setting's own unit (bytes, seconds, ...), for the row named
// `name`; `source` says where it came from (the variable, the argument, or a
// config key with its variable) and begins the error's text.
void check_setting(const std::string& name, double value, const std::string& source);

// Every setting of `c` but the choices (each is checked where it is parsed);
// an error names the config key and its variable.
void check_config(const CommConfig& c);

}  // namespace pycomm::core
