// The tutorial's host code builds its settings header and its kernels.cl as one text; this
// file does the same, so both stay byte for byte the tutorial's.
#include "tutorial_settings.h"
#include "tutorial_kernels.cl"
