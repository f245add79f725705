# The seeds' users know `make build / run / inspect`; these are the same habits for gemmlab.
# The checkout's .venv when there is one (no need to activate it), else python3 on the PATH;
# PYTHON=/path/to/python (or in the environment) picks another.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
ARGS ?=

.PHONY: install run inspect ceiling test test-gpu ui sgemm-ladder transpose-ladder report seed-tables

install:            ## editable install with the CUDA compiler and the test tools
	$(PYTHON) -m pip install -e ".[cuda,test]"

run:                ## one run; e.g. make run ARGS="backend=cuda kernel=matmul_9 size=4096"
	$(PYTHON) -m runner $(ARGS)

inspect:            ## PTX, SASS, registers, instruction mix; e.g. ARGS="backend=cuda kernel=matmul_9" or ARGS="--ladder sgemm backend=cuda"
	$(PYTHON) -m runner.inspect $(ARGS)

ceiling:            ## the GPU's FFMA and TF32 mma.sync rates (CUDA); e.g. ARGS="--device 1"
	$(PYTHON) -m runner.ceiling $(ARGS)

test:               ## the CPU test suite (what CI runs); GPU tests skip without a GPU
	$(PYTHON) -m pytest -q -n auto

test-gpu:           ## only the GPU-marked tests (on a machine with an NVIDIA GPU)
	$(PYTHON) -m pytest -q -m gpu

ui:                 ## the MLflow UI on ./mlflow.db at http://127.0.0.1:5000, the latest sweep's URL printed; e.g. ARGS="--uri sqlite:///other.db --port 5001"
	$(PYTHON) -m runner.ui $(ARGS)

sgemm-ladder:       ## the whole SGEMM ladder over 1024..8192; e.g. ARGS="backend=cuda"
	$(PYTHON) -m runner -m +experiment=sgemm_ladder $(ARGS)

transpose-ladder:   ## the copy/transpose ladder over 1024..16384
	$(PYTHON) -m runner -m +experiment=transpose_ladder $(ARGS)

report:             ## results pages (the latest sweep by default) in ./gemmlab-pages; e.g. ARGS="--experiment sgemm_ladder"
	$(PYTHON) -m runner.report $(ARGS)

PAGE_ARGS ?=        # to the pages, e.g. PAGE_ARGS="--uri sqlite:///other.db"
SEED_TABLES ?= cuda_learning_transpose cuda_learning_matmul prefetch_tiling mygemm_progression

seed-tables:        ## measure the seeds' tables, write docs/seeds/; e.g. ARGS="backend=cuda"
	for table in $(SEED_TABLES); do \
	  $(PYTHON) -m runner -m +experiment=seed_$$table $(ARGS) || exit 1; \
	done
	for table in $(SEED_TABLES); do \
	  $(PYTHON) -m runner.seed_tables $$table --out docs/seeds $(PAGE_ARGS) || exit 1; \
	done
