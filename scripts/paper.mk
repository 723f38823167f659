# Sweeps, figures, tables and the paper.  Included by the top Makefile:
#     include scripts/paper.mk
# (it uses $(BUILD) from there).  Targets:
#   make sweep EXP=exp-threshold [JOBS=2] [MODEL="data/a data/b"] [SSHLOGINFILE=nodes]
#              [RESULTS=results] [ARGS="window=128 max_windows=2"]
#   make figures   paper/figures/*.png from $(RESULTS)/exp-*/*.h5
#   make tables    paper/tables/*.md and *.tex
#   make paper     both, then paper/paper.md
# The Python scripts need Debian's python3-h5py and python3-matplotlib, hence
# /usr/bin/python3 rather than whatever `python3` is first on PATH.

PY           ?= /usr/bin/python3
RESULTS      ?= results
JOBS         ?= 1
EXP_PROG      = $(BUILD)/exp_$(subst -,_,$(patsubst exp-%,%,$(EXP)))

.PHONY: figures tables paper sweep

figures:
	$(PY) scripts/figures.py --results '$(RESULTS)' --out paper/figures

tables:
	$(PY) scripts/tables.py --results '$(RESULTS)' --out paper/tables

paper: figures tables
	$(PY) scripts/paper.py --results '$(RESULTS)' --paper paper

sweep:
	@test -n "$(EXP)" || { echo "usage: make sweep EXP=exp-<name> [JOBS=N] [MODEL=path] [SSHLOGINFILE=file] [RESULTS=dir] [ARGS='key=value ...']"; exit 2; }
	@test -f 'configs/$(EXP).conf' || { echo "make sweep: unknown experiment '$(EXP)' (experiments: $$(ls configs | sed -n 's/\.conf$$//p' | tr '\n' ' '))"; exit 2; }
	$(MAKE) $(BUILD)/ternlab $(EXP_PROG)
	bash scripts/sweep.sh $(EXP) --jobs $(JOBS) --results '$(RESULTS)' \
	  $(foreach m,$(MODEL),--model $(m)) $(if $(SSHLOGINFILE),--sshloginfile $(SSHLOGINFILE)) $(ARGS)

# Suggested (the lead's call): `make exp-<name>` = the sweep on both default
# models, then its figure and table.
# exp-%:
# 	$(MAKE) sweep EXP=$@
# 	$(MAKE) figures tables
