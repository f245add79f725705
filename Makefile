# The seeds' users know `make build / run / inspect`; these are the same habits for gemmlab.
# The checkout's .venv when there is one (no need to activate it), else python3 on the PATH;
# PYTHON=/path/to/python (or in the environment) picks another.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
ARGS ?=

.PHONY: help install run inspect ceiling test test-gpu ui sgemm-ladder transpose-ladder report seed-tables
.DEFAULT_GOAL := help

help:               ## this list (what `make` alone prints)
	@echo "make TARGET [ARGS=\"…\"]   (Python: $(PYTHON); PYTHON=/path/to/python picks another)"
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z][a-z-]*:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install:            ## editable install with the CUDA compiler and the test tools
	$(PYTHON) -m pip install -e ".[cuda,test]"

run:                ## one run; e.g. make run ARGS="backend=cuda kernel=matmul_9 size=4096"
	$(PYTHON) -m runner $(ARGS)

inspect:            ## PTX, SASS, registers, instruction mix; e.g. ARGS="backend=cuda kernel=matmul_9" or ARGS="--ladder sgemm backend=cuda"
	$(PYTHON) -m runner.inspect $(ARGS)

ceiling:            ## the GPU's FFMA and TF32 mma.sync rates (CUDA); e.g. ARGS="--device 1"
	$(PYTHON) -m runner.ceiling $(ARGS)

test:               ## the tests as CI runs them: the CPU tests in parallel, then the GPU tests in one process (they skip without a GPU)
	$(PYTHON) -m pytest -q -n auto -m "not gpu"
	$(PYTHON) -m pytest -q -m gpu

test-gpu:           ## only the GPU-marked tests; fails at once on a machine without an NVIDIA GPU
	@$(PYTHON) -c "$$NO_GPU_CHECK"
	$(PYTHON) -m pytest -q -m gpu

ui:                 ## the MLflow UI on ./mlflow.db at http://127.0.0.1:5000: the recent sweeps listed, the newest opened; e.g. ARGS="--sweep <id or name> --uri sqlite:///other.db --port 5001"
	$(PYTHON) -m runner.ui $(ARGS)

sgemm-ladder:       ## the whole SGEMM ladder over 1024..8192; e.g. ARGS="backend=cuda"
	$(PYTHON) -m runner -m +experiment=sgemm_ladder $(ARGS)

transpose-ladder:   ## the copy/transpose ladder over 1024..16384
	$(PYTHON) -m runner -m +experiment=transpose_ladder $(ARGS)

report:             ## results pages (the latest sweep by default) in ./gemmlab-pages; e.g. ARGS="--experiment sgemm_ladder"
	$(PYTHON) -m runner.report $(ARGS)

# Without a GPU every GPU test would skip and pytest would exit 0: say so and fail instead.
# A GPU is one CuPy sees or NVIDIA's OpenCL platform (tests/conftest.py's two GPU markers).
define NO_GPU_CHECK
import sys
from runner.backends.cuda import gpu_count
try:
    import pyopencl
    nvidia_opencl = any("nvidia" in p.name.lower() for p in pyopencl.get_platforms())
except Exception:
    nvidia_opencl = False
if not gpu_count() and not nvidia_opencl:
    sys.exit("make test-gpu: no NVIDIA GPU here (CuPy sees none and there is no NVIDIA OpenCL "
             "platform), so every GPU test would skip; make test runs the CPU suite")
endef
export NO_GPU_CHECK

PAGE_ARGS ?=        # to the pages, e.g. PAGE_ARGS="--uri sqlite:///other.db"
SEED_TABLES ?= cuda_learning_transpose cuda_learning_matmul prefetch_tiling mygemm_progression

seed-tables:        ## measure the seeds' tables, write docs/seeds/; e.g. ARGS="backend=cuda"
	for table in $(SEED_TABLES); do \
	  $(PYTHON) -m runner -m +experiment=seed_$$table $(ARGS) || exit 1; \
	done
	for table in $(SEED_TABLES); do \
	  $(PYTHON) -m runner.seed_tables $$table --out docs/seeds $(PAGE_ARGS) || exit 1; \
	done
